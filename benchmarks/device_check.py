"""The device check: what a lent GPU machine that reaches no network can verify, in one command
of under 9 minutes.

Such a machine holds torch, peft and an older transformers but no vLLM, and reaches no package
index; the few wheels marft needs there travel with the working tree (64 MiB at most).

1. Here, with a package index: ``python benchmarks/device_check.py --prepare-wheels .whl``
   downloads :data:`WHEELS` (CPython 3.12 on manylinux x86-64, without dependencies: the image
   holds the rest) and prints their total size.
2. There: ``python3 benchmarks/device_check.py --wheels .whl --out $OUT``:

   a. the wheels are installed into a scratch folder (``pip --no-index --no-deps --target``),
      which goes first on the ``PYTHONPATH`` of every step;
   b. ``cuda_tests``: ``gpu_check.py --only cuda_tests`` (``tests/agents/test_cuda.py``);
   c. ``update``: ``gpu_check.py --only update,memory,throughput --random-init qwen2.5-1.5b``:
      one MARFT-A update of a random-weight Qwen2.5-1.5B-shaped model with each engine backed by
      transformers (``direct``, ``fast``, ``legacy``: rollout tokens/s and update seconds), the
      peak memory of an update's training passes with gradient checkpointing off and on next to
      ``memory_estimate.py``'s estimate (with training tokens/s), and the engines' decode
      tokens/s;
   e. ``vllm``: marft's vLLM engine against bare vLLM and vLLM's log-probs against the
      learner's (``gpu_check.py --only throughput,logprobs``) where vLLM is installed, else
      SKIP with the reason.

   Each step runs in a child process with its own time limit (:data:`STEPS`, 9 minutes
   together); one line per check (``PASS``/``FAIL``/``SKIP``), then the JSON summary, also
   written to ``<out>/device_check.json`` with each step's ``gpu_check`` JSON beside it.
3. ``--dry-run``, on any machine (a CPU too): the wheels are installed for the device's Python
   into a scratch folder (checking that the set installs; not imported here), then the same
   steps run on the tiny random model with ``--quick``.

Exit status 1 if a check failed or a step ran out of time.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
GPU_CHECK = REPO / "benchmarks" / "gpu_check.py"

WHEELS = (
    "transformers==5.24.0",  # the image has 5.17; marft passes cache=, which needs >= 5.24
    "regex==2026.11.19",  # transformers 5.24 checks regex >= 2025.10.22 on import
    "peft==0.21.2",  # the version marft is tested with
    "pettingzoo==1.27.0",
    "gymnasium==1.4.0",
    "farama-notifications==0.0.6",
    "math-verify==0.9.0",  # the arithmetic and MATH graders
    "latex2sympy2-extended==1.11.0",
    "antlr4-python3-runtime==4.13.2",
    "gguf==0.19.0",  # the packaged SmolLM2 alias
)
"""What the GPU image lacks for the checks, pinned to the versions marft runs with here."""
DEVICE_PYTHON = ("3.12", "cp")
"""The image's Python (version, implementation)."""
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
             "manylinux1_x86_64")
WHEEL_LIMIT_MIB = 64
"""What may travel with the working tree to the device machine."""
RANDOM_INIT = "qwen2.5-1.5b"


@dataclass(frozen=True)
class Step:
    """One child run of ``gpu_check.py``."""

    name: str
    checks: str
    limit_s: int
    shaped: bool
    """Whether it runs on the random-weight Qwen2.5 shape (else on gpu_check's tiny model)."""
    quick: bool = False
    """``gpu_check --quick`` (every step is quick in a dry run)."""


STEPS = (
    Step("cuda_tests", "cuda_tests", 180, shaped=False),
    Step("update", "update,memory", 210, shaped=True),
    Step("throughput", "throughput", 90, shaped=True, quick=True),
    Step("vllm", "throughput,logprobs", 60, shaped=False),
)
"""The steps in order, 540 s together."""


def prepare_wheels(folder: Path) -> int:
    """Download :data:`WHEELS` for the device's Python into ``folder``; print their size."""
    folder.mkdir(parents=True, exist_ok=True)
    version, implementation = DEVICE_PYTHON
    cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
           "--python-version", version, "--implementation", implementation,
           *[arg for platform in PLATFORMS for arg in ("--platform", platform)], "-d", str(folder), *WHEELS]
    done = subprocess.run(cmd, check=False)
    if done.returncode != 0:
        return done.returncode
    wheels = sorted(folder.glob("*.whl"))
    mib = sum(w.stat().st_size for w in wheels) / 2**20
    for wheel in wheels:
        print(f"{wheel.stat().st_size / 2**20:7.2f} MiB  {wheel.name}")
    print(f"{len(wheels)} wheels, {mib:.1f} MiB (limit {WHEEL_LIMIT_MIB} MiB)")
    return 0 if mib <= WHEEL_LIMIT_MIB else 1


