"""How much of its ceiling could a critic reach that knows only a problem's visible difficulty?

The explained-variance ceiling (``learners/critic_health.py``) is the between-task share of the
first decisions' return variance: what a critic that knew each task's success probability under
the current policy would explain. On Relay level 5 a task's difficulty is partly written in it
(half the problems have three-digit operands, which the model rarely solves) and partly not
(which of the small sums this model gets right). A critic reading the problem can at best learn
the visible part. This script measures that part from the refit windows a run saved in its
checkpoints (``critic.head_refit_window``: each kept update's first-decision returns and tasks):

1. for each update of the later half (default 9-16) found in the checkpoints' windows, group the
   first decisions by the size class of their problem (rebuilt from the task id:
   ``RelayTasks(level=5, seed=...)[index]``, class = an operand >= 100);
2. the ceiling on these returns (``critic_health.split_by_task``: between-task and within-task variance,
   groups cut to their common size k), and the class oracle's part of the between-task variance:
   the variance of the size class's mean success over the update's tasks, estimated without bias
   from the task means (:func:`class_component`; what a critic that knew each class's success
   rate in that update, and nothing else about a task, would explain);
3. each pooled over the updates as the run's own figures are: ``sum(class part) / sum(between +
   within)`` is the class oracle's explained variance, ``sum(class part) / sum(between)`` its
   share of the ceiling.

The targets are the windows' regression targets (``Sample.returns``, lambda-returns), within a
few per cent of the Monte Carlo returns the run's ``critic/*`` figures use (the ceilings agree
to 0.01).

Usage::

    python benchmarks/class_ceiling.py RUN_FOLDER [RUN_FOLDER ...] [--updates 9-16]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

from marft_agents.run.checkpoint import list_checkpoints, load_checkpoint
from marft_agents.learners.critic_health import split_by_task
from marft_envs.tasks.relay import MIXED_SIZES, RelayTasks

SLOT = 0
"""The first decision's value-head slot."""


def size_class(task_id: str, sources: dict[int, RelayTasks]) -> int:
    """1 when the level-5 problem ``relay/mixed_sizes/<split>/seed<S>/<index>`` has three-digit
    operands (:data:`MIXED_SIZES`' second range), else 0."""
    parts = task_id.split("/")
    if len(parts) != 5 or parts[1] != "mixed_sizes":
        raise SystemExit(f"expected Relay level-5 task ids (relay/mixed_sizes/<split>/seed<S>/<i>), got {task_id!r}")
    seed = int(parts[3].removeprefix("seed"))
    source = sources.setdefault(seed, RelayTasks(level=5, split=parts[2], seed=seed))
    values = source[int(parts[4])].metadata["values"]
    return int(min(values.values()) >= MIXED_SIZES[1][0])


def windows(run: Path) -> dict[int, dict]:
    """Each update's kept batch of the run's checkpoints, by update number."""
    out: dict[int, dict] = {}
    for checkpoint in list_checkpoints(run):
        state = load_checkpoint(checkpoint)["state"]
        kept = state.get("learner", state).get("head_refit", {}).get("critic", [])
        update = int(checkpoint.name.rsplit("_", 1)[1])
        for j, batch in enumerate(kept):
            out[update - len(kept) + 1 + j] = batch
    if not out:
        raise SystemExit(f"{run}: no checkpoint kept a refit window; expected a run with critic.head_refit_window > 0")
    return out


def class_component(task_means: list[float], classes: list[int], residual_noise: float) -> float:
    """Unbiased estimate of the variance of the class part of the tasks' success probabilities,
    on the ceiling's footing (the variance over the population of tasks, as ``sigma_b^2`` is):
    ``(SS_between_classes - (C - 1) MS_residual) / (T - 1)`` from the task means, 0 when one
    class only. (Dividing by ``T``, the fixed-effects omega-squared form, reads low by
    ``(T - 1) / T``: a world whose difficulty is the class alone would score under 1.)"""
    T, groups = len(task_means), defaultdict(list)
    for m, c in zip(task_means, classes):
        groups[c].append(m)
    if len(groups) < 2:
        return 0.0  # one class in the update: knowing the class tells its tasks nothing apart
    grand = sum(task_means) / T
    ss_between = sum(len(g) * (sum(g) / len(g) - grand) ** 2 for g in groups.values())
    ss_residual = sum((m - sum(g) / len(g)) ** 2 for g in groups.values() for m in g)
    dof = T - len(groups)
    ms_residual = ss_residual / dof if dof > 0 else residual_noise
    return (ss_between - (len(groups) - 1) * ms_residual) / (T - 1)


def measure(run: Path, first: int, last: int) -> dict[str, float]:
    """Steps 1-3 for one run: the class oracle's explained variance and the ceiling, pooled."""
    sources: dict[int, RelayTasks] = {}
    between = within = by_class = 0.0
    updates = 0
    for update, batch in sorted(windows(run).items()):
        if not first <= update <= last:
            continue
        rows = batch["slots"] == SLOT  # [n]
        returns = batch["targets"][rows].double().tolist()
        tasks = [t for t, keep in zip(batch["tasks"], rows.tolist()) if keep]
        split = split_by_task(returns, tasks)
        if split is None:
            continue  # fewer than two tasks, or a task seen once: no ceiling to measure
        groups: dict = {}
        for t, r in zip(tasks, returns):
            groups.setdefault(t, []).append(r)
        k = min(len(g) for g in groups.values())  # the size split_by_task cut the groups to
        means = [sum(g[:k]) / k for g in groups.values()]
        classes = [size_class(t, sources) for t in groups]
        between, within, updates = between + split.between, within + split.within, updates + 1
        by_class += class_component(means, classes, split.within / k)
    if not updates:
        raise SystemExit(f"{run}: its checkpoints' windows hold no update in {first}-{last}")
    total = between + within
    return {"updates": updates, "ceiling": between / total, "class_ev": by_class / total,
            "class_share": by_class / between if between > 0 else float("nan")}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("runs", nargs="+", type=Path, help="run folders of Relay level-5 runs with a refit window")
    parser.add_argument("--updates", default="9-16", help="FIRST-LAST updates to pool (default 9-16)")
    args = parser.parse_args(argv)
    try:
        first, last = (int(x) for x in args.updates.split("-"))
    except ValueError:
        raise SystemExit(f"--updates: expected FIRST-LAST, e.g. 9-16; got {args.updates!r}") from None
    results = {}
    print("| run | updates | ceiling | class oracle EV | its share of the ceiling |")
    print("|---|---|---|---|---|")
    for run in args.runs:
        r = measure(run, first, last)
        results[str(run)] = r
        print(f"| {run.name} | {r['updates']} | {r['ceiling']:.3f} | {r['class_ev']:.3f} | {r['class_share']:.2f} |")
    print(json.dumps({k: {m: round(v, 4) for m, v in r.items()} for k, r in results.items()}))
    return results


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
