"""The ``direct`` decoding engine: the same tokens and log-probs as the ``fast`` loop (which runs
the model's own forward), exact bfloat16 prepacking, and a clean fallback for models it does not
reproduce. Its sampled log-probs against the training forward pass: test_fast_decode.py."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn.functional as F
from agent_helpers import DEVICE
from test_policy import make_policy

from marft_agents.engine.direct import DirectDecoder, _Linear, packs
from marft_agents.engine.kv_cache import reserved_cache
from marft_agents.model.policy import GenRequest
from marft_agents.settings.sampling import SamplingConfig

STOPS = tuple(range(3, 130))  # rows end at different steps: pruning happens mid-decode


def _seeded_policy():
    # peft draws LoRA A from the global RNG (perturb only adds to it): seed it, so that which
    # rows stop when (asserted below) does not depend on the tests that ran before
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return make_policy()


@pytest.fixture(scope="module")
def policy():
    return _seeded_policy()


def _requests(policy, agent="actor_0"):
    p = [policy.chat_prompt_ids("Think carefully.", f"Say {i}" + "!" * i) for i in range(6)]
    prefix = policy.shared_prefix_len("Think carefully.", p[0])
    assert prefix > 0
    return [GenRequest(agent, q, prefix) for q in p]


@pytest.mark.parametrize("agent", ["reasoner_0", "actor_0"])
def test_direct_greedy_equals_fast_with_pruning_shared_prefix_and_each_adapter(policy, agent):
    cfg = SamplingConfig(max_new_tokens=10, do_sample=False, stop_token_ids=STOPS)
    out = {e: policy.generate(_requests(policy, agent), dataclasses.replace(cfg, engine=e))
           for e in ("direct", "fast")}
    assert [g.response_ids for g in out["direct"]] == [g.response_ids for g in out["fast"]]
    assert len({len(g.response_ids) for g in out["direct"]}) > 1  # pruning was exercised
    for a, b in zip(out["direct"], out["fast"]):
        torch.testing.assert_close(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-5, rtol=0)


def test_direct_engine_uses_the_active_adapter(policy):
    """Each agent's adapter changes the greedy output (so a decoder that dropped the LoRA
    delta, or kept the previous call's adapter, could not pass the equality test above)."""
    cfg = SamplingConfig(max_new_tokens=10, do_sample=False, stop_token_ids=(), engine="direct")
    a = policy.generate(_requests(policy, "actor_0"), cfg)
    b = policy.generate(_requests(policy, "reasoner_0"), cfg)
    assert [g.response_ids for g in a] != [g.response_ids for g in b]


def test_direct_greedy_equals_fast_in_bfloat16():
    policy = _seeded_policy()
    policy.to(torch.bfloat16)
    cfg = SamplingConfig(max_new_tokens=8, do_sample=False, stop_token_ids=STOPS)
    out = {e: policy.generate(_requests(policy), dataclasses.replace(cfg, engine=e)) for e in ("direct", "fast")}
    assert [g.response_ids for g in out["direct"]] == [g.response_ids for g in out["fast"]]
    for a, b in zip(out["direct"], out["fast"]):
        torch.testing.assert_close(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=2e-2, rtol=0)


def test_prepacked_bfloat16_product_is_bit_identical_to_linear():
    weight = torch.randn(96, 64, generator=torch.Generator().manual_seed(0)).to(torch.bfloat16)
    bias = torch.randn(96).to(torch.bfloat16)
    if not packs(weight):
        pytest.skip("no oneDNN prepacking on this build/device: _Linear runs F.linear itself")
    linear = _Linear(weight, bias)
    assert linear.packed is not None
    for rows in (32, 7, 1):  # the packing's row hint is 32; other row counts must stay exact
        x = torch.randn(rows, 1, 64).to(torch.bfloat16)
        assert torch.equal(linear(x), F.linear(x, weight, bias))


def test_unsupported_models_fall_back_to_the_models_own_forward(policy, monkeypatch):
    lm = policy.lm
    with torch.inference_mode():
        cache = reserved_cache(lm, [5, 6, 7], rows=2, capacity=16, device=DEVICE)
        assert DirectDecoder.build(lm, cache) is not None
        monkeypatch.setattr(lm.config, "model_type", "mistral")  # sliding windows etc.: not reproduced
        assert DirectDecoder.build(lm, cache) is None
    cfg = SamplingConfig(max_new_tokens=6, do_sample=False, stop_token_ids=STOPS)
    out = {e: policy.generate(_requests(policy), dataclasses.replace(cfg, engine=e)) for e in ("direct", "fast")}
    assert [g.response_ids for g in out["direct"]] == [g.response_ids for g in out["fast"]]
