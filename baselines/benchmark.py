"""Benchmark one env with the standard suite of learners, in one command.

    marft benchmark ENV_ID [--profile P] [--learners a,b] [--seeds 0,1] [--episodes N] [--out DIR] [--force]
    python -m baselines.benchmark ENV_ID ...            # the same command

The benchmark is a grid (:mod:`baselines.grid`) generated for the env and written to its own
folder, so it runs, plans, resumes and reports exactly as a declared grid does, and can be re-run
or extended by hand (``python -m baselines.grid DIR/benchmark.yaml``):

1. **The suite** (:data:`SUITE`, :data:`LEARNERS`): the untrained base model as the team (and
   alone, where there is a solo row); single-agent PPO on a one-role profile (``solo_ppo``, the
   best single agent: skipped, with the reason printed, when the env builds with no one-role
   profile or the team is one agent already); MARFT-A (``marft_a``), MARFT-T (``marft_t``), IPPO
   (``ippo``: MARFT-A with ``critic.mode: local``, each agent valued from its own prompt), GRPO
   with the team, agent and agent-and-turn groupings, and GRPO with GiGPO's step groups
   (``grpo_step``). Every training row trains on the same
   episodes (``--episodes``) and is evaluated at the same episode counts. With a team of two or
   more agents, ``marft_a``'s trained team is also evaluated with each seat played by the base
   model (``base_seat``): each agent's contribution.
2. **Start gates and a plan first** (:mod:`baselines.grid_plan`): each training row's starting
   policy is piloted; a row whose start never earns the reward (no policy gradient) refuses the
   benchmark, and so does a tested comparison that cannot answer at the seeds; ``--force`` runs
   anyway. The comparisons: each training row against the untrained team (``solo_ppo`` against
   the untrained single agent) and each team row against ``solo_ppo``; the first family is
   *tested* (Holm) only where its exact tests can pass at the chosen seeds (9 or more seeds for
   the seven training rows), else every comparison is *descriptive*: shown with its CIs, tested
   by nothing (docs/comparisons.md, "Declared comparisons"), decided before any run from the
   design alone. To test a question at few seeds, edit the grid file (fewer comparisons, or
   ``descriptive: false``) and plan it again with ``python -m baselines.grid DIR/benchmark.yaml --plan``.
3. **The report**: ``DIR/README.md`` (cells with CIs, a leaderboard of the rows, the per-agent
   contribution, the comparisons, the plan, the curves), regenerated after every run.

Records never overwrite each other: every invocation writes a new folder
(``runs/benchmark/<env>/<UTC time>``) unless ``--out`` names one; a folder that holds a benchmark
of other settings is refused (the same settings continue it: done runs are skipped, a stopped one
resumes). The default size (:data:`DEFAULTS`: 2 seeds x 64 episodes in updates of 16,
evaluations of 50 held-out problems at episodes 0, 32 and 64, start gates of 128 episodes) is
estimated at 34 minutes with ``--jobs 2`` on an idle 2-core AMD EPYC for the example env
(VowelCount, two agents, horizon 2), from each row's measured cost (ADDING_AN_ENV.md, "How
long"); a busy machine takes longer. ``--base CONFIG`` takes the model, batch sizes and
evaluation of another training config (e.g. a GPU config) and ``--set KEY=VALUE`` changes any
key of the generated base (``eval.n_problems``, ``schedule.episodes_per_update``, ...).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

PROG = "marft benchmark"
BENCHMARK_FILE = "benchmark.yaml"
"""The generated grid file, in the benchmark's folder."""
BASE_FILE = "base.yaml"
"""The generated base training config, beside it."""
IN_FOLDER = ("base", "records", "output_root")
"""Keys of the grid file that name the benchmark's folder (the same folder may be named two ways)."""
UNTRAINED = "untrained"
SOLO_PROFILE = "solo"
"""The one-role profile tried first for the solo row (then every other one-role profile)."""
USER_ERROR = 2


@dataclass(frozen=True)
class Row:
    """One training row of the suite: a grid cell on the benchmark's base config."""

    name: str
    overrides: dict[str, Any]
    note: str
    solo: bool = False
    """Runs on the one-role profile instead of the team."""


