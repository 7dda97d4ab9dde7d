"""Tables and plots of a grid's records (``python -m baselines.grid GRID --report-only``).

``baselines/grid.py`` writes one record per (cell, seed) into ``<grid folder>/records`` and calls
:func:`write_report` after every run, which regenerates ``<grid folder>/README.md`` (a table:
per cell, the mean final accuracy over seeds with its standard error over seeds, and every
seed's accuracy with its own evaluation standard error; then the grid's declared
:class:`Comparison` s, a - b with its s.e.) and ``<grid folder>/curves.png`` (evaluation accuracy
against training minutes, one colour per cell, one line per seed; the PNG carries the plotted
numbers, :func:`plotted_series`). Everything comes from the records and the grid file, so a test
regenerates the committed reports and compares.

The standard error over seeds is ``stdev(accuracies) / sqrt(k)`` (k seeds; none for one seed):
it measures how much the result moves with the seed. Each seed's own +- is its evaluation's
standard error, clustered by problem statement.
"""

from __future__ import annotations

import json
import math
import os
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from leaderboards.records import load_records

README = "README.md"
PLOT = "curves.png"


@dataclass
class CellSummary:
    """A grid cell's records, summarised over seeds."""

    cell: str
    kind: str
    """``train``, ``untrained`` or ``swapped``."""
    algorithm: str
    profile: str
    seeds: list[int] = field(default_factory=list)
    accuracies: list[float] = field(default_factory=list)
    """Final greedy accuracy per seed (same order as ``seeds``)."""
    stderrs: list[float] = field(default_factory=list)
    """Each seed's evaluation standard error."""
    minutes: list[float] = field(default_factory=list)
    """Training minutes per seed (the budget's clock)."""
    updates: list[int] = field(default_factory=list)
    source: str | None = None
    """For a swapped cell, the cell whose adapters it evaluated."""
    commits: list[str] = field(default_factory=list)

    @property
    def mean(self) -> float:
        return statistics.mean(self.accuracies)

    @property
    def se_over_seeds(self) -> float | None:
        """``stdev / sqrt(k)`` of the per-seed accuracies; None with one seed."""
        k = len(self.accuracies)
        return statistics.stdev(self.accuracies) / math.sqrt(k) if k > 1 else None


@dataclass
class Comparison:
    """A question the grid answers: cell ``a`` minus cell ``b``, in accuracy points."""

    a: list[str]
    """The cell (or cells) measured; with several, the one with the highest mean over seeds is
    used (chosen after the fact, e.g. "the best team"; the report names it)."""
    b: str
    """The reference cell (e.g. the best single agent, or the unswapped source of an ablation)."""
    question: str = ""
    """What the difference answers, shown in the report."""


@dataclass
class ComparisonResult:
    """``a - b`` of two cells' final accuracies with its standard error."""

    comparison: Comparison
    a: CellSummary
    b: CellSummary
    difference: float
    """mean(a) - mean(b), as a fraction."""
    stderr: float
    se_basis: str
    """``paired seeds`` (the per-seed differences' stdev / sqrt(k): ``a`` re-evaluates ``b``'s own
    trained runs, a swapped ablation, so each seed's training luck cancels), ``seeds`` (sqrt of
    the two over-seed s.e.s squared: independently trained cells) or ``evaluation`` (a cell with
    one seed: the evaluations' s.e.s, which leave out the variation between seeds)."""


def compare(summaries: list[CellSummary], comparison: Comparison) -> ComparisonResult | None:
    """The difference ``a - b`` with its s.e.; None while either side has no record."""
    by_name = {s.cell: s for s in summaries}
    candidates = [by_name[name] for name in comparison.a if name in by_name]
    b = by_name.get(comparison.b)
    if not candidates or b is None:
        return None
    a = max(candidates, key=lambda s: s.mean)
    if a.source == b.cell and a.seeds == b.seeds and len(a.seeds) > 1:
        differences = [x - y for x, y in zip(a.accuracies, b.accuracies)]
        se, basis = statistics.stdev(differences) / math.sqrt(len(differences)), "paired seeds"
    else:  # independent cells: each side's own s.e., over seeds where it has several
        se, basis = math.hypot(_side_stderr(a), _side_stderr(b)), _basis(a, b)
    return ComparisonResult(comparison, a, b, a.mean - b.mean, se, basis)


def _side_stderr(cell: CellSummary) -> float:
    """The s.e. of a cell's mean: over its seeds (which holds the evaluation noise too) when it
    has several, else that of its one evaluation."""
    if cell.se_over_seeds is not None:
        return cell.se_over_seeds
    return math.sqrt(statistics.mean(e * e for e in cell.stderrs) / len(cell.stderrs))


