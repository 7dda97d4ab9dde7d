"""LLM-agent learners for Multi-Agent Reinforcement Fine-Tuning on ``marft_envs``.

The extension point for new algorithms is the learner registry: ``register_learner(name, cls)``
or the ``marft_agents.learners`` entry-point group (``marft_agents/ADDING_A_LEARNER.md``).
Importing this package stays cheap: the names below load their modules on first use.
"""

from __future__ import annotations

from typing import Any

_LAZY = {
    "Learner": "marft_agents.learners.interface",
    "VALUE_MODES": "marft_agents.episodes",
    "register_learner": "marft_agents.learners.registry",
    "get_learner": "marft_agents.learners.registry",
    "list_learners": "marft_agents.learners.registry",
    "Rollout": "marft_agents.episodes",
    "Decision": "marft_agents.episodes",
    "EpisodeRecord": "marft_agents.episodes",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'marft_agents' has no attribute {name!r}")