SUITE: tuple[Row, ...] = (
    Row("solo_ppo", {"algorithm": "ppo"}, "single-agent PPO on the one-role profile: the best single agent", solo=True),
    Row("marft_a", {"algorithm": "mappo_action"}, "MARFT-A: action-level MAPPO, one adapter per agent, "
        "centralised critic"),
    Row("marft_t", {"algorithm": "mappo_token", "schedule.actor_lr": 2.5e-4},
        "MARFT-T: token-level MAPPO (actor_lr 2.5e-4, as measured on Arithmetic level 1)"),
    Row("ippo", {"algorithm": "mappo_action", "critic.mode": "local"},
        "IPPO: MARFT-A with a local critic (each agent valued from its own prompt)"),
    Row("grpo_team", {"algorithm": "grpo", "learner.group_size": 4, "learner.grouping": "team"},
        "GRPO, team grouping (MAGRPO): 4 episodes per task, no critic"),
    Row("grpo_agent", {"algorithm": "grpo", "learner.group_size": 4, "learner.grouping": "agent",
                       "learner.agent_rewards": True},
        "GRPO, per-agent grouping with the env's per-agent rewards (Dr. MAS)"),
    Row("grpo_agent_turn", {"algorithm": "grpo", "learner.group_size": 4, "learner.grouping": "agent_turn",
                            "learner.agent_rewards": True},
        "GRPO, per-agent-and-turn grouping (AT-GRPO)"),
    Row("grpo_step", {"algorithm": "grpo", "learner.group_size": 4, "learner.grouping": "step"},
        "GRPO with GiGPO's step groups: the episode's team advantage plus the step-level one among "
        "decisions of an agent that saw the identical observation"),
)
"""The training rows, in report order: the one list of learners the benchmark runs."""
LEARNERS: tuple[str, ...] = (UNTRAINED, *(row.name for row in SUITE))
"""Names ``--learners`` accepts (the untrained base model is always evaluated: every training
row is compared with it)."""
CONTRIBUTION_SOURCE = "marft_a"
"""The training row whose trained team is evaluated with each seat played by the base model."""

DEFAULTS: dict[str, Any] = {"seeds": [0, 1], "episodes": 64, "eval_problems": 50, "gate_episodes": 128,
                            "meaningful_effect": 10.0}
"""The default size, declared once (the command line, the generated base config and the grid file
read it): 2 seeds x 64 training episodes per row (4 updates of 16), greedy evaluations of 50
held-out problems (at episodes 0, 32 and 64), start-gate pilots of 128 episodes.
ADDING_AN_ENV.md ("How long") gives its measured cost on the example env."""
DEFAULT_BASE: dict[str, Any] = {
    "algorithm": "mappo_action",
    "advantage": {"baseline": "critic"},  # MAPPO as published (no grouped sampling: the critic is the baseline)
    "seed": 0,
    "env": {"kwargs": {}, "num_envs": 16},
    "model": {"name_or_path": "smollm2-135m-instruct", "dtype": "auto"},
    "lora": {"r": 8, "alpha": 16},
    "sampling": {"max_new_tokens": 32, "temperature": 0.7},
    "ppo": {"gamma": 1.0, "lam": 0.95, "clip_eps": 0.2, "entropy_coef": 0.0, "credit": "team",
            "logprob_reduction": "sum", "recompute_old_logprobs": True},
    "schedule": {"num_updates": 10_000, "episodes_per_update": 16, "ppo_epochs": 1, "minibatch_size": 16,
                 "actor_lr": 5.0e-4, "critic_lr": 5.0e-4, "value_head_lr": 1.0e-4, "critic_epochs": 2,
                 "checkpoint_interval": 2},
    "eval": {"n_problems": DEFAULTS["eval_problems"], "greedy": True, "num_envs": DEFAULTS["eval_problems"]},
}
"""The generated base config (CPU-sized, the grid configs' hyper-parameters); the env, profile,
split and output folder are filled in, ``--base`` replaces it and ``--set`` changes it."""


class BenchmarkError(ValueError):
    """A request that cannot be benchmarked: one line, exit status 2."""


