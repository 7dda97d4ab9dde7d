"""Training-memory options and device defaults: gradient checkpointing (same gradients, the
one-adapter-per-backward guard), micro-batches capped by tokens (same gradients whatever the
split), ``model.device: auto``, ``model.attn_implementation`` and loading onto the device."""

from __future__ import annotations

import pytest
import torch

from agent_helpers import DEVICE, small_config, tiny, tiny_on_device  # noqa: F401 (fixture)
from marft_agents.config import ConfigError, config_from_dict, config_to_dict
from marft_agents.engine.attention import training_passes
from marft_agents.learners.samples import Sample
from marft_agents.model.policy import AdapterSwitchError, MultiAgentPolicy
from marft_agents.settings.model import ModelConfig
from marft_agents.run.trainer import Trainer

# Tolerance of the gradient comparisons, relative to the gradient's norm. With checkpointing the
# backward recomputes each layer with the same float32 operations on the same inputs, and a
# different micro-batch split only regroups float32 sums of the same terms (rows padded to other
# widths: padding is masked out exactly), so the gradients agree to float32 rounding of sums
# over a few hundred terms (~1e-7 relative); 1e-5 leaves room for that and for nondeterministic
# GPU kernels, while a wrong gradient (another adapter, a dropped term) is off by O(1).
RTOL = 1e-5


def _relative_gap(a: dict, b: dict) -> float:
    assert a.keys() == b.keys() and a
    num = sum(float((a[k] - b[k]).norm() ** 2) for k in a) ** 0.5
    den = sum(float(a[k].norm() ** 2) for k in a) ** 0.5
    assert den > 0
    return num / den


def _grads(learner, samples, critic):
    """The gradient one minibatch step accumulates (no optimizer step), per parameter."""
    params = learner.policy.trainable_parameters()
    for p in params:
        p.grad = None
    with training_passes():
        learner._accumulate(samples, critic=critic)
    return {i: p.grad.detach().clone() for i, p in enumerate(params) if p.grad is not None}


def _trainer_with_samples(tmp_path, tiny, algorithm, **sections):
    overrides = {"algorithm": algorithm, "schedule.episodes_per_update": 4, "sampling.max_new_tokens": 6,
                 "ppo.entropy_coef": 0.1, **sections}
    if algorithm == "grpo":
        overrides.update({"learner": {"group_size": 2, "kl_coef": 0.1}})
    else:
        overrides["ppo.kl_coef"] = 0.1
    trainer = Trainer(small_config(tmp_path, **overrides), tiny)
    policy = trainer.policy
    torch.manual_seed(3)
    for p in policy.trainable_parameters():  # off the zero LoRA-B init: every factor gets a gradient
        p.data.add_(0.05 * torch.randn_like(p))
    rollout = trainer.collector.collect(4)
    policy.set_trainable(None, critic=bool(policy.critic_adapters))
    learner = trainer.learner
    samples = learner.build_samples(rollout)
    learner._attach_reference_logprobs(samples)  # the KL term's reference passes, under using(None)
    return trainer, samples


def _count_layer_calls(policy):
    """Calls of the first decoder layer's query projection (forward passes and recomputations)."""
    calls = []
    layer = policy.lm.get_decoder().layers[0]
    handle = layer.self_attn.q_proj.register_forward_pre_hook(lambda m, a: calls.append(a[0].shape))
    return calls, handle


# -- gradient checkpointing ------------------------------------------------------------------------
@pytest.mark.parametrize("algorithm", ["mappo_action", "mappo_token", "grpo"])
def test_checkpointed_update_has_the_same_gradients(tmp_path, tiny, algorithm):
    trainer, samples = _trainer_with_samples(tmp_path, tiny, algorithm)
    learner, policy = trainer.learner, trainer.policy
    assert len({s.adapter for s in samples}) == 2  # two agents: several adapters in one minibatch
    assert any(s.prefix_len for s in samples)  # shared-prefix passes: the KV cache is recomputed too
    passes = [False] + ([True] if learner.critic_values is not None else [])
    plain = {critic: _grads(learner, samples, critic) for critic in passes}
    assert policy.checkpointed_layers == 0
    assert policy.enable_gradient_checkpointing() == len(policy.lm.get_decoder().layers)
    checkpointed = {critic: _grads(learner, samples, critic) for critic in passes}
    policy.enable_gradient_checkpointing()  # idempotent: no second wrapper
    # a pass with grad runs each layer twice: forward, then again in the backward (the
    # recomputation); a pass without grad once
    s = samples[0]
    calls, handle = _count_layer_calls(policy)
    with torch.no_grad():
        policy.token_logprobs(s.adapter, [s.prompt_ids], [s.response_ids], prefix_lens=[s.prefix_len])
    once = len(calls)
    policy.token_logprobs(s.adapter, [s.prompt_ids], [s.response_ids], prefix_lens=[s.prefix_len]).logprobs.sum().backward()
    handle.remove()
    assert once >= 1 and len(calls) == 3 * once
    for critic in passes:
        gap = _relative_gap(plain[critic], checkpointed[critic])
        assert gap < RTOL, (critic, gap)


