"""Episodes per second of data-parallel MARFT: 2 processes against 1, same global batch.

The same run (MARFT-A on ``marft/Arithmetic-v0`` level 1, profile ``dual``, one round; seed 0;
``--episodes`` episodes per update; ``--updates`` updates; no evaluation) is trained twice:

* **1 process**, one torch thread, pinned to one core;
* **2 processes** started by ``torchrun --standalone --nproc_per_node 2`` (gloo), one torch
  thread each, each pinned to its own core (``os.sched_setaffinity``, where the OS has it).

Throughput is episodes per second of wall-clock time over the updates after the first (the first
pays for warm-up: allocator, caches), measured on rank 0 between the ends of updates; both
include collection, the rollout gather, the update with its gradient all-reduce, and the
checkpoint. Per phase (collection with its gather; update with its all-reduces) the seconds per
update are printed too, and the phase's own efficiency ``t(1) / (2 * t(2))``, to show where
scaling is lost. ``--side-by-side`` adds a third measurement that involves no communication at
all: two independent 1-process runs at once, one per core, each with half the global batch;
their summed episodes per second over ``2 * eps(1)`` is the ceiling this machine allows (shared
memory bandwidth and caches, smaller batches per process). The last line is the scaling
efficiency: ``eps(2) / (2 * eps(1))``.

Usage::

    python benchmarks/bench_ddp.py                 # SmolLM2-135M-Instruct, float32 (minutes)
    python benchmarks/bench_ddp.py --smoke         # tiny random model, seconds: checks it works
    python benchmarks/bench_ddp.py --side-by-side  # also the no-communication ceiling

Run it on an otherwise idle machine with at least 2 cores: other processes on the same cores
make the 2-process figure meaningless.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from marft_agents.settings.model import DEFAULT_MODEL, DTYPE_NAMES  # noqa: E402  (after the sys.path line)

TARGET = 0.8
"""The scaling efficiency of 2 processes against 1 that data parallelism should reach; printed beside
the measured one (docs/distributed.md, "Measuring scaling")."""


def run_config(args: argparse.Namespace, output_dir: Path) -> dict:
    """The benchmarked run, as a config dict (the same for 1 and 2 processes)."""
    return {
        "algorithm": "mappo_action", "seed": 0, "output_dir": str(output_dir),
        "env": {"id": "marft/Arithmetic-v0", "kwargs": {"level": 1, "profile": "dual", "horizon": 1},
                "num_envs": args.episodes},
        "model": {"name_or_path": args.model, "dtype": args.dtype},
        "critic": {"mode": "local"},
        "sampling": {"max_new_tokens": args.new_tokens, "temperature": 0.5},
        "schedule": {"num_updates": args.updates, "episodes_per_update": args.episodes, "ppo_epochs": 1,
                     "minibatch_size": args.episodes, "checkpoint_interval": 0},
        "eval": {"at_end": False, "interval": 0},
    }


def pin_to_one_core(slot: int) -> str:
    """Pin this process to the ``slot``-th core it may use; returns a description."""
    if not hasattr(os, "sched_setaffinity"):
        return "not pinned (no os.sched_setaffinity)"
    cores = sorted(os.sched_getaffinity(0))
    core = cores[slot % len(cores)]
    os.sched_setaffinity(0, {core})
    return f"core {core}"


def worker(args: argparse.Namespace) -> None:
    """One process of a measured run (under torchrun: one rank); rank 0 writes the result."""
    import torch

    from marft_agents.config import load_config
    from marft_agents.runtime.distributed import process_group
    from marft_agents.run.trainer import train

    with process_group() as world:
        pinned = pin_to_one_core(world.local_rank if args.slot is None else args.slot)
        torch.set_num_threads(1)
        tiny = None
        if args.smoke:
            from marft_agents.model.tiny_models import tiny_model_and_tokenizer

            tiny = tiny_model_and_tokenizer(seed=0, hidden_size=64, num_layers=2)
        cfg = load_config(run_config(args, Path(args.out) / f"run{args.tag}"))
        ends: list[float] = []
        result = train(cfg, model_and_tokenizer=tiny, callbacks=[lambda _u, _m: ends.append(time.perf_counter())],
                       eval_before=False, tensorboard=False, plot=False)
        if world.is_main:
            episodes = cfg.schedule.episodes_per_update * (len(ends) - 1)
            measured = result.history[1:]  # the updates after the warm-up one
            report = {"world_size": world.world_size, "pinned": pinned, "episodes": episodes,
                      "seconds": ends[-1] - ends[0], "episodes_per_s": episodes / (ends[-1] - ends[0]),
                      "rollout_s": sum(r["time/rollout_s"] for r in measured) / len(measured),
                      "update_s": sum(r["time/update_s"] for r in measured) / len(measured),
                      "reward_last": result.history[-1]["rollout/reward_mean"]}
            Path(args.out, f"result{args.tag}.json").write_text(json.dumps(report))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker_command(args: argparse.Namespace, out: Path, tag: str, episodes: int, slot: int | None = None) -> list[str]:
    """The arguments of one measured process (``tag`` names its result file)."""
    return ([str(Path(__file__).resolve()), "--worker", "--out", str(out), "--tag", tag, "--episodes", str(episodes),
             "--updates", str(args.updates), "--new-tokens", str(args.new_tokens), "--dtype", args.dtype,
             "--model", args.model]
            + (["--smoke"] if args.smoke else []) + ([] if slot is None else ["--slot", str(slot)]))


def clean_env() -> dict[str, str]:
    """One thread per process, no GPU, no torchrun variables inherited from a caller."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    return env


