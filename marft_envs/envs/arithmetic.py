r"""``marft/Arithmetic-v0``: procedurally generated arithmetic, eight difficulty levels.

Needs no data files: problems come from :class:`marft_envs.tasks.arithmetic.ArithmeticTasks`
(level 1 "Compute 7 + 12." up to level 7 short word problems, and level 8 mixing easy and hard
sums; see that module for every level with an example). Train and test splits hold disjoint problems.

Agents
    The profile's roles (default ``dual``: ``reasoner_0`` -> ``actor_0``); turn order and
    visibility follow the dependency D_t.

Observations
    ``{"text": str}``: the problem, earlier rounds' graded answers with feedback, and this round's
    parents' outputs. The role's system prompt is in ``infos[agent]["system_prompt"]``.

Actions
    ``str`` utterances (non-``str`` raises ``TypeError``; over-long ones are truncated).

Rewards
    1.0 to every agent when the graded agent's final answer (last ``\boxed{}``, else "the answer
    is", else the last number) equals the exact reference (an integer, or a reduced fraction at
    level 6: ``4/3``, ``\frac{4}{3}`` and ``8/6`` all count), else 0.0 plus feedback and another
    round, up to ``horizon`` (default 3). Per-agent format reward and grading details in ``infos``.

Keyword arguments
    ``level`` (1-8 or a level name; default 1), ``split`` ("train" | "test"; default "train"),
    ``task_seed`` (selects the problem generator's sequence; the env's ``reset(seed=...)`` picks
    which items are played), ``grading_timeout_s``, ``grading_mode``, plus every
    :class:`TextTaskEnv` keyword.

Version history
    v0: first release.
"""

from __future__ import annotations

from typing import Any

from marft_envs.envs.answer_env import FinalAnswerEnv
from marft_envs.tasks.arithmetic import ArithmeticTasks


class ArithmeticEnv(FinalAnswerEnv):
    """Generated arithmetic problems; see the module docstring."""

    metadata = {"name": "marft_arithmetic_v0", "render_modes": ["ansi", "human"], "is_parallelizable": True}

    def __init__(self, level: int | str = 1, split: str = "train", task_seed: int = 0, **kwargs: Any):
        super().__init__(ArithmeticTasks(level=level, split=split, seed=task_seed), **kwargs)