@dataclass
class Request:
    """What the command line asks for."""

    env_id: str
    profile: str | None = None
    learners: list[str] = field(default_factory=lambda: list(LEARNERS))
    seeds: list[int] = field(default_factory=lambda: list(DEFAULTS["seeds"]))
    episodes: int = DEFAULTS["episodes"]
    eval_every: int | None = None
    out: Path | None = None
    base: Path | None = None
    sets: dict[str, Any] = field(default_factory=dict)
    solo_profile: str | None = None
    meaningful_effect: float = DEFAULTS["meaningful_effect"]
    gate_episodes: int = DEFAULTS["gate_episodes"]


# -- the request -------------------------------------------------------------------------------------
def _names(text: str, what: str, known: tuple[str, ...]) -> list[str]:
    import difflib

    names = [n.strip() for n in text.split(",") if n.strip()]
    for name in names:
        if name not in known:
            close = difflib.get_close_matches(name, known, n=1)
            raise BenchmarkError(f"unknown {what} {name!r}" + (f"; did you mean {close[0]!r}?" if close else "")
                                 + f"; {what}s: {', '.join(known)}")
    if not names:
        raise BenchmarkError(f"--{what}s names none; {what}s: {', '.join(known)}")
    return names


def _seeds(text: str) -> list[int]:
    try:
        seeds = sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        raise BenchmarkError(f"--seeds expects comma-separated integers (e.g. 0,1), got {text!r}") from None
    if not seeds:
        raise BenchmarkError("--seeds names no seed")
    return seeds


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("env_id", help="a registered env id (marft envs), e.g. marft/Arithmetic-v0")
    p.add_argument("--profile", help="the team's profile (default: the env's default profile)")
    p.add_argument("--learners", help=f"comma-separated rows to run (default: all): {', '.join(LEARNERS)}")
    p.add_argument("--seeds", help=f"comma-separated seeds (default: {','.join(map(str, DEFAULTS['seeds']))})")
    p.add_argument("--episodes", type=int, default=DEFAULTS["episodes"],
                   help=f"training episodes per row, the same for all (default {DEFAULTS['episodes']}); the "
                        f"evaluation size is --set eval.n_problems=N (default {DEFAULTS['eval_problems']})")
    p.add_argument("--eval-every", type=int, help="evaluate every this many episodes (default: half the episodes "
                                                  "when that is a whole number of updates)")
    p.add_argument("--out", type=Path, help="the benchmark's folder (default: a new runs/benchmark/<env>/<time>)")
    p.add_argument("--base", type=Path, help="a training config to take the model, sizes and evaluation from "
                                             "(e.g. a GPU config) instead of the generated CPU-sized one")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="change a key of the base config (e.g. env.kwargs.level=1, model.dtype=float32)")
    p.add_argument("--solo-profile", help="the one-role profile of the solo row (default: solo, else the first "
                                          "one-role profile the env builds with)")
    p.add_argument("--meaningful-effect", type=float, default=DEFAULTS["meaningful_effect"],
                   help="the smallest difference that would matter, accuracy points (sizes the plan)")
    p.add_argument("--gate-episodes", type=int, default=DEFAULTS["gate_episodes"],
                   help=f"episodes of each start gate's pilot (default {DEFAULTS['gate_episodes']})")
    p.add_argument("--jobs", type=int, default=1, help="processes, one run each at a time (one per core; "
                                                       "OMP_NUM_THREADS=1 each)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--plan", action="store_true", help="write the benchmark and make its plan; run nothing")
    mode.add_argument("--dry-run", action="store_true", help="write the benchmark and list its runs; run nothing")
    mode.add_argument("--report-only", action="store_true", help="regenerate the report of --out; run nothing")
    p.add_argument("--force", action="store_true", help="run even when the plan refuses")
    return p


