"""The value head's cross-validated ridge refit (``critic.head_refit_window``,
``marft_agents/learners/head_refit.py``)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from agent_helpers import small_config, tiny, tiny_on_device  # noqa: F401 (fixture)
from marft_agents.config import ConfigError
from marft_agents.model.critic import ValueHead
from marft_agents.episodes import Decision, EpisodeRecord, Rollout
from marft_agents.learners import make_learner
from marft_agents.learners.critic_health import pooled_share
from marft_agents.learners.head_refit import Batch, RefitBuffer, refit_head, ridge_refit


# -- the solver ----------------------------------------------------------------------------------------
def _linear_tasks(gen, tasks=24, per_task=4, dims=16, noise=0.1):
    """Points of ``tasks`` tasks whose target is linear in the task's features plus noise."""
    feats = torch.randn(tasks, dims, generator=gen, dtype=torch.float64)  # [T, H]
    w_true = torch.randn(dims, generator=gen, dtype=torch.float64)  # [H]
    idx = torch.arange(tasks).repeat_interleave(per_task)  # [n]
    t = feats[idx] @ w_true + 0.5 + noise * torch.randn(idx.numel(), generator=gen, dtype=torch.float64)  # [n]
    return feats[idx], t, [f"t{int(i)}" for i in idx], w_true


def test_the_ridge_recovers_a_linear_target_and_says_it_beat_the_current_head():
    z, t, tasks, w_true = _linear_tasks(torch.Generator().manual_seed(0))
    result = ridge_refit(z, t, tasks, torch.zeros(16), 0.0)
    assert result is not None and result.relative_lambda is not None
    assert result.cv_chosen < 0.1 * result.cv_current  # held-out tasks are predicted
    torch.testing.assert_close(result.weight.double(), w_true, atol=0.1, rtol=0)
    assert result.bias == pytest.approx(0.5, abs=0.1)


def test_a_shrunk_head_is_scaled_up_where_too_few_tasks_would_not_fit_the_weights():
    # the failure the refit exists for: a head that ranks the tasks (its weights point the right
    # way) with values spread 5x too little; 12 tasks in 200 dimensions are too few to find the
    # weights from scratch, enough to find the head's scale
    gen = torch.Generator().manual_seed(5)
    w_true = torch.randn(200, generator=gen, dtype=torch.float64) / 200 ** 0.5
    w0 = 0.2 * (w_true + 0.3 * torch.randn(200, generator=gen, dtype=torch.float64) / 200 ** 0.5)
    feats = torch.randn(12, 200, generator=gen, dtype=torch.float64)
    idx = torch.arange(12).repeat_interleave(4)
    t = feats[idx] @ w_true + 0.3 * torch.randn(48, generator=gen, dtype=torch.float64)
    result = ridge_refit(feats[idx], t, [int(i) for i in idx], w0.float(), 0.0)
    fresh = torch.randn(500, 200, generator=gen, dtype=torch.float64)  # unseen tasks
    truth = fresh @ w_true

    def ev(w, b):
        return 1 - float(((fresh @ w.double() + b - truth) ** 2).mean() / truth.var())

    print("ev current", ev(w0, 0.0), "refit", ev(result.weight, result.bias), "lambda", result.relative_lambda)
    assert ev(w0, 0.0) < 0.5 and ev(result.weight, result.bias) > 0.7


def test_the_current_head_is_kept_when_nothing_generalises_to_held_out_tasks():
    # each task's target is its own coin, unrelated to its features: fitting the training tasks
    # cannot predict a held-out one, so cross-validation keeps the current (right-mean) head
    gen = torch.Generator().manual_seed(1)
    feats = torch.randn(12, 64, generator=gen, dtype=torch.float64)
    idx = torch.arange(12).repeat_interleave(4)
    t = torch.randn(12, generator=gen, dtype=torch.float64)[idx]
    w0 = torch.zeros(64)
    result = ridge_refit(feats[idx], t, [int(i) for i in idx], w0, float(t.mean()))
    assert result is not None
    if result.relative_lambda is None:
        assert torch.equal(result.weight, w0) and result.cv_chosen == result.cv_current
    else:  # a heavily shrunk fit may edge out the constant, never by much
        assert result.relative_lambda >= 10.0 and result.cv_chosen > 0.8 * result.cv_current


