"""Two critic settings against each other over paired runs: the critic's share of its ceiling.

A change to the critic (a refit, a learning rate) is judged by how much of the explained-variance
ceiling its first decisions' values reach over the later half of a run's updates
(:func:`marft_agents.learners.critic_health.last_half`: EV and ceiling each pooled over those
updates). Runs ``a[k]`` and ``b[k]`` pair (the same seed, config and initial adapters, one setting
changed), so the test is on the per-pair differences of that share:

1. read each run folder's ``metrics.jsonl`` (per-update ``critic/*`` figures) and compute its
   later half's ceiling, EV and share (NaN when the ceiling is below ``MIN_CEILING``);
2. print one row per pair and the paired t test of ``share(a) - share(b)`` with its CI, and the
   exact sign-flip test (with 5 pairs its smallest two-sided p is 1/16);
3. print each side's mean share and how many runs reach ``--criterion`` of their ceiling, and,
   as secondary figures, the final greedy accuracy of each run (``summary.json``).

Usage::

    python benchmarks/critic_pairs.py --a RUN_A1 RUN_A2 ... --b RUN_B1 RUN_B2 ...
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

from leaderboards import stats
from marft_agents.learners.critic_health import last_half


def share(run: Path) -> tuple[float, float, float, str]:
    """(ceiling, EV, EV / ceiling, updates pooled) over the later half of ``run``'s updates."""
    metrics = run / "metrics.jsonl"
    if not metrics.is_file():
        raise SystemExit(f"{run}: no metrics.jsonl; expected a training run folder")
    rows = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
    summary = last_half(rows)
    if summary is None:
        raise SystemExit(f"{run}: no update logged the critic's variance parts (a learner without a critic?)")
    return summary.ceiling, summary.ev_first, summary.ratio, f"{summary.first_update}-{summary.last_update}"


def final_accuracy(run: Path) -> float:
    """The greedy accuracy of the run's last evaluation (``summary.json``), NaN without one."""
    file = run / "summary.json"
    after = json.loads(file.read_text()).get("eval_after") if file.is_file() else None
    return float(after["accuracy"]) if after else math.nan


def _pct(x: float) -> str:
    return f"{100 * x:.0f}" if math.isfinite(x) else "-"


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--a", nargs="+", type=Path, required=True, help="run folders of the setting measured")
    parser.add_argument("--b", nargs="+", type=Path, required=True, help="run folders of the reference, paired in order")
    parser.add_argument("--criterion", type=float, default=0.5, help="share of the ceiling a run should reach")
    parser.add_argument("--alpha", type=float, default=0.05)
    args = parser.parse_args(argv)
    if len(args.a) != len(args.b):
        raise SystemExit(f"--a and --b must pair: got {len(args.a)} and {len(args.b)} run folders")
    a = [share(r) for r in args.a]
    b = [share(r) for r in args.b]
    print("| pair | updates | a: EV / ceiling = share | b: EV / ceiling = share | a - b | greedy %, a / b |")
    print("|---|---|---|---|---|---|")
    for k, (ra, rb, xa, xb) in enumerate(zip(args.a, args.b, a, b)):
        print(f"| {ra.name} / {rb.name} | {xa[3]} | {xa[1]:.3f} / {xa[0]:.3f} = {xa[2]:.2f} "
              f"| {xb[1]:.3f} / {xb[0]:.3f} = {xb[2]:.2f} | {xa[2] - xb[2]:+.2f} "
              f"| {_pct(final_accuracy(ra))} / {_pct(final_accuracy(rb))} |")
    share_a, share_b = [x[2] for x in a], [x[2] for x in b]
    if any(math.isnan(v) for v in share_a + share_b):
        raise SystemExit("a run's ceiling is below MIN_CEILING (or unmeasured): its share is undefined; "
                         "expected runs on a task whose problems differ in difficulty")
    result = {"share_a": share_a, "share_b": share_b,
              "mean_a": statistics.mean(share_a), "mean_b": statistics.mean(share_b),
              "met_a": sum(v >= args.criterion for v in share_a), "met_b": sum(v >= args.criterion for v in share_b)}
    print(f"\nmean share of the ceiling: a {result['mean_a']:.2f}, b {result['mean_b']:.2f}; "
          f"runs at >= {args.criterion:g}: a {result['met_a']} of {len(a)}, b {result['met_b']} of {len(b)}")
    if len(a) >= 2:
        test = stats.paired_t(share_a, share_b, args.alpha)
        exact = stats.sign_flip_test([x - y for x, y in zip(share_a, share_b)])
        result.update(difference=test.difference, ci=test.ci, p=test.p, exact_p=exact.p, exact_min_p=exact.min_p)
        print(f"a - b, paired over {len(a)} pairs: {test.difference:+.3f}, {100 * (1 - args.alpha):g}% CI "
              f"[{test.ci[0]:+.3f}, {test.ci[1]:+.3f}], t test p {test.p:.3f} (df {test.df:.0f}); "
              f"sign-flip p {exact.p:.3f} (smallest possible {exact.min_p:.3f})")
    print(json.dumps({k: (round(v, 4) if isinstance(v, float) else v) for k, v in result.items()
                      if not isinstance(v, list)}))
    return result


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
