"""Learners: credit assignment and targets by hand, then real updates on a tiny model."""

from __future__ import annotations

import logging

import pytest
import torch

from agent_helpers import SOLO, FakePolicy, small_config, tiny, tiny_on_device  # noqa: F401 (fixture)
from marft_agents.learners import ActionLevelMAPPO, TokenLevelMAPPO, assign_credit, make_learner
from marft_agents.episodes import Decision, EpisodeRecord, Rollout
from marft_agents.run.trainer import train


# -- targets by hand (no model) --------------------------------------------------------------------
def _decision(step, agent, rnd, value, closes, done=False, team=0.0, agent_reward=0.0, n_tokens=1):
    return Decision(env_index=0, episode=0, step=step, round=rnd, agent_id=agent, adapter=f"policy_{agent}",
                    observation="", prompt_ids=[1], response_ids=[5] * n_tokens, text="x",
                    logprobs=[-1.0] * n_tokens, value=value, token_values=[value] * n_tokens,
                    team_reward=team, agent_reward=agent_reward, closes_round=closes, done=done)


def _episode(agent_reward=0.0, n_tokens=1):
    # round 0: reasoner, actor (team reward 0); round 1: reasoner, actor (team reward 1, done)
    decisions = [
        _decision(0, "r", 0, 0.1, False, agent_reward=agent_reward, n_tokens=n_tokens),
        _decision(1, "a", 0, 0.2, True, agent_reward=agent_reward, n_tokens=n_tokens),
        _decision(2, "r", 1, 0.3, False, agent_reward=agent_reward, n_tokens=n_tokens),
        _decision(3, "a", 1, 0.4, True, done=True, team=1.0, agent_reward=agent_reward, n_tokens=n_tokens),
    ]
    return Rollout(decisions=decisions, episodes=[EpisodeRecord(0, "t", decisions=[0, 1, 2, 3])])


@pytest.mark.parametrize("strategy, rewards, discounts", [
    ("team", [0, 0, 0, 1], [1, 0.9, 1, 0.9]),
    ("step_discounted", [0, 0, 0, 1], [0.9, 0.9, 0.9, 0.9]),
    ("per_step", [0.5, 0.5, 0.5, 1.5], [1, 0.9, 1, 0.9]),
])
def test_assign_credit(strategy, rewards, discounts):
    r, g = assign_credit(_episode(agent_reward=0.5).decisions, strategy, 0.9)
    assert r == pytest.approx(rewards) and g == pytest.approx(discounts)




def _learner(cls, **ppo):
    cfg = small_config(__import__("pathlib").Path("/tmp"), **{f"ppo.{k}": v for k, v in ppo.items()})
    return cls(FakePolicy(), cfg, ["r", "a"])


@pytest.mark.parametrize("credit, returns", [
    # lambda = 1 gives Monte-Carlo returns. team: G3 = 1, G2 = 1, G1 = 0.9 * 1, G0 = 0.9
    ("team", [0.9, 0.9, 1.0, 1.0]),
    # every decision step discounted: 0.9^3, 0.9^2, 0.9, 1
    ("step_discounted", [0.729, 0.81, 0.9, 1.0]),
])
def test_action_level_targets_by_hand(credit, returns):
    learner = _learner(ActionLevelMAPPO, gamma=0.9, lam=1.0, credit=credit)
    samples = learner.build_samples(_episode())
    assert [float(s.returns) for s in samples] == pytest.approx(returns)
    assert [float(s.advantages) for s in samples] == pytest.approx([g - v for g, v in zip(returns, [0.1, 0.2, 0.3, 0.4])])


def test_token_level_equals_action_level_for_one_token_utterances():
    action = _learner(ActionLevelMAPPO, gamma=0.9, lam=0.8).build_samples(_episode(agent_reward=0.2))
    token = _learner(TokenLevelMAPPO, gamma=0.9, lam=0.8).build_samples(_episode(agent_reward=0.2))
    assert [float(s.advantages) for s in action] == pytest.approx([float(s.advantages[0]) for s in token])


def test_token_level_credit_reaches_first_token_undiscounted():
    samples = _learner(TokenLevelMAPPO, gamma=1.0, lam=1.0, gamma_token=1.0).build_samples(_episode(n_tokens=3))
    assert torch.allclose(torch.stack([s.returns for s in samples]), torch.ones(4, 3))


