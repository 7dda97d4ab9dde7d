"""The plan of a grid: can it answer its questions, and what will it cost? Made before it runs.

    python -m baselines.grid GRID --plan [--gate-episodes N] [--gate-from-records]

and implicitly before ``python -m baselines.grid GRID`` starts any run, which it refuses (exit
status 3, one line per reason) unless ``--force``. A plan:

1. **Start gates.** For every training cell, a pilot of its *starting* policy: ``gate.episodes``
   (default 128) problems of its training split, each played once, sampled with the cell's
   sampling settings and scripted seats, scored by the team reward
   (:func:`marft_agents.evaluation.problem_set.evaluate`, ``greedy: false``). Under a 0/1 team reward the
   policy gradient of an update is exactly zero unless one of its episodes was rewarded, so a
   cell passes when ``1 - (1 - rate) ** episodes_per_update >= gate.min_signal`` holds over the
   whole exact 90 % interval of the pilot's rate, fails when it holds nowhere in it, and is
   *inconclusive* otherwise (refused, naming a pilot size that can decide: 128 episodes cannot
   tell a rate of 0.4 % from 2 %; with ``gate.max_episodes`` declared, the grid pilots that size,
   or the maximum, at once and judges the larger pilot). Cells whose
   starting policies sample alike (same env and task kwargs, model, sampling, scripted seats and
   initial adapters: fresh LoRA adapters add nothing at initialisation, so the learner and
   ``shared_adapter`` do not matter) share one pilot. Each cell's gate is kept in
   ``<grid folder>/gates/<cell>.json`` and reused while its start and marft's code digest
   (:func:`leaderboards.records.code_digest`) are the same and it covers the episodes asked for;
   delete it to measure anew. ``--gate-from-records`` takes the gate from the grid's own records
   instead where they cover enough episodes: the rollout of a run's first update is sampled from
   its starting policy, so the first updates' rewarded episodes of every record with the same
   start, pooled, are a pilot of that start. A cell with a ``start`` (other cells' final
   adapters, :mod:`baselines.grid`) is gated in a later phase: until one seed's runs it starts
   from have current records its gate is ``waiting``, "gated after" those cells, which does not
   refuse the grid; the grid measures it when the cell's first run is about to train (the start
   of that seed: each seed starts elsewhere), and skips the cell's runs if it fails, unless
   ``--force``. Its digest includes the checkpoints it starts from, and records never stand in
   for its pilot.
2. **Contrasts.** For every declared comparison, as the report will test it (paired,
   one-sample against a seed-free value, or independent seeds): the minimal detectable effect of
   the t test at the declared seeds, at the Bonferroni level ``alpha / m`` of the grid's Holm
   family of ``m`` comparisons and the grid's ``power``
   (:func:`leaderboards.stats.minimal_detectable_effect`); the smallest observed difference that
   can pass at all; the least p of the exact test at those seeds, before and after Holm's
   correction (:func:`leaderboards.stats.exact_p_floor`, :func:`leaderboards.stats.holm_floors`);
   and, where a margin is declared, the narrowest margin within which a null could be shown
   equivalent, and the training effect the two cells' records measure (final accuracy minus
   accuracy before training); with ``margin_fraction`` declared, a margin wider than that
   fraction of the effect is refused (:func:`margin_rule`: an equivalence margin as wide as what
   training does cannot tell an arm that learns from one that does not). The seed spread is the one the grid's records show (two or more seeds that
   vary), else, for a grid that declares ``spread_from`` (a follow-up), the spread the earlier
   grid's records show for the cell of the same name when its runs are the same runs apart from
   the seed and evaluation points (:func:`load_prior`), else the largest a score in [0, 1] can
   have at the mean the cell would reach with the meaningful effect
   (:func:`leaderboards.stats.bounded_sd`). A refused contrast names the seeds at which it would
   answer at that spread (:func:`leaderboards.stats.planned_seeds`), and a paired one whose pairs
   vary more than its two cells do apart says that pairing does not help, with the independent
   design's seeds. Each entry names both cells'
   budgets, and the declared reason where they differ (``unequal_budgets``). A comparison
   declared ``descriptive`` (:class:`leaderboards.grid_report.Comparison`) is not in the family:
   it is sized as if it joined it (``alpha / (m + 1)``; paired on the seeds both cells declare),
   its reasons are shown, and it refuses nothing.
3. **Machine time**: the recorded time of the runs done, and for the others the mean time of
   their cell's records, else of the matched cell's records in the ``spread_from`` grid, else the grid's training (evaluation) records' time per episode (per
   run) times the run's own budget, else a lower bound from the gate pilot's sampling time,
   else unknown.

The plan refuses when a gate fails (or cannot be measured), when a comparison's minimal
detectable effect exceeds the grid's ``meaningful_effect`` (or the whole scale, when none is
declared), when its exact test could never pass after the correction, when a declared margin is
narrower than a null could be shown within or wider than ``margin_fraction`` of the training
effect (each for a tested comparison, not a descriptive
one), or when the grid declares comparisons but no ``meaningful_effect``. It is written to ``<grid folder>/plan.json``, which the report and
``summary.json`` show (:func:`leaderboards.grid_report.plan_lines`).
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import math
import os
import statistics
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from baselines.grid_spec import (GridRun, GridSpec, cell_budget, load_grid, lost_sources, plan, prepare_start,
                                 records_dir, run_config, run_identity, spec_cell, status, trained_budget)
from leaderboards import stats
from leaderboards.grid_report import ALPHA, Comparison, in_family
from leaderboards.records import code_digest, git_commit

PLAN_FILE = "plan.json"
"""The last plan of a grid, in its folder beside the records: the report shows it."""
GATES = "gates"
"""Folder of the gate records, in the grid's folder beside ``records``."""
GATE_LEVEL = 0.90
"""Level of the exact interval of a gate pilot's rate: a cell passes when the interval's lower
end clears ``gate.min_signal``, fails when its upper end does not, and is inconclusive (refused,
with the pilot size that would decide) in between."""
GATE_SEED = 0
"""Seed of every gate pilot (the problems drawn and the samples): cells are piloted alike."""


