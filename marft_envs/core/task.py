"""Tasks, task sources and round outcomes: the data that flows between a task and its env.

A *task* is one problem (a math question, a coding exercise, a shopping goal). A *task source*
is an indexable collection of tasks (a dataset on disk, or a procedural generator whose item
``i`` is a pure function of ``(seed, i)``). The env picks indices with its own seeded RNG, so
the same seed gives the same problems in the same order on every platform.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable


@dataclass(frozen=True)
class Task:
    """One problem instance."""

    task_id: str
    """Stable identifier (dataset id, or ``<generator>/<index>``), used in logs and leaderboards."""
    prompt: str
    """The problem statement every agent sees at the top of its observation."""
    answer: Any = None
    """Reference used by the grader (a final answer string, test cases, a goal ...)."""
    metadata: Mapping[str, Any] = field(default_factory=dict)
    """Free-form extras (level, subject, source) reported in ``infos``; never shown to agents."""


@runtime_checkable
class TaskSource(Protocol):
    """An indexable, deterministic collection of tasks."""

    def __len__(self) -> int:
        """Number of distinct tasks (a generator may report a large number)."""
        ...

    def __getitem__(self, index: int) -> Task:
        """Task number ``index``; the same index always gives the same task."""
        ...


@dataclass
class RoundOutcome:
    """What grading one round produced."""

    team_reward: float
    """Reward given to every agent at the end of the round (the Flex-POMDP team reward)."""
    solved: bool
    """True ends the episode (terminated); otherwise another round runs until the horizon."""
    feedback: str = ""
    """Text shown to the agents in the next round's observation (empty: no feedback)."""
    agent_rewards: dict[str, float] = field(default_factory=dict)
    """Optional per-agent rewards (e.g. format rewards), reported in ``infos`` only, so a
    learner can choose its own credit assignment without changing the env."""
    info: dict[str, Any] = field(default_factory=dict)
    """Grading details (extracted answer, tests passed, ...), copied into every agent's info."""
