"""MultiAgentPolicy on a tiny random model: adapters, sampling, log-probs, critic, state."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from agent_helpers import DEVICE, seeded_generator, tiny_on_device

from marft_agents.model.adapters import base_parameters
from marft_agents.engine.sampling import pick_tokens, scaled_logprobs
from marft_agents.model.policy import GenRequest, MultiAgentPolicy
from marft_agents.settings.critic import CriticConfig
from marft_agents.settings.lora import LoraSpec
from marft_agents.settings.sampling import SamplingConfig

AGENTS = ["reasoner_0", "actor_0"]


def perturb(policy: MultiAgentPolicy, seed: int, scale: float = 0.1) -> None:
    """Give every adapter random weights (LoRA starts as an exact no-op: B = 0); drawn on the
    CPU, so a policy gets the same weights on every device."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name in policy.adapter_names:
            for param in policy.adapter_parameters(name):
                param.add_((torch.randn(param.shape, generator=gen) * scale).to(param.device))


def make_policy(agents=AGENTS, seed: int | None = 1, **kwargs) -> MultiAgentPolicy:
    model, tok = tiny_on_device(seed=0)
    policy = MultiAgentPolicy(model, tok, agents, **kwargs)
    if seed is not None:
        perturb(policy, seed)
    return policy


@pytest.fixture(scope="module")
def policy() -> MultiAgentPolicy:
    return make_policy()


def prompts(policy: MultiAgentPolicy, n: int) -> list[list[int]]:
    # different lengths, so left padding is exercised
    return [policy.chat_prompt_ids("Think." * (i % 3), f"Say {i}" + "!" * i) for i in range(n)]


def test_one_base_copy_and_distinct_adapters():
    model, tok = tiny_on_device()
    before = {p.data_ptr() for p in model.parameters()}
    numel = sum(p.numel() for p in model.parameters())
    policy = MultiAgentPolicy(model, tok, ["a", "b", "c", "d"])
    base = base_parameters(policy.model)
    assert {p.data_ptr() for p in base.values()} == before  # wrapped in place, not copied
    assert sum(p.numel() for p in base.values()) == numel
    assert not any(p.requires_grad for p in base.values())
    assert policy.adapter_names == ["policy_a", "policy_b", "policy_c", "policy_d", "critic"]
    ptrs = [{p.data_ptr() for p in policy.adapter_parameters(n)} for n in policy.adapter_names]
    assert all(a.isdisjoint(b) for i, a in enumerate(ptrs) for b in ptrs[i + 1:])
    keys = {n: sorted(k.split("/", 2)[2] for k in policy.adapter_state_dict()
                      if k.startswith(f"lora/{n}/")) for n in policy.adapter_names}
    assert len({tuple(v) for v in keys.values()}) == 1 and keys["policy_a"]


def test_adapters_change_the_distribution_independently(policy):
    p, r = prompts(policy, 2), [[40, 41, 42], [43, 44]]
    with torch.no_grad():
        a = policy.token_logprobs("policy_reasoner_0", p, r).logprobs
        b = policy.token_logprobs("policy_actor_0", p, r).logprobs
        ref = policy.reference_logprobs(p, r).logprobs
    assert (a - b).abs().max() > 1e-3 and (a - ref).abs().max() > 1e-3


def test_disabled_adapters_give_the_base_model_and_zero_init_is_a_no_op():
    base, tok = tiny_on_device(seed=0)  # an untouched copy of the same weights
    policy = make_policy(seed=None)
    p, r = prompts(policy, 3), [[50, 51, 52, 2], [60], [70, 71]]
    fresh = policy.token_logprobs("policy_actor_0", p, r)  # B = 0: identical to the base
    perturb(policy, 3)
    ref = policy.reference_logprobs(p, r, with_entropy=True)
    for row, (prompt, resp) in enumerate(zip(p, r)):
        ids = torch.tensor([prompt + resp], device=DEVICE)
        with torch.no_grad():
            logits = base(input_ids=ids).logits[0, len(prompt) - 1:-1]  # [T, V]
        want = scaled_logprobs(logits, 1.0).gather(-1, torch.tensor(resp, device=DEVICE)[:, None])[:, 0]
        torch.testing.assert_close(ref.logprobs[row, :len(resp)], want, atol=1e-5, rtol=0)
        torch.testing.assert_close(fresh.logprobs[row, :len(resp)].detach(), want, atol=1e-5,
                                   rtol=0)
    assert ref.mask.tolist() == [[True] * 4, [True] + [False] * 3, [True] * 2 + [False] * 2]
    assert (ref.logprobs[~ref.mask] == 0).all() and (ref.entropy[~ref.mask] == 0).all()
    assert not ref.logprobs.requires_grad


