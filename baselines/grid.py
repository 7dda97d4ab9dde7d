"""Run a declared grid of configs x seeds, one leaderboard record per run, resumably.

    python -m baselines.grid baselines/grids/relay.yaml [--dry-run] [--cells a,b] [--seeds 0,1] [--shard i/n]
    python -m baselines.grid baselines/grids/relay.yaml --report-only

A grid file (YAML, :class:`GridSpec`) names a base config, one training-time budget for every
cell, default seeds and its cells; a cell is the base config plus dotted-key overrides (as
``--set``), trained once per seed, or an evaluation-only cell: ``untrained`` (the base model,
adapters at initialisation) or ``swapped`` (another cell's final trained adapters, each agent
given the next agent's adapter: :mod:`baselines.ablations`).

Each run writes ``<records>/<cell>_seed<seed>.json`` (:class:`leaderboards.records.Record` with
``grid`` set, and the commit of the code at the start of the run). Re-running the command skips
runs whose record exists and resumes a run whose output folder holds a checkpoint (the trainer's
``--resume``: the same result as an uninterrupted run), so a grid can be run in pieces. After
each run the grid's tables and plot (:mod:`leaderboards.grid_report`) are regenerated next to
the records.

Two processes, one per core, each take half the runs::

    OMP_NUM_THREADS=1 taskset -c 0 python -m baselines.grid GRID --shard 0/2 &
    OMP_NUM_THREADS=1 taskset -c 1 python -m baselines.grid GRID --shard 1/2 &

Training runs are dealt round-robin over the shards; a swapped run goes to its source run's
shard (it needs that run's adapters).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from baselines.run import build_record
from leaderboards.grid_report import Comparison, write_report
from leaderboards.records import Record, git_commit, write_record
from marft_agents.config import ConfigError, TrainConfig, build_dataclass, load_config

EVALUATIONS = ("untrained", "swapped")
"""Kinds of evaluation-only cells (a cell without ``evaluate`` trains)."""
_CELL_NAME = re.compile(r"^[a-z0-9][a-z0-9_]*$")


@dataclass
class CellSpec:
    """One cell of a grid: a variant of the base config, run once per seed."""

    name: str
    """Lower-case letters, digits and ``_``; names the records (``<name>_seed<k>``) and run folders."""
    overrides: dict[str, Any] = field(default_factory=dict)
    """Dotted-key overrides of the base config, e.g. ``{algorithm: mappo_token, shared_adapter: true}``."""
    seeds: list[int] | None = None
    """Seeds of this cell; None = the grid's ``seeds`` (a swapped cell: its source's)."""
    evaluate: str | None = None
    """None: train. ``untrained``: evaluate the base model (the config's policy with its
    adapters at initialisation). ``swapped``: evaluate cell ``source``'s final adapters, each
    agent given the next agent's adapter."""
    source: str | None = None
    """For ``swapped``: the training cell whose trained adapters are evaluated (same seeds)."""
    note: str = ""
    """What the cell measures, shown in the report."""


@dataclass
class GridSpec:
    """A grid file."""

    name: str
    """Grid name: records go to ``leaderboards/grids/<name>/records``, runs to ``runs/grids/<name>``."""
    base: str
    """Base training config (a YAML path, relative to the current directory)."""
    time_budget_s: int
    """``schedule.time_budget_s`` of every training cell: training time (rollouts + updates,
    evaluation excluded) after which a run stops. One budget for all cells keeps them comparable."""
    cells: list[CellSpec]
    """The cells, in report order."""
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    """Default seeds of a cell."""
    title: str = ""
    """Heading of the report."""
    description: str = ""
    """What the grid compares, shown at the top of the report."""
    records: str | None = None
    """Records folder; None = ``leaderboards/grids/<name>/records``."""
    output_root: str | None = None
    """Run folders' root; None = ``runs/grids/<name>`` (``<root>/<cell>/seed<k>``)."""
    comparisons: list[Comparison] = field(default_factory=list)
    """Questions the report answers from the records: cell(s) ``a`` minus cell ``b`` with its
    standard error, e.g. the best team against the best single agent, or a swapped ablation
    against its source (:class:`leaderboards.grid_report.Comparison`)."""


@dataclass
class GridRun:
    """One (cell, seed) of a grid."""

    cell: CellSpec
    seed: int
    name: str
    """Record name, ``<cell>_seed<seed>``."""
    overrides: dict[str, Any]
    """Everything set on the base config: the cell's overrides, seed, output_dir and budget."""
    kind: str
    """``train``, ``untrained`` or ``swapped``."""
    source: GridRun | None = None
    """For a swapped run, the training run whose adapters it evaluates."""


