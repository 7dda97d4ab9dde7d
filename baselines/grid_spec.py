"""The declarations of a comparison grid (``baselines/grids/*.yaml``; the file format is in
:mod:`baselines.grid`'s docstring): its cells, budgets, start gates and starts, loading and
checking a grid file, the runs it lists and their status. The runner (:mod:`baselines.grid`) and
the plan (:mod:`baselines.grid_plan`) both build on it; it imports neither."""

from __future__ import annotations

import dataclasses
import json
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from baselines.ablations import ABLATIONS
from leaderboards.grid_report import Comparison
from leaderboards.records import WALL_CLOCK, grid_budget, record_caveats
from marft_agents.config import ConfigError, TrainConfig, build_dataclass, load_config

EVALUATIONS = ("untrained", *ABLATIONS)
"""Kinds of evaluation-only cells (a cell without ``evaluate`` trains): the base model, or a
training cell's final team changed by an ablation (:data:`baselines.ablations.ABLATIONS`)."""
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
    adapters at initialisation). An ablation (``swapped``, ``base_seat``, ``fixed_message``,
    ``combined``; :mod:`baselines.ablations`): evaluate cell ``source``'s final adapters with the
    team changed, e.g. ``swapped``: each agent given the next agent's adapter."""
    source: str | None = None
    """For an ablation: the training cell whose trained adapters are evaluated (same seeds)."""
    ablation: dict[str, Any] = field(default_factory=dict)
    """The ablation's options, e.g. ``{seat: holder_0}`` (its ``options_class``)."""
    note: str = ""
    """What the cell measures, shown in the report."""
    budget: BudgetSpec | None = None
    """A training cell's own budget, on the grid's axis; None = the grid's (module docstring, 2.)."""
    start: StartSpec | None = None
    """A training cell's start: other training cells' final adapters, same seed (module
    docstring, 3.); None = fresh adapters (or the base config's ``init_adapters``)."""


@dataclass
class StartSpec:
    """Where a training cell's runs start: the final checkpoints of earlier cells' runs of the same
    seed (:func:`start_state`)."""

    source: str
    """The training cell whose final adapters the run starts from: every agent's, and its critic
    (adapters and value heads) where the run has one of the same layout."""
    adapters: dict[str, str] = field(default_factory=dict)
    """Agent -> the training cell whose final adapter for that agent the run takes instead of the
    source's, e.g. ``{answerer_0: answerer_alone}``; with a per-agent critic, that agent's critic
    comes from there too."""

    def cells(self) -> list[str]:
        """Every cell the start reads, the source first."""
        return list(dict.fromkeys([self.source, *self.adapters.values()]))


@dataclass
class UnequalBudget:
    """A declared comparison whose two cells train on different budgets, on purpose."""

    a: str
    b: str
    why: str
    """Why the comparison is fair, e.g. "equal total episodes: the solo trains on the curriculum's
    two stages and its joint phase together"; shown in the plan."""


BUDGET_AXES = {"episodes": "schedule.max_episodes", "sampled_tokens": "schedule.max_sampled_tokens"}
"""Budget axis of a grid (a field of :class:`BudgetSpec`) -> the schedule key it sets on every training cell."""
GRID_SET_KEYS = (*BUDGET_AXES.values(), "schedule.time_budget_s", "eval.interval", "eval.at_end")
"""Config keys the grid sets on every training cell (its budget and evaluation points), so that
all cells train on the same samples and are evaluated at the same episode counts; a cell that
overrides one is refused."""


@dataclass
class BudgetSpec:
    """The training budget of every training cell of a grid, in samples: exactly one axis."""

    episodes: int | None = None
    """Training episodes (``schedule.max_episodes``): the default axis, as MARFT compares at equal
    environment steps. A multiple of every cell's ``episodes_per_update``; each run plays exactly
    this many."""
    sampled_tokens: int | None = None
    """Tokens sampled in rollouts (``schedule.max_sampled_tokens``), every agent's together: a team
    whose agents each write splits this among them. A run stops after the update that reaches it."""

    def __post_init__(self) -> None:
        chosen = {axis: getattr(self, axis) for axis in BUDGET_AXES if getattr(self, axis) is not None}
        if len(chosen) != 1 or next(iter(chosen.values())) < 1:
            raise ValueError(f"give exactly one budget axis, {' or '.join(BUDGET_AXES)}, >= 1 "
                             f"(e.g. budget: {{episodes: 320}}), got {chosen or 'none'}")

    @property
    def axis(self) -> str:
        return next(axis for axis in BUDGET_AXES if getattr(self, axis) is not None)

    @property
    def amount(self) -> int:
        return getattr(self, self.axis)


