"""Group-relative advantages and the GRPO loss by hand (no model)."""

from __future__ import annotations

import math

import pytest
import torch

from marft_agents import group_math as gm
from marft_agents import ppo_math as pm
from marft_agents.episodes import Decision, EpisodeRecord, Rollout
from marft_agents.settings.grpo import NORMALISATIONS

S3 = 1 / math.sqrt(3)  # std of [1, 1, 0] (unbiased) is sqrt(1/3)


def _rollout(plan=None):
    """Group 0: ep0 two rounds (team 0 then 1), ep1 solved in round 0 (team 1), ep2 two rounds of
    0. Group 1: two one-round episodes with team 1 each (all equal). Agents r (reasoner) and a
    (actor, graded); a's per-agent reward: ep0 (1, 0), ep1 (1,), ep2 (0, 0), group 1: 1."""
    decisions, episodes = [], []
    plan = plan or [(0, [0.0, 1.0], [1.0, 0.0]), (0, [1.0], [1.0]), (0, [0.0, 0.0], [0.0, 0.0]),
                    (1, [1.0], [1.0]), (1, [1.0], [1.0])]
    for e, (group, team, own) in enumerate(plan):
        ids = []
        for rnd, (reward, mine) in enumerate(zip(team, own)):
            last = rnd == len(team) - 1
            for agent in ("r", "a"):
                closes = agent == "a"
                ids.append(len(decisions))
                decisions.append(Decision(
                    env_index=0, episode=e, step=len(ids) - 1, round=rnd, agent_id=agent, adapter=f"policy_{agent}",
                    observation="", prompt_ids=[1], response_ids=[2], text="x", logprobs=[-1.0],
                    team_reward=reward if closes else 0.0, agent_reward=mine if agent == "a" else 0.0,
                    closes_round=closes, done=closes and last, group=group))
        episodes.append(EpisodeRecord(0, f"t{group}", decisions=ids, team_return=sum(team), group=group))
    return Rollout(decisions=decisions, episodes=episodes)


def _per_decision(rollout, advantages):
    """{(episode, agent, round): advantage} for readable assertions."""
    return {(d.episode, d.agent_id, d.round): round(float(a), 5) for d, a in zip(rollout.decisions, advantages)}


@pytest.mark.parametrize("normalisation, group0", [
    ("mean", [1 / 3, 1 / 3, -2 / 3]),
    ("mean_std", [(1 / 3) / S3, (1 / 3) / S3, (-2 / 3) / S3]),
    ("leave_one_out", [0.5, 0.5, -1.0]),
])
def test_team_grouping_shares_the_episode_advantage_with_every_agent(normalisation, group0):
    rollout = _rollout()
    adv = _per_decision(rollout, gm.decision_advantages(rollout, "team", normalisation, eps=0.0))
    for e, expected in enumerate(group0):
        mine = [v for (ep, _, _), v in adv.items() if ep == e]
        assert mine == pytest.approx([expected] * len(mine), abs=1e-5)
    assert all(v == 0.0 for (ep, _, _), v in adv.items() if ep >= 3)  # all-equal group: 0, no NaN


def test_agent_grouping_normalises_each_agent_within_its_group():
    rollout = _rollout()
    # With per-agent rewards, a's scores are [2, 2, 0] and r's [1, 1, 0]: different scales.
    mean = _per_decision(rollout, gm.decision_advantages(rollout, "agent", "mean", agent_rewards=True))
    assert [mean[(e, "a", 0)] for e in range(3)] == pytest.approx([2 / 3, 2 / 3, -4 / 3], abs=1e-5)
    assert [mean[(e, "r", 0)] for e in range(3)] == pytest.approx([1 / 3, 1 / 3, -2 / 3], abs=1e-5)
    assert mean[(0, "a", 1)] == mean[(0, "a", 0)]  # one advantage for all of an agent's decisions
    # ... and mean/std puts both agents on the same scale (the point of per-agent normalisation).
    std = _per_decision(rollout, gm.decision_advantages(rollout, "agent", "mean_std", agent_rewards=True, eps=0.0))
    assert [std[(e, "a", 0)] for e in range(3)] == pytest.approx([S3, S3, -2 * S3], abs=1e-5)
    assert [std[(e, "r", 0)] for e in range(3)] == pytest.approx([S3, S3, -2 * S3], abs=1e-5)
    # group 1: a's scores are [2, 2], equal -> 0
    assert all(std[(e, agent, 0)] == 0.0 for e in (3, 4) for agent in "ra")