def load_grid(path: str | Path) -> GridSpec:
    """Parse and check a grid file; errors say which key or cell is wrong."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"grid file {str(path)!r} does not exist")
    import yaml

    spec = build_dataclass(GridSpec, yaml.safe_load(path.read_text(encoding="utf-8")), "")
    if spec.time_budget_s < 1:
        raise ConfigError(f"time_budget_s must be >= 1 second, got {spec.time_budget_s}")
    if not spec.cells:
        raise ConfigError(f"grid {spec.name!r} declares no cells")
    names = [c.name for c in spec.cells]
    for cell in spec.cells:
        if not _CELL_NAME.match(cell.name) or names.count(cell.name) > 1:
            raise ConfigError(f"cell name {cell.name!r} must be unique, lower-case letters, digits and '_'")
        if cell.evaluate not in (None, *EVALUATIONS):
            raise ConfigError(f"cell {cell.name!r}: evaluate must be one of {EVALUATIONS} or absent (train), "
                              f"got {cell.evaluate!r}")
        if cell.evaluate == "swapped":
            source = next((c for c in spec.cells if c.name == cell.source), None)
            if source is None or source.evaluate is not None:
                raise ConfigError(f"cell {cell.name!r}: swapped needs 'source', the name of a training cell "
                                  f"of this grid, got {cell.source!r}")
            if cell.overrides:
                raise ConfigError(f"cell {cell.name!r}: a swapped cell evaluates its source's run as "
                                  "configured; put overrides on the source cell")
        elif cell.source is not None:
            raise ConfigError(f"cell {cell.name!r}: 'source' is only for evaluate: swapped")
    for k, comparison in enumerate(spec.comparisons):
        unknown = [name for name in [*comparison.a, comparison.b] if name not in names]
        if unknown or not comparison.a:
            raise ConfigError(f"comparisons[{k}]: a (a list of cells) and b (a cell) must name cells of this grid; "
                              f"unknown {unknown or 'empty a'}; cells: {', '.join(names)}")
    return spec


def records_dir(spec: GridSpec) -> Path:
    return Path(spec.records) if spec.records else Path("leaderboards") / "grids" / spec.name / "records"


def plan(spec: GridSpec) -> list[GridRun]:
    """Every run of the grid, in file order (cells, then seeds); each run's config is validated."""
    root = Path(spec.output_root) if spec.output_root else Path("runs") / "grids" / spec.name
    runs: dict[tuple[str, int], GridRun] = {}
    for cell in spec.cells:
        source = next((c for c in spec.cells if c.name == cell.source), None)
        seeds = cell.seeds if cell.seeds is not None else (
            source.seeds if source is not None and source.seeds is not None else spec.seeds)
        for seed in seeds:
            overrides = {**cell.overrides, "seed": seed, "output_dir": str(root / cell.name / f"seed{seed}")}
            if cell.evaluate is None:
                overrides["schedule.time_budget_s"] = spec.time_budget_s
            source_run = None
            if cell.evaluate == "swapped":
                source_run = runs.get((cell.source, seed))
                if source_run is None:
                    raise ConfigError(f"cell {cell.name!r} seed {seed}: its source {cell.source!r} has no run "
                                      "with that seed; give the swapped cell the source's seeds")
                overrides = dict(source_run.overrides)
            run = GridRun(cell, seed, f"{cell.name}_seed{seed}", overrides, cell.evaluate or "train", source_run)
            run_config(spec, run)  # fail before any training when a cell's overrides are invalid
            runs[(cell.name, seed)] = run
    return list(runs.values())


def run_config(spec: GridSpec, run: GridRun) -> TrainConfig:
    try:
        return load_config(spec.base, run.overrides)
    except ConfigError as err:
        raise ConfigError(f"cell {run.cell.name!r} (seed {run.seed}): {err}") from None


def shard(runs: list[GridRun], index: int, count: int) -> list[GridRun]:
    """Shard ``index`` of ``count``: training and untrained runs round-robin, swapped with their source."""
    if not 0 <= index < count:
        raise ValueError(f"--shard must be i/n with 0 <= i < n, got {index}/{count}")
    owner: dict[str, int] = {}
    for k, run in enumerate(r for r in runs if r.kind != "swapped"):
        owner[run.name] = k % count
    # A swapped run goes with its source (it reads that run's adapters). When the selection
    # (--cells) leaves the source out, the source must be done already: deal those round-robin.
    orphans = [r for r in runs if r.kind == "swapped" and r.source.name not in owner]
    for k, run in enumerate(orphans):
        owner[run.name] = k % count

    def shard_of(run: GridRun) -> int:
        if run.kind == "swapped" and run.source.name in owner:
            return owner[run.source.name]
        return owner[run.name]

    return [r for r in runs if shard_of(r) == index]