@dataclass
class EvalEverySpec:
    """When a grid's training cells are evaluated, on the samples axis."""

    episodes: int
    """Evaluate after every this many training episodes (and before training, and at the end):
    each cell's ``eval.interval`` is this over its ``episodes_per_update``, so every cell is
    evaluated at the same episode counts whatever its cost per episode."""

    def __post_init__(self) -> None:
        if self.episodes < 1:
            raise ValueError(f"eval_every.episodes must be >= 1, got {self.episodes}")


@dataclass
class GateSpec:
    """The start gate of every training cell (:mod:`baselines.grid_plan`): a pilot of the cell's
    starting policy, sampled as in training, must earn the reward often enough that its updates
    carry a policy gradient."""

    episodes: int = 128
    """Episodes of the pilot (problems of the training split, one sampled play each)."""
    min_signal: float = 0.25
    """The least probability that one update's episodes hold a rewarded episode, ``1 - (1 -
    rate) ** episodes_per_update`` at the pilot's rate: an update without one has no policy
    gradient at all under a 0/1 team reward. The default asks for one update in four (a rate of
    0.9 % at 32 episodes per update). 0: measure and show the pilots, refuse nothing."""
    max_episodes: int | None = None
    """When a pilot is inconclusive, pilot again at the size that would decide at the rate it
    found (``episodes`` doubled), or at this size when none up to it would, and judge that larger
    pilot; None: judge the first pilot only (the plan then names the size that would decide). A
    feasibility screen, not a test: the second pilot depends on the first look, so its interval
    is not exactly at the gate's level. Cheap starts are decided at ``episodes``; only a start near
    the threshold pays for the larger pilot."""

    def __post_init__(self) -> None:
        if self.episodes < 1:
            raise ValueError(f"gate.episodes must be >= 1, got {self.episodes}")
        if self.max_episodes is not None and self.max_episodes < self.episodes:
            raise ValueError(f"gate.max_episodes must be >= gate.episodes ({self.episodes}), got {self.max_episodes}")
        if not 0.0 <= self.min_signal < 1.0:
            raise ValueError(f"gate.min_signal must be in [0, 1), got {self.min_signal}")


@dataclass
class GridSpec:
    """A grid file."""

    name: str
    """Grid name: records go to ``leaderboards/grids/<name>/records``, runs to ``runs/grids/<name>``."""
    base: str
    """Base training config (a YAML path, relative to the current directory)."""
    cells: list[CellSpec]
    """The cells, in report order."""
    budget: BudgetSpec | None = None
    """What every training cell trains on: ``{episodes: N}`` or ``{sampled_tokens: N}``, the same
    samples for all, so cells compare at equal samples, not at this machine's throughput. The
    training seconds each run took are recorded as its cost."""
    eval_every: EvalEverySpec | None = None
    """``{episodes: M}``: evaluations at episodes 0, M, 2M, ... and at the end for every training
    cell; None = before training and at the end only. With an episode budget N, M divides N."""
    time_budget_s: int | None = None
    """The former axis, equal training seconds per cell (grids run before the sample budgets):
    such a grid loads for ``--report-only`` and ``--dry-run`` but no longer runs; its records say
    so (``grid.budget.axis: wall_clock``, :func:`leaderboards.records.grid_budget`)."""
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    """Default seeds of a cell."""
    title: str = ""
    """Heading of the report."""
    demo: bool = False
    """A demonstration of the protocol at a tiny budget, not a result: the report's heading says
    so (:func:`baselines.grid.spec_title`), and the shipped grids' checks of what a comparison grid
    must hold (e.g. three seeds of the main cells) do not apply."""
    description: str = ""
    """What the grid compares, shown at the top of the report."""
    leaderboard: bool = False
    """Rank the cells by accuracy in the report, with their 95 % CIs (a benchmark's leaderboard,
    :mod:`baselines.benchmark`; :func:`leaderboards.grid_report.leaderboard_table`)."""
    records: str | None = None
    """Records folder; None = ``leaderboards/grids/<name>/records``."""
    output_root: str | None = None
    """Run folders' root; None = ``runs/grids/<name>`` (``<root>/<cell>/seed<k>``)."""
    comparisons: list[Comparison] = field(default_factory=list)
    """Questions the report answers from the records, declared before the runs: cell ``a`` minus
    cell ``b``, tested with Holm's correction over all of them, e.g. a team against the single
    agent, or an ablation against its source (:class:`leaderboards.grid_report.Comparison`)."""
    meaningful_effect: float | None = None
    """The smallest difference, in accuracy points, that would matter: the plan refuses a grid
    whose declared comparisons cannot detect it (:mod:`baselines.grid_plan`). Required when the
    grid declares comparisons and is to run."""
    power: float = 0.8
    """The power at which the plan computes each comparison's minimal detectable effect."""
    margin_fraction: float | None = None
    """The widest equivalence margin a comparison may declare, as a fraction of the training
    effect its two cells' records measure (mean over their runs of final accuracy minus accuracy
    before training): with 0.5 the plan refuses a margin wider than half of what training does, so
    that "equivalent" can tell an arm that learns from one that does not. None: no such limit
    (the plan still reports the effect)."""
    gate: GateSpec = field(default_factory=GateSpec)
    """The start gate of every training cell (:class:`GateSpec`)."""
    unequal_budgets: list[UnequalBudget] = field(default_factory=list)
    """Declared comparisons whose cells train on different budgets (a cell's own ``budget``; an
    ablation's is its source's), each with the reason: any other such comparison is refused."""
    spread_from: str | None = None
    """Another grid file whose records size this grid's plan where its own records do not yet: a
    follow-up planned from an earlier grid's seeds. A cell of the same name is used only when its
    runs are the same runs apart from the seed and the evaluation points (else the plan names the
    keys that differ); this grid's records take over once a cell has its own spread
    (:mod:`baselines.grid_plan`, "Contrasts" and "Machine time")."""


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
    """``train``, ``untrained`` or an ablation (``swapped``, ...)."""
    source: GridRun | None = None
    """For an ablation run, the training run whose adapters it evaluates; for a training run with a
    ``start``, the run whose final adapters it starts from."""
    others: list[GridRun] = field(default_factory=list)
    """Further training runs whose adapters it reads (a ``combined`` ablation, a start's ``adapters``)."""


