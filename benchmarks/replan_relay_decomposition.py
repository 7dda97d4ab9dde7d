"""Re-plan relay_decomposition (J - solo) at budgets where both cells plateau, from the records
alone: the figures behind the decision in ``baselines/grids/relay_decomposition.yaml``'s header.

    python benchmarks/replan_relay_decomposition.py [--total 1920] [--machine-hours 20]

The declared planner (``baselines.grid --plan``) cannot size a design whose cells have no records
at its budget (it waits for a pilot), so this prints what the records of relay_curriculum and
relay_decomposition say about one:

1. the spread over seeds of J's and the solo's final accuracy at the declared budgets (J plateaus
   by 320 episodes; the solo is still climbing at 1280, so its spread at a plateau is unknown);
2. the machine time per seed at the extended budget, scaled from the recorded runs' training
   seconds per episode and seconds per evaluation (stage 1 unchanged, J = total - 960, solo = total);
3. how many seeds per cell the ~20-hour budget (less the hours already spent) buys, the MDE and
   the narrowest equivalence margin at those seeds (``leaderboards.stats``, as the planner computes
   them), the seeds that would answer 15 points, and the largest solo spread at which the
   affordable seeds would still detect 15 points.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from leaderboards import stats

REPO = Path(__file__).resolve().parent.parent
GRIDS = ("relay_curriculum", "relay_decomposition")
STAGE_ONE = ("reducer_alone", "answerer_alone")
MEANINGFUL = 15.0
EVAL_EVERY = 160


def records() -> list[dict]:
    return [json.loads(p.read_text(encoding="utf-8"))
            for grid in GRIDS for p in sorted((REPO / "leaderboards" / "grids" / grid / "records").glob("*.json"))]


def finals(rows: list[dict], cell: str) -> list[float]:
    """Each seed's final accuracy in points."""
    return [100 * r["eval_curve"][-1]["accuracy"] for r in rows if r["grid"]["cell"] == cell]


def cost(rows: list[dict], cell: str) -> tuple[float, float]:
    """(training seconds per episode, seconds per evaluation incl. loading) of the cell's recorded runs."""
    runs = [r for r in rows if r["grid"]["cell"] == cell and r.get("budget", {}).get("wall_clock_s")]
    per_episode = statistics.mean(r["budget"]["wall_clock_s"] / r["budget"]["episodes"] for r in runs)
    per_eval = statistics.mean((r["grid"]["wall_s"] - r["budget"]["wall_clock_s"]) / len(r["eval_curve"]) for r in runs)
    return per_episode, per_eval


def run_seconds(rows: list[dict], cell: str, episodes: int) -> float:
    per_episode, per_eval = cost(rows, cell)
    return per_episode * episodes + per_eval * (episodes // EVAL_EVERY + 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--total", type=int, default=1920, help="episodes per seed of the solo and of the curriculum")
    parser.add_argument("--machine-hours", type=float, default=20.0, help="the issue's budget for the whole grid")
    args = parser.parse_args()
    rows = records()
    joint, solo = finals(rows, "joint"), finals(rows, "solo")
    sd_j, sd_s = statistics.stdev(joint), statistics.stdev(solo)
    print(f"J final accuracy: mean {statistics.mean(joint):.1f}, sd {sd_j:.1f} points over {len(joint)} seeds")
    print(f"solo final accuracy: mean {statistics.mean(solo):.1f}, sd {sd_s:.1f} points over {len(solo)} seeds")
    spent = sum(r["grid"]["wall_s"] for r in rows if r["grid"]["grid"] == "relay_decomposition") / 3600
    stage_one = sum(statistics.mean(r["grid"]["wall_s"] for r in rows if r["grid"]["cell"] == c) for c in STAGE_ONE)
    per_seed = (stage_one + run_seconds(rows, "joint", args.total - 960) + run_seconds(rows, "solo", args.total)) / 3600
    affordable = int((args.machine_hours - spent) / per_seed)
    print(f"total {args.total} episodes (J {args.total - 960}, solo {args.total}): {per_seed:.2f} machine h per seed; "
          f"{spent:.2f} h spent; {args.machine_hours:g} h buy {affordable} seeds per cell")
    mde = stats.minimal_detectable_effect("independent", sd_j, affordable, sd_s, affordable).effect
    margin = stats.minimal_equivalence_margin("independent", sd_j, affordable, sd_s, affordable)
    print(f"at {affordable} seeds per cell: MDE {mde:.1f} points, a null shown within +-{margin:.1f} "
          f"(meaningful effect and margin {MEANINGFUL:g})")
    need = stats.planned_seeds("independent", sd_j, MEANINGFUL, sd_s)
    need_eq = stats.planned_seeds("independent", sd_j, MEANINGFUL, sd_s, equivalence=True)
    print(f"seeds per cell for 15 points: {need} (MDE), {need_eq} (margin): "
          f"{need * per_seed:.1f} / {need_eq * per_seed:.1f} machine h")
    low, high = 0.0, sd_s
    for _ in range(40):  # bisection on the solo's sd at which the affordable seeds detect 15 points
        middle = (low + high) / 2
        ok = stats.minimal_detectable_effect("independent", sd_j, affordable, middle, affordable).effect <= MEANINGFUL
        low, high = (middle, high) if ok else (low, middle)
    if stats.minimal_detectable_effect("independent", sd_j, affordable, 0.0, affordable).effect > MEANINGFUL:
        print("the affordable seeds cannot detect 15 points at J's spread alone, whatever the solo's")
    else:
        print(f"the affordable seeds detect 15 points only if the solo's plateau spread is at most {low:.1f} points")


if __name__ == "__main__":
    main()