def test_folds_hold_out_whole_tasks():
    # targets identical within a task and features identical within a task (a first decision's
    # state): holding out single episodes would let a task's twins predict it perfectly; whole
    # tasks held out, noise features predict nothing
    gen = torch.Generator().manual_seed(2)
    feats = torch.randn(10, 200, generator=gen, dtype=torch.float64)
    idx = torch.arange(10).repeat_interleave(4)
    t = torch.randn(10, generator=gen, dtype=torch.float64)[idx]
    result = ridge_refit(feats[idx], t, [int(i) for i in idx], torch.zeros(200), float(t.mean()))
    assert result.cv_chosen > 0.8 * result.cv_current


def test_too_few_tasks_are_not_refit():
    z, t, _, _ = _linear_tasks(torch.Generator().manual_seed(3), tasks=2)
    assert ridge_refit(z, t, ["a"] * 4 + ["b"] * 4, torch.zeros(16), 0.0) is None


def test_refit_head_writes_each_slot_in_the_heads_own_units():
    # a head with folded feature statistics and PopArt moments: the refit must fit w, b such that
    # the head's *output* predicts the raw targets
    gen = torch.Generator().manual_seed(4)
    x, t, tasks, _ = _linear_tasks(gen, tasks=30, dims=16, noise=0.0)
    x = (10.0 + 0.1 * x).float()  # a large shared component, a small spread
    head = ValueHead(16, slots=2)
    head.gather(x, torch.zeros(len(x), dtype=torch.long))
    head.fold_features(0.9)
    head.update_normaliser(t.float(), 0.9)
    slots = torch.zeros(len(x), dtype=torch.long)
    figures = refit_head(head, Batch(x, slots, t.float(), tasks))
    assert figures["critic/refit_slots"] == 1.0 and figures["critic/refit_cv_gain"] > 0.9
    with torch.no_grad():
        fitted = head(x, slots)
    assert float(((fitted - t.float()) ** 2).mean()) < 0.01 * float(t.var())
    assert torch.count_nonzero(head.linear.weight[1]) == 0  # slot 1 read nothing and kept its weights


def test_the_buffer_keeps_the_last_window_and_survives_a_state_dict_round_trip():
    buffer = RefitBuffer(2)
    for u in range(3):
        buffer.add("critic", Batch(torch.full((2, 3), float(u)), torch.zeros(2, dtype=torch.long),
                                   torch.tensor([u, u + 0.5]), [(u, 0), (u, 1)]))
    kept = buffer.points("critic")
    assert kept.features[:, 0].tolist() == [1.0, 1.0, 2.0, 2.0] and kept.tasks == [(1, 0), (1, 1), (2, 0), (2, 1)]
    again = RefitBuffer(2)
    again.load_state_dict(buffer.state_dict())
    assert torch.equal(again.points("critic").targets, kept.targets) and again.points("critic").tasks == kept.tasks
    with pytest.raises(ValueError, match="window must be >= 1"):
        RefitBuffer(0)


# -- in the learner: fresh tasks whose difficulty is visible ---------------------------------------------
EASY, HARD = 0.9, 0.1
MARKERS = {EASY: 11, HARD: 23}
"""The last token of a task's prompt says its success probability: Var p / (Var p + E p(1-p)) =
0.16 / 0.25 = 0.64 of the first decisions' return variance is the best any critic explains."""
TRUE_CEILING = 0.64


def _visible_difficulty_run(tiny, updates: int, **overrides):
    """Critic-only updates (warm-up for the whole run) on rollouts of 8 fresh tasks x 4 episodes,
    each task easy or hard as its prompt's last token says; values recorded before each update,
    as the collector does. Returns the per-update metrics."""
    from marft_agents.model.policy import MultiAgentPolicy
    from marft_agents.settings.critic import CriticConfig

    model, tokenizer = tiny
    cfg = small_config(__import__("pathlib").Path("/tmp"), **{
        "ppo.critic_warmup_updates": 10_000, "schedule.minibatch_size": 8, **overrides})
    policy = MultiAgentPolicy(model, tokenizer, ["a"], critic=cfg.critic or CriticConfig())
    learner = make_learner("mappo_action", policy, cfg, ["a"])
    rng = np.random.default_rng(0)
    history = []
    for update in range(updates):
        probs = [EASY, HARD] * 4
        prompts = [rng.integers(30, 60, size=5).tolist() + [MARKERS[p]] for p in probs]
        with torch.no_grad():
            values = policy.state_values(prompts, "a").tolist()
        decisions, episodes = [], []
        for group, p in enumerate(probs):
            for ret in (rng.random(4) < p).astype(float):
                decisions.append(Decision(
                    env_index=0, episode=len(episodes), step=0, round=0, agent_id="a", adapter="a", observation="",
                    prompt_ids=prompts[group], response_ids=[7, 8], text="x", logprobs=[-1.0, -1.0],
                    value=values[group], team_reward=float(ret), closes_round=True, done=True, group=group,
                    task_id=f"u{update}t{group}", critic_prompt_ids=prompts[group]))
                episodes.append(EpisodeRecord(0, f"u{update}t{group}", decisions=[len(decisions) - 1],
                                              team_return=float(ret), group=group))
        history.append(learner.update(Rollout(decisions=decisions, episodes=episodes), update))
    return history, learner


