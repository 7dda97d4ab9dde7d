"""``advantage.baseline`` for the MAPPO learners: run the registered estimator on a rollout.

A mixin of the MAPPO learners (``mappo_action``, ``mappo_token``) over the shared PPO update loop
(``learners/base.py``). The estimators are pure functions registered by name
(:mod:`marft_agents.settings.estimators`, family ``baseline``; the functions in
:mod:`marft_agents.learners.estimators`, their reasoning in :mod:`marft_agents.learners.baselines`);
this module builds their tables from a rollout and hands every decision its advantage and
critic target.
"""

from __future__ import annotations

from typing import Any

from marft_agents.episodes import Decision, Rollout
from marft_agents.learners.critic_health import baseline_figures, episode_returns, equal_groups
from marft_agents.learners.estimators import episode_tables
from marft_agents.settings.estimators import estimator_function


class GroupBaselines:
    """The baseline estimators of a MAPPO learner (needs ``ppo``, ``baseline`` and ``critic_values`` from
    :class:`marft_agents.learners.base.BaseLearner`; the ``baselines`` a learner implements are
    declared by its registry spec, ``learners/registry.py``)."""

    ppo: Any
    baseline: str
    critic_values: str | None

    def baseline_targets(self, rollout: Rollout, value_of: Any = None
                         ) -> list[tuple[Decision, float, float]]:
        """``(decision, advantage, critic target)`` of every decision, episode by episode in turn
        order (episodes without decisions skipped), from the estimator ``advantage.baseline``
        names. ``value_of(decision) -> float``: the critic's value of the decision's state (None
        without a critic: the target is then 0 and unused)."""
        tables = episode_tables(rollout, self.ppo.credit, self.ppo.gamma, self.ppo.lam, value_of)
        out = estimator_function("baseline", self.baseline)(tables)
        return [(d, out.advantages[e][p], out.targets[e][p])
                for e, decisions in enumerate(rollout.episode_decisions()) for p, d in enumerate(decisions)]

    def diagnostics(self, rollout: Rollout) -> dict[str, float]:
        """Under a baseline without a critic (``group``; nothing to diagnose): the group's
        residuals per position (``critic/group_return_var/pos<p>``, ``critic/loo_residual_var/pos<p>``)
        and its ``baseline/*`` figures (gain 0: its baseline is the reference)."""
        if self.critic_values is not None:  # the run plan's critic (marft_agents/run_plan.py)
            return {}
        groups = equal_groups(rollout)
        if groups is None:
            return {}
        return baseline_figures(episode_returns(rollout, self.ppo.credit, self.ppo.gamma), groups, None, self.baseline)