# -- real updates on a tiny model ------------------------------------------------------------------
def _snapshot(params):
    return [p.detach().clone() for p in params]


def _base_params(model):
    # peft wraps targeted layers (``q_proj.weight`` -> ``q_proj.base_layer.weight``)
    return {n.replace(".base_layer", ""): p.detach().clone() for n, p in model.named_parameters() if "lora_" not in n}


def test_agent_by_agent_trains_only_the_scheduled_adapter(tmp_path, tiny):
    model, tokenizer = tiny
    cfg = small_config(tmp_path, **{"ppo.agent_iteration_interval": 100})  # reasoner_0 trains throughout
    base_before = _base_params(model)
    from marft_agents.run.trainer import Trainer

    trainer = Trainer(cfg, (model, tokenizer))
    policy = trainer.policy
    before = {name: _snapshot(policy.adapter_parameters(name))
              for name in ("policy_reasoner_0", "policy_actor_0", "critic")}
    history = list(trainer.run())
    assert len(history) == 2 and all(m["agent/reasoner_0/trained"] == 1.0 for m in history)
    assert all(m["agent/actor_0/trained"] == 0.0 for m in history)
    trained = policy.adapter_parameters("policy_reasoner_0")
    assert trained and all(not torch.equal(a, b) for a, b in zip(before["policy_reasoner_0"], trained))
    assert all(torch.equal(a, b) for a, b in zip(before["policy_actor_0"], policy.adapter_parameters("policy_actor_0")))
    assert any(not torch.equal(a, b) for a, b in zip(before["critic"], policy.adapter_parameters("critic")))
    base_after = _base_params(model)
    assert base_before.keys() == base_after.keys()
    assert all(torch.equal(base_before[n], base_after[n]) for n in base_before)
    for key in ("losses/policy_loss", "losses/value_loss", "losses/entropy", "losses/approx_kl",
                "losses/clipfrac", "losses/explained_variance", "rollout/reward_mean",
                "agent/reasoner_0/reward", "agent/actor_0/length"):
        assert key in history[-1]
    assert history[-1]["losses/entropy"] > 0 and history[-1]["guard/skipped_steps"] == 0


@pytest.mark.parametrize("algorithm", ["ppo", "ppo_token"])
def test_single_agent_ppo_on_solo_profile(tmp_path, tiny, algorithm):
    cfg = small_config(tmp_path, algorithm=algorithm, **{"env.kwargs": {"profile": SOLO}, "schedule.num_updates": 1})
    result = train(cfg, model_and_tokenizer=tiny)
    metrics = result.history[-1]
    assert metrics["agent/actor_0/trained"] == 1.0 and metrics["ppo/policy_samples"] > 0
    assert set(k.split("/")[1] for k in metrics if k.startswith("agent/")) == {"actor_0"}
    with pytest.raises(ValueError, match="single-agent PPO"):
        make_learner("ppo", None, cfg, ["a_0", "b_0"])


def test_eval_only_changes_nothing(tmp_path, tiny):
    model, tokenizer = tiny
    cfg = small_config(tmp_path, algorithm="eval_only", **{"schedule.num_updates": 1})
    before = _base_params(model)
    result = train(cfg, model_and_tokenizer=(model, tokenizer))
    state = result.policy.adapter_state_dict()
    lora_b = [v for k, v in state.items() if "lora_B" in k]
    assert lora_b and all(torch.count_nonzero(v) == 0 for v in lora_b)  # still the zero init
    assert all(torch.equal(before[n], p) for n, p in _base_params(model).items())
    assert result.history[0]["ppo/policy_trained"] == 0.0