def test_recomputation_takes_the_training_pass_path_of_its_forward(monkeypatch):
    """bfloat16 on a CPU: the update's passes run marft's grouped-matmul attention and RMSNorm
    (``training_passes``). A backward that runs outside that block (or in autograd's device
    thread) must still recompute on that path: same gradients, bit for bit on a CPU."""
    from marft_agents.engine import compiled_norm
    from marft_agents.model.tiny_models import tiny_model_and_tokenizer

    # the compiled RMSNorm's formula without the compiler's minute on a small machine (the
    # compiled version is the same function: test_compiled_norm.py)
    monkeypatch.setattr(compiled_norm, "_compiled_rms_norm", compiled_norm.rms_norm)
    model, tokenizer = tiny_model_and_tokenizer(seed=0, hidden_size=32, num_layers=2, dtype="bfloat16")
    policy = MultiAgentPolicy(model, tokenizer, ["a", "b"])
    assert policy.lm.config._attn_implementation == "marft_grouped_matmul"
    torch.manual_seed(0)
    for p in policy.trainable_parameters():
        p.data.add_(0.05 * torch.randn_like(p))
    policy.set_trainable(None, critic=True)

    def grads():
        for p in policy.trainable_parameters():
            p.grad = None
        for adapter in ("policy_a", "policy_b"):
            with training_passes():
                loss = _loss(policy, adapter, prefix_len=4)
            loss.float().backward()  # outside training_passes
        return {i: p.grad.float().clone() for i, p in enumerate(policy.trainable_parameters()) if p.grad is not None}

    plain = grads()
    policy.enable_gradient_checkpointing()
    assert _relative_gap(plain, grads()) == 0.0


def test_trainer_turns_checkpointing_on_from_the_schedule(tmp_path, tiny):
    trainer = Trainer(small_config(tmp_path, **{"schedule.gradient_checkpointing": True}), tiny)
    assert trainer.policy.checkpointed_layers == len(trainer.policy.lm.get_decoder().layers) > 0
    assert small_config(tmp_path).schedule.gradient_checkpointing is False


def _policy(tiny, checkpointing=True):
    model, tokenizer = tiny
    return MultiAgentPolicy(model, tokenizer, ["a", "b"], gradient_checkpointing=checkpointing)


def _loss(policy, adapter, prefix_len=0):
    prompt = policy.chat_prompt_ids("Think.", "Say 1.")
    stats = policy.token_logprobs(adapter, [prompt, prompt[:-1]], [[70, 71, 72], [73, 74]],
                                  prefix_lens=[prefix_len, prefix_len])
    return stats.logprobs.sum()


@pytest.mark.parametrize("prefix_len", [0, 4])
def test_guard_fires_when_the_backward_recomputes_under_another_adapter(tiny, prefix_len):
    policy = _policy(tiny)
    policy.set_trainable(None, critic=True)
    loss = _loss(policy, "policy_a", prefix_len)
    with policy.using("policy_b"):  # a forward under b, without a backward of a's loss first
        pass
    with pytest.raises(AdapterSwitchError, match="ran forward under adapter 'policy_a' but its backward "
                                                 "recomputes it under adapter 'policy_b'"):
        loss.backward()
    loss = _loss(policy, "policy_a", prefix_len)
    with policy.model.disable_adapter(), pytest.raises(AdapterSwitchError, match="adapters disabled"):
        loss.backward()
    # the same losses backwarded under the adapter of their forward pass: no complaint, gradients
    for p in policy.trainable_parameters():
        p.grad = None
    _loss(policy, "policy_a", prefix_len).backward()
    _loss(policy, "policy_b", prefix_len).backward()  # one adapter per backward: the learners' order
    a, b = policy.adapter_parameters("policy_a"), policy.adapter_parameters("policy_b")
    assert all(p.grad is not None for p in a + b)


