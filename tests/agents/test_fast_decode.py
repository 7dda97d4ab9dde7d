"""The ``fast`` decoding loop: its blocked draw samples the right distribution and scores tokens
with ``scaled_logprobs``; its preallocated KV cache and pruning decode exactly like the legacy
loop; sampled log-probs equal the training forward pass, shared prefixes included."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from agent_helpers import DEVICE, seeded_generator
from test_policy import make_policy, prompts

from marft_agents.engine.fast import BLOCK, draw_and_score
from marft_agents.engine.kv_cache import ReservedLayer, reserved_cache
from marft_agents.engine.sampling import scaled_logprobs
from marft_agents.model.policy import GenRequest
from marft_agents.settings.sampling import ENGINES, SamplingConfig


def test_blocked_draw_matches_the_distribution_and_scores_with_scaled_logprobs():
    vocab = 2 * BLOCK + 37  # a short last block
    gen = torch.Generator().manual_seed(0)
    logits = torch.full((2, vocab), -1e9)  # far below: never drawn
    # row 0: mass spread over three blocks (two tokens in each full one, the short last block
    # included); row 1: a single token
    picks = {0: [5, 300, BLOCK + 7, BLOCK + 100, 2 * BLOCK + 30], 1: [BLOCK - 1]}
    logits[0, picks[0]] = torch.tensor([0.0, -0.5, 0.7, 0.2, 1.2])
    logits[1, picks[1]] = 3.0
    temperature = 0.8
    probs = torch.softmax(logits / temperature, -1)
    scratch = torch.empty(2 * vocab)
    n = 20000
    draws = []
    for _ in range(n):
        token, logp = draw_and_score(logits.clone(), temperature, gen, scratch)
        draws.append(token)
        want = scaled_logprobs(logits, temperature).gather(-1, token[:, None]).squeeze(-1)
        torch.testing.assert_close(logp, want, atol=1e-6, rtol=0)
    draws = torch.stack(draws)  # [n, 2]
    freq = torch.bincount(draws[:, 0], minlength=vocab).float() / n
    torch.testing.assert_close(freq[picks[0]], probs[0, picks[0]], atol=0.015, rtol=0)
    assert set(draws[:, 0].tolist()) == set(picks[0])
    assert set(draws[:, 1].tolist()) == set(picks[1])


def test_blocked_draw_on_bfloat16_logits_scores_their_float32_value():
    gen = torch.Generator().manual_seed(1)
    logits = torch.randn(3, 1000, generator=gen).to(torch.bfloat16)
    token, logp = draw_and_score(logits.clone(), 0.5, gen, torch.empty(3000))
    want = scaled_logprobs(logits, 0.5).gather(-1, token[:, None]).squeeze(-1)
    torch.testing.assert_close(logp, want, atol=1e-5, rtol=0)
    # the float32 copy in a reused buffer (what the sampling loop passes): same draw, same score
    work = torch.full((4000,), float("nan"))  # stale contents must not leak into the result
    again = draw_and_score(logits.clone(), 0.5, torch.Generator().manual_seed(7), torch.empty(3000), work)
    fresh = draw_and_score(logits.clone(), 0.5, torch.Generator().manual_seed(7), torch.empty(3000))
    assert torch.equal(again[0], fresh[0]) and torch.equal(again[1], fresh[1])


@pytest.fixture(scope="module")
def policy():
    return make_policy()


def test_fast_greedy_equals_legacy_with_pruning_and_shared_prefixes(policy):
    p = [policy.chat_prompt_ids("Think carefully.", f"Say {i}" + "!" * i) for i in range(6)]
    prefix = policy.shared_prefix_len("Think carefully.", p[0])
    assert prefix > 0
    stop = tuple(range(3, 130))  # rows end at different steps: pruning happens mid-decode
    cfg = SamplingConfig(max_new_tokens=10, do_sample=False, stop_token_ids=stop)
    out = {engine: policy.generate([GenRequest("actor_0", q, prefix) for q in p],
                                   dataclasses.replace(cfg, engine=engine))
           for engine in ENGINES}
    fast, legacy = out["fast"], out["legacy"]
    assert [g.response_ids for g in fast] == [g.response_ids for g in legacy]
    assert len({len(g.response_ids) for g in fast}) > 1
    for a, b in zip(fast, legacy):
        torch.testing.assert_close(torch.tensor(a.logprobs), torch.tensor(b.logprobs),
                                   atol=1e-5, rtol=0)


@pytest.mark.parametrize("engine", ["fast", "direct"])
@pytest.mark.parametrize("share", [False, True])
def test_fast_sampled_logprobs_match_the_training_forward_pass(policy, share, engine):
    p = prompts(policy, 6)
    prefix = [policy.shared_prefix_len("Think." * (i % 3), q) if share else 0
              for i, q in enumerate(p)]
    cfg = SamplingConfig(max_new_tokens=12, temperature=0.5, stop_token_ids=tuple(range(3, 130)),
                         engine=engine)
    gens = policy.generate([GenRequest("actor_0", q, n) for q, n in zip(p, prefix)], cfg,
                           generator=seeded_generator(3))
    with torch.no_grad():
        stats = policy.token_logprobs("policy_actor_0", p, [g.response_ids for g in gens], 0.5,
                                      prefix_lens=[g.prefix_len for g in gens])
    for row, g in enumerate(gens):
        n = len(g.response_ids)
        torch.testing.assert_close(stats.logprobs[row, :n].cpu(), torch.tensor(g.logprobs),
                                   atol=1e-5, rtol=0)
        assert stats.mask[row].sum() == n


def test_unknown_engine_is_rejected():
    with pytest.raises(ValueError, match="sampling.engine must be one of"):
        SamplingConfig(engine="turbo")


def test_reserved_cache_writes_in_place_and_holds_the_prefix_once_per_row(policy):
    lm = policy.lm
    prefix = [5, 6, 7, 8]
    cache = reserved_cache(lm, prefix, rows=3, capacity=10, device=DEVICE)
    assert all(isinstance(layer, ReservedLayer) for layer in cache.layers)
    layer = cache.layers[0]
    assert layer.keys.shape[0] == 3 and layer.get_seq_length() == len(prefix)
    assert torch.equal(layer.keys[0], layer.keys[2])  # every row sees the same prefix
    buffer = layer._k.data_ptr()
    ids = torch.tensor([[9, 10]] * 3, device=DEVICE)
    with torch.no_grad():
        lm(input_ids=ids, attention_mask=torch.ones(3, 6, dtype=torch.long, device=DEVICE),
           position_ids=torch.tensor([[4, 5]] * 3, device=DEVICE), cache=cache, use_cache=True)
    assert layer.get_seq_length() == 6 and layer._k.data_ptr() == buffer  # no reallocation
    # the same numbers as an unshared forward of prefix + suffix
    with torch.no_grad():
        full = lm(input_ids=torch.tensor([prefix + [9, 10]], device=DEVICE), use_cache=True).cache
    torch.testing.assert_close(layer.keys[1:2], full.layers[0].keys, atol=1e-5, rtol=0)
