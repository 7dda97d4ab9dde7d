"""The ``schedule:`` section: how long a run trains, in what batches, with which learning rates,
and the budgets that end it. Plain data."""

from __future__ import annotations

import typing
from dataclasses import dataclass
from typing import Any

from marft_agents.config_schema import ConfigError


@dataclass
class ScheduleConfig:
    """How long to train, in what batches, with which learning rates, and when to save."""

    num_updates: int = 100
    """PPO updates (each = one rollout + ``ppo_epochs`` passes over it)."""
    episodes_per_update: int = 16
    """Episodes collected per update."""
    group_size: int | None = None
    """Episodes per task group: each task drawn is played this many times (same task, independent
    samples), so ``episodes_per_update / group_size`` distinct tasks per update. For the MAPPO
    learners it is the k of the group baselines (``advantage.baseline: group`` / ``group_critic``,
    the leave-one-out mean of k - 1 other episodes) and of the critic's ceiling and baseline gain
    (``critic/ev_ceiling``, ``critic/baseline_gain``); under ``advantage.baseline: critic`` the
    estimator does not read groups, but its batch holds fewer distinct tasks. None: 4 for a
    learner with a critic or a group baseline when ``episodes_per_update`` is a multiple of 4 and
    >= 8, else 1 (``settings/advantage.py``). GRPO sets its own (``learner.group_size``)."""
    ppo_epochs: int = 1
    """Passes of the policy over each rollout."""
    critic_epochs: int | None = None
    """Passes of the critic over each rollout; None = ``ppo_epochs``. The critic's regression
    has no trust region to respect, so it may take more passes than the policy."""
    minibatch_size: int = 8
    """Decisions per optimizer step."""
    micro_batch_size: int | None = None
    """Decisions per forward/backward pass (gradient accumulation); None = ``minibatch_size``."""
    max_tokens_per_micro_batch: int | None = None
    """Also cap each forward/backward pass by its padded size, rows x columns as the pass lays
    them out (``BaseLearner._pass_tokens``), so that long rows (MATH solutions) fit in memory;
    None = no cap. Both caps apply; a row longer than the cap goes alone. The losses are
    normalised per minibatch, so the gradient does not depend on the split."""
    gradient_checkpointing: bool = False
    """Keep only each decoder layer's input in the forward passes of an update and recompute the
    layer in the backward (non-reentrant activation checkpointing,
    ``MultiAgentPolicy.enable_gradient_checkpointing``): less activation memory for about one more
    forward pass of compute. Each recomputation is checked to run under the adapter its forward
    ran under."""
    actor_lr: float = 5e-5
    """AdamW learning rate of every policy adapter."""
    critic_lr: float = 1e-4
    """AdamW learning rate of the critic adapter (and of the value head, unless ``value_head_lr``)."""
    value_head_lr: float | None = None
    """AdamW learning rate of the value head(s); None = ``critic_lr``. The head is one linear map
    on the last hidden state, whose task-dependent part is small next to what every state
    shares: at the adapter's learning rate its values stay nearly constant for many updates
    (correlated with the returns, but shrunk), so it may need a larger one."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    time_budget_s: int | None = None
    """Stop after the update during which the training time (rollouts + updates, evaluation
    excluded; summed across resumes) reaches this many seconds; None = off. It measures the
    machine as much as the learner (a cheaper learner gets more samples in the same seconds), so
    comparisons between learners budget samples instead (``max_episodes``)."""
    max_episodes: int | None = None
    """Stop once this many training episodes have been played (summed across resumes); None =
    off. A multiple of ``episodes_per_update``, so a run plays exactly this many: the budget axis
    of the comparison grids (``baselines/grid.py``), the same samples for every learner."""
    max_sampled_tokens: int | None = None
    """Stop after the update during which the tokens sampled in rollouts (every agent's response
    tokens, summed across resumes) reach this; None = off. Updates are whole, so a run ends less
    than one update's tokens past it (``counters/tokens`` says where)."""
    checkpoint_interval: int = 10
    """Save a checkpoint every this many updates (and after the last); 0 = only after the last."""
    keep_checkpoints: int = 3
    """How many recent checkpoints to keep."""

    BUDGETS: typing.ClassVar[tuple[tuple[str, str], ...]] = (
        ("time_budget_s", "train_seconds"), ("max_episodes", "episodes"), ("max_sampled_tokens", "tokens"))
    """The budgets that end a run before ``num_updates``: (field, the trainer counter it limits).
    The first one reached stops the run after the update that reaches it."""

    def check_budgets(self) -> None:
        """Each budget >= 1 or null; ``max_episodes`` a whole number of updates."""
        for name, _counter in self.BUDGETS:
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ConfigError(f"schedule.{name} must be >= 1 or null, got {value}")
        if self.max_episodes is not None and self.max_episodes % self.episodes_per_update:
            raise ConfigError(f"schedule.max_episodes ({self.max_episodes}) must be a multiple of "
                              f"schedule.episodes_per_update ({self.episodes_per_update}): updates are whole, "
                              "so the run would play more episodes than that")

    def budget_spent(self, counters: dict[str, Any]) -> str | None:
        """The first budget (:attr:`BUDGETS`) that a run's counters (``update``, ``episodes``,
        ``tokens``, ``train_seconds``) have reached, as ``"schedule.max_episodes = 320"``; None
        while none is."""
        for name, counter in self.BUDGETS:
            limit = getattr(self, name)
            if limit is not None and counters.get(counter, 0) >= limit:
                return f"schedule.{name} = {limit}"
        return None

    def done(self, counters: dict[str, Any]) -> bool:
        """Whether a run with these counters has finished this schedule: every update run, or a
        budget reached."""
        return counters.get("update", 0) >= self.num_updates or self.budget_spent(counters) is not None
