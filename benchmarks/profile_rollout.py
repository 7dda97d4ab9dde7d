"""Where a decode step's time goes: one ``engine.sample`` call under ``torch.profiler``.

Builds the training configs' rollout batch (``marft/Arithmetic-v0`` level 1, profile ``dual``:
the reasoner's prompts of ``--batch`` episodes, its chat template with the system turn shared as a
prefix), a ``MultiAgentPolicy`` with the LoRA adapters on, and profiles one warm
``marft_agents.engine.sample`` call of ``--new-tokens`` steps through the chosen engine. Every profiled
operator's *self* CPU time is put in one bucket:

* ``linear (base)``: matrix products of the transformer's own weights;
* ``LoRA``: products with a rank-``r`` adapter matrix (input or output width ``r``), and the
  adapter's scaling and add;
* ``LM head``: the product producing the vocabulary logits;
* ``attention``: everything under ``scaled_dot_product_attention``;
* ``other model ops``: the rest of the forward pass (norms, rotary, activation, KV-cache
  appends, masks, embedding);
* ``sampling + bookkeeping``: everything outside the model's forward pass (temperature,
  log-softmax, the draw, the chosen token's log-prob, stop checks, pruning);
* ``Python / untraced``: wall time minus all of the above (interpreter time between operators,
  the profiler's own overhead included, so it is an upper bound).

Prefill is profiled too (it is part of the call): the table gives totals for the whole call
and per decode step (total / steps). Adapter switching is timed apart (``set_adapter`` between
the two agents' adapters), since it happens once per ``generate`` group, not per step.

Usage::

    python benchmarks/profile_rollout.py --dtype float32 --batch 32 --engine legacy
    python benchmarks/profile_rollout.py --tiny --batch 4 --new-tokens 4    # smoke test
    python benchmarks/profile_rollout.py --model /path/to/hf_folder --batch 8   # another model
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
from torch import nn  # noqa: E402

import marft_envs  # noqa: E402
from benchmarks._common import add_common_args, load_avg, load_model, set_threads  # noqa: E402
from marft_agents.engine import sample  # noqa: E402
from marft_agents.engine.direct import DirectDecoder  # noqa: E402
from marft_agents.engine.layout import effective_prefix_len  # noqa: E402
from marft_agents.model.policy import MultiAgentPolicy  # noqa: E402
from marft_agents.settings.critic import CriticConfig  # noqa: E402
from marft_agents.settings.lora import LoraSpec  # noqa: E402
from marft_agents.settings.sampling import ENGINES, SamplingConfig  # noqa: E402

BUCKETS = ("prefill", "linear (base)", "LoRA", "LM head", "attention", "other model ops",
           "sampling + bookkeeping", "Python / untraced")
MATMULS = {"aten::mm", "aten::addmm", "aten::bmm", "aten::matmul", "aten::linear",
           "mkldnn::_linear_pointwise"}  # the last: the direct engine's prepacked bf16 products


def mark_forward_passes(lm: nn.Module) -> None:
    """Wrap the LM's forward (and the ``direct`` engine's decode step) in profiler ranges:
    ``marft.prefill`` for passes over more than one token per row, ``marft.forward`` for decode
    steps; everything outside them is sampling and bookkeeping."""
    forward = lm.forward

    def marked(*args, **kwargs):
        ids = kwargs.get("input_ids")
        name = "marft.prefill" if ids is not None and ids.shape[1] > 1 else "marft.forward"
        with torch.profiler.record_function(name):
            return forward(*args, **kwargs)

    lm.forward = marked
    step = DirectDecoder.step

    def marked_step(self, *args, **kwargs):
        with torch.profiler.record_function("marft.forward"):
            return step(self, *args, **kwargs)

    DirectDecoder.step = marked_step


def rollout_prompts(policy: MultiAgentPolicy, batch: int) -> tuple[list[list[int]], int]:
    """The reasoner's prompts of ``batch`` Arithmetic episodes and their shared prefix length."""
    prompts, prefix = [], None
    for i in range(batch):
        env = marft_envs.make("marft/Arithmetic-v0", level=1, profile="dual", horizon=1)
        env.reset(seed=i)
        obs, _r, _te, _tr, info = env.last()
        ids = policy.chat_prompt_ids(info["system_prompt"], obs["text"])
        prompts.append(ids)
        prefix = effective_prefix_len(ids, policy.shared_prefix_len(info["system_prompt"], ids))
    return prompts, min(prefix, *(len(p) - 1 for p in prompts))