def request_of(args: argparse.Namespace) -> Request:
    """The checked :class:`Request` of the command line (torch-free, before anything loads)."""
    from marft_agents.cli_args import UsageError, parse_overrides

    try:
        sets = parse_overrides(args.set)
    except UsageError as err:
        raise BenchmarkError(str(err)) from None
    for flag, value in (("--episodes", args.episodes), ("--eval-every", args.eval_every),
                        ("--gate-episodes", args.gate_episodes), ("--jobs", args.jobs)):
        if value is not None and value < 1:
            raise BenchmarkError(f"{flag} must be >= 1, got {value}")
    if args.base is not None and not args.base.is_file():
        raise BenchmarkError(f"--base {str(args.base)!r} is not a file (a training config, e.g. baselines/configs/)")
    if not 0 < args.meaningful_effect <= 100:
        raise BenchmarkError(f"--meaningful-effect must be in (0, 100] accuracy points, got {args.meaningful_effect}")
    learners = _names(args.learners, "learner", LEARNERS) if args.learners else list(LEARNERS)
    return Request(env_id=args.env_id, profile=args.profile, learners=learners,
                   seeds=_seeds(args.seeds) if args.seeds else list(DEFAULTS["seeds"]), episodes=args.episodes,
                   eval_every=args.eval_every, out=args.out, base=args.base, sets=sets,
                   solo_profile=args.solo_profile, meaningful_effect=args.meaningful_effect,
                   gate_episodes=args.gate_episodes)


def check_env_id(env_id: str) -> None:
    """A registered env id, else one line naming the nearest."""
    import difflib

    import marft_envs

    known = marft_envs.list_envs()
    if env_id not in known:
        close = difflib.get_close_matches(env_id, known, n=1)
        raise BenchmarkError(f"{env_id!r} is not a registered env" + (f"; did you mean {close[0]!r}?" if close else "")
                             + f"; registered: {', '.join(known)} (marft envs)")


# -- the generated base config and grid --------------------------------------------------------------
def _put(data: dict[str, Any], dotted: str, value: Any) -> None:
    *path, last = dotted.split(".")
    for key in path:
        data = data.setdefault(key, {})
    data[last] = value


def base_config(request: Request) -> dict[str, Any]:
    """The base training config of the benchmark as plain data: ``--base`` or :data:`DEFAULT_BASE`,
    the env (its profile, and ``eval.env_kwargs.split: test`` when the env takes a split), ``--set``."""
    import copy

    from marft_envs.registry import env_class
    from marft_envs.testing import takes_split

    if request.base is not None:
        base = yaml.safe_load(request.base.read_text(encoding="utf-8")) or {}
        if not isinstance(base, dict):
            raise BenchmarkError(f"--base {str(request.base)!r} holds no config mapping")
        base["env"] = {**(base.get("env") or {}), "id": request.env_id}
        if not base.get("learner"):  # a learner's options belong to its cells (GRPO's groupings)
            base.pop("learner", None)
    else:
        base = copy.deepcopy(DEFAULT_BASE)
        base["env"]["id"] = request.env_id
        if takes_split(env_class(request.env_id)):
            base["env"]["kwargs"]["split"] = "train"
            base["eval"]["env_kwargs"] = {"split": "test"}
    if request.profile is not None:
        base["env"].setdefault("kwargs", {})["profile"] = request.profile
    for key, value in request.sets.items():
        _put(base, key, value)
    base.pop("output_dir", None)
    return base


def _agents(env_id: str, kwargs: dict[str, Any]) -> list[str]:
    import marft_envs

    env = marft_envs.make(env_id, **kwargs)
    agents = list(env.possible_agents)
    env.close()
    return agents


def solo_profile(env_id: str, kwargs: dict[str, Any], team: list[str], asked: str | None) -> tuple[str | None, str]:
    """The one-role profile of the solo row and why, or None and why there is no solo row: the
    asked one, else :data:`SOLO_PROFILE`, else the first one-role profile the env builds with."""
    from marft_envs.core.roles import available_profiles, load_profile

    if asked is None and len(team) == 1:
        return None, f"the team ({kwargs.get('profile', 'the default profile')}) is one agent already"
    if asked is not None:
        candidates = [asked]
    else:
        others = []
        for name in available_profiles():
            try:
                if name != SOLO_PROFILE and len(load_profile(name).roles) == 1:
                    others.append(name)
            except (OSError, ValueError):
                continue
        candidates = [SOLO_PROFILE, *others]
    errors = []
    for name in candidates:
        try:
            agents = _agents(env_id, {**kwargs, "profile": name})
        except Exception as err:  # an env that refuses the profile: try the next one
            errors.append(f"{name}: {' '.join(str(err).split())[:120]}")
            continue
        if len(agents) == 1:
            return name, f"profile {name}"
        errors.append(f"{name}: {len(agents)} agents")
    if asked is not None:
        raise BenchmarkError(f"--solo-profile {asked!r} does not make {env_id} a one-agent env ({errors[0]})")
    return None, f"{env_id} builds with no one-role profile (tried {'; '.join(errors)})"


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")


