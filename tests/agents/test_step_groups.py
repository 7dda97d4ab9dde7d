"""GiGPO step groups (``learner.grouping: step``) against hand-computed advantages (no model)."""

from __future__ import annotations

import pytest

from marft_agents import group_math as gm
from marft_agents.config import ConfigError, load_config
from marft_agents.episodes import Decision, EpisodeRecord, Rollout
from marft_agents.settings.grpo import GRPOOptions

# One task group of three episodes, agents r then a each round. Per episode: per round the
# team reward and the observations (r's, a's). ep2 is solved in round 0.
PLAN = [
    [(0.0, "task", "m1"), (1.0, "fb", "fb")],  # ep0: returns-to-go (gamma 0.5): round 0 0.5, round 1 1
    [(0.0, "task", "m1"), (0.0, "fb", "y")],   # ep1: 0, 0
    [(1.0, "task", "m2")],                     # ep2: 1
]


def _rollout(plan=PLAN, own=0.0):
    decisions, episodes = [], []
    for e, rounds in enumerate(plan):
        ids = []
        for rnd, (reward, obs_r, obs_a) in enumerate(rounds):
            for agent, obs in (("r", obs_r), ("a", obs_a)):
                closes = agent == "a"
                ids.append(len(decisions))
                decisions.append(Decision(
                    env_index=0, episode=e, step=len(ids) - 1, round=rnd, agent_id=agent, adapter=f"policy_{agent}",
                    observation=obs, prompt_ids=[1], response_ids=[2], text="x", logprobs=[-1.0],
                    team_reward=reward if closes else 0.0, agent_reward=own, closes_round=closes,
                    done=closes and rnd == len(rounds) - 1, group=0))
        episodes.append(EpisodeRecord(0, "t", decisions=ids, team_return=sum(r for r, _, _ in rounds), group=0))
    return Rollout(decisions=decisions, episodes=episodes)


def _by_decision(rollout, advantages):
    return {(d.episode, d.agent_id, d.round): float(a) for d, a in zip(rollout.decisions, advantages)}


# episode level (team returns 1, 0, 1; mean 2/3): +1/3, -2/3, +1/3
# step level, "mean": r@0 "task" x3, scores 0.5, 0, 1 -> 0, -0.5, +0.5; a@0 "m1" x2 (ep0, ep1),
# scores 0.5, 0 -> +-0.25, a@0 "m2" alone -> 0; r@1 "fb" x2, scores 1, 0 -> +-0.5; a@1 "fb" (ep0)
# and "y" (ep1) alone -> 0 (a's "fb" is not r's "fb": the anchor includes the agent).
WANT_MEAN = {
    (0, "r", 0): 1 / 3, (0, "a", 0): 1 / 3 + 0.25, (0, "r", 1): 1 / 3 + 0.5, (0, "a", 1): 1 / 3,
    (1, "r", 0): -2 / 3 - 0.5, (1, "a", 0): -2 / 3 - 0.25, (1, "r", 1): -2 / 3 - 0.5, (1, "a", 1): -2 / 3,
    (2, "r", 0): 1 / 3 + 0.5, (2, "a", 0): 1 / 3,
}


def test_step_advantage_is_the_episode_advantage_plus_the_anchor_state_comparison():
    rollout = _rollout()
    got = _by_decision(rollout, gm.decision_advantages(rollout, "step", "mean",
                                                       options=GRPOOptions(step_gamma=0.5)))
    assert got == pytest.approx(WANT_MEAN, abs=1e-6)


def test_step_weight_scales_the_step_term_and_zero_gives_team():
    rollout = _rollout()
    team = _by_decision(rollout, gm.decision_advantages(rollout, "team", "mean"))
    half = _by_decision(rollout, gm.decision_advantages(rollout, "step", "mean",
                                                        options=GRPOOptions(step_gamma=0.5, step_weight=0.5)))
    assert half == pytest.approx({k: team[k] + 0.5 * (WANT_MEAN[k] - team[k]) for k in team}, abs=1e-6)
    none = gm.decision_advantages(rollout, "step", "mean", options=GRPOOptions(step_gamma=0.5, step_weight=0.0))
    assert _by_decision(rollout, none) == pytest.approx(team, abs=1e-6)


def test_step_level_mean_std_normalises_each_anchor_group_by_its_own_spread():
    rollout = _rollout()
    got = _by_decision(rollout, gm.decision_advantages(rollout, "step", "mean_std", eps=0.0,
                                                       options=GRPOOptions(step_gamma=0.5)))
    episode = {0: (1 / 3) / (1 / 3) ** 0.5, 1: (-2 / 3) / (1 / 3) ** 0.5, 2: (1 / 3) / (1 / 3) ** 0.5}  # std sqrt(1/3)
    # r@0: scores 0.5, 0, 1 (std 0.5) -> 0, -1, +1; a@0 "m1": 0.5, 0 (std sqrt(1/8)) -> +-0.25 / sqrt(1/8)
    assert got[(0, "r", 0)] == pytest.approx(episode[0])
    assert got[(1, "r", 0)] == pytest.approx(episode[1] - 1.0)
    assert got[(2, "r", 0)] == pytest.approx(episode[2] + 1.0)
    assert got[(0, "a", 0)] == pytest.approx(episode[0] + 0.25 / (1 / 8) ** 0.5)
    assert got[(2, "a", 0)] == pytest.approx(episode[2])  # singleton step group: episode term alone


def test_agent_rewards_enter_the_step_score_of_their_round():
    plan = [[(0.0, "s", "s")], [(0.0, "s", "s")]]
    rollout = _rollout(plan)
    rollout.decisions[0].agent_reward = 1.0  # ep0's r
    got = _by_decision(rollout, gm.decision_advantages(rollout, "step", "mean", agent_rewards=True,
                                                       options=GRPOOptions(agent_rewards=True)))
    assert got[(0, "r", 0)] == pytest.approx(0.5) and got[(1, "r", 0)] == pytest.approx(-0.5)
    assert got[(0, "a", 0)] == got[(1, "a", 0)] == 0.0  # team returns equal, a's scores equal


def test_step_grouping_and_its_options_load_from_config():
    cfg = load_config({"algorithm": "grpo", "learner": {"grouping": "step", "step_gamma": 0.9, "step_weight": 0.5}})
    assert (cfg.learner.grouping, cfg.learner.step_gamma, cfg.learner.step_weight) == ("step", 0.9, 0.5)
    with pytest.raises(ConfigError, match="step_gamma must be in"):
        load_config({"algorithm": "grpo", "learner": {"step_gamma": 1.5}})
