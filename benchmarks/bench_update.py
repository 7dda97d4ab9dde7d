"""PPO-update tokens/s of the learners vs a bare forward+backward of the same batches.

A rollout is collected once per kind of critic values (``marft/Arithmetic-v0``, profile
``dual``, ``--batch`` episodes of one round, so ``2 * batch`` decisions). Then, per
learner (MARFT-A = ``mappo_action``, MARFT-T = ``mappo_token``):

* **update**: ``learner.update(rollout)`` timed end to end: sample building, advantage
  whitening, every critic and policy micro-batch (forward + loss + backward), gradient clipping
  and the optimizer steps;
* **bare**: every forward pass the update made (recorded by wrapping the policy's
  ``token_logprobs`` / ``state_values`` / ``token_values`` on the instance) is replayed in the
  same order, with the same sequences, micro-batches, padding, adapter and dtype, through the
  same peft model, as a forward + a minimal loss + backward: token cross-entropy of the response
  tokens for policy passes (full LM with ``logits_to_keep``, as the policy computes them), and a
  squared value from the value head on the decoder's last hidden states for critic passes
  (no LM head, as the policy's critic). No optimizer, no PPO maths. Rows that share a prefix
  (each agent's system turn, ``sampling.share_prefix``, the default) are replayed with the same
  layout the policy uses: one batch-1 forward of the prefix whose KV cache every row reuses, so
  both sides do the same arithmetic (``--no-share-prefix`` runs both without it).

Both sides are credited with the same tokens: prompt + response tokens of every policy and
``token_values`` pass, prompt tokens of every ``state_values`` pass, where an episode's critic
inputs (with their responses, for ``token_values``), which extend one another, run as one row
(``critic.GlobalStateLog``; ``--paths plain`` runs one row per decision). Each learner updates on
a rollout collected with its own kind of critic values (MARFT-T's critic log also holds the
responses' tokens), from the same seed. The ratio is thus a ratio
of times for equal forward/backward work. Each repeat times one update and then its replay;
a warm-up update on a one-episode slice of the rollout (and its replay) comes first. Medians
over repeats are printed, with the same ratio in process CPU time (steadier when other
processes share the machine).

Compute bound, in the same run (``benchmarks/_bound.py``): every recorded pass again as bare
GEMMs of the model's own weights (same dtype and threads): each linear's forward product over
the tokens the pass computes (a shared prefix once, then every row's own tokens, no padding),
the LM head over the response tokens of policy passes, and, for passes with grad, each linear's
input-gradient product and the LoRA adapter's weight-gradient products. ``update/bound`` is the
bound's time over the update's; the last line printed is ``update/bound ratio: X`` for the first
learner of ``--learners``.

Usage::

    python benchmarks/bench_update.py --dtype bfloat16 --threads 2 --batch 32 --minibatch 16 \
        --recompute-old-logprobs --learners A        # the shipped MARFT-A config's update
    python benchmarks/bench_update.py                         # SmolLM2-135M, float32
    python benchmarks/bench_update.py --dtype bfloat16 --batch 8 --new-tokens 64
    python benchmarks/bench_update.py --tiny                  # tiny random model, seconds
    python benchmarks/bench_update.py --model /path/to/hf_folder   # any local folder, Hub id or alias
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import marft_envs  # noqa: E402
from benchmarks._bound import model_linears, train_pass_seconds  # noqa: E402
from benchmarks._common import add_common_args, load_avg, load_model, now, set_threads, since  # noqa: E402
from marft_agents.config import load_config  # noqa: E402
from marft_agents.engine.attention import GROUPED_MATMUL, training_passes, use_grouped_matmul_attention  # noqa: E402
from marft_agents.engine.compiled_norm import use_compiled_rms_norm, use_eager_rms_norm  # noqa: E402
from marft_agents.engine.layout import after_prefix, left_pad, pack, prefix_cache  # noqa: E402
from marft_agents.learners import get_learner, make_learner  # noqa: E402
from marft_agents.model.policy import MultiAgentPolicy  # noqa: E402
from marft_agents.episodes import Rollout  # noqa: E402
from marft_agents.collector import RolloutCollector  # noqa: E402
from marft_agents.model.scoring import Scorer, ScoringPaths, last_token_index, token_index  # noqa: E402

ENV_ID = "marft/Arithmetic-v0"
TARGET = 0.8
TRAINING_PATHS = ("fast", "unmerged", "plain")
"""``--paths`` choices (see ``set_training_path``)."""
LEARNERS = {"A": "mappo_action", "T": "mappo_token"}


@dataclass
class Call:
    """One forward pass a learner asked the policy for."""

    kind: str
    """``token_logprobs``, ``state_values`` or ``token_values``."""
    adapter: str
    prompts: list[list[int]]
    responses: list[list[int]] | None
    grad: bool
    prefix_lens: list[int] | None = None
    """Each row's shared prefix, as the learner passed it."""

    @property
    def tokens(self) -> int:
        n = sum(len(p) for p in self.prompts)
        return n + (sum(len(r) for r in self.responses) if self.responses is not None else 0)