def load_grid(path: str | Path) -> GridSpec:
    """Parse and check a grid file; errors say which key or cell is wrong."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"grid file {str(path)!r} does not exist")
    import yaml

    spec = build_dataclass(GridSpec, yaml.safe_load(path.read_text(encoding="utf-8")), "")
    check_budget(spec)
    if not spec.cells:
        raise ConfigError(f"grid {spec.name!r} declares no cells")
    names = [c.name for c in spec.cells]
    for cell in spec.cells:
        if not _CELL_NAME.match(cell.name) or names.count(cell.name) > 1:
            raise ConfigError(f"cell name {cell.name!r} must be unique, lower-case letters, digits and '_'")
        if cell.evaluate not in (None, *EVALUATIONS):
            raise ConfigError(f"cell {cell.name!r}: evaluate must be one of {EVALUATIONS} or absent (train), "
                              f"got {cell.evaluate!r}")
        if cell.evaluate in ABLATIONS:
            training = {c.name for c in spec.cells if c.evaluate is None}
            for needed in [cell.source, *cell_ablation(cell).other_cells()]:
                if needed not in training:
                    raise ConfigError(f"cell {cell.name!r}: {cell.evaluate} needs 'source' (and its ablation's "
                                      f"cells) to name training cells of this grid, got {needed!r}")
            if any(not key.startswith("eval.") for key in cell.overrides):
                raise ConfigError(f"cell {cell.name!r}: an ablation cell evaluates its source's run as "
                                  "configured; only eval.* overrides (e.g. eval.samples_per_problem) are allowed, "
                                  "put the others on the source cell")
        elif cell.source is not None or cell.ablation:
            raise ConfigError(f"cell {cell.name!r}: 'source' and 'ablation' are only for evaluate: "
                              f"{', '.join(ABLATIONS)}")
        if cell.start is not None:
            check_start(spec, cell)
    if spec.meaningful_effect is not None and not 0 < spec.meaningful_effect <= 100:
        raise ConfigError(f"meaningful_effect must be in (0, 100] accuracy points, got {spec.meaningful_effect}")
    if not 0 < spec.power < 1:
        raise ConfigError(f"power must be in (0, 1), got {spec.power}")
    if spec.margin_fraction is not None and not 0 < spec.margin_fraction <= 1:
        raise ConfigError(f"margin_fraction must be in (0, 1] (a share of the training effect), got {spec.margin_fraction}")
    for k, comparison in enumerate(spec.comparisons):
        unknown = [name for name in (comparison.a, comparison.b) if name not in names]
        if unknown:
            raise ConfigError(f"comparisons[{k}]: a and b must each name a cell of this grid; "
                              f"unknown {unknown}; cells: {', '.join(names)}")
    check_comparison_budgets(spec)
    if spec.spread_from is not None and (not Path(spec.spread_from).is_file()
                                         or Path(spec.spread_from).resolve() == path.resolve()):
        raise ConfigError(f"spread_from must name another grid file, got {spec.spread_from!r}")
    return spec


def check_start(spec: GridSpec, cell: CellSpec) -> None:
    """A ``start`` on a training cell, from training cells declared before it, without an
    ``init_adapters`` of its own (module docstring, 3.)."""
    if cell.evaluate is not None:
        raise ConfigError(f"cell {cell.name!r}: 'start' is for training cells; an evaluation cell reads its "
                          "source's adapters (evaluate: final, source: CELL)")
    if "init_adapters" in cell.overrides:
        raise ConfigError(f"cell {cell.name!r}: 'start' and overrides.init_adapters both say where the run starts; "
                          "give one (the grid sets init_adapters from the start)")
    before = [c.name for c in spec.cells[:spec.cells.index(cell)]]
    training = {c.name for c in spec.cells if c.evaluate is None}
    for needed in cell.start.cells():
        if needed not in training:
            raise ConfigError(f"cell {cell.name!r}: its start names {needed!r}, which is not a training cell of this "
                              f"grid; training cells: {', '.join(sorted(training))}")
        if needed not in before:
            raise ConfigError(f"cell {cell.name!r}: its start reads cell {needed!r}, declared after it; declare the "
                              "cells a start reads before it")


def check_comparison_budgets(spec: GridSpec) -> None:
    """Each comparison of two cells with different budgets is declared in ``unequal_budgets``, and
    each declaration names a comparison whose budgets do differ."""
    declared = {(u.a, u.b): u for u in spec.unequal_budgets}
    compared = {(c.a, c.b) for c in spec.comparisons}
    for a, b in declared:
        if (a, b) not in compared:
            raise ConfigError(f"unequal_budgets: {a} - {b} is not a declared comparison (a and b as in comparisons)")
    for c in spec.comparisons:
        budgets = [trained_budget(spec, spec_cell(spec, name)) for name in (c.a, c.b)]
        if None in budgets:  # an untrained evaluation: no budget to differ
            continue
        differ = budgets[0] != budgets[1]
        if differ and (c.a, c.b) not in declared:
            raise ConfigError(f"comparison {c.a} - {c.b}: the cells train on different budgets "
                              f"({describe_cell_budget(budgets[0])} / {describe_cell_budget(budgets[1])}); list it in "
                              "unequal_budgets with the reason (e.g. equal total episodes), or give them one budget")
        if not differ and (c.a, c.b) in declared:
            raise ConfigError(f"unequal_budgets: {c.a} - {c.b} train on the same budget "
                              f"({describe_cell_budget(budgets[0])}); remove the declaration")


def spec_cell(spec: GridSpec, name: str) -> CellSpec:
    return next(c for c in spec.cells if c.name == name)


def cell_budget(spec: GridSpec, cell: CellSpec) -> BudgetSpec | None:
    """The budget a training cell trains on: its own, else the grid's (None: the former wall-clock axis)."""
    return cell.budget if cell.budget is not None else spec.budget


