"""The ``advantage:`` section (the MAPPO learners' baseline) and how grouped sampling is chosen.

Plain data; the estimators are :mod:`marft_agents.learners.baselines` (maths) and the MAPPO
learners (``learners/mappo_action.py``, ``learners/mappo_token.py``) that use them.
"""

from __future__ import annotations

import logging
import typing
from dataclasses import dataclass
from typing import Literal

log = logging.getLogger(__name__)

Baseline = Literal["critic", "group", "group_critic"]
"""What a MAPPO advantage subtracts from a decision's return (``advantage.baseline``)."""
BASELINES: tuple[str, ...] = typing.get_args(Baseline)
"""The baselines, in declaration order."""
GROUP_BASELINES: tuple[str, ...] = ("group", "group_critic")
"""Baselines built from the other episodes of a task group: they need ``schedule.group_size`` >= 2."""

AUTO_GROUP_SIZE = 4
"""``schedule.group_size: null`` gives a value learner this many episodes per task when
``episodes_per_update`` is a multiple of it and at least twice it (:func:`resolve_group_size`)."""


@dataclass
class AdvantageConfig:
    """The baseline of the MAPPO learners' advantages (``mappo_action``, ``mappo_token`` and their
    single-agent forms); GRPO forms its own group advantages (``learner.grouping``)."""

    baseline: Baseline = "critic"
    """``critic``: GAE over the decisions with the critic's values (MAPPO as published).
    ``group``: each decision's Monte Carlo return minus the leave-one-out (LOO) mean of the
    returns at the same decision position in the other episodes of its task group; no critic is
    trained and no value is computed (MAPPO's per-agent clipped update at a critic-free cost).
    ``group_critic``: the LOO mean as the anchor, plus the critic's value of this decision's state
    minus the LOO mean of the critic's values at the same position: the first decision (all
    episodes of a group share its state) is the LOO anchor exactly, and the critic, trained on the
    return's residual over the anchor, values only what the group mean cannot see (a teammate's
    message, a feedback round). The group baselines use ``schedule.group_size`` episodes per task
    (>= 2) and ignore ``ppo.lam`` (Monte Carlo returns). The estimators and their reasoning:
    :mod:`marft_agents.learners.baselines`."""

    def __post_init__(self) -> None:
        if self.baseline not in BASELINES:
            raise ValueError(f"advantage.baseline must be one of {', '.join(BASELINES)}, got {self.baseline!r}")

    @property
    def uses_critic(self) -> bool:
        """Whether the critic is valued and trained (False for ``group``)."""
        return self.baseline != "group"


def resolve_group_size(group_size: int | None, episodes_per_update: int, *, uses_groups: bool,
                       deprecated: int | None = None) -> int:
    """Episodes per task group the collector plays for a PPO learner (``schedule.group_size``).

    ``group_size``: the setting (None: automatic). ``deprecated``: the retired
    ``critic.ceiling_group_size``, honoured when ``group_size`` is None. ``uses_groups``: whether
    the learner's estimator or its critic diagnostics read groups (a value learner, or a group
    baseline). Automatic: :data:`AUTO_GROUP_SIZE` when ``episodes_per_update`` is a multiple of it
    and at least twice it, else 1; 1 for a learner that reads no groups. Raises ``ValueError``
    (one line) on a size that is not a divisor >= 1 of ``episodes_per_update``."""
    if group_size is not None and deprecated is not None and group_size != deprecated:
        raise ValueError(f"schedule.group_size ({group_size}) and the deprecated critic.ceiling_group_size "
                         f"({deprecated}) disagree; remove critic.ceiling_group_size")
    k = group_size if group_size is not None else deprecated
    if k is None:
        if not uses_groups:
            return 1
        if episodes_per_update % AUTO_GROUP_SIZE == 0 and episodes_per_update >= 2 * AUTO_GROUP_SIZE:
            return AUTO_GROUP_SIZE
        log.info("grouped sampling off: schedule.episodes_per_update (%d) is not a multiple of %d that is >= %d; "
                 "set schedule.group_size to a divisor > 1 of it for the critic's ceiling and baseline gain",
                 episodes_per_update, AUTO_GROUP_SIZE, 2 * AUTO_GROUP_SIZE)
        return 1
    if not isinstance(k, int) or k < 1 or episodes_per_update % k:
        raise ValueError(f"schedule.group_size must be a divisor >= 1 of schedule.episodes_per_update "
                         f"({episodes_per_update}), got {k!r}")
    return k