def grid_folder(spec: GridSpec) -> Path:
    return records_dir(spec).parent


def load_plan(spec: GridSpec) -> dict[str, Any] | None:
    path = grid_folder(spec) / PLAN_FILE
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def _write_json(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, path)


# -- start gates ------------------------------------------------------------------------------------
def start_of(config: dict[str, Any]) -> dict[str, Any]:
    """What decides how a run's starting policy samples its training episodes, from its config
    (``config_to_dict`` form): fresh LoRA adapters are zero updates, so learner, ``shared_adapter``
    and LoRA settings do not enter; initial adapters do."""
    model = {k: v for k, v in (config.get("model") or {}).items() if k not in ("device", "threads", "cache_dir")}
    return {"env": {"id": config["env"]["id"], "kwargs": config["env"].get("kwargs") or {}}, "model": model,
            "sampling": config.get("sampling") or {}, "scripted_seats": config.get("scripted_seats") or {},
            "init_adapters": config.get("init_adapters")}


def start_digest(config: dict[str, Any], checkpoints: dict[str, Any] | None = None) -> str:
    """The digest of a start (:func:`start_of`), with the checkpoints a ``start`` cell's run reads
    (:func:`_start_checkpoints`) when it has one: a source run again is another start."""
    start = start_of(config)
    if checkpoints:
        start["checkpoints"] = checkpoints
    return hashlib.sha256(json.dumps(start, sort_keys=True, default=str).encode()).hexdigest()[:12]


def _start_checkpoints(run: GridRun) -> dict[str, Any] | None:
    """For a run with a ``start``: each run it reads -> its latest checkpoint and that file's size and
    modification time (None for a run without one)."""
    if run.cell.start is None:
        return None
    from marft_agents.run.checkpoint import latest_checkpoint

    out = {}
    for source in [run.source, *run.others]:
        checkpoint = latest_checkpoint(source.overrides["output_dir"])
        stat = (checkpoint / "adapters.pt").stat() if checkpoint is not None else None
        out[source.name] = [str(checkpoint), stat.st_size, stat.st_mtime_ns] if stat else None
    return out


def _config(spec: GridSpec, run: GridRun) -> dict[str, Any]:
    from marft_agents.config import config_to_dict

    return config_to_dict(run_config(spec, run))


def pilot(spec: GridSpec, run: GridRun, episodes: int) -> dict[str, Any]:
    """Play ``episodes`` training problems with ``run``'s starting policy, sampled: the rewarded
    episodes and the seconds it took."""
    import marft_envs
    from marft_agents.run.checkpoint import load_adapters, start_state
    from marft_agents.evaluation.problem_set import TrainingTasksWarning, evaluate
    from marft_agents.run.trainer import load_policy, scripted_seats

    started = time.perf_counter()
    cfg = run_config(spec, run)
    cfg.resolve_hardware()  # as a run would: the device and dtype "auto" means here
    agent_ids = list(marft_envs.make(cfg.env.id, **cfg.env.kwargs).possible_agents)
    with load_policy(cfg, agent_ids) as policy, warnings.catch_warnings():
        if cfg.init_adapters is not None:
            policy.load_adapter_state_dict(start_state(load_adapters(cfg.init_adapters), policy))
        warnings.simplefilter("ignore", TrainingTasksWarning)  # the pilot plays the training tasks on purpose
        result = evaluate(policy, cfg.env.id, cfg.env.kwargs, n_problems=episodes, greedy=False, seed=GATE_SEED,
                          sampling=cfg.sampling, num_envs=cfg.env.num_envs, scripted=scripted_seats(cfg, agent_ids))
    rewarded = sum(bool(t["solved"]) for t in result.per_task)
    return {"source": "pilot", "episodes": result.n, "rewarded": rewarded, "mean_reward": round(result.mean_reward, 6),
            "seconds": round(time.perf_counter() - started, 1)}


