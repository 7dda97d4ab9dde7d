"""Which class runs each ``sampling.engine``: the names (``settings.sampling.SAMPLING_ENGINES``,
declared once) mapped to :mod:`marft_agents.engine.base`'s classes. A module of its own
so that the interface module does not import its implementations (``vllm_engine`` imports the
interface); the vLLM engine's module imports vLLM itself only when an engine is built.
"""

from __future__ import annotations

import functools

from marft_agents.engine.base import LoopEngine, SamplingEngine
from marft_agents.engine.vllm_engine import VLLMEngine
from marft_agents.settings.sampling import ENGINES, SAMPLING_ENGINES

__all__ = ["engine_class", "engine_classes"]


@functools.cache
def engine_classes() -> dict[str, type[SamplingEngine]]:
    """Every engine name of ``SAMPLING_ENGINES`` and its class. Which engines score elsewhere is
    declared once, in ``settings.sampling.SCORED_ELSEWHERE``: config validation reads it there and
    the classes' ``scores_in_learner`` read it too, so there is nothing to cross-check."""
    classes: dict[str, type[SamplingEngine]] = {name: LoopEngine for name in ENGINES}
    classes["vllm"] = VLLMEngine
    missing = set(SAMPLING_ENGINES) ^ set(classes)
    if missing:
        raise RuntimeError(f"engines without a class, or classes of unknown engines: {sorted(missing)}")
    return classes


def engine_class(name: str) -> type[SamplingEngine]:
    """The class of the engine ``sampling.engine`` names."""
    try:
        return engine_classes()[name]
    except KeyError:
        raise ValueError(f"unknown sampling engine {name!r}; choose one of {list(SAMPLING_ENGINES)}") from None
