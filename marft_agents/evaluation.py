"""Evaluate a policy on a fixed problem set of a registered env.

The problem set is a pure function of ``(seed, n_problems, size of the task source)``: the first
``n_problems`` indices of a permutation seeded with ``seed``, each played with
``reset(options={"task_index": i})``. So two runs, or a trained and an untrained policy, are
scored on exactly the same problems. An episode counts as solved when the env reports its last
graded round as solved (``infos["last_outcome"]["solved"]``, i.e. the env terminated).

Evaluation never disturbs a training run: all RNGs (python, numpy, torch) are restored on exit,
so a run that evaluates every k updates stays bit-identical to one that does not.

Held-out problems come from the env's ``split`` keyword (``eval.env_kwargs: {split: test}``; the
convention is in ``marft_envs/ADDING_AN_ENV.md``). Evaluating an env that has no ``split``, or on
its ``"train"`` split, scores the tasks training draws from: that still works, but it emits a
:class:`TrainingTasksWarning` instead of passing silently.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import math
import random
import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import marft_envs

# torch (and the rollout collector, which needs it) are imported by :func:`evaluate` only: the
# problem set, the standard error and the split check serve ``marft bench`` with a scripted
# policy, which an install without the ``agents`` extra (no torch) can run.


@dataclass
class EvalResult:
    """Accuracy on a fixed problem set."""

    accuracy: float
    """Share of problems solved."""
    stderr: float
    """Standard error of ``accuracy``, clustered by problem statement: sqrt(sum_g (sum_{i in g}
    (y_i - p))^2) / n over the groups g of identical prompts. With all prompts distinct it is the
    binomial sqrt(p (1 - p) / n); a small task space (Arithmetic level 1 has ~42 distinct test
    problems) repeats prompts, whose outcomes are correlated, and the error grows accordingly."""
    n: int
    """Number of problems played."""
    distinct: int = 0
    """Number of distinct problem statements among them."""
    mean_reward: float = 0.0
    """Mean team return per episode."""
    per_task: list[dict[str, Any]] = field(default_factory=list)
    """Per problem: ``task_index``, ``task_id``, ``problem`` (the whole problem, as a single agent
    would see it), ``answer`` (the grader's reference, when JSON-serialisable), ``solved``,
    ``reward``, ``rounds`` and ``transcript`` (``[{"agent", "round", "observation", "text"}]`` in
    the order the agents spoke: what each agent was shown and what it said)."""


class TrainingTasksWarning(UserWarning):
    """The evaluation plays the tasks training draws from, so it measures fit, not generalisation."""


def split_parameter(env_cls: type) -> inspect.Parameter | None:
    """The ``split`` keyword of an env class's constructor (searched along the MRO), or None."""
    for klass in getattr(env_cls, "__mro__", (env_cls,)):
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        param = inspect.signature(init).parameters.get("split")
        if param is not None:
            return param
    return None


def warn_if_training_tasks(env: Any, env_id: str, env_kwargs: dict[str, Any]) -> None:
    """Warn when evaluating ``env`` would score the training tasks (no split, or split "train")."""
    param = split_parameter(type(getattr(env, "unwrapped", env)))
    if param is None and "split" not in env_kwargs:
        warnings.warn(
            f"{env_id} has no 'split' keyword, so the evaluation problems come from the same tasks "
            "training uses: the accuracy measures fit, not generalisation. Give the env a split "
            "(see marft_envs/ADDING_AN_ENV.md) and evaluate with eval.env_kwargs: {split: test}",
            TrainingTasksWarning, stacklevel=3)
        return
    split = env_kwargs.get("split", param.default if param is not None else None)
    if split == "train":
        warnings.warn(
            f"evaluating {env_id} on its 'train' split, the tasks training uses; set "
            "eval.env_kwargs: {split: test} (or another held-out split) for a held-out accuracy",
            TrainingTasksWarning, stacklevel=3)


def problem_indices(num_tasks: int, n_problems: int, seed: int) -> list[int]:
    """The fixed evaluation set: ``min(n_problems, num_tasks)`` distinct task indices."""
    if n_problems < 1:
        raise ValueError(f"n_problems must be >= 1, got {n_problems}")
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0xE7A1]))
    n = min(n_problems, num_tasks)
    if num_tasks > 2**20:  # too large to permute: distinct draws
        chosen: dict[int, None] = {}
        while len(chosen) < n:
            chosen[int(rng.integers(num_tasks))] = None
        return list(chosen)
    return [int(i) for i in rng.permutation(num_tasks)[:n]]


def clustered_stderr(outcomes: list[float], groups: list[Any]) -> float:
    """Standard error of the mean of ``outcomes`` with observations clustered by ``groups``."""
    n = len(outcomes)
    mean = sum(outcomes) / n
    residual_sums: dict[Any, float] = {}
    for y, g in zip(outcomes, groups):
        residual_sums[g] = residual_sums.get(g, 0.0) + (y - mean)
    return math.sqrt(sum(r * r for r in residual_sums.values())) / n


