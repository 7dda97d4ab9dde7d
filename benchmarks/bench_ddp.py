"""Episodes per second of data-parallel MARFT: 2 processes against 1, same global batch.

The same run (MARFT-A on ``marft/Arithmetic-v0`` level 1, profile ``dual``, one round; seed 0;
``--episodes`` episodes per update; ``--updates`` updates; no evaluation) is trained twice:

* **1 process**, one torch thread, pinned to one core;
* **2 processes** started by ``torchrun --standalone --nproc_per_node 2`` (gloo), one torch
  thread each, each pinned to its own core (``os.sched_setaffinity``, where the OS has it).

Throughput is episodes per second of wall-clock time over the updates after the first (the first
pays for warm-up: allocator, caches), measured on rank 0 between the ends of updates; both
include collection, the rollout gather, the update with its gradient all-reduce, and the
checkpoint. The last line is the scaling efficiency: ``eps(2) / (2 * eps(1))``.

Usage::

    python benchmarks/bench_ddp.py                 # SmolLM2-135M-Instruct, float32 (minutes)
    python benchmarks/bench_ddp.py --smoke         # tiny random model, seconds: checks it works

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

MODEL = "smollm2-135m-instruct"
TARGET = 0.8
"""Scaling efficiency the issue asks for (docs/distributed.md)."""


def run_config(args: argparse.Namespace, output_dir: Path) -> dict:
    """The benchmarked run, as a config dict (the same for 1 and 2 processes)."""
    return {
        "algorithm": "mappo_action", "seed": 0, "output_dir": str(output_dir),
        "env": {"id": "marft/Arithmetic-v0", "kwargs": {"level": 1, "profile": "dual", "horizon": 1},
                "num_envs": args.episodes},
        "model": {"name_or_path": MODEL, "dtype": "float32"},
        "critic": {"mode": "local"},
        "sampling": {"max_new_tokens": args.new_tokens, "temperature": 0.5},
        "schedule": {"num_updates": args.updates, "episodes_per_update": args.episodes, "ppo_epochs": 1,
                     "minibatch_size": args.episodes, "checkpoint_interval": 0},
        "eval": {"at_end": False, "interval": 0},
    }


def pin_to_one_core(rank: int) -> str:
    """Pin this process to one of the cores it may use (rank-th); returns a description."""
    if not hasattr(os, "sched_setaffinity"):
        return "not pinned (no os.sched_setaffinity)"
    cores = sorted(os.sched_getaffinity(0))
    core = cores[rank % len(cores)]
    os.sched_setaffinity(0, {core})
    return f"core {core}"


def worker(args: argparse.Namespace) -> None:
    """One process of a measured run (under torchrun: one rank); rank 0 writes the result."""
    import torch

    from marft_agents.config import load_config
    from marft_agents.distributed import process_group
    from marft_agents.trainer import train

    with process_group() as world:
        pinned = pin_to_one_core(world.local_rank)
        torch.set_num_threads(1)
        tiny = None
        if args.smoke:
            from marft_agents.models import tiny_model_and_tokenizer

            tiny = tiny_model_and_tokenizer(seed=0, hidden_size=64, num_layers=2)
        cfg = load_config(run_config(args, Path(args.out) / f"run{world.world_size}"))
        ends: list[float] = []
        result = train(cfg, model_and_tokenizer=tiny, callbacks=[lambda _u, _m: ends.append(time.perf_counter())],
                       eval_before=False, tensorboard=False, plot=False)
        if world.is_main:
            episodes = cfg.schedule.episodes_per_update * (len(ends) - 1)
            report = {"world_size": world.world_size, "pinned": pinned, "episodes": episodes,
                      "seconds": ends[-1] - ends[0], "episodes_per_s": episodes / (ends[-1] - ends[0]),
                      "reward_last": result.history[-1]["rollout/reward_mean"]}
            Path(args.out, f"result{world.world_size}.json").write_text(json.dumps(report))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def measure(args: argparse.Namespace, processes: int, out: Path) -> dict:
    """Launch a measured run of ``processes`` processes and read rank 0's result."""
    script = [str(Path(__file__).resolve()), "--worker", "--out", str(out), "--episodes", str(args.episodes),
              "--updates", str(args.updates), "--new-tokens", str(args.new_tokens)] + (["--smoke"] if args.smoke else [])
    env = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    if processes == 1:
        command = [sys.executable] + script
    else:
        command = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc_per_node",
                   str(processes), "--master_addr", "127.0.0.1", "--master_port", str(free_port())] + script
    subprocess.run(command, env=env, check=True, cwd=ROOT)
    return json.loads((out / f"result{processes}.json").read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="tiny random model and a tiny run (seconds)")
    parser.add_argument("--episodes", type=int, default=None, help="episodes per update (global batch)")
    parser.add_argument("--updates", type=int, default=None, help="updates (the first is warm-up)")
    parser.add_argument("--new-tokens", type=int, default=None, help="sampling.max_new_tokens")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    defaults = (8, 3, 8) if args.smoke else (16, 4, 32)
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
    model = "tiny random model" if args.smoke else f"{MODEL} float32"
    print(f"bench_ddp: {model}, {args.episodes} episodes/update, {args.updates} updates (first = warm-up), "
          f"load {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    with tempfile.TemporaryDirectory() as tmp:
        one = measure(args, 1, Path(tmp))
        two = measure(args, 2, Path(tmp))
    for r in (one, two):
        print(f"{r['world_size']} process(es), 1 thread each ({r['pinned']} on rank 0): {r['episodes_per_s']:.2f} "
              f"episodes/s ({r['episodes']} episodes in {r['seconds']:.1f} s; last reward {r['reward_last']:.3f})")
    efficiency = two["episodes_per_s"] / (2 * one["episodes_per_s"])
    print(f"scaling efficiency (2 processes vs 1, target >= {TARGET}): {efficiency:.2f}")


if __name__ == "__main__":
    main()