def _basis(a: CellSummary, b: CellSummary) -> str:
    kinds = ["seeds" if c.se_over_seeds is not None else "evaluation" for c in (a, b)]
    return kinds[0] if kinds[0] == kinds[1] else f"{kinds[0]} / {kinds[1]}"


def comparison_table(summaries: list[CellSummary], comparisons: list[Comparison]) -> list[str]:
    """Markdown rows: per comparison, the cells, their seeds, a - b in points, its s.e. and z."""
    lines = ["| question | a (seeds) | b (seeds) | a - b, points | s.e. | z | s.e. from |", "|---|---|---|---|---|---|---|"]
    for comparison in comparisons:
        result = compare(summaries, comparison)
        if result is None:
            pending = ", ".join(comparison.a)
            lines.append(f"| {comparison.question} | {pending} | {comparison.b} | not run yet | | | |")
            continue
        chosen = result.a.cell + (f" (best of {', '.join(comparison.a)})" if len(comparison.a) > 1 else "")
        z = result.difference / result.stderr if result.stderr > 0 else math.inf
        lines.append(f"| {comparison.question} | {chosen}: {_pct(result.a.mean)} ({len(result.a.seeds)}) "
                     f"| {result.b.cell}: {_pct(result.b.mean)} ({len(result.b.seeds)}) "
                     f"| {100 * result.difference:+.1f} | {_pct(result.stderr)} | {z:+.1f} | {result.se_basis} |")
    return lines


def grid_records(records_dir: Path) -> list[dict[str, Any]]:
    """The records of ``records_dir`` that belong to a grid (``record["grid"]`` set)."""
    return [r for r in load_records(records_dir) if r.get("grid")]


def summarise(records: list[dict[str, Any]], order: list[str] | None = None) -> list[CellSummary]:
    """One :class:`CellSummary` per cell, in ``order`` (cells not in it follow, by name)."""
    cells: dict[str, CellSummary] = {}
    for record in sorted(records, key=lambda r: (r["grid"]["cell"], r["grid"]["seed"])):
        meta = record["grid"]
        summary = cells.get(meta["cell"])
        if summary is None:
            summary = cells[meta["cell"]] = CellSummary(
                meta["cell"], meta["kind"], record["algorithm"], str(record.get("env_kwargs", {}).get("profile", "")),
                source=meta.get("source"))
        summary.seeds.append(meta["seed"])
        summary.accuracies.append(record["eval_after"]["accuracy"])
        summary.stderrs.append(record["eval_after"]["stderr"])
        summary.minutes.append(record.get("budget", {}).get("wall_clock_s", 0.0) / 60)
        summary.updates.append(record.get("budget", {}).get("updates", 0))
        summary.commits.append(record.get("commit", ""))
    rank = {name: k for k, name in enumerate(order or [])}
    return sorted(cells.values(), key=lambda s: (rank.get(s.cell, len(rank)), s.cell))


def _pct(x: float) -> str:
    return f"{100 * x:.1f}"