def evaluate(
    policy: Any,
    env_id: str,
    env_kwargs: dict[str, Any] | None = None,
    n_problems: int = 100,
    greedy: bool = True,
    seed: int = 0,
    sampling: Any = None,
    num_envs: int = 8,
    progress: str | None = None,
    world: Any = None,
) -> EvalResult:
    """Play ``n_problems`` fixed problems of ``env_id`` with ``policy`` and score them.

    Args:
        policy: a ``MultiAgentPolicy`` (with whatever adapters it holds: load trained ones first).
        env_kwargs: kwargs for ``marft_envs.make`` (e.g. the test split).
        greedy: greedy decoding; otherwise sampling with ``sampling`` (seeded by ``seed``).
        sampling: a ``SamplingConfig``; None = its defaults. ``greedy`` overrides ``do_sample``.
        num_envs: env instances played in lock-step (batching generation).
        progress: show a progress bar over the problems with this label (None: no bar).
        world: a ``WorldInfo`` of several ranks (``marft_agents/distributed.py``; every rank must
            call): each plays its contiguous share of the problems and the results are gathered
            in problem order, so every rank returns the figures of the whole set. With greedy
            decoding they equal one process's; sampled decoding draws per-rank samples.
    """
    import torch

    from marft_agents.settings.sampling import SamplingConfig
    from marft_agents.rollout import RolloutCollector

    env_kwargs = dict(env_kwargs or {})
    envs = [marft_envs.make(env_id, **env_kwargs) for _ in range(max(1, num_envs))]
    tasks = getattr(envs[0].unwrapped, "tasks", None)
    if tasks is None:
        raise ValueError(f"env {env_id!r} exposes no task source (env.unwrapped.tasks); a fixed "
                         "problem set needs a TextTaskEnv")
    warn_if_training_tasks(envs[0], env_id, env_kwargs)
    indices = problem_indices(len(tasks), n_problems, seed)
    sampling = dataclasses.replace(sampling or SamplingConfig(), do_sample=not greedy)
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(indices), desc=progress, unit="problem", leave=False, dynamic_ncols=True)
        envs = [_TickWhenDone(env, bar) for env in envs]
    mine = list(indices) if world is None else [indices[k] for k in world.share(len(indices))]
    plans = [(int(np.random.SeedSequence([seed, i]).generate_state(1)[0]), {"task_index": i}) for i in mine]
    py_state, np_state = random.getstate(), np.random.get_state()
    per_task: list[dict[str, Any]] = []
    try:
        with torch.random.fork_rng(devices=list(range(torch.cuda.device_count()))):
            torch.manual_seed(seed)
            if plans:
                collector = RolloutCollector(envs[: len(plans)], policy, sampling, values=None, seed=seed)
                rollout = collector.collect(len(plans), plans)
                per_task = [
                    {"task_index": i, "task_id": ep.task_id, "problem": tasks[i].prompt,
                     "answer": _plain(tasks[i].answer), "solved": ep.solved, "reward": ep.team_return,
                     "rounds": ep.rounds,
                     "transcript": [{"agent": d.agent_id, "round": d.round, "observation": d.observation,
                                     "text": d.text} for d in decisions]}
                    for i, ep, decisions in zip(mine, rollout.episodes, rollout.episode_decisions())
                ]
    finally:
        random.setstate(py_state)
        np.random.set_state(np_state)
        if bar is not None:
            bar.close()
    if world is not None:
        import torch.distributed as dist

        parts: list[Any] = [None] * world.world_size
        dist.all_gather_object(parts, per_task)
        per_task = [task for part in parts for task in part]
    prompts = [tasks[i].prompt for i in indices]
    n = len(per_task)
    accuracy = sum(t["solved"] for t in per_task) / n
    return EvalResult(
        accuracy=accuracy,
        stderr=clustered_stderr([float(t["solved"]) for t in per_task], prompts),
        n=n,
        distinct=len(set(prompts)),
        mean_reward=sum(t["reward"] for t in per_task) / n,
        per_task=per_task,
    )


def _plain(value: Any) -> Any:
    """``value`` when it survives JSON (answers, test-case lists), else its ``repr``."""
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        return repr(value)


class _TickWhenDone:
    """An AEC env that advances a progress bar when an episode ends (its last agent leaves).

    Everything but ``step`` is forwarded unchanged, so the collector plays it like the env itself.
    """

    def __init__(self, env: Any, bar: Any):
        self._env, self._bar = env, bar

    def __getattr__(self, name: str) -> Any:
        return getattr(self._env, name)

    def step(self, action: Any) -> None:
        self._env.step(action)
        if not self._env.agents:
            self._bar.update(1)
