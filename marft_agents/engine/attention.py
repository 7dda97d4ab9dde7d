"""Grouped-query attention as plain batched matmuls, for the multi-token passes of training.

Why: on a CPU, torch's fused scaled-dot-product attention (the "flash attention for cpu"
kernel that ``attn_implementation="sdpa"`` reaches) has a slow backward in bfloat16: for a
SmolLM2 policy micro-batch it took many times its forward, a large share of the whole
forward+backward of a PPO step. The same attention written as two batched matmuls and a float32
softmax runs forward and backward much faster, because at these lengths the ``[rows, heads, L,
L]`` score matrix is small and the matmuls go to the matrix unit. Measure: ``python
benchmarks/bench_update.py --dtype bfloat16 --paths fast,plain`` (``plain`` keeps ``sdpa``).

How: registered with transformers' ``AttentionInterface`` (and the ``sdpa`` mask builder) under
``GROUPED_MATMUL``; ``use_grouped_matmul_attention(model)`` switches a model that runs ``sdpa``
to it. Queries of the same key/value head are stacked so keys and values are never repeated.

Only the passes of a PPO update take this path: inside ``training_passes()``, which the
learners enter for a whole update (``learners/base.py``; its no-grad rescoring of old log-probs
included, so that those are the very numbers its gradient passes compute) and
``sampling.recompute_logprobs`` enters for its scoring. Everything else (sampling, the
collector's critic values, evaluation) goes to transformers' ``sdpa`` function unchanged:
forward-only, the fused kernel is the faster one. So do one-token queries,
very long sequences (the score matrix would not fit in memory comfortably), dropout,
soft-capping and attention sinks.

Numerics: scores are computed in float32 from the half-precision queries and keys (products of
bf16 numbers are exact in float32), the softmax in float32, and the probabilities are rounded
to the value dtype for the second product, as the fused kernel does; in float32 the result
matches ``sdpa`` to ~1e-6.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import torch
from torch import nn
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

GROUPED_MATMUL = "marft_grouped_matmul"
"""The attention implementation name this module registers with transformers."""

MAX_SCORE_ELEMENTS = 1 << 26
"""Above this many float32 scores (``rows x heads x queries x keys``, 256 MiB) a pass goes to
the fused kernel, which never materialises them."""

_DELEGATED_KWARGS = ("softcap", "s_aux", "sinks", "position_bias")
_IN_TRAINING_PASSES: ContextVar[bool] = ContextVar("marft_training_passes", default=False)


def in_training_passes() -> bool:
    """Whether the caller runs inside ``training_passes()``."""
    return _IN_TRAINING_PASSES.get()


@contextmanager
def training_passes(on: bool = True) -> Iterator[None]:
    """Multi-token attention inside this block takes the grouped-matmul path (on models switched
    by ``use_grouped_matmul_attention``); outside it, ``sdpa``. ``on=False`` leaves the path for
    the block (the recomputation of a checkpointed layer sets the mode its forward pass ran in,
    ``MultiAgentPolicy.enable_gradient_checkpointing``: a backward may run where the mode differs,
    such as outside the block or in autograd's device thread)."""
    token = _IN_TRAINING_PASSES.set(on)
    try:
        yield
    finally:
        _IN_TRAINING_PASSES.reset(token)


def grouped_matmul_attention(module: nn.Module, query: torch.Tensor, key: torch.Tensor,
                             value: torch.Tensor, attention_mask: torch.Tensor | None,
                             dropout: float = 0.0, scaling: float | None = None,
                             is_causal: bool | None = None, **kwargs) -> tuple[torch.Tensor, None]:
    """transformers attention-interface function: ``query [B, H, Lq, D]``, ``key`` / ``value``
    ``[B, KV, Lk, D]``, ``attention_mask`` a bool ``[B, 1, Lq, Lk]`` (True = attend) or None
    (causal, the queries being the last ``Lq`` keys). Returns ``([B, Lq, H, D], None)``."""
    batch, heads, q_len, dim = query.shape
    kv_heads, k_len = key.shape[1], key.shape[2]
    if (not _IN_TRAINING_PASSES.get() or q_len == 1 or dropout > 0 or heads % kv_heads
            or any(kwargs.get(name) is not None for name in _DELEGATED_KWARGS)
            or (attention_mask is not None and attention_mask.dtype != torch.bool)
            or batch * heads * q_len * k_len > MAX_SCORE_ELEMENTS):
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout,
                                      scaling=scaling, is_causal=is_causal, **kwargs)
    groups = heads // kv_heads
    scale = dim ** -0.5 if scaling is None else scaling
    # the `groups` query heads that share key/value head j are rows of one matrix
    grouped = query.reshape(batch, kv_heads, groups * q_len, dim)  # [B, KV, G*Lq, D]
    # the scale goes on the (smaller) queries, the mask in place: each [B, H, Lq, Lk]
    # temporary is a fresh allocation
    scores = torch.matmul(grouped.float() * scale, key.float().transpose(-1, -2))  # [B, KV, G*Lq, Lk]
    scores = scores.view(batch, kv_heads, groups, q_len, k_len)
    if attention_mask is None:
        if is_causal is False:
            allowed = None
        else:  # query i sits at key position Lk - Lq + i
            allowed = torch.ones(q_len, k_len, dtype=torch.bool, device=query.device).tril(k_len - q_len)
    else:
        allowed = attention_mask[:, :, None]  # [B, 1, 1, Lq, Lk]
    if allowed is not None:
        scores = scores + mask_bias(allowed)  # [B, KV, G, Lq, Lk]
    probs = torch.softmax(scores, dim=-1).to(value.dtype)  # [B, KV, G, Lq, Lk]
    out = torch.matmul(probs.view(batch, kv_heads, groups * q_len, k_len), value)  # [B, KV, G*Lq, D]
    out = out.view(batch, heads, q_len, dim)  # [B, H, Lq, D]
    return out.transpose(1, 2).contiguous(), None


