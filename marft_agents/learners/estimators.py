"""The MAPPO learners' baseline estimators (``advantage.baseline``) as pure functions.

Each is registered by name in :mod:`marft_agents.settings.estimators` (family ``baseline``) and
has one signature, ``fn(batch: EpisodeTables) -> DecisionTargets``, on plain per-episode,
per-position tables (the maths and its reasoning: :mod:`marft_agents.learners.baselines`):

1. ``critic`` (:func:`critic_gae`): GAE over each episode's decisions with the critic's values
   (MAPPO), one value per agent turn; the target is the GAE return. Over rounds, gamma is the
   credit assignment's (once per round under ``team``, per agent turn under
   ``step_discounted``) and lambda applies per agent turn (``ppo_math.gae_action_level``).
   Its token-level form is
   :func:`marft_agents.ppo_math.gae_token_level` (MARFT-T).
2. ``group`` (:func:`group_loo`): the Monte Carlo return minus the leave-one-out mean of the
   returns at the same position in the other episodes of the task group; no critic (target 0).
3. ``group_critic`` (:func:`group_critic`): the LOO anchor plus the critic's value minus the
   LOO mean of the values at the same position; the target is the return's residual over the
   anchor.

The learners (``mappo_action``, ``mappo_token``) build the tables from a rollout
(:func:`episode_tables`) and turn the targets into samples; nothing here reads a config.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from marft_agents import ppo_math as pm
from marft_agents.episodes import Decision, Rollout
from marft_agents.learners.baselines import Table, group_advantages
from marft_agents.learners.credit import assign_credit
from marft_agents.learners.critic_health import episode_returns


@dataclass(frozen=True)
class EpisodeTables:
    """Per episode ``e`` (every episode of the rollout, in its order; an episode without decisions
    has empty rows) and decision position ``p``: what a baseline estimator may read."""

    rewards: Table
    """The credited reward of decision p (``learners/credit.py``)."""
    gammas: Table
    """The discount from decision p to p + 1."""
    dones: Table
    """1.0 where decision p ended the episode."""
    returns: Table
    """The Monte Carlo return from decision p (rewards and gammas summed backwards)."""
    values: Table | None
    """The critic's value of the state before decision p (None when no critic runs)."""
    groups: Sequence[Sequence[int]]
    """The task groups: episode indices of each group."""
    lam: float
    """GAE's lambda (the critic's bootstrap weight; unused by the Monte Carlo baselines)."""


@dataclass(frozen=True)
class DecisionTargets:
    """Per episode and position: the advantage and the critic's regression target."""

    advantages: list[list[float]]
    targets: list[list[float]]


def critic_gae(batch: EpisodeTables) -> DecisionTargets:
    """1. GAE over each episode's decisions (``ppo_math.gae_action_level``); target = return."""
    rows = [e for e, r in enumerate(batch.rewards) if r]
    if not rows:
        return DecisionTargets([[] for _ in batch.rewards], [[] for _ in batch.rewards])
    longest = max(len(batch.rewards[e]) for e in rows)
    rewards = torch.zeros(len(rows), longest)  # [E, K]
    values = torch.zeros(len(rows), longest)  # [E, K]
    dones = torch.ones(len(rows), longest)  # [E, K] padding counts as done
    gammas = torch.ones(len(rows), longest)  # [E, K]
    for i, e in enumerate(rows):
        n = len(batch.rewards[e])
        rewards[i, :n] = torch.tensor(batch.rewards[e])
        gammas[i, :n] = torch.tensor(batch.gammas[e])
        values[i, :n] = torch.tensor(batch.values[e], dtype=torch.float32)
        dones[i, :n] = torch.tensor(batch.dones[e])
    advantages, returns = pm.gae_action_level(rewards, values, dones, gammas, batch.lam)  # [E, K]
    adv: list[list[float]] = [[] for _ in batch.rewards]
    ret: list[list[float]] = [[] for _ in batch.rewards]
    for i, e in enumerate(rows):
        n = len(batch.rewards[e])
        adv[e], ret[e] = advantages[i, :n].tolist(), returns[i, :n].tolist()
    return DecisionTargets(adv, ret)


def group_loo(batch: EpisodeTables) -> DecisionTargets:
    """2. ``G - LOO mean of G`` at the same position; no critic target (0)."""
    advantages = group_advantages(batch.returns, batch.groups)  # [E][P]
    return DecisionTargets(advantages, [[0.0] * len(row) for row in advantages])


def group_critic(batch: EpisodeTables) -> DecisionTargets:
    """3. ``G - (LOO(G) + V - LOO(V))`` (position 0: ``G - LOO(G)``); target ``G - LOO(G)``."""
    return DecisionTargets(group_advantages(batch.returns, batch.groups, batch.values),
                           group_advantages(batch.returns, batch.groups))


def episode_tables(rollout: Rollout, credit: str, gamma: float, lam: float,
                   value_of: Callable[[Decision], float] | None) -> EpisodeTables:
    """The tables of ``rollout`` under credit assignment ``credit`` with discount ``gamma``;
    ``value_of(decision)``: the critic's value of a decision's state (None: no critic). Raises
    on an episode that did not finish."""
    episodes = rollout.episode_decisions()
    rewards, gammas, dones = [], [], []
    for e, decisions in enumerate(episodes):
        if decisions and not decisions[-1].done:
            raise ValueError(f"episode {e} did not finish; the collector returns whole episodes only")
        r, g = assign_credit(decisions, credit, gamma) if decisions else ([], [])
        rewards.append(r)
        gammas.append(g)
        dones.append([float(d.done) for d in decisions])
    values = [[float(value_of(d)) for d in decisions] for decisions in episodes] if value_of else None
    return EpisodeTables(rewards, gammas, dones, episode_returns(rollout, credit, gamma), values,
                         list(rollout.groups().values()), lam)
