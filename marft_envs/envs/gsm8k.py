r"""``marft/GSM8K-v0``: grade-school maths word problems (Cobbe et al. 2021), final answer graded.

Agents
    The profile's roles (default ``dual``: ``reasoner_0`` -> ``actor_0``); turn order and
    visibility follow the dependency D_t.

Observations
    ``{"text": str}``: the question, earlier rounds' graded answers with feedback, and this
    round's parents' outputs. The role's system prompt is in ``infos[agent]["system_prompt"]``.

Actions
    ``str`` utterances (non-``str`` raises ``TypeError``; over-long ones are truncated).

Rewards
    1.0 to every agent when the graded agent's final answer (last ``\boxed{}``, else ``#### n``,
    else "the answer is", else the last number) equals the reference integer (``1,000`` and
    ``1000.0`` count as ``1000``), else 0.0 plus feedback and another round, up to ``horizon``
    (default 3). Per-agent format reward and grading details in ``infos``.

Keyword arguments
    ``split`` ("train" | "test"; the shared data ships train only), ``limit``, ``data_dir`` /
    ``path`` / ``dataset_id`` / ``dataset_config`` (e.g. ``dataset_id="openai/gsm8k",
    dataset_config="main", split="test"``), ``grading_timeout_s``, ``grading_mode``, plus every
    :class:`TextTaskEnv` keyword.

Version history
    v0: first release.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from marft_envs.envs.answer_env import FinalAnswerEnv
from marft_envs.tasks.math_data import GSM8KTasks


class GSM8KEnv(FinalAnswerEnv):
    """GSM8K problems; see the module docstring."""

    metadata = {"name": "marft_gsm8k_v0", "render_modes": ["ansi", "human"], "is_parallelizable": True}

    def __init__(
        self,
        split: str = "train",
        limit: int | None = None,
        data_dir: str | Path | None = None,
        path: str | Path | None = None,
        dataset_id: str | None = None,
        dataset_config: str | None = None,
        **kwargs: Any,
    ):
        tasks = GSM8KTasks(
            split=split, limit=limit, data_dir=data_dir, path=path,
            dataset_id=dataset_id, dataset_config=dataset_config,
        )
        super().__init__(tasks, **kwargs)
