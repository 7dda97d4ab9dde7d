r"""``marft/MATH-v0``: competition mathematics (Hendrycks et al. 2021), final answer graded.

Agents
    The profile's roles (default ``dual``: ``reasoner_0`` -> ``actor_0``; any shipped or custom
    profile works, e.g. ``profile="solo"`` for single-agent PPO). Turn order and who sees whom
    follow the dependency D_t (default: the profile's, ``chain``).

Observations
    ``{"text": str}``: the MATH problem, then earlier rounds' graded answers with feedback, then
    the outputs of this agent's parents in this round (see ``marft_envs/core/template.py``). The
    role's system prompt (which asks for ``\boxed{}``) is in ``infos[agent]["system_prompt"]``.

Actions
    ``str`` utterances (non-``str`` raises ``TypeError``; over-long ones are truncated).

Rewards
    1.0 to every agent when the graded agent's final answer (last ``\boxed{}``, else "the answer
    is", else the last number) is equivalent to the reference (normalised text, exact numbers,
    then math-verify under a hard timeout), else 0.0 plus feedback and another round, up to
    ``horizon`` (default 3). Per-agent format reward and grading details in ``infos`` (see
    :mod:`marft_envs.envs.answer_env`).

Keyword arguments
    ``split`` ("train" | "test"; default "train", or "test" with a subset), ``subset``
    (None | "math500"), ``levels`` (1-5), ``subjects``, ``limit``, ``data_dir`` / ``path`` /
    ``dataset_id`` / ``dataset_config`` (see :class:`marft_envs.tasks.math_data.MathTasks`),
    ``grading_timeout_s``, ``grading_mode``, plus every :class:`TextTaskEnv` keyword.

Version history
    v0: first release.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from marft_envs.envs.answer_env import FinalAnswerEnv
from marft_envs.tasks.math_data import MathTasks


class MathEnv(FinalAnswerEnv):
    """MATH problems; see the module docstring."""

    metadata = {"name": "marft_math_v0", "render_modes": ["ansi", "human"], "is_parallelizable": True}

    def __init__(
        self,
        split: str | None = None,
        subset: str | None = None,
        levels: int | list[int] | None = None,
        subjects: str | list[str] | None = None,
        limit: int | None = None,
        data_dir: str | Path | None = None,
        path: str | Path | None = None,
        dataset_id: str | None = None,
        dataset_config: str | None = None,
        **kwargs: Any,
    ):
        if split is None:
            split = "test" if subset is not None else "train"
        tasks = MathTasks(
            split=split, subset=subset, levels=levels, subjects=subjects, limit=limit,
            data_dir=data_dir, path=path, dataset_id=dataset_id, dataset_config=dataset_config,
        )
        super().__init__(tasks, **kwargs)
