"""MAPPO's critic GAE across rounds: gamma once per round (``team`` credit), lambda per agent
turn; a 3-round, two-agent episode computed by hand (``ppo_math.gae_action_level``'s docstring)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent_helpers import FakePolicy, small_config
from marft_agents.episodes import Decision, EpisodeRecord, Rollout
from marft_agents.learners import ActionLevelMAPPO

VALUES = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6]  # r0, a0, r1, a1, r2, a2: one critic value per agent turn
TEAM = [0.0, 0.5, 1.0]  # team reward of rounds 0, 1, 2 (paid on the actor's decision closing each)


def _episode():
    decisions = []
    for k, value in enumerate(VALUES):
        rnd, agent = divmod(k, 2)
        closes = agent == 1
        decisions.append(Decision(
            env_index=0, episode=0, step=k, round=rnd, agent_id="ra"[agent], adapter=f"policy_{'ra'[agent]}",
            observation="", prompt_ids=[1], response_ids=[5], text="x", logprobs=[-1.0], value=value,
            token_values=[value], team_reward=TEAM[rnd] if closes else 0.0, closes_round=closes,
            done=closes and rnd == 2))
    return Rollout(decisions=decisions, episodes=[EpisodeRecord(0, "t", decisions=list(range(6)))])


def _samples(**ppo):
    cfg = small_config(Path("/tmp"), **{"advantage.baseline": "critic", **{f"ppo.{k}": v for k, v in ppo.items()}})
    return ActionLevelMAPPO(FakePolicy(), cfg, ["r", "a"]).build_samples(_episode())


def test_gamma_is_applied_once_per_round_under_team_credit():
    samples = _samples(gamma=0.5, lam=1.0, credit="team")
    # lam 1: Monte Carlo. Round 2: 1; round 1: 0.5 + 0.5 * 1 = 1; round 0: 0 + 0.5 * 1 = 0.5,
    # the same for both agents of a round (no discount between the reasoner and the actor)
    assert [float(s.returns) for s in samples] == pytest.approx([0.5, 0.5, 1.0, 1.0, 1.0, 1.0])


def test_gamma_is_applied_per_agent_turn_under_step_discounted_credit():
    samples = _samples(gamma=0.5, lam=1.0, credit="step_discounted")
    # G5 = 1, G4 = 0.5, G3 = 0.5 + 0.5 * 0.5, G2 = 0.375, G1 = 0.1875, G0 = 0.09375
    assert [float(s.returns) for s in samples] == pytest.approx([0.09375, 0.1875, 0.375, 0.75, 0.5, 1.0])


def test_lambda_is_applied_per_agent_turn_across_and_inside_rounds():
    samples = _samples(gamma=0.5, lam=0.5, credit="team")
    # deltas r_k + g_k V_{k+1} - V_k with g = 1 inside a round, 0.5 on the closing decision:
    # 0.1, -0.05, 0.1, 0.35, 0.1, 0.4. A_k = delta_k + g_k * lam * A_{k+1}:
    # A5 = 0.4; A4 = 0.1 + 1 * 0.5 * 0.4 = 0.3; A3 = 0.35 + 0.5 * 0.5 * 0.3 = 0.425;
    # A2 = 0.1 + 0.5 * 0.425 = 0.3125; A1 = -0.05 + 0.25 * 0.3125 = 0.028125; A0 = 0.1 + 0.5 * A1
    want = [0.1140625, 0.028125, 0.3125, 0.425, 0.3, 0.4]
    assert [float(s.advantages) for s in samples] == pytest.approx(want)
    assert [float(s.returns) for s in samples] == pytest.approx([a + v for a, v in zip(want, VALUES)])
    assert [float(s.old_values) for s in samples] == pytest.approx(VALUES)  # the per-turn values
