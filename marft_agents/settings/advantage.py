"""The ``advantage:`` section (the MAPPO learners' baseline) and how grouped sampling is chosen.

Plain data; the estimators are :mod:`marft_agents.learners.baselines` (maths) and the MAPPO
learners (``learners/mappo_action.py``, ``learners/mappo_token.py``) that use them.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Literal

from marft_agents.settings.estimators import estimator, estimator_names

log = logging.getLogger(__name__)

BASELINES: tuple[str, ...] = estimator_names("baseline")
"""The baselines (what ``auto`` resolves to), in registration order: the ``baseline`` family of
:data:`marft_agents.settings.estimators.ESTIMATORS`, where each is declared once."""
AUTO_BASELINE = "auto"
"""``advantage.baseline: auto`` (the default): :data:`DEFAULT_BASELINE` where it can run, else
``critic`` (:func:`resolve_baseline`); a validated config holds the baseline it chose."""
BASELINE_CHOICES: tuple[str, ...] = (AUTO_BASELINE, *BASELINES)
"""The choices, ``auto`` first."""
BaselineChoice = Literal[BASELINE_CHOICES]  # type: ignore[valid-type]
"""What ``advantage.baseline`` accepts: ``auto`` (resolved by the config's validation), or what a
MAPPO advantage subtracts from a decision's return."""
GROUP_BASELINES: tuple[str, ...] = tuple(b for b in BASELINES if estimator("baseline", b).needs_groups)
"""Baselines built from the other episodes of a task group: they need ``schedule.group_size`` >= 2."""
DEFAULT_BASELINE = "group"
"""What ``auto`` picks for a learner that implements it when grouped sampling is on
(``schedule.group_size`` >= 2): the leave-one-out group mean. Set by the critic-pricing
experiment (``baselines/grids/critic_price.yaml``, its report in
``leaderboards/grids/critic_price/README.md``) under the rule its grid file declared before most
of its seeds ran: the critic was a worse baseline than the group mean at both decision positions,
was not shown better in accuracy at equal episodes, and cost more machine time."""

AUTO_GROUP_SIZE = 4
"""``schedule.group_size: null`` gives a value learner this many episodes per task when
``episodes_per_update`` is a multiple of it and at least twice it (:func:`resolve_group_size`)."""


@dataclass
class AdvantageConfig:
    """The baseline of the MAPPO learners' advantages (``mappo_action``, ``mappo_token`` and their
    single-agent forms); GRPO forms its own group advantages (``learner.grouping``)."""

    baseline: BaselineChoice = AUTO_BASELINE
    """``auto`` (default): ``group`` when the learner implements it and grouped sampling is on,
    else ``critic`` (:data:`DEFAULT_BASELINE` says why). ``critic``: GAE over the decisions with the critic's values (MAPPO as published).
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
        if self.baseline not in BASELINE_CHOICES:
            raise ValueError(f"advantage.baseline must be one of {', '.join(BASELINE_CHOICES)} (the registered "
                             f"baseline estimators and auto), got {self.baseline!r}")


def resolve_baseline(choice: str, implemented: tuple[str, ...], group_size: int) -> str:
    """The baseline ``advantage.baseline: choice`` stands for: ``choice`` itself unless it is
    ``auto``; then :data:`DEFAULT_BASELINE` when the learner ``implemented`` it and ``group_size``
    (the resolved ``schedule.group_size``) is at least 2, else ``critic``."""
    if choice != AUTO_BASELINE:
        return choice
    return DEFAULT_BASELINE if DEFAULT_BASELINE in implemented and group_size >= 2 else "critic"


def resolve_group_size(group_size: int | None, episodes_per_update: int, *, uses_groups: bool,
                       deprecated: int | None = None, quiet: bool = False) -> int:
    """Episodes per task group the collector plays for a PPO learner (``schedule.group_size``).

    ``group_size``: the setting (None: automatic). ``deprecated``: the retired
    ``critic.ceiling_group_size``, honoured when ``group_size`` is None. ``uses_groups``: whether
    the learner's estimator or its critic diagnostics read groups (a value learner, or a group
    baseline). ``quiet``: no log line when grouped sampling is off. Automatic:
    :data:`AUTO_GROUP_SIZE` when ``episodes_per_update`` is a multiple of it and at least twice it, else 1; 1 for a learner that reads no groups. Raises ``ValueError``
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
        if not quiet:  # the learner says it; a config's validation asks quietly
            log.info("grouped sampling off: schedule.episodes_per_update (%d) is not a multiple of %d that is >= %d; "
                     "set schedule.group_size to a divisor > 1 of it for the critic's ceiling and baseline gain",
                     episodes_per_update, AUTO_GROUP_SIZE, 2 * AUTO_GROUP_SIZE)
        return 1
    if not isinstance(k, int) or k < 1 or episodes_per_update % k:
        raise ValueError(f"schedule.group_size must be a divisor >= 1 of schedule.episodes_per_update "
                         f"({episodes_per_update}), got {k!r}")
    return k
