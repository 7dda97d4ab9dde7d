"""Per-episode time of a team of two base models against its parts: each model's one-model run.

A team of different models (``models:`` / ``agents:``, :mod:`marft_agents.model.team`) holds one
``MultiAgentPolicy`` per base model and routes every call to the member of the agent or adapter.
The routing should cost next to nothing: an episode of the team should take what its agents'
turns take on their own models. This measures it, all in one run on ``marft/Arithmetic-v0``
(profile ``dual``: reasoner_0 -> actor_0, one round):

* **team**: reasoner_0 on model A (``model:``), actor_0 on model B (``models.second``), the
  critic on A (the first agent's model, the default), built by ``run.trainer.load_policy`` as a
  training run builds it: a :class:`~marft_agents.model.team.TeamPolicy`;
* **one-model runs**: both agents and the critic on A alone, and on B alone (each a plain
  ``MultiAgentPolicy`` on its own load of the model, so no peft injection is shared).

Every run plays the same seeded tasks (one ``RolloutCollector`` each, seed 0: repeat k of each
run plays the same problems), utterances run to ``--new-tokens`` (no stop token: equal decoding
work whatever the model writes), and the runs' repeats are interleaved (team, A, B, team, A,
B, then A, B, team, ..., the order rotated every repeat) after one warm-up collect each, so each
repeat's three runs are seconds apart under the same machine load.

**The parts.** Each run's collect time is split, by wrapping the policy's ``generate`` and each
critic's ``scoring.state_values_with_reads`` on the instance, into each agent's generate calls,
the critic's value pass and the rest (chat templates, env steps, grading). The team's parts are what its pieces cost on their
own models in the same repeat: reasoner_0's generate time in A's run + actor_0's in B's run + the
critic's value pass in A's run (the critic's model) + the mean of the two runs' rest. ``team /
parts`` is the team's overhead (target <= :data:`TARGET`); with two loads of one model the parts
are that model's own run.

``--update``: after each collect, one MARFT-A (``mappo_action``) update on that rollout, split
the same way (each agent's ``token_logprobs`` passes, the critic's value passes, the
rest: losses, clipping, optimizer steps) and compared the same way.

Printed: one line per repeat, then the medians per episode of the team, its parts and each
one-model run, the split of both, the median of the per-repeat ratios in wall-clock time (the
target's) and in process CPU time (steadier when other processes share the core), and the CPU,
dtypes and threads. The last line is ``team/parts ratio: X`` (wall clock, the rollouts).

Usage::

    python benchmarks/team_speed.py --tiny                 # tiny random Llama+chatml and Qwen2+llama3, seconds
    python benchmarks/team_speed.py                        # SmolLM2-135M twice (two loads), float32
    python benchmarks/team_speed.py --dtype bfloat16 --second-dtype float32 --update
    OMP_NUM_THREADS=1 taskset -c 1 python benchmarks/team_speed.py --threads 1   # one pinned thread
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

import marft_envs  # noqa: E402
from benchmarks._common import load_avg, now, set_threads, since  # noqa: E402
from marft_agents.collector import RolloutCollector  # noqa: E402
from marft_agents.config import load_config  # noqa: E402
from marft_agents.engine.cpu_support import cpuinfo_field  # noqa: E402
from marft_agents.learners import make_learner  # noqa: E402
from marft_agents.model.team import team_of  # noqa: E402
from marft_agents.model.tiny_models import tiny_model_and_tokenizer  # noqa: E402
from marft_agents.run.trainer import load_policy, team_layout  # noqa: E402
from marft_agents.settings.model import DEFAULT_MODEL  # noqa: E402
from marft_agents.settings.team import DEFAULT_MODEL_NAME  # noqa: E402

ENV_ID = "marft/Arithmetic-v0"
TARGET = 1.1
SECOND = "second"
"""The name of model B in the team's ``models:``."""
TINY = {DEFAULT_MODEL_NAME: ("llama", "chatml"), SECOND: ("qwen2", "llama3")}
"""``--tiny``: (architecture, tokenizer) of models A and B."""
RUNS = ("team", "A", "B")
CLOCKS = ("wall", "cpu")
"""Wall-clock seconds, and this process's CPU seconds (steadier when other processes share the core)."""
PARTS = ("agents", "critic", "rest")
"""The split of a run's time: its agents' calls, the critic's value passes, everything else."""


