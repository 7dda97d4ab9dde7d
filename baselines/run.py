"""Run one baseline config end to end and record it on the leaderboard.

    python -m baselines.run baselines/configs/marft_a_arithmetic.yaml [--resume] [--set key=value ...]

Trains with ``marft train`` (evaluating the untrained policy first; its trainer closes the rollout
engine when training ends), then writes
``leaderboards/records/<name>.json`` from the run's own files (``summary.json``, ``metrics.jsonl``
and the per-problem outcomes of every evaluation in ``evals/``) and regenerates
``leaderboards/README.md``. The record's name is the config file's stem unless ``--name`` is
given. Nothing in a record is typed by hand.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import marft_envs
from leaderboards.build import build
from leaderboards.records import (RECORDS_DIR, Record, code_digest, env_task_revision, eval_outcomes, git_commit,
                                  training_diagnostics, transcript_sample, write_record)
from marft_agents.cli import INTERRUPTED_EXIT
from marft_agents.cli import main as marft_main
from marft_agents.config import TrainConfig, config_to_dict, load_config
from marft_agents.evaluation.records import stage_figures
from marft_agents.run.metrics import read_metrics


def dedupe_by_step(rows: list[dict]) -> list[dict]:
    """Metric rows with one row per step, the last logged (a resumed run re-logs the updates
    after its last checkpoint), in step order; step 0 keeps its untrained evaluation."""
    by_step: dict[int, dict] = {}
    for row in rows:
        by_step[row["step"]] = row
    return [by_step[step] for step in sorted(by_step)]


def read_eval_outcomes(out: Path, updates: list[int]) -> dict[int, dict[str, Any]]:
    """The per-problem outcomes the trainer kept of the evaluations at ``updates`` (update -> file
    content); evaluations without a file (a run from before the trainer kept them) are left out."""
    from marft_agents.run.trainer import EVAL_OUTCOMES_DIR  # imports torch: not at module level

    found = {}
    for update in updates:
        path = out / EVAL_OUTCOMES_DIR / f"update_{update:06d}.json"
        if path.is_file():
            found[update] = json.loads(path.read_text(encoding="utf-8"))
    return found


def build_record(cfg: TrainConfig, name: str, commit: str, code: str = "") -> Record:
    """The leaderboard record of a finished run, read from its ``summary.json``, ``metrics.jsonl``
    and ``evals/``: the eval curve with the episodes and sampled tokens at each point, per-update
    diagnostics, the final evaluation's per-problem outcomes and a transcript sample; ``commit``
    and ``code`` (:func:`code_digest`) are those of the code when training started."""
    out = Path(cfg.output_dir)
    summary = json.loads((out / "summary.json").read_text())
    rows = dedupe_by_step(read_metrics(out / "metrics.jsonl"))
    wall = sum(r.get("time/rollout_s", 0) + r.get("time/update_s", 0) for r in rows)
    evaluated = [r for r in rows if r.get("eval/accuracy") is not None]
    outcomes = read_eval_outcomes(out, [r["step"] for r in evaluated])
    final = summary["counters"]["update"]
    env_kwargs = {**cfg.env.kwargs, **cfg.eval.env_kwargs}
    return Record(
        name=name,
        env_id=cfg.env.id,
        env_kwargs=env_kwargs,
        algorithm=cfg.algorithm,
        model=cfg.model.name_or_path,
        eval_before=summary.get("eval_before"),
        eval_after={**summary["eval_after"], "greedy": cfg.eval.greedy},
        eval_best=summary.get("eval_best"),
        eval_curve=[{"update": r["step"], "episodes": int(r.get("counters/episodes") or 0),
                     "sampled_tokens": int(r.get("counters/tokens") or 0), "accuracy": r["eval/accuracy"],
                     "stderr": r["eval/stderr"], "train_seconds": round(r.get("time/train_seconds") or 0.0, 1),
                     **(stage_figures(outcomes[r["step"]]["per_task"]) if r["step"] in outcomes else {})}
                    for r in evaluated],
        budget={"updates": final, "episodes": summary["counters"]["episodes"],
                "tokens": summary["counters"]["tokens"], "wall_clock_s": round(wall, 1)},
        diagnostics=training_diagnostics(rows),
        eval_outcomes=eval_outcomes(outcomes[final]["per_task"], final) if final in outcomes else None,
        transcripts=[{"update": update, "episodes": kept["episodes"], "problems": transcript_sample(kept["per_task"])}
                     for update, kept in sorted(outcomes.items())],
        task_revision=env_task_revision(cfg.env.id, env_kwargs),
        config=config_to_dict(cfg),
        agent_models=cfg.agent_models(list(marft_envs.make(cfg.env.id, **cfg.env.kwargs).possible_agents)),
        commit=commit,
        code=code,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("config", type=Path)
    parser.add_argument("--name", help="record name (default: the config file's stem)")
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--records", type=Path, default=RECORDS_DIR)
    args = parser.parse_args(argv)

    train_args = ["train", "--config", str(args.config), "--quiet"] + [f"--set={s}" for s in args.set]
    if args.resume:
        train_args.append("--resume")
    commit, code_state = git_commit(), code_digest()  # the code that trains, even if HEAD moves during a long run
    try:
        code = marft_main(train_args)
    except KeyboardInterrupt as err:  # stopped at once (a second SIGINT): one line at the command
        if argv is not None:  # called from Python: the caller owns the interrupt
            raise
        print(f"baselines.run: {err or 'interrupted (SIGINT)'}", file=sys.stderr)
        return INTERRUPTED_EXIT
    if code:
        return code
    overrides = dict(s.split("=", 1) for s in args.set)
    import yaml

    # resolved like the run's (device and dtype named, not "auto"): the record says what ran
    cfg = load_config(args.config, {k: yaml.safe_load(v) for k, v in overrides.items()}).resolve_hardware()
    record = build_record(cfg, args.name or args.config.stem, commit, code_state)
    path = write_record(record, args.records)
    (args.records.parent / "README.md").write_text(build(args.records), encoding="utf-8")
    print(f"leaderboard record: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
