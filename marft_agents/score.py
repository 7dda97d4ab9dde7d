"""``marft score``: score a baseline policy once on any registered env and write a leaderboard record.

    marft score --env mylab/Task-v0 --policy scripted:mylab.baselines:always_yes
    marft score --env mylab/Task-v0 --policy baselines/configs/untrained_dual_arithmetic.yaml
    marft score --policy runs/my_run.yaml --checkpoint best      # a trained run (its config's env)

The policy is either ``scripted:module:function`` - ``function(agent, observation, info) -> str``
plays every agent, no model - or a training config (YAML): its model, LoRA, sampling and eval
settings, with untrained adapters (``--checkpoint none``, the default) or a run's adapters
(``latest``, ``best`` or a folder). Either way the env's fixed problem set (see
:mod:`marft_agents.evaluation.problem_set`) is played exactly once; nothing is trained and no training rollout
is collected.

Env keywords: a config's ``env.kwargs`` + ``eval.env_kwargs`` when ``--env`` is its env (none
otherwise), then ``--env-kwargs``; an env with a ``split`` keyword is scored on ``split: test``
unless a split is given (the convention of ``marft_envs/ADDING_AN_ENV.md``).

The record (:class:`marft_agents.evaluation.records.Record`) is written to ``<records>/<name>.json``, the
current folder by default - never into the installed package, and never over another record
(:func:`record_name_for`: the default name says which adapters were scored and gets ``_2``,
``_3``, ... when taken; a taken ``--name`` is refused) - and carries marft's commit and
version beside the env's provider (``env_package``: the plugin's distribution name and version).
``python -m leaderboards.build --records DIR --out DIR/README.md`` renders a folder of records as a
table.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

# Heavy imports (torch via marft_agents.evaluation.problem_set, the env registry) happen inside the functions:
# ``marft_agents.cli`` imports this module to build its parser, and ``marft --help`` stays fast.

from marft_agents.evaluation.scripted import SCRIPTED_PREFIX, ScriptedPolicy, ScriptedPolicyError, load_scripted, load_seats

if TYPE_CHECKING:  # the config loads where a command needs it
    from marft_agents.config import TrainConfig


FORMER_NAME = "bench"
"""The subcommand's former name, still accepted (an argparse alias) with a one-line notice."""


class ScoreError(ValueError):
    """Bad ``marft score`` input (policy spec, env id, env keywords); the message says how to fix it."""


def _envs() -> Any:
    import marft_envs

    return marft_envs


