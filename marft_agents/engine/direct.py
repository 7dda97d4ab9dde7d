"""Decode steps of a Llama-family model written against its weights (``sampling.engine: direct``).

Why: at decode time a batch of a few dozen rows makes every matrix product small, and on a CPU
with fast bf16 (AMX) the hundreds of small operators that ``transformers`` + peft run per step
(module calls, hooks, per-module LoRA dispatch, cache bookkeeping) took longer than the matrix
products themselves (see: ``python benchmarks/profile_rollout.py --engine fast --dtype bfloat16``).
This module runs the same
arithmetic with far fewer operators:

* **fused projections**: q/k/v are one product on a ``[q + k + v, H]`` weight, gate/up one on a
  ``[2I, H]`` weight (copies of the frozen base weights, made once and reused while the base
  weights are unchanged);
* **fused LoRA**: the active adapter's ``A`` matrices of a fused group are stacked, its ``B``
  matrices (times the adapter's scaling) laid out block-diagonally, so a group's LoRA delta is
  two small products whatever the number of adapted modules; the delta is added in the LoRA
  weights' precision and the sum rounded to the model's dtype, as peft does;
* **one rotary pass** over the query and key heads together, the KV cache written in place
  (``engine/kv_cache.py``'s ``ReservedLayer`` buffers), attention with peft/transformers'
  grouped-query layout for a one-token query (``pack_gqa``: no ``repeat_kv`` copy).

Numbers: every elementwise operation is the one ``LlamaRMSNorm``, ``apply_rotary_pos_emb``,
``LlamaMLP`` and peft's ``lora.Linear`` evaluate, in the same precision; only the order in which
a fused product accumulates may differ from the separate products (float rounding). Tests check
greedy tokens equal to the ``fast`` engine's and sampled log-probs equal to the training
forward pass's within the tolerance of the other engines.

Memory: the stacked q/k/v and gate/up weights are copies (70M of SmolLM2-135M's parameters);
in bfloat16 on CPU every weight, the LM head included, is instead held once more in oneDNN's
packed layout (the stacked copies are dropped). Both are built on the first sampling call and
cached on the model's modules.

Which models: ``model_type`` in ``DIRECT_MODEL_TYPES`` (Llama's decoder layer, no sliding
window, no per-head norms; Qwen2's is the same layer with biases on q/k/v, which the stacked
products carry) whose projections are plain or peft-LoRA linears (no DoRA, no merged
adapters, no active dropout). Anything else makes ``DirectDecoder.build`` return None and the
``fast`` loop runs the model's own forward instead.
"""

from __future__ import annotations

import logging

import torch
import torch.nn.functional as F
from torch import nn

from marft_agents.engine.cpu_support import onednn_bf16_prepack
from marft_agents.engine.kv_cache import ReservedLayer

DIRECT_MODEL_TYPES = ("llama", "qwen2")
"""``config.model_type`` values whose decoder layer this module computes."""

log = logging.getLogger(__name__)
_told: set[tuple[str, str]] = set()


def _fall_back(model_type: str, why: str) -> None:
    """Log once per model type and reason that the ``direct`` engine runs ``fast`` instead."""
    if (model_type, why) not in _told:
        _told.add((model_type, why))
        log.info("sampling.engine direct: %s for model type %r; decoding with the fast loop", why, model_type)

_FUSED_GROUPS = (("self_attn", ("q_proj", "k_proj", "v_proj")),
                 ("self_attn", ("o_proj",)),
                 ("mlp", ("gate_proj", "up_proj")),
                 ("mlp", ("down_proj",)))
"""Projections that read the same input, computed as one product each."""


def _base_linear(module: nn.Module) -> tuple[nn.Linear, list[tuple[torch.Tensor, torch.Tensor, float]]] | None:
    """(base ``nn.Linear``, active LoRA ``(A [r, in], B [out, r], scaling)`` list) of a plain or
    peft-LoRA linear; None for anything this module does not reproduce exactly."""
    if type(module) is nn.Linear:
        return module, []
    base = getattr(module, "base_layer", None)
    if type(base) is not nn.Linear or not hasattr(module, "lora_A"):
        return None
    if getattr(module, "merged", False):
        return None  # an adapter folded into the base weight: not a weight this module stacks
    if getattr(module, "disable_adapters", False):
        return base, []
    loras = []
    for name in module.active_adapters:
        if name not in module.lora_A:
            continue
        if module.use_dora.get(name, False) or getattr(module, "lora_bias", {}).get(name, False):
            return None
        dropout = module.lora_dropout[name]
        if dropout.training and not isinstance(dropout, nn.Identity) and dropout.p > 0:
            return None
        loras.append((module.lora_A[name].weight, module.lora_B[name].weight, float(module.scaling[name])))
    return base, loras