def cpu_name() -> str:
    try:
        return cpuinfo_field(Path("/proc/cpuinfo").read_text(errors="replace"), "model name") or "unknown CPU"
    except OSError:
        return "unknown CPU"


class Split:
    """Wraps a policy's sampling and scoring methods on the instance: seconds by agent (its
    ``generate`` calls, its ``token_logprobs`` passes) and in the critic (each critic-carrying
    member's ``scoring.state_values_with_reads``, which the collection's and the update's value
    passes go through)."""

    def __init__(self, policy: Any) -> None:
        self.policy = policy
        self.reset()
        agent_of = {policy.adapter_for(a): a for a in policy.agent_ids}
        generate, logprobs = policy.generate, policy.token_logprobs

        def timed(fn, key):
            def wrapper(*args, **kwargs):
                start = now()
                out = fn(*args, **kwargs)
                for k, spent in enumerate(since(start)):
                    self.seconds[CLOCKS[k]][key(*args)] += spent
                return out
            return wrapper

        def one_agent(agents: set[str]) -> str:
            if len(agents) != 1:
                raise RuntimeError(f"a call served agents {sorted(agents)}: cannot split its time by agent")
            return agents.pop()

        policy.generate = timed(generate, lambda requests, *_: one_agent({r.agent_id for r in requests}))
        policy.token_logprobs = timed(logprobs, lambda adapter, *_: agent_of[adapter])
        for member in team_of(policy).values():  # every value pass, the collection's and the update's
            if member.critic_adapters:
                member.scoring.state_values_with_reads = timed(member.scoring.state_values_with_reads,
                                                               lambda *_: "critic")

    def reset(self) -> None:
        self.seconds: dict[str, dict[str, float]] = {clock: defaultdict(float) for clock in CLOCKS}
        """Per clock (:data:`CLOCKS`): seconds by agent, and ``critic``."""


def load_pairs(args: argparse.Namespace) -> dict[str, tuple[Any, Any]] | None:
    """``--tiny``: freshly built tiny (model, tokenizer) of A and B, the same weights at every call
    (seed 0); else None (``load_policy`` loads the models from the config)."""
    if not args.tiny:
        return None
    dtypes = {DEFAULT_MODEL_NAME: args.dtype, SECOND: args.second_dtype}
    return {name: tiny_model_and_tokenizer(seed=0, dtype=dtypes[name], arch=arch, tokenizer=tok)
            for name, (arch, tok) in TINY.items()}


def configs(args: argparse.Namespace) -> dict[str, Any]:
    """The TrainConfigs of the team and of the one-model runs on A and on B."""
    model_b = args.second_model or args.model
    base = {"algorithm": "mappo_action", "seed": 0, "advantage": {"baseline": "critic"},
            "env": {"id": ENV_ID, "kwargs": {"level": 1, "profile": "dual", "horizon": 1}, "num_envs": args.batch},
            "sampling": {"engine": args.engine, "max_new_tokens": args.new_tokens, "temperature": 1.0,
                         "stop_token_ids": []},
            "schedule": {"minibatch_size": 2 * args.batch, "episodes_per_update": args.batch}}
    model_a = {"name_or_path": args.model, "dtype": args.dtype, "threads": torch.get_num_threads()}
    model_b = {"name_or_path": model_b, "dtype": args.second_dtype, "threads": torch.get_num_threads()}
    team = {**base, "model": model_a, "models": {SECOND: model_b}, "agents": {"actor_0": {"model": SECOND}}}
    return {"team": load_config(team), "A": load_config({**base, "model": model_a}),
            "B": load_config({**base, "model": model_b})}


def build(cfgs: dict[str, Any], agents: list[str], args: argparse.Namespace) -> dict[str, Any]:
    """The policies of the three runs: the team, and every agent on A, and on B."""
    policies = {}
    for run, cfg in cfgs.items():
        cfg.validate().resolve_hardware()
        pairs = load_pairs(args)
        given = pairs if run == "team" or pairs is None else pairs[DEFAULT_MODEL_NAME if run == "A" else SECOND]
        policies[run] = load_policy(cfg, agents, given, seed=0)
    if type(policies["team"]).__name__ != "TeamPolicy":
        raise RuntimeError(f"the team was built as a {type(policies['team']).__name__}, not a TeamPolicy")
    return policies