def test_nonfinite_loss_skips_the_step_and_logs(tmp_path, tiny, caplog):
    from marft_agents.run.trainer import Trainer

    cfg = small_config(tmp_path, **{"schedule.num_updates": 1, "ppo.normalize_advantages": False})
    trainer = Trainer(cfg, tiny)
    original = trainer.learner.build_samples

    def poisoned(rollout):
        samples = original(rollout)
        for s in samples:
            s.advantages = torch.full_like(s.advantages, float("nan"))
        return samples

    trainer.learner.build_samples = poisoned
    before = _snapshot(trainer.policy.adapter_parameters("policy_actor_0"))
    with caplog.at_level(logging.WARNING):
        metrics = next(trainer.run())
    assert metrics["guard/skipped_steps"] > 0
    assert "skipping a policy optimizer step" in caplog.text
    assert all(torch.equal(a, b) for a, b in zip(before, trainer.policy.adapter_parameters("policy_actor_0")))


def test_target_kl_stops_epochs_early_and_says_so(tmp_path, tiny, caplog):
    cfg = small_config(tmp_path, **{"schedule.num_updates": 1, "schedule.ppo_epochs": 3,
                                    "schedule.actor_lr": 0.05, "ppo.target_kl": 1e-9})
    with caplog.at_level(logging.WARNING):
        metrics = train(cfg, model_and_tokenizer=tiny).history[0]
    assert metrics["ppo/early_stopped"] == 1.0 and metrics["ppo/epochs_run"] < 3
    assert "stopping epochs early" in caplog.text


def test_kl_to_reference_and_critic_warmup(tmp_path, tiny):
    cfg = small_config(tmp_path, **{"ppo.kl_coef": 0.1, "ppo.critic_warmup_updates": 1,
                                    "ppo.logprob_reduction": "mean", "schedule.micro_batch_size": 1})
    history = train(cfg, model_and_tokenizer=tiny).history
    assert history[0]["ppo/policy_trained"] == 0.0 and history[0]["losses/policy_loss"] != history[0]["losses/policy_loss"]
    assert history[1]["ppo/policy_trained"] == 1.0 and history[1]["losses/kl_ref"] >= 0.0


@pytest.mark.parametrize("algorithm, rescore", [("mappo_action", False), ("mappo_token", False),
                                                ("mappo_action", True)])
def test_recomputed_logprobs_match_rollout_when_nothing_moves(tmp_path, tiny, algorithm, rescore):
    # With zero learning rates the policy never changes, so the training-time log-probs must
    # reproduce the sampling-time ones: ratio 1, approx-KL 0, nothing clipped.
    cfg = small_config(tmp_path, algorithm=algorithm, **{"schedule.num_updates": 1, "schedule.actor_lr": 0.0,
                                                          "schedule.critic_lr": 0.0, "sampling.temperature": 0.7,
                                                          "sampling.recompute_logprobs": rescore,
                                                          # a non-trivial critic and a tiny value clip: any
                                                          # difference between the critic input valued at
                                                          # collection and in the loss clips some values
                                                          # (PopArt's first fold moves a fresh head to the
                                                          # mean return on purpose: off here)
                                                          "critic": {"value_head_init_std": 0.5, "value_norm": False},
                                                          "ppo.value_clip": 1e-3})
    metrics = train(cfg, model_and_tokenizer=tiny).history[0]
    assert abs(metrics["losses/approx_kl"]) < 1e-6 and metrics["losses/clipfrac"] == 0.0
    assert metrics["losses/value_clipfrac"] == 0.0 and metrics["losses/value_loss"] > 0


@pytest.mark.parametrize("algorithm", ["mappo_action", "mappo_token"])
def test_learner_side_old_logprobs_give_ratio_exactly_one_in_bfloat16(tmp_path, algorithm):
    # bf16, several minibatches with different padding: the learner's own no-grad pass over its
    # micro-batches is the same arithmetic as the policy step's forward, so with nothing moving
    # every ratio is exactly 1 (approx-KL exactly 0), which sampling-time log-probs are not.
    overrides = {"schedule.num_updates": 1, "schedule.actor_lr": 0.0, "schedule.critic_lr": 0.0,
                 "schedule.episodes_per_update": 4, "schedule.minibatch_size": 3,
                 "sampling.temperature": 0.7, "sampling.max_new_tokens": 6, "model.dtype": "bfloat16"}

    def first_update(recompute: bool) -> dict:
        cfg = small_config(tmp_path / str(recompute), algorithm=algorithm,
                           **overrides, **{"ppo.recompute_old_logprobs": recompute})
        return train(cfg, model_and_tokenizer=tiny_on_device(seed=0, dtype="bfloat16")).history[0]

    exact, sampled = first_update(True), first_update(False)
    assert exact["losses/approx_kl"] == 0.0 and exact["losses/clipfrac"] == 0.0
    assert sampled["losses/approx_kl"] != 0.0


