"""RMSNorm compiled once (``torch.compile``) for the passes of a PPO update on a CPU.

Why: transformers' RMSNorm is seven elementwise operators on float32 copies of the activations
forward, more backward, each a full pass over memory, and a SmolLM2 pass runs 61 of them: a
noticeable share of a bfloat16 policy pass on a CPU. Compiled by inductor into a couple of fused
loops it runs several times faster (measure: ``python benchmarks/bench_update.py --dtype bfloat16
--paths fast,plain``; ``plain`` keeps the eager norm).
The function is compiled once with dynamic shapes, not per module, so all norms of all layers
share one graph per (dtype, grad mode).

Scope: like the grouped-matmul attention (``engine.attention.training_passes``), only inside
``training_passes()``, so that the no-grad rescoring of old log-probs and the gradient passes of an
update compute the same numbers; sampling, the collector and evaluation keep the eager module.
When compiling fails (no C++ compiler, an unsupported platform) the eager formula is used for the
rest of the process, with one warning.
"""

from __future__ import annotations

import logging
import types

import torch
from torch import nn

from marft_agents.engine.attention import half_precision_on_cpu, in_training_passes

log = logging.getLogger(__name__)

RMS_NORM_CLASSES = frozenset({"LlamaRMSNorm", "MistralRMSNorm", "Qwen2RMSNorm", "Qwen3RMSNorm",
                              "Phi3RMSNorm", "SmolLM3RMSNorm"})
"""transformers norm classes whose forward is exactly :func:`rms_norm` (Llama's)."""


def rms_norm(hidden: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """transformers' LlamaRMSNorm: normalise in float32, round to the input dtype, then scale."""
    normed = hidden.float()
    normed = normed * torch.rsqrt(normed.pow(2).mean(-1, keepdim=True) + eps)  # [..., H]
    return weight * normed.to(hidden.dtype)


_compiled = None
_failed = False


def _compiled_rms_norm(hidden: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    global _compiled, _failed
    if not _failed:
        try:
            if _compiled is None:
                _compiled = torch.compile(rms_norm, dynamic=True)
            return _compiled(hidden, weight, eps)
        except Exception as err:  # noqa: BLE001 - any compiler failure: fall back, once
            _failed = True
            log.warning("torch.compile of RMSNorm failed (%s: %s); using the eager formula",
                        type(err).__name__, str(err).splitlines()[0] if str(err) else "")
    return rms_norm(hidden, weight, eps)


def _forward(self: nn.Module, hidden: torch.Tensor) -> torch.Tensor:
    if in_training_passes():
        return _compiled_rms_norm(hidden, self.weight, self.variance_epsilon)
    return type(self).forward(self, hidden)


def use_compiled_rms_norm(model: nn.Module) -> int:
    """Give every Llama-style RMSNorm of ``model`` (half precision, CPU) the compiled forward
    inside ``training_passes()``; returns how many norms were switched."""
    if not half_precision_on_cpu(model):
        return 0
    norms = _rms_norms(model)
    for module in norms:
        module.forward = types.MethodType(_forward, module)
    return len(norms)


def use_eager_rms_norm(model: nn.Module) -> None:
    """Undo :func:`use_compiled_rms_norm`: transformers' own forward everywhere (the reference
    path of ``benchmarks/bench_update.py --paths plain``)."""
    for module in _rms_norms(model):
        vars(module).pop("forward", None)


def _rms_norms(model: nn.Module) -> list[nn.Module]:
    return [m for m in model.modules()
            if type(m).__name__ in RMS_NORM_CLASSES and hasattr(m, "variance_epsilon")]