@dataclass
class Recorder:
    """Records every forward pass the learner requests from ``policy`` (wrapped on the instance)."""

    policy: Any
    calls: list[Call] = field(default_factory=list)

    def __post_init__(self) -> None:
        p = self.policy
        token_logprobs, state_values, token_values = p.token_logprobs, p.state_values, p.token_values

        def rec_logprobs(adapter, prompt_ids, response_ids, *args, **kwargs):
            self.calls.append(Call("token_logprobs", adapter, list(prompt_ids), list(response_ids),
                                   torch.is_grad_enabled(), kwargs.get("prefix_lens")))
            return token_logprobs(adapter, prompt_ids, response_ids, *args, **kwargs)

        def rec_state(prompt_ids, *args, **kwargs):
            self.calls.append(Call("state_values", p.critic_for(kwargs.get("agent_id")), list(prompt_ids), None,
                                   torch.is_grad_enabled(), kwargs.get("prefix_lens")))
            return state_values(prompt_ids, *args, **kwargs)

        def rec_token_values(prompt_ids, response_ids, *args, **kwargs):
            self.calls.append(Call("token_values", p.critic_for(kwargs.get("agent_id")), list(prompt_ids),
                                   list(response_ids), torch.is_grad_enabled(), kwargs.get("prefix_lens")))
            return token_values(prompt_ids, response_ids, *args, **kwargs)

        p.token_logprobs, p.state_values, p.token_values = rec_logprobs, rec_state, rec_token_values

    def take(self) -> list[Call]:
        calls, self.calls = self.calls, []
        return calls


def bare_loss(policy: Any, call: Call, rows: list[int], prefix_len: int) -> torch.Tensor:
    """Forward + minimal loss of the rows of one recorded pass that share one prefix."""
    pad, device = policy.tokenizer.pad_token_id, policy.device
    prompts = [call.prompts[r] for r in rows]
    decoder = policy.lm.get_decoder()
    if call.kind == "token_logprobs":
        batch = pack(prompts, [call.responses[r] for r in rows], pad, device, prefix_len)
        width = batch.response_ids.shape[1]
        cache = prefix_cache(policy.lm, batch.prefix_ids, len(rows), device) if prefix_len else None
        logits = policy.lm(input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                           position_ids=batch.position_ids, cache=cache, use_cache=cache is not None,
                           logits_to_keep=width + 1).logits[:, :width]  # [B, T, V]
        nll = F.cross_entropy(logits.float().flatten(0, 1), batch.response_ids.flatten(),
                              reduction="none").view_as(batch.response_mask)  # [B, T]
        return nll[batch.response_mask].mean()
    head = policy.value_heads[call.adapter]
    if call.kind == "state_values":  # one row per chain of inputs, as the policy runs them
        suffixes = [q[prefix_len:] for q in prompts]
        heads, where, hidden = chain_rows(policy, decoder, suffixes, prompts[0][:prefix_len])  # hidden [h, P, H]
        chain, column = last_token_index(suffixes, heads, where, hidden.shape[1], device)  # [B], [B]
        return head(hidden[chain, column]).pow(2).mean()
    # token_values: prompt + response per row, one row per chain of them, as the policy runs them
    seqs = [q[prefix_len:] + list(call.responses[r]) for q, r in zip(prompts, rows)]
    heads, where, hidden = chain_rows(policy, decoder, seqs, prompts[0][:prefix_len])  # hidden [h, L, H]
    chain, last_prompt = token_index([len(q) for q in seqs], heads, where, [len(q) - prefix_len for q in prompts],
                                     hidden.shape[1], device)  # [B], [B]
    lengths = torch.tensor([len(call.responses[r]) for r in rows], device=device)  # [B]
    steps = torch.arange(int(lengths.max()), device=device)  # [T]
    column = (last_prompt[:, None] + steps[None]).clamp(max=hidden.shape[1] - 1)  # [B, T]
    values = head(hidden[chain[:, None], column])  # [B, T]
    return values[steps[None] < lengths[:, None]].pow(2).mean()


