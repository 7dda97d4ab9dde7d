"""GRPO on a tiny model: update direction, groupings x adapter layouts, KL, no critic."""

from __future__ import annotations

import math

import pytest
import torch

from agent_helpers import small_config, tiny, tiny_on_device  # noqa: F401 (fixture)
from marft_agents.config import ConfigError
from marft_agents.learners import GRPO
from marft_agents.settings.grpo import GRPOOptions
from marft_agents.run.trainer import prepare_trainer, train


def _grpo_config(tmp_path, **sections):
    base = {"algorithm": "grpo", "learner": {"group_size": 2}, "schedule.episodes_per_update": 4,
            "schedule.minibatch_size": 64, "schedule.num_updates": 1}
    return small_config(tmp_path, **{**base, **sections})


def _sequence_logprobs(policy, samples, temperature):
    with torch.no_grad():
        out = []
        for s in samples:
            stats = policy.token_logprobs(s.adapter, [s.prompt_ids], [s.response_ids], temperature,
                                          prefix_lens=[s.prefix_len])
            out.append(float(stats.logprobs.sum()))
        return torch.tensor(out)


def test_one_update_on_fixed_advantages_moves_logprobs_their_way(tmp_path, tiny):
    cfg = _grpo_config(tmp_path, **{"schedule.actor_lr": 5e-3, "ppo.clip_eps": 10.0})
    trainer = prepare_trainer(cfg, model_and_tokenizer=tiny)
    rollout = trainer.collector.collect(cfg.schedule.episodes_per_update)
    learner = trainer.learner
    samples = GRPO.build_samples(learner, rollout)
    signs = torch.tensor([1.0 if i % 2 == 0 else -1.0 for i in range(len(samples))])
    for s, sign in zip(samples, signs):
        s.advantages = sign.clone()
    learner.build_samples = lambda _rollout: samples  # fixed +/-1 advantages
    before = _sequence_logprobs(trainer.policy, samples, learner.temperature)
    metrics = learner.update(rollout, 0)
    after = _sequence_logprobs(trainer.policy, samples, learner.temperature)
    assert metrics["ppo/policy_trained"] == 1.0
    assert float((signs * (after - before)).sum()) > 0  # advantage-weighted log-prob change


@pytest.mark.parametrize("grouping, layout", [
    ("team", {}),
    ("agent", {"shared_adapter": True}),
    ("agent_turn", {"ppo.agent_iteration_interval": 1}),
])
def test_groupings_train_with_every_adapter_layout_and_no_critic(tmp_path, tiny, grouping, layout):
    cfg = _grpo_config(tmp_path, learner={"group_size": 2, "grouping": grouping, "normalisation": "mean"},
                       **{"env.kwargs": {"horizon": 2}, "schedule.minibatch_size": 4, **layout})
    trainer = prepare_trainer(cfg, model_and_tokenizer=tiny)
    policy = trainer.policy
    assert policy.critic_adapters == [] and len(policy.value_heads) == 0
    before = {k: v.clone() for k, v in policy.adapter_state_dict().items()}
    metrics = list(trainer.run())[-1]
    after = policy.adapter_state_dict()
    moved = {k.split("/")[1] for k in before if not torch.equal(before[k], after[k])}
    if "shared_adapter" in layout:
        assert moved == {"policy_shared"}
    elif "ppo.agent_iteration_interval" in layout:
        assert moved <= {"policy_reasoner_0"}  # only the first agent's adapter trains at update 0
        assert metrics["agent/reasoner_0/trained"] == 1.0 and metrics["agent/actor_0/trained"] == 0.0
    else:
        assert moved <= {"policy_reasoner_0", "policy_actor_0"}
    assert math.isfinite(metrics["losses/policy_loss"]) and math.isnan(metrics["losses/value_loss"])
    assert metrics["grpo/groups"] == 2.0


def test_kl_penalty_uses_the_reference_and_ppo_kl_is_refused(tmp_path, tiny):
    cfg = _grpo_config(tmp_path, learner={"group_size": 2, "kl_coef": 0.1, "aggregation": "sequence"})
    metrics = train(cfg, model_and_tokenizer=tiny).history[-1]
    assert metrics["losses/kl_ref"] == pytest.approx(0.0, abs=1e-6)  # adapters start at the base model
    with pytest.raises(ValueError, match="learner.kl_coef"):
        prepare_trainer(_grpo_config(tmp_path / "b", **{"ppo.kl_coef": 0.1}),
                        model_and_tokenizer=tiny_on_device(seed=0, hidden_size=32, num_layers=1))


def test_options_are_validated_like_the_rest_of_the_config(tmp_path):
    assert _grpo_config(tmp_path).learner == GRPOOptions(group_size=2)
    with pytest.raises(ConfigError, match="learner.grouping must be one of 'team', 'agent', 'agent_turn'"):
        _grpo_config(tmp_path, learner={"grouping": "role"})
    with pytest.raises(ConfigError, match="group_size must be >= 2"):
        _grpo_config(tmp_path, learner={"group_size": 1})


def test_grouped_grpo_run_resumes_exactly(tmp_path):
    from marft_agents.run.trainer import iter_train

    def tiny_model():
        return tiny_on_device(seed=0, hidden_size=32, num_layers=1)

    overrides = {"schedule.num_updates": 3, "schedule.minibatch_size": 4, "env.kwargs": {"horizon": 2},
                 "learner": {"group_size": 2, "grouping": "agent_turn"}}
    full = train(_grpo_config(tmp_path / "full", **overrides), model_and_tokenizer=tiny_model())
    cut = _grpo_config(tmp_path / "cut", **overrides)
    first = iter_train(cut, model_and_tokenizer=tiny_model())
    next(first)  # one update (checkpointed), then the "crash"
    first.close()
    resumed = train(cut, resume=True, model_and_tokenizer=tiny_model())
    a, b = full.policy.adapter_state_dict(), resumed.policy.adapter_state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    for key in ("rollout/reward_mean", "losses/policy_loss", "grpo/zero_advantage_share"):
        assert resumed.history[-1][key] == full.history[-1][key]