def packs(weight: torch.Tensor) -> bool:
    """Whether ``weight`` is multiplied through a oneDNN-prepacked copy (``_Linear``): bfloat16 on
    a CPU where the prepacked product runs (``engine.cpu_support.onednn_bf16_prepack``: AVX-512
    BW/VL/DQ or AVX-NE-CONVERT; an AVX2-only CPU falls back to ``F.linear``). There the plain
    ``F.linear`` re-lays out the weight for the matrix unit on every call (reading and writing the
    whole weight again, per step), and the prepacked product is bit-identical (checked in
    tests/agents/test_direct_decode.py); float32 prepacking changes the kernel and its rounding,
    so float32 keeps ``F.linear``."""
    return weight.device.type == "cpu" and weight.dtype == torch.bfloat16 and onednn_bf16_prepack()


class _Linear:
    """``F.linear(x, weight, bias)``, through a prepacked weight where ``packs`` says so."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, rows_hint: int = 32) -> None:
        self.packed = torch.ops.mkldnn._reorder_linear_weight(weight, rows_hint) if packs(weight) else None
        # once packed, the plain weight (a stacked copy for fused groups) is not needed: drop it
        self.weight, self.bias = (None if self.packed is not None else weight), bias

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.packed is None:
            return F.linear(x, self.weight, self.bias)
        return torch.ops.mkldnn._linear_pointwise(x, self.packed, self.bias, "none", [], "")


class _Group:
    """One fused product: the stacked base weights of modules that share an input, plus the
    active adapter's stacked LoRA factors (``None`` when no member is adapted)."""

    def __init__(self, base: _Linear, lora_a: torch.Tensor | None, lora_b: torch.Tensor | None) -> None:
        self.base, self.lora_a, self.lora_b = base, lora_a, lora_b

    def __call__(self, x: torch.Tensor) -> torch.Tensor:  # [b, 1, in] -> [b, 1, out]
        y = self.base(x)
        if self.lora_a is None:
            return y
        # peft: result + lora_B(lora_A(x.to(lora dtype))) * scaling, then back to the base dtype
        delta = F.linear(F.linear(x.to(self.lora_a.dtype), self.lora_a), self.lora_b)  # [b, 1, out]
        return (y + delta).to(y.dtype)


def _fused_base(parent: nn.Module, bases: list[nn.Linear]) -> _Linear:
    """The stacked base weight (and bias) of ``bases`` as one product, cached on ``parent`` and
    rebuilt only when a member weight is replaced or modified in place (the base is frozen in
    MARFT, so this is built once per model)."""
    # packs(): a cached probe, in the key so that forcing the plain kernels rebuilds the product
    key = tuple((b.weight.data_ptr(), b.weight._version, b.weight.device, b.weight.dtype, packs(b.weight))
                for b in bases)
    cache = getattr(parent, "_marft_direct_fused", None) or {}
    names = tuple(id(b) for b in bases)
    hit = cache.get(names)
    if hit is not None and hit[0] == key:
        return hit[1]
    with torch.no_grad():
        weight = bases[0].weight if len(bases) == 1 else torch.cat([b.weight for b in bases], dim=0)
        biases = [b.bias for b in bases]
        if all(b is None for b in biases):
            bias = None
        else:
            bias = torch.cat([b if b is not None else bases[i].weight.new_zeros(bases[i].out_features)
                              for i, b in enumerate(biases)])
    linear = _Linear(weight, bias)
    cache[names] = (key, linear)
    parent._marft_direct_fused = cache
    return linear


def _group(parent: nn.Module, modules: list[nn.Module]) -> _Group | None:
    parts = [_base_linear(m) for m in modules]
    if any(p is None for p in parts):
        return None
    bases = [p[0] for p in parts]
    base = _fused_base(parent, bases)
    loras = [(i, lora) for i, p in enumerate(parts) for lora in p[1]]
    if not loras:
        return _Group(base, None, None)
    dtype = loras[0][1][0].dtype
    if any(a.dtype != dtype or b.dtype != dtype for _, (a, b, _s) in loras):
        return None
    with torch.no_grad():
        lora_a = torch.cat([a for _, (a, _b, _s) in loras], dim=0)  # [sum r, in]
        offsets = [0]
        for b in bases:
            offsets.append(offsets[-1] + b.out_features)
        lora_b = lora_a.new_zeros(offsets[-1], lora_a.shape[0])  # [sum out, sum r], block-diagonal
        col = 0
        for i, (_a, b, scaling) in loras:
            lora_b[offsets[i]:offsets[i + 1], col:col + b.shape[1]] = b * scaling
            col += b.shape[1]
    return _Group(base, lora_a, lora_b)