@pytest.mark.parametrize("algorithm", ["mappo_action", "mappo_token"])
@pytest.mark.parametrize("mode", ["centralised", "per_agent", "local"])
def test_every_critic_mode_trains_its_value_functions(tmp_path, tiny, algorithm, mode):
    from marft_agents.run.trainer import Trainer

    cfg = small_config(tmp_path, algorithm=algorithm, **{"critic": {"mode": mode}, "schedule.num_updates": 1})
    trainer = Trainer(cfg, tiny)
    names = ["critic_reasoner_0", "critic_actor_0"] if mode == "per_agent" else ["critic"]
    assert set(trainer.policy.critic_adapters) == set(names) and set(names) <= set(trainer.learner.optimizers)
    before = {n: _snapshot(trainer.policy.adapter_parameters(n)) for n in names}
    rollout = trainer.collector.collect(2)
    for d in rollout.decisions:  # the critic's input is recorded, as the mode says
        if mode == "local":
            assert d.critic_prompt_ids == d.prompt_ids and d.critic_prefix_len == d.prefix_len
        else:
            text = trainer.policy.tokenizer.decode(d.critic_prompt_ids)
            assert "TASK " in text and text.endswith(f"NEXT TO ACT: {d.agent_id} ({d.agent_id.rsplit('_', 1)[0]})")
    metrics = trainer.learner.update(rollout, 0)
    assert metrics["losses/value_loss"] == metrics["losses/value_loss"]  # not NaN
    for n in names:
        assert any(not torch.equal(a, b) for a, b in zip(before[n], trainer.policy.adapter_parameters(n))), n


# -- the engine: edge cases and reduction ----------------------------------------------------------
def test_episode_without_decisions_is_skipped_by_both_learners():
    rollout = _episode()
    rollout.episodes.append(EpisodeRecord(0, "empty", decisions=[]))
    for cls in (ActionLevelMAPPO, TokenLevelMAPPO):
        assert len(_learner(cls).build_samples(rollout)) == 4


def test_empty_utterance_reward_keeps_its_discount_at_token_level():
    # step_discounted, gamma 0.5: decision 2 says nothing, so it is folded into decision 1; the
    # returns of the kept decisions must be those of the full sequence.
    rollout = _episode()
    d = rollout.decisions
    d[2].response_ids, d[2].logprobs, d[2].token_values = [], [], []
    d[2].closes_round, d[2].team_reward = True, 0.4  # the empty utterance is paid 0.4
    learner = _learner(TokenLevelMAPPO, gamma=0.5, lam=1.0, credit="step_discounted")
    samples = learner.build_samples(rollout)
    assert [s.agent_id for s in samples] == ["r", "a", "a"]
    # full sequence: G3 = 1; G2 (empty) = 0.4 + 0.5 * 1 = 0.9; G1 = 0.5 * 0.9 = 0.45; G0 = 0.225
    assert [float(s.returns[0]) for s in samples] == pytest.approx([0.225, 0.45, 1.0])


def _policy_grads(learner, batch):
    for p in learner.policy.trainable_parameters():
        p.grad = None
    learner._accumulate(batch, critic=False)
    return {id(p): p.grad.detach().clone() for p in learner.policy.trainable_parameters() if p.grad is not None}