def _late(history, start):
    """Pooled first-decision EV and measured ceiling over ``history[start:]``."""
    late = history[start:]
    ev = 1 - np.mean([h["critic/residual_var_first"] for h in late]) / np.mean([h["critic/return_var"] for h in late])
    ceiling = pooled_share([h["critic/between_task_var"] for h in late], [h["critic/within_task_var"] for h in late])
    return ev, ceiling


def test_the_refit_alone_finds_a_visible_difficulty_on_fresh_tasks(tiny):
    # the gradient is off (critic_lr 0): whatever the head learns, the refit found, and it must
    # generalise to the next update's unseen tasks (values are recorded before training on them)
    history, _ = _visible_difficulty_run(tiny, updates=8, **{"schedule.critic_lr": 0.0,
                                                             "critic.head_refit_window": 4})
    ev, ceiling = _late(history, 3)
    print("ev_first per update", [round(h["critic/ev_first"], 3) for h in history], "late", round(ev, 3),
          "of", round(ceiling, 3))
    assert ceiling == pytest.approx(TRUE_CEILING, abs=0.2)  # 5 x 8 tasks of 4: a noisy estimate
    assert ev >= 0.7 * ceiling, [round(h["critic/ev_first"], 3) for h in history]
    assert history[0]["critic/ev_first"] < 0.1  # it started knowing nothing
    assert history[0]["critic/refit_slots"] == 1.0  # the first refit beat the fresh head
    assert all(np.isfinite(h["critic/refit_cv_gain"]) and h["critic/refit_points"] > 0 for h in history)


def test_without_the_refit_a_frozen_head_finds_nothing_on_the_same_tasks(tiny):
    # the same run without the refit: the break check of the test above (nothing else learns)
    history, _ = _visible_difficulty_run(tiny, updates=4, **{"schedule.critic_lr": 0.0})
    assert max(h["critic/ev_first"] for h in history) < 0.1
    assert "critic/refit_slots" not in history[-1]


def test_the_refit_window_resumes_with_the_learner(tiny):
    history, learner = _visible_difficulty_run(tiny, updates=3, **{"schedule.critic_lr": 0.0,
                                                                   "critic.head_refit_window": 2})
    state = learner.state_dict()
    assert [len(b["tasks"]) for b in state["head_refit"]["critic"]] == [32, 32]
    from marft_agents.model.policy import MultiAgentPolicy

    cfg = small_config(__import__("pathlib").Path("/tmp"), **{"critic.head_refit_window": 2})
    fresh = make_learner("mappo_action", MultiAgentPolicy(*tiny_on_device(seed=0, hidden_size=32, num_layers=1), ["a"]),
                         cfg, ["a"])
    fresh.load_state_dict(state)
    assert fresh.value_fit.refit.points("critic").tasks == learner.value_fit.refit.points("critic").tasks
    old = {k: v for k, v in state.items() if k != "head_refit"}  # saved before the refit was on
    fresh.load_state_dict(old)
    assert fresh.value_fit.refit.points("critic") is None


def test_token_level_learners_refuse_a_refit_window(tmp_path):
    with pytest.raises(ConfigError, match="only state values"):
        small_config(tmp_path, algorithm="mappo_token", **{"critic.head_refit_window": 4})
    with pytest.raises(Exception, match="head_refit_window must be >= 0"):
        small_config(tmp_path, **{"critic.head_refit_window": -1})
