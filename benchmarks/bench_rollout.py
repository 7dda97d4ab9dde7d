"""Rollout tokens/s through the whole collector vs raw ``model.generate`` on the same batches.

Collector side: ``RolloutCollector.collect(batch)`` on ``batch`` instances of
``marft/Arithmetic-v0`` (profile ``dual``: reasoner_0 -> actor_0) with a ``MultiAgentPolicy``
(one LoRA adapter per agent + critic), timed end to end: chat templates, generation with the
agent's adapter, the critic's values (``--values state`` as MARFT-A records them, ``token`` as
MARFT-T does), env steps and grading.

Reference side, in the same run: right after each ``policy.generate`` call of the collector,
the same batch is generated again by a separate, unwrapped copy of the same base model (no peft,
same dtype) with one ``model.generate`` call: same prompts (left-padded like the policy pads
them), same sampling settings (temperature, top-p, no top-k; a ``GenerationConfig`` built from
scratch so nothing from the checkpoint is merged in), and ``min_new_tokens = max_new_tokens =``
the number of tokens the collector's call generated for its longest row. Its time is taken out
of the collector's. Both sides thus run the same number of decoding steps on the same batch
shapes, seconds apart under the same machine load, and both are credited with the same tokens
(the response tokens of the collector's rollout): the ratio is a ratio of times for equal work.

Shared prefixes (``sampling.share_prefix``, on by default, ``--no-share-prefix`` turns it off):
the collector computes each agent's system turn once per batch and reuses its KV cache for every
row, which ``generate`` cannot do; with it on, the collector does less prefill work than the
reference for the same output, so a ratio above 1 is a real saving, not an equal-work figure.

``--stop none`` (default) makes every utterance run to ``--new-tokens`` (``stop_token_ids=()``),
so the work is identical token for token. ``--stop eos`` is the training setting: the policy then
drops finished rows from its batch, which ``generate`` (here forced to the same number of
steps) does not, so the collector may look better than equal work would.

Printed per repeat: the collector's wall time split into ``policy.generate``, the critic's value
pass and the rest (chat templates, env steps, grading, bookkeeping), the reference's time, the
ratio, and the same ratio in process CPU time (steadier on a shared machine; it misses the CPU
of the math-verify grading worker, a child process, whose cost is inside "rest" in wall time).
The summary gives the medians over ``--repeats`` (after one warm-up collect), and the ratio
with the critic's value pass left out of the collector's time: the critic is extra work (a
forward of the critic adapter over every prompt, or prompt + response for ``--values token``)
that ``generate`` does not do, so that figure isolates the collector's own overhead.

Compute bound, in the same run (``benchmarks/_bound.py``): one decode step of the model's own
linear layers and LM head as bare GEMMs at the batch of each ``generate`` call (same weights,
dtype and threads), timed right after the repeats; a call of ``rows`` rows that produced
``tokens`` tokens is credited ``tokens * step_seconds(rows) / rows`` bound seconds (prefill is
not in the bound: it is work the collector must do on top). ``collector/bound`` is the bound's
time over the collector's time for the same tokens, ``generate/bound`` the same for the raw
``generate`` reference. The last line printed is ``rollout/bound ratio: X`` with X the
collector's figure for the first engine given (``direct`` by default).

``collector/work-bound`` is the same ratio against the bare GEMMs of EVERY forward pass the
collector ran: the decode steps above plus each sampling prefill (the prompt tokens after the
shared prefix, the prefix once, one LM-head row per prompt) and each critic value pass (its
prompt tokens, ``token`` values: and the response, no LM head). The critic values the rollout's
decisions once it is over, an episode's global-state log as one row (its decisions' inputs extend
one another, ``critic.GlobalStateLog``; under ``--values token`` each input with its response),
still longer than the responses: the decode-only ratio cannot approach 1 while that pass is inside the collector's
time (``--values none`` measures the sampler alone).

Engines (``--engine``, ``sampling.engine``): the ``direct``, ``fast`` and ``legacy`` decoding
loops; ``all`` (default) runs one collector per engine on the same task order, their repeats
interleaved, and prints the speed-up of the first over each other one in collector tok/s.

The bound's decode step is the fastest weight layout measured (``_bound.decode_step_layouts``:
``F.linear`` as the model holds the weights, and oneDNN-prepacked bf16 weights on CPU, which
the ``direct`` engine uses), so no engine beats the bound by choosing a layout.

``--train-settings``: the shipped dual-team training configs' rollout (bfloat16, 2 threads,
batch 32, temperature 0.5, 32 new tokens, eos stops, state values, shared prefixes, LoRA on);
flags given explicitly still win.

Usage::

    python benchmarks/bench_rollout.py --train-settings      # the acceptance setting
    python benchmarks/bench_rollout.py --train-settings --dtype float32   # on CPUs without bf16
    python benchmarks/bench_rollout.py                       # SmolLM2-135M, float32, batch 8
    python benchmarks/bench_rollout.py --dtype bfloat16 --batch 16 --new-tokens 64
    python benchmarks/bench_rollout.py --tiny                # tiny random model, seconds
    python benchmarks/bench_rollout.py --tiny --tiny-arch qwen2   # tiny random Qwen2 (q/k/v biases)
    python benchmarks/bench_rollout.py --model Qwen/Qwen2.5-1.5B-Instruct --device cuda --dtype bfloat16
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
from transformers import GenerationConfig  # noqa: E402

import marft_envs  # noqa: E402
from benchmarks._bound import decode_step_layouts, head_layout_seconds, model_linears, train_pass_seconds  # noqa: E402
from benchmarks._common import add_common_args, load_avg, load_model, now, set_threads  # noqa: E402
from marft_agents.engine.layout import effective_prefix_len, left_pad  # noqa: E402
from marft_agents.episodes import VALUE_MODES  # noqa: E402
from marft_agents.model.policy import MultiAgentPolicy  # noqa: E402
from marft_agents.model.scoring import Scorer, ScoringPaths  # noqa: E402
from marft_agents.collector import RolloutCollector  # noqa: E402
from marft_agents.settings.critic import CriticConfig  # noqa: E402
from marft_agents.settings.lora import LoraSpec  # noqa: E402
from marft_agents.settings.sampling import ENGINES, SamplingConfig  # noqa: E402

ENV_ID = "marft/Arithmetic-v0"
TARGET = 0.85
BOUND_TARGET = 0.6
TRAIN_SETTINGS = {"dtype": "bfloat16", "threads": 2, "batch": 32, "temperature": 0.5, "new_tokens": 32,
                  "stop": "eos", "values": "state"}
"""The dual-team training configs' rollout (baselines/configs/marft_a_arithmetic.yaml)."""


