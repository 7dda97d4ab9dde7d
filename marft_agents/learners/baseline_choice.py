"""``advantage.baseline`` for the MAPPO learners: the group baselines' per-decision targets.

A mixin of the MAPPO learners (``mappo_action``, ``mappo_token``) over the PPO engine
(``learners/base.py``); the estimators and their reasoning are in
:mod:`marft_agents.learners.baselines`. ``critic`` is the learner's own GAE path; this module
gives, for ``group`` and ``group_critic``, every decision of a rollout its advantage and, for
``group_critic``, the critic's target (the return's residual over the group's LOO anchor).
"""

from __future__ import annotations

from typing import Any

from marft_agents.episodes import Decision, Rollout
from marft_agents.learners.baselines import group_advantages
from marft_agents.learners.critic_health import baseline_figures, episode_returns, equal_groups
from marft_agents.settings.advantage import BASELINES


class GroupBaselines:
    """The group baselines of a MAPPO learner (needs ``ppo``, ``baseline`` and ``value_mode`` from
    :class:`marft_agents.learners.base.BaseLearner`)."""

    baselines = BASELINES
    ppo: Any
    baseline: str

    def group_targets(self, rollout: Rollout, value_of: Any = None
                      ) -> list[tuple[Decision, float, float]]:
        """``(decision, advantage, critic target)`` of every decision, episode by episode in turn
        order (episodes without decisions skipped). ``value_of(decision) -> float``: the critic's
        value of the decision's state under ``group_critic`` (None under ``group``: the target is
        then 0 and unused)."""
        episodes = rollout.episode_decisions()
        for e, decisions in enumerate(episodes):
            if decisions and not decisions[-1].done:
                raise ValueError(f"episode {e} did not finish; the collector returns whole episodes only")
        returns = episode_returns(rollout, self.ppo.credit, self.ppo.gamma)
        groups = list(rollout.groups().values())
        values = [[float(value_of(d)) for d in decisions] for decisions in episodes] if value_of else None
        advantages = group_advantages(returns, groups, values)  # [E][P]
        targets = group_advantages(returns, groups) if value_of else None  # the residual over the anchor
        return [(d, advantages[e][p], targets[e][p] if targets is not None else 0.0)
                for e, decisions in enumerate(episodes) for p, d in enumerate(decisions)]

    def diagnostics(self, rollout: Rollout) -> dict[str, float]:
        """Under ``group`` (no critic to diagnose): the group's residuals per position
        (``critic/group_return_var/pos<p>``, ``critic/loo_residual_var/pos<p>``)."""
        if self.baseline != "group":
            return {}
        groups = equal_groups(rollout)
        if groups is None:
            return {}
        return baseline_figures(episode_returns(rollout, self.ppo.credit, self.ppo.gamma), groups, None)
