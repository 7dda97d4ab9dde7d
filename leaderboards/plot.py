"""Plot the evaluation curves of leaderboard records (``python -m leaderboards.plot``).

One line per record of an env: greedy accuracy +- one standard error against training minutes
(the clock ``schedule.time_budget_s`` counts: rollout + update time, evaluation excluded), or
against updates with ``--x update``. Same-budget comparisons read best against minutes: a cheaper
update buys more of them.

    python -m leaderboards.plot --env marft/Arithmetic-v0 --out leaderboards/arithmetic.png
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from leaderboards.records import RECORDS_DIR, load_records


def curve_points(record: dict[str, Any], x: str) -> tuple[list[float], list[float], list[float]]:
    """(xs, accuracies, stderrs) of a record's eval curve; xs in minutes or updates."""
    curve = record.get("eval_curve", [])
    if x == "minutes" and any("train_seconds" not in point for point in curve):
        raise ValueError(f"record {record['name']!r} has no train_seconds in its eval_curve; "
                         f"plot it with --x update")
    xs = [point["train_seconds"] / 60 if x == "minutes" else point["update"] for point in curve]
    return xs, [point["accuracy"] for point in curve], [point["stderr"] for point in curve]


def plot_records(env_id: str, out_path: Path, records_dir: Path = RECORDS_DIR, x: str = "minutes",
                 names: list[str] | None = None) -> Path:
    """Write a PNG of the eval curves of ``env_id``'s records (all, or those in ``names``)."""
    import matplotlib

    matplotlib.use("Agg")  # headless
    import matplotlib.pyplot as plt

    every = load_records(records_dir)
    records = [r for r in every
               if r["env_id"] == env_id and r.get("eval_curve") and (names is None or r["name"] in names)]
    if not records:
        known = sorted({r["env_id"] for r in every})
        raise ValueError(f"no records with an eval curve for {env_id!r} in {records_dir} "
                         f"(envs with records: {known}); run `python -m baselines.run <config>` first")
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for record in sorted(records, key=lambda r: r["name"]):
        xs, ys, errs = curve_points(record, x)
        line, = ax.plot(xs, [100 * y for y in ys], marker="o", markersize=3,
                        label=f"{record['name']} ({record['algorithm']})")
        ax.fill_between(xs, [100 * (y - e) for y, e in zip(ys, errs)], [100 * (y + e) for y, e in zip(ys, errs)],
                        color=line.get_color(), alpha=0.12)
    ax.set_xlabel("training minutes (rollout + update)" if x == "minutes" else "update")
    ax.set_ylabel("greedy eval accuracy, %")
    ax.set_title(env_id, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    out_path = Path(out_path)
    fig.savefig(out_path, dpi=110)
    plt.close(fig)
    return out_path


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default="marft/Arithmetic-v0", help="registered env id of the records")
    parser.add_argument("--out", type=Path, required=True, help="PNG path to write")
    parser.add_argument("--x", choices=["minutes", "update"], default="minutes")
    parser.add_argument("--records", type=Path, default=RECORDS_DIR)
    parser.add_argument("--names", nargs="*", help="only these records (default: all of the env)")
    args = parser.parse_args(argv)
    print(f"wrote {plot_records(args.env, args.out, args.records, args.x, args.names)}")


if __name__ == "__main__":
    main()
