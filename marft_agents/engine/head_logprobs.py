"""The LM head, the token log-probs and the entropies of a training pass, fused and chunked.

Why: scoring a policy micro-batch the plain way materialises ``[B, T+1, V]`` logits, their
float32 copy, the log-softmax, ``exp`` of it and the products of the entropy, and as many
tensors again in the backward: for 16 rows x 32 tokens of SmolLM2 (V = 49,152) each is a
~100 MB float32 tensor, allocated fresh (page faults on every first touch) and mostly made of
subnormal numbers at temperature 0.5. On a CPU those vocabulary-sized tensors took a large share
of a bfloat16 PPO step (measure: ``python benchmarks/bench_update.py --dtype bfloat16 --paths
fast,plain``; ``plain`` materialises the full logits). Here the head
runs over the real response positions only (no padding), a few dozen of them at a time, each
chunk's logits are reduced at once to what the loss needs (the token's log-prob, the entropy,
the log-normaliser), and the backward recomputes a chunk's logits from the saved hidden states
instead of keeping them: the only tensors kept are ``[N]``-sized. The same idea as the fused
linear cross-entropy of Liger-Kernel and others.

Arithmetic: the token log-prob is ``(x - max) - log(sum(exp(x - max)))`` with ``x =
logits.float() / T``, the formula of ``engine.sampling.scaled_logprobs`` (``log_softmax``) and of
the samplers; the entropy is ``marft_agents.ppo_math.entropy_from_logprobs``'s. Gradients (``s =
x``, ``p = softmax(s)``): ``d logp_tok / ds = onehot - p`` and ``d H / ds = -p * (logp + H)``, then
``/ T`` and through the head's weight (frozen: no weight gradient).

Used for models whose logits are exactly ``lm_head(hidden)`` (``plain_head``); others keep the
model's own forward.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from marft_agents.ppo_math import entropy_from_logprobs, floored_probs

CHUNK_BYTES = 24 << 20
"""Float32 logits per chunk (24 MiB, 128 positions of a 49k vocabulary): under glibc's 32 MiB
limit above which every allocation is mapped afresh (page faults on first touch), and as many
rows as possible per pass over the head's weight (which the chunk's products read whole: small
chunks starve the matrix unit)."""

PLAIN_HEAD_MODEL_TYPES = frozenset({"llama", "mistral", "qwen2", "qwen3", "gpt2", "phi3", "smollm3"})
"""transformers model types whose causal-LM forward returns ``lm_head(hidden)`` unchanged (no
soft-capping or logit scaling), so the fused path computes the same logits."""


def plain_head(model: nn.Module) -> nn.Linear | None:
    """``model``'s output head when its logits are exactly ``head(hidden)``; None otherwise."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    model_type = getattr(getattr(model, "config", None), "model_type", None)
    if (model_type not in PLAIN_HEAD_MODEL_TYPES or not isinstance(head, nn.Linear)
            or head.bias is not None or head.weight.requires_grad):
        return None
    return head