def parts_of(split: dict[str, dict[str, float]], total: dict[str, float], model_of: dict[str, str],
             critic_run: str) -> dict[str, float]:
    """The team's pieces measured on their own models in one repeat: each agent's seconds in its
    model's run, the critic's in its model's run, the rest averaged over the one-model runs."""
    agents = sum(split[model_of[a]][a] for a in model_of)
    critic = split[critic_run]["critic"]
    rest = statistics.mean(total[r] - sum(split[r].values()) for r in ("A", "B"))
    return {"agents": agents, "critic": critic, "rest": rest, "total": agents + critic + rest}


def own(split: dict[str, float], total: float) -> dict[str, float]:
    """One run's split: its agents' seconds, the critic's, the rest."""
    agents = sum(v for k, v in split.items() if k != "critic")
    return {"agents": agents, "critic": split.get("critic", 0.0), "rest": total - sum(split.values()), "total": total}


def main(argv: list[str] | None = None) -> float:
    """1. Build the team and the one-model runs on A and B, one collector each (seed 0).
    2. Warm each up, then ``--repeats`` interleaved rounds of collect (+ ``--update``).
    3. Print the medians per episode and the ratio team / parts."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tiny", action="store_true",
                    help="tiny random models: A = Llama with the chatml tokenizer, B = Qwen2 with the llama3 one")
    ap.add_argument("--model", default=DEFAULT_MODEL, help=f"model A (default {DEFAULT_MODEL})")
    ap.add_argument("--second-model", default=None, help="model B (default: --model again, a second load)")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"], help="dtype of model A")
    ap.add_argument("--second-dtype", default=None, choices=["float32", "bfloat16"],
                    help="dtype of model B (default: --dtype)")
    ap.add_argument("--batch", type=int, default=8, help="episodes per collect")
    ap.add_argument("--new-tokens", type=int, default=32, help="tokens of every utterance (no stop token)")
    ap.add_argument("--engine", default="direct", help="sampling.engine (direct, fast or legacy)")
    ap.add_argument("--update", action="store_true", help="also one MARFT-A update per collect")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=0,
                    help="torch threads; 0 = auto: torch's default, or 1 when the machine is already busy")
    args = ap.parse_args(argv)
    args.second_dtype = args.second_dtype or args.dtype
    if args.tiny and (args.second_model or args.model != DEFAULT_MODEL):
        raise SystemExit("--tiny and --model/--second-model exclude each other: choose one")
    set_threads(args.threads)
    torch.manual_seed(0)

    cfgs = configs(args)
    envs = {run: [marft_envs.make(ENV_ID, level=1, profile="dual", horizon=1) for _ in range(args.batch)]
            for run in RUNS}
    agents = list(envs["team"][0].possible_agents)
    policies = build(cfgs, agents, args)
    team = policies["team"]
    model_of = {a: "A" if team.model_of(a) == DEFAULT_MODEL_NAME else "B" for a in agents}
    critics = set(team_layout(cfgs["team"], agents).critic_of.values())
    if len(critics) != 1:
        raise RuntimeError(f"the team's critic runs on {sorted(critics)}: expected one critic model")
    critic_run = "A" if critics == {DEFAULT_MODEL_NAME} else "B"
    splits = {run: Split(p) for run, p in policies.items()}
    collectors = {run: RolloutCollector(envs[run], policies[run], cfgs[run].sampling, values="state", seed=0)
                  for run in RUNS}
    learners = {run: make_learner("mappo_action", policies[run], cfgs[run], agents) for run in RUNS} \
        if args.update else {}
    names = ({n: f"tiny-random-{a}+{t}" for n, (a, t) in TINY.items()} if args.tiny else
             {DEFAULT_MODEL_NAME: args.model, SECOND: args.second_model or args.model})
    print(f"team: {', '.join(team.describe())}")
    print(f"A = {names[DEFAULT_MODEL_NAME]} ({args.dtype}), B = {names[SECOND]} ({args.second_dtype}); "
          f"{args.batch} episodes a collect, {args.new_tokens} new tokens an utterance, engine {args.engine}, "
          f"update {args.update}, torch threads {torch.get_num_threads()}  [{load_avg()}]", flush=True)

    for run in RUNS:  # warm-up: first-call allocations, the grader worker's start
        start = now()
        rollout = collectors[run].collect(args.batch)
        if args.update:
            learners[run].update(rollout, 0)
        print(f"  warm-up {run}: {since(start)[0]:.2f}s", flush=True)
    phases = ["collect"] + (["update"] if args.update else [])
    rows: dict[str, dict[str, list[dict[str, dict[str, float]]]]] = {c: {p: [] for p in phases} for c in CLOCKS}
    for rep in range(args.repeats):
        order = RUNS[rep % len(RUNS):] + RUNS[:rep % len(RUNS)]  # rotated: no run always goes first
        totals: dict[str, dict[str, dict[str, tuple[float, ...]]]] = {p: {} for p in phases}
        cuts: dict[str, dict[str, dict]] = {p: {} for p in phases}
        for run in order:
            splits[run].reset()
            start = now()
            rollout = collectors[run].collect(args.batch)
            totals["collect"][run], cuts["collect"][run] = since(start), splits[run].seconds
            if args.update:
                splits[run].reset()
                start = now()
                learners[run].update(rollout, rep + 1)
                totals["update"][run], cuts["update"][run] = since(start), splits[run].seconds
        for phase in phases:
            for k, clock in enumerate(CLOCKS):
                split = {run: cuts[phase][run][clock] for run in RUNS}
                total = {run: totals[phase][run][k] for run in RUNS}
                got = {run: own(split[run], total[run]) for run in RUNS}
                got["parts"] = parts_of(split, total, model_of, critic_run)
                rows[clock][phase].append(got)
            g, c = rows["wall"][phase][-1], rows["cpu"][phase][-1]
            print(f"  repeat {rep} {phase} ({', '.join(order)}): team {g['team']['total']:.2f}s  parts "
                  f"{g['parts']['total']:.2f}s  (A {g['A']['total']:.2f}s, B {g['B']['total']:.2f}s)  ratio "
                  f"{g['team']['total'] / g['parts']['total']:.3f} (cpu-time ratio "
                  f"{c['team']['total'] / c['parts']['total']:.3f})  [{load_avg()}]", flush=True)

    ratio = 0.0
    print(f"CPU {cpu_name()}  torch threads {torch.get_num_threads()}  A {names[DEFAULT_MODEL_NAME]} {args.dtype}  "
          f"B {names[SECOND]} {args.second_dtype}  median of {args.repeats}, seconds per episode (wall clock):")
    for phase in phases:
        wall = rows["wall"][phase]
        med = {who: {part: statistics.median(r[who][part] for r in wall) / args.batch
                     for part in (*PARTS, "total")} for who in ("team", "parts", "A", "B")}
        ratios = {clock: [r["team"]["total"] / r["parts"]["total"] for r in rows[clock][phase]] for clock in CLOCKS}
        print(f"  {phase}: team {med['team']['total']:.4f}  parts {med['parts']['total']:.4f}  "
              f"one-model A {med['A']['total']:.4f}  B {med['B']['total']:.4f}")
        for who in ("team", "parts"):
            print(f"    {who:<5} " + "  ".join(f"{part} {med[who][part]:.4f}" for part in PARTS))
        median = statistics.median(ratios["wall"])
        verdict = "PASS" if median <= TARGET else "MISS"
        print(f"    team/parts ({phase}): median {median:.3f} of [{', '.join(f'{x:.3f}' for x in ratios['wall'])}] "
              f"(target <= {TARGET}: {verdict}); cpu-time ratio median {statistics.median(ratios['cpu']):.3f} of "
              f"[{', '.join(f'{x:.3f}' for x in ratios['cpu'])}]")
        if phase == "collect":
            ratio = median
    print(f"team/parts ratio: {ratio:.3f}")
    return ratio


if __name__ == "__main__":
    main()