@pytest.mark.parametrize("normalisation, round0, round1", [
    ("mean", [1 / 3, 1 / 3, -2 / 3], [0.5, -0.5]),
    ("mean_std", [(1 / 3) / S3, (1 / 3) / S3, (-2 / 3) / S3], [0.5 / math.sqrt(0.5), -0.5 / math.sqrt(0.5)]),
    ("leave_one_out", [0.5, 0.5, -1.0], [1.0, -1.0]),
])
def test_agent_turn_grouping_compares_one_role_at_one_round(normalisation, round0, round1):
    rollout = _rollout()
    adv = _per_decision(rollout, gm.decision_advantages(rollout, "agent_turn", normalisation, eps=0.0))
    for agent in "ra":
        # round 0: reward-to-go = team return [1, 1, 0]; round 1: only ep0 (1) and ep2 (0) reached it
        assert [adv[(e, agent, 0)] for e in range(3)] == pytest.approx(round0, abs=1e-5)
        assert [adv[(0, agent, 1)], adv[(2, agent, 1)]] == pytest.approx(round1, abs=1e-5)
    assert all(adv[(e, agent, 0)] == 0.0 for e in (3, 4) for agent in "ra")


@pytest.mark.parametrize("normalisation", NORMALISATIONS)
@pytest.mark.parametrize("agent_rewards", [False, True])
def test_agent_turn_equals_agent_when_every_episode_has_one_round(normalisation, agent_rewards):
    """With horizon 1 each agent acts once per episode, so its (agent, round) group is its agent
    group: both groupings give the same advantages (a one-round run of either is the other's)."""
    rollout = _rollout([(0, [1.0], [1.0]), (0, [0.0], [0.0]), (0, [1.0], [0.0]), (1, [0.0], [1.0]), (1, [1.0], [1.0])])
    by_agent = gm.decision_advantages(rollout, "agent", normalisation, agent_rewards=agent_rewards)
    by_turn = gm.decision_advantages(rollout, "agent_turn", normalisation, agent_rewards=agent_rewards)
    assert torch.equal(by_agent, by_turn) and by_agent.abs().sum() > 0


@pytest.mark.parametrize("normalisation", NORMALISATIONS)
def test_agent_grouping_without_agent_rewards_is_team_grouping_when_every_agent_acts(normalisation):
    """Shared team rewards give each agent the same scores as its episode: the same advantages."""
    rollout = _rollout()
    team = gm.decision_advantages(rollout, "team", normalisation)
    assert torch.equal(gm.decision_advantages(rollout, "agent", normalisation), team)
    assert not torch.equal(gm.decision_advantages(rollout, "agent", normalisation, agent_rewards=True), team)


@pytest.mark.parametrize("normalisation", NORMALISATIONS)
def test_singletons_and_equal_scores_give_zero_never_nan(normalisation):
    out = gm.group_relative([3.0, 5.0, 5.0, 5.0, 0.0], ["a", "b", "b", "b", "c"], normalisation)
    assert torch.equal(out, torch.zeros(5))
    with pytest.raises(ValueError, match="unknown normalisation estimator .z_score.; registered: mean, mean_std, leave_one_out"):
        gm.group_relative([1.0], ["a"], "z_score")


EQUAL_BUT_INEXACT = [(0.7, 7), (2.9, 3), (1000.1, 8)]
"""Groups of equal scores whose float32 mean is not the score (issue 78's equal-group defect)."""


@pytest.mark.parametrize("normalisation", NORMALISATIONS)
@pytest.mark.parametrize("score, n", EQUAL_BUT_INEXACT)
def test_equal_scores_inexact_in_float32_give_exactly_zero(normalisation, score, n):
    keys = ["g"] * n + ["h", "h"]
    out = gm.group_relative([score] * n + [0.0, 1.0], keys, normalisation)  # [n + 2]
    assert torch.equal(out[:n], torch.zeros(n))  # was up to ~+-0.9 under mean_std
    assert out[n] < 0 < out[n + 1]  # a group with signal keeps it
    as_float32 = gm.group_relative(torch.full((n,), score), ["g"] * n, normalisation)  # float32 scores given
    assert torch.equal(as_float32, torch.zeros(n))