class DirectDecoder:
    """One-token decode steps over a KV cache of ``ReservedLayer`` buffers (see module doc).

    Built per sampling call (``build``), after the prefill has filled the cache, with the adapter
    that is active for that call.
    """

    def __init__(self, lm: nn.Module, layers: list[tuple], keys: list[torch.Tensor],
                 values: list[torch.Tensor]) -> None:
        config = lm.config
        self.layers = layers
        self.keys, self.values = keys, values  # per layer [b, kv heads, capacity, d]
        self.heads = config.num_attention_heads
        self.kv_heads = config.num_key_value_heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // self.heads
        self.eps = config.rms_norm_eps
        self.norm = lm.model.norm.weight
        self.embed = lm.model.embed_tokens.weight
        head = lm.get_output_embeddings()
        self.head = _fused_base(head, [head])  # the LM head, prepacked like the projections
        self.rotary = lm.model.rotary_emb
        self.act = lm.model.layers[0].mlp.act_fn

    @classmethod
    def build(cls, lm: nn.Module, cache) -> DirectDecoder | None:
        """A decoder for ``lm`` over ``cache`` (a ``DynamicCache`` of ``ReservedLayer``s), or None
        when the model or its adapters are not ones this module reproduces."""
        config = getattr(lm, "config", None)
        model_type = str(getattr(config, "model_type", None))
        if model_type not in DIRECT_MODEL_TYPES:
            _fall_back(model_type, f"not one of {list(DIRECT_MODEL_TYPES)}")
            return None
        if lm.training:
            return None
        if (getattr(config, "hidden_act", None) != "silu" or getattr(config, "pretraining_tp", 1) != 1
                or getattr(config, "use_sliding_window", False)):
            _fall_back(model_type, "an activation, tensor-parallel split or sliding window it does not compute")
            return None
        if not all(type(layer) is ReservedLayer and layer.is_initialized for layer in cache.layers):
            return None
        if type(lm.get_output_embeddings()) is not nn.Linear:
            return None  # an adapted LM head: leave it to the model's own forward
        layers = []
        for layer in lm.model.layers:
            groups = []
            for parent_name, names in _FUSED_GROUPS:
                parent = getattr(layer, parent_name)
                group = _group(parent, [getattr(parent, n) for n in names])
                if group is None:
                    return None
                groups.append(group)
            layers.append((layer.input_layernorm.weight, layer.post_attention_layernorm.weight, *groups))
        return cls(lm, layers, [c._k for c in cache.layers], [c._v for c in cache.layers])

    def _rms_norm(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        # LlamaRMSNorm: normalise in float32, round to the input dtype, then scale
        return weight * F.rms_norm(x.float(), (x.shape[-1],), eps=self.eps).to(x.dtype)

    def select(self, keep: torch.Tensor) -> None:
        """Keep only the rows ``keep`` (indices into the current batch) in the cache."""
        self.keys = [k[keep] for k in self.keys]
        self.values = [v[keep] for v in self.values]

    @torch.inference_mode()
    def step(self, token: torch.Tensor, position: torch.Tensor, column: int, attend: torch.Tensor,
             ) -> torch.Tensor:
        """Logits ``[b, V]`` of the next token after ``token [b]`` at ``position [b, 1]``, its KV
        written to cache column ``column``; ``attend [b, column + 1]`` (bool) masks padding."""
        b = token.shape[0]
        nh, nkv, d = self.heads, self.kv_heads, self.head_dim
        x = F.embedding(token[:, None], self.embed)  # [b, 1, H]
        cos, sin = self.rotary(x, position)  # [b, 1, d] each
        cos, sin = cos[:, None], sin[:, None]  # [b, 1, 1, d]
        mask = attend[:, None, None, :]  # [b, 1, 1, L]
        half = d // 2
        for i, (norm_in, norm_post, qkv, out, gate_up, down) in enumerate(self.layers):
            h = self._rms_norm(x, norm_in)
            heads = qkv(h).view(b, 1, nh + 2 * nkv, d).transpose(1, 2)  # [b, nh + 2 kv, 1, d]
            qk = heads[:, :nh + nkv]  # queries and keys rotate together
            rotated = torch.cat((-qk[..., half:], qk[..., :half]), dim=-1)  # rotate_half
            qk = (qk * cos) + (rotated * sin)  # [b, nh + kv, 1, d]
            k_cache, v_cache = self.keys[i], self.values[i]
            k_cache[:, :, column:column + 1] = qk[:, nh:]
            v_cache[:, :, column:column + 1] = heads[:, nh + nkv:]
            # one query token: the heads of a kv group become its "positions" (transformers' pack_gqa)
            q = qk[:, :nh].reshape(b, nkv, nh // nkv, d)  # [b, kv, rep, d]
            attn = F.scaled_dot_product_attention(q, k_cache[:, :, :column + 1], v_cache[:, :, :column + 1],
                                                  attn_mask=mask, scale=d ** -0.5)  # [b, kv, rep, d]
            x = x + out(attn.reshape(b, 1, nh * d))
            h = self._rms_norm(x, norm_post)
            gu = gate_up(h)  # [b, 1, 2I]
            inter = gu.shape[-1] // 2
            x = x + down(self.act(gu[..., :inter]) * gu[..., inter:])
        x = self._rms_norm(x, self.norm)
        return self.head(x[:, 0])  # [b, V]
