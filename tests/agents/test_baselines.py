"""The MAPPO learners' baselines (``advantage.baseline``) and the critic's gain over the group mean.

By hand on small grouped data: the leave-one-out (LOO) advantages, ``group_critic`` reducing to
``group`` under a constant critic and anchoring the first decision, the residual variances and
the baseline gain. Then the footing: a critic that knows each task's success probability scores
the ceiling (and 1/k of gain over the group mean at the first decision), on synthetic Bernoulli
returns. Then the learners: ``group`` runs no critic and its samples carry the hand-computed
advantages; ``group_critic`` trains the critic on the residual over the anchor.
"""

from __future__ import annotations

import logging
import math

import numpy as np
import pytest

from agent_helpers import FakePolicy, small_config
from marft_agents.episodes import Decision, EpisodeRecord, Rollout
from marft_agents.learners import ActionLevelMAPPO, TokenLevelMAPPO
from marft_agents.learners.baselines import group_advantages, loo_baseline, pooled_gain, residual_variances
from marft_agents.learners.critic_health import GainWatch, critic_health, last_half

# -- the maths by hand ---------------------------------------------------------------------------------
RETURNS = [[1.0, 1.0], [0.0, 0.0], [0.0, 1.0],  # group 0: three episodes of two decisions
           [1.0], [0.0, 0.0]]  # group 1: the first episode ended after one decision
GROUPS = [[0, 1, 2], [3, 4]]


def test_loo_advantages_by_hand():
    # group 0, position 0: others' means (0 + 0)/2, (1 + 0)/2, (1 + 0)/2; position 1: (0 + 1)/2, (1 + 1)/2, (1 + 0)/2
    # group 1, position 0: 0 and 1; position 1: episode 3 has none, so episode 4 has nobody to compare with
    assert group_advantages(RETURNS, GROUPS) == [[1.0, 0.5], [-0.5, -1.0], [-0.5, 0.5], [1.0], [-1.0, 0.0]]
    assert loo_baseline(RETURNS, GROUPS)[4] == [1.0, None]


def test_group_critic_is_group_under_a_constant_critic_and_anchors_the_first_decision():
    rng = np.random.default_rng(0)
    returns = rng.integers(0, 2, (12, 3)).astype(float).tolist()
    groups = [list(range(g, g + 4)) for g in range(0, 12, 4)]
    constant = [[0.37] * 3 for _ in range(12)]
    assert np.allclose(group_advantages(returns, groups, constant), group_advantages(returns, groups), atol=1e-12)
    values = rng.random((12, 3)).tolist()
    mixed = np.array(group_advantages(returns, groups, values))
    plain = np.array(group_advantages(returns, groups))
    assert np.allclose(mixed[:, 0], plain[:, 0])  # position 0: the LOO anchor alone
    # later positions: G - LOO(G) - (V - LOO(V)), by hand for episode 0 at position 2
    others = [1, 2, 3]
    want = (returns[0][2] - np.mean([returns[o][2] for o in others])
            - (values[0][2] - np.mean([values[o][2] for o in others])))
    assert mixed[0, 2] == pytest.approx(want)


def _grouped_rollout(returns_by_group, values=None, agents=("r", "a")):
    """One-round episodes of ``agents``; the last decision closes the round and is paid the
    episode's return; ``values[group][episode][step]`` recorded at collection (None: none)."""
    decisions, episodes = [], []
    for group, returns in enumerate(returns_by_group):
        for j, ret in enumerate(returns):
            e, ids = len(episodes), []
            for step, agent in enumerate(agents):
                last = step == len(agents) - 1
                ids.append(len(decisions))
                value = None if values is None else values[group][j][step]
                decisions.append(Decision(
                    env_index=0, episode=e, step=step, round=0, agent_id=agent, adapter=f"policy_{agent}",
                    observation="", prompt_ids=[1, 2, 3 + group], response_ids=[7, 8], text="x",
                    logprobs=[-1.0, -1.0], value=value, token_values=None if value is None else [value, value],
                    team_reward=ret if last else 0.0, closes_round=last, done=last, group=group,
                    task_id=f"t{group}", critic_prompt_ids=[1, 2, 3 + group]))
            episodes.append(EpisodeRecord(0, f"t{group}", decisions=ids, team_return=ret, group=group))
    return Rollout(decisions=decisions, episodes=episodes)


def test_residual_variances_and_the_gain_by_hand():
    # group 0 returns 1, 1, 0, 0 (V = 0.5), group 1 returns 0, 0, 0, 1 (V = 0.25), both positions alike.
    # LOO residuals: 2/3, 2/3, -2/3, -2/3 and -1/3, -1/3, -1/3, 1: mean square 28/9 / 8 = 7/18.
    # Critic residuals 0.5, 0.5, -0.5, -0.5 | -0.25, -0.25, -0.25, 0.75: group means 0 (MSB = 0),
    # MSW = 1.75 / 6, so the random-effects total MSW + (0 - MSW) / 4 = 1.75 / 8 = 0.21875.
    returns = [[[1.0] * 2, [1.0] * 2, [0.0] * 2, [0.0] * 2], [[0.0] * 2, [0.0] * 2, [0.0] * 2, [1.0] * 2]]
    values = [[[0.5] * 2] * 4, [[0.25] * 2] * 4]
    table = [r for g in returns for r in g]
    flat_values = [v for g in values for v in g]
    groups = [[0, 1, 2, 3], [4, 5, 6, 7]]
    positions = residual_variances(table, groups, flat_values)
    assert [r.position for r in positions] == [0, 1] and positions[0].n == 8
    first = positions[0]
    assert first.loo == pytest.approx(7 / 18) and first.critic == pytest.approx(0.21875)
    # returns: means 0.5, 0.25, MSB = 4 (0.125^2 + 0.125^2) = 0.125, MSW = 1.75 / 6
    assert first.return_var == pytest.approx(1.75 / 6 + (0.125 - 1.75 / 6) / 4)
    assert first.gain(first.critic) == pytest.approx(1 - 0.21875 / (7 / 18))  # 7/16: the critic is the better baseline
    assert first.anchored == pytest.approx(first.loo)  # V constant within each group: the anchored baseline is LOO
    assert pooled_gain(positions, anchored=False) == pytest.approx(7 / 16)
    out = critic_health(_grouped_rollout([[1, 1, 0, 0], [0, 0, 0, 1]], values), [
        d.value for d in _grouped_rollout([[1, 1, 0, 0], [0, 0, 0, 1]], values).decisions], "team", 1.0)
    assert out["critic/baseline_gain"] == pytest.approx(7 / 16)
    assert out["critic/baseline_gain/pos1"] == pytest.approx(7 / 16)
    assert out["critic/loo_residual_var/pos0"] == pytest.approx(7 / 18)
    assert out["critic/critic_residual_var/pos0"] == pytest.approx(0.21875)
    # ev_first on the ceiling's footing: 1 - 0.21875 / (between + within) = 1 - 0.21875 / 0.25
    assert out["critic/ev_first"] == pytest.approx(1 - 0.21875 / 0.25)
    anchored = critic_health(_grouped_rollout([[1, 1, 0, 0], [0, 0, 0, 1]], values), [
        d.value for d in _grouped_rollout([[1, 1, 0, 0], [0, 0, 0, 1]], values).decisions], "team", 1.0,
        baseline="group_critic")
    assert anchored["critic/baseline_gain"] == pytest.approx(0.0)  # anchored on the group: no gain, no loss


# -- the footing: a critic that knows p_i ----------------------------------------------------------------
def _perfect_critic_rows(updates: int, tasks: int, k: int, seed: int = 0, constant: bool = False) -> list[dict]:
    rng = np.random.default_rng(seed)
    rows = []
    for u in range(1, updates + 1):
        p = rng.random(tasks)  # [T] each task's success probability under the fixed policy
        returns = (rng.random((tasks, k)) < p[:, None]).astype(float)  # [T, k]
        values = np.full((tasks, k), 0.5) if constant else np.repeat(p[:, None], k, axis=1)
        rollout = _grouped_rollout(returns.tolist(), [[[v] for v in row] for row in values.tolist()], agents=("a",))
        rows.append({"step": u, **critic_health(rollout, [d.value for d in rollout.decisions], "team", 1.0)})
    return rows


def test_a_perfect_critic_scores_the_ceiling_and_one_kth_of_gain_over_the_group_mean():
    # 400 updates of 8 tasks x 4 (the shipped shape); p ~ U(0, 1): ceiling 1/12 / (1/12 + 1/6) = 1/3.
    rows = _perfect_critic_rows(400, 8, 4)
    summary = last_half(rows)
    assert 0.95 <= summary.ratio <= 1.05, summary
    assert summary.ceiling == pytest.approx(1 / 3, abs=0.05)
    # the gain over LOO at position 0 is 1 - sigma_w^2 / (k/(k-1) sigma_w^2) = 1/k
    assert summary.baseline_gain == pytest.approx(0.25, abs=0.04)
    # the in-update population footing the ratio used before reads ~7/8 of the between part: low
    old = (1 - np.mean([r["critic/residual_var_first"] for r in rows[200:]])
           / np.mean([r["critic/return_var"] for r in rows[200:]])) / summary.ceiling
    assert old < 0.97
    constant = _perfect_critic_rows(200, 8, 4, constant=True)
    assert abs(last_half(constant).ev_first) < 0.03 and last_half(constant).baseline_gain < 0  # knows nothing


def test_the_gain_watch_names_the_setting_after_its_window(caplog):
    watch = GainWatch(window=3)
    with caplog.at_level(logging.WARNING):
        fired = [watch.observe(u, g) for u, g in enumerate([-0.1, -0.2, -0.1, -0.3, 0.2, -0.1, math.nan])]
    assert fired == [False, False, True, False, False, False, False]
    assert caplog.text.count("set advantage.baseline: group") == 1


# -- the learners ----------------------------------------------------------------------------------------


def _learner(cls, baseline, **sections):
    cfg = small_config(__import__("pathlib").Path("/tmp"), **{
        "advantage.baseline": baseline, "schedule.episodes_per_update": 8, "schedule.group_size": 4, **sections})
    return cls(FakePolicy(), cfg, ["r", "a"])


def test_group_baseline_samples_carry_the_hand_computed_loo_advantages():
    learner = _learner(ActionLevelMAPPO, "group")
    assert learner.critic_values is None and learner.value_fit is None and learner.group_size == 4
    assert ActionLevelMAPPO.value_mode == learner.value_mode == "state"  # the declared capability stays
    assert not any(name == "critic" for name in learner.optimizers)  # no critic optimizer either
    rollout = _grouped_rollout([[1, 1, 0, 0], [0, 0, 0, 1]])
    samples = learner.build_samples(rollout)
    # each decision of an episode: its return minus the mean of the other three episodes' returns
    want = [2 / 3, 2 / 3, -2 / 3, -2 / 3, -1 / 3, -1 / 3, -1 / 3, 1.0]
    assert [float(s.advantages) for s in samples] == pytest.approx([a for a in want for _ in range(2)])
    assert {s.critic for s in samples} == {""}
    token = _learner(TokenLevelMAPPO, "group").build_samples(rollout)
    assert [x for s in token for x in s.advantages.tolist()] == pytest.approx([a for a in want for _ in range(4)])
    assert learner.diagnostics(rollout)["critic/loo_residual_var/pos0"] == pytest.approx(7 / 18)


def test_group_critic_trains_the_critic_on_the_residual_and_is_group_under_a_constant_critic():
    learner = _learner(ActionLevelMAPPO, "group_critic")
    assert learner.critic_values == "state" and learner.value_fit is not None
    returns = [[1, 1, 0, 0], [0, 0, 0, 1]]
    constant = [[[0.3, 0.3]] * 4] * 2
    samples = learner.build_samples(_grouped_rollout(returns, constant))
    group = _learner(ActionLevelMAPPO, "group").build_samples(_grouped_rollout(returns))
    assert [float(s.advantages) for s in samples] == pytest.approx([float(s.advantages) for s in group])
    assert [float(s.returns) for s in samples] == pytest.approx([float(s.advantages) for s in group])  # residuals
    assert [float(s.old_values) for s in samples] == pytest.approx([0.3] * 16)
    # a critic that tells the second decisions apart moves their advantages, never the first's
    values = [[[0.3, 0.9], [0.3, 0.9], [0.3, 0.1], [0.3, 0.1]], [[0.3, 0.5]] * 4]
    moved = learner.build_samples(_grouped_rollout(returns, values))
    firsts = [float(s.advantages) for s in moved][0::2]
    assert firsts == pytest.approx([float(s.advantages) for s in group][0::2])
    # episode 0, second decision: 1 - 1/3 - (0.9 - (0.9 + 0.1 + 0.1) / 3)
    assert float(moved[1].advantages) == pytest.approx(1 - 1 / 3 - (0.9 - 1.1 / 3))
    token = _learner(TokenLevelMAPPO, "group_critic").build_samples(_grouped_rollout(returns, values))
    assert [float(s.advantages[0]) for s in token] == pytest.approx([float(s.advantages) for s in moved])


def test_the_baseline_settings_refuse_what_cannot_work(caplog):
    from marft_agents.config import ConfigError, load_config
    from marft_agents.learners import GRPO

    with pytest.raises(ValueError, match="schedule.group_size >= 2"):
        _learner(ActionLevelMAPPO, "group", **{"schedule.group_size": 1})
    with pytest.raises(ValueError, match="implements critic"):
        _learner(GRPO, "group", **{"schedule.group_size": None, "algorithm": "grpo"})
    with pytest.raises(ValueError, match="remove schedule.group_size"):
        _learner(GRPO, "critic", **{"schedule.group_size": 2, "algorithm": "grpo"})
    with pytest.raises((ValueError, ConfigError), match="advantage.baseline must be one of"):
        load_config({"advantage": {"baseline": "gae"}})
    with caplog.at_level(logging.WARNING):
        cfg = small_config(__import__("pathlib").Path("/tmp"), **{"critic.ceiling_group_size": 2,
                                                                   "schedule.episodes_per_update": 8})
    assert caplog.text.count("critic.ceiling_group_size is deprecated: set schedule.group_size: 2") == 1
    assert ActionLevelMAPPO(FakePolicy(), cfg, ["r", "a"]).group_size == 2  # the old key still decides
    auto = _learner(ActionLevelMAPPO, "critic", **{"schedule.group_size": None})
    assert auto.group_size == 4  # a value learner at 8 episodes: groups of 4, as before the setting existed


def test_a_group_baseline_without_groups_is_refused_when_the_config_is_read(tmp_path):
    """One line at load time (before any model loads), not a traceback from the learner."""
    from marft_agents.config import ConfigError

    with pytest.raises(ConfigError, match=r"schedule.group_size >= 2 \(a divisor of schedule.episodes_per_update 2\)"):
        small_config(tmp_path, **{"advantage.baseline": "group"})  # 2 episodes per update: groups of 1
    with pytest.raises(ConfigError, match="algorithm 'grpo' implements critic, got 'group_critic'"):
        small_config(tmp_path, **{"advantage.baseline": "group_critic", "algorithm": "grpo",
                                  "schedule.episodes_per_update": 4})


@pytest.mark.parametrize("baseline, has_critic", [("critic", True), ("group", False), ("group_critic", True)])
def test_only_the_baselines_that_use_the_critic_build_one(tmp_path, baseline, has_critic):
    from agent_helpers import tiny_on_device
    from marft_agents.run.trainer import build_policy

    cfg = small_config(tmp_path, **{"advantage.baseline": baseline, "schedule.episodes_per_update": 4,
                                    "schedule.group_size": 2})
    model, tokenizer = tiny_on_device(seed=0, hidden_size=32, num_layers=1)
    with build_policy(cfg, model, tokenizer, ["reasoner_0", "actor_1"]) as policy:
        assert bool(policy.critic_adapters) is has_critic and (policy.critic_config is not None) is has_critic


def test_auto_is_the_group_mean_where_groups_are_on_and_the_critic_elsewhere(tmp_path, caplog):
    """The default (``auto``) as a validated config holds it: ``group`` for a MAPPO learner with
    grouped sampling on (8 episodes per update: groups of 4), ``critic`` without groups or for a
    learner that implements no group baseline; an explicit choice is kept."""
    from marft_agents.settings.advantage import BASELINES, resolve_baseline

    assert small_config(tmp_path, **{"schedule.episodes_per_update": 8}).advantage.baseline == "group"
    assert small_config(tmp_path, **{"schedule.episodes_per_update": 8, "algorithm": "mappo_token"}
                        ).advantage.baseline == "group"
    assert small_config(tmp_path, **{"schedule.episodes_per_update": 8, "schedule.group_size": 1}
                        ).advantage.baseline == "critic"
    with caplog.at_level(logging.INFO):
        assert small_config(tmp_path).advantage.baseline == "critic"  # 2 episodes per update: no groups
    assert "grouped sampling off" not in caplog.text  # validation asks quietly; the learner says it
    assert small_config(tmp_path, **{"schedule.episodes_per_update": 8, "algorithm": "grpo"}
                        ).advantage.baseline == "critic"
    assert small_config(tmp_path, **{"schedule.episodes_per_update": 8, "advantage.baseline": "critic"}
                        ).advantage.baseline == "critic"
    assert resolve_baseline("auto", ("critic",), 4) == "critic" and resolve_baseline("group_critic", BASELINES, 1) \
        == "group_critic"
    # a learner handed an unvalidated config resolves it as validation does
    cfg = small_config(tmp_path, **{"schedule.episodes_per_update": 8, "schedule.group_size": 4})
    cfg.advantage.baseline = "auto"
    assert ActionLevelMAPPO(FakePolicy(), cfg, ["r", "a"]).baseline == "group"