def records_pilot(spec: GridSpec, runs: list[GridRun], digest: str) -> dict[str, Any] | None:
    """The first updates' rollouts of the grid's records whose start is ``digest``, pooled (None
    when no record has them): each was sampled from that starting policy."""
    rewarded = episodes = 0
    names = []
    for run in runs:
        path = records_dir(spec) / f"{run.name}.json"
        if run.kind != "train" or not path.is_file():
            continue
        record = json.loads(path.read_text(encoding="utf-8"))
        diagnostics = record.get("diagnostics") or {}
        if not record.get("config") or start_digest(record["config"]) != digest \
                or (diagnostics.get("update") or [None])[0] != 1:
            continue
        n = int(diagnostics["rollout/episodes"][0])
        rewarded += round(diagnostics["rollout/solved_rate"][0] * n)
        episodes += n
        names.append(run.name)
    if not episodes:
        return None
    return {"source": "records", "episodes": episodes, "rewarded": rewarded, "records": names}


MAX_GATE_EPISODES = 65536
"""The largest pilot :func:`deciding_pilot` proposes."""


def deciding_pilot(rate: float, per_update: int, min_signal: float, episodes: int) -> int | None:
    """The smallest pilot (``episodes`` doubled until :data:`MAX_GATE_EPISODES`) whose exact
    interval, were the pilot to find ``rate`` again, would lie wholly on one side of the gate's
    threshold; None when none up to that size would."""
    size = 2 * episodes
    while size <= MAX_GATE_EPISODES:
        if gate_verdict(rate * size, size, per_update, min_signal)[2] != "inconclusive":
            return size
        size *= 2
    return None


def gates(spec: GridSpec, runs: list[GridRun], cells: list[str], episodes: int, from_records: bool = False,
          log=print) -> list[dict[str, Any]]:
    """The start gate of each training cell of ``cells`` (its first seed's start), measured or
    reused (module docstring); each is written to ``<grid folder>/gates/<cell>.json``."""
    code, measured = code_digest(), {}
    out = []
    for cell in cells:
        mine = [r for r in runs if r.cell.name == cell and r.kind == "train"]
        run = mine[0]
        if run.cell.start is not None:  # a start from other cells' runs: gated once one seed's are done
            done = [r for r in mine if all(status(spec, s) == "done" for s in [r.source, *r.others])]
            ready = [r for r in done if not lost_sources(spec, r)]
            if not ready:
                after = run.cell.start.cells()
                why = ("their records exist but their final adapters are gone from runs/: the grid re-makes them"
                       if done else "its start is their final adapters")
                out.append({"cell": cell, "source": "waiting", "after": after,
                            "episodes_per_update": _config(spec, run)["schedule"]["episodes_per_update"],
                            "rate": None, "passed": False,
                            "note": f"waiting: gated after {', '.join(after)} ({why}; "
                                    "measured when its first run is about to train)"})
                continue
            run = ready[0]
        config = _config(spec, run)
        digest = start_digest(config, _start_checkpoints(run))
        per_update = config["schedule"]["episodes_per_update"]
        path = grid_folder(spec) / GATES / f"{cell}.json"
        gate = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None
        if gate is not None and not (gate.get("start") == digest and gate.get("code") == code
                                     and gate.get("episodes", 0) >= episodes):
            gate = None
        init = config.get("init_adapters")
        if gate is None and init is not None and not Path(init).exists() and run.cell.start is None:
            out.append({"cell": cell, "source": "waiting", "episodes_per_update": per_update, "rate": None,
                        "passed": False, "note": f"its start {init} does not exist yet"})
            continue
        size = episodes
        while True:
            if gate is None:
                found = measured.get(digest)
                if found is not None and found["episodes"] < size:
                    found = None
                if found is None and from_records and run.cell.start is None:
                    pooled = records_pilot(spec, runs, digest)
                    found = pooled if pooled is not None and pooled["episodes"] >= size else None
                if found is None:
                    if run.cell.start is not None:
                        log(f"gate {cell}: its start is {run.name}'s (seed {run.seed})")
                        prepare_start(spec, run)  # a combined start's file, which the pilot loads
                    log(f"gate {cell}: piloting its starting policy on {size} sampled episodes")
                    found = pilot(spec, run, size)
                measured[digest] = found
                gate = {**found, "cell": cell, "start": digest, "code": code, "commit": git_commit(),
                        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}
                _write_json(path, gate)
            rate = gate["rewarded"] / gate["episodes"]
            low, high, verdict = gate_verdict(gate["rewarded"], gate["episodes"], per_update, spec.gate.min_signal)
            size = larger_pilot(spec, gate, verdict, per_update)
            if size is None:
                break
            log(f"gate {cell}: inconclusive at {gate['episodes']} episodes ({gate['rewarded']} rewarded); "
                f"a larger pilot decides (gate.max_episodes {spec.gate.max_episodes})")
            gate = None
        out.append({"cell": cell, "source": gate["source"], "episodes": gate["episodes"], "rewarded": gate["rewarded"],
                    "rate": round(rate, 6), "episodes_per_update": per_update,
                    "signal": round(1.0 - (1.0 - rate) ** per_update, 4),
                    "signal_interval": [round(low, 4), round(high, 4)], "verdict": verdict,
                    "passed": verdict == "pass", "seconds": gate.get("seconds"), "start": digest,
                    "file": str(path)})
    return out