def load_models(args: argparse.Namespace) -> tuple[Any, Any, Any, str]:
    """(model for the policy, identical unwrapped copy for the reference, tokenizer, name), as
    ``args`` (``add_common_args``) say."""
    model, tok, name = load_model(args.tiny, args.dtype, args.device, args.model, args.tiny_arch)
    raw, _, _ = load_model(args.tiny, args.dtype, args.device, args.model, args.tiny_arch)
    return model, raw, tok, name


Call = tuple[list[list[int]], list[list[int]]]
"""(prompt ids, response ids) of one ``policy.generate`` call."""


@dataclass
class Recorder:
    """Wraps the policy's ``generate`` and value methods on the instance: records and times every
    call, and (with ``replay``) runs the reference on each generate batch right after it, so both
    sides of a batch are measured seconds apart under the same machine load."""

    policy: Any
    replay: Any = None
    """``replay(call) -> None`` run after every generate call (its time is kept apart), or None."""
    calls: list[Call] = field(default_factory=list)
    gen: list[float] = field(default_factory=lambda: [0.0, 0.0])
    values: list[float] = field(default_factory=lambda: [0.0, 0.0])
    raw: list[float] = field(default_factory=lambda: [0.0, 0.0])
    """[wall, cpu] seconds in policy.generate / the value methods / the reference replays."""
    passes: list[tuple[int, int]] = field(default_factory=list)
    """(tokens computed, rows through the LM head) of every full-prompt forward pass the collector
    ran: the sampling prefills (one head row per prompt) and the critic's value passes (none)."""

    def __post_init__(self) -> None:
        p = self.policy
        generate, state_values, token_values = p.generate, p.state_values, p.token_values

        def add(acc: list[float], start: tuple[float, float]) -> None:
            end = now()
            acc[0] += end[0] - start[0]
            acc[1] += end[1] - start[1]

        def timed_generate(requests, sampling):
            start = now()
            out = generate(requests, sampling)
            add(self.gen, start)
            call = ([list(r.prompt_ids) for r in requests], [list(g.response_ids) for g in out])
            self.calls.append(call)
            self.passes.append((computed_tokens(call[0], [g.prefix_len for g in out]), len(requests)))
            if self.replay is not None:
                start = now()
                self.replay(call)
                add(self.raw, start)
            return out

        def timed(fn, with_responses):
            def wrapper(ids, *args, **kwargs):
                start = now()
                out = fn(ids, *args, **kwargs)
                add(self.values, start)
                responses = args[0] if with_responses else None
                self.passes.append((computed_tokens(ids, kwargs.get("prefix_lens"), p.value_rows, responses), 0))
                return out
            return wrapper

        p.generate = timed_generate
        p.state_values, p.token_values = timed(state_values, False), timed(token_values, True)

    def reset(self) -> None:
        self.calls, self.passes = [], []
        self.gen, self.values, self.raw = [0.0, 0.0], [0.0, 0.0], [0.0, 0.0]