@pytest.mark.parametrize("algorithm", ["mappo_action", "mappo_token"])
def test_micro_batch_accumulation_equals_the_whole_minibatch_with_entropy_and_kl(tmp_path, tiny, algorithm):
    from marft_agents.run.trainer import Trainer

    cfg = small_config(tmp_path, algorithm=algorithm, **{
        "ppo.entropy_coef": 0.1, "ppo.kl_coef": 0.2, "schedule.episodes_per_update": 3,
        "sampling.max_new_tokens": 6})
    trainer = Trainer(cfg, tiny)
    learner, policy = trainer.learner, trainer.policy
    torch.manual_seed(9)  # a draw whose responses have unequal lengths (asserted below)
    for p in policy.trainable_parameters():  # move off the zero LoRA-B init so every factor has a gradient
        p.data.add_(0.05 * torch.randn_like(p))
    rollout = trainer.collector.collect(3)
    policy.set_trainable(None, critic=True)
    samples = learner.build_samples(rollout)
    learner._attach_reference_logprobs(samples)
    lengths = {len(s.response_ids) for s in samples}
    assert len(samples) >= 4 and len(lengths) > 1  # unequal lengths: where per-micro-batch means go wrong
    whole = _policy_grads(learner, samples)
    learner.schedule.micro_batch_size = 1
    split = _policy_grads(learner, samples)
    assert whole.keys() == split.keys() and whole
    num = sum(float((whole[k] - split[k]).norm() ** 2) for k in whole) ** 0.5
    den = sum(float(whole[k].norm() ** 2) for k in whole) ** 0.5
    assert den > 0 and num / den < 1e-5, num / den


@pytest.mark.parametrize("overrides, match", [
    ({"sampling.top_p": 0.9}, "top_p"),
    ({"sampling.top_k": 20}, "top_k"),
    ({"lora": {"dropout": 0.1}}, "lora.dropout"),
    ({"critic": {"lora": {"dropout": 0.05}}}, "critic.lora.dropout"),
])
def test_training_configs_reject_what_ppo_cannot_score(tmp_path, overrides, match):
    from marft_agents.config import ConfigError

    with pytest.raises(ConfigError, match=match):
        small_config(tmp_path, **overrides)
    small_config(tmp_path, algorithm="eval_only", **overrides)  # evaluation may truncate / carry dropout


# -- the update moves the right way, and only the scheduled adapters ------------------------------
def _sequence_logprobs(policy, samples):
    out = []
    with torch.no_grad():
        for s in samples:
            stats = policy.token_logprobs(s.adapter, [s.prompt_ids], [s.response_ids], 1.0, with_entropy=False,
                                          prefix_lens=[s.prefix_len])
            out.append(float(stats.logprobs[0, : len(s.response_ids)].sum()))
    return torch.tensor(out)


@pytest.mark.parametrize("algorithm", ["mappo_action", "mappo_token"])
@pytest.mark.parametrize("mode", ["centralised", "per_agent", "local"])
def test_one_update_on_fixed_advantages_raises_the_advantaged_log_probs(tmp_path, tiny, algorithm, mode):
    from marft_agents.run.trainer import Trainer

    cfg = small_config(tmp_path, algorithm=algorithm, **{
        "critic": {"mode": mode}, "ppo.normalize_advantages": False, "schedule.episodes_per_update": 3,
        "schedule.minibatch_size": 64, "schedule.actor_lr": 1e-3, "sampling.max_new_tokens": 5})
    trainer = Trainer(cfg, tiny)
    learner = trainer.learner
    captured = []
    original = learner.build_samples

    def fixed_advantages(rollout):
        samples = original(rollout)
        for i, s in enumerate(samples):  # +1, -1, +1, ... whatever the critic said
            s.advantages = torch.full_like(s.advantages, 1.0 if i % 2 == 0 else -1.0)
        captured.extend(s for s in samples if s.response_ids)
        return samples

    learner.build_samples = fixed_advantages
    rollout = trainer.collector.collect(3)
    before = None

    def snapshot_then(rollout_):
        nonlocal before
        samples = fixed_advantages(rollout_)
        before = _sequence_logprobs(trainer.policy, captured)
        return samples

    learner.build_samples = snapshot_then
    metrics = learner.update(rollout, 0)
    assert metrics["ppo/policy_trained"] == 1.0 and metrics["guard/skipped_steps"] == 0
    after = _sequence_logprobs(trainer.policy, captured)
    signs = torch.tensor([float(s.advantages.reshape(-1)[0]) for s in captured])
    assert (signs > 0).any() and (signs < 0).any()
    moved = float((signs * (after - before)).sum())
    assert moved > 0, f"advantage-weighted log-prob change {moved} should be positive"


def _adapter_snapshot(policy):
    return {name: _snapshot(policy.adapter_parameters(name)) for name in policy.adapter_names}


