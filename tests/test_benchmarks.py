"""The throughput benchmarks run end to end on a tiny random model and print their ratio lines."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from marft_agents.settings.sampling import ENGINES

REPO = Path(__file__).resolve().parent.parent
TINY = ["--tiny", "--repeats", "1", "--threads", "1", "--batch", "2", "--new-tokens", "4"]


def _run(script: str, *args: str) -> str:
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / script), *TINY, *args], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


@pytest.mark.parametrize("extra", [[], ["--no-share-prefix", "--engine", "legacy"],
                                   ["--engine", "legacy", "--dtype", "bfloat16"]])
def test_bench_rollout_prints_collector_against_raw_generate_and_the_bound(extra):
    out = _run("bench_rollout.py", *extra)
    engines = ["legacy"] if extra else list(ENGINES)
    for engine in engines:
        line = re.search(rf"engine {engine}: collector ([\d.]+) tok/s\s+raw generate ([\d.]+) tok/s\s+"
                         rf"bound ([\d.]+) tok/s.*collector/bound ([\d.]+)\s+generate/bound ([\d.]+)", out)
        assert line, out
        assert all(float(x) > 0 for x in line.groups())
    for other in ENGINES[1:]:
        assert (f"{ENGINES[0]} vs {other}: speed-up" in out) == (len(engines) > 1)
    last = out.strip().splitlines()[-1]
    assert re.fullmatch(r"rollout/bound ratio: [\d.]+", last) and float(last.split()[-1]) > 0, out


def test_bench_rollout_runs_the_unmerged_critic_as_its_own_row():
    out = _run("bench_rollout.py", "--engine", "direct", "--unmerged-critic")
    for engine in ("direct", "direct+unmerged-critic"):
        assert re.search(rf"engine {re.escape(engine)}: collector [\d.]+ tok/s", out), out
    assert re.search(r"direct vs direct\+unmerged-critic: speed-up [\d.]+x", out), out


def test_profile_rollout_fills_every_bucket_it_can():
    out = _run("profile_rollout.py")
    for bucket in ("linear (base)", "LM head", "attention", "sampling + bookkeeping"):
        row = re.search(rf"^{re.escape(bucket)}\s+([\d.]+)\s+([\d.]+)", out, re.M)
        assert row and float(row.group(2)) > 0, out  # ms per step


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_bench_update_prints_both_learners_against_bare_passes(dtype):
    # bfloat16: peft keeps the LoRA weights in float32 under a bf16 base, the bound must too
    out = _run("bench_update.py", "--minibatch", "2", "--recompute-old-logprobs", "--dtype", dtype,
               "--paths", "fast,unmerged,plain")
    for path in ("fast", "unmerged", "plain"):
        for learner in ("MARFT-A", "MARFT-T"):
            line = re.search(rf"\[{path}\] {learner} \(\w+\): update ([\d.]+) tok/s \(([\d.]+)s\)\s+"
                             rf"bare fwd\+bwd ([\d.]+) tok/s\s+ratio ([\d.]+)", out)
            assert line, out
            assert all(float(x) > 0 for x in line.groups())
    for learner in ("MARFT-A", "MARFT-T"):
        for other in ("unmerged", "plain"):
            assert re.search(rf"{learner} update speed-up fast vs {other}: [\d.]+x", out), out
    assert re.search(r"bare seconds per update by pass: .*token_logprobs with grad [\d.]+s", out), out
    last = out.strip().splitlines()[-1]
    assert re.fullmatch(r"update/bound ratio: [\d.]+", last) and float(last.split()[-1]) > 0, out


def test_bench_critic_smoke_prints_one_row_per_dependency_and_mode(tmp_path):
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "bench_critic.py"), "--smoke", "--threads", "1",
                           "--updates", "1", "--out", str(tmp_path)], cwd=REPO, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = re.findall(r"^(independent|dag)\s+(centralised|local)\s+updates\s+1 .*acc_after ([\d.]+)", done.stdout, re.M)
    assert len(rows) == 4, done.stdout
    assert (tmp_path / "summary.json").is_file() and (tmp_path / "dag_centralised" / "metrics.jsonl").is_file()
    assert json.loads((tmp_path / "dag_local" / "result.json").read_text())["mode"] == "local"


def test_bench_ddp_smoke_prints_phases_the_ceiling_and_the_efficiency():
    """2 gloo processes, 1 process and two independent ones on a tiny model (~30 s)."""
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "bench_ddp.py"), "--smoke", "--side-by-side"],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    out = done.stdout
    for processes in (1, 2):
        assert re.search(rf"{processes} process\(es\).*: [\d.]+ episodes/s .*collection [\d.]+ s, update [\d.]+ s", out), out
    assert re.search(r"rollout efficiency: [\d.]+", out) and re.search(r"update efficiency: [\d.]+", out), out
    assert re.search(r"ceiling without communication: [\d.]+", out), out
    last = out.strip().splitlines()[-1]
    assert re.fullmatch(r"scaling efficiency \(2 processes vs 1, target >= 0.8\): [\d.]+", last), out
    assert float(last.split()[-1]) > 0
