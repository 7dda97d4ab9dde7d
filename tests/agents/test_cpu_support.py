"""CPU fast paths are probed by trying them, fall back with one log line, and the fallback gives
the fast path's numbers: every machine runs the fallback here (``plain_kernels``), so a CPU
without the fast path (AVX2-only) is not the first to execute it."""

from __future__ import annotations

import dataclasses
import logging

import pytest
import torch
import torch.nn.functional as F
from test_direct_decode import STOPS, _requests, _seeded_policy

from marft_agents.engine import cpu_support
from marft_agents.engine.direct import _Linear, packs
from marft_agents.settings.sampling import SamplingConfig


@pytest.fixture
def fresh_probe(monkeypatch):
    """Probes run again in this test (the process-wide answers are put back afterwards)."""
    monkeypatch.setattr(cpu_support, "_probed", {})


def _bf16(rows: int, cols: int, seed: int) -> torch.Tensor:
    return torch.randn(rows, cols, generator=torch.Generator().manual_seed(seed)).to(torch.bfloat16)


def test_a_prepacking_that_raises_falls_back_with_one_log_line(fresh_probe, monkeypatch, caplog):
    def unsupported(weight, rows_hint):
        raise RuntimeError("mkldnn_reorder_linear_weight: bf16 path needs the cpu support avx_ne_convert "
                           "or avx512bw, avx512vl and avx512dq")

    monkeypatch.setattr(torch.ops.mkldnn, "_reorder_linear_weight", unsupported)
    weight = _bf16(24, 16, 0)
    with caplog.at_level(logging.WARNING, logger="marft_agents.engine.cpu_support"):
        assert not packs(weight)
        assert not packs(weight)  # probed once: no second line
        linear = _Linear(weight, None)  # would raise if it still tried to prepack
    lines = [r for r in caplog.records if r.name == "marft_agents.engine.cpu_support"]
    assert len(lines) == 1 and "avx512bw" in lines[0].getMessage() and "F.linear" in lines[0].getMessage()
    x = _bf16(5, 16, 1)
    assert linear.packed is None and torch.equal(linear(x), F.linear(x, weight))


def test_the_environment_variable_and_the_context_force_the_plain_path(fresh_probe, monkeypatch):
    weight = _bf16(24, 16, 0)
    with cpu_support.plain_kernels():
        assert not packs(weight) and _Linear(weight, None).packed is None
    monkeypatch.setenv(cpu_support.PLAIN_KERNELS_VARIABLE, "1")
    assert not packs(weight)
    monkeypatch.setenv(cpu_support.PLAIN_KERNELS_VARIABLE, "0")
    assert packs(weight) == (cpu_support._try_onednn_bf16_prepack() is None)


def test_plain_kernels_decode_the_same_bfloat16_tokens_and_logprobs_bit_for_bit():
    """The direct engine in bf16 with the probed path (prepacked on AVX-512/AMX CPUs) and with the
    fallback forced: the prepacked product equals F.linear bit for bit, so whole decodes match."""
    policy = _seeded_policy()
    policy.to(torch.bfloat16)
    cfg = SamplingConfig(max_new_tokens=8, do_sample=False, stop_token_ids=STOPS, engine="direct")
    probed = policy.generate(_requests(policy), cfg)
    with cpu_support.plain_kernels():
        plain = policy.generate(_requests(policy), cfg)
        # the fused products were rebuilt unpacked (the cache key holds the packing decision)
        fused = [v[1] for m in policy.lm.modules() for v in getattr(m, "_marft_direct_fused", {}).values()]
        assert fused and all(linear.packed is None for linear in fused)
    assert [g.response_ids for g in plain] == [g.response_ids for g in probed]
    for a, b in zip(plain, probed):
        assert torch.equal(torch.tensor(a.logprobs), torch.tensor(b.logprobs))
    sampled = dataclasses.replace(cfg, do_sample=True)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(3)
        probed = policy.generate(_requests(policy), sampled)
    with cpu_support.plain_kernels(), torch.random.fork_rng(devices=[]):
        torch.manual_seed(3)
        plain = policy.generate(_requests(policy), sampled)
    assert [g.response_ids for g in plain] == [g.response_ids for g in probed]
