"""Learners: MARFT-A (action-level MAPPO), MARFT-T (token-level MAPPO), single-agent PPO (the
n = 1 case of either) and the evaluation-only baseline. ``make_learner(name, ...)`` builds one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from marft_agents.learners.base import BaseLearner, Sample
from marft_agents.learners.credit import CREDIT_STRATEGIES, assign_credit
from marft_agents.learners.eval_only import EvalOnly
from marft_agents.learners.mappo_action import ActionLevelMAPPO
from marft_agents.learners.mappo_token import TokenLevelMAPPO

LEARNERS: dict[str, type] = {
    "mappo_action": ActionLevelMAPPO,
    "mappo_token": TokenLevelMAPPO,
    # Single-agent PPO: the same learners, restricted to envs with exactly one agent.
    "ppo": ActionLevelMAPPO,
    "ppo_token": TokenLevelMAPPO,
    "eval_only": EvalOnly,
}
SINGLE_AGENT = ("ppo", "ppo_token")


def make_learner(name: str, policy: Any, cfg: Any, agent_ids: Sequence[str]) -> Any:
    """Build the learner called ``name`` (see ``LEARNERS``) for ``agent_ids``."""
    if name not in LEARNERS:
        raise ValueError(f"unknown algorithm {name!r}; expected one of {sorted(LEARNERS)}")
    if name in SINGLE_AGENT and len(agent_ids) != 1:
        raise ValueError(
            f"algorithm {name!r} is single-agent PPO but the env has {len(agent_ids)} agents "
            f"{list(agent_ids)}; use a one-role profile (e.g. env kwargs profile: solo) or "
            "'mappo_action' / 'mappo_token'"
        )
    return LEARNERS[name](policy, cfg, agent_ids)


__all__ = ["ActionLevelMAPPO", "BaseLearner", "CREDIT_STRATEGIES", "EvalOnly", "LEARNERS", "Sample",
           "TokenLevelMAPPO", "assign_credit", "make_learner"]