def gate_verdict(rewarded: float, episodes: int, per_update: int, min_signal: float) -> tuple[float, float, str]:
    """The exact :data:`GATE_LEVEL` interval of P(an update of ``per_update`` episodes holds a
    rewarded one) from a pilot's count, and the verdict: ``pass`` (all of it >= ``min_signal``),
    ``FAIL`` (none of it) or ``inconclusive``."""
    low, high = (1.0 - (1.0 - r) ** per_update for r in stats.binomial_interval(round(rewarded), episodes, GATE_LEVEL))
    return low, high, "pass" if low >= min_signal else "FAIL" if high < min_signal else "inconclusive"


def larger_pilot(spec: GridSpec, gate: dict[str, Any], verdict: str, per_update: int) -> int | None:
    """The size of the next pilot of an inconclusive gate under ``gate.max_episodes`` (the size that
    would decide at its rate, else the maximum), or None: decided, measured from records, no
    maximum declared, or the maximum reached."""
    most = spec.gate.max_episodes
    if verdict != "inconclusive" or gate.get("source") != "pilot" or most is None or gate["episodes"] >= most:
        return None
    size = deciding_pilot(gate["rewarded"] / gate["episodes"], per_update, spec.gate.min_signal, gate["episodes"])
    return most if size is None else min(size, most)


# -- an earlier grid's records ----------------------------------------------------------------------
@dataclass
class Prior:
    """The grid a follow-up is planned from (``spread_from``): its cells that are the follow-up's
    cells under the same name, and those of the same name that are not."""

    name: str
    spec: GridSpec
    runs: list[GridRun]
    cells: list[str] = field(default_factory=list)
    """Cells whose runs are the same runs apart from the seed and the evaluation points."""
    differ: dict[str, list[str]] = field(default_factory=dict)
    """Cell -> the config keys (or ``cell``: its kind, start or ablation) that differ."""


_SEED_FREE = ("seed", "init_adapters", "eval.interval", "eval.at_end")
"""What two runs of one cell may differ in and still be the same experiment at another seed: the
seed, where its start is read from, and when it is evaluated (not what)."""


def _flat(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict) and value:
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def seed_free_identity(spec: GridSpec, run: GridRun) -> dict[str, Any]:
    """A run's identity (:func:`baselines.grid_spec.run_identity`) without what :data:`_SEED_FREE` names
    and without the seeds of the runs a start reads: flat, key -> value."""
    identity = json.loads(run_identity(run, run_config(spec, run)))
    start = identity["cell"].get("start")
    if start:  # the runs a start reads, by cell
        start["source"] = start["source"][0]
        start["adapters"] = {agent: name for agent, (name, _) in start["adapters"].items()}
    flat = {f"config.{k}": v for k, v in _flat(identity["config"]).items() if k not in _SEED_FREE}
    flat.update({f"cell.{k}": v for k, v in _flat(identity["cell"]).items()})
    flat["kind"] = identity["kind"]
    return flat


def load_prior(spec: GridSpec, runs: list[GridRun]) -> Prior | None:
    """The grid named by ``spec.spread_from`` with its cells matched to ``spec``'s (None without one)."""
    if spec.spread_from is None:
        return None
    other = load_grid(spec.spread_from)
    prior = Prior(other.name, other, plan(other))
    for cell in spec.cells:
        mine = next((r for r in runs if r.cell.name == cell.name), None)
        theirs = next((r for r in prior.runs if r.cell.name == cell.name), None)
        if mine is None or theirs is None:
            continue
        a, b = seed_free_identity(spec, mine), seed_free_identity(other, theirs)
        keys = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
        if keys:
            prior.differ[cell.name] = keys
        else:
            prior.cells.append(cell.name)
    return prior


def _prior_records(prior: Prior | None, cell: str) -> dict[int, tuple[float, int]]:
    """The prior grid's records of a matched cell (seed -> accuracy, problems); none otherwise."""
    if prior is None or cell not in prior.cells:
        return {}
    return _cell_records(prior.spec, prior.runs, cell)


# -- contrasts ------------------------------------------------------------------------------------
def _records_of(spec: GridSpec, runs: list[GridRun], cell: str) -> list[tuple[GridRun, dict[str, Any]]]:
    """The cell's runs that have a record in the grid's folder, each with its record."""
    found = []
    for run in runs:
        path = records_dir(spec) / f"{run.name}.json"
        if run.cell.name == cell and path.is_file():
            found.append((run, json.loads(path.read_text(encoding="utf-8"))))
    return found


def _cell_records(spec: GridSpec, runs: list[GridRun], cell: str) -> dict[int, tuple[float, int]]:
    """Seed -> (final accuracy, problems evaluated) of the cell's records in the grid's folder (any
    protocol: a spread over seeds, for planning)."""
    out = {}
    for run, record in _records_of(spec, runs, cell):
        after = record["eval_after"]
        out[run.seed] = (after["accuracy"], int(after.get("n", 0)))
    return out