def _stamp() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%d-%H%M%S")


def default_out(env_id: str) -> Path:
    """A new folder per invocation: ``runs/benchmark/<env>/<UTC time>`` (``-2``, ``-3`` ... within
    one second), so that no benchmark's records replace another's."""
    stamp = _stamp()
    root = Path("runs") / "benchmark" / _slug(env_id)
    out, k = root / stamp, 1
    while out.exists():
        k += 1
        out = root / f"{stamp}-{k}"
    return out


def _eval_every(request: Request, per_update: int) -> int:
    if request.eval_every is not None:
        return request.eval_every
    half = request.episodes // 2
    return half if half and half % per_update == 0 and request.episodes % half == 0 else request.episodes


def _cells(request: Request, team: list[str], solo: str | None) -> list[dict[str, Any]]:
    """The grid's cells: the untrained team (and single agent), the chosen training rows, and
    ``marft_a``'s team with each seat played by the base model."""
    first = request.seeds[0]
    cells = [{"name": UNTRAINED, "evaluate": "untrained", "seeds": [first],
              "note": "the base model as the team (greedy decoding is seed-free)"}]
    rows = [r for r in SUITE if r.name in request.learners and (solo is not None or not r.solo)]
    if solo is not None and any(r.solo for r in rows):
        cells.append({"name": f"{UNTRAINED}_solo", "evaluate": "untrained", "seeds": [first],
                      "overrides": {"env.kwargs.profile": solo}, "note": f"the base model alone ({solo})"})
    for row in rows:
        overrides = {**row.overrides, **({"env.kwargs.profile": solo} if row.solo else {})}
        cells.append({"name": row.name, "overrides": overrides, "note": row.note})
    if len(team) > 1 and CONTRIBUTION_SOURCE in [r.name for r in rows]:
        for agent in team:
            cells.append({"name": f"{CONTRIBUTION_SOURCE}_base_{_slug(agent)}", "evaluate": "base_seat",
                          "source": CONTRIBUTION_SOURCE, "ablation": {"seat": agent},
                          "note": f"{CONTRIBUTION_SOURCE}'s team with {agent} played by the base model"})
    return cells


def _comparisons(cells: list[dict[str, Any]], seeds: int) -> tuple[list[dict[str, Any]], bool]:
    """The declared comparisons, and whether the family (each training row against its untrained
    start) is tested: only where every exact test of it can pass after Holm at ``seeds`` seeds,
    decided from the design alone; the rest are descriptive (module docstring, 2.)."""
    from leaderboards import stats
    from leaderboards.grid_report import ALPHA

    names = [c["name"] for c in cells]
    training = [c["name"] for c in cells if "evaluate" not in c]
    family = [{"question": f"what {name} buys over the untrained {'single agent' if name == 'solo_ppo' else 'team'}",
               "a": name, "b": f"{UNTRAINED}_solo" if name == "solo_ppo" else UNTRAINED} for name in training]
    floors = stats.holm_floors([stats.exact_p_floor("one-sample", seeds)] * len(family)) if family else []
    tested = bool(family) and max(floors) < ALPHA
    declared = [{**c, "descriptive": not tested} for c in family]
    if "solo_ppo" in names:
        declared += [{"question": f"does the {name} team beat the single agent?", "a": name, "b": "solo_ppo",
                      "descriptive": True} for name in training if name != "solo_ppo"]
    declared += [{"question": f"what {c['ablation']['seat']}'s training contributes (its seat played by the base "
                              "model)", "a": c["name"], "b": c["source"], "paired": True, "descriptive": True}
                 for c in cells if c.get("evaluate") == "base_seat"]
    return declared, tested