@pytest.mark.parametrize("normalisation", NORMALISATIONS)
def test_scores_equal_to_rounding_give_zero_and_close_scores_do_not(normalisation):
    # the same partial credits summed in other orders: 0.7000000000000001 vs 0.7, one float64 ulp apart
    summed = [0.1 + 0.2 + 0.4, 0.4 + 0.3, 0.3 + 0.4, 0.7, 0.2 + 0.5, 0.6 + 0.1, 0.35 + 0.35]
    assert len(set(summed)) == 2
    assert torch.equal(gm.group_relative(summed, ["g"] * 7, normalisation), torch.zeros(7))
    close = gm.group_relative([0.7, 0.7, 0.7 + 1e-6], ["g"] * 3, normalisation)  # a real (tiny) difference
    assert close[2] > 0 > close[0]


def test_zero_advantage_share_counts_equal_but_inexact_groups():
    # group 0: three episodes of team return 2.9 each (no signal); group 1: returns 0 and 1
    rollout = _rollout([(0, [2.9], [0.0]), (0, [2.9], [0.0]), (0, [2.9], [0.0]), (1, [0.0], [0.0]), (1, [1.0], [0.0])])
    advantages = gm.decision_advantages(rollout, "team", "mean_std")  # [10]
    assert float((advantages == 0).float().mean()) == pytest.approx(0.6)  # 6 of 10 decisions


def test_grpo_reports_equal_but_inexact_groups_in_its_zero_advantage_share(tmp_path):
    from agent_helpers import FakePolicy, small_config
    from marft_agents.learners import GRPO

    cfg = small_config(tmp_path, algorithm="grpo", learner={"group_size": 2})
    learner = GRPO(FakePolicy(), cfg, ["r", "a"])
    rollout = _rollout([(0, [2.9], [0.0]), (0, [2.9], [0.0]), (0, [2.9], [0.0]), (1, [0.0], [0.0]), (1, [1.0], [0.0])])
    assert learner.diagnostics(rollout)["grpo/zero_advantage_share"] == pytest.approx(0.6)
    samples = learner.build_samples(rollout)
    assert [float(s.advantages) for s in samples[:6]] == [0.0] * 6


def _engine_policy_loss(aggregation, logprobs, old, adv, mask, eps_high=None):
    """The engine's reduction (``BaseLearner._policy_micro``) of GRPO's units, entropy off."""
    from types import SimpleNamespace

    from marft_agents.learners.grpo import GRPO
    from marft_agents.learners.samples import Sample

    fake = SimpleNamespace(options=SimpleNamespace(aggregation=aggregation),
                           unit="token" if aggregation == "token" else "decision")
    samples = [Sample(agent_id="a", adapter="a", critic="", prompt_ids=[1], response_ids=[7] * int(m.sum()),
                      old_logprobs=o[: int(m.sum())], old_values=torch.zeros(()), advantages=a,
                      returns=torch.zeros(())) for o, a, m in zip(old, adv, mask)]
    units = GRPO.policy_units(fake, samples, logprobs, mask)
    surrogate, clipped = pm.clipped_surrogate(units.logprobs, units.old_logprobs, units.advantages, 0.2, eps_high)
    weight = units.mask if units.weights is None else units.mask * units.weights
    norm = sum(GRPO.units(fake, s) for s in samples)
    return float((surrogate * weight).sum() / norm), float((clipped.float() * weight).sum() / norm)


def test_group_loss_by_hand_per_token_and_per_sequence():
    old = torch.tensor([[-1.0, -2.0], [-1.0, 0.0]])  # [B=2, T=2]; row 1 has one token
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    adv = torch.tensor([1.0, -1.0])
    # ratio 1 everywhere: per-token loss = -A -> tokens [-1, -1, +1]
    token, _ = _engine_policy_loss("token", old.clone(), old, adv, mask)
    seq, _ = _engine_policy_loss("sequence", old.clone(), old, adv, mask)
    assert token == pytest.approx(-1 / 3) and seq == pytest.approx(0.0)
    # ratio e^0.5 on row 0 (A = +1): the upper clip 1 + eps_high caps the gain (DAPO clip-higher)
    new = old + torch.tensor([[0.5, 0.5], [0.0, 0.0]])
    loss, clipfrac = _engine_policy_loss("sequence", new, old, adv, mask, eps_high=0.28)
    assert loss == pytest.approx((-1.28 + 1.0) / 2) and clipfrac == pytest.approx(0.5)