def _training_effects(spec: GridSpec, runs: list[GridRun], cell: str) -> list[float]:
    """What training did in each of the cell's records: final accuracy minus accuracy before
    training (records without an evaluation before training left out)."""
    out = []
    for _, record in _records_of(spec, runs, cell):
        before = record.get("eval_before") or {}
        if "accuracy" in before:
            out.append(record["eval_after"]["accuracy"] - before["accuracy"])
    return out


def margin_rule(spec: GridSpec, runs: list[GridRun], comparison: Comparison) -> dict[str, Any] | None:
    """The training effect the comparison's cells measure and the widest margin it allows
    (:attr:`GridSpec.margin_fraction`); None without a declared margin. A reason to refuse where
    the declared margin is wider; a note where no record measures the effect yet."""
    if comparison.margin is None:
        return None
    effects = [e for c in (comparison.a, comparison.b) for e in _training_effects(spec, runs, c)]
    rule: dict[str, Any] = {"training_effect": round(statistics.mean(effects), 4) if effects else None,
                            "runs": len(effects), "fraction": spec.margin_fraction, "widest": None, "reason": None}
    if spec.margin_fraction is None or not effects:
        return rule
    widest = spec.margin_fraction * max(0.0, statistics.mean(effects))
    rule["widest"] = round(widest, 4)
    if comparison.margin / 100 > widest + 1e-9:
        rule["reason"] = (f"its margin +-{comparison.margin:g} exceeds {spec.margin_fraction:g} x the training effect "
                          f"its cells' records measure ({100 * statistics.mean(effects):+.1f} points over "
                          f"{len(effects)} runs): +-{100 * widest:.1f} at most, or \"equivalent\" cannot tell an arm "
                          "that learns from one that does not")
    return rule


def _floor(found: dict[int, tuple[float, int]]) -> bool:
    """The records sit at the floor (:func:`leaderboards.stats.at_floor`): their spread is that of
    a handful of problems, not the spread the cell would have if it moved."""
    problems = min((n for _, n in found.values()), default=0)
    return problems > 0 and stats.at_floor(statistics.mean(a for a, _ in found.values()), problems)


def _seed_free(spec: GridSpec, runs: list[GridRun], cell: str) -> bool:
    mine = [r for r in runs if r.cell.name == cell]
    return (len(mine) == 1 and mine[0].kind == "untrained" and run_config(spec, mine[0]).eval.greedy)


def _seeds_phrase(design: str, n: int | None) -> str:
    unit = {"paired": "paired seeds", "independent": "seeds per cell"}.get(design, "seeds")
    return f"more than {SEEDS_SEARCHED} {unit}" if n is None else f"{n} {unit}"


SEEDS_SEARCHED = 1000
"""The most seeds :func:`leaderboards.stats.planned_seeds` searches for a refused contrast."""


