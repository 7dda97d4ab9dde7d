"""Tables and plots of a grid's records (``python -m leaderboards.grid_report leaderboards/grids/NAME``).

``baselines/grid.py`` writes one record per (cell, seed) into ``<grid folder>/records`` and calls
:func:`write_report` after every run, which regenerates ``<grid folder>/README.md`` (one table:
per cell, the mean final accuracy over seeds with its standard error over seeds, and every
seed's accuracy with its own evaluation standard error) and ``<grid folder>/curves.png``
(evaluation accuracy against training minutes, one colour per cell, one line per seed).

The standard error over seeds is ``stdev(accuracies) / sqrt(k)`` (k seeds; none for one seed):
it measures how much the result moves with the seed. Each seed's own +- is its evaluation's
standard error, clustered by problem statement.
"""

from __future__ import annotations

import argparse
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


def plot(records: list[dict[str, Any]], out_path: Path, title: str, order: list[str] | None = None) -> Path | None:
    """Accuracy against training minutes, a colour per cell and a line per seed; None without curves."""
    curves = [r for r in records if len(r.get("eval_curve", [])) > 0 and r["grid"]["kind"] != "swapped"]
    if not curves:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cells = [s.cell for s in summarise(curves, order)]
    colours = {cell: plt.get_cmap("tab10")(k % 10) for k, cell in enumerate(cells)}
    fig, ax = plt.subplots(figsize=(8, 4.6))
    labelled: set[str] = set()
    for record in sorted(curves, key=lambda r: (cells.index(r["grid"]["cell"]), r["grid"]["seed"])):
        cell = record["grid"]["cell"]
        points = record["eval_curve"]
        xs = [p.get("train_seconds", 0.0) / 60 for p in points]
        ys = [100 * p["accuracy"] for p in points]
        ax.plot(xs, ys, marker="o", markersize=3, linewidth=1, alpha=0.8, color=colours[cell],
                label=None if cell in labelled else cell)
        labelled.add(cell)
    ax.set_xlabel("training minutes (rollout + update)")
    ax.set_ylabel("greedy eval accuracy, %")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    tmp = Path(out_path).with_suffix(f".{os.getpid()}.tmp.png")
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    os.replace(tmp, out_path)  # two grid shards may regenerate the report at the same time
    return Path(out_path)


def report(grid_dir: Path, title: str, order: list[str] | None = None, description: str = "") -> str:
    """The markdown of ``<grid_dir>/README.md`` (also writes the plot when there are curves)."""
    grid_dir = Path(grid_dir)
    records = grid_records(grid_dir / "records") if (grid_dir / "records").is_dir() else []
    lines = [f"# {title}", "",
             "Generated by `python -m leaderboards.grid_report` from `records/*.json` (written by "
             "`python -m baselines.grid`); do not edit by hand. Accuracy: greedy, on the fixed held-out "
             "problem set of the grid's config, after training. \"s.e. over seeds\" is stdev / sqrt(seeds); "
             "each seed's +- is its evaluation's standard error (clustered by problem).", ""]
    if description:
        lines += [description.strip(), ""]
    if not records:
        return "\n".join(lines + ["No records yet: run `python -m baselines.grid <grid file>`.", ""])
    lines += table(summarise(records, order)) + [""]
    total = sum(r["grid"].get("wall_s", 0.0) for r in records)
    lines += [f"Machine time of the recorded runs (training, evaluations, loading): {total / 3600:.2f} h "
              f"over {len(records)} runs.", ""]
    if plot(records, grid_dir / PLOT, title, order) is not None:
        lines += [f"![accuracy against training minutes]({PLOT})", ""]
    return "\n".join(lines)


def write_report(grid_dir: Path, title: str, order: list[str] | None = None, description: str = "") -> Path:
    """Regenerate ``<grid_dir>/README.md`` (and ``curves.png``); returns the README path."""
    grid_dir = Path(grid_dir)
    grid_dir.mkdir(parents=True, exist_ok=True)
    path = grid_dir / README
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(report(grid_dir, title, order, description), encoding="utf-8")
    os.replace(tmp, path)
    return path


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("grid_dir", type=Path, help="folder holding records/ (leaderboards/grids/<name>)")
    parser.add_argument("--title", help="report heading (default: the folder name)")
    args = parser.parse_args(argv)
    print(f"wrote {write_report(args.grid_dir, args.title or f'Grid {args.grid_dir.name}')}")


if __name__ == "__main__":
    main()