def test_a_loss_of_two_adapters_needs_a_backward_per_adapter(tiny):
    """Summing two adapters' passes into one loss is what checkpointing cannot do: the guard
    says so instead of returning the gradient of another network (without checkpointing it is
    allowed, as before)."""
    policy = _policy(tiny)
    policy.set_trainable(None, critic=True)
    loss = _loss(policy, "policy_a") + _loss(policy, "policy_b")
    with pytest.raises(AdapterSwitchError):
        loss.backward()
    plain = _policy(tiny_on_device(seed=0, hidden_size=32, num_layers=1), checkpointing=False)
    plain.set_trainable(None, critic=True)
    (_loss(plain, "policy_a") + _loss(plain, "policy_b")).backward()


# -- micro-batches capped by tokens ----------------------------------------------------------------
def _sample(prompt_len, response_len, adapter="policy_a", critic="critic", critic_prompt=None):
    zero = torch.zeros(())
    return Sample(agent_id=adapter[len("policy_"):], adapter=adapter, critic=critic,
                  prompt_ids=list(range(1, prompt_len + 1)), response_ids=[7] * response_len,
                  old_logprobs=torch.zeros(response_len), old_values=zero, advantages=zero, returns=zero,
                  critic_prompt_ids=critic_prompt)


class _ChainPolicy:
    """What ``_micro_batches`` reads of a policy under a token cap: ``value_rows``."""

    def value_rows(self, seqs):
        from marft_agents.model.scoring import prefix_chains

        return prefix_chains(seqs)


def _bare_learner(cap, micro_batch_size=None, value_mode="state"):
    from marft_agents.config import ScheduleConfig
    from marft_agents.learners.base import BaseLearner

    learner = BaseLearner.__new__(BaseLearner)  # the split needs the schedule and the policy only
    learner.schedule = ScheduleConfig(micro_batch_size=micro_batch_size, max_tokens_per_micro_batch=cap)
    learner.policy = _ChainPolicy()
    learner.critic_values = value_mode
    return learner


def test_token_cap_bounds_every_micro_batch_and_a_long_row_goes_alone():
    lengths = [(10, 5), (3, 2), (40, 30), (4, 4), (8, 1), (12, 12), (2, 2), (6, 3)]
    samples = [_sample(p, r, adapter="policy_a" if i % 3 else "policy_b") for i, (p, r) in enumerate(lengths)]
    learner = _bare_learner(cap=48, micro_batch_size=3)
    micros = learner._micro_batches(samples)
    assert sorted(id(s) for m in micros for s in m) == sorted(id(s) for s in samples)  # each once
    for micro in micros:
        assert len({s.adapter for s in micro}) == 1 and len(micro) <= 3
        tokens = learner._pass_tokens(micro)
        assert tokens <= 48 or len(micro) == 1
        # the padded rectangle the policy pass lays out (engine.layout.pack): rows x (P + T)
        assert tokens == len(micro) * (max(len(s.prompt_ids) for s in micro) + max(len(s.response_ids) for s in micro))
    long_row = samples[2]
    assert [long_row] in micros  # 70 tokens > 48: alone
    assert len(micros) < len(samples)  # short rows still share passes
    # without a cap: chunks of micro_batch_size in order, as before
    plain = _bare_learner(cap=None, micro_batch_size=3)._micro_batches(samples)
    assert [len(m) for m in plain] == [3, 2, 3]  # policy_a: 5 rows, policy_b: 3
    assert learner._micro_batches(samples) == micros  # a function of the samples: rescoring runs the same split


def test_critic_token_cap_counts_the_rows_the_chained_pass_runs():
    # an episode's critic inputs extend one another: one forward row for all three
    episode = [_sample(2, 1, critic_prompt=list(range(1, n + 1))) for n in (10, 20, 30)]
    other = [_sample(2, 1, critic_prompt=[99] * 30)]
    learner = _bare_learner(cap=60)
    assert learner._pass_tokens(episode, by="critic") == 30  # 1 chain x 30
    assert learner._pass_tokens(episode + other, by="critic") == 60  # 2 chains x 30
    assert learner._micro_batches(episode + other, by="critic") == [episode + other]
    learner.schedule.max_tokens_per_micro_batch = 59
    assert learner._micro_batches(episode + other, by="critic") == [episode, other]
    token = _bare_learner(cap=1000, value_mode="token")
    assert token._pass_tokens(episode, by="critic") == 3 * 31  # with responses: no longer prefixes