def contrast(spec: GridSpec, runs: list[GridRun], comparison: Comparison, family: int,
             levels: dict[str, float], prior: Prior | None = None) -> dict[str, Any]:
    """The plan of one declared comparison (module docstring, 2.)."""
    seeds = {c: [r.seed for r in runs if r.cell.name == c] for c in (comparison.a, comparison.b)}
    if comparison.descriptive and comparison.paired:  # paired on the seeds both cells declare
        common = [seed for seed in seeds[comparison.a] if seed in seeds[comparison.b]]
        seeds = {c: common for c in seeds}
    free = {c: _seed_free(spec, runs, c) for c in (comparison.a, comparison.b)}
    entry: dict[str, Any] = {"question": comparison.question or f"{comparison.a} - {comparison.b}",
                             "a": comparison.a, "b": comparison.b, "sd": None, "basis": "-",
                             "mde": None, "least_passing": None, "reasons": [], "notes": []}
    budgets = [trained_budget(spec, spec_cell(spec, c)) for c in (comparison.a, comparison.b)]
    entry["budgets"] = [None if b is None else {b.axis: b.amount} for b in budgets]
    why = next((u.why for u in spec.unequal_budgets if (u.a, u.b) == (comparison.a, comparison.b)), None)
    if why is not None:
        entry["unequal_budgets"] = why
    meaningful = spec.meaningful_effect / 100 if spec.meaningful_effect is not None else None
    found = {c: {seed: v for seed, v in _cell_records(spec, runs, c).items() if seed in seeds[c]}
             for c in (comparison.a, comparison.b)}
    floor = {c: _floor(found[c]) for c in found}
    records = {c: {seed: a for seed, (a, _) in found[c].items()} for c in found}
    earlier = {c: _prior_records(prior, c) for c in found}  # the prior grid's, every seed it has
    earlier_values = {c: {seed: a for seed, (a, _) in earlier[c].items()} for c in earlier}

    def varies(values: list[float], at_floor: bool) -> bool:
        return len(values) > 1 and statistics.stdev(values) > 0 and not at_floor

    def spread(cell: str) -> tuple[float, str]:
        values = list(records[cell].values())
        if varies(values, floor[cell]):
            return statistics.stdev(values), "records"
        values = list(earlier_values[cell].values())
        if varies(values, _floor(earlier[cell])):
            return statistics.stdev(values), f"records of {prior.name}, {len(values)} seeds"
        level = levels.get(cell, 0.0)
        bound = stats.bounded_sd(min(0.5, level + meaningful) if meaningful is not None else 0.5)
        return bound, "bound, at the floor" if floor[cell] else "bound"

    if free[comparison.a] and free[comparison.b]:
        entry.update(design="none", seeds="1 / 1", exact_floor=1.0)
        entry["reasons"].append("both cells are seed-free evaluations: nothing to test")
        return entry
    if free[comparison.a] or free[comparison.b]:
        varied = comparison.b if free[comparison.a] else comparison.a
        design, n_a, n_b = "one-sample", len(seeds[varied]), 0
        sd_a, basis = spread(varied)
        sd_b, sds = 0.0, [sd_a]
    elif comparison.paired and seeds[comparison.a] == seeds[comparison.b]:
        design, n_a, n_b = "paired", len(seeds[comparison.a]), 0
        common = sorted(set(records[comparison.a]) & set(records[comparison.b]))
        differences = [records[comparison.a][k] - records[comparison.b][k] for k in common]
        own = {c: list(_cell_records(spec, runs, c).values()) for c in found}  # every seed each cell has
        before = sorted(set(earlier_values[comparison.a]) & set(earlier_values[comparison.b]))
        before_differences = [earlier_values[comparison.a][k] - earlier_values[comparison.b][k] for k in before]
        if varies(differences, any(floor.values())):
            sd_a, basis = statistics.stdev(differences), "records, paired"
        elif varies(before_differences, any(_floor(earlier[c]) for c in earlier)):
            sd_a, basis = statistics.stdev(before_differences), f"records of {prior.name}, paired, {len(before)} seeds"
            own = {c: list(earlier[c].values()) for c in earlier}
        else:  # the pairs' correlation unknown: taken as none
            (sa, ba), (sb, bb) = spread(comparison.a), spread(comparison.b)
            sd_a, basis = math.hypot(sa, sb), ba if ba == bb else f"{ba} / {bb}"
            own = {}
        sd_b, sds = 0.0, [sd_a]
        alone = [statistics.stdev([a for a, _ in own[c]]) for c in own if len(own[c]) > 1]
        if len(alone) == 2 and math.hypot(*alone) < sd_a and meaningful is not None:
            n = stats.planned_seeds("independent", alone[0], meaningful, alone[1], ALPHA / family, spec.power,
                                    most=SEEDS_SEARCHED)
            entry["notes"].append(
                f"pairing does not help: the paired differences' sd, {100 * sd_a:.1f} points, exceeds the two cells' "
                f"own spreads combined, {100 * math.hypot(*alone):.1f} (sqrt(sd_a^2 + sd_b^2), over "
                f"{len(own[comparison.a])} and {len(own[comparison.b])} seeds): the seeds do not pair these cells; "
                f"as independent seeds {_seeds_phrase('independent', n)} would detect {spec.meaningful_effect:g} points")
    else:
        design, n_a, n_b = "independent", len(seeds[comparison.a]), len(seeds[comparison.b])
        (sd_a, ba), (sd_b, bb) = spread(comparison.a), spread(comparison.b)
        basis, sds = ba if ba == bb else f"{ba} / {bb}", [sd_a, sd_b]
    entry.update(design=design, seeds=f"{n_a} / {n_b}" if design == "independent" else str(n_a),
                 sd=[round(x, 4) for x in sds], basis=basis,
                 exact_floor=stats.exact_p_floor(design, n_a, n_b))
    rule = margin_rule(spec, runs, comparison)
    if rule is not None:
        entry["margin_rule"] = rule
        if rule["reason"] is not None:
            entry["reasons"].append(rule["reason"])
        elif spec.margin_fraction is not None and rule["widest"] is None:
            entry["notes"].append(f"margin rule ({spec.margin_fraction:g} x the training effect): no record of "
                                  "either cell measures the effect yet")
    if n_a < 2 or (design == "independent" and n_b < 2):
        entry["reasons"].append("a cell with one seed: no spread over seeds to test against")
        return entry
    detectable = stats.minimal_detectable_effect(design, sd_a, n_a, sd_b, n_b, ALPHA / family, spec.power)
    entry.update(mde=round(detectable.effect, 4), least_passing=round(detectable.least_passing, 4),
                 critical_t=round(detectable.critical, 3), df=round(detectable.df, 2))
    if meaningful is not None and detectable.effect > meaningful:
        n = stats.planned_seeds(design, sd_a, meaningful, sd_b, ALPHA / family, spec.power, most=SEEDS_SEARCHED)
        entry["seeds_for_meaningful"] = n
        entry["reasons"].append(f"its minimal detectable effect, {100 * detectable.effect:.1f} points, exceeds the "
                                f"meaningful effect, {spec.meaningful_effect:g} (at this spread "
                                f"{_seeds_phrase(design, n)} would detect it)")
    elif detectable.effect > 1.0:
        entry["reasons"].append(f"its minimal detectable effect, {100 * detectable.effect:.1f} points, exceeds the "
                                "whole scale")
    if comparison.margin is not None:
        margins = sum(c.margin is not None for c in in_family(spec.comparisons))
        needed = stats.minimal_equivalence_margin(design, sd_a, n_a, sd_b, n_b, ALPHA / margins, spec.power)
        entry["margin_needed"] = round(needed, 4)
        if needed > comparison.margin / 100:
            n = stats.planned_seeds(design, sd_a, comparison.margin / 100, sd_b, ALPHA / margins, spec.power,
                                    equivalence=True, most=SEEDS_SEARCHED)
            entry["seeds_for_margin"] = n
            entry["reasons"].append(f"a null could be shown equivalent only within +-{100 * needed:.1f} points, not "
                                    f"the declared +-{comparison.margin:g} ({_seeds_phrase(design, n)} would)")
    return entry