def mask_bias(allowed: torch.Tensor) -> torch.Tensor:
    """``allowed`` (bool, True = attend) as float32 scores to add: 0 where allowed, the float32
    minimum elsewhere.

    Adding the bias out of place, rather than ``masked_fill_`` on the scores, is bit-identical
    (``s + 0 == s``; ``s + min`` rounds to ``min`` for any score) and faster forward + backward:
    the in-place fill on a view of the product's output made
    autograd copy the whole ``[B, KV, G, Lq, Lk]`` score tensor in the backward, and the
    gradient of an addition is the incoming gradient itself. A finite minimum, not -inf: a
    padding query that may attend to nothing gets a uniform (ignored) row instead of NaNs that
    would poison the gradients through 0 * NaN."""
    bias = torch.zeros(allowed.shape, dtype=torch.float32, device=allowed.device)
    return bias.masked_fill_(~allowed, torch.finfo(torch.float32).min)


AttentionInterface.register(GROUPED_MATMUL, grouped_matmul_attention)
AttentionMaskInterface.register(GROUPED_MATMUL, sdpa_mask)


def half_precision_on_cpu(model: nn.Module) -> bool:
    """Whether ``model``'s weights are bf16 / fp16 on a CPU: where the update's passes take the
    grouped-matmul attention and the compiled RMSNorm."""
    weight = next(model.parameters())
    return weight.device.type == "cpu" and weight.dtype in (torch.bfloat16, torch.float16)


def use_grouped_matmul_attention(model: nn.Module) -> bool:
    """Switch ``model`` (a transformers model in half precision on a CPU) from ``sdpa`` to
    ``GROUPED_MATMUL``; returns whether it did. Other models (float32, GPUs, eager or
    flash-attention implementations, remote code) are left alone: ``model.attn_implementation:
    eager`` (or ``flash_attention_2``) is how a config keeps its named implementation on a CPU.
    Works under gradient checkpointing: a recomputed layer runs in the ``training_passes`` mode
    of its forward pass."""
    config = getattr(model, "config", None)
    if config is None or getattr(config, "_attn_implementation", None) != "sdpa":
        return False
    if not half_precision_on_cpu(model):
        # on GPUs the fused kernels are the fast path; in float32 the CPU kernel's backward
        # was as fast as this
        return False
    model.set_attn_implementation(GROUPED_MATMUL)
    return True