def score_env_kwargs(env_id: str, base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """``base`` then ``extra``; ``split: test`` when the env takes a split and none was given."""
    from marft_agents.evaluation.problem_set import split_parameter

    kwargs = {**base, **extra}
    if "split" not in kwargs and split_parameter(_envs().env_class(env_id)) is not None:
        kwargs["split"] = "test"
    return kwargs


def evaluate_scripted(fn: ScriptedPolicy, env_id: str, env_kwargs: dict[str, Any], n_problems: int,
                      seed: int) -> Any:
    """Play the fixed problem set of ``env_id`` with a scripted policy (same problems and reset
    seeds as :func:`marft_agents.evaluation.problem_set.evaluate`); returns an ``EvalResult``."""
    import numpy as np

    from marft_agents.evaluation.problem_set import EvalResult, clustered_stderr, problem_indices, warn_if_training_tasks

    env = _envs().make(env_id, **env_kwargs)
    tasks = getattr(env.unwrapped, "tasks", None)
    if tasks is None:
        raise ScoreError(f"env {env_id!r} exposes no task source (env.unwrapped.tasks); a fixed "
                         "problem set needs a TextTaskEnv")
    warn_if_training_tasks(env, env_id, env_kwargs)
    per_task = []
    for index in problem_indices(len(tasks), n_problems, seed):
        reset_seed = int(np.random.SeedSequence([seed, index]).generate_state(1)[0])
        env.reset(seed=reset_seed, options={"task_index": index})
        transcript = []
        for agent in env.agent_iter():
            observation, _, terminated, truncated, info = env.last()
            action = None
            if not (terminated or truncated):
                action = fn(agent, observation, info)
                transcript.append({"agent": agent, "round": info.get("round"), "text": action})
            env.step(action)
        history = env.unwrapped.history
        per_task.append({"task_index": index, "task_id": tasks[index].task_id,
                         "solved": bool(history and history[-1].outcome.solved),
                         "reward": float(sum(r.outcome.team_reward for r in history)),
                         "rounds": len(history), "transcript": transcript})
    prompts = [tasks[t["task_index"]].prompt for t in per_task]
    n = len(per_task)
    return EvalResult(accuracy=sum(t["solved"] for t in per_task) / n,
                      stderr=clustered_stderr([float(t["solved"]) for t in per_task], prompts), n=n,
                      distinct=len(set(prompts)), mean_reward=sum(t["reward"] for t in per_task) / n,
                      per_task=per_task)


def evaluate_config(cfg: TrainConfig, env_id: str, env_kwargs: dict[str, Any], n_problems: int, seed: int,
                    checkpoint: Path | None) -> Any:
    """Load the config's model (untrained adapters, or ``checkpoint``'s) and evaluate it once."""
    from marft_agents.run.checkpoint import load_adapters
    from marft_agents.evaluation.problem_set import evaluate
    from marft_agents.run.trainer import load_policy

    agent_ids = list(_envs().make(env_id, **env_kwargs).possible_agents)
    cfg.resolve_hardware()  # the record names the device and dtype used, not "auto"
    # The adapters training built (a critic only for learners that use values), as `marft eval`
    # does: a checkpoint of a critic-less learner (grpo, value_mode None) then loads strictly.
    policy = load_policy(cfg, agent_ids)
    if checkpoint is not None:
        policy.load_adapter_state_dict(load_adapters(checkpoint))
    return evaluate(policy, env_id, env_kwargs, n_problems=n_problems, greedy=cfg.eval.greedy, seed=seed,
                    sampling=cfg.sampling, num_envs=cfg.eval.num_envs,
                    scripted=load_seats(cfg.scripted_seats, agent_ids))  # ScriptedPolicyError: one line


def _updates_of(checkpoint: Path | None) -> int | None:
    """Training updates behind the evaluated adapters: 0 untrained, None when not recorded."""
    if checkpoint is None:
        return 0
    meta = checkpoint / "meta.json"
    return json.loads(meta.read_text()).get("update") if meta.is_file() else None


def _config_dict(cfg: TrainConfig) -> dict[str, Any]:
    from marft_agents.config import config_to_dict

    return config_to_dict(cfg)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", text).strip("_").lower()


def record_name_for(records_dir: Path, name: str | None, env_id: str, policy: str,
                    checkpoint: Path | None) -> str:
    """The record's name, never one already in ``records_dir``: ``--name`` as given (refused when
    taken), else ``score_<env>_<policy>``, with a config policy's adapters (``untrained``, the
    checkpoint folder or ``best``) after it, and ``_2``, ``_3``, ... when that is taken too."""
    if name is not None:
        if (records_dir / f"{name}.json").exists():
            raise FileExistsError(f"{records_dir / (name + '.json')} exists: marft score never overwrites a record; "
                                  "pass another --name, or delete that file first")
        return name
    scripted = policy.startswith(SCRIPTED_PREFIX)
    label = policy.rsplit(":", 1)[-1] if scripted else Path(policy).stem
    base = f"score_{_slug(env_id)}_{_slug(label)}"
    if not scripted:
        base += f"_{_slug(checkpoint.name) if checkpoint is not None else 'untrained'}"
    found, k = base, 1
    while (records_dir / f"{found}.json").exists():
        k += 1
        found = f"{base}_{k}"
    return found


def run_score(policy: str, env_id: str | None = None, env_kwargs: dict[str, Any] | None = None,
              n_problems: int | None = None, seed: int | None = None, name: str | None = None,
              records_dir: str | Path | None = None, checkpoint: str | None = "none",
              overrides: dict[str, Any] | None = None) -> Path:
    """Evaluate ``policy`` once on ``env_id`` and write its record; returns the record's path.

    Args:
        policy: ``scripted:module:function`` or a training-config path.
        env_id: the env (default for a config: its ``env.id``).
        env_kwargs: env keywords on top of the config's (see the module docstring).
        n_problems / seed: the problem set (defaults: the config's ``eval`` section, else 100 / 1234).
        records_dir: where ``<name>.json`` goes (default: the current folder).
        checkpoint: config policies only: ``none``, ``latest``, ``best`` or a folder.
        overrides: ``{"section.key": value}`` for the config.
    """
    from marft_agents.evaluation.records import Record, env_task_revision, git_commit, write_record
    from marft_envs.registry import installed_marft_version

    marft_envs = _envs()

    scripted = policy.startswith(SCRIPTED_PREFIX)
    if scripted:
        if env_id is None:
            raise ScoreError("a scripted policy needs --env ID (the env to play)")
        fn, cfg = load_scripted(policy), None
        base: dict[str, Any] = {}
    else:
        from marft_agents.config import load_config

        cfg = load_config(policy, overrides or {})
        env_id = env_id or cfg.env.id
        base = {**cfg.env.kwargs, **cfg.eval.env_kwargs} if env_id == cfg.env.id else {}
    ckpt = None
    if cfg is not None:  # before torch and the model: a bad --checkpoint or model name is one line at once
        from marft_agents.env_check import resolve_checkpoint
        from marft_agents.model.source import check_model_source

        ckpt = resolve_checkpoint(cfg.output_dir, checkpoint)
        check_model_source(cfg.model)
    records_dir = Path(records_dir) if records_dir is not None else Path.cwd()
    record_name = record_name_for(records_dir, name, env_id, policy, ckpt)
    if env_id not in marft_envs.list_envs():
        raise ScoreError(f"unknown environment id {env_id!r}; registered: {', '.join(marft_envs.list_envs())} "
                         "(`marft envs --verbose` shows where each comes from)")
    kwargs = score_env_kwargs(env_id, base, env_kwargs or {})
    n_problems = n_problems or (cfg.eval.n_problems if cfg else 100)
    seed = seed if seed is not None else (cfg.eval.seed if cfg else 1234)
    commit = git_commit()
    started = time.perf_counter()
    if scripted:
        result = evaluate_scripted(fn, env_id, kwargs, n_problems, seed)
    else:
        result = evaluate_config(cfg, env_id, kwargs, n_problems, seed, ckpt)
    seconds = time.perf_counter() - started
    source = marft_envs.env_source(env_id)
    record = Record(
        name=record_name,
        env_id=env_id,
        env_kwargs=kwargs,
        algorithm="scripted" if scripted else (cfg.algorithm if ckpt is not None else "none"),
        model=policy if scripted else cfg.model.name_or_path,
        agent_models={} if scripted else cfg.agent_models(list(marft_envs.make(env_id, **kwargs).possible_agents)),
        eval_after={"accuracy": result.accuracy, "stderr": result.stderr, "n": result.n,
                    "distinct": result.distinct, "mean_reward": result.mean_reward,
                    "greedy": True if scripted else cfg.eval.greedy, "seed": seed},
        budget={"updates": _updates_of(ckpt), "eval_seconds": round(seconds, 1)},
        task_revision=env_task_revision(env_id, kwargs),  # which split it drew from: older ones are flagged
        config={"policy": policy, **({"checkpoint": str(ckpt)} if ckpt else {}),
                **({} if scripted else {"train_config": _config_dict(cfg)})},
        commit=commit,
        marft_version=installed_marft_version() or marft_envs.__version__,
        env_package={"distribution": source.distribution, "version": source.version,
                     "entry_point": source.entry_point, "origin": source.origin},
    )
    return write_record(record, records_dir)


def cmd_score(args: argparse.Namespace) -> int:
    import yaml

    from marft_agents.cli_args import parse_overrides

    if getattr(args, "command", "score") == FORMER_NAME:
        print(f"marft {FORMER_NAME} is now marft score", file=sys.stderr)
    overrides = parse_overrides(args.set)
    env_kwargs = yaml.safe_load(args.env_kwargs) if args.env_kwargs else {}
    try:
        if not isinstance(env_kwargs, dict):
            raise ScoreError(f"--env-kwargs must be a YAML mapping such as '{{split: test}}', got {args.env_kwargs!r}")
        path = run_score(args.policy, args.env, env_kwargs, args.n, args.seed, args.name, args.records,
                         args.checkpoint, overrides)
    except (ScoreError, ScriptedPolicyError) as err:
        print(f"marft score: error: {err}", file=sys.stderr)
        return 2
    after = json.loads(path.read_text())["eval_after"]
    print(f"accuracy {after['accuracy']:.3f} +- {after['stderr']:.3f} (n={after['n']}), "
          f"mean reward {after['mean_reward']:.3f}")
    print(f"leaderboard record: {path}")
    return 0


def add_score_parser(sub: Any) -> None:
    """The ``marft score`` subcommand (called from ``marft_agents.cli.build_parser``)."""
    score = sub.add_parser("score", aliases=[FORMER_NAME],
                           help="score a baseline policy once on an env and write a leaderboard record")
    score.add_argument("--env", help="registered env id (default for a config policy: its env.id)")
    score.add_argument("--policy", required=True,
                       help="'scripted:module:function' (fn(agent, observation, info) -> str) or a config YAML")
    score.add_argument("--env-kwargs", help="env keywords as a YAML mapping, e.g. '{split: test, horizon: 2}'")
    score.add_argument("--checkpoint", default="none",
                       help="config policies: 'none' (untrained adapters), 'latest', 'best' or a folder")
    score.add_argument("--n", type=int, help="number of problems (default: the config's eval.n_problems, else 100)")
    score.add_argument("--seed", type=int, help="problem-set seed (default: the config's eval.seed, else 1234)")
    score.add_argument("--name", help="record name (default: score_<env>_<policy>[_<checkpoint>], with _2, _3, "
                       "... when taken; a record is never overwritten)")
    score.add_argument("--records", type=Path, default=None,
                       help="folder for <name>.json (default: the current folder)")
    score.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a config field")
    score.set_defaults(func=cmd_score)


def print_env_details() -> int:
    """``marft envs --verbose``: each env's default profile, agents and providing package."""
    marft_envs = _envs()
    for env_id in marft_envs.list_envs():
        info = marft_envs.describe_env(env_id)
        package = " ".join(p for p in (info["distribution"], info["version"]) if p) or "not an installed package"
        print(env_id)
        if info["error"]:
            print(f"    agents:  ? (cannot load: {info['error']})")
        elif info["agents"] is not None:
            print(f"    agents:  {', '.join(info['agents'])} (default profile {info['default_profile']!r})")
        print(f"    package: {package} [{info['origin']}: {info['entry_point']}]")
    return 0