def measure(args: argparse.Namespace, processes: int, out: Path) -> dict:
    """Launch a measured run of ``processes`` processes and read rank 0's result."""
    script = worker_command(args, out, str(processes), args.episodes)
    if processes == 1:
        command = [sys.executable] + script
    else:
        command = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc_per_node",
                   str(processes), "--master_addr", "127.0.0.1", "--master_port", str(free_port())] + script
    subprocess.run(command, env=clean_env(), check=True, cwd=ROOT)
    return json.loads((out / f"result{processes}.json").read_text())


def measure_side_by_side(args: argparse.Namespace, out: Path) -> dict:
    """Two independent 1-process runs at once (one per core, half the global batch each, no
    communication): their summed episodes per second."""
    procs = [subprocess.Popen([sys.executable] + worker_command(args, out, f"side{slot}", args.episodes // 2, slot),
                              env=clean_env(), cwd=ROOT) for slot in (0, 1)]
    for proc in procs:
        if proc.wait():
            raise subprocess.CalledProcessError(proc.returncode, proc.args)
    parts = [json.loads((out / f"resultside{slot}.json").read_text()) for slot in (0, 1)]
    return {"episodes_per_s": sum(p["episodes_per_s"] for p in parts), "pinned": ", ".join(p["pinned"] for p in parts)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="tiny random model and a tiny run (seconds)")
    parser.add_argument("--model", default=DEFAULT_MODEL, metavar="NAME_OR_PATH",
                        help=f"model.name_or_path of the measured runs: an alias, a local Hugging Face folder or "
                             f"a Hub id (default: {DEFAULT_MODEL}; not used with --smoke)")
    parser.add_argument("--episodes", type=int, default=None, help="episodes per update (global batch)")
    parser.add_argument("--updates", type=int, default=None, help="updates (the first is warm-up)")
    parser.add_argument("--new-tokens", type=int, default=None, help="sampling.max_new_tokens")
    parser.add_argument("--dtype", default="float32", choices=DTYPE_NAMES,
                        help="model.dtype of the measured runs (default float32)")
    parser.add_argument("--side-by-side", action="store_true",
                        help="also run two independent 1-process runs at once (the no-communication ceiling)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    parser.add_argument("--tag", help=argparse.SUPPRESS)
    parser.add_argument("--slot", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    # 32 episodes per update: the shipped training configs' batch (16 per process with 2).
    defaults = (8, 3, 8) if args.smoke else (32, 4, 32)
    args.episodes = args.episodes or defaults[0]
    args.updates = args.updates or defaults[1]
    args.new_tokens = args.new_tokens or defaults[2]
    if args.updates < 2:
        parser.error("--updates must be >= 2 (the first update is warm-up)")
    if args.episodes % 2:
        parser.error("--episodes must be even (2 processes split it)")
    if args.worker:
        worker(args)
        return
    model = "tiny random model" if args.smoke else f"{args.model} {args.dtype}"
    print(f"bench_ddp: {model}, {args.episodes} episodes/update, {args.updates} updates (first = warm-up), "
          f"load {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    with tempfile.TemporaryDirectory() as tmp:
        one = measure(args, 1, Path(tmp))
        two = measure(args, 2, Path(tmp))
        side = measure_side_by_side(args, Path(tmp)) if args.side_by_side else None
    for r in (one, two):
        print(f"{r['world_size']} process(es), 1 thread each ({r['pinned']} on rank 0): {r['episodes_per_s']:.2f} "
              f"episodes/s ({r['episodes']} episodes in {r['seconds']:.1f} s; per update: collection "
              f"{r['rollout_s']:.2f} s, update {r['update_s']:.2f} s; last reward {r['reward_last']:.3f})")
    for phase in ("rollout_s", "update_s"):
        print(f"  {phase[:-2]} efficiency: {one[phase] / (2 * two[phase]):.2f}")
    if side is not None:
        print(f"2 independent processes side by side ({side['pinned']}), {args.episodes // 2} episodes/update each: "
              f"{side['episodes_per_s']:.2f} episodes/s; ceiling without communication: "
              f"{side['episodes_per_s'] / (2 * one['episodes_per_s']):.2f}")
    efficiency = two["episodes_per_s"] / (2 * one["episodes_per_s"])
    print(f"scaling efficiency (2 processes vs 1, target >= {TARGET}): {efficiency:.2f}")


if __name__ == "__main__":
    main()