UNMERGED = "+unmerged-critic"
"""Suffix of a collector row run with one critic row per decision (``--unmerged-critic``)."""


def computed_tokens(prompts: list[list[int]], prefix_lens: list[int] | None,
                    value_rows: Callable[[list[list[int]]], tuple[list[int], Any]] | None = None,
                    responses: list[list[int]] | None = None) -> int:
    """Tokens a forward pass over ``prompts`` (each followed by its response, if given) computes:
    each shared prefix once, then every row's own tokens (padding excluded); ``value_rows``
    (``policy.value_rows``, for critic passes): only the rows it runs, the others ride on them."""
    prefix_lens = prefix_lens or [0] * len(prompts)
    responses = responses if responses is not None else [[] for _ in prompts]
    groups: dict[tuple[int, ...], list[list[int]]] = {}
    for prompt, n, response in zip(prompts, prefix_lens, responses):
        prefix = tuple(prompt[:effective_prefix_len(prompt, n)])
        groups.setdefault(prefix, []).append(list(prompt[len(prefix):]) + list(response))
    total = 0
    for prefix, rows in groups.items():
        heads = value_rows(rows)[0] if value_rows is not None else range(len(rows))
        total += len(prefix) + sum(len(rows[h]) for h in heads)
    return total


def raw_generate(model: Any, tok: Any, call: Call, sampling: SamplingConfig) -> None:
    """``model.generate`` on one recorded batch, for as many steps as its longest response."""
    prompts, responses = call
    steps = max((len(r) for r in responses), default=0)
    if steps == 0:
        return
    ids, mask = left_pad(prompts, tok.pad_token_id, next(model.parameters()).device)  # [B, P], as the policy pads
    # A config built from scratch: model.generate would otherwise merge the checkpoint's
    # generation_config (and transformers' top_k=50 default) into the sampling settings.
    config = GenerationConfig(
        do_sample=sampling.do_sample, temperature=sampling.temperature, top_p=sampling.top_p,
        top_k=sampling.top_k or None, max_new_tokens=steps, min_new_tokens=steps,
        pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id, use_cache=True)
    with torch.inference_mode():
        out = model.generate(input_ids=ids, attention_mask=mask, generation_config=config)  # [B, P + steps]
    if out.shape[1] != ids.shape[1] + steps:
        raise RuntimeError(f"reference generated {out.shape[1] - ids.shape[1]} tokens, expected {steps}")


