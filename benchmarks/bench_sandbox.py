"""Sandbox throughput: sandboxed executions per second vs. a bare ``subprocess.run``.

    python benchmarks/bench_sandbox.py            # default 60 runs per measurement
    python benchmarks/bench_sandbox.py --runs 200 --workers 1 2 4
    python benchmarks/bench_sandbox.py --fs-reference   # + cost of the private root file system

Measured in the same run, on a trivial program (``print(sum(range(100)))``):
- bare: ``subprocess.run(["python3", "-c", SRC])`` (what the sandbox replaces) and the same with
  the interpreter running the host and ``-I -S`` (the sandbox's own interpreter flags);
- sandboxed: ``run_program(SRC)`` (namespaces, private root file system, limits, fresh uid,
  temp dir, capped capture);
- ``--fs-reference``: the same with ``SandboxLimits(fs_isolation=False)`` (the older read-only
  view of the host's file system), interleaved with the sandboxed runs in chunks so that both
  see the same machine load; prints the cost of the file-system isolation;
- graded: one HumanEval canonical solution through the function-test harness (all its cases in
  one sandboxed run), i.e. what one env step costs.
Each at 1..N concurrent workers (threads waiting on child processes). Prints runs/s and the
sandbox's overhead as a ratio and in milliseconds per run against the bare runs.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from marft_envs.code.datasets import load_humaneval  # noqa: E402
from marft_envs.code.grading import grade_program  # noqa: E402
from marft_envs.code.sandbox import SandboxLimits, isolation_available, run_program  # noqa: E402

SRC = "print(sum(range(100)))"


def rate(fn, runs: int, workers: int) -> float:
    """Runs per second of ``fn`` called ``runs`` times on ``workers`` threads."""
    fn()  # warm caches (page cache, imports) outside the timing
    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=workers) as pool:
        list(pool.map(lambda _: fn(), range(runs)))
    return runs / (time.perf_counter() - t0)


def interleaved_rates(fns, runs: int, workers: int, chunks: int = 6) -> list[float]:
    """Runs per second of each of ``fns``, measured alternately in ``chunks`` slices."""
    for fn in fns:
        fn()
    elapsed = [0.0] * len(fns)
    per = max(1, runs // chunks)
    for _ in range(chunks):
        for i, fn in enumerate(fns):
            t0 = time.perf_counter()
            with ThreadPoolExecutor(max_workers=workers) as pool:
                list(pool.map(lambda _: fn(), range(per)))
            elapsed[i] += time.perf_counter() - t0
    return [per * chunks / e for e in elapsed]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=60)
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--fs-reference", action="store_true",
                    help="also measure fs_isolation=False, interleaved with the sandboxed runs")
    args = ap.parse_args()
    he0 = load_humaneval()[0]
    prog = he0.assemble(he0.reference)

    def bare_python3():
        r = subprocess.run(["python3", "-c", SRC], capture_output=True)
        assert r.returncode == 0

    def bare_same():
        r = subprocess.run([sys.executable, "-I", "-S", "-c", SRC], capture_output=True)
        assert r.returncode == 0

    def sandboxed():
        r = run_program(SRC)
        assert r.status == "ok" and r.stdout == "4950\n", r

    def sandboxed_no_fsroot():
        r = run_program(SRC, limits=SandboxLimits(fs_isolation=False))
        assert r.status == "ok" and r.stdout == "4950\n" and "fsroot" not in r.isolation, r

    def graded():
        r = grade_program(he0, prog)
        assert r.status == "passed", r

    print(f"cpus={os.cpu_count()} isolation={','.join(isolation_available())} runs={args.runs}")
    print(f"{'workers':>7} {'bare python3':>13} {'bare -I -S':>11} {'sandboxed':>10} "
          f"{'HumanEval grade':>16} {'overhead x':>11} {'+ms/run':>8}")
    for w in args.workers:
        b3 = rate(bare_python3, args.runs, w)
        bs = rate(bare_same, args.runs, w)
        sb = rate(sandboxed, args.runs, w)
        gr = rate(graded, args.runs, w)
        print(f"{w:>7} {b3:>11.1f}/s {bs:>9.1f}/s {sb:>8.1f}/s {gr:>14.1f}/s "
              f"{b3 / sb:>10.2f}x {1000 * (1 / sb - 1 / b3) * w:>8.1f}")
    print("overhead x = bare python3 runs/s / sandboxed runs/s; +ms/run = extra wall time per "
          "run and worker")
    if args.fs_reference:
        print(f"\n{'workers':>7} {'sandboxed':>10} {'no fsroot':>10} {'fsroot cost':>12} "
              f"{'+ms/run':>8}   (interleaved, {args.runs} runs each)")
        for w in args.workers:
            with_fs, without = interleaved_rates([sandboxed, sandboxed_no_fsroot], args.runs, w)
            print(f"{w:>7} {with_fs:>8.1f}/s {without:>8.1f}/s {1 - with_fs / without:>11.1%} "
                  f"{1000 * (1 / with_fs - 1 / without) * w:>8.1f}")
        print("fsroot cost = 1 - sandboxed / no-fsroot runs/s (negative: within noise)")


if __name__ == "__main__":
    main()