def _changed(before, policy):
    return {name for name, old in before.items()
            if any(not torch.equal(a, b) for a, b in zip(old, policy.adapter_parameters(name)))}


def test_agent_by_agent_rotation_trains_exactly_the_scheduled_adapter(tmp_path, tiny):
    from marft_agents.run.trainer import Trainer

    trio = {"name": "ttrio", "roles": [{"name": "reasoner", "system_prompt": "Think."},
                                       {"name": "actor", "system_prompt": "Act."},
                                       {"name": "verifier", "system_prompt": "Check.", "graded": True}]}
    cfg = small_config(tmp_path, **{"env.kwargs": {"profile": trio, "horizon": 1}, "schedule.num_updates": 4,
                                    "ppo.agent_iteration_interval": 1, "schedule.checkpoint_interval": 0,
                                    "critic": {"value_head_bias": 0.5}, "schedule.episodes_per_update": 3})
    trainer = Trainer(cfg, tiny)
    agents = ["reasoner_0", "actor_0", "verifier_0"]
    runner = trainer.run()
    for update in range(4):  # a full rotation, and back to the first agent
        before = _adapter_snapshot(trainer.policy)
        metrics = next(runner)
        scheduled = agents[update % 3]
        assert _changed(before, trainer.policy) == {f"policy_{scheduled}", "critic"}, update
        assert [metrics[f"agent/{a}/trained"] for a in agents] == [float(a == scheduled) for a in agents]


def test_an_agent_without_decisions_is_not_reported_as_trained(tmp_path, tiny):
    from marft_agents.run.trainer import Trainer

    trainer = Trainer(small_config(tmp_path, **{"schedule.num_updates": 1, "critic": {"value_head_bias": 0.5}}), tiny)
    original = trainer.learner.build_samples
    trainer.learner.build_samples = lambda rollout: [s for s in original(rollout) if s.agent_id != "actor_0"]
    metrics = next(trainer.run())
    assert metrics["agent/reasoner_0/trained"] == 1.0 and metrics["agent/actor_0/trained"] == 0.0


@pytest.mark.parametrize("algorithm", ["mappo_action", "grpo"])
def test_first_minibatch_old_logprobs_from_its_own_pass_change_nothing(tmp_path, algorithm):
    # bf16, several minibatches, a learning rate: taking the first minibatch's old log-probs from
    # its own policy pass must give the update that rescoring every minibatch gives, bit for bit,
    # with one no-grad pass fewer per policy adapter.
    from marft_agents.run.trainer import Trainer

    overrides = {"schedule.num_updates": 1, "schedule.actor_lr": 0.05, "schedule.episodes_per_update": 4,
                 "schedule.minibatch_size": 3, "sampling.temperature": 0.7, "sampling.max_new_tokens": 6,
                 "model.dtype": "bfloat16", "ppo.recompute_old_logprobs": True}
    if algorithm == "grpo":
        overrides["learner"] = {"group_size": 2}

    def one_update(reuse: bool):
        cfg = small_config(tmp_path / str(reuse), algorithm=algorithm, **overrides)
        trainer = Trainer(cfg, tiny_on_device(seed=0, dtype="bfloat16"))
        trainer.learner.reuse_first_forward = reuse
        rollout = trainer.collector.collect(cfg.schedule.episodes_per_update)
        calls = []
        original = trainer.policy.token_logprobs

        def counted(*args, **kwargs):
            calls.append(torch.is_grad_enabled())
            return original(*args, **kwargs)

        trainer.policy.token_logprobs = counted
        metrics = trainer.learner.update(rollout, 0)
        params = [p.detach().clone() for name in trainer.policy.policy_adapters
                  for p in trainer.policy.adapter_parameters(name)]
        return metrics, params, calls.count(False)

    (reused, reused_params, reused_rescores), (full, full_params, full_rescores) = one_update(True), one_update(False)
    assert 0 < reused_rescores < full_rescores
    assert reused["losses/approx_kl"] == full["losses/approx_kl"] and reused["losses/policy_loss"] == full["losses/policy_loss"]
    assert any(not torch.equal(p, torch.zeros_like(p)) for p in full_params)
    assert all(torch.equal(a, b) for a, b in zip(reused_params, full_params))
