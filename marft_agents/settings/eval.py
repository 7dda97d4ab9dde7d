"""The ``eval:`` section: evaluation on a fixed problem set. Plain data."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class EvalConfig:
    """Evaluation on a fixed problem set (``reset(options={"task_index": i})``)."""

    interval: int = 0
    """Evaluate every this many updates; 0 = never during training."""
    at_end: bool = True
    """Evaluate after the last update."""
    n_problems: int = 100
    """Problems in the fixed set (capped at the task source's size)."""
    greedy: bool = True
    """Greedy decoding (else sampling with the training ``sampling`` settings)."""
    samples_per_problem: int = 1
    """Plays of each problem (k). k > 1 needs ``greedy: false`` and adds avg@k (mean success over
    the samples) and pass@k (share of problems some sample solved) with their standard errors
    (``marft_agents/evaluation/problem_set.py``)."""
    seed: int = 1234
    """Chooses the fixed problem set; the same seed gives the same problems."""
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    """Overrides of ``env.kwargs`` for evaluation (e.g. ``{split: test}``)."""
    num_envs: int = 8
    """Env instances advanced in lock-step during evaluation."""
    keep_best: bool = True
    """After each evaluation during training that beats every earlier one, save the adapters to
    ``<output_dir>/best/`` (``marft eval --checkpoint best``). The evaluation problems choose it:
    when they are the test split, the best accuracy is selected on test, so report the final one."""
