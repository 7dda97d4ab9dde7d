"""Learners: MARFT-A (action-level MAPPO), MARFT-T (token-level MAPPO), single-agent PPO (the
n = 1 case of either), the evaluation-only baseline, GRPO with its multi-agent groupings, and any
learner registered by name.

``make_learner(name, policy, cfg, agent_ids)`` builds the learner registered as ``name``
(``learners/registry.py``); the interface every learner implements is
``learners/interface.py`` (guide: ``marft_agents/ADDING_A_LEARNER.md``).

Importing this package imports no learner: the names below load their modules on first use, so
that the registry (which a config's validation reads) stays free of torch.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import Any

from marft_agents.run_plan import RunConfig

_LAZY = {
    "ActionLevelMAPPO": "marft_agents.learners.mappo_action",
    "BUILTIN_LEARNERS": "marft_agents.learners.registry",
    "BaseLearner": "marft_agents.learners.base",
    "Capabilities": "marft_agents.learners.registry",
    "ENTRY_POINT_GROUP": "marft_agents.learners.registry",
    "EvalOnly": "marft_agents.learners.eval_only",
    "GRPO": "marft_agents.learners.grpo",
    "Learner": "marft_agents.learners.interface",
    "LearnerSpec": "marft_agents.learners.registry",
    "Sample": "marft_agents.learners.base",
    "SingleAgentPPO": "marft_agents.learners.single_agent",
    "SingleAgentTokenPPO": "marft_agents.learners.single_agent",
    "TokenLevelMAPPO": "marft_agents.learners.mappo_token",
    "UnknownLearnerError": "marft_agents.learners.registry",
    "VALUE_MODES": "marft_agents.learners.interface",
    "assign_credit": "marft_agents.learners.credit",
    "get_learner": "marft_agents.learners.registry",
    "learner_capabilities": "marft_agents.learners.registry",
    "list_learners": "marft_agents.learners.registry",
    "register_learner": "marft_agents.learners.registry",
}


def make_learner(name: str, policy: Any, cfg: RunConfig, agent_ids: Sequence[str]) -> Any:
    """Build the learner registered as ``name`` for ``agent_ids`` (checks its ``max_agents``, and
    that the learner built has every member of :class:`Learner`, ``group_size`` included)."""
    from marft_agents.learners.interface import check_learner_instance
    from marft_agents.learners.registry import get_learner

    cls = get_learner(name)
    limit = getattr(cls, "max_agents", None)
    if limit is not None and len(agent_ids) > limit:
        kind = "single-agent PPO" if limit == 1 else f"a learner for at most {limit} agents"
        raise ValueError(
            f"algorithm {name!r} is {kind} but the env has {len(agent_ids)} agents "
            f"{list(agent_ids)}; use a profile with fewer roles (e.g. env kwargs profile: solo) or a "
            "multi-agent learner such as 'mappo_action' / 'mappo_token'"
        )
    learner = cls(policy, cfg, agent_ids)
    check_learner_instance(name, learner)
    return learner


__all__ = sorted([*_LAZY, "make_learner"])


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value  # looked up once
        return value
    raise AttributeError(f"module 'marft_agents.learners' has no attribute {name!r}")


def __dir__() -> list[str]:
    return __all__
