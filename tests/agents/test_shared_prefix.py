"""Shared prefixes: an agent's system turn computed once per batch must change no number that
matters (float32), and every path must split a row the same way (bfloat16)."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from agent_helpers import LETTERS_ID, seeded_generator, tiny_on_device
from test_policy import AGENTS, perturb

import marft_envs
from marft_agents.engine.attention import training_passes
from marft_agents.engine.layout import pack
from marft_agents.model.policy import GenRequest, MultiAgentPolicy
from marft_agents.collector import RolloutCollector
from marft_agents.settings.sampling import SamplingConfig


def make(dtype: str = "float32") -> MultiAgentPolicy:
    model, tok = tiny_on_device(seed=0, dtype=dtype)
    policy = MultiAgentPolicy(model, tok, AGENTS)
    perturb(policy, 1)
    return policy


def mixed_rows(policy: MultiAgentPolicy) -> tuple[list[list[int]], list[int]]:
    """Rows of three kinds, interleaved: two system prompts (two prefix groups, different
    lengths) and no system turn (no prefix)."""
    systems = ["You check arithmetic carefully.", "", "Answer with one number, in a box."]
    prompts = [policy.chat_prompt_ids(systems[i % 3], f"Compute {i} + {2 * i}" + "?" * (i % 4))
               for i in range(7)]
    return prompts, [policy.shared_prefix_len(systems[i % 3], p) for i, p in enumerate(prompts)]


@pytest.fixture(scope="module")
def policy() -> MultiAgentPolicy:
    return make()


def test_shared_prefix_len_is_the_system_turn(policy):
    ids = policy.chat_prompt_ids("Be brief.", "2+2?")
    n = policy.shared_prefix_len("Be brief.", ids)
    assert policy.tokenizer.decode(ids[:n]) == "<|im_start|>system\nBe brief.<|im_end|>\n"
    assert policy.shared_prefix_len("", ids) == 0
    assert policy.shared_prefix_len("Be long.", ids) == 0  # not this prompt's system turn


def test_forward_passes_match_the_unshared_layout_in_float32(policy):
    prompts, prefix_lens = mixed_rows(policy)
    assert len({n for n in prefix_lens}) == 3 and 0 in prefix_lens
    responses = [[40 + i] * (1 + i % 3) for i in range(len(prompts))]
    adapter = "policy_actor_0"

    def run(lens):
        policy.zero_grad(set_to_none=True)
        stats = policy.token_logprobs(adapter, prompts, responses, 0.7, prefix_lens=lens)
        values = policy.token_values(prompts, responses, include_final=True, prefix_lens=lens)
        state = policy.state_values(prompts, prefix_lens=lens)
        (stats.logprobs.sum() + stats.entropy.sum() + values.sum() + state.sum()).backward()
        grads = [p.grad.clone() for p in policy.trainable_parameters() if p.grad is not None]
        return stats, values, state, grads

    policy.set_trainable({"actor_0"}, critic=True)
    plain, shared = run(None), run(prefix_lens)
    for a, b in zip(plain[:1], shared[:1]):
        torch.testing.assert_close(a.logprobs, b.logprobs, atol=1e-5, rtol=0)
        torch.testing.assert_close(a.entropy, b.entropy, atol=1e-5, rtol=0)
        assert torch.equal(a.mask, b.mask)
    # values are unbounded sums over the hidden state: the split moves float32 rounding by up to
    # ~3e-5 here (docs/training.md, "Shared prefixes"); measured 2.5e-5 with some adapter inits
    torch.testing.assert_close(plain[1], shared[1], atol=5e-5, rtol=0)
    torch.testing.assert_close(plain[2], shared[2], atol=5e-5, rtol=0)
    assert len(plain[3]) == len(shared[3]) > 0
    # the prefix pass receives every row's gradient (a lost row would move them by its share); the fused
    # head (head_logprobs) sums each group's rows in other chunks: measured up to 1.2e-5 apart
    for a, b in zip(plain[3], shared[3]):
        torch.testing.assert_close(a, b, atol=3e-5, rtol=1e-4)


def test_generation_with_a_shared_prefix_scores_like_training(policy):
    prompts, prefix_lens = mixed_rows(policy)
    greedy = SamplingConfig(max_new_tokens=5, do_sample=False, stop_token_ids=())
    plain = policy.generate([GenRequest("reasoner_0", p) for p in prompts], greedy)
    shared = policy.generate([GenRequest("reasoner_0", p, n) for p, n in zip(prompts, prefix_lens)],
                             greedy)
    assert [g.response_ids for g in plain] == [g.response_ids for g in shared]
    assert [g.prefix_len for g in shared] == prefix_lens
    sampled = policy.generate([GenRequest("reasoner_0", p, n) for p, n in zip(prompts, prefix_lens)],
                              dataclasses.replace(greedy, do_sample=True, temperature=0.7),
                              generator=seeded_generator(0))
    with torch.no_grad():
        stats = policy.token_logprobs("policy_reasoner_0", prompts, [g.response_ids for g in sampled],
                                      0.7, prefix_lens=prefix_lens)
    for row, g in enumerate(sampled):
        torch.testing.assert_close(stats.logprobs[row].cpu(), torch.tensor(g.logprobs), atol=1e-5, rtol=0)


def test_bfloat16_recompute_equals_the_training_forward_with_the_same_split():
    # In bf16 the split point moves rounding, so this is the property PPO relies on: the
    # recomputed "old" log-probs and the training forward use the same split, bit for bit.
    policy = make("bfloat16")
    prompts, prefix_lens = mixed_rows(policy)
    cfg = SamplingConfig(max_new_tokens=6, temperature=0.7, stop_token_ids=(), recompute_logprobs=True)
    gens = policy.generate([GenRequest("actor_0", p, n) for p, n in zip(prompts, prefix_lens)], cfg,
                           generator=seeded_generator(0))
    # a different batch: reversed rows, so groups are formed anew; inside training_passes, as
    # the learner runs its passes (half precision on a CPU: the grouped-matmul attention)
    with torch.no_grad(), training_passes():
        stats = policy.token_logprobs("policy_actor_0", prompts[::-1], [g.response_ids for g in gens][::-1],
                                      0.7, prefix_lens=prefix_lens[::-1])
    for row, g in enumerate(gens[::-1]):
        assert torch.equal(stats.logprobs[row].cpu(), torch.tensor(g.logprobs))


def test_inconsistent_prefixes_are_rejected(policy):
    a, b = policy.chat_prompt_ids("One.", "x"), policy.chat_prompt_ids("Two.", "x")
    n = policy.shared_prefix_len("One.", a)
    with pytest.raises(ValueError, match=f"same {n} tokens"):
        pack([a, b], [[1], [2]], pad_id=0, prefix_len=n)
    with pytest.raises(ValueError, match="prefix_lens"):
        policy.state_values([a, b], prefix_lens=[3])
    with pytest.raises(ValueError, match="prefix_len must be >= 0"):
        policy.state_values([a], prefix_lens=[-1])


@pytest.mark.parametrize("share", [True, False])
def test_the_collector_records_each_decisions_split(share):
    policy = make()
    envs = [marft_envs.make(LETTERS_ID, horizon=1) for _ in range(2)]
    sampling = SamplingConfig(max_new_tokens=3, share_prefix=share)
    rollout = RolloutCollector(envs, policy, sampling, values="state", seed=0).collect(2)
    decisions = rollout.decisions
    assert decisions
    for d in decisions:
        assert (d.prefix_len > 0) == share
        if share:
            assert policy.tokenizer.decode(d.prompt_ids[:d.prefix_len]).startswith("<|im_start|>system")