def _parse(argv: list[str] | None) -> argparse.Namespace:
    """The command line; ``--train-settings`` turns the dual-team training configs' settings into
    the defaults before parsing, so a flag given with it still wins."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=8, help="env instances = episodes per collect")
    ap.add_argument("--new-tokens", type=int, default=64, help="max_new_tokens per utterance")
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--top-p", type=float, default=1.0)
    ap.add_argument("--values", default="state", choices=[mode or "none" for mode in VALUE_MODES],
                    help="critic values the collector records (MARFT-A: state, MARFT-T: token)")
    ap.add_argument("--horizon", type=int, default=1,
                    help="rounds per episode; 1 keeps every generate call at the full batch")
    ap.add_argument("--stop", default="none", choices=["none", "eos"],
                    help="none: every utterance runs to --new-tokens (identical work on both sides); "
                         "eos: stop at eos as in training (the collector drops finished rows, the "
                         "reference decodes every row for as many steps as the collector's longest)")
    ap.add_argument("--level", type=int, default=1, help="Arithmetic level")
    ap.add_argument("--recompute-logprobs", action="store_true",
                    help="score the sampled tokens again with the training forward pass, as the "
                         "bfloat16 training configs do (inside policy.generate's time)")
    ap.add_argument("--no-share-prefix", action="store_true",
                    help="sampling.share_prefix=False: every row runs its whole prompt, the system "
                         "turn included (as generate does)")
    ap.add_argument("--engine", default="all", choices=[*ENGINES, "all"],
                    help="sampling.engine of the collector; all = one collector per engine, same tasks")
    ap.add_argument("--unmerged-critic", action="store_true",
                    help="also run the first engine with one critic row per decision (ScoringPaths.merge_prefix_rows "
                         "off: the collector before the episode log), same tasks, as its own row")
    ap.add_argument("--train-settings", action="store_true",
                    help="defaults of the dual-team training configs: " + ", ".join(
                        f"{k}={v}" for k, v in TRAIN_SETTINGS.items()))
    add_common_args(ap)
    if "--train-settings" in (sys.argv[1:] if argv is None else argv):
        ap.set_defaults(**TRAIN_SETTINGS)
    return ap.parse_args(argv)


def _score_for(policy: MultiAgentPolicy, engine: str) -> None:
    """Install the scoring paths of ``engine``'s row: one critic row per decision for an
    ``UNMERGED`` row, an episode's critic inputs merged otherwise."""
    policy.scoring = Scorer(policy, ScoringPaths(merge_prefix_rows=not engine.endswith(UNMERGED)))


