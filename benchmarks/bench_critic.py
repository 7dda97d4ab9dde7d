"""Centralised vs local critic: explained variance and eval accuracy from the same budget.

For ``marft/Arithmetic-v0`` level 2, the ``trio`` profile
(reasoner, actor, verifier; the verifier's answer is graded) under two dependencies where the
acting agent does *not* see every earlier output:

* ``independent``: D = 0, every agent sees only the task;
* ``dag``: reasoner -> verifier and actor -> verifier (the actor does not see the reasoner);

MARFT-A is trained once per ``critic.mode`` (``centralised``: the critic reads the global state;
``local``: the acting agent's own prompt, the behaviour before critic modes), from the same seed
and the same training-time budget (``schedule.time_budget_s``). Everything else comes from the
shipped MARFT-A config (``baselines/configs/marft_a_arithmetic.yaml``). Printed per run:

* ``ev_mean``: mean of ``losses/explained_variance`` (the critic's collection-time values against
  the GAE returns) over the last half of the updates; ``ev_last``: the last update's;
* ``acc_before`` / ``acc_after``: greedy accuracy on the evaluation problems before training and
  after the last update; ``best``: the best evaluation during training (``eval.interval``);
* ``updates`` and ``train_s``: how far each run got in the budget.

Each run writes its metrics to ``<out>/<dependency>_<mode>/metrics.jsonl`` and the table to
``<out>/summary.json``.

Usage::

    # the real comparison (4 runs of --budget seconds each, SmolLM2-135M; hours on a CPU)
    python benchmarks/bench_critic.py --budget 3000 --out runs/bench_critic
    # two processes side by side, one per core, one dependency each
    OMP_NUM_THREADS=1 taskset -c 0 python benchmarks/bench_critic.py --dependencies independent &
    OMP_NUM_THREADS=1 taskset -c 1 python benchmarks/bench_critic.py --dependencies dag
    # smoke test: tiny random model, 2 updates per run, seconds
    python benchmarks/bench_critic.py --smoke
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import set_threads  # noqa: E402
from marft_agents.config import load_config  # noqa: E402
from marft_agents.settings.critic import CRITIC_MODES  # noqa: E402
from marft_agents.settings.model import DTYPES  # noqa: E402
from marft_agents.model.tiny_models import tiny_model_and_tokenizer  # noqa: E402
from marft_agents.run.trainer import Trainer  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
BASE_CONFIG = REPO / "baselines" / "configs" / "marft_a_arithmetic.yaml"
DEPENDENCIES = {
    "independent": "independent",
    "dag": {"dag": [["reasoner", "verifier"], ["actor", "verifier"]]},
}
COMPARED_MODES = ("centralised", "local")


def run_config(args: argparse.Namespace, dependency: str, mode: str) -> dict:
    """The config overrides of one run."""
    overrides = {
        "env.kwargs": {"level": 2, "profile": "trio", "horizon": 1, "dependency": DEPENDENCIES[dependency]},
        "critic.mode": mode,
        "seed": args.seed,
        "output_dir": str(Path(args.out) / f"{dependency}_{mode}"),
        "schedule.time_budget_s": args.budget,
        "eval.keep_best": False,
    }
    if args.dtype:
        overrides["model.dtype"] = args.dtype
    if args.model:
        overrides["model.name_or_path"] = args.model
    if args.eval_problems:
        overrides["eval.n_problems"] = args.eval_problems
    if args.smoke:
        overrides.update({
            "model.dtype": "float32", "env.num_envs": 2, "sampling.max_new_tokens": 4,
            "schedule.num_updates": args.updates, "schedule.episodes_per_update": 2,
            "schedule.minibatch_size": 4, "schedule.checkpoint_interval": 0,
            "eval.n_problems": 4, "eval.num_envs": 2, "eval.interval": 1,
        })
    return overrides


def train_one(args: argparse.Namespace, dependency: str, mode: str) -> dict:
    cfg = load_config(BASE_CONFIG, overrides=run_config(args, dependency, mode))
    model = tiny_model_and_tokenizer(seed=0, hidden_size=32, num_layers=1) if args.smoke else None
    with Trainer(cfg, model) as trainer:  # a fresh base per run (LoRA is injected into the model in place); closes its engine
        out_dir = Path(cfg.output_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        before = trainer.evaluate()
        history, best = [], float("nan")
        start = time.perf_counter()
        with (out_dir / "metrics.jsonl").open("w", encoding="utf-8") as log:
            for metrics in trainer.run():
                history.append(metrics)
                log.write(json.dumps(metrics) + "\n")
                if "eval/accuracy" in metrics:
                    best = metrics["eval/accuracy"] if math.isnan(best) else max(best, metrics["eval/accuracy"])
        ev = [m["losses/explained_variance"] for m in history if math.isfinite(m["losses/explained_variance"])]
        tail = ev[len(ev) // 2:]
        after = trainer.final_eval if trainer.final_eval is not None else trainer.evaluate()
    return {
        "dependency": dependency, "mode": mode, "updates": len(history),
        "train_s": trainer.counters.get("train_seconds", 0.0), "wall_s": time.perf_counter() - start,
        "ev_mean": statistics.fmean(tail) if tail else float("nan"), "ev_last": ev[-1] if ev else float("nan"),
        "acc_before": before.accuracy, "acc_after": after.accuracy, "stderr_after": after.stderr, "best": best,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="tiny random model, --updates updates per run")
    parser.add_argument("--updates", type=int, default=2, help="updates per run with --smoke")
    parser.add_argument("--budget", type=int, default=3000, help="training seconds per run (time_budget_s)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dependencies", nargs="+", default=list(DEPENDENCIES), choices=list(DEPENDENCIES))
    parser.add_argument("--modes", nargs="+", default=list(COMPARED_MODES), choices=list(CRITIC_MODES))
    parser.add_argument("--out", default="runs/bench_critic")
    parser.add_argument("--threads", type=int, default=0, help="torch threads; 0 = auto (see _common)")
    parser.add_argument("--eval-problems", type=int, default=0,
                        help="held-out problems per evaluation (same for every run); 0 = the config's")
    parser.add_argument("--model", default=None, metavar="NAME_OR_PATH",
                        help="override model.name_or_path: an alias, a local Hugging Face folder or a Hub id "
                             "(default: the config's; not used with --smoke)")
    parser.add_argument("--dtype", default=None, choices=DTYPES,
                        help="override model.dtype (float32 on CPUs without bf16 instructions)")
    args = parser.parse_args()
    set_threads(args.threads)
    rows = []
    for dependency in args.dependencies:
        for mode in args.modes:
            rows.append(train_one(args, dependency, mode))
            r = rows[-1]
            # one file per run too, so runs split over processes (--dependencies) keep every row
            (Path(args.out) / f"{dependency}_{mode}" / "result.json").write_text(json.dumps(r, indent=2), encoding="utf-8")
            print(f"{r['dependency']:<12} {r['mode']:<12} updates {r['updates']:>4}  train_s {r['train_s']:8.1f}  "
                  f"ev_mean {r['ev_mean']:+.3f}  ev_last {r['ev_last']:+.3f}  acc_before {r['acc_before']:.3f}  "
                  f"acc_after {r['acc_after']:.3f} (+/- {r['stderr_after']:.3f})  best {r['best']:.3f}", flush=True)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    name = "summary.json" if set(args.dependencies) == set(DEPENDENCIES) else f"summary_{'_'.join(args.dependencies)}.json"
    (Path(args.out) / name).write_text(json.dumps(rows, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()