def chain_rows(policy: Any, decoder: Any, seqs: list[list[int]], prefix: list[int]
               ) -> tuple[list[int], list[tuple[int, int]], torch.Tensor]:
    """A critic pass's rows as the policy runs them: one left-padded row per chain of ``seqs``
    (``policy.value_rows``) after the shared ``prefix``; ``(heads, where, hidden [h, L, H])``."""
    heads, where = policy.value_rows(seqs)
    cache = prefix_cache(decoder, prefix, len(heads), policy.device) if prefix else None
    ids, mask = left_pad([seqs[h] for h in heads], policy.tokenizer.pad_token_id, policy.device)  # [h, L]
    mask, pos = after_prefix(mask, len(prefix))  # [h, s + L], [h, L]
    hidden = decoder(input_ids=ids, attention_mask=mask, position_ids=pos, cache=cache,
                     use_cache=cache is not None).last_hidden_state  # [h, L, H]
    return heads, where, hidden


def bare_pass(policy: Any, call: Call) -> None:
    """Forward + minimal loss + backward of one recorded pass, through the same peft model."""
    active = policy.model.active_adapter
    policy.model.set_adapter(call.adapter)
    policy.set_trainable(None, critic=True)  # peft's set_adapter changes requires_grad flags
    with torch.set_grad_enabled(call.grad):
        loss = sum(bare_loss(policy, call, rows, prefix_len)
                   for prefix_len, rows in policy.scoring.prefix_groups(call.prompts, call.prefix_lens))
        if call.grad:
            loss.backward()
    for param in policy.adapter_parameters(call.adapter):
        param.grad = None
    policy.model.set_adapter(active)  # leave the policy's adapter bookkeeping as it was
    policy.set_trainable(None, critic=True)


def replay(policy: Any, calls: list[Call], by_kind: dict[str, float] | None = None) -> tuple[float, float]:
    """(wall, cpu) seconds of the bare passes of ``calls``; ``by_kind`` (if given) collects the
    wall seconds per kind of pass ("token_logprobs with grad", ...)."""
    start = now()
    for call in calls:
        t = time.perf_counter()
        bare_pass(policy, call)
        if by_kind is not None:
            key = f"{call.kind} {'with' if call.grad else 'no'} grad"
            by_kind[key] = by_kind.get(key, 0.0) + time.perf_counter() - t
    return since(start)


def set_training_path(policy: Any, path: str) -> None:
    """``fast``: the policy's defaults (fused head, an episode's critic inputs on one row; in half
    precision on a CPU grouped-matmul attention and compiled RMSNorm); ``unmerged``: the same with
    one critic row per decision (what the episode log saves); ``plain``: the model's own forward
    with full logits, one critic row per decision, the ``sdpa`` attention and transformers'
    RMSNorm."""
    policy.scoring = Scorer(policy, ScoringPaths(fused_head=path != "plain", merge_prefix_rows=path == "fast"))
    if path == "plain":
        if policy.lm.config._attn_implementation == GROUPED_MATMUL:
            policy.lm.set_attn_implementation("sdpa")
        use_eager_rms_norm(policy.lm)
    else:
        use_grouped_matmul_attention(policy.lm)
        use_compiled_rms_norm(policy.lm)


def bound_seconds(policy: Any, calls: list[Call], cache: dict) -> float:
    """Seconds of the bare GEMMs of ``calls`` (see the module docstring); ``cache`` keeps the
    time of each (adapter, tokens, head tokens, grad) already measured."""
    total = 0.0
    for call in calls:
        for prefix_len, rows in policy.scoring.prefix_groups(call.prompts, call.prefix_lens):
            resp = [len(call.responses[r]) for r in rows] if call.responses is not None else [0] * len(rows)
            if call.kind == "state_values":  # the chains' rows only (policy.value_rows)
                heads, _ = policy.value_rows([call.prompts[r][prefix_len:] for r in rows])
                rows, resp = [rows[h] for h in heads], [0] * len(heads)
            elif call.kind == "token_values":  # the same over prompt + response
                heads, _ = policy.value_rows([call.prompts[r][prefix_len:] + call.responses[r] for r in rows])
                rows, resp = [rows[h] for h in heads], [resp[h] for h in heads]
            tokens = prefix_len + sum(len(call.prompts[r]) - prefix_len + n for r, n in zip(rows, resp))
            head = sum(resp) if call.kind == "token_logprobs" else 0
            key = (call.adapter, tokens, head, call.grad)
            if key not in cache:
                cache[key] = train_pass_seconds(model_linears(policy.lm, call.adapter), tokens, head, call.grad)
            total += cache[key]
    return total


