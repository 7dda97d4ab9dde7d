"""Learners: MARFT-A (action-level MAPPO), MARFT-T (token-level MAPPO), single-agent PPO (the
n = 1 case of either), the evaluation-only baseline, GRPO with its multi-agent groupings, and any
learner registered by name.

``make_learner(name, policy, cfg, agent_ids)`` builds the learner registered as ``name``
(``learners/registry.py``); the interface every learner implements is
``learners/protocol.py`` (guide: ``marft_agents/ADDING_A_LEARNER.md``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from marft_agents.learners.base import BaseLearner, Sample
from marft_agents.learners.credit import assign_credit
from marft_agents.learners.eval_only import EvalOnly
from marft_agents.learners.grpo import GRPO
from marft_agents.learners.mappo_action import ActionLevelMAPPO
from marft_agents.learners.mappo_token import TokenLevelMAPPO
from marft_agents.learners.protocol import VALUE_MODES, Learner, check_learner_instance
from marft_agents.learners.registry import (
    BUILTIN_LEARNERS,
    ENTRY_POINT_GROUP,
    UnknownLearnerError,
    get_learner,
    list_learners,
    register_learner,
)
from marft_agents.learners.single_agent import SingleAgentPPO, SingleAgentTokenPPO


def make_learner(name: str, policy: Any, cfg: Any, agent_ids: Sequence[str]) -> Any:
    """Build the learner registered as ``name`` for ``agent_ids`` (checks its ``max_agents``, and
    that the learner built has every member of :class:`Learner`, ``group_size`` included)."""
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


__all__ = ["ActionLevelMAPPO", "BUILTIN_LEARNERS", "BaseLearner", "ENTRY_POINT_GROUP",
           "EvalOnly", "GRPO", "Learner", "Sample", "SingleAgentPPO", "SingleAgentTokenPPO", "TokenLevelMAPPO",
           "UnknownLearnerError", "VALUE_MODES", "assign_credit", "get_learner", "list_learners",
           "make_learner", "register_learner"]
