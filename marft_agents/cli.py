"""The ``marft`` command: ``marft train``, ``marft eval``, ``marft envs``, ``marft bench``.

``marft train --config run.yaml`` trains as configured (see ``marft_agents/config.py``), logging
every update to ``<output_dir>/metrics.{jsonl,csv}`` and TensorBoard, with a progress bar. By
default the untrained policy is evaluated first (logged at step 0) so the learning curve starts
from the baseline; at the end it writes ``learning_curve.png`` and ``summary.json``.
``--resume`` continues from the latest checkpoint in ``output_dir`` (re-running a finished run
with ``--resume`` just re-evaluates and re-plots). ``--set section.key=value`` overrides any
config field (the value is parsed as YAML: ``--set schedule.num_updates=5``).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

import yaml


def _overrides(pairs: list[str]) -> dict[str, Any]:
    out = {}
    for pair in pairs:
        if "=" not in pair:
            raise SystemExit(f"--set expects section.key=value (e.g. schedule.num_updates=5), got {pair!r}")
        key, value = pair.split("=", 1)
        out[key.strip()] = yaml.safe_load(value)
    return out


def _eval_dict(result) -> dict[str, Any]:
    return {"accuracy": result.accuracy, "stderr": result.stderr, "n": result.n, "distinct": result.distinct,
            "mean_reward": result.mean_reward}


def _describe(result) -> str:
    repeats = f", {result.distinct} distinct" if result.distinct and result.distinct < result.n else ""
    return f"accuracy {result.accuracy:.3f} +- {result.stderr:.3f} (n={result.n}{repeats})"


def cmd_train(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from marft_agents.checkpoint import BEST_DIR
    from marft_agents.config import load_config
    from marft_agents.metrics import MetricsLogger, read_metrics
    from marft_agents.plotting import plot_learning_curve
    from marft_agents.trainer import _prepare

    overrides = _overrides(args.set)
    if args.output_dir:
        overrides["output_dir"] = args.output_dir
    cfg = load_config(args.config, overrides)
    out = Path(cfg.output_dir)
    started = time.perf_counter()
    trainer = _prepare(cfg, args.resume, None)
    logger = MetricsLogger(out, tensorboard=not args.no_tensorboard)
    summary_path = out / "summary.json"
    summary = json.loads(summary_path.read_text()) if args.resume and summary_path.exists() else {}
    if args.resume and "eval_before" not in summary and (out / "metrics.jsonl").exists():
        # A run killed before writing summary.json still logged its baseline at step 0.
        first = next((r for r in read_metrics(out / "metrics.jsonl") if r["step"] == 0 and "eval/accuracy" in r), None)
        if first:
            summary["eval_before"] = {"accuracy": first["eval/accuracy"], "stderr": first["eval/stderr"],
                                      "n": int(first["eval/n"]), "mean_reward": first.get("eval/mean_reward")}
    if args.eval_before and trainer.counters["update"] == 0 and "eval_before" not in summary:
        result = trainer.evaluate()
        trainer.keep_if_best(result)  # if training never beats the base model, best/ is the base
        summary["eval_before"] = _eval_dict(result)
        logger.log(0, {"eval/accuracy": result.accuracy, "eval/stderr": result.stderr, "eval/n": result.n,
                       "eval/mean_reward": result.mean_reward})
        summary_path.write_text(json.dumps(summary, indent=2))  # survives a crash mid-training
        print(f"eval before training: {_describe(result)}")
    bar = tqdm(total=cfg.schedule.num_updates, initial=trainer.counters["update"], desc="updates",
               disable=args.quiet, dynamic_ncols=True)
    for metrics in trainer.run():
        logger.log(trainer.counters["update"], metrics)
        shown = {"reward": metrics.get("rollout/reward_mean"), "kl": metrics.get("losses/approx_kl"),
                 "eval": metrics.get("eval/accuracy")}
        bar.set_postfix({k: f"{v:.3f}" for k, v in shown.items() if isinstance(v, float)})
        bar.update(1)
    bar.close()
    final = trainer.final_eval or (trainer.evaluate() if cfg.eval.at_end else None)
    if final is not None:
        summary["eval_after"] = _eval_dict(final)
        print(f"eval after {trainer.counters['update']} updates: {_describe(final)}")
    if trainer.best_eval is not None:
        summary["eval_best"] = trainer.best_eval
        print(f"best evaluation: accuracy {trainer.best_eval['accuracy']:.3f} after update "
              f"{trainer.best_eval['update']} (adapters in {out / BEST_DIR})")
    summary.update({"counters": trainer.counters, "config": str(args.config),
                    "wall_clock_s_this_call": round(time.perf_counter() - started, 1),
                    "last_checkpoint": str(trainer.last_checkpoint) if trainer.last_checkpoint else None})
    summary_path.write_text(json.dumps(summary, indent=2))
    logger.close()
    png = plot_learning_curve(out / "metrics.jsonl", out / "learning_curve.png",
                              title=f"{cfg.algorithm} on {cfg.env.id}")
    if png:
        print(f"learning curve: {png}")
    print(f"metrics: {out / 'metrics.csv'}  summary: {summary_path}")
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    from marft_agents.checkpoint import BEST_DIR, latest_checkpoint, load_adapters
    from marft_agents.config import load_config
    from marft_agents.evaluation import evaluate
    from marft_agents.models import load_model_and_tokenizer
    from marft_agents.trainer import build_policy

    import marft_envs

    cfg = load_config(args.config, _overrides(args.set))
    env_kwargs = {**cfg.env.kwargs, **cfg.eval.env_kwargs}
    agent_ids = list(marft_envs.make(cfg.env.id, **env_kwargs).possible_agents)
    model, tokenizer = load_model_and_tokenizer(cfg.model)
    policy = build_policy(cfg, model, tokenizer, agent_ids)
    checkpoint = args.checkpoint
    if checkpoint == "latest":
        checkpoint = latest_checkpoint(cfg.output_dir)
        if checkpoint is None:
            raise SystemExit(f"no checkpoint in {cfg.output_dir}; pass --checkpoint PATH or --checkpoint none")
    elif checkpoint == "best":
        checkpoint = Path(cfg.output_dir) / BEST_DIR
        if not (checkpoint / "adapters.pt").is_file():
            raise SystemExit(f"no {checkpoint}/adapters.pt: the run kept no best adapters (eval.keep_best "
                             "off, or no evaluation ran); pass --checkpoint latest or a folder")
    if checkpoint not in (None, "none"):
        policy.load_adapter_state_dict(load_adapters(checkpoint))
        print(f"loaded adapters from {checkpoint}")
    else:
        print("evaluating the untrained policy (adapters at initialisation = the base model)")
    modes = [True] + ([False] if args.sampled else [])
    report = {}
    for greedy in modes:
        result = evaluate(policy, cfg.env.id, env_kwargs, n_problems=args.n or cfg.eval.n_problems,
                          greedy=greedy, seed=cfg.eval.seed if args.seed is None else args.seed,
                          sampling=cfg.sampling, num_envs=cfg.eval.num_envs)
        name = "greedy" if greedy else "sampled"
        report[name] = _eval_dict(result)
        if args.transcripts:
            path = Path(args.transcripts)
            path = path if len(modes) == 1 else path.with_name(f"{path.stem}.{name}{path.suffix}")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("".join(json.dumps(task) + "\n" for task in result.per_task), encoding="utf-8")
            print(f"{name:>7}: transcripts of every problem in {path}")
        print(f"{name:>7}: {_describe(result)}, mean reward {result.mean_reward:.3f}")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2))
    return 0


def cmd_envs(args: argparse.Namespace) -> int:
    import marft_envs

    if args.verbose:
        from marft_agents.bench import print_env_details

        return print_env_details()
    for env_id in marft_envs.list_envs():
        print(env_id)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="marft", description="Multi-agent reinforcement fine-tuning of LLM agents.")
    sub = parser.add_subparsers(dest="command", required=True)
    train = sub.add_parser("train", help="train as configured, then evaluate and plot")
    train.add_argument("--config", required=True, help="YAML config (see baselines/configs/)")
    train.add_argument("--resume", action="store_true", help="continue from the latest checkpoint in output_dir")
    train.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a config field")
    train.add_argument("--output-dir", help="override output_dir")
    train.add_argument("--no-eval-before", dest="eval_before", action="store_false",
                       help="skip evaluating the untrained policy first")
    train.add_argument("--no-tensorboard", action="store_true")
    train.add_argument("--quiet", action="store_true", help="no progress bar")
    train.set_defaults(func=cmd_train)
    ev = sub.add_parser("eval", help="accuracy +- standard error on a fixed problem set")
    ev.add_argument("--config", required=True)
    ev.add_argument("--checkpoint", default="latest", help="checkpoint folder, 'latest' or 'best' (in output_dir) or 'none'")
    ev.add_argument("--n", type=int, help="number of problems (default: eval.n_problems)")
    ev.add_argument("--seed", type=int, help="problem-set seed (default: eval.seed)")
    ev.add_argument("--sampled", action="store_true", help="also evaluate with sampling")
    ev.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    ev.add_argument("--json", help="write the report to this file")
    ev.add_argument("--transcripts", metavar="PATH.jsonl",
                    help="write one JSON line per problem (solved, reward, what each agent said); "
                         "with --sampled, PATH.greedy.jsonl and PATH.sampled.jsonl")
    ev.set_defaults(func=cmd_eval)
    envs = sub.add_parser("envs", help="list registered environments")
    envs.add_argument("--verbose", action="store_true", help="also show agents, default profile and package")
    envs.set_defaults(func=cmd_envs)
    from marft_agents.bench import add_bench_parser

    add_bench_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (FileNotFoundError, FileExistsError) as err:
        print(f"marft {args.command}: error: {err}", file=sys.stderr)
        return 2
    except ValueError as err:
        # Configuration errors get one clear line; anything else keeps its traceback.
        if type(err).__name__ != "ConfigError":
            raise
        print(f"marft {args.command}: error: {err}", file=sys.stderr)
        return 2

if __name__ == "__main__":
    sys.exit(main())