def test_generation_is_seeded_ordered_and_grouped(policy):
    p = prompts(policy, 5)
    reqs = [GenRequest(AGENTS[i % 2], q) for i, q in enumerate(p)]
    cfg = SamplingConfig(max_new_tokens=8)
    torch.manual_seed(0)
    first = policy.generate(reqs, cfg)
    torch.manual_seed(0)
    second = policy.generate(reqs, cfg)
    third = policy.generate(reqs, cfg, generator=seeded_generator(5))
    fourth = policy.generate(reqs, cfg, generator=seeded_generator(5))
    assert [g.response_ids for g in first] == [g.response_ids for g in second]
    assert [g.response_ids for g in third] == [g.response_ids for g in fourth]
    assert [g.response_ids for g in first] != [g.response_ids for g in third]
    for req, gen in zip(reqs, first):
        assert gen.agent_id == req.agent_id and gen.prompt_ids == req.prompt_ids
        assert len(gen.response_ids) == len(gen.logprobs) <= 8
        assert gen.text == policy.tokenizer.decode(gen.response_ids, skip_special_tokens=True)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_sampled_logprobs_match_the_training_forward_pass(policy, temperature):
    p = prompts(policy, 6)
    # half the vocabulary stops a row: rows end at different steps, so finished rows are
    # dropped from the batch and the KV cache mid-generation
    stop = tuple(range(3, 130))
    cfg = SamplingConfig(max_new_tokens=12, temperature=temperature, stop_token_ids=stop)
    torch.manual_seed(1)
    gens = policy.generate([GenRequest("actor_0", q) for q in p], cfg)
    assert len({len(g.response_ids) for g in gens}) > 1
    for g in gens:
        assert g.finished == (g.response_ids[-1] in stop)
        assert all(t not in stop for t in g.response_ids[:-1])
    with torch.no_grad():
        stats = policy.token_logprobs("policy_actor_0", p, [g.response_ids for g in gens],
                                      temperature)
    for row, g in enumerate(gens):
        n = len(g.response_ids)
        torch.testing.assert_close(stats.logprobs[row, :n].cpu(), torch.tensor(g.logprobs),
                                   atol=1e-5, rtol=0)
        assert stats.mask[row].sum() == n
    exact = policy.generate([GenRequest("actor_0", q) for q in p],
                            dataclasses.replace(cfg, recompute_logprobs=True),
                            generator=seeded_generator(1))
    with torch.no_grad():
        stats = policy.token_logprobs("policy_actor_0", p, [g.response_ids for g in exact],
                                      temperature)
    for row, g in enumerate(exact):
        torch.testing.assert_close(stats.logprobs[row, :len(g.logprobs)].cpu(),
                                   torch.tensor(g.logprobs), atol=1e-6, rtol=0)


def test_greedy_is_argmax_and_independent_of_batch_padding(policy):
    p = prompts(policy, 4)
    cfg = SamplingConfig(max_new_tokens=6, do_sample=False, stop_token_ids=())
    batched = policy.generate([GenRequest("reasoner_0", q) for q in p], cfg)
    alone = [policy.generate([GenRequest("reasoner_0", q)], cfg)[0] for q in p]
    assert [g.response_ids for g in batched] == [g.response_ids for g in alone]
    assert all(not g.finished and len(g.response_ids) == 6 for g in batched)
    with torch.no_grad():
        stats = policy.token_logprobs("policy_reasoner_0", p, [g.response_ids for g in batched])
    # each greedy token is the most likely one: its log-prob is the row's maximum
    top_k1 = policy.generate([GenRequest("reasoner_0", q) for q in p],
                             dataclasses.replace(cfg, do_sample=True, top_k=1))
    top_p0 = policy.generate([GenRequest("reasoner_0", q) for q in p],
                             dataclasses.replace(cfg, do_sample=True, top_p=1e-6))
    assert [g.response_ids for g in top_k1] == [g.response_ids for g in batched]
    assert [g.response_ids for g in top_p0] == [g.response_ids for g in batched]
    assert (stats.entropy[stats.mask] > 0).all()


