"""Tokens/s of ``MultiAgentPolicy.generate`` against plain ``model.generate`` on the same batch.

Both run in the same process on the same prompts, alternating, ``--repeats`` times each after
one warm-up; the reference is a second, adapter-free copy of the base model, so the ratio
includes everything the policy adds (LoRA layers, log-prob bookkeeping). Two regimes:

* ``fixed``: every row generates exactly ``--new-tokens`` tokens (stop tokens ignored; the
  reference uses ``min_new_tokens``): the pure per-token cost;
* ``eos``: rows stop at their end-of-turn token, as in rollouts. The policy drops finished rows
  from the batch, ``generate`` keeps computing them until the longest row ends.

Usage: ``python benchmarks/bench_generation.py [--batch 16] [--new-tokens 64] [--dtype float32]
[--model NAME_OR_PATH]`` (an alias, a local Hugging Face folder or a Hub id)
The helpers (``arithmetic_prompts``, ``time_policy``, ``time_reference``) are importable for
other benchmarks.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from transformers import GenerationConfig

from marft_agents.engine import GenRequest
from marft_agents.model.loading import load_model_and_tokenizer
from marft_agents.model.policy import MultiAgentPolicy
from marft_agents.settings.lora import LoraSpec
from marft_agents.settings.model import DEFAULT_MODEL, ModelConfig
from marft_agents.settings.sampling import SamplingConfig


def arithmetic_prompts(policy: MultiAgentPolicy, n: int, seed: int = 0) -> list[list[int]]:
    """``n`` chat prompts "Compute a + b" (a, b in 2..20), like the default arithmetic task."""
    rng = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        a, b = (int(x) for x in torch.randint(2, 21, (2,), generator=rng))
        out.append(policy.chat_prompt_ids(
            "You are a careful mathematician.",
            f"Compute {a} + {b}. Put the final answer in \\boxed{{}}."))
    return out


@dataclass
class Timing:
    """One timed call: generated tokens (stop tokens included) and seconds."""

    tokens: int
    seconds: float

    @property
    def rate(self) -> float:
        return self.tokens / self.seconds


def time_policy(policy: MultiAgentPolicy, agent_ids: list[str], prompts: list[list[int]],
                sampling: SamplingConfig) -> Timing:
    """Time one ``policy.generate`` call; requests are dealt round-robin to ``agent_ids``."""
    reqs = [GenRequest(agent_ids[i % len(agent_ids)], p) for i, p in enumerate(prompts)]
    start = time.perf_counter()
    gens = policy.generate(reqs, sampling)
    seconds = time.perf_counter() - start
    return Timing(sum(len(g.response_ids) for g in gens), seconds)


def time_reference(model: torch.nn.Module, tokenizer, prompts: list[list[int]],
                   sampling: SamplingConfig, stop_ids: list[int]) -> Timing:
    """Time plain ``model.generate`` on the same prompts (same sampling settings)."""
    enc = tokenizer.pad({"input_ids": prompts}, return_tensors="pt")
    ids = enc["input_ids"].to(model.device)
    mask = enc["attention_mask"].to(model.device)
    fixed = sampling.stop_token_ids == ()
    config = GenerationConfig(
        do_sample=sampling.do_sample, temperature=sampling.temperature, top_p=sampling.top_p,
        top_k=sampling.top_k, max_new_tokens=sampling.max_new_tokens,
        min_new_tokens=sampling.max_new_tokens if fixed else 0,
        eos_token_id=stop_ids, pad_token_id=tokenizer.pad_token_id, use_cache=True,
        repetition_penalty=1.0)
    start = time.perf_counter()
    with torch.inference_mode():
        out = model.generate(input_ids=ids, attention_mask=mask, generation_config=config)
    seconds = time.perf_counter() - start
    new = out[:, ids.shape[1]:].cpu()  # [B, N]
    tokens = 0
    for row in new.tolist():  # count up to and including the first stop token
        n = len(row)
        for j, t in enumerate(row):
            if t in stop_ids:
                n = j + 1
                break
        tokens += n
    return Timing(tokens, seconds)


def compare(run_policy: Callable[[], Timing], run_reference: Callable[[], Timing],
            repeats: int) -> dict[str, float]:
    """Warm both up, then alternate ``repeats`` timed calls of each (order flipped each round
    so neither always runs second); returns best and median rates and their ratios."""
    run_policy(), run_reference()
    pol: list[Timing] = []
    ref: list[Timing] = []
    for r in range(repeats):
        order = [(pol, run_policy), (ref, run_reference)]
        for sink, fn in order if r % 2 == 0 else order[::-1]:
            sink.append(fn())
    best_p, best_r = max(t.rate for t in pol), max(t.rate for t in ref)
    med_p = statistics.median(t.rate for t in pol)
    med_r = statistics.median(t.rate for t in ref)
    return {"policy_best": best_p, "reference_best": best_r, "ratio_best": best_p / best_r,
            "policy_median": med_p, "reference_median": med_r, "ratio_median": med_p / med_r,
            "policy_tokens": statistics.mean(t.tokens for t in pol),
            "reference_tokens": statistics.mean(t.tokens for t in ref)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=DEFAULT_MODEL, metavar="NAME_OR_PATH",
                        help=f"an alias, a local Hugging Face folder or a Hub id (default: {DEFAULT_MODEL})")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--agents", type=int, default=1, help="requests dealt round-robin")
    parser.add_argument("--targets", default=None,
                        help="LoRA target modules, comma separated or 'all-linear' "
                             "(default: peft's default for the architecture)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--modes", default="fixed,eos")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0 = default)")
    args = parser.parse_args()

    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    cfg = ModelConfig(args.model, dtype=args.dtype, device=args.device)
    base, tokenizer = load_model_and_tokenizer(cfg)
    reference, _ = load_model_and_tokenizer(cfg)  # an adapter-free copy for model.generate
    targets = args.targets
    if targets and targets != "all-linear":
        targets = tuple(targets.split(","))
    agents = [f"agent_{i}" for i in range(args.agents)]
    policy = MultiAgentPolicy(base, tokenizer, agents, LoraSpec(target_modules=targets))
    prompts = arithmetic_prompts(policy, args.batch)
    # requests are grouped per adapter, so the policy's forward batches are batch/agents rows;
    # the reference gets the same rows per call to compare like with like
    per_call = [prompts[i::args.agents] for i in range(args.agents)]
    stop_ids = policy.stop_token_ids
    lora_targets = sorted(policy.model.peft_config[policy.adapter_names[0]].target_modules)
    print(f"model={args.model} dtype={args.dtype} device={args.device} threads="
          f"{torch.get_num_threads()} batch={args.batch} agents={args.agents} "
          f"(forward batch {len(per_call[0])}) new_tokens={args.new_tokens} "
          f"lora_targets={lora_targets}")
    for mode in args.modes.split(","):
        sampling = SamplingConfig(max_new_tokens=args.new_tokens, temperature=1.0,
                                  stop_token_ids=() if mode == "fixed" else None)

        def run_ref() -> Timing:
            parts = [time_reference(reference, tokenizer, p, sampling, stop_ids)
                     for p in per_call]
            return Timing(sum(t.tokens for t in parts), sum(t.seconds for t in parts))

        res = compare(lambda: time_policy(policy, agents, prompts, sampling), run_ref,
                      args.repeats)
        print(f"[{mode}] MultiAgentPolicy.generate: {res['policy_best']:.1f} tok/s best, "
              f"{res['policy_median']:.1f} median ({res['policy_tokens']:.0f} tokens/call)")
        print(f"[{mode}] model.generate           : {res['reference_best']:.1f} tok/s best, "
              f"{res['reference_median']:.1f} median ({res['reference_tokens']:.0f} tokens/call)")
        print(f"[{mode}] ratio policy/reference   : {res['ratio_best']:.3f} (best), "
              f"{res['ratio_median']:.3f} (median)   target >= 0.85")


if __name__ == "__main__":
    main()