def contrasts(spec: GridSpec, runs: list[GridRun], levels: dict[str, float],
              prior: Prior | None = None) -> list[dict[str, Any]]:
    """Every declared comparison's plan, the exact tests' floors corrected over the family (the
    tested comparisons); a descriptive one sized as if it joined the family, refusing nothing."""
    family = len(in_family(spec.comparisons))
    entries = [contrast(spec, runs, c, family + c.descriptive, levels, prior) for c in spec.comparisons]
    tested = [e for e, c in zip(entries, spec.comparisons) if not c.descriptive]
    for entry, floor in zip(tested, stats.holm_floors([e["exact_floor"] for e in tested])):
        entry["exact_floor_holm"] = floor
        if floor >= ALPHA and entry["design"] != "none":
            entry["reasons"].append(f"its exact test's least p after Holm over {family} is {floor:.3g} >= {ALPHA:g}: "
                                    "it can never pass")
    for entry, comparison in zip(entries, spec.comparisons):
        entry["descriptive"] = comparison.descriptive
        entry.setdefault("exact_floor_holm", None)
        entry["answers"] = not entry["reasons"]
    return entries


# -- machine time ---------------------------------------------------------------------------------
def _walls(spec: GridSpec, runs: list[GridRun]) -> tuple[dict[str, dict[str, Any]], dict[str, float]]:
    """The grid's records (run -> record) and each recorded run's machine seconds."""
    recorded: dict[str, dict[str, Any]] = {}
    for run in runs:
        path = records_dir(spec) / f"{run.name}.json"
        if path.is_file():
            recorded[run.name] = json.loads(path.read_text(encoding="utf-8"))
    return recorded, {name: r["grid"].get("wall_s", 0.0) for name, r in recorded.items() if r.get("grid")}


def machine_time(spec: GridSpec, runs: list[GridRun], gate_list: list[dict[str, Any]],
                 prior: Prior | None = None) -> dict[str, Any]:
    """Hours recorded for the runs done and estimated for the others (module docstring, 3.)."""
    recorded, wall = _walls(spec, runs)
    by_cell: dict[str, list[float]] = {}
    for run in runs:
        if run.name in wall:
            by_cell.setdefault(run.cell.name, []).append(wall[run.name])
    earlier: dict[str, list[float]] = {}  # a matched cell's times in the prior grid
    if prior is not None:
        _, prior_wall = _walls(prior.spec, prior.runs)
        for run in prior.runs:
            if run.cell.name in prior.cells and run.name in prior_wall:
                earlier.setdefault(run.cell.name, []).append(prior_wall[run.name])
    from_prior = f"records of {prior.name}" if prior is not None else ""
    training = [wall[r.name] / max(1, recorded[r.name]["budget"].get("episodes", 0) or 1)
                for r in runs if r.kind == "train" and r.name in wall and recorded[r.name].get("budget")]
    evaluations = [wall[r.name] for r in runs if r.kind != "train" and r.name in wall]

    def episodes(run: GridRun) -> int | None:  # the run's own budget in episodes (a cell may declare its own)
        budget = cell_budget(spec, run.cell)
        return budget.episodes if budget is not None and budget.axis == "episodes" else None

    pilot_rate = [g["seconds"] / g["episodes"] for g in gate_list if g.get("source") == "pilot" and g.get("seconds")]
    done_s = todo_s = 0.0
    counts = {"done": 0, "cell records": 0, from_prior: 0, "grid records": 0,
              "pilot, sampling only (a lower bound)": 0, "unknown": 0}
    for run in runs:
        if status(spec, run) == "done":
            done_s += wall.get(run.name, 0.0)
            counts["done"] += 1
            continue
        if by_cell.get(run.cell.name):
            todo_s += statistics.mean(by_cell[run.cell.name])
            counts["cell records"] += 1
        elif earlier.get(run.cell.name):
            todo_s += statistics.mean(earlier[run.cell.name])
            counts[from_prior] += 1
        elif run.kind == "train" and training and episodes(run):
            todo_s += statistics.mean(training) * episodes(run)
            counts["grid records"] += 1
        elif run.kind != "train" and evaluations:
            todo_s += statistics.mean(evaluations)
            counts["grid records"] += 1
        elif run.kind == "train" and pilot_rate and episodes(run):
            todo_s += statistics.mean(pilot_rate) * episodes(run)
            counts["pilot, sampling only (a lower bound)"] += 1
        else:
            counts["unknown"] += 1
    # cells with the same start share one pilot (gates()): its time counts once
    pilots = {g.get("start") or g["cell"]: g.get("seconds") or 0.0 for g in gate_list if g.get("source") == "pilot"}
    gate_s = sum(pilots.values())
    todo = len(runs) - counts["done"]
    bases = ", ".join(f"{n} from {basis}" for basis, n in counts.items() if n and basis != "done")
    line = (f"Machine time: {done_s / 3600:.2f} h recorded for the {counts['done']} runs done; "
            f"{todo_s / 3600:.2f} h estimated for the {todo} to run" + (f" ({bases})" if bases else "")
            + f", one process per run; the gate pilots took {gate_s / 60:.1f} min.")
    return {"done_h": round(done_s / 3600, 2), "todo_h": round(todo_s / 3600, 2), "runs_done": counts["done"],
            "runs_todo": todo, "bases": {k: v for k, v in counts.items() if v}, "line": line}