def trained_budget(spec: GridSpec, cell: CellSpec) -> BudgetSpec | None:
    """The budget behind a cell's records: a training cell's own (:func:`cell_budget`), an
    ablation's source's; None for an ``untrained`` evaluation."""
    if cell.evaluate == "untrained":
        return None
    if cell.evaluate in ABLATIONS:
        cell = spec_cell(spec, cell.source)
    return cell_budget(spec, cell)


def describe_cell_budget(budget: BudgetSpec | None) -> str:
    return "no budget" if budget is None else f"{budget.amount} {budget.axis.replace('_', ' ')}"


def check_budget(spec: GridSpec) -> None:
    """One budget axis; evaluation points that land on it; no training cell setting what the grid sets."""
    if (spec.budget is None) == (spec.time_budget_s is None):
        raise ConfigError(f"grid {spec.name!r}: give one budget in samples, budget: {{episodes: N}} (or "
                          "{sampled_tokens: N}) with eval_every: {episodes: M}; time_budget_s (equal wall-clock) "
                          "is read only from grid files made before")
    if spec.time_budget_s is not None and spec.time_budget_s < 1:
        raise ConfigError(f"time_budget_s must be >= 1 second, got {spec.time_budget_s}")
    if spec.budget is not None and spec.budget.axis == "episodes" and spec.eval_every is not None \
            and spec.budget.episodes % spec.eval_every.episodes:
        raise ConfigError(f"eval_every.episodes ({spec.eval_every.episodes}) must divide budget.episodes "
                          f"({spec.budget.episodes}), so that every cell is evaluated at 0, M, 2M, ... up to the budget")
    for cell in spec.cells:
        if cell.budget is None:
            pass
        elif cell.evaluate is not None:
            raise ConfigError(f"cell {cell.name!r}: an evaluation cell trains nothing; its budget is its source's "
                              "(remove its budget)")
        elif spec.budget is None or cell.budget.axis != spec.budget.axis:
            raise ConfigError(f"cell {cell.name!r}: its budget must be on the grid's axis "
                              f"({spec.budget.axis if spec.budget else 'the grid has none in samples'}), "
                              f"got {cell.budget.axis}")
        elif cell.budget.axis == "episodes" and spec.eval_every is not None \
                and cell.budget.episodes % spec.eval_every.episodes:
            raise ConfigError(f"cell {cell.name!r}: eval_every.episodes ({spec.eval_every.episodes}) must divide its "
                              f"budget.episodes ({cell.budget.episodes}), so that it is evaluated at the same episode "
                              "counts as the other cells")
        grid_keys = [key for key in cell.overrides
                     if any(key == g or g.startswith(key + ".") for g in GRID_SET_KEYS)]
        if cell.evaluate is None and spec.budget is not None and grid_keys:
            raise ConfigError(f"cell {cell.name!r} overrides {', '.join(grid_keys)}, which the grid sets on every "
                              "training cell (budget, eval_every) so that all train on the same samples and are "
                              "evaluated at the same episode counts; remove it")