def benchmark_spec(request: Request, out: Path, base: dict[str, Any], team: list[str], solo: str | None
                   ) -> dict[str, Any]:
    """The grid file's data (:class:`baselines.grid.GridSpec`) of the benchmark in ``out``."""
    from marft_envs.registry import describe_env

    profile = base["env"].get("kwargs", {}).get("profile") or describe_env(request.env_id)["default_profile"]
    per_update = (base.get("schedule") or {}).get("episodes_per_update", 16)
    cells = _cells(request, team, solo)
    comparisons, tested = _comparisons(cells, len(request.seeds))
    kwargs = {k: v for k, v in base["env"].get("kwargs", {}).items() if k not in ("profile", "split")}
    spec = {"name": f"benchmark_{_slug(request.env_id)}",
            "title": f"Benchmark of {request.env_id} ({profile}{', ' if kwargs else ''}"
                     f"{', '.join(f'{k}={v}' for k, v in kwargs.items())}): the standard suite at "
                     f"{request.episodes} episodes",
            "description": (f"Generated by `{PROG} {request.env_id}`. Every training row trains on "
                            f"{request.episodes} episodes of {request.env_id} from the untrained base model "
                            f"({base.get('model', {}).get('name_or_path', '?')}); team: {', '.join(team)}. "
                            + ("Each row's gain over its untrained start is tested (Holm); the other comparisons "
                               "are descriptive." if tested else
                               f"Every comparison is descriptive (CIs, no test): at {len(request.seeds)} seeds an "
                               "exact test of the rows' gains could not pass after Holm's correction.")),
            "base": str(out / BASE_FILE), "budget": {"episodes": request.episodes},
            "eval_every": {"episodes": _eval_every(request, per_update)}, "seeds": list(request.seeds),
            "records": str(out / "records"), "output_root": str(out / "runs"),
            "meaningful_effect": request.meaningful_effect, "leaderboard": True,
            "cells": cells, "comparisons": comparisons}
    spec["gate"] = {"episodes": request.gate_episodes}
    return spec


def _header(request: Request, spec: dict[str, Any], skipped: list[str]) -> str:
    training = [c for c in spec["cells"] if "evaluate" not in c]
    runs = len(training) * len(spec["seeds"])
    lines = [f"# {spec['title']}", f"# Generated by `{PROG} {request.env_id}`; re-run, resume or extend it with",
             f"#   python -m baselines.grid {spec['base'].rsplit('/', 1)[0]}/{BENCHMARK_FILE} [--plan] [--shard i/n]",
             f"# training budget: {runs} runs x {request.episodes} episodes = {runs * request.episodes} episodes",
             *[f"# skipped: {line}" for line in skipped]]
    return "\n".join(lines) + "\n"


# -- writing and running -----------------------------------------------------------------------------
def _validate(spec: dict[str, Any], base: dict[str, Any], scratch: Path) -> None:
    """Load the grid as the grid runner will (every run's config checked), in ``scratch``."""
    from baselines.grid import load_grid, plan
    from marft_agents.config import ConfigError

    (scratch / BASE_FILE).write_text(yaml.safe_dump(base, sort_keys=False), encoding="utf-8")
    trial = {**spec, "base": str(scratch / BASE_FILE), "records": str(scratch / "records"),
             "output_root": str(scratch / "runs")}
    (scratch / BENCHMARK_FILE).write_text(yaml.safe_dump(trial, sort_keys=False), encoding="utf-8")
    try:
        plan(load_grid(scratch / BENCHMARK_FILE))
    except ConfigError as err:
        raise BenchmarkError(str(err).replace(str(scratch), "<out>")) from None