def sub_rollout(rollout: Rollout, episodes: int) -> Rollout:
    """The first ``episodes`` episodes of ``rollout`` (decision indices renumbered)."""
    out = Rollout()
    for ep in rollout.episodes[:episodes]:
        new = dataclasses.replace(ep, decisions=[])
        for i in ep.decisions:
            new.decisions.append(len(out.decisions))
            out.decisions.append(rollout.decisions[i])
        out.episodes.append(new)
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=4, help="episodes in the rollout (2 decisions each)")
    ap.add_argument("--new-tokens", type=int, default=32, help="max_new_tokens of the rollout")
    ap.add_argument("--minibatch", type=int, default=8, help="schedule.minibatch_size (decisions per step)")
    ap.add_argument("--micro-batch", type=int, default=0, help="schedule.micro_batch_size; 0 = minibatch")
    ap.add_argument("--learners", default="AT", help="which to run: A (MARFT-A), T (MARFT-T) or AT")
    ap.add_argument("--no-share-prefix", action="store_true",
                    help="sampling.share_prefix=False: every row runs its whole prompt (both sides)")
    ap.add_argument("--temperature", type=float, default=0.5,
                    help="sampling and scoring temperature (the shipped configs' 0.5)")
    ap.add_argument("--paths", default="fast",
                    help="training passes to time, comma-separated, the first one's ratio printed last: "
                         "fast (the policy's defaults), unmerged (fast with one critic row per decision) "
                         "and/or plain (the model's own forward with full logits, one critic row per "
                         "decision, sdpa attention and eager RMSNorm: the unoptimised reference path)")
    ap.add_argument("--recompute-old-logprobs", action="store_true",
                    help="ppo.recompute_old_logprobs (the shipped bf16 training configs): the update adds a "
                         "no-grad pass over its micro-batches, replayed as a bare no-grad forward")
    add_common_args(ap)
    args = ap.parse_args(argv)
    set_threads(args.threads)
    torch.manual_seed(0)

    model, tok, name = load_model(args.tiny, args.dtype, args.device, args.model, args.tiny_arch)
    env_kwargs = {"level": 1, "profile": "dual", "horizon": 1}
    cfg = load_config({
        "algorithm": "mappo_action",
        "env": {"id": ENV_ID, "kwargs": env_kwargs, "num_envs": args.batch},
        "model": {"dtype": args.dtype},
        "sampling": {"max_new_tokens": args.new_tokens, "temperature": args.temperature,
                     "share_prefix": not args.no_share_prefix},
        "schedule": {"minibatch_size": args.minibatch, "micro_batch_size": args.micro_batch or None},
        "ppo": {"recompute_old_logprobs": args.recompute_old_logprobs},
    })
    envs = [marft_envs.make(ENV_ID, **env_kwargs) for _ in range(args.batch)]
    agents = list(envs[0].possible_agents)
    policy = MultiAgentPolicy(model, tok, agents, lora=cfg.lora, critic=cfg.critic)
    print(f"model {name}  dtype {args.dtype}  rollout {args.batch} episodes x {len(agents)} agents, "
          f"new tokens {args.new_tokens}  minibatch {args.minibatch}  "
          f"micro-batch {args.micro_batch or args.minibatch}  share prefix {not args.no_share_prefix}  "
          f"torch threads {torch.get_num_threads()}  [{load_avg()}]", flush=True)

    # One rollout per kind of critic values the learners record (MARFT-A: per decision, MARFT-T:
    # per token, whose critic log also holds the responses), from the same seed.
    rollouts: dict[str, Rollout] = {}
    for key in args.learners:
        mode = get_learner(LEARNERS[key]).value_mode
        if mode not in rollouts:
            t = time.perf_counter()
            rollouts[mode] = RolloutCollector(envs, policy, cfg.sampling, values=mode, seed=0).collect(args.batch)
            r = rollouts[mode]
            print(f"rollout ({mode} values): {len(r.decisions)} decisions, {sum(len(d.prompt_ids) for d in r.decisions)} "
                  f"prompt + {r.num_tokens} response tokens (collected in {time.perf_counter() - t:.1f}s)", flush=True)

    paths = [p.strip() for p in args.paths.split(",") if p.strip()]
    if not paths or any(p not in TRAINING_PATHS for p in paths):
        raise SystemExit(f"--paths: expected a comma-separated subset of {', '.join(TRAINING_PATHS)}, got {args.paths!r}")
    rec = Recorder(policy)
    rollout_of = {key: rollouts[get_learner(LEARNERS[key]).value_mode] for key in args.learners}
    runs = [(path, key) for path in paths for key in args.learners]
    learners = {}
    for path, key in runs:  # one learner per path, warmed up (first-call allocations) on a slice
        set_training_path(policy, path)
        learners[path, key] = make_learner(LEARNERS[key], policy, cfg, agents)
        learners[path, key].update(sub_rollout(rollout_of[key], 1), 0)
        replay(policy, rec.take())
    rows: dict[tuple[str, str], list[tuple[float, ...]]] = {run: [] for run in runs}
    kind_seconds: dict[tuple[str, str], dict[str, float]] = {run: {} for run in runs}
    bound_cache: dict = {}
    for rep in range(args.repeats):  # paths interleaved within each repeat: same machine state
        for path, key in runs:
            set_training_path(policy, path)
            start = now()
            metrics = learners[path, key].update(rollout_of[key], rep + 1)
            (update_s, update_cpu) = since(start)
            calls = rec.take()
            tokens = sum(c.tokens for c in calls)
            with training_passes():  # the attention path the update's passes took
                bare_s, bare_cpu = replay(policy, calls, kind_seconds[path, key])
            rec.take()
            bound_s = bound_seconds(policy, calls, bound_cache)
            rows[path, key].append((tokens / update_s, tokens / bare_s, bare_s / update_s, bare_cpu / update_cpu,
                                    bound_s / update_s, bound_s / bare_s, update_s))
            kinds = ", ".join(f"{sum(c.kind == k for c in calls)} {k}" for k in
                              ("token_logprobs", "state_values", "token_values") if any(c.kind == k for c in calls))
            print(f"  [{path}] MARFT-{key} repeat {rep}: {tokens} tokens in {len(calls)} passes ({kinds})  "
                  f"update {update_s:.2f}s  bare {bare_s:.2f}s  ratio {bare_s / update_s:.3f} "
                  f"(cpu-time ratio {bare_cpu / update_cpu:.3f})  bound {bound_s:.2f}s  "
                  f"update/bound {bound_s / update_s:.3f}  "
                  f"skipped steps {metrics.get('guard/skipped_steps', 0):.0f}  [{load_avg()}]", flush=True)
    print(f"model {name}  dtype {args.dtype}  batch {args.batch}  new tokens {args.new_tokens}  "
          f"temperature {args.temperature}  median of {args.repeats}  [{load_avg()}]")
    bound_ratios: list[float] = []
    for path, key in runs:
        r = rows[path, key]
        med = [statistics.median(x[i] for x in r) for i in range(7)]
        bound_ratios.append(med[4])
        split = "  ".join(f"{kind} {sec / args.repeats:.2f}s" for kind, sec in sorted(kind_seconds[path, key].items()))
        print(f"  [{path}] MARFT-{key} ({LEARNERS[key]}): update {med[0]:.1f} tok/s ({med[6]:.2f}s)  "
              f"bare fwd+bwd {med[1]:.1f} tok/s  ratio {med[2]:.3f} (cpu-time ratio {med[3]:.3f})  |  "
              f"update/bound {med[4]:.3f} (target >= {TARGET}: {'PASS' if med[4] >= TARGET else 'MISS'})  "
              f"bare/bound {med[5]:.3f}")
        print(f"      bare seconds per update by pass: {split}")
    first = paths[0]
    for other in paths[1:]:
        for key in args.learners:
            a = statistics.median(x[6] for x in rows[first, key])
            b = statistics.median(x[6] for x in rows[other, key])
            print(f"  MARFT-{key} update speed-up {first} vs {other}: {b / a:.2f}x")
    print(f"update/bound ratio: {bound_ratios[0]:.3f}")


if __name__ == "__main__":
    main()
