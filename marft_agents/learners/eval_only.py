"""The evaluation-only baseline: collects rollouts and reports them, never trains.

It is the "no fine-tuning" row of a comparison: the same envs, prompts and sampling as a training
run, so its rollout rewards are the base model's. It builds no optimizers and records no values.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from marft_agents.episodes import Rollout
from marft_agents.learners.registry import EVAL_ONLY, declared_by
from marft_agents.run_plan import RunConfig


@declared_by(EVAL_ONLY)
class EvalOnly:
    """A learner whose update does nothing (same interface as :class:`BaseLearner`)."""

    # Declared by its registry spec (learners/registry.py): no critic, no options, trains False
    # (nothing trains: the config's training-only checks and the training warnings do not apply).
    group_size: int = 1
    data_parallel: Any = None
    """Set under torch.distributed; unused: nothing to synchronise in an update that trains nothing."""

    def __init__(self, policy: Any, cfg: RunConfig, agent_ids: Sequence[str]):
        self.policy, self.cfg, self.agent_ids = policy, cfg, list(agent_ids)

    def trainable_agents(self, update: int) -> list[str]:
        return []

    def update(self, rollout: Rollout, update: int) -> dict[str, float]:
        nan = float("nan")
        metrics = {key: nan for key in ("losses/policy_loss", "losses/value_loss", "losses/entropy",
                                        "losses/approx_kl", "losses/clipfrac", "losses/explained_variance")}
        metrics["ppo/policy_trained"] = 0.0
        return metrics

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass
