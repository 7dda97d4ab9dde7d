"""The critic's health figures and the changes that make it learn.

The ceiling estimator against hand-computed values and against a population with a known
between-task share; the not-learning warning; PopArt's output preservation and checkpointing;
then a synthetic task with a known value function (a fixed policy, returns drawn from known
per-task success probabilities) on which the tiny model's critic must reach most of the ceiling
within a few updates, while the critic warm-up leaves the actor's adapter bit-identical.
"""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch

from agent_helpers import small_config, tiny, tiny_on_device  # noqa: F401 (fixture)
from marft_agents.model.critic import ValueHead
from marft_agents.episodes import Decision, EpisodeRecord, Rollout
from marft_agents.learners import make_learner
from marft_agents.learners.critic_health import (
    CriticWatch,
    between_task_split,
    critic_health,
    last_half,
    monte_carlo_returns,
    pooled_share,
)


# -- the ceiling, by hand ---------------------------------------------------------------------------
def test_between_task_split_by_hand():
    # means 0.5 and 0.25, grand mean 0.375; MSB = 4 * (0.125^2 + 0.125^2) / 1 = 0.125;
    # within sums of squares 1.0 and 0.75 -> MSW = 1.75 / (2 * 3) = 0.291666...
    split = between_task_split([[1, 1, 0, 0], [0, 0, 0, 1]])
    assert split.within == pytest.approx(1.75 / 6)
    assert split.between == pytest.approx((0.125 - 1.75 / 6) / 4)
    assert split.share == pytest.approx(split.between / (split.between + split.within))
    same = between_task_split([[1, 0], [1, 0], [0, 1]])  # every task 50 %: nothing between tasks
    assert same.between < 0 < same.within
    with pytest.raises(ValueError, match="one common size"):
        between_task_split([[1, 0], [1]])


def test_the_finite_k_correction_recovers_a_known_between_task_share():
    # success probabilities 0.1, 0.3, 0.7, 0.9: Var p = 0.1, E[p (1 - p)] = 0.15, so the best
    # critic explains 0.1 / 0.25 = 0.4 of the return variance. With k = 4 the uncorrected share
    # of the group means' variance would be (0.1 + 0.15 / 4) / 0.25 = 0.55. The estimator's sd
    # at 4000 groups is ~0.009 (ICC(1) large-sample variance); 0.04 is over 4 sd.
    rng = np.random.default_rng(0)
    p = np.tile([0.1, 0.3, 0.7, 0.9], 1000)
    groups = (rng.random((p.size, 4)) < p[:, None]).astype(float).tolist()
    assert between_task_split(groups).share == pytest.approx(0.4, abs=0.04)
    assert pooled_share([0.1, 0.1, float("nan")], [0.15, 0.15, 0.2]) == pytest.approx(0.4)


def test_last_half_pools_the_later_updates_by_hand():
    def row(step, ret, res, between, within, corr):
        return {"step": step, "critic/return_var": ret, "critic/residual_var_first": res,
                "critic/between_task_var": between, "critic/within_task_var": within,
                "critic/value_return_corr": corr}

    rows = [{"step": 0, "eval/accuracy": 0.1},  # the baseline row: no critic parts
            row(1, 0.2, 0.2, 0.0, 0.2, 0.0), row(2, 0.2, 0.2, 0.0, 0.2, 0.1),  # the earlier half
            row(3, 0.25, 0.2, 0.1, 0.15, 0.3), row(4, 0.25, 0.15, 0.1, 0.15, 0.6), row(5, 0.2, 0.13, 0.1, 0.1, None)]
    summary = last_half(rows)
    # updates 3-5: EV = 1 - mean(0.2, 0.15, 0.13) / mean(0.25, 0.25, 0.2) = 1 - 0.16 / 0.2333 = 0.3143;
    # ceiling = 0.1 / (0.1 + 0.1333) = 0.4286; ratio 0.7333
    assert (summary.first_update, summary.last_update, summary.updates) == (3, 5, 3)
    assert summary.ev_first == pytest.approx(1 - 0.16 / (0.7 / 3))
    assert summary.ceiling == pytest.approx(0.1 / (0.1 + 0.4 / 3))
    assert summary.ratio == pytest.approx(summary.ev_first / summary.ceiling)
    assert (summary.corr_min, summary.corr_max) == (0.3, 0.6)
    assert "0.73 of it" in summary.line()
    flat = last_half([row(k, 0.2, 0.2, 0.001, 0.2, 0.0) for k in (1, 2)])
    assert flat.ratio != flat.ratio and "too small to judge" in flat.line()  # NaN below MIN_CEILING
    assert last_half([{"step": 1, "losses/value_loss": 0.1}]) is None


def test_monte_carlo_returns():
    assert monte_carlo_returns([0.0, 1.0, 0.0, 2.0], [1.0, 0.5, 1.0, 0.5]) == pytest.approx([2.0, 2.0, 2.0, 2.0])
    assert monte_carlo_returns([1.0, 0.0], [0.9, 0.9]) == pytest.approx([1.0, 0.0])


def _rollout(returns_by_group, values=None, agents=("a",)):
    """One-round episodes of ``agents`` in a chain; the last decision closes the round."""
    decisions, episodes = [], []
    for group, returns in enumerate(returns_by_group):
        for ret in returns:
            e = len(episodes)
            ids = []
            for step, agent in enumerate(agents):
                last = step == len(agents) - 1
                ids.append(len(decisions))
                decisions.append(Decision(
                    env_index=0, episode=e, step=step, round=0, agent_id=agent, adapter=agent, observation="",
                    prompt_ids=[1, 2, 3 + group], response_ids=[7, 8], text="x", logprobs=[-1.0, -1.0],
                    value=None if values is None else values[group], team_reward=ret if last else 0.0,
                    closes_round=last, done=last, group=group, task_id=f"t{group}",
                    critic_prompt_ids=[1, 2, 3 + group]))
            episodes.append(EpisodeRecord(0, f"t{group}", decisions=ids, team_return=ret, group=group))
    return Rollout(decisions=decisions, episodes=episodes)


def test_critic_health_figures_by_hand():
    returns = [[1, 1, 0, 0], [0, 0, 0, 1]]
    perfect = _rollout(returns, values=[0.5, 0.25], agents=("r", "a"))
    first = [d.value for d in perfect.decisions]
    out = critic_health(perfect, first, "team", 1.0, torch.tensor([0.5, -0.5]))
    flat = torch.tensor([1, 1, 0, 0, 0, 0, 0, 1], dtype=torch.float64)
    residual = flat - torch.tensor([0.5] * 4 + [0.25] * 4, dtype=torch.float64)
    split = between_task_split(returns)  # grouped: the ceiling's footing, random-effects totals of G - V and of G
    # residuals 0.5, 0.5, -0.5, -0.5 | -0.25, -0.25, -0.25, 0.75: group means 0, MSW = 1.75 / 6, total = MSW (1 - 1/4)
    assert out["critic/residual_total_var"] == pytest.approx(1.75 / 6 * 0.75)
    assert out["critic/ev_first"] == pytest.approx(1 - 1.75 / 6 * 0.75 / (split.between + split.within))
    assert out["critic/residual_var_first"] == pytest.approx(float(residual.var(unbiased=False)))  # in-update figure
    assert out["critic/ev_ceiling"] == pytest.approx(between_task_split(returns).share)
    assert out["critic/return_std"] == pytest.approx(float(flat.std(unbiased=False)))
    assert out["critic/adv_abs_mean"] == pytest.approx(0.5)
    assert out["critic/value_return_corr"] > 0
    assert out["critic/ev_later"] == pytest.approx(1 - float(residual.var() / flat.var()))  # the usual EV
    constant = critic_health(perfect, [0.3] * len(first), "team", 1.0)
    assert constant["critic/ev_first"] == pytest.approx(0.0)  # a constant explains nothing, on this footing too
    assert constant["critic/ev_later"] == 0.0  # a constant explains nothing (EV ignores a bias)
    ungrouped = _rollout([[1], [0], [1]], values=[0.1, 0.2, 0.3])
    plain = critic_health(ungrouped, [0.1, 0.2, 0.3], "team", 1.0)
    assert "critic/ev_ceiling" not in plain and "critic/baseline_gain" not in plain
    g, v = torch.tensor([1.0, 0, 1], dtype=torch.float64), torch.tensor([0.1, 0.2, 0.3], dtype=torch.float64)
    assert plain["critic/ev_first"] == pytest.approx(1 - float((g - v).var() / g.var()))  # ungrouped: the usual EV


def test_the_watch_warns_once_after_the_window_and_again_after_a_recovery(caplog):
    watch = CriticWatch(window=3, min_ev=0.05)
    with caplog.at_level(logging.WARNING):
        fired = [watch.observe(u, ev) for u, ev in enumerate([0.0, 0.01, 0.02, 0.0, 0.3, 0.0, 0.0, 0.0])]
    assert fired == [False, False, True, False, False, False, False, True]
    assert caplog.text.count("the critic is not learning; MAPPO is behaving like REINFORCE") == 2
    assert not watch.observe(9, float("nan"))