@pytest.mark.parametrize("algorithm", ["mappo_action", "grpo"])
def test_gradients_are_the_same_whatever_the_token_cap(tmp_path, tiny, algorithm):
    trainer, samples = _trainer_with_samples(tmp_path, tiny, algorithm)
    learner = trainer.learner
    passes = [False] + ([True] if learner.critic_values is not None else [])
    whole = {critic: _grads(learner, samples, critic) for critic in passes}
    smallest = min(learner._pass_tokens([s]) for s in samples)
    for cap in (1, smallest * 2, 10_000):  # every row alone, a few per pass, one pass per adapter
        learner.schedule.max_tokens_per_micro_batch = cap
        split = {critic: _grads(learner, samples, critic) for critic in passes}
        for critic in passes:
            gap = _relative_gap(whole[critic], split[critic])
            assert gap < RTOL, (cap, critic, gap)
    learner.schedule.max_tokens_per_micro_batch = smallest * 2
    assert len(learner._micro_batches(samples)) > len({s.adapter for s in samples})  # really split


def test_token_cap_is_validated(tmp_path):
    assert small_config(tmp_path, **{"schedule.max_tokens_per_micro_batch": 512}).schedule.max_tokens_per_micro_batch == 512
    with pytest.raises(ConfigError, match="schedule.max_tokens_per_micro_batch must be >= 1"):
        small_config(tmp_path, **{"schedule.max_tokens_per_micro_batch": 0})


# -- device: auto, attn_implementation, loading onto the device ------------------------------------
def test_device_auto_is_the_default_and_is_recorded_as_the_device_it_stands_for():
    assert ModelConfig().device == "auto"
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    cfg = config_from_dict({})
    assert cfg.model.device == "auto"  # validation is plain data: it imports no torch to resolve it
    cfg.resolve_hardware()  # where the model is about to load, like dtype: auto
    assert cfg.model.device == expected
    assert config_to_dict(cfg)["model"]["device"] == expected  # what the run records
    assert config_from_dict({"model": {"device": "cpu"}}).model.device == "cpu"
    with pytest.raises(ConfigError, match="model.device must be 'auto' or a torch device string"):
        config_from_dict({"model": {"device": "gpu0"}})


def _saved_tiny_model(tmp_path):
    from marft_agents.model.tiny_models import tiny_model_and_tokenizer

    model, tokenizer = tiny_model_and_tokenizer(seed=0, hidden_size=32, num_layers=1)
    folder = tmp_path / "tiny"
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


@pytest.mark.parametrize("name, expected", [(None, "sdpa"), ("eager", "eager"), ("sdpa", "sdpa")])
def test_attn_implementation_reaches_the_loaded_model(tmp_path, name, expected):
    from marft_agents.model.loading import load_model_and_tokenizer

    model, _ = load_model_and_tokenizer(ModelConfig(_saved_tiny_model(tmp_path), device="cpu",
                                                    attn_implementation=name))
    assert model.config._attn_implementation == expected


def test_a_bad_attn_implementation_is_one_clear_line(tmp_path):
    from marft_agents.model.loading import load_model_and_tokenizer

    with pytest.raises(ConfigError) as err:
        config_from_dict({"model": {"attn_implementation": "eagr"}})
    message = str(err.value)
    assert "\n" not in message and "model.attn_implementation" in message and "did you mean 'eager'" in message
    with pytest.raises(ValueError, match="model.attn_implementation must be null .* got 'flash'"):
        load_model_and_tokenizer(ModelConfig(_saved_tiny_model(tmp_path), device="cpu", attn_implementation="flash"))


def test_weights_load_straight_onto_the_device(tmp_path, monkeypatch):
    from transformers import AutoModelForCausalLM

    from marft_agents.model import loading as models
    assert models.load_device_map(torch.device("cpu")) is None  # CPU: the plain load, as before
    assert models.load_device_map(torch.device("cuda", 1)) == "cuda:1"
    folder = _saved_tiny_model(tmp_path)
    real = AutoModelForCausalLM.from_pretrained
    seen = []

    def spy(source, **kwargs):
        seen.append(kwargs)
        return real(source, **{k: v for k, v in kwargs.items() if k != "device_map"})

    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", spy)
    models.load_model_and_tokenizer(ModelConfig(folder, device="cpu"))
    assert "device_map" not in seen[-1]
    model, _ = models.load_model_and_tokenizer(ModelConfig(folder, device="meta"))  # any non-CPU device
    assert seen[-1]["device_map"] == "meta" and next(model.parameters()).device.type == "meta"