def test_inverse_cdf_sampler_matches_the_distribution():
    probs = torch.tensor([[0.1, 0.0, 0.6, 0.3], [0.25, 0.25, 0.25, 0.25]])
    logp = probs.log()  # -inf for the impossible token
    gen = torch.Generator().manual_seed(0)
    cfg = SamplingConfig()
    draws = torch.stack([pick_tokens(logp, cfg, gen) for _ in range(20000)])  # [N, 2]
    for row in range(2):
        freq = torch.bincount(draws[:, row], minlength=4).float() / draws.shape[0]
        torch.testing.assert_close(freq, probs[row], atol=0.015, rtol=0)
    assert (draws[:, 0] != 1).all()
    top2 = pick_tokens(logp[:1].expand(5000, 4).contiguous(), SamplingConfig(top_k=2), gen)
    assert set(top2.tolist()) == {2, 3}
    nucleus = pick_tokens(logp[:1].expand(5000, 4).contiguous(), SamplingConfig(top_p=0.65), gen)
    assert set(nucleus.tolist()) == {2, 3}  # 0.6 alone is short of 0.65: keep the 0.3 too


def test_critic_values_shapes_and_initial_value():
    policy = make_policy(seed=None, critic=CriticConfig(value_head_bias=0.5))
    p, r = prompts(policy, 3), [[40, 41, 42], [43], [44, 45]]
    values = policy.token_values(p, r)
    assert values.shape == (3, 3) and values.dtype == torch.float32
    assert values.requires_grad
    torch.testing.assert_close(values, torch.tensor([[0.5] * 3, [0.5, 0, 0], [0.5, 0.5, 0]], device=values.device))
    perturb(policy, 2)
    with torch.no_grad():
        policy.value_heads["critic"].linear.weight.normal_()
        values = policy.token_values(p, r, include_final=True)
        state = policy.state_values(p)
        again = policy.token_values(p[:1], [r[0] + [46]])
    assert values.shape == (3, 4) and state.shape == (3,)
    torch.testing.assert_close(state, values[:, 0], atol=1e-5, rtol=0)
    torch.testing.assert_close(values[0], again[0], atol=1e-5, rtol=0)  # causal: prefix values
    assert values[1, 2:].eq(0).all() and values[1, 1] != 0  # row 1: one token + final state


def test_per_agent_critics_and_no_critic():
    policy = make_policy(critic=CriticConfig(mode="per_agent"))
    assert policy.critic_adapters == ["critic_reasoner_0", "critic_actor_0"]
    p = prompts(policy, 2)
    with pytest.raises(ValueError, match="pass agent_id"):
        policy.state_values(p)
    with torch.no_grad():
        a, b = policy.state_values(p, "reasoner_0"), policy.state_values(p, "actor_0")
    assert not torch.allclose(a, b)
    bare = make_policy(critic=None)
    assert bare.critic_adapters == [] and len(bare.value_heads) == 0
    with pytest.raises(RuntimeError, match="critic=None"):
        bare.state_values(p)