def install_wheels(folder: Path, target: Path, foreign: bool) -> None:
    """Install every wheel of ``folder`` into ``target`` without an index or dependencies;
    ``foreign``: for the device's Python rather than this one (a dry run)."""
    wheels = sorted(str(w) for w in folder.glob("*.whl"))
    if not wheels:
        raise SystemExit(f"--wheels {folder}: no .whl files there (prepare them with --prepare-wheels)")
    cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps", "--no-compile",
           "--no-cache-dir", "--upgrade", "--target", str(target)]
    if foreign:
        version, implementation = DEVICE_PYTHON
        cmd += ["--only-binary=:all:", "--python-version", version, "--implementation", implementation,
                *[arg for platform in PLATFORMS for arg in ("--platform", platform)]]
    subprocess.run(cmd + wheels, check=True)


def run_step(step: Step, out: Path, env: dict[str, str], dry_run: bool) -> dict[str, Any]:
    """One ``gpu_check.py`` child; its JSON summary, or a FAIL record when it ran out of time."""
    result = out / f"gpu_check_{step.name}.json"
    cmd = [sys.executable, str(GPU_CHECK), "--only", step.checks, "--out", str(result)]
    if step.shaped and not dry_run:
        cmd += ["--random-init", RANDOM_INIT]
    if dry_run or step.quick:
        cmd.append("--quick")
    began = time.monotonic()
    try:
        done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=step.limit_s)
    except subprocess.TimeoutExpired as err:
        tail = (err.stdout or b"")[-2000:]
        return {"step": step.name, "checks": [{"name": step.name, "status": "FAIL",
                                               "summary": f"ran past its {step.limit_s} s limit",
                                               "details": {"output_tail": str(tail)}}]}
    summary = json.loads(result.read_text()) if result.is_file() else {
        "checks": [{"name": step.name, "status": "FAIL", "summary": f"gpu_check exited {done.returncode} "
                    "without a summary", "details": {"output_tail": (done.stdout + done.stderr)[-3000:]}}]}
    summary["step"], summary["step_seconds"] = step.name, round(time.monotonic() - began, 1)
    return summary


def vllm_absent_reason() -> str | None:
    """Why the vLLM step is skipped (None: vLLM is installed)."""
    if importlib.util.find_spec("vllm") is None:
        return ("vLLM is not installed (the GPU image has none, and its ~4.5 GB of dependencies cannot travel "
                f"within {WHEEL_LIMIT_MIB} MiB): install it on a GPU machine with a network, docs/gpu.md")
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prepare-wheels", type=Path, default=None, metavar="DIR",
                        help="download the wheels the GPU image lacks into DIR, then stop")
    parser.add_argument("--wheels", type=Path, default=None, metavar="DIR",
                        help="the folder --prepare-wheels filled (installed before the checks)")
    parser.add_argument("--out", type=Path, default=None, help="where the JSON files go (default: a temp folder)")
    parser.add_argument("--dry-run", action="store_true",
                        help="any machine: wheels installed for the device's Python (not imported), tiny model, --quick")
    args = parser.parse_args(argv)
    if args.prepare_wheels:
        return prepare_wheels(args.prepare_wheels)
    out = args.out or Path(tempfile.mkdtemp(prefix="marft-device-check-"))
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    if args.wheels:
        site = Path(tempfile.mkdtemp(prefix="marft-device-site-"))
        began = time.monotonic()
        install_wheels(args.wheels, site, foreign=args.dry_run)
        print(f"installed {len(list(args.wheels.glob('*.whl')))} wheels into {site} in "
              f"{time.monotonic() - began:.0f} s" + (" (for the device's Python; not used here)" if args.dry_run else ""))
        if not args.dry_run:
            env["PYTHONPATH"] = os.pathsep.join(p for p in (str(site), env.get("PYTHONPATH", "")) if p)
    records, failed, started = [], False, time.monotonic()
    for step in STEPS:
        if step.name == "vllm" and (reason := vllm_absent_reason()):
            records.append({"step": step.name, "checks": [{"name": "vllm", "status": "SKIP", "summary": reason}]})
        else:
            records.append(run_step(step, out, env, args.dry_run))
        for check in records[-1]["checks"]:
            print(f"{check['status']} {step.name}/{check['name']}: {check['summary']}", flush=True)
            failed |= check["status"] == "FAIL"
    summary = {"dry_run": args.dry_run, "seconds": round(time.monotonic() - started, 1), "steps": records}
    (out / "device_check.json").write_text(json.dumps(summary) + "\n", encoding="utf-8")
    print(json.dumps({"seconds": summary["seconds"], "failed": failed, "out": str(out)}))
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
