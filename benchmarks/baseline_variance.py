"""How much return variance each baseline removes, on the same rollouts: critic vs group vs group_critic.

Every MAPPO update with grouped sampling (``schedule.group_size`` >= 2) logs, per decision
position p, what each baseline leaves of the returns on that update's rollout
(``learners/critic_health.py``, step 4; ``learners/baselines.py``, step 5):
``critic/group_return_var/pos<p>`` (no baseline), ``critic/loo_residual_var/pos<p>`` (``group``:
the leave-one-out group mean), ``critic/critic_residual_var/pos<p>`` (the critic as the run used
it) and ``critic/anchored_residual_var/pos<p>`` (``group_critic`` with the same values). This
script pools them over the later half of each run's updates (sums over updates, as the run's own
figures are pooled; ``critic_health.pooled_residuals``, which the grid reports use too) and
prints, per run and position, each residual and its variance reduction
``1 - residual / return variance``, and the critic's gain over the group mean
``1 - critic / LOO``: whether the critic earns its cost on that run, position by position.

Usage::

    python benchmarks/baseline_variance.py RUN_FOLDER [RUN_FOLDER ...] [--all-updates]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from marft_agents.learners.critic_health import BASELINE_RESIDUALS, pooled_residuals, variance_reduction


def main(argv: list[str] | None = None) -> dict[str, dict[int, dict[str, float]]]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("runs", nargs="+", type=Path, help="training run folders (with metrics.jsonl)")
    parser.add_argument("--all-updates", action="store_true", help="pool every update, not the later half")
    args = parser.parse_args(argv)
    tables = {}
    for run in args.runs:  # read every run first: an error is one line, not one under a header
        metrics = run / "metrics.jsonl"
        if not metrics.is_file():
            raise SystemExit(f"{run}: no metrics.jsonl; expected a training run folder")
        rows = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
        table = pooled_residuals(rows, args.all_updates)
        if not table:
            raise SystemExit(f"{run}: no update logged the baseline figures; they need schedule.group_size >= 2")
        tables[run] = table
    print("| run | position | no baseline | group (LOO) | critic | group_critic | reduction: group / critic / "
          "group_critic | critic's gain over LOO |")
    print("|---|---|---|---|---|---|---|---|")
    results = {}
    for run, table in tables.items():
        results[str(run)] = table
        for p, f in table.items():
            def cut(name: str, reference: str = "none", f: dict = f) -> str:
                x = variance_reduction(f[name], f[reference])
                return f"{x:.3f}" if math.isfinite(x) else "-"
            gain = cut("critic", "group")
            print(f"| {run.name} | {p} | " + " | ".join(f"{f[n]:.4f}" for n, _ in BASELINE_RESIDUALS)
                  + f" | {cut('group')} / {cut('critic')} / {cut('group_critic')} | {gain} |")
    return results


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