def budget_overrides(spec: GridSpec, cfg: TrainConfig, cell: CellSpec) -> dict[str, Any]:
    """What the grid sets on a training cell whose config (without them) is ``cfg``: its budget
    (:func:`cell_budget`), and ``eval.interval`` in updates from ``eval_every`` in episodes (it must
    be a whole number of the cell's updates); refused with one line when the cell's updates cannot
    meet them."""
    budget = cell_budget(spec, cell)
    if budget is None:  # the former wall-clock axis
        return {"schedule.time_budget_s": spec.time_budget_s}
    per_update = cfg.schedule.episodes_per_update
    interval = 0
    if spec.eval_every is not None:
        interval, rest = divmod(spec.eval_every.episodes, per_update)
        if rest:
            raise ConfigError(f"cell {cell.name!r}: eval_every.episodes ({spec.eval_every.episodes}) is not a whole "
                              f"number of its updates (episodes_per_update {per_update}), so it could not be evaluated "
                              "at the same episode counts as the others; change one of them")
    if budget.axis == "episodes" and cfg.schedule.num_updates * per_update < budget.episodes:
        raise ConfigError(f"cell {cell.name!r}: schedule.num_updates ({cfg.schedule.num_updates}) x episodes_per_update "
                          f"({per_update}) stops it before budget.episodes ({budget.episodes}); raise num_updates")
    return {BUDGET_AXES[budget.axis]: budget.amount, "schedule.time_budget_s": None,
            "eval.interval": interval, "eval.at_end": True}


def budget_meta(spec: GridSpec, cell: CellSpec | None = None) -> dict[str, Any]:
    """``grid.budget`` of a record of ``cell`` (a training run, or an ablation of one: its source's
    budget, :func:`trained_budget`; None: the grid's): the axis, its amount and the evaluation
    interval (the former wall-clock axis as :func:`leaderboards.records.grid_budget` reads it)."""
    budget = spec.budget if cell is None else trained_budget(spec, cell)
    if budget is None:
        return {"axis": WALL_CLOCK, "time_budget_s": spec.time_budget_s}
    return {"axis": budget.axis, budget.axis: budget.amount,
            "eval_every_episodes": spec.eval_every.episodes if spec.eval_every else None}


def cell_ablation(cell: CellSpec) -> Any:
    """The :class:`baselines.ablations.Ablation` of an ablation cell, its options checked."""
    return ABLATIONS[cell.evaluate].from_cell(cell.ablation, f"cell {cell.name!r}: ablation")


def env_agents(cfg: TrainConfig) -> list[str]:
    """The agents of the env a config evaluates (``env.kwargs`` with ``eval.env_kwargs`` on top)."""
    import marft_envs

    return list(marft_envs.make(cfg.env.id, **{**cfg.env.kwargs, **cfg.eval.env_kwargs}).possible_agents)


def records_dir(spec: GridSpec) -> Path:
    return Path(spec.records) if spec.records else Path("leaderboards") / "grids" / spec.name / "records"


def cell_seeds(spec: GridSpec, cell: CellSpec) -> list[int]:
    """The seeds the grid file declares for ``cell``: its own ``seeds``, else its source's or
    start's own, else the grid's."""
    source_name = cell.start.source if cell.start is not None else cell.source
    source = next((c for c in spec.cells if c.name == source_name), None)
    if cell.seeds is not None:
        return cell.seeds
    return source.seeds if source is not None and source.seeds is not None else spec.seeds


def declared_seeds(spec: GridSpec) -> dict[str, int]:
    """Cell -> how many seeds the grid file declares for it (:func:`cell_seeds`)."""
    return {cell.name: len(cell_seeds(spec, cell)) for cell in spec.cells}


def plan(spec: GridSpec) -> list[GridRun]:
    """Every run of the grid, in file order (cells, then seeds); each run's config is validated."""
    root = Path(spec.output_root) if spec.output_root else Path("runs") / "grids" / spec.name
    runs: dict[tuple[str, int], GridRun] = {}
    identities: dict[str, GridRun] = {}
    for cell in spec.cells:
        seeds = cell_seeds(spec, cell)
        start_file = None  # how the cell's start is handed over: decided on its first seed
        for seed in seeds:
            overrides = {**cell.overrides, "seed": seed, "output_dir": str(root / cell.name / f"seed{seed}")}
            source_run, others = None, []
            if cell.start is not None:
                missing = [c for c in cell.start.cells() if (c, seed) not in runs]
                if missing:
                    raise ConfigError(f"cell {cell.name!r} seed {seed}: {', '.join(missing)} (read by its start) has no "
                                      "run with that seed; give the cell its start's seeds")
                source_run = runs[(cell.start.source, seed)]
                others = [runs[(c, seed)] for c in cell.start.cells()[1:]]
            if cell.evaluate in ABLATIONS:
                ablation = cell_ablation(cell)
                missing = [c for c in [cell.source, *ablation.other_cells()] if (c, seed) not in runs]
                if missing:
                    raise ConfigError(f"cell {cell.name!r} seed {seed}: {', '.join(missing)} (a source of the "
                                      "ablation) has no run with that seed; give the ablation cell its sources' "
                                      "seeds and declare it after them")
                source_run, others = runs[(cell.source, seed)], [runs[(c, seed)] for c in ablation.other_cells()]
                # the source's config (and folder, unless the kind writes its own), the cell's eval.* on top
                own_dir = overrides["output_dir"]
                overrides = {**source_run.overrides, **cell.overrides}
                if ablation.own_folder:
                    overrides["output_dir"] = own_dir
            run = GridRun(cell, seed, f"{cell.name}_seed{seed}", overrides, cell.evaluate or "train", source_run,
                          others)
            if cell.evaluate is None:  # the budget and evaluation points, from the cell's own episodes_per_update
                overrides.update(budget_overrides(spec, run_config(spec, run), cell))
            if cell.start is not None:  # where the run starts: its source's folder, or a file the grid writes
                if start_file is None:
                    start_file = start_fits(spec, run, run_config(spec, run))
                overrides["init_adapters"] = (str(Path(overrides["output_dir"]) / START_DIR / "adapters.pt")
                                              if start_file else source_run.overrides["output_dir"])
            cfg = run_config(spec, run)  # fail before any training when a cell's overrides are invalid
            if cell.evaluate in ABLATIONS and seed == seeds[0]:  # e.g. a seat that is no agent of the env
                ablation = cell_ablation(cell)
                ablation.check_team(env_agents(cfg), cfg.shared_adapter, f"cell {cell.name!r}: ablation")
                uncovered = sorted(set(cfg.scripted_seats) - set(getattr(ablation.options, "adapters", {})))
                if ablation.plays_every_seat and uncovered:
                    raise ConfigError(f"cell {cell.name!r}: its source {cell.source!r} plays {uncovered} with a script, "
                                      "which this team plays with a model: name the cell that trained that seat in "
                                      f"ablation.adapters (e.g. {{{uncovered[0]}: <cell>}})")
            same = identities.setdefault(run_identity(run, cfg), run)
            if same is not run:
                raise ConfigError(f"cells {same.cell.name!r} and {cell.name!r} would make the same run for seed {seed} "
                                  "(identical resolved configs, apart from output_dir); one run would be counted "
                                  "twice: remove one or make them differ")
            runs[(cell.name, seed)] = run
    return list(runs.values())


def run_identity(run: GridRun, cfg: TrainConfig) -> str:
    """What decides a run's outcome: its resolved config without ``output_dir``, for an
    evaluation-only run what it evaluates (its kind, source, ablation options), and for a run with
    a ``start`` the runs it starts from (cells and seeds). Two runs with the same identity are the
    same run under two names."""
    from marft_agents.config import config_to_dict

    config = config_to_dict(cfg)
    config.pop("output_dir", None)
    # the budget is in the config; a start is named by the runs it reads, not by a path
    cell = {k: v for k, v in asdict(run.cell).items() if k not in ("name", "note", "seeds", "overrides", "budget")
            and not (k == "start" and v is None)}
    if run.cell.start is not None:
        config.pop("init_adapters", None)
        cell["start"] = {"source": [run.source.cell.name, run.source.seed],
                         "adapters": {agent: [name, run.seed] for agent, name in run.cell.start.adapters.items()}}
    return json.dumps({"kind": run.kind, "cell": cell, "config": config}, sort_keys=True, default=str)


def run_config(spec: GridSpec, run: GridRun) -> TrainConfig:
    try:
        return load_config(spec.base, run.overrides)
    except ConfigError as err:
        raise ConfigError(f"cell {run.cell.name!r} (seed {run.seed}): {err}") from None


# -- starts ----------------------------------------------------------------------------------------
START_DIR = "start"
"""In a run's folder: the combined start the grid writes (``adapters.pt``) and where each part of it
came from (``start.json``)."""


def start_layout(cfg: TrainConfig) -> dict[str, Any]:
    """What decides whether one run's adapters load into another's policy: the team, one adapter or
    one per agent, the model and LoRA shapes, and the critic (None: the learner values nothing)."""
    import marft_envs

    critic = None
    if cfg.plan().builds_critic and cfg.critic is not None:  # the run plan's critic (marft_agents/run_plan.py)
        lora = cfg.critic.lora or cfg.lora
        critic = {"mode": cfg.critic.mode, "per_agent_head": cfg.critic.per_agent_head,
                  "lora": [lora.r, lora.target_modules]}
    return {"agents": list(marft_envs.make(cfg.env.id, **cfg.env.kwargs).possible_agents),
            "shared_adapter": cfg.shared_adapter, "model": cfg.model.name_or_path,
            "lora": [cfg.lora.r, cfg.lora.target_modules], "critic": critic}


def start_fits(spec: GridSpec, run: GridRun, cfg: TrainConfig) -> bool:
    """Refuse (one line) a start whose runs' adapters cannot make this run's; whether the grid must
    write a combined file (True) or can hand over the source's run folder as it is (a plain start
    from a run of the same layout, critic included)."""
    where = f"cell {run.cell.name!r}: start"
    mine = start_layout(cfg)
    donors = {r.cell.name: start_layout(run_config(spec, r)) for r in [run.source, *run.others]}
    for name, theirs in donors.items():
        for key, what in (("agents", "team (agents)"), ("model", "model"), ("lora", "LoRA rank and targets")):
            if theirs[key] != mine[key]:
                raise ConfigError(f"{where}: cell {name!r} has another {what} ({theirs[key]}) than this run "
                                  f"({mine[key]}); its adapters do not fit")
        if theirs["shared_adapter"] != mine["shared_adapter"] or (run.cell.start.adapters and mine["shared_adapter"]):
            raise ConfigError(f"{where}: cell {name!r} (shared_adapter: {theirs['shared_adapter']}) and this run "
                              f"(shared_adapter: {mine['shared_adapter']}) must both train one adapter per agent to take "
                              "agents' adapters from several cells, or the same layout for a plain start")
        if mine["critic"] is not None and theirs["critic"] is not None and theirs["critic"] != mine["critic"]:
            raise ConfigError(f"{where}: cell {name!r}'s critic {theirs['critic']} does not fit this run's "
                              f"{mine['critic']}; give them one critic layout (or a critic-free source: the run then "
                              "starts with a fresh critic)")
    unknown = sorted(set(run.cell.start.adapters) - set(mine["agents"]))
    if unknown:
        raise ConfigError(f"{where}.adapters: {unknown} not agents of the env; its agents: {', '.join(mine['agents'])}")
    return bool(run.cell.start.adapters) or donors[run.source.cell.name]["critic"] != mine["critic"]


def start_state(policy: Any, fresh: dict[str, Any], states: dict[str, dict[str, Any]], start: StartSpec
                ) -> tuple[dict[str, Any], dict[str, str]]:
    """A run's starting ``adapter_state_dict`` and where each adapter of it came from.

    1. Agent ``a``'s policy adapter: from the final adapters of cell ``start.adapters[a]``, else of
       ``start.source`` (:func:`baselines.ablations.combine_adapters`; one shared adapter: the
       source's).
    2. The critic (its adapter and value head): a team critic (``centralised``, ``local``) from the
       source; agent ``a``'s critic of a ``per_agent`` one from the cell that gave ``a``'s adapter.
       Where that run valued nothing (a critic-free learner such as GRPO, or the ``group``
       baseline), the run's own fresh critic (``fresh``: a policy built from its config under its
       seed, LoRA ``B`` zero as in every fresh adapter); a run without a critic drops the source's.

    ``states``: cell -> its final adapters; ``fresh``: the run's policy at initialisation.
    """
    from baselines.ablations import combine_adapters

    donor = {agent: start.adapters.get(agent, start.source) for agent in policy.agent_ids}
    if policy.shared_adapter:
        prefix = f"lora/{policy.adapter_for(policy.agent_ids[0])}/"
        state = {**fresh, **{k: v for k, v in states[start.source].items() if k.startswith(prefix)}}
    else:
        state = combine_adapters(fresh, policy, {a: (states[donor[a]], a) for a in policy.agent_ids})
    origin = {policy.adapter_for(a): (start.source if policy.shared_adapter else donor[a]) for a in policy.agent_ids}
    for name in policy.critic_adapters:
        cell = donor[name[len("critic_"):]] if name.startswith("critic_") and name[len("critic_"):] in donor \
            else start.source
        prefixes = (f"lora/{name}/", f"value_head/{name}/")
        part = {k: v for k, v in states[cell].items() if k.startswith(prefixes)}
        mine = {k for k in fresh if k.startswith(prefixes)}
        if not part:
            origin[name] = "fresh"
            continue
        if set(part) != mine or any(part[k].shape != fresh[k].shape for k in mine):
            raise ConfigError(f"start: critic {name!r} of cell {cell!r} does not fit the run's (keys or shapes differ)")
        state.update(part)
        origin[name] = cell
    return state, origin