def status(spec: GridSpec, run: GridRun) -> str:
    """``done`` (record written), ``partial`` (checkpoint, no record), ``blocked`` (a swapped run
    whose source has no record yet) or ``todo``."""
    from marft_agents.checkpoint import latest_checkpoint

    if (records_dir(spec) / f"{run.name}.json").is_file():
        return "done"
    if run.kind == "swapped" and not (records_dir(spec) / f"{run.source.name}.json").is_file():
        return "blocked"
    if run.kind == "train" and latest_checkpoint(run.overrides["output_dir"]) is not None:
        return "partial"
    return "todo"


# -- running ----------------------------------------------------------------------------------------
def _grid_meta(spec: GridSpec, run: GridRun, wall_s: float) -> dict[str, Any]:
    return {"grid": spec.name, "cell": run.cell.name, "seed": run.seed, "kind": run.kind, "wall_s": round(wall_s, 1)}


def train_run(spec: GridSpec, run: GridRun) -> Record:
    """Train (resuming from the run folder's latest checkpoint, if any), then build its record."""
    from marft_agents.cli import main as marft_main

    commit = git_commit()
    started = time.perf_counter()
    sets = [f"--set={key}={json.dumps(value)}" for key, value in run.overrides.items()]
    # --resume: continue from a checkpoint, or start fresh when there is none (then a killed
    # attempt's step-0 evaluation is reused and its re-logged updates are de-duplicated).
    code = marft_main(["train", "--config", spec.base, "--quiet", "--no-tensorboard", "--resume", *sets])
    if code:
        raise RuntimeError(f"training run {run.name} failed with exit status {code}")
    record = build_record(run_config(spec, run), run.name, commit)
    record.grid = _grid_meta(spec, run, time.perf_counter() - started)
    return record


