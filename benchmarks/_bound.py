"""Compute bounds measured in the benchmark's own run: the model's matrix products as bare GEMMs.

A bound is what the processor does with the model's *own* weight matrices (the same tensors,
so the same shapes, dtype and memory layout, and the thread count the benchmark set) when
nothing else runs: no attention, norms, KV cache, sampling, Python or framework overhead. A
benchmark divides its measured time by the bound's time for the same work, so its ratio says
how close the code is to the hardware on this machine, in this run, under this load.

* decode step (``decode_step_seconds``): one product per linear layer of the transformer (the
  base weights; LoRA's rank-r products are overhead) plus the LM head, on ``[b, in]`` inputs:
  what one sampling step of ``b`` rows cannot avoid;
* training pass (``train_pass_seconds``): for ``n`` tokens through the transformer and ``h``
  of them through the LM head, each linear's forward product and its input-gradient product
  (backward through a frozen weight), plus every LoRA adapter's forward products and the
  products that give its A and B gradients and its input-gradient contribution.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class Linears:
    """The weight matrices a forward pass multiplies by, in model order."""

    body: list[torch.Tensor]
    """Base weights ``[out, in]`` of the transformer's linear layers (LoRA's base layers
    included, the adapters excluded)."""
    head: torch.Tensor
    """The LM head's weight ``[V, H]`` (tied to the embeddings or not)."""
    lora: list[tuple[torch.Tensor, torch.Tensor]]
    """``(A [r, in], B [out, r])`` of ONE adapter on every adapted layer."""


def model_linears(lm: nn.Module, adapter: str | None = None) -> Linears:
    """The linears of ``lm`` (a causal LM, optionally with peft LoRA layers injected);
    ``adapter`` picks whose LoRA matrices count (default: the first adapter found)."""
    head = lm.get_output_embeddings()
    body, lora = [], []
    for name, module in lm.named_modules():
        if module is head or not isinstance(module, nn.Linear):
            continue
        if ".lora_" in f".{name}":  # an adapter's own A or B
            continue
        body.append(module.weight)
    for module in lm.modules():
        lora_a, lora_b = getattr(module, "lora_A", None), getattr(module, "lora_B", None)
        if isinstance(lora_a, nn.ModuleDict) and len(lora_a):
            key = adapter if adapter in lora_a else next(iter(lora_a))
            lora.append((lora_a[key].weight, lora_b[key].weight))
    if not body:
        raise ValueError("found no nn.Linear layers in the model: cannot build its GEMM bound")
    return Linears(body, head.weight, lora)


def _synchronize() -> None:
    """Wait for queued GPU work (CUDA kernels run asynchronously: a timer must wait for them)."""
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


def _median_time(fn, repeats: int) -> float:
    fn()  # warm-up (first-call allocations, kernel selection)
    times = []
    for _ in range(repeats):
        _synchronize()
        start = time.perf_counter()
        fn()
        _synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _inputs(weights: list[torch.Tensor], rows: int) -> dict[int, torch.Tensor]:
    """One random input per distinct input width: ``{width: [rows, width]}``."""
    return {w.shape[1]: torch.randn(rows, w.shape[1], dtype=w.dtype, device=w.device)
            for w in weights}


@torch.inference_mode()
def decode_step_layouts(linears: Linears, batch: int, repeats: int = 5) -> dict[str, float]:
    """Median seconds of one decode step's bare GEMMs at ``batch`` rows, per weight layout:
    ``linear`` (``F.linear`` on the weights as the model holds them) and, where oneDNN can
    prepack them (bfloat16 on CPU, ``marft_agents.engine.direct.packs``), ``prepacked`` (the
    same products on weights laid out once for the matrix unit, as the ``direct`` engine runs
    them; bit-identical results)."""
    from marft_agents.engine.direct import _Linear, packs

    weights = linears.body + [linears.head]
    xs = _inputs(weights, batch)

    def chain(products) -> None:
        for w, product in products:
            product(xs[w.shape[1]])

    plain = [(w, lambda x, w=w: F.linear(x, w)) for w in weights]
    out = {"linear": _median_time(lambda: chain(plain), repeats)}
    if all(packs(w) for w in weights):
        packed = [(w, _Linear(w, None, rows_hint=batch)) for w in weights]
        out["prepacked"] = _median_time(lambda: chain(packed), repeats)
    return out


def decode_step_seconds(linears: Linears, batch: int, repeats: int = 5) -> float:
    """Median seconds of one decode step's bare GEMMs at ``batch`` rows: the fastest weight
    layout of ``decode_step_layouts`` (a bound no engine beats by choosing its layout)."""
    return min(decode_step_layouts(linears, batch, repeats).values())


@torch.inference_mode()
def train_pass_seconds(linears: Linears, tokens: int, head_tokens: int, grad: bool,
                       repeats: int = 1) -> float:
    """Median seconds of the bare GEMMs of one training pass: ``tokens`` rows through the
    transformer, ``head_tokens`` through the LM head (0 for a critic pass); with ``grad``, the
    backward products too (input gradients of every linear, LoRA weight gradients)."""
    weights = linears.body + ([linears.head] if head_tokens else [])
    # One random input per (rows, width, dtype): peft keeps LoRA weights in float32 under a bf16
    # base (it casts the layer input up for them), so the same shape comes in two dtypes.
    pool: dict[tuple[int, int, torch.dtype], torch.Tensor] = {}

    def rand(rows: int, width: int, like: torch.Tensor) -> torch.Tensor:
        key = (rows, width, like.dtype)
        if key not in pool:
            pool[key] = torch.randn(rows, width, dtype=like.dtype, device=like.device)
        return pool[key]

    plan = [(w, rand(head_tokens if w is linears.head else tokens, w.shape[1], w),
             rand(head_tokens if w is linears.head else tokens, w.shape[0], w) if grad else None)
            for w in weights]
    lora_x = [(rand(tokens, a.shape[1], a), rand(tokens, b.shape[0], b)) for a, b in linears.lora]

    def run() -> None:
        for w, x, g in plan:
            F.linear(x, w)  # forward: [n, in] x [in, out]
            if grad:
                torch.mm(g, w)  # input gradient: [n, out] x [out, in]
        for (a, b), (x, g) in zip(linears.lora, lora_x):
            h = F.linear(x, a)  # [n, r]
            F.linear(h, b)  # [n, out]
            if grad:
                gh = torch.mm(g, b)  # [n, r]
                torch.mm(g.t(), h)  # dB: [out, r]
                torch.mm(gh.t(), x)  # dA: [r, in]
                torch.mm(gh, a)  # input gradient through the adapter: [n, in]

    return _median_time(run, repeats)


@torch.inference_mode()
def head_layout_seconds(linears: Linears, batch: int, repeats: int = 5) -> tuple[float, float]:
    """Median seconds of the LM head's product at ``batch`` rows as the model runs it
    (``F.linear`` on the ``[V, H]`` weight) and on a prepacked ``[H, V]`` contiguous copy: a
    measurement for deciding whether a decode-time copy of the head in that layout would pay."""
    head = linears.head
    x = torch.randn(batch, head.shape[1], dtype=head.dtype, device=head.device)
    packed = head.t().contiguous()  # [H, V]
    as_is = _median_time(lambda: F.linear(x, head), repeats)
    prepacked = _median_time(lambda: torch.mm(x, packed), repeats)
    return as_is, prepacked
