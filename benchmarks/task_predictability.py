"""Is a task's difficulty stable, and can it be read off the task? From a run's evaluations.

The critic's explained-variance ceiling (``critic/ev_ceiling``) is the between-task share of the
return variance: what a critic that knew every task's success probability would explain. A critic
that meets each training task about once can only reach it if the difficulty can be *predicted*
from what it reads. This script measures both halves on Arithmetic runs' greedy evaluations
(``<output_dir>/evals/update_*.json``, the same test problems at every evaluation):

1. **Persistence**: the correlation, over problems, of "solved" at one evaluation and the next.
   Above 0: problems differ in difficulty for the model, and keep differing.
2. **Predictability**: the leave-one-out R^2 of ridge regression of "solved" at an evaluation on
   the operands' features (a, b, a + b, (a + b)^2, a carry, a + b >= 10, >= 20, max, min).
   Near or below 0: which problems are hard is idiosyncratic to the model, not a function of
   their size or carries that a critic could learn from a few hundred fresh tasks.

Usage::

    python benchmarks/task_predictability.py RUN_FOLDER [RUN_FOLDER ...]
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import numpy as np

_SUM = re.compile(r"(\d+) \+ (\d+)")
RIDGE = 1.0
"""Ridge penalty on the standardised features (the intercept is not penalised)."""


def solved_by_problem(eval_file: Path) -> dict[tuple[int, int], float]:
    """(a, b) -> mean "solved" over the evaluation's repeats of the problem ``Compute a + b.``"""
    data = json.loads(eval_file.read_text())
    out: dict[tuple[int, int], list[float]] = {}
    for task in data["per_task"]:
        match = _SUM.search(task["problem"])
        if match is None:
            raise ValueError(f"{eval_file}: expected problems like 'Compute 16 + 11.', got {task['problem']!r}")
        out.setdefault((int(match[1]), int(match[2])), []).append(float(task["solved"]))
    return {key: float(np.mean(v)) for key, v in out.items()}


def features(a: int, b: int) -> list[float]:
    """The operand features of ``a + b`` (module docstring, item 2)."""
    s = a + b
    return [a, b, s, s * s, float(a % 10 + b % 10 >= 10), float(s >= 10), float(s >= 20), max(a, b), min(a, b)]


def loo_r2(x: np.ndarray, y: np.ndarray, ridge: float = RIDGE) -> float:
    """Leave-one-out R^2 of ridge regression of ``y [n]`` on ``x [n, f]`` (standardised on each
    training fold); below 0 when the features predict worse than the mean."""
    n = len(y)
    pred = np.zeros(n)  # [n]
    for i in range(n):
        keep = np.arange(n) != i
        mu, sd = x[keep].mean(0), x[keep].std(0) + 1e-9  # [f]
        z = np.c_[np.ones(keep.sum()), (x[keep] - mu) / sd]  # [n - 1, f + 1]
        penalty = ridge * np.eye(z.shape[1])
        penalty[0, 0] = 0.0
        w = np.linalg.solve(z.T @ z + penalty, z.T @ y[keep])  # [f + 1]
        pred[i] = np.r_[1.0, (x[i] - mu) / sd] @ w
    return float(1 - ((y - pred) ** 2).sum() / ((y - y.mean()) ** 2).sum())


def report(run: Path) -> list[dict[str, float]]:
    """One row per pair of consecutive evaluations after the first (the untrained one is skipped:
    at update 0 nothing has been learned yet)."""
    files = sorted((run / "evals").glob("update_*.json"))
    if len(files) < 3:
        raise ValueError(f"{run}: need >= 3 evaluations in evals/ (untrained + two more), found {len(files)}")
    rows = []
    for first, second in zip(files[1:], files[2:]):
        a, b = solved_by_problem(first), solved_by_problem(second)
        keys = sorted(set(a) & set(b))
        x, y = np.array([a[k] for k in keys]), np.array([b[k] for k in keys])  # [n], [n]
        persistence = float(np.corrcoef(x, y)[0, 1]) if x.std() > 0 and y.std() > 0 else float("nan")
        rows.append({"from": int(first.stem[7:]), "to": int(second.stem[7:]), "problems": len(keys),
                     "accuracy_from": float(x.mean()), "accuracy_to": float(y.mean()), "persistence": persistence,
                     "operand_r2": loo_r2(np.array([features(*k) for k in keys], dtype=float), y)})
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path, help="run folders (output_dir) with evals/update_*.json")
    args = parser.parse_args(argv)
    print("run | evaluations | problems | accuracy | persistence corr | operand-feature LOO R^2")
    for run in args.runs:
        for row in report(run):
            print(f"{run.name} | {row['from']} -> {row['to']} | {row['problems']} | "
                  f"{row['accuracy_from']:.2f} -> {row['accuracy_to']:.2f} | {row['persistence']:.2f} | "
                  f"{row['operand_r2']:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