def write_benchmark(out: Path, spec: dict[str, Any], base: dict[str, Any], header: str) -> Path:
    """Write ``out/benchmark.yaml`` and ``out/base.yaml``; a folder that holds anything else, or a
    benchmark of other settings, is refused (its records are never replaced); the same settings
    continue it."""
    path = out / BENCHMARK_FILE
    if path.is_file():
        old = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        old_base = yaml.safe_load((out / BASE_FILE).read_text(encoding="utf-8")) if (out / BASE_FILE).is_file() else None
        differ = sorted(k for k in set(old) | set(spec) if old.get(k) != spec.get(k) and k not in IN_FOLDER)
        differ += ["base config"] if old_base != base else []
        if differ:
            raise BenchmarkError(f"{out} holds a benchmark of other settings ({', '.join(differ)} differ); its records "
                                 f"stay: give another --out (or none, for a new folder), or continue it with "
                                 f"python -m baselines.grid {path}")
        return path
    if out.exists() and any(out.iterdir()):
        raise BenchmarkError(f"--out {out} is a folder that holds no {BENCHMARK_FILE}; give a new or empty folder")
    out.mkdir(parents=True, exist_ok=True)
    (out / BASE_FILE).write_text(yaml.safe_dump(base, sort_keys=False), encoding="utf-8")
    path.write_text(header + yaml.safe_dump(spec, sort_keys=False), encoding="utf-8")
    return path


def prepare(request: Request) -> tuple[Path, list[str]]:
    """Check the request against the env, generate and write the benchmark; its grid file and the
    rows skipped, each with its reason."""
    import tempfile

    from marft_agents.config import ConfigError, load_config
    from marft_agents.env_check import check_env_config

    check_env_id(request.env_id)
    base = base_config(request)
    try:
        team = check_env_config(load_config(base))
    except ConfigError as err:
        raise BenchmarkError(str(err)) from None
    kwargs = dict(base["env"].get("kwargs") or {})
    wants_solo = "solo_ppo" in request.learners
    solo, why = solo_profile(request.env_id, kwargs, team, request.solo_profile) if wants_solo else (None, "")
    skipped = [f"solo_ppo: {why}"] if wants_solo and solo is None else []
    out = request.out or default_out(request.env_id)
    spec = benchmark_spec(request, out, base, team, solo)
    if not any("evaluate" not in c for c in spec["cells"]):
        raise BenchmarkError(f"no training row left to run ({'; '.join(skipped) or 'only untrained chosen'})")
    with tempfile.TemporaryDirectory() as scratch:
        _validate(spec, base, Path(scratch))
    return write_benchmark(out, spec, base, _header(request, spec, skipped)), skipped


def start_process(command: list[str], env: dict[str, str]) -> subprocess.Popen:
    """Start one shard's process (a seam for the tests)."""
    return subprocess.Popen(command, env=env)


def run_shards(spec_path: Path, jobs: int, force: bool) -> int:
    """Run the grid in ``jobs`` processes (``--shard i/jobs``, one thread each), then its report."""
    from baselines import grid

    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    flags = ["--force"] if force else []
    procs = [start_process([sys.executable, "-m", "baselines.grid", str(spec_path), "--shard", f"{i}/{jobs}",
                            *flags], env) for i in range(jobs)]
    codes = [p.wait() for p in procs]
    grid.main([str(spec_path), "--report-only"])
    return next((c for c in codes if c), 0)


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        request = request_of(args)
        spec_path, skipped = prepare(request)
    except BenchmarkError as err:
        print(f"{PROG}: error: {err}", file=sys.stderr)
        return USER_ERROR
    from baselines import grid

    for line in skipped:
        print(f"benchmark: skipped {line}")
    print(f"benchmark: {spec_path} (re-run, resume or extend: python -m baselines.grid {spec_path})")
    common = [str(spec_path)]  # the gate's size is in the grid file
    if args.plan or args.dry_run or args.report_only:
        flag = "--plan" if args.plan else "--dry-run" if args.dry_run else "--report-only"
        return grid.main([*common, flag])
    if args.jobs > 1:
        code = grid.main([*common, "--plan"])
        if code == grid.REFUSED and not args.force:
            print("benchmark: the plan refuses it (above, and in its report); fix it or run with --force",
                  file=sys.stderr)
            return code
        code = run_shards(spec_path, args.jobs, args.force)
    else:
        code = grid.main([*common, *(["--force"] if args.force else [])])
    print(f"benchmark: report {spec_path.parent / 'README.md'}")
    return code


if __name__ == "__main__":
    sys.exit(main())