def prepare_start(spec: GridSpec, run: GridRun) -> dict[str, Any]:
    """Hand a run its start: check that every run it reads has a final checkpoint, write the combined
    ``<output_dir>/start/adapters.pt`` where its ``init_adapters`` names it (:func:`start_state`),
    and return what its record notes: the cells and seeds, their checkpoints and, for a combined
    start, which adapter came from which cell."""
    import torch

    from marft_agents.run.checkpoint import latest_checkpoint, load_adapters

    checkpoints = {}
    for source in [run.source, *run.others]:
        checkpoint = latest_checkpoint(source.overrides["output_dir"])
        if checkpoint is None:
            raise FileNotFoundError(f"{run.name}: the run it starts from, {source.name}, has no checkpoint in "
                                    f"{source.overrides['output_dir']}; run the grid (it re-makes a done run's "
                                    "lost adapters before the runs that read them)")
        checkpoints[source.cell.name] = checkpoint
    meta: dict[str, Any] = {"source": run.source.cell.name, "seed": run.seed,
                            "checkpoints": {c: str(p) for c, p in checkpoints.items()}}
    if run.cell.start.adapters:
        meta["adapters"] = dict(run.cell.start.adapters)
    target = Path(run.overrides["init_adapters"])
    if target.name != "adapters.pt":  # a plain start: the trainer reads the source's latest checkpoint
        return meta
    from marft_agents.run.trainer import load_policy

    cfg = dataclasses.replace(run_config(spec, run), init_adapters=None)
    cfg.resolve_hardware()
    with load_policy(cfg, start_layout(cfg)["agents"], seed=cfg.seed) as policy:
        fresh = policy.adapter_state_dict()
        states = {cell: load_adapters(path) for cell, path in checkpoints.items()}
        state, origin = start_state(policy, fresh, states, run.cell.start)
        policy.load_adapter_state_dict(state)  # as the trainer will: strict, so a misfit fails here
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(f".{os.getpid()}.tmp")
    torch.save(state, tmp)
    os.replace(tmp, target)
    meta["from"] = origin
    (target.parent / "start.json").write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return meta


def lost_sources(spec: GridSpec, run: GridRun) -> list[GridRun]:
    """The training runs ``run`` reads (its source, its other sources) whose record is current but
    whose final adapters are gone from their run folder: a grid continued on another machine, or
    after ``runs/`` was cleaned. :func:`baselines.grid.run_grid` re-makes them
    (:func:`baselines.grid.remake`) before ``run``."""
    from marft_agents.run.checkpoint import latest_checkpoint

    if run.source is None:
        return []
    return [r for r in [run.source, *run.others]
            if r.kind == "train" and status(spec, r) == "done" and latest_checkpoint(r.overrides["output_dir"]) is None]


def status(spec: GridSpec, run: GridRun) -> str:
    """``done`` (record written under this grid's protocol), ``stale`` (a record made under an
    older one: another budget axis or task revision; running replaces it), ``partial``
    (checkpoint, no record), ``conflict`` (the run folder holds a checkpoint of a run with another
    budget: resuming it would mix the two), ``blocked`` (an ablation run, or a training run with a
    ``start``, whose source or another run it reads has no current record yet) or ``todo``."""
    from marft_agents.run.checkpoint import latest_checkpoint

    path = records_dir(spec) / f"{run.name}.json"
    if path.is_file() and record_is_current(spec, json.loads(path.read_text(encoding="utf-8")), run.cell):
        return "done"
    if run.source is not None and not all(status(spec, r) == "done" for r in [run.source, *run.others]):
        return "blocked"
    checkpoint = latest_checkpoint(run.overrides["output_dir"]) if run.kind == "train" else None
    if checkpoint is not None:
        return "conflict" if budget_changes(run, checkpoint) else "partial"
    return "stale" if path.is_file() else "todo"


def record_is_current(spec: GridSpec, record: dict[str, Any], cell: CellSpec | None = None) -> bool:
    """Whether a record (of ``cell``; None: the grid's budget) was made under this grid's protocol:
    nothing a report must flag (:func:`leaderboards.records.record_caveats`) and, for a trained
    run or an ablation of one, the budget its cell trains on (:func:`budget_meta`)."""
    if record_caveats(record):
        return False
    return (record.get("grid") or {}).get("kind") == "untrained" or grid_budget(record) == budget_meta(spec, cell)


def budget_changes(run: GridRun, checkpoint: Path) -> list[str]:
    """``key: saved -> now`` for each key the grid sets (:data:`GRID_SET_KEYS`) that differs between
    the config a checkpoint was saved with and this run's."""
    from marft_agents.run.checkpoint import load_checkpoint_config

    saved = load_checkpoint_config(checkpoint) or {}
    changes = []
    for key in GRID_SET_KEYS:
        section, name = key.split(".")
        before = (saved.get(section) or {}).get(name)
        if key in run.overrides and before != run.overrides[key]:
            changes.append(f"{key}: {before!r} -> {run.overrides[key]!r}")
    return changes
