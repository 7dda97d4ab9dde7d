"""Credit assignment: turn what the env paid into per-decision training rewards and discounts.

An episode is a sequence of decisions d_0, d_1, ... (all agents interleaved, in the order the
env's D_t scheduled them). GAE runs over that sequence, so decision k's return is its own reward
plus the (discounted) return of the *next decision*, whichever agent takes it. Each strategy
gives every decision a reward ``r_k`` and the discount ``gamma_k`` applied from d_k to d_{k+1}:

``team`` (default)
    The round's team reward R_t is placed once, on the decision that closed round t; inside a
    round the discount is 1, between rounds it is ``gamma``. So every decision in round t has
    the same return target: the team's reward is shared equally, and it is never counted once per
    agent (which would scale values with the team size).
``step_discounted``
    Same placement, but every decision step is discounted by ``gamma`` (the original MARFT
    implementation): an agent acting j decisions before the end of the round is credited
    ``gamma**j * R_t``, so later (closer) agents get more credit.
``per_step``
    ``team`` plus each decision's own env-reported per-agent reward (``RoundOutcome
    .agent_rewards``, e.g. a format reward) on that decision, so an agent is also paid for its
    own part of the round. With no per-agent rewards reported it equals ``team``.
"""

from __future__ import annotations

from collections.abc import Sequence

from marft_agents.settings.credit import CREDIT_STRATEGIES
from marft_agents.episodes import Decision


def assign_credit(decisions: Sequence[Decision], strategy: str, gamma: float) -> tuple[list[float], list[float]]:
    """Per-decision ``(rewards, discounts)`` for one episode (see the module docstring)."""
    if strategy not in CREDIT_STRATEGIES:
        raise ValueError(f"unknown credit assignment {strategy!r}; expected one of {CREDIT_STRATEGIES}")
    rewards, discounts = [], []
    for d in decisions:
        reward = d.team_reward if d.closes_round else 0.0
        if strategy == "per_step":
            reward += d.agent_reward
        rewards.append(float(reward))
        if strategy == "step_discounted" or d.closes_round:
            discounts.append(float(gamma))
        else:
            discounts.append(1.0)
    return rewards, discounts