def evaluate_run(spec: GridSpec, run: GridRun) -> Record:
    """Evaluate the untrained policy, or the source run's final adapters swapped between agents."""
    import marft_agents.models as models
    import marft_envs
    from baselines.ablations import rotation, swap_agent_adapters
    from marft_agents.checkpoint import latest_checkpoint, load_adapters
    from marft_agents.evaluation import evaluate
    from marft_agents.trainer import build_policy

    commit = git_commit()
    started = time.perf_counter()
    cfg = run_config(spec, run)
    env_kwargs = {**cfg.env.kwargs, **cfg.eval.env_kwargs}
    agent_ids = list(marft_envs.make(cfg.env.id, **env_kwargs).possible_agents)
    model, tokenizer = models.load_model_and_tokenizer(cfg.model)
    policy = build_policy(cfg, model, tokenizer, agent_ids)
    meta: dict[str, Any] = {}
    source_record: dict[str, Any] = {}
    if run.kind == "swapped":
        checkpoint = latest_checkpoint(cfg.output_dir)
        if checkpoint is None:
            raise FileNotFoundError(f"{run.name}: the source run {run.source.name} has no checkpoint in "
                                    f"{cfg.output_dir}; run its cell first")
        assignment = rotation(agent_ids)
        policy.load_adapter_state_dict(swap_agent_adapters(load_adapters(checkpoint), policy, assignment))
        source_record = json.loads((records_dir(spec) / f"{run.source.name}.json").read_text())
        meta = {"source": run.source.cell.name, "assignment": assignment, "checkpoint": str(checkpoint),
                "unswapped_accuracy": source_record["eval_after"]["accuracy"]}
    e = cfg.eval
    result = evaluate(policy, cfg.env.id, env_kwargs, n_problems=e.n_problems, greedy=e.greedy, seed=e.seed,
                      sampling=cfg.sampling, num_envs=e.num_envs)
    out = Path(cfg.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    transcripts = out / f"{run.kind}_transcripts.jsonl"  # who said what, for explaining effects
    transcripts.write_text("".join(json.dumps(t) + "\n" for t in result.per_task), encoding="utf-8")
    evaluation = {"accuracy": result.accuracy, "stderr": result.stderr, "n": result.n, "distinct": result.distinct,
                  "mean_reward": result.mean_reward, "greedy": e.greedy}
    from marft_agents.config import config_to_dict
    from marft_agents.learners.registry import EVAL_ONLY

    return Record(
        name=run.name, env_id=cfg.env.id, env_kwargs=env_kwargs,
        algorithm=EVAL_ONLY if run.kind == "untrained" else cfg.algorithm,
        model=cfg.model.name_or_path, eval_after=evaluation,
        eval_curve=[{"update": 0, "accuracy": result.accuracy, "stderr": result.stderr, "train_seconds": 0.0}]
        if run.kind == "untrained" else [],
        budget=source_record.get("budget", {}), config=config_to_dict(cfg), commit=commit,
        grid={**_grid_meta(spec, run, time.perf_counter() - started), **meta},
    )


def run_grid(spec: GridSpec, runs: list[GridRun], log=print) -> dict[str, int]:
    """Run every run not done yet; returns counts by outcome (``ran``, ``skipped``, ``blocked``)."""
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
            log(f"wait {run.name}: needs the record of {run.source.name} first (run the grid again later)")
            continue
        log(f"{'resume' if state == 'partial' else 'run'} {run.name} ({run.kind})")
        record = train_run(spec, run) if run.kind == "train" else evaluate_run(spec, run)
        path = write_record(record, records)
        write_spec_report(spec)
        counts["ran"] += 1
        log(f"done {run.name}: accuracy {record.eval_after['accuracy']:.3f} in {record.grid['wall_s']:.0f} s -> {path}")
    return counts


def spec_title(spec: GridSpec) -> str:
    return spec.title or f"Grid {spec.name}"


def write_spec_report(spec: GridSpec) -> Path:
    """Regenerate the grid's README.md and curves.png from its records."""
    return write_report(records_dir(spec).parent, spec_title(spec), [c.name for c in spec.cells], spec.description,
                        spec.comparisons)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("grid", type=Path, help="grid file (baselines/grids/*.yaml)")
    parser.add_argument("--dry-run", action="store_true", help="list the runs and their status; run nothing")
    parser.add_argument("--cells", help="comma-separated cell names: run only these")
    parser.add_argument("--seeds", help="comma-separated seeds: run only these (of each selected cell's seeds)")
    parser.add_argument("--shard", help="i/n: run only shard i of n (one process per core)")
    parser.add_argument("--report-only", action="store_true", help="regenerate the tables and plot, run nothing")
    args = parser.parse_args(argv)
    try:
        spec = load_grid(args.grid)
        runs = plan(spec)
    except ConfigError as err:
        print(f"grid: error: {err}", file=sys.stderr)
        return 2
    if args.cells:
        wanted = [c.strip() for c in args.cells.split(",") if c.strip()]
        unknown = sorted(set(wanted) - {c.name for c in spec.cells})
        if unknown:
            print(f"grid: error: unknown cells {unknown}; cells of {spec.name}: "
                  f"{', '.join(c.name for c in spec.cells)}", file=sys.stderr)
            return 2
        runs = [r for r in runs if r.cell.name in wanted]
    if args.seeds:
        try:
            seeds = {int(x) for x in args.seeds.split(",") if x.strip()}
        except ValueError:
            print(f"grid: error: --seeds expects comma-separated integers (e.g. 0,1), got {args.seeds!r}",
                  file=sys.stderr)
            return 2
        runs = [r for r in runs if r.overrides["seed"] in seeds]
    if args.shard:
        match = re.fullmatch(r"(\d+)/(\d+)", args.shard)
        if not match:
            print(f"grid: error: --shard expects i/n (e.g. 0/2), got {args.shard!r}", file=sys.stderr)
            return 2
        try:
            runs = shard(runs, int(match.group(1)), int(match.group(2)))
        except ValueError as err:
            print(f"grid: error: {err}", file=sys.stderr)
            return 2
    if args.report_only:
        print(f"wrote {write_spec_report(spec)}")
        return 0
    if args.dry_run:
        training = [r for r in runs if r.kind == "train"]
        hours = len(training) * spec.time_budget_s / 3600
        print(f"grid {spec.name}: {len(runs)} runs ({len(training)} training runs of {spec.time_budget_s} s "
              f"training time each = {hours:.1f} h on one core, {hours / 2:.1f} h on two; evaluations extra)")
        for run in runs:
            shown = {k: v for k, v in run.overrides.items() if k not in ("seed", "output_dir", "schedule.time_budget_s")}
            extra = f" from {run.source.name}" if run.source else ""
            print(f"  {status(spec, run):<8} {run.name:<36} {run.kind}{extra}  {json.dumps(shown)}")
        return 0
    counts = run_grid(spec, runs)
    print(f"grid {spec.name}: ran {counts['ran']}, skipped {counts['skipped']} (records exist), "
          f"waiting {counts['blocked']} (swapped runs whose source is not done)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