def table(summaries: list[CellSummary]) -> list[str]:
    """Markdown rows of the cell table."""
    lines = ["| cell | kind | algorithm | profile | seeds | accuracy: mean +- s.e. over seeds | per seed (+- eval s.e.) "
             "| train min | updates | commits |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for s in summaries:
        se = s.se_over_seeds
        mean = f"{_pct(s.mean)} +- {_pct(se)}" if se is not None else f"{_pct(s.mean)} (one seed)"
        per_seed = " / ".join(f"s{seed}: {_pct(a)} +- {_pct(e)}" for seed, a, e in zip(s.seeds, s.accuracies, s.stderrs))
        kind = f"swapped ({s.source})" if s.kind == "swapped" else s.kind
        minutes = f"{statistics.mean(s.minutes):.1f}" if s.kind == "train" else "-"
        updates = f"{statistics.mean(s.updates):.0f}" if s.kind == "train" else "-"
        commits = ", ".join(sorted(set(c for c in s.commits if c)))
        lines.append(f"| {s.cell} | {kind} | {s.algorithm} | {s.profile} | {len(s.seeds)} | {mean} | {per_seed} "
                     f"| {minutes} | {updates} | {commits} |")
    return lines


def curve_series(records: list[dict[str, Any]], order: list[str] | None = None) -> list[dict[str, Any]]:
    """What the plot draws: per training record (cell order, then seed), its evaluation points as
    training minutes and accuracy in %. The PNG carries this list in its metadata, so a test can
    check that a committed plot shows its records."""
    curves = [r for r in records if len(r.get("eval_curve", [])) > 0 and r["grid"]["kind"] != "swapped"]
    cells = [s.cell for s in summarise(curves, order)]
    return [{"cell": r["grid"]["cell"], "seed": r["grid"]["seed"],
             "minutes": [round(p.get("train_seconds", 0.0) / 60, 3) for p in r["eval_curve"]],
             "accuracy": [round(100 * p["accuracy"], 2) for p in r["eval_curve"]]}
            for r in sorted(curves, key=lambda r: (cells.index(r["grid"]["cell"]), r["grid"]["seed"]))]


SERIES_KEY = "marft-series"
"""PNG text-chunk key holding :func:`curve_series` as JSON."""


def plot(records: list[dict[str, Any]], out_path: Path, title: str, order: list[str] | None = None) -> Path | None:
    """Accuracy against training minutes, a colour per cell and a line per seed; None without curves."""
    series = curve_series(records, order)
    if not series:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cells = list(dict.fromkeys(line["cell"] for line in series))
    colours = {cell: plt.get_cmap("tab10")(k % 10) for k, cell in enumerate(cells)}
    fig, ax = plt.subplots(figsize=(8, 4.6))
    labelled: set[str] = set()
    for line in series:
        cell = line["cell"]
        ax.plot(line["minutes"], line["accuracy"], marker="o", markersize=3, linewidth=1, alpha=0.8,
                color=colours[cell], label=None if cell in labelled else cell)
        labelled.add(cell)
    ax.set_xlabel("training minutes (rollout + update)")
    ax.set_ylabel("greedy eval accuracy, %")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    tmp = Path(out_path).with_suffix(f".{os.getpid()}.tmp.png")
    fig.savefig(tmp, dpi=110, metadata={SERIES_KEY: json.dumps(series, sort_keys=True)})
    plt.close(fig)
    os.replace(tmp, out_path)  # two grid shards may regenerate the report at the same time
    return Path(out_path)


def plotted_series(png: Path) -> list[dict[str, Any]] | None:
    """The series a plot written by :func:`plot` carries (None for a PNG without them)."""
    from PIL import Image

    with Image.open(png) as image:
        text = image.text.get(SERIES_KEY) if hasattr(image, "text") else None
    return json.loads(text) if text else None


def report(grid_dir: Path, title: str, order: list[str] | None = None, description: str = "",
           comparisons: list[Comparison] | None = None, write_plot: bool = True) -> str:
    """The markdown of ``<grid_dir>/README.md``; writes the plot too unless ``write_plot`` is False."""
    grid_dir = Path(grid_dir)
    records = grid_records(grid_dir / "records") if (grid_dir / "records").is_dir() else []
    lines = [f"# {title}", "",
             "Generated by `python -m baselines.grid GRID --report-only` from `records/*.json` (written by "
             "`python -m baselines.grid`); do not edit by hand. Accuracy: greedy, on the fixed held-out "
             "problem set of the grid's config, after training. \"s.e. over seeds\" is stdev / sqrt(seeds); "
             "each seed's +- is its evaluation's standard error (clustered by problem).", ""]
    if description:
        lines += [description.strip(), ""]
    if not records:
        return "\n".join(lines + ["No records yet: run `python -m baselines.grid <grid file>`.", ""])
    summaries = summarise(records, order)
    lines += table(summaries) + [""]
    if comparisons:
        lines += ["## Comparisons", ""] + comparison_table(summaries, comparisons) + [""]
    total = sum(r["grid"].get("wall_s", 0.0) for r in records)
    lines += [f"Machine time of the recorded runs (training, evaluations, loading): {total / 3600:.2f} h "
              f"over {len(records)} runs.", ""]
    drawn = plot(records, grid_dir / PLOT, title, order) is not None if write_plot else bool(curve_series(records))
    if drawn:
        lines += [f"![accuracy against training minutes]({PLOT})", ""]
    return "\n".join(lines)


def write_report(grid_dir: Path, title: str, order: list[str] | None = None, description: str = "",
                 comparisons: list[Comparison] | None = None) -> Path:
    """Regenerate ``<grid_dir>/README.md`` (and ``curves.png``); returns the README path."""
    grid_dir = Path(grid_dir)
    grid_dir.mkdir(parents=True, exist_ok=True)
    path = grid_dir / README
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(report(grid_dir, title, order, description, comparisons), encoding="utf-8")
    os.replace(tmp, path)
    return path