def bucket_of(event, vocab: int, rank: int) -> str:
    """The bucket of one profiled operator, from itself and its ancestors."""
    chain, node = [], event
    while node is not None:
        chain.append(node)
        node = node.cpu_parent
    names = [e.name for e in chain]
    if "marft.prefill" in names:
        return "prefill"
    if "marft.forward" not in names:
        return "sampling + bookkeeping"
    if any("scaled_dot_product_attention" in n for n in names):
        return "attention"
    mats = [e for e in chain if e.name in MATMULS]
    if mats:
        shapes = [s for s in mats[-1].input_shapes if s]  # the outermost product decides
        dims = {d for s in shapes for d in s[-2:]}
        if vocab in dims:
            return "LM head"
        if dims & {rank * k for k in range(1, 8)}:  # one adapter, or the direct engine's stacked ones
            return "LoRA"
        return "linear (base)"
    if any(n.startswith("marft.lora") for n in names):
        return "LoRA"
    return "other model ops"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=32, help="rows (the dual team's rollout: 32)")
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--temperature", type=float, default=0.5)
    ap.add_argument("--top-ops", type=int, default=4, help="operators named per bucket")
    ap.add_argument("--engine", default=ENGINES[0], choices=ENGINES)
    add_common_args(ap)
    args = ap.parse_args(argv)
    set_threads(args.threads)
    torch.manual_seed(0)
    model, tok, name = load_model(args.tiny, args.dtype, args.device, args.model, args.tiny_arch)
    agents = ["reasoner_0", "actor_0"]
    policy = MultiAgentPolicy(model, tok, agents, lora=LoraSpec(), critic=CriticConfig())
    prompts, prefix_len = rollout_prompts(policy, args.batch)
    cfg = SamplingConfig(max_new_tokens=args.new_tokens, temperature=args.temperature,
                         stop_token_ids=(), engine=args.engine)
    lm = policy.lm
    mark_forward_passes(lm)
    vocab = policy.lm.get_output_embeddings().weight.shape[0]

    def call() -> None:
        sample(lm, prompts, cfg, (), tok.pad_token_id, prefix_len=prefix_len)

    with torch.inference_mode(), policy.using("policy_reasoner_0"):
        call()  # warm-up
        start = time.perf_counter()
        call()
        plain = time.perf_counter() - start
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                    record_shapes=True) as prof:
            start = time.perf_counter()
            call()
            wall = time.perf_counter() - start
    totals: dict[str, float] = defaultdict(float)
    ops: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for event in prof.events():
        if event.name.startswith("marft."):
            continue
        bucket = bucket_of(event, vocab, LoraSpec().r)
        totals[bucket] += event.self_cpu_time_total / 1e6
        ops[bucket][event.name] += event.self_cpu_time_total / 1e6
    totals["Python / untraced"] = max(0.0, wall - sum(totals.values()))

    switch = []
    for i in range(20):
        start = time.perf_counter()
        policy.model.set_adapter(f"policy_{agents[i % 2]}")
        switch.append(time.perf_counter() - start)
    policy._active = None

    steps = args.new_tokens
    print(f"model {name}  dtype {args.dtype}  engine {args.engine}  batch {args.batch}  "
          f"prefix {prefix_len}  new tokens {steps}  temperature {args.temperature}  "
          f"torch threads {torch.get_num_threads()}  [{load_avg()}]")
    print(f"call: {plain:.3f}s unprofiled ({args.batch * steps / plain:.1f} tok/s), "
          f"{wall:.3f}s profiled")
    print(f"{'bucket':<24} {'total s':>8} {'ms/step':>8} {'share':>6}")
    for bucket in BUCKETS:
        t = totals.get(bucket, 0.0)
        top = sorted(ops.get(bucket, {}).items(), key=lambda kv: -kv[1])[:args.top_ops]
        print(f"{bucket:<24} {t:8.3f} {1e3 * t / steps:8.3f} {t / wall:6.1%}   "
              + ", ".join(f"{n.removeprefix('aten::')} {v / t:.0%}" for n, v in top))
    print(f"adapter switch (set_adapter): {1e3 * sorted(switch)[len(switch) // 2]:.2f} ms median, "
          f"once per generate group")


if __name__ == "__main__":
    main()