def _chunk_rows(vocab: int) -> int:
    return max(1, CHUNK_BYTES // (4 * vocab))


_scratch: dict[tuple, torch.Tensor] = {}


def _buffer(slot: str, rows: int, like: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A reused ``[rows, V]`` buffer (``like``: the head's weight ``[V, H]``), one per slot.

    Why: a chunk's float32 tensors are ~24 MiB each; allocated fresh inside an update, between
    the model's own allocations, they were handed back to the system and faulted in again page
    by page, which made the bf16 -> float32 copy of a chunk's logits many times slower than
    into memory already touched."""
    key = (slot, like.device, dtype, like.shape[0])
    buf = _scratch.get(key)
    if buf is None or buf.shape[0] < rows:
        # a normal tensor even when first asked for under inference_mode (the rollout's scoring):
        # an inference tensor could not be written outside it, in the update's passes
        with torch.inference_mode(False):
            buf = _scratch[key] = torch.empty(rows, like.shape[0], dtype=dtype, device=like.device)
    return buf[:rows]


def _scaled_chunk(hidden: torch.Tensor, weight: torch.Tensor, temperature: float) -> torch.Tensor:
    """``x = logits.float() / T`` for a chunk of hidden states ``[n, H]`` -> ``[n, V]``, in the
    reused ``"x"`` buffer (valid until the next chunk)."""
    logits = F.linear(hidden, weight)  # [n, V] in the weight's dtype
    if logits.dtype == torch.float32:
        return logits.div_(temperature)
    return _buffer("x", hidden.shape[0], weight, torch.float32).copy_(logits).div_(temperature)


def _probs_buffer(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """The reused ``"p"`` buffer for a chunk ``x [n, V]``'s probabilities."""
    return _buffer("p", x.shape[0], weight, torch.float32)


class _HeadLogprobs(torch.autograd.Function):
    """``(hidden [N, H], weight [V, H], tokens [N])`` -> ``(logp [N], entropy [N] or empty)``."""

    @staticmethod
    def forward(ctx, hidden: torch.Tensor, weight: torch.Tensor, tokens: torch.Tensor,
                temperature: float, with_entropy: bool) -> tuple[torch.Tensor, torch.Tensor]:
        rows = hidden.shape[0]
        logp = hidden.new_empty(rows, dtype=torch.float32)  # [N]
        log_norm = hidden.new_empty(rows, dtype=torch.float32)  # [N] log(sum(exp(x - max)))
        top = hidden.new_empty(rows, dtype=torch.float32)  # [N] max(x)
        entropy = hidden.new_empty(rows if with_entropy else 0, dtype=torch.float32)
        step = _chunk_rows(weight.shape[0])
        for start in range(0, rows, step):
            end = min(start + step, rows)
            x = _scaled_chunk(hidden[start:end], weight, temperature)  # [n, V]
            peak = x.amax(dim=-1, keepdim=True)  # [n, 1]
            x.sub_(peak)  # x - max
            norm = floored_probs(x, _probs_buffer(x, weight)).sum(-1, keepdim=True).log_()  # [n, 1]
            logp[start:end] = x.gather(-1, tokens[start:end, None]).squeeze(-1) - norm.squeeze(-1)
            top[start:end], log_norm[start:end] = peak.squeeze(-1), norm.squeeze(-1)
            if with_entropy:  # x: the log-probs [n, V]
                entropy[start:end] = entropy_from_logprobs(x.sub_(norm), out=_probs_buffer(x, weight))
        ctx.save_for_backward(hidden, weight, tokens, top, log_norm, entropy)
        ctx.temperature = temperature
        ctx.set_materialize_grads(False)  # an output the loss does not use gets None: skip its terms
        return logp, entropy

    @staticmethod
    def backward(ctx, grad_logp: torch.Tensor, grad_entropy: torch.Tensor):
        hidden, weight, tokens, top, log_norm, entropy = ctx.saved_tensors
        if grad_logp is None and grad_entropy is None:
            return None, None, None, None, None
        if grad_logp is None:
            grad_logp = torch.zeros_like(log_norm)
        grad_hidden = torch.empty_like(hidden)  # [N, H]
        use_entropy = entropy.numel() > 0 and grad_entropy is not None
        step = _chunk_rows(weight.shape[0])
        for start in range(0, hidden.shape[0], step):
            end = min(start + step, hidden.shape[0])
            logp_all = _scaled_chunk(hidden[start:end], weight, ctx.temperature)  # [n, V]
            logp_all.sub_(top[start:end, None]).sub_(log_norm[start:end, None])  # log p
            probs = floored_probs(logp_all, _probs_buffer(logp_all, weight))  # [n, V]
            g_logp = grad_logp[start:end, None]  # [n, 1]
            if use_entropy:  # d/ds (g_lp logp_tok + g_H H) = g_lp (onehot - p) - g_H p (logp + H)
                logp_all.add_(entropy[start:end, None]).mul_(grad_entropy[start:end, None])
                grad_x = probs.mul_(logp_all.add_(g_logp)).neg_()  # [n, V]
            else:
                grad_x = probs.mul_(g_logp).neg_()  # [n, V]
            grad_x.scatter_add_(-1, tokens[start:end, None], g_logp)
            grad_x.div_(ctx.temperature)
            if grad_x.dtype != weight.dtype:
                grad_x = _buffer("g", grad_x.shape[0], weight, weight.dtype).copy_(grad_x)
            grad_hidden[start:end] = grad_x @ weight  # [n, H]
        return grad_hidden, None, None, None, None


def head_logprobs(hidden: torch.Tensor, head: nn.Linear, tokens: torch.Tensor, temperature: float,
                  with_entropy: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-prob ``[N]`` of ``tokens [N]`` (and the entropy ``[N]`` of each position's scaled
    distribution) from the hidden states ``[N, H]`` that predict them, through ``head``."""
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    logp, entropy = _HeadLogprobs.apply(hidden, head.weight, tokens, float(temperature), with_entropy)
    return logp, (entropy if with_entropy else None)
