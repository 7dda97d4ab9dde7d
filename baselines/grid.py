"""Run a declared grid of configs x seeds, one leaderboard record per run, resumably.

    python -m baselines.grid baselines/grids/relay.yaml [--dry-run] [--cells a,b] [--seeds 0,1] [--shard i/n]
    python -m baselines.grid baselines/grids/relay.yaml --report-only
    python -m baselines.grid baselines/grids/relay.yaml --plan [--gate-episodes N] [--gate-from-records]

Before any run starts, the grid is planned (:mod:`baselines.grid_plan`): each training cell's
start gate (a sampled pilot of its starting policy), each declared comparison's minimal
detectable effect and exact-test floor under the grid's Holm family, and the machine time; a plan
that cannot answer (a gate failed, a comparison that cannot detect the grid's
``meaningful_effect``) refuses the grid, one line per reason, unless ``--force``.

A grid file (YAML, :class:`GridSpec`) names a base config, one budget in samples for every
training cell, when they are evaluated, default seeds and its cells. The cell grammar:

1. **A training cell** (no ``evaluate``): the base config plus dotted-key overrides (as
   ``--set``), trained once per seed::

       - {name: holder_alone, overrides: {ppo.train_agents: [holder_0]}}      # partner frozen at the base
       - {name: answerer_alone, overrides: {ppo.train_agents: [answerer_0]}}

   The two-call solo (one solver prompted twice, draft then final answer, with one adapter: a
   team's test-time compute) is one: ``overrides: {env.kwargs.profile: solo_two_calls,
   shared_adapter: true}``.
2. **Its own budget**: ``budget: {episodes: N}`` on a training cell replaces the grid's for that
   cell (on the grid's axis; ``eval_every`` must divide it, as the grid's). Its records, status,
   dry run and plan say its budget. A comparison of two cells whose budgets differ (an ablation's
   is its source's) is refused unless the grid lists it in ``unequal_budgets`` with the reason,
   e.g. a single agent trained on the total episodes of a curriculum::

       - {name: solo_ppo, budget: {episodes: 1920}, overrides: {algorithm: ppo, env.kwargs.profile: solo}}
       unequal_budgets:
         - {a: joint, b: solo_ppo, why: "equal total episodes: 640 + 640 of the stages, 640 joint"}
3. **Its start from other cells' final adapters** (a curriculum): ``start: {source: CELL}``
   starts each seed from the final checkpoint of ``CELL``'s run of the same seed (every agent's
   adapter, and the critic); ``start: {source: CELL, adapters: {AGENT: CELL2, ...}}`` takes
   those agents' adapters from ``CELL2``'s run instead (:class:`StartSpec`, :func:`start_state`
   says which part comes from where). The grid sets ``init_adapters`` (a cell may not): the
   source's run folder, or a combined ``start/adapters.pt`` it writes into the run's folder
   before training. The run is ``blocked`` until every run it starts from has a current record,
   goes to its source's shard, and its start gate waits for them (the plan names the cells it
   is gated after); the cells it starts from must be declared before it.
4. **An evaluation-only cell**: ``untrained`` (the base model, adapters at initialisation) or an
   ablation of another cell's final trained team (:mod:`baselines.ablations`; its drop from the
   source's accuracy is what was taken away)::

       - {name: swapped, evaluate: swapped, source: marft_a}        # each agent gets the next one's adapter
       - {name: base_holder, evaluate: base_seat, source: marft_a,  # holder_0 plays as the base model
          ablation: {seat: holder_0}}
       - {name: mute_holder, evaluate: fixed_message, source: marft_a,
          ablation: {seat: holder_0, message: "I don't know."}}      # the answerer reads this instead
       - {name: separate, evaluate: combined, source: holder_alone,  # roles trained apart, then combined
          ablation: {adapters: {answerer_0: answerer_alone}}}
       - {name: marft_a_k16, evaluate: final, source: marft_a,      # the final adapters unchanged,
          overrides: {eval.greedy: false, eval.samples_per_problem: 16}}  # sampled: avg@16, pass@16

   An ablation cell runs with its source's seeds and config (only ``eval.*`` overrides of its
   own, e.g. the sampled evaluation above, which ``untrained`` cells take too); its sources must
   be declared before it.

Budget. Every training cell trains on the same samples (unless it declares its own, 2. above)
and is evaluated at the same points::

    budget: {episodes: 320}        # or {sampled_tokens: N}: schedule.max_episodes / max_sampled_tokens
    eval_every: {episodes: 64}     # evaluations at episodes 0, 64, ..., 320: eval.interval in updates

so a cheaper learner (one agent instead of two) gets no more samples than a team, and the eval
curves of all cells share their x values. The training seconds each run took are recorded (a
cost, not the axis). The grid sets these keys on every training cell (:data:`GRID_SET_KEYS`);
a cell that overrides one is refused, and so is an ``eval_every`` that is not a whole number of a
cell's updates. Grid files from before (``time_budget_s``: equal wall-clock) still load for
``--report-only`` and ``--dry-run``; their records say which axis they were made on. Two cells
that would make the same run (identical resolved configs for a seed) are refused, naming both.

Each run writes ``<records>/<cell>_seed<seed>.json`` (:class:`leaderboards.records.Record` with
``grid`` set, and the commit of the code at the start of the run). Re-running the command skips
runs whose record exists and resumes a run whose output folder holds a checkpoint (the trainer's
``--resume``: the same result as an uninterrupted run), so a grid can be run in pieces. A done
run whose adapters other runs read but which are gone from its folder (another machine) is
trained again first (:func:`remake`; the log says whether it reproduced its record). A seed's
runs share their dtype: where its records name another dtype than ``model.dtype`` resolves to
here (``auto`` on another kind of CPU), its remaining runs wait (:func:`seed_dtype_clash`). After
each run the grid's tables and plot (:mod:`leaderboards.grid_report`) are regenerated next to
the records.

Two processes, one per core, each take half the runs::

    OMP_NUM_THREADS=1 taskset -c 0 python -m baselines.grid GRID --shard 0/2 &
    OMP_NUM_THREADS=1 taskset -c 1 python -m baselines.grid GRID --shard 1/2 &

Training runs are dealt round-robin over the shards; an ablation run, and a training run with a
``start``, goes to its source run's shard (it needs that run's adapters; a ``combined`` ablation
or start waits for its other sources' records).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

from baselines.ablations import ABLATIONS
from baselines.grid_spec import (GRID_SET_KEYS, BudgetSpec, GridRun, GridSpec, budget_changes, budget_meta,
                                 cell_ablation, cell_budget, declared_seeds, describe_cell_budget, env_agents, load_grid,
                                 lost_sources, plan, prepare_start, records_dir, run_config, status)
from baselines.run import build_record
from leaderboards.grid_report import write_report
from leaderboards.records import (Record, code_digest, env_task_revision, eval_outcomes, git_commit, transcript_sample,
                                  write_record)
from marft_agents.config import AUTO_DTYPE, ConfigError, TrainConfig

REPLACED_DIR = "replaced"
"""Next to a grid's records: a record that a re-made run (:func:`remake`) did not reproduce, kept."""


