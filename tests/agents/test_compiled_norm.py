"""The compiled RMSNorm of the update's passes: the same formula as transformers', switched on
only where it pays, only inside ``training_passes()``, and with an eager fallback."""

from __future__ import annotations

import logging

import pytest
import torch

import marft_agents.engine.compiled_norm as cn
from marft_agents.engine.attention import training_passes
from marft_agents.model.tiny_models import tiny_model_and_tokenizer


def norms(model):
    return [m for m in model.modules() if type(m).__name__ in cn.RMS_NORM_CLASSES]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_formula_is_transformers_rms_norm_bit_for_bit(dtype):
    model, _ = tiny_model_and_tokenizer()
    norm = norms(model)[0].to(dtype)
    with torch.no_grad():
        norm.weight.copy_(torch.linspace(0.5, 1.5, norm.weight.numel()))
    x = torch.randn(3, 5, norm.weight.numel(), generator=torch.Generator().manual_seed(0)).to(dtype) * 4
    assert torch.equal(cn.rms_norm(x, norm.weight, norm.variance_epsilon), norm(x))


def test_only_half_precision_cpu_models_are_switched_and_only_inside_training_passes(monkeypatch):
    model, _ = tiny_model_and_tokenizer()
    assert cn.use_compiled_rms_norm(model) == 0  # float32
    model.to(torch.bfloat16)
    layers = model.config.num_hidden_layers
    assert cn.use_compiled_rms_norm(model) == 2 * layers + 1  # two per layer and the final one
    calls = []
    monkeypatch.setattr(cn, "_compiled_rms_norm", lambda h, w, eps: calls.append(1) or cn.rms_norm(h, w, eps))
    ids = torch.tensor([[1, 2, 3, 4]])
    with torch.no_grad():
        outside = model(input_ids=ids).logits
        assert calls == []
        with training_passes():
            inside = model(input_ids=ids).logits
    assert len(calls) == 2 * layers + 1 and torch.equal(inside, outside)
    cn.use_eager_rms_norm(model)  # undone: no compiled call inside either
    with torch.no_grad(), training_passes():
        model(input_ids=ids)
    assert len(calls) == 2 * layers + 1


def test_a_failing_compiler_falls_back_to_the_eager_formula_once(monkeypatch, caplog):
    def broken(fn, **kwargs):
        raise RuntimeError("no C++ compiler found\nmore details")

    monkeypatch.setattr(cn, "_compiled", None)
    monkeypatch.setattr(cn, "_failed", False)
    monkeypatch.setattr(torch, "compile", broken)
    x, w = torch.randn(2, 8, dtype=torch.bfloat16), torch.ones(8, dtype=torch.bfloat16)
    with caplog.at_level(logging.WARNING):
        out = cn._compiled_rms_norm(x, w, 1e-6)
        again = cn._compiled_rms_norm(x, w, 1e-6)
    assert torch.equal(out, cn.rms_norm(x, w, 1e-6)) and torch.equal(again, out)
    assert caplog.text.count("torch.compile of RMSNorm failed (RuntimeError: no C++ compiler found)") == 1