def _measure(collectors: dict[str, RolloutCollector], policy: MultiAgentPolicy, rec: Recorder,
             args: argparse.Namespace) -> tuple[dict[str, list[tuple]], dict[str, list], dict[str, list]]:
    """One warm-up collect per engine, then ``args.repeats`` timed rounds over the engines (same
    tasks); prints each repeat. Returns per engine ``(rows, shapes, passes)``: the timing row of
    each repeat, its generate calls' ``(rows, tokens)`` and the forward passes the Recorder saw."""
    engines = list(collectors)
    for engine, collector in collectors.items():  # warm-up: first-call allocations, grader worker start-up
        _score_for(policy, engine)
        collector.collect(args.batch)

    rows: dict[str, list[tuple]] = {e: [] for e in engines}
    shapes: dict[str, list[tuple[int, int]]] = {e: [] for e in engines}  # (rows, tokens) per generate call
    passes: dict[str, list[list[tuple[int, int]]]] = {e: [] for e in engines}  # per repeat: Recorder.passes
    for rep in range(args.repeats):
        for engine, collector in collectors.items():
            _score_for(policy, engine)
            rec.reset()
            start = now()
            rollout = collector.collect(args.batch)
            end = now()
            # The collector's time is the collect() call minus the reference replays run inside it.
            coll = [end[0] - start[0] - rec.raw[0], end[1] - start[1] - rec.raw[1]]
            tokens = rollout.num_tokens
            if tokens != sum(len(r) for _, rs in rec.calls for r in rs):
                raise RuntimeError("the rollout's tokens are not those of the recorded generate calls")
            shapes[engine].append([(len(p), sum(len(r) for r in rs)) for p, rs in rec.calls])
            passes[engine].append(list(rec.passes))
            rows[engine].append((tokens / coll[0], tokens / rec.raw[0], rec.raw[0] / coll[0], rec.raw[1] / coll[1],
                                 rec.raw[0] / (coll[0] - rec.values[0]), coll[0], rec.raw[0], tokens))
            desc = " ".join(f"{len(p)}x{max(len(r) for r in rs)}" for p, rs in rec.calls)
            print(f"  {engine} repeat {rep}: {tokens} tokens in calls [{desc}] (rows x steps)  "
                  f"collector {coll[0]:.2f}s = generate {rec.gen[0]:.2f} + values {rec.values[0]:.2f} + "
                  f"rest {coll[0] - rec.gen[0] - rec.values[0]:.2f}  |  raw {rec.raw[0]:.2f}s  "
                  f"ratio {rec.raw[0] / coll[0]:.3f} (cpu-time ratio {rec.raw[1] / coll[1]:.3f})  [{load_avg()}]",
                  flush=True)
    return rows, shapes, passes


def _bounds(policy: MultiAgentPolicy, shapes: dict[str, list], passes: dict[str, list]
            ) -> tuple[dict[int, float], dict[tuple[int, int], float]]:
    """The bound: bare GEMMs of one decode step at each call's row count (same weights and
    threads), printed with the LM head's layouts; returns ``(seconds per decode step by batch,
    seconds per no-grad training pass by shape)``."""
    linears = model_linears(policy.lm)
    layouts = {b: decode_step_layouts(linears, b) for b in sorted({b for e in shapes for rep in shapes[e]
                                                                   for b, _ in rep})}
    step_s = {b: min(t.values()) for b, t in layouts.items()}  # the fastest layout is the bound
    print("bound (bare GEMMs of one decode step, incl. LM head; fastest weight layout): " + "  ".join(
        f"batch {b}: {1e3 * step_s[b]:.1f} ms = {b / step_s[b]:.1f} tok/s ("
        + ", ".join(f"{name} {1e3 * sec:.1f} ms" for name, sec in t.items()) + ")"
        for b, t in layouts.items()) + f"  [{load_avg()}]")
    widest = max(step_s)
    as_is, prepacked = head_layout_seconds(linears, widest)
    print(f"LM head at batch {widest}: {1e3 * as_is:.1f} ms as the model runs it ([V, H] weight), "
          f"{1e3 * prepacked:.1f} ms on a prepacked [H, V] copy; whole bare decode step {1e3 * step_s[widest]:.1f} ms")
    pass_s: dict[tuple[int, int], float] = {}
    for key in sorted({key for e in passes for rep in passes[e] for key in rep}):
        pass_s[key] = train_pass_seconds(linears, key[0], key[1], grad=False)
    return step_s, pass_s