def _outcome(curve: list[dict[str, Any]] | None) -> list[tuple[int, float]]:
    """What a re-made run must reproduce: its record's evaluation curve (episodes, accuracy)."""
    return [(int(p["episodes"]), round(float(p["accuracy"]), 6)) for p in curve or []]


def remake(spec: GridSpec, lost: GridRun, reader: GridRun, log=print) -> None:
    """Train ``lost`` again (its adapters are gone, :func:`lost_sources`) so that ``reader`` can start
    from them, and replace its record with the new one, which describes the adapters ``reader``
    reads. The same code, dtype and kind of CPU reproduce a run exactly; the log says whether this
    one did, and a record it did not reproduce is kept in ``<grid folder>/replaced/``. One process
    re-makes a run (a lock next to its folder); another that needs it waits, then reads it."""
    import fcntl

    from marft_agents.run.checkpoint import latest_checkpoint

    folder = Path(lost.overrides["output_dir"])
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(folder.parent / f".{folder.name}.remake.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if latest_checkpoint(folder) is not None:  # another process re-made it meanwhile
            log(f"remade {lost.name}: by another process, in {folder}")
            return
        old = json.loads((records_dir(spec) / f"{lost.name}.json").read_text(encoding="utf-8"))
        log(f"remake {lost.name} (train): {reader.name} starts from its final adapters, which are not in {folder} "
            f"(another machine, or runs/ cleaned); its record is replaced by the new run's")
        record = train_run(spec, lost)
        if _outcome(record.eval_curve) == _outcome(old.get("eval_curve")):
            log(f"remade {lost.name}: reproduced its record's evaluations exactly "
                f"(accuracy {record.eval_after['accuracy']:.3f})")
        else:
            kept = records_dir(spec).parent / REPLACED_DIR / f"{lost.name}.{old.get('code', 'code')}.json"
            kept.parent.mkdir(parents=True, exist_ok=True)
            kept.write_text(json.dumps(old, indent=1, sort_keys=True) + "\n", encoding="utf-8")
            log(f"remade {lost.name}: did not reproduce its record (accuracy {old['eval_after']['accuracy']:.3f} -> "
                f"{record.eval_after['accuracy']:.3f}; another dtype or kind of CPU, or other code); the old record "
                f"is kept in {kept}, and records made from the old adapters no longer match them")
        write_record(record, records_dir(spec))


def shard(runs: list[GridRun], index: int, count: int) -> list[GridRun]:
    """Shard ``index`` of ``count``: training and untrained runs round-robin; ablations, and runs
    with a ``start``, with their source."""
    if not 0 <= index < count:
        raise ValueError(f"--shard must be i/n with 0 <= i < n, got {index}/{count}")
    owner: dict[str, int] = {}
    for k, run in enumerate(r for r in runs if r.source is None):
        owner[run.name] = k % count
    # A run that reads another's adapters (an ablation, a start) goes with its source, in file
    # order, so a chain follows its first run (a combined one's other sources may be on another
    # shard: it waits for their records). When the selection (--cells) leaves the source out, the
    # source must be done already: deal those round-robin.
    orphans = 0
    for run in runs:
        if run.source is None:
            continue
        if run.source.name in owner:
            owner[run.name] = owner[run.source.name]
        else:
            owner[run.name] = orphans % count
            orphans += 1
    return [r for r in runs if owner[r.name] == index]


# -- running ----------------------------------------------------------------------------------------
class GridStopped(Exception):
    """A training run was stopped by SIGINT/SIGTERM after its checkpoint: not a failure; the grid ends
    with the run's exit status and the same command resumes it."""

    def __init__(self, message: str, code: int):
        super().__init__(message)
        self.code = code


def _grid_meta(spec: GridSpec, run: GridRun, wall_s: float) -> dict[str, Any]:
    meta = {"grid": spec.name, "cell": run.cell.name, "seed": run.seed, "kind": run.kind, "wall_s": round(wall_s, 1)}
    if run.kind != "untrained":  # a training run, or an ablation of one: the budget it trained on
        meta["budget"] = budget_meta(spec, run.cell)
    return meta


def train_run(spec: GridSpec, run: GridRun) -> Record:
    """Train (resuming from the run folder's latest checkpoint, if any), then build its record."""
    from marft_agents.cli import main as marft_main
    from marft_agents.run.session import STOP_STATUS

    commit, code_state = git_commit(), code_digest()
    started = time.perf_counter()
    earlier = earlier_attempts_s(run)
    start = prepare_start(spec, run) if run.cell.start is not None else None
    sets = [f"--set={key}={json.dumps(value)}" for key, value in run.overrides.items()]
    # --resume: continue from a checkpoint, or start fresh when there is none (then a killed
    # attempt's step-0 evaluation is reused and its re-logged updates are de-duplicated).
    try:
        code = marft_main(["train", "--config", spec.base, "--quiet", "--no-tensorboard", "--resume", *sets])
    finally:  # stopped, failed or done: this attempt's machine time counts towards the run's
        _write_attempts(run, earlier + time.perf_counter() - started)
    stopped_by = {status: name for name, status in STOP_STATUS.items()}
    if code in stopped_by:  # the trainer saved a checkpoint and stopped on request: not a failure
        raise GridStopped(f"{run.name} stopped by {stopped_by[code]} after saving a checkpoint in "
                          f"{run.overrides['output_dir']}; the same command resumes it", code)
    if code:
        raise RuntimeError(f"training run {run.name} failed with exit status {code}")
    # resolved as the trainer resolved it (the same machine and probe): the record names its dtype
    record = build_record(run_config(spec, run).resolve_hardware(), run.name, commit, code_state)
    record.grid = _grid_meta(spec, run, earlier + time.perf_counter() - started)
    if start is not None:
        record.grid["start"] = start
    return record


ATTEMPTS_FILE = "grid_attempts.json"
"""In a training run's folder: the machine seconds of its attempts so far, so that a run resumed
after a stop records its whole machine time (a ``SIGKILL`` still loses its attempt's share)."""


def earlier_attempts_s(run: GridRun) -> float:
    """Machine seconds the run's earlier attempts took (0 when none, or when the file is unreadable:
    it only adds to the cost shown, so a damaged one is ignored with a warning)."""
    path = Path(run.overrides["output_dir"]) / ATTEMPTS_FILE
    if not path.is_file():
        return 0.0
    try:
        return float(json.loads(path.read_text(encoding="utf-8"))["machine_s"])
    except (ValueError, KeyError, TypeError):
        print(f"grid: warning: {path} is unreadable; the earlier attempts' machine time is not counted "
              "(delete it to silence this)", file=sys.stderr)
        return 0.0


def _write_attempts(run: GridRun, machine_s: float) -> None:
    folder = Path(run.overrides["output_dir"])
    if folder.is_dir():
        tmp = folder / f"{ATTEMPTS_FILE}.{os.getpid()}.tmp"
        tmp.write_text(json.dumps({"machine_s": round(machine_s, 1)}), encoding="utf-8")
        os.replace(tmp, folder / ATTEMPTS_FILE)


def evaluate_run(spec: GridSpec, run: GridRun) -> Record:
    """Evaluate the untrained policy, or the source run's final adapters changed by an ablation."""
    from marft_agents.run.trainer import load_policy

    commit, code_state = git_commit(), code_digest()
    started = time.perf_counter()
    cfg = run_config(spec, run)
    if run.kind in ABLATIONS and ABLATIONS[run.kind].plays_every_seat:
        cfg = dataclasses.replace(cfg, scripted_seats={})
    cfg.resolve_hardware()  # the record names the device and dtype used, not "auto"
    with load_policy(cfg, env_agents(cfg)) as policy:  # the block's end closes the sampling engine
        return _evaluate_policy(spec, run, cfg, policy, commit, code_state, started)


def _evaluate_policy(spec: GridSpec, run: GridRun, cfg: TrainConfig, policy: Any, commit: str, code_state: str,
                     started: float) -> Record:
    """The record of :func:`evaluate_run` for the built ``policy``."""
    from marft_agents.evaluation.problem_set import evaluate
    from marft_agents.run.checkpoint import latest_checkpoint, load_adapters
    from marft_agents.run.trainer import scripted_seats

    env_kwargs = {**cfg.env.kwargs, **cfg.eval.env_kwargs}
    agent_ids = env_agents(cfg)
    meta: dict[str, Any] = {}
    source_record: dict[str, Any] = {}
    scripted = scripted_seats(cfg, agent_ids)
    if run.kind in ABLATIONS:
        checkpoints: dict[str, str] = {}

        def final_adapters(source: GridRun) -> dict[str, Any]:
            checkpoint = latest_checkpoint(source.overrides["output_dir"])
            if checkpoint is None:
                raise FileNotFoundError(f"{run.name}: the source run {source.name} has no checkpoint in "
                                        f"{source.overrides['output_dir']}; run the grid (it re-makes a done "
                                        "run's lost adapters before the runs that read them)")
            checkpoints[source.cell.name] = str(checkpoint)
            return load_adapters(checkpoint)

        ablation = cell_ablation(run.cell)
        others = {r.cell.name: r for r in run.others}
        changes = ablation.prepare(policy, final_adapters(run.source), lambda cell: final_adapters(others[cell]))
        scripted.update(ablation.scripted_seats())
        source_record = json.loads((records_dir(spec) / f"{run.source.name}.json").read_text())
        meta = {"source": run.source.cell.name, **changes, "checkpoint": checkpoints[run.source.cell.name],
                ablation.source_accuracy_key: source_record["eval_after"]["accuracy"]}
        if run.others:
            meta["checkpoints"] = checkpoints
    e = cfg.eval
    result = evaluate(policy, cfg.env.id, env_kwargs, n_problems=e.n_problems, greedy=e.greedy, seed=e.seed,
                      sampling=cfg.sampling, num_envs=e.num_envs, samples_per_problem=e.samples_per_problem,
                      scripted=scripted)
    out = Path(cfg.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    transcripts = out / f"{run.kind}_transcripts.jsonl"  # who said what, for explaining effects
    transcripts.write_text("".join(json.dumps(t) + "\n" for t in result.per_task), encoding="utf-8")
    evaluation = {**result.figures(), "greedy": e.greedy}
    from marft_agents.config import config_to_dict
    from marft_agents.evaluation.records import stage_figures
    from marft_agents.learners.registry import EVAL_ONLY

    return Record(
        name=run.name, env_id=cfg.env.id, env_kwargs=env_kwargs,
        algorithm=EVAL_ONLY if run.kind == "untrained" else cfg.algorithm,
        model=cfg.model.name_or_path, agent_models=cfg.agent_models(env_agents(cfg)), eval_after=evaluation,
        eval_curve=[{"update": 0, "episodes": 0, "sampled_tokens": 0, "accuracy": result.accuracy,
                     "stderr": result.stderr, "train_seconds": 0.0, **stage_figures(result.per_task)}]
        if run.kind == "untrained" else [],
        eval_outcomes=eval_outcomes(result.per_task, source_record.get("budget", {}).get("updates", 0)),
        transcripts=[{"update": source_record.get("budget", {}).get("updates", 0),
                      "episodes": source_record.get("budget", {}).get("episodes", 0),
                      "problems": transcript_sample(result.per_task)}],
        task_revision=env_task_revision(cfg.env.id, env_kwargs),
        budget=source_record.get("budget", {}), config=config_to_dict(cfg), commit=commit, code=code_state,
        grid={**_grid_meta(spec, run, time.perf_counter() - started), **meta},
    )


def seed_dtype_clash(spec: GridSpec, run: GridRun, replaced: list[GridRun] = ()) -> str | None:
    """Why ``run`` must not run here, or None: records of its seed (other cells; ``replaced``, runs
    about to be re-made, left out) name another dtype than its config resolves to on this machine.
    A grid's contrasts pair runs by seed, so a seed whose runs differ in dtype (``model.dtype: auto``
    is bfloat16 on some CPUs and float32 on others) would mix bf16's rounding into a difference
    between cells. Records that name no resolved dtype (made before records named it) are not read."""
    here = run_config(spec, run).resolve_hardware().hardware.dtype
    left_out = {r.name for r in replaced} | {run.name}
    others: dict[str, list[str]] = {}
    for path in sorted(records_dir(spec).glob("*.json")):
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        meta = record.get("grid") or {}
        dtype = ((record.get("config") or {}).get("model") or {}).get("dtype")
        if meta.get("seed") != run.seed or record.get("name") in left_out or dtype in (None, AUTO_DTYPE, here):
            continue
        others.setdefault(dtype, []).append(meta.get("cell", record.get("name", path.stem)))
    if not others:
        return None
    named = "; ".join(f"{dtype}: {', '.join(cells)}" for dtype, cells in others.items())
    return (f"seed {run.seed}'s records ran in another dtype ({named}) and {run.name} would run in {here} here: a "
            f"seed's pairs must share their dtype; run it where model.dtype resolves as theirs, or move those records "
            f"away to run the seed again here (--force runs it anyway)")


def run_grid(spec: GridSpec, runs: list[GridRun], log=print, gate=None, force: bool = False) -> dict[str, int]:
    """Run every run not done yet; returns counts by outcome (``ran``, ``skipped``, ``blocked``).
    ``gate(run)``: whether a run may start (a ``start`` cell's gate, measured once its sources are
    done); None: every run may. A run whose seed's records ran in another dtype waits
    (:func:`seed_dtype_clash`) unless ``force``."""
    from marft_agents.run.checkpoint import latest_checkpoint

    counts = {"ran": 0, "skipped": 0, "blocked": 0}
    records = records_dir(spec)
    for run in runs:
        state = status(spec, run)
        if state == "done":
            counts["skipped"] += 1
            log(f"skip {run.name}: record {records / (run.name + '.json')} exists")
            continue
        if state == "blocked":
            counts["blocked"] += 1
            needed = [r.name for r in [run.source, *run.others] if status(spec, r) != "done"]
            log(f"wait {run.name}: needs the record of {' and '.join(needed)} first (run the grid again later)")
            continue
        lost = lost_sources(spec, run)
        clash = None if force else seed_dtype_clash(spec, run, lost)
        if clash:
            counts["blocked"] += 1
            log(f"stop {run.name}: {clash}")
            continue
        for source in lost:  # before its gate, which pilots the start they make
            remake(spec, source, run, log)
            counts["ran"] += 1
        if gate is not None and not gate(run):
            counts["blocked"] += 1
            log(f"stop {run.name}: its start gate refuses it (the plan above; --force runs it anyway)")
            continue
        if state == "conflict":
            counts["blocked"] += 1
            log(f"stop {run.name}: {run.overrides['output_dir']} holds a checkpoint of a run with another budget "
                f"({'; '.join(budget_changes(run, latest_checkpoint(run.overrides['output_dir'])))}); move that "
                "folder away to run it under this grid's budget")
            continue
        verb = {"partial": "resume", "stale": "rerun"}.get(state, "run")
        log(f"{verb} {run.name} ({run.kind})" + (": its record was made under an older protocol" if state == "stale" else ""))
        record = train_run(spec, run) if run.kind == "train" else evaluate_run(spec, run)
        path = write_record(record, records)
        write_spec_report(spec)
        counts["ran"] += 1
        log(f"done {run.name}: accuracy {record.eval_after['accuracy']:.3f} in {record.grid['wall_s']:.0f} s -> {path}")
    return counts


def describe_budget(spec: GridSpec, runs: list[GridRun]) -> str:
    """The dry run's summary of the training budget: runs x samples (per budget, when cells declare
    their own), and the evaluation points."""
    training = [r for r in runs if r.kind == "train"]
    if spec.budget is None:
        return (f"{len(training)} training runs of {spec.time_budget_s} s training time each: the former wall-clock "
                "axis, records only")
    unit = spec.budget.axis.replace("_", " ")
    every = spec.eval_every.episodes if spec.eval_every else None
    points = (f"evaluated at episodes 0, {every}, {2 * every}, ... and at the end" if every
              else "evaluated before training and at the end")
    amounts = [cell_budget(spec, r.cell).amount for r in training]
    counts = {amount: amounts.count(amount) for amount in dict.fromkeys(amounts)}
    if len(counts) <= 1:
        return (f"{len(training)} training runs of {spec.budget.amount} {unit} each = {sum(amounts)} {unit}, "
                f"{points}; training time is recorded per run as its cost")
    terms = " + ".join(f"{n} x {amount}" for amount, n in counts.items())
    return (f"{len(training)} training runs of their cells' budgets, {terms} {unit} = {sum(amounts)} {unit}, "
            f"{points}; training time is recorded per run as its cost")


DEMO_MARK = "(a demonstration of the protocol, not a result)"
"""Appended to the report heading of a ``demo`` grid."""


def spec_title(spec: GridSpec) -> str:
    title = spec.title or f"Grid {spec.name}"
    return f"{title} {DEMO_MARK}" if spec.demo else title


def write_spec_report(spec: GridSpec) -> Path:
    """Regenerate the grid's README.md, curves.png and summary.json from its records (and its last
    plan, :mod:`baselines.grid_plan`)."""
    from baselines.grid_plan import load_plan

    return write_report(records_dir(spec).parent, spec_title(spec), [c.name for c in spec.cells], spec.description,
                        spec.comparisons, plan=load_plan(spec), declared=declared_seeds(spec),
                        leaderboard=spec.leaderboard)


REFUSED = 3
"""Exit status of a grid whose plan refuses it (:mod:`baselines.grid_plan`)."""


def planned(spec: GridSpec, runs: list[GridRun], gate_cells: list[str] | None, args: argparse.Namespace
            ) -> dict[str, Any]:
    """Make, print and keep the grid's plan (:func:`baselines.grid_plan.make_plan`); returns it
    (``accepted``: whether it accepts the grid)."""
    from baselines.grid_plan import make_plan, save_plan
    from leaderboards.grid_report import plan_lines

    result = make_plan(spec, runs, gate_cells, args.gate_episodes, args.gate_from_records)
    result["forced"] = bool(args.force and not result["accepted"] and not args.plan)
    path = save_plan(spec, result)
    print("\n".join(plan_lines(result)))
    for c in result["contrasts"]:  # cells of different budgets, compared on purpose
        if c.get("unequal_budgets"):
            budgets = " / ".join(describe_cell_budget(BudgetSpec(**b)) if b else "no budget" for b in c["budgets"])
            print(f"Budgets of {c['a']} - {c['b']}: {budgets}, compared on purpose: {c['unequal_budgets']}")
    print(f"plan {'accepted' if result['accepted'] else 'refused'}: {path}")
    write_spec_report(spec)
    return result


class _UsageError(Exception):
    """A command-line choice ``main`` refuses: printed as one ``grid: error:`` line, exit status 2."""


def _parser() -> argparse.ArgumentParser:
    """The ``python -m baselines.grid`` command line."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("grid", type=Path, help="grid file (baselines/grids/*.yaml)")
    parser.add_argument("--dry-run", action="store_true", help="list the runs and their status; run nothing")
    parser.add_argument("--cells", help="comma-separated cell names: run only these")
    parser.add_argument("--seeds", help="comma-separated seeds: run only these (of each selected cell's seeds)")
    parser.add_argument("--shard", help="i/n: run only shard i of n (one process per core)")
    parser.add_argument("--report-only", action="store_true", help="regenerate the tables and plot, run nothing")
    parser.add_argument("--plan", action="store_true",
                        help="gate every training cell, size every contrast, estimate the machine time; run nothing "
                             "(baselines/grid_plan.py); exit status 3 when the plan refuses the grid")
    parser.add_argument("--force", action="store_true", help="run even when the plan refuses the grid, or a seed's records ran in another dtype")
    parser.add_argument("--gate-episodes", type=int, help="episodes of each start gate's pilot (default: the grid's "
                                                          "gate.episodes, 128)")
    parser.add_argument("--gate-from-records", action="store_true",
                        help="take a start gate from the first updates' rollouts of the grid's records with the same "
                             "start where they cover the gate's episodes, instead of a pilot")
    return parser


def _selected(spec: GridSpec, runs: list[GridRun], args: argparse.Namespace) -> list[GridRun]:
    """The runs ``--cells``, ``--seeds`` and ``--shard`` select, in that order (each optional);
    an unknown cell, a malformed seed list or shard raises :class:`_UsageError`."""
    if args.cells:
        wanted = [c.strip() for c in args.cells.split(",") if c.strip()]
        unknown = sorted(set(wanted) - {c.name for c in spec.cells})
        if unknown:
            raise _UsageError(f"unknown cells {unknown}; cells of {spec.name}: "
                              f"{', '.join(c.name for c in spec.cells)}")
        runs = [r for r in runs if r.cell.name in wanted]
    if args.seeds:
        try:
            seeds = {int(x) for x in args.seeds.split(",") if x.strip()}
        except ValueError:
            raise _UsageError(f"--seeds expects comma-separated integers (e.g. 0,1), got {args.seeds!r}") from None
        runs = [r for r in runs if r.overrides["seed"] in seeds]
    if args.shard:
        match = re.fullmatch(r"(\d+)/(\d+)", args.shard)
        if not match:
            raise _UsageError(f"--shard expects i/n (e.g. 0/2), got {args.shard!r}")
        try:
            runs = shard(runs, int(match.group(1)), int(match.group(2)))
        except ValueError as err:
            raise _UsageError(str(err)) from err
    return runs


def _print_runs(spec: GridSpec, runs: list[GridRun]) -> None:
    """``--dry-run``: the selected runs, each with its status, kind, start and overrides."""
    print(f"grid {spec.name}: {len(runs)} runs ({describe_budget(spec, runs)})")
    for run in runs:
        shown = {k: v for k, v in run.overrides.items() if k not in ("seed", "output_dir", *GRID_SET_KEYS)}
        extra = f" from {run.source.name}" if run.source else ""
        if run.cell.start is not None:
            extra += "".join(f" + {a}: {name}_seed{run.seed}" for a, name in run.cell.start.adapters.items())
        if run.cell.budget is not None and run.cell.budget != spec.budget:
            extra += f" ({describe_cell_budget(run.cell.budget)})"
        print(f"  {status(spec, run):<8} {run.name:<36} {run.kind}{extra}  {json.dumps(shown)}")


def _run_planned(spec: GridSpec, runs: list[GridRun], args: argparse.Namespace) -> int:
    """Run the selected runs that are not done, once the grid's plan accepts them (or
    ``--force``); a start cell whose gate waits on its sources is gated when its first run is
    about to train. Returns the exit status."""
    if spec.budget is None:
        raise _UsageError(f"grid {spec.name} budgets its cells by wall-clock (time_budget_s: {spec.time_budget_s}); "
                          "its records stay readable (--report-only), but new runs are budgeted in samples: replace "
                          "it with budget: {episodes: N} and eval_every: {episodes: M}")
    to_run = [r for r in runs if status(spec, r) != "done"]
    waiting: set[str] = set()  # start cells whose gates wait for the runs they start from
    if to_run:  # gate the training cells about to run; size every contrast of the grid
        cells = list(dict.fromkeys(r.cell.name for r in to_run if r.kind == "train"))
        result = planned(spec, plan(spec), cells, args)
        if not result["accepted"] and not args.force:
            print("grid: the plan refuses this grid (above, and in its report); fix it or run with --force",
                  file=sys.stderr)
            return REFUSED
        waiting = {g["cell"] for g in result["gates"] if g.get("source") == "waiting" and g.get("after")}
    gated: dict[str, bool] = {}

    def gate(run: GridRun) -> bool:
        """A start cell's gate, measured (once) when its first run is about to train."""
        if run.cell.name not in waiting or run.kind != "train":
            return True
        if run.cell.name not in gated:
            result = planned(spec, plan(spec), [run.cell.name], args)
            entry = next(g for g in result["gates"] if g["cell"] == run.cell.name)
            gated[run.cell.name] = bool(entry.get("passed")) or args.force
        return gated[run.cell.name]

    try:
        counts = run_grid(spec, runs, gate=gate, force=args.force)
    except GridStopped as stop:
        print(f"grid: {stop}", file=sys.stderr)
        return stop.code
    print(f"grid {spec.name}: ran {counts['ran']}, skipped {counts['skipped']} (records exist), "
          f"waiting {counts['blocked']} (ablation runs and starts whose sources are not done, start gates that "
          "refuse, or run folders holding a checkpoint of another budget)")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Read the grid, select its runs, then report, plan, list or run them (the first of
    ``--report-only``, ``--plan``, ``--dry-run`` given, else run). Returns the exit status: 2 for
    a refused command line or grid file, 3 (``REFUSED``) when the plan refuses the grid."""
    args = _parser().parse_args(argv)
    try:
        if args.gate_episodes is not None and args.gate_episodes < 1:
            raise _UsageError(f"--gate-episodes must be >= 1, got {args.gate_episodes}")
        try:
            spec = load_grid(args.grid)
            runs = plan(spec)
        except ConfigError as err:
            raise _UsageError(str(err)) from err
        runs = _selected(spec, runs, args)
        if args.report_only:
            print(f"wrote {write_spec_report(spec)}")
            return 0
        if args.plan:
            return 0 if planned(spec, plan(spec), None, args)["accepted"] else REFUSED
        if args.dry_run:
            _print_runs(spec, runs)
            return 0
        return _run_planned(spec, runs, args)
    except _UsageError as err:
        print(f"grid: error: {err}", file=sys.stderr)
        return 2

if __name__ == "__main__":
    sys.exit(main())
