"""Single-agent PPO: the MARFT-A / MARFT-T learners restricted to envs with exactly one agent
(e.g. ``env.kwargs.profile: solo``), registered as ``ppo`` and ``ppo_token``."""

from __future__ import annotations

from marft_agents.learners.mappo_action import ActionLevelMAPPO
from marft_agents.learners.mappo_token import TokenLevelMAPPO
from marft_agents.learners.registry import declared_by


@declared_by("ppo")  # max_agents 1: learners/registry.py
class SingleAgentPPO(ActionLevelMAPPO):
    """Action-level PPO on a one-role profile."""


@declared_by("ppo_token")  # max_agents 1: learners/registry.py
class SingleAgentTokenPPO(TokenLevelMAPPO):
    """Token-level PPO on a one-role profile."""