def _report(engines: list[str], rows: dict[str, list[tuple]], shapes: dict[str, list], passes: dict[str, list],
            step_s: dict[int, float], pass_s: dict[tuple[int, int], float], args: argparse.Namespace,
            name: str) -> None:
    """Per engine the medians over the repeats against the bounds, the speed-ups against the
    first engine, and the last line: the first engine's rollout/bound ratio."""
    summary = {}
    for engine in engines:
        bound_s = [sum(n * step_s[b] / b for b, n in rep) for rep in shapes[engine]]
        # every forward the collector ran: decode steps + prefills + the critic's passes
        work_s = [b + sum(pass_s[key] for key in rep) for b, rep in zip(bound_s, passes[engine])]
        got = rows[engine]
        med = lambda i: statistics.median(r[i] for r in got)  # noqa: E731
        coll_bound = statistics.median(b / r[5] for b, r in zip(bound_s, got))
        raw_bound = statistics.median(b / r[6] for b, r in zip(bound_s, got))
        bound_tps = statistics.median(r[7] / b for b, r in zip(bound_s, got))
        work_bound = statistics.median(w / r[5] for w, r in zip(work_s, got))
        decode_share = statistics.median(b / w for b, w in zip(bound_s, work_s))
        summary[engine] = (med(0), coll_bound)
        verdict = "PASS" if med(2) >= TARGET else "MISS"
        print(f"engine {engine}: collector {med(0):.1f} tok/s  raw generate {med(1):.1f} tok/s  bound {bound_tps:.1f} "
              f"tok/s  |  generate/collector ratio {med(2):.3f} (target >= {TARGET}: {verdict}; cpu-time ratio "
              f"{med(3):.3f}; without the critic's value pass {med(4):.3f})  |  collector/bound {coll_bound:.3f}  "
              f"generate/bound {raw_bound:.3f}  |  collector/work-bound {work_bound:.3f} (decode steps are "
              f"{decode_share:.0%} of the collector's GEMM work; the rest: prefills, critic passes)  "
              f"median of {args.repeats}")
    for other in engines[1:]:
        first = engines[0]
        print(f"{first} vs {other}: speed-up {summary[first][0] / summary[other][0]:.2f}x in collector tok/s "
              f"(same run, same tasks)")
    ratio = summary[engines[0]][1]
    print(f"model {name}  dtype {args.dtype}  batch {args.batch}  threads {torch.get_num_threads()}  engine "
          f"{engines[0]}  target >= {BOUND_TARGET}: {'PASS' if ratio >= BOUND_TARGET else 'MISS'}  [{load_avg()}]")
    print(f"rollout/bound ratio: {ratio:.3f}")


def main(argv: list[str] | None = None) -> None:
    """1. Build the policy, the envs and one collector per engine row (same tasks, seed 0).
    2. Time each row's collects against the same generate calls replayed on the raw model (``_measure``).
    3. Time the bare GEMMs those calls needed (``_bounds``) and print the ratios (``_report``)."""
    args = _parse(argv)
    set_threads(args.threads)
    torch.manual_seed(0)

    model, raw, tok, name = load_models(args)
    envs = [marft_envs.make(ENV_ID, level=args.level, profile="dual", horizon=args.horizon)
            for _ in range(args.batch)]
    policy = MultiAgentPolicy(model, tok, list(envs[0].possible_agents), lora=LoraSpec(), critic=CriticConfig())
    sampling = SamplingConfig(max_new_tokens=args.new_tokens, temperature=args.temperature, top_p=args.top_p,
                              do_sample=True, stop_token_ids=() if args.stop == "none" else None,
                              recompute_logprobs=args.recompute_logprobs,
                              share_prefix=not args.no_share_prefix)
    rec = Recorder(policy, replay=lambda call: raw_generate(raw, tok, call, sampling))
    engines = list(ENGINES) if args.engine == "all" else [args.engine]
    if args.unmerged_critic:
        engines.append(engines[0] + UNMERGED)
    values = None if args.values == "none" else args.values
    collectors = {e: RolloutCollector(envs, policy, dataclasses.replace(sampling, engine=e.removesuffix(UNMERGED)),
                                      values=values, seed=0) for e in engines}

    print(f"model {name}  dtype {args.dtype}  batch {args.batch}  new tokens {args.new_tokens}  "
          f"temperature {args.temperature}  values {args.values}  stop {args.stop}  horizon {args.horizon}  "
          f"recompute {args.recompute_logprobs}  share prefix {not args.no_share_prefix}  engines {engines}  "
          f"torch threads {torch.get_num_threads()}  [{load_avg()}]", flush=True)
    rows, shapes, passes = _measure(collectors, policy, rec, args)
    step_s, pass_s = _bounds(policy, shapes, passes)
    _report(engines, rows, shapes, passes, step_s, pass_s, args, name)

if __name__ == "__main__":
    main()
