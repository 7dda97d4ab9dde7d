"""Gold check of the coding graders: reference solutions must score 1, broken programs 0.

    python benchmarks/gold_code.py                 # HumanEval (bundled) + MBPP full + sanitized
    python benchmarks/gold_code.py --only humaneval --workers 2

For every problem it grades (in the sandbox, ``max_workers`` programs at a time):
- the reference solution (HumanEval ``canonical_solution``, MBPP ``code``): expected reward 1;
- the empty reply (no code): expected 0;
- a wrong program (the entry point raises): expected 0.
It prints the misses (task id, status, failing tests) and a summary line per dataset. Exit code
1 when HumanEval has a gold miss, MBPP's gold rate is below 99 %, or a broken program scores.
"""

from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from marft_envs.code.datasets import load_humaneval, load_mbpp  # noqa: E402
from marft_envs.code.grading import CodeProblem, GradingConfig, grade_program, grade_reply  # noqa: E402


def wrong_program(p: CodeProblem) -> str:
    name = p.entry_point or "solve"
    return f"```python\ndef {name}(*args, **kwargs):\n    raise RuntimeError('wrong on purpose')\n```"


def check(name: str, problems: list[CodeProblem], cfg: GradingConfig, workers: int,
          min_gold: float) -> bool:
    t0 = time.monotonic()

    def one(p: CodeProblem):
        gold = grade_program(p, p.assemble(p.reference), cfg)
        empty = grade_reply(p, "", cfg)
        wrong = grade_reply(p, wrong_program(p), cfg)
        return p, gold, empty, wrong

    with ThreadPoolExecutor(max_workers=workers) as pool:
        rows = list(pool.map(one, problems))
    misses = [(p, g) for p, g, _, _ in rows if g.reward(cfg.reward) != 1.0]
    bad_empty = [p.task_id for p, _, e, _ in rows if e.reward("fraction") != 0.0]
    bad_wrong = [p.task_id for p, _, _, w in rows if w.reward("fraction") != 0.0]
    for p, g in misses:
        fails = [f"#{i}:{c.error}:{c.detail[:80]}" for i, c in enumerate(g.cases) if not c.passed]
        print(f"  MISS {p.task_id}: status={g.status} {g.passed}/{g.total} {g.detail[:120]} "
              f"{' '.join(fails[:3])}")
    n = len(rows)
    gold_rate = (n - len(misses)) / n
    print(f"{name}: gold reward 1 on {n - len(misses)}/{n} ({100 * gold_rate:.2f} %); "
          f"empty reply reward 0 on {n - len(bad_empty)}/{n}; wrong program reward 0 on "
          f"{n - len(bad_wrong)}/{n}; {time.monotonic() - t0:.1f} s "
          f"({3 * n / (time.monotonic() - t0):.1f} gradings/s)")
    if bad_empty or bad_wrong:
        print(f"  broken programs that scored: empty={bad_empty[:10]} wrong={bad_wrong[:10]}")
    return gold_rate >= min_gold and not bad_empty and not bad_wrong


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", choices=["humaneval", "mbpp", "mbpp-sanitized"], action="append")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--reward", choices=["fraction", "all_pass"], default="all_pass")
    args = ap.parse_args()
    cfg = GradingConfig(reward=args.reward)
    which = args.only or ["humaneval", "mbpp", "mbpp-sanitized"]
    ok = True
    if "humaneval" in which:
        ok &= check("HumanEval (164, bundled)", load_humaneval(), cfg, args.workers, 1.0)
    for variant, key in (("full", "mbpp"), ("sanitized", "mbpp-sanitized")):
        if key in which:
            try:
                problems = load_mbpp(variant=variant, split="all")
            except FileNotFoundError as e:
                print(f"MBPP {variant}: skipped ({e})")
                continue
            ok &= check(f"MBPP {variant} (all splits)", problems, cfg, args.workers, 0.99)
    print("GOLD CHECK", "PASSED" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