# -- PopArt ---------------------------------------------------------------------------------------
def test_popart_preserves_outputs_and_tracks_the_targets():
    gen = torch.Generator().manual_seed(0)
    head = ValueHead(16, init_std=0.3, bias=0.2, generator=gen)
    hidden = torch.randn(64, 16, generator=gen)
    fresh_out = head(hidden)
    head.update_normaliser(torch.tensor([0.0, 0.0, 0.0, 1.0]), beta=0.9)  # the first fold keeps w, b:
    mu, sigma = 0.25, 0.1875 ** 0.5
    assert torch.allclose(head(hidden), sigma * fresh_out + mu, atol=1e-6)  # the head starts at the mean
    before = head(hidden)

    def magnitude():  # sum of the absolute terms of scale * (w . h + b) + shift, per row
        w, b = head.linear.weight.abs()[0], head.linear.bias.abs()
        return head.scale * (hidden.abs() @ w + b) + head.shift.abs()

    mag_before = magnitude()
    targets = torch.tensor([0.0, 1.0, 1.0, 1.0])  # mean 0.75, std sqrt(0.1875)
    for _ in range(30):  # the moving moments forget the first batch; outputs kept every time
        head.update_normaliser(targets, beta=0.5)
    # each side is a float32 dot product of 16 terms plus 3 operations, so each is within
    # gamma_19 = 19u/(1-19u) of its magnitude (u = 2^-24); the rescaled weights add one rounding each
    u = 2.0 ** -24
    bound = 30 * 20 * u / (1 - 20 * u) * (mag_before + magnitude())  # 30 folds, each within gamma_20
    assert ((head(hidden) - before).abs() <= bound).all()
    assert float(head.shift) == pytest.approx(0.75) and float(head.scale) == pytest.approx(0.1875 ** 0.5)
    for _ in range(5):  # debiased moments of a stationary stream stay that stream's
        head.update_normaliser(targets, beta=0.9)
    assert float(head.shift) == pytest.approx(0.75) and float(head.scale) == pytest.approx(0.1875 ** 0.5)
    fresh = ValueHead(16)
    fresh.update_normaliser(torch.zeros(8), beta=0.9)  # no spread yet: sigma stops at its floor
    assert float(fresh.scale) == pytest.approx(ValueHead.SCALE_FLOOR)
    assert float(fresh(hidden).detach().abs().max()) == 0.0


def test_feature_standardisation_preserves_outputs_and_standardises_what_it_saw():
    gen = torch.Generator().manual_seed(1)
    head = ValueHead(8, init_std=0.3, bias=0.1, generator=gen)
    # a large shared component plus a small spread: what a language model's last states look like
    states = 50.0 + 0.01 * torch.randn(200, 8, generator=gen)  # [N, H]
    with torch.no_grad():
        before = head(states)
    assert float(head.pending_count) == 0  # a forward pass gathers nothing: the caller hands the states over
    head.gather(states)
    assert float(head.pending_count) == 200
    assert head.fold_features(beta=0.9) and float(head.pending_count) == 0
    after = head(states)
    # the bias absorbs w . mean: terms of size |w| * 50 each, rounded in float32
    bound = 64 * 2.0 ** -24 * float(head.linear.weight.abs().sum() * 50 / head.feat_scale.min())
    assert (after - before).abs().max() <= max(bound, 1e-4)
    z = (states - head.feat_shift) / head.feat_scale
    assert torch.allclose(z.mean(0), torch.zeros(8), atol=1e-3) and torch.allclose(z.std(0, unbiased=False), torch.ones(8), atol=1e-3)
    assert not head.fold_features(beta=0.9)  # nothing gathered since


def test_value_head_buffers_travel_with_checkpoints_and_old_checkpoints_load(tiny):
    from marft_agents.model.policy import MultiAgentPolicy

    model, tokenizer = tiny
    policy = MultiAgentPolicy(model, tokenizer, ["a"])
    policy.value_heads["critic"].update_normaliser(torch.tensor([0.0, 1.0, 1.0]), beta=0.5)
    state = policy.adapter_state_dict()
    assert float(state["value_head/critic/shift"]) == pytest.approx(2 / 3)
    policy.value_heads["critic"].update_normaliser(torch.tensor([5.0, 9.0]), beta=0.5)
    policy.load_adapter_state_dict(state)
    assert float(policy.value_heads["critic"].shift) == pytest.approx(2 / 3)
    old = {k: v for k, v in state.items()
           if k.split("/")[-1] not in ("shift", "scale", "moments", "feat_shift", "feat_scale", "feat_moments",
                                       "feat_weight")}
    fresh = MultiAgentPolicy(*tiny_on_device(seed=0, hidden_size=32, num_layers=1), ["a"])
    fresh.load_adapter_state_dict(old)  # written before value_norm existed: a plain linear head
    assert float(fresh.value_heads["critic"].shift) == 0.0 and float(fresh.value_heads["critic"].scale) == 1.0


# -- the synthetic task with a known value function ------------------------------------------------
SUCCESS = (0.1, 0.3, 0.7, 0.9)
"""Per-task success probability of the fixed policy: the best critic explains Var p /
(Var p + E p(1-p)) = 0.1 / 0.25 = 0.4 of the first decisions' return variance."""
TRUE_CEILING = 0.4


def _known_value_run(tiny, updates: int, **overrides):
    """Train only the critic (warm-up for the whole run) on rollouts whose returns are drawn from
    ``SUCCESS``; values are recorded before each update, as the collector does. Returns the
    per-update metrics, and the actor adapter's parameters before and after."""
    from marft_agents.model.policy import MultiAgentPolicy
    from marft_agents.settings.critic import CriticConfig

    model, tokenizer = tiny
    cfg = small_config(__import__("pathlib").Path("/tmp"), **{
        "ppo.critic_warmup_updates": 10_000, "schedule.critic_lr": 1e-2, "schedule.actor_lr": 1e-2,
        "schedule.minibatch_size": 8, **overrides})
    policy = MultiAgentPolicy(model, tokenizer, ["a"], critic=cfg.critic or CriticConfig())
    learner = make_learner("mappo_action", policy, cfg, ["a"])
    rng = np.random.default_rng(0)
    prompts = [rng.integers(3, 60, size=6).tolist() for _ in SUCCESS]
    actor_before = {k: v.clone() for k, v in policy.adapter_state_dict().items() if k.startswith("lora/a/")}
    history = []
    for update in range(updates):
        returns = [(rng.random(8) < p).astype(float).tolist() for p in SUCCESS]  # 4 tasks x 8 episodes
        rollout = _rollout(returns)
        with torch.no_grad():
            values = policy.state_values(prompts, "a").tolist()
        for d in rollout.decisions:
            d.value = values[d.group]
            d.prompt_ids = d.critic_prompt_ids = prompts[d.group]
            d.adapter = policy.adapter_for(d.agent_id)
        history.append(learner.update(rollout, update))
    actor_after = {k: v for k, v in policy.adapter_state_dict().items() if k.startswith("lora/a/")}
    return history, actor_before, actor_after


def _pooled(history, key_b, key_w, start):
    return pooled_share([h[key_b] for h in history[start:]], [h[key_w] for h in history[start:]])


def test_the_critic_reaches_most_of_a_known_ceiling_in_a_few_updates(tiny):
    history, before, after = _known_value_run(tiny, updates=12)
    ceiling = _pooled(history, "critic/between_task_var", "critic/within_task_var", 0)
    assert ceiling == pytest.approx(TRUE_CEILING, abs=0.15)  # 12 x 4 groups of 8: a noisy estimate
    late = history[6:]
    ev = 1 - np.mean([h["critic/residual_var_first"] for h in late]) / np.mean([h["critic/return_var"] for h in late])
    print("ev_first per update", [round(h["critic/ev_first"], 3) for h in history], "pooled late", round(ev, 3))
    assert ev >= 0.7 * TRUE_CEILING, [round(h["critic/ev_first"], 3) for h in history]
    assert history[0]["critic/ev_first"] < 0.1  # it started knowing nothing
    # the warm-up trained no actor: its adapter is bit-identical
    assert before.keys() == after.keys() and all(torch.equal(before[k], after[k]) for k in before)
    assert all(h["ppo/policy_trained"] == 0.0 for h in history)


def test_a_frozen_critic_explains_nothing_on_the_same_task(tiny):
    # the same run with the critic's learning rate at 0 (a break check of the test above)
    history, _, _ = _known_value_run(tiny, updates=4, **{"schedule.critic_lr": 0.0})
    assert max(h["critic/ev_first"] for h in history) < 0.1


def test_critic_epochs_run_independently_of_the_policy_epochs(tiny, monkeypatch):
    from marft_agents.learners.base import BaseLearner

    calls = {"critic": 0, "policy": 0}
    original = BaseLearner._step

    def counting(self, adapters, batch, critic, **kwargs):
        calls["critic" if critic else "policy"] += 1
        return original(self, adapters, batch, critic, **kwargs)

    monkeypatch.setattr(BaseLearner, "_step", counting)
    _known_value_run(tiny, updates=1, **{"schedule.critic_epochs": 3, "ppo.critic_warmup_updates": 0})
    # 32 one-decision episodes in minibatches of 8: 4 steps per epoch
    assert calls == {"critic": 12, "policy": 4}


def test_the_value_head_gets_its_own_learning_rate(tiny):
    from marft_agents.model.policy import MultiAgentPolicy

    cfg = small_config(__import__("pathlib").Path("/tmp"), **{"schedule.critic_lr": 1e-3, "schedule.value_head_lr": 1e-2})
    policy = MultiAgentPolicy(*tiny, ["a"])
    learner = make_learner("mappo_action", policy, cfg, ["a"])
    groups = learner.optimizers["critic"].param_groups
    head = {id(p) for p in policy.value_heads["critic"].parameters()}
    assert [g["lr"] for g in groups] == [1e-3, 1e-2]
    assert {id(p) for p in groups[1]["params"]} == head and not head & {id(p) for p in groups[0]["params"]}
    same = small_config(__import__("pathlib").Path("/tmp"), **{"schedule.critic_lr": 1e-3})
    assert len(make_learner("mappo_action", policy, same, ["a"]).optimizers["critic"].param_groups) == 1


@pytest.mark.parametrize("standardise", [True, False])
def test_a_linear_head_finds_a_small_spread_only_with_standardised_features(standardise):
    # What SmolLM2's last hidden states look like to the head (benchmarks/critic_probe.py): a shared
    # component far larger than the part that tells tasks apart. The value is linear in that
    # part, so a standardised head fits it; a plain head under Adam's per-weight steps (the
    # learner's optimizer, at a critic learning rate) chases the shared component and stays
    # flat. With ``standardise=False`` this documents the failure the option exists for.
    gen = torch.Generator().manual_seed(0)
    tasks = torch.randn(16, 256, generator=gen)  # [T, H] what differs between tasks
    direction = torch.randn(256, generator=gen) / 16  # tasks @ direction ~ N(0, 1)
    p = torch.sigmoid(tasks @ direction)  # [T] success probability, a function of the task
    states = 20.0 + 0.02 * tasks  # [T, H]
    head = ValueHead(256)
    opt = torch.optim.AdamW(head.parameters(), lr=1e-4, weight_decay=0.0, eps=1e-8)
    for _ in range(40):  # 40 updates of 4 episodes per task: values recorded, then regression
        idx = torch.arange(16).repeat(4)
        returns = (torch.rand(idx.numel(), generator=gen) < p[idx]).float()
        if standardise:  # the learner hands over its first critic pass's states
            head.gather(states[idx])
        head.fold_features(0.9)
        head.update_normaliser(returns, 0.9)
        for _ in range(4):
            opt.zero_grad()
            loss = (((head(states[idx]) - returns) / head.scale) ** 2).mean()
            loss.backward()
            opt.step()
    with torch.no_grad():
        values = head(states)
    ev = 1 - float(((p - values) ** 2).mean() / p.var(unbiased=False))  # against the true values
    if standardise:
        assert ev > 0.5, ev
    else:
        assert ev < 0.2, ev


# -- one value-head slot per acting agent (critic.per_agent_head) --------------------------------------
def _two_position_states(gen: torch.Generator, tasks: int = 16, dims: int = 256):
    """States of two decision points per task, as a language model's last hidden states look
    to the head (``benchmarks/critic_probe.py``): the first agent's states sit on one shared component with a
    small task spread; the second agent's on another component, far from the first, with a
    wider spread of their own (its input also holds the first agent's output). Both have a
    value that is linear in the task's small spread."""
    task = torch.randn(tasks, dims, generator=gen)  # [T, H] what differs between tasks
    direction = torch.randn(dims, generator=gen) / 16  # task @ direction ~ N(0, 1)
    p = torch.sigmoid(task @ direction)  # [T] success probability of each task
    first = 20.0 + 0.02 * task  # [T, H]
    second = -10.0 + 0.02 * task + 1.0 * torch.randn(tasks, dims, generator=gen)  # [T, H]
    return p, first, second


@pytest.mark.parametrize("slots", [2, 1])
def test_a_slot_per_agent_lets_the_head_find_each_agents_task_spread(slots):
    # Both decisions of an episode carry its return. With one slot, one set of feature statistics
    # spans both decision points: the gap between them inflates every dimension's spread and
    # the first agent's task spread shrinks to almost nothing after standardisation. With
    # ``slots=1`` this documents the failure ``critic.per_agent_head`` exists for.
    gen = torch.Generator().manual_seed(0)
    p, first, second = _two_position_states(gen)
    head = ValueHead(256, slots=slots)
    opt = torch.optim.AdamW(head.parameters(), lr=1e-4, weight_decay=0.0, eps=1e-8)
    idx = torch.arange(16).repeat(4)  # 4 episodes per task
    states = torch.cat([first[idx], second[idx]])  # [2N, H]
    slot = torch.cat([torch.zeros(len(idx)), torch.full((len(idx),), slots - 1.0)]).long()  # [2N]
    for _ in range(40):
        returns = (torch.rand(idx.numel(), generator=gen) < p[idx]).float().repeat(2)  # [2N]
        head.gather(states, slot)
        head.fold_features(0.9)
        head.update_normaliser(returns, 0.9)
        for _ in range(4):
            opt.zero_grad()
            loss = (((head(states, slot) - returns) / head.scale) ** 2).mean()
            loss.backward()
            opt.step()
    with torch.no_grad():
        values = head(first, torch.zeros(16, dtype=torch.long))  # the first agent's values
    ev = 1 - float(((p - values) ** 2).mean() / p.var(unbiased=False))  # against the true values
    if slots == 2:
        assert ev > 0.5, ev
    else:
        assert ev < 0.2, ev


def test_each_slot_standardises_what_it_read_and_keeps_its_outputs():
    gen = torch.Generator().manual_seed(1)
    head = ValueHead(8, init_std=0.3, bias=0.1, generator=gen, slots=2)
    a = 5.0 + 0.1 * torch.randn(100, 8, generator=gen)  # [100, H] slot 0's states
    b = -3.0 + 2.0 * torch.randn(50, 8, generator=gen)  # [50, H] slot 1's states
    states, slot = torch.cat([a, b]), torch.cat([torch.zeros(100), torch.ones(50)]).long()
    with torch.no_grad():
        before = head(states, slot)
    head.gather(states, slot)
    assert head.pending_count.tolist() == [100.0, 50.0]
    assert head.fold_features(beta=0.9)
    with torch.no_grad():
        after = head(states, slot)
    torch.testing.assert_close(after, before, atol=1e-4, rtol=1e-5)  # folds keep every output
    torch.testing.assert_close(head.feat_shift[0], a.mean(0), atol=1e-5, rtol=0)
    torch.testing.assert_close(head.feat_shift[1], b.mean(0), atol=1e-5, rtol=0)
    torch.testing.assert_close(head.feat_scale[1], b.std(0, unbiased=False), atol=1e-4, rtol=1e-4)


def test_a_single_slot_head_from_an_older_checkpoint_serves_every_slot(tiny):
    from marft_agents.model.policy import MultiAgentPolicy
    from marft_agents.settings.critic import CriticConfig

    model, tokenizer = tiny
    old = MultiAgentPolicy(model, tokenizer, ["a", "b"],
                           critic=CriticConfig(per_agent_head=False, value_head_init_std=0.3))
    assert old.value_heads["critic"].slots == 1
    state = old.adapter_state_dict()
    ids = [[1, 5, 6, 7], [1, 5, 6, 7, 8, 9]]
    want = old.state_values(ids, "a").detach()
    # what checkpoints held before slots existed: an unsliced [H] feature shift and scale
    state = {k: (v[0] if k.split("/")[-1] in ("feat_shift", "feat_scale", "feat_moments", "feat_weight") else v)
             for k, v in state.items()}
    new = MultiAgentPolicy(*tiny_on_device(seed=0, hidden_size=32, num_layers=1), ["a", "b"], critic=CriticConfig())
    assert new.value_heads["critic"].slots == 2
    new.load_adapter_state_dict(state)
    for actors in (["a", "a"], ["b", "b"], ["a", "b"]):
        torch.testing.assert_close(new.state_values(ids, "a", actors=actors).detach(), want, atol=1e-6, rtol=0)