def test_set_trainable_freezes_what_it_should_and_survives_adapter_switches():
    policy = make_policy()
    p, r = prompts(policy, 2), [[40, 41], [42]]

    def flags():
        return {n: {q.requires_grad for q in policy.adapter_parameters(n)}
                for n in policy.adapter_names}

    assert flags() == {n: {True} for n in policy.adapter_names}  # default: all trainable
    policy.set_trainable({"reasoner_0"}, critic=False)
    want = {"policy_reasoner_0": {True}, "policy_actor_0": {False}, "critic": {False}}
    assert flags() == want
    policy.generate([GenRequest("actor_0", p[0])], SamplingConfig(max_new_tokens=2))
    policy.reference_logprobs(p, r)
    policy.token_values(p, r)
    assert flags() == want  # peft's set_adapter / disable_adapter did not unfreeze anything
    assert policy.trainable_parameters() == policy.adapter_parameters("policy_reasoner_0")

    policy.train()
    loss = policy.token_logprobs("policy_reasoner_0", p, r).logprobs.sum()
    loss = loss + policy.token_logprobs("policy_actor_0", p, r).logprobs.sum()
    loss.backward()
    assert all(q.grad is not None for q in policy.adapter_parameters("policy_reasoner_0"))
    assert all(q.grad is None for q in policy.adapter_parameters("policy_actor_0"))
    assert all(q.grad is None for q in base_parameters(policy.model).values())

    policy.set_trainable(set(), critic=True)
    assert flags() == {"policy_reasoner_0": {False}, "policy_actor_0": {False},
                       "critic": {True}}
    assert policy.value_heads["critic"].linear.weight.requires_grad
    with pytest.raises(KeyError, match="unknown agent"):
        policy.set_trainable({"nobody"}, critic=False)


def test_adapter_state_dict_roundtrip_and_strictness():
    source = make_policy(seed=1)
    target = make_policy(seed=2)
    p, r = prompts(source, 2), [[40, 41], [42]]
    state = source.adapter_state_dict()
    assert all(t.device.type == "cpu" for t in state.values())
    assert {k.split("/")[0] for k in state} == {"lora", "value_head"}
    target.load_adapter_state_dict(state)
    with torch.no_grad():
        for name in ("policy_reasoner_0", "policy_actor_0"):
            torch.testing.assert_close(target.token_logprobs(name, p, r).logprobs,
                                       source.token_logprobs(name, p, r).logprobs)
        torch.testing.assert_close(target.token_values(p, r), source.token_values(p, r))
    state["lora/policy_actor_0/extra"] = torch.zeros(1)
    with pytest.raises(KeyError, match="unexpected"):
        target.load_adapter_state_dict(state)
    state.pop("lora/policy_actor_0/extra")
    # a head's weight is required (its normaliser buffers are optional: older checkpoints lack them)
    state.pop(next(k for k in state if k.startswith("value_head/") and k.endswith("linear.weight")))
    with pytest.raises(KeyError, match="missing"):
        target.load_adapter_state_dict(state)
    other = make_policy(agents=["solo_0"])
    with pytest.raises(KeyError, match="unknown adapters"):
        other.load_adapter_state_dict(source.adapter_state_dict())


def test_shared_adapter_and_lora_spec():
    policy = make_policy(shared_adapter=True, lora=LoraSpec(r=4, target_modules=["q_proj"]))
    assert policy.adapter_names == ["policy_shared", "critic"]
    assert {policy.adapter_for(a) for a in AGENTS} == {"policy_shared"}
    shapes = {tuple(q.shape) for q in policy.adapter_parameters("policy_shared")}
    assert (4, 64) in shapes  # lora_A of q_proj with rank 4
    with pytest.raises(KeyError, match="unknown agent"):
        policy.adapter_for("nobody")


def test_chat_prompt_uses_the_template_and_inputs_are_validated(policy):
    ids = policy.chat_prompt_ids("Be brief.", "2+2?")
    assert policy.tokenizer.decode(ids) == ("<|im_start|>system\nBe brief.<|im_end|>\n"
                                            "<|im_start|>user\n2+2?<|im_end|>\n"
                                            "<|im_start|>assistant\n")
    assert "system" not in policy.tokenizer.decode(policy.chat_prompt_ids("", "hi"))
    with pytest.raises(ValueError, match="temperature"):
        SamplingConfig(temperature=0)
    with pytest.raises(ValueError, match="max_new_tokens"):
        SamplingConfig(max_new_tokens=0)
    assert SamplingConfig(stop_token_ids=[2, 3]).stop_token_ids == (2, 3)
    with pytest.raises(ValueError, match="pair up"):
        policy.token_logprobs("policy_actor_0", [ids], [[1], [2]])
    with pytest.raises(KeyError, match="unknown adapter"):
        policy.token_logprobs("policy_nobody", [ids], [[1]])
    with pytest.raises(ValueError, match="cannot name an adapter"):
        make_policy(agents=["bad.name"])
    with pytest.raises(ValueError, match="distinct"):
        make_policy(agents=["a", "a"])