# -- the plan -------------------------------------------------------------------------------------
def make_plan(spec: GridSpec, runs: list[GridRun], gate_cells: list[str] | None = None,
              gate_episodes: int | None = None, from_records: bool = False, log=print) -> dict[str, Any]:
    """The plan of ``spec`` (module docstring); ``runs`` all of its runs (:func:`baselines.grid_spec.plan`).
    ``gate_cells``: the training cells to gate (None: all)."""
    episodes = gate_episodes or spec.gate.episodes
    training = [c.name for c in spec.cells if c.evaluate is None]
    gate_list = gates(spec, runs, training if gate_cells is None else gate_cells, episodes, from_records, log)
    levels: dict[str, float] = {}
    for cell in spec.cells:  # the level a cell sits at: its records' mean, else its gate's rate
        accuracies = [a for a, _ in _cell_records(spec, runs, cell.name).values()]
        if accuracies:
            levels[cell.name] = statistics.mean(accuracies)
    for g in gate_list:
        if g.get("rate") is not None:
            levels.setdefault(g["cell"], g["rate"])
    prior = load_prior(spec, runs)
    for cell in prior.cells if prior is not None else []:  # no records of its own yet: the prior grid's level
        accuracies = [a for a, _ in _prior_records(prior, cell).values()]
        if accuracies:
            levels.setdefault(cell, statistics.mean(accuracies))
    contrast_list = contrasts(spec, runs, levels, prior)
    refusals = []
    for g in gate_list:
        if g.get("after"):  # a start cell: gated after the cells it starts from (a later phase)
            continue
        if g.get("rate") is None:
            refusals.append(f"cell {g['cell']}: its gate cannot be measured: {g['note']}")
        elif not g["passed"]:
            low, high = g["signal_interval"]
            said = (f"cell {g['cell']}: its starting policy earned the reward in {g['rewarded']} of {g['episodes']} "
                    f"sampled episodes ({100 * g['rate']:.2f} %, from {g['source']}): an update of "
                    f"{g['episodes_per_update']} episodes holds a rewarded one with probability {g['signal']:.2f} "
                    f"[{low:.2f}, {high:.2f}]")
            if g["verdict"] == "FAIL":
                refusals.append(f"{said} < {spec.gate.min_signal:g}")
            else:
                size = deciding_pilot(g["rate"], g["episodes_per_update"], spec.gate.min_signal, g["episodes"])
                more = (f"pilot more (--gate-episodes {size} would decide at this rate)" if size is not None else
                        f"the rate sits so near the threshold that no pilot up to {MAX_GATE_EPISODES} episodes "
                        "decides: change the start")
                refusals.append(f"{said}, which straddles {spec.gate.min_signal:g}: inconclusive at this pilot's "
                                f"size; {more}")
    if spec.comparisons and spec.meaningful_effect is None:
        refusals.append("the grid declares no meaningful_effect (accuracy points): no contrast can be judged "
                        "against the effect that would matter")
    for c in contrast_list:
        for reason in [] if c["descriptive"] else c["reasons"]:
            refusals.append(f"contrast {c['a']} - {c['b']}: {reason}")
    return {"made": {"commit": git_commit(), "code": code_digest(),
                     "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")},
            "accepted": not refusals, "refusals": refusals, "alpha": ALPHA,
            "family": len(in_family(spec.comparisons)),
            "power": spec.power, "meaningful_effect": spec.meaningful_effect,
            "gate": {"episodes": episodes, "min_signal": spec.gate.min_signal,
                     "from_records": from_records}, "gates": gate_list, "contrasts": contrast_list,
            "time": machine_time(spec, runs, gate_list, prior),
            "spread_from": None if prior is None else {"grid": prior.name, "file": spec.spread_from,
                                                        "cells": prior.cells, "differ": prior.differ}}


def save_plan(spec: GridSpec, plan: dict[str, Any]) -> Path:
    path = grid_folder(spec) / PLAN_FILE
    _write_json(path, plan)
    return path
