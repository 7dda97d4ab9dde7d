"""Evaluate a policy on a fixed problem set of a registered env.

The problem set is a pure function of ``(seed, n_problems, size of the task source)``: the first
``n_problems`` indices of a permutation seeded with ``seed``, each played with
``reset(options={"task_index": i})``. So two runs, or a trained and an untrained policy, are
scored on exactly the same problems. An episode counts as solved when the env reports its last
graded round as solved (``infos["last_outcome"]["solved"]``, i.e. the env terminated).

Evaluation never disturbs a training run: all RNGs (python, numpy, torch) are restored on exit,
so a run that evaluates every k updates stays bit-identical to one that does not.

Sampled evaluation (``samples_per_problem = k > 1``, ``greedy`` off) plays the set ``k`` times, in
passes: pass ``j`` seeds torch with :func:`sample_seed` ``(seed, j)`` and resets each problem with
its own seed, so every sample is a deterministic function of ``(seed, j, num_envs)`` and the
passes draw differently. Pass 0 is exactly the ``k = 1`` sampled evaluation. The result then
also reports **avg@k** (mean success over all ``n k`` samples: the expected accuracy of one sample)
and **pass@k** (share of problems solved by at least one of its samples; :func:`pass_at_k` is the
unbiased estimator of Chen et al. 2021, which with ``k`` of ``k`` samples is "any solved"), each
with a standard error clustered by problem statement (a problem's samples are correlated).

Staged problems: an env whose problems are solved in stages (Relay level 4: the reducer passes A
+ B, the answerer adds C) reports for each graded round whether each stage was passed, as
``infos[agent]["last_outcome"]["info"]["stages"]``, a dict stage name -> bool (see
:mod:`marft_envs.envs.relay`, "Stages"). The evaluation keeps the stages of each episode's last
graded round (the round whose ``solved`` counts) in its ``per_task`` entry (and in each sample's),
and the result reports every stage's pass rate over the plays that reported it, with its
clustered standard error and its count (:data:`STAGE_FIGURES`). An env that reports no stages
adds nothing: the result and its figures are as before.

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
import time
import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import marft_envs

# torch (and the rollout collector, which needs it) are imported by :func:`evaluate` only: the
# problem set, the standard error and the split check serve ``marft score`` with a scripted
# policy, which an install without the ``agents`` extra (no torch) can run.


@dataclass
class EvalResult:
    """Accuracy on a fixed problem set."""

    accuracy: float
    """Share of problems solved; with several samples per problem, the share of samples that
    solved theirs (= ``avg_at_k``)."""
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
    ``reward``, ``rounds``, ``transcript`` (``[{"agent", "round", "observation", "text"}]`` in
    the order the agents spoke: what each agent was shown and what it said) and, when the env
    reports them, ``stages`` (stage name -> passed, of the episode's last graded round). With
    several samples per problem these are the first sample's, and ``samples`` lists every sample's
    ``{"pass", "solved", "reward", "rounds"}`` (and ``stages``) in pass order (transcripts of the
    first only, to keep it small)."""
    samples_per_problem: int = 1
    """Samples drawn per problem (``k``); 1 = one play per problem (greedy or sampled)."""
    avg_at_k: float = 0.0
    """Mean success over all samples (avg@k); with k = 1 the accuracy."""
    avg_at_k_stderr: float = 0.0
    """Standard error of ``avg_at_k``, clustered by problem statement (a problem's k samples, and
    repeated statements, are one cluster)."""
    pass_at_k: float = 0.0
    """Mean over problems of the unbiased pass@k estimate (:func:`pass_at_k`; with k of k samples:
    share of problems some sample solved); with k = 1 the accuracy."""
    pass_at_k_stderr: float = 0.0
    """Standard error of ``pass_at_k``, the per-problem estimates clustered by problem statement."""
    seconds: float = 0.0
    """Wall-clock seconds :func:`evaluate` took (building the envs to the gathered result); 0 where
    the result was not timed (built by :func:`score` alone). Logged as ``eval/seconds``."""
    stage_pass: dict[str, float] = field(default_factory=dict)
    """Stage name -> share of the plays (every sample) that passed it, in the order the env
    reports the stages; empty when the env reports none (module docstring, "Staged problems")."""
    stage_stderr: dict[str, float] = field(default_factory=dict)
    """Stage name -> standard error of its pass rate, clustered by problem statement."""
    stage_n: dict[str, int] = field(default_factory=dict)
    """Stage name -> the plays that reported it (the rate's denominator)."""

    def figures(self) -> dict[str, Any]:
        """The plain-data summary (no per-problem lists): the accuracy and its error, with several
        samples per problem also ``samples_per_problem``, avg@k and pass@k with theirs, and when
        the env reports stages the per-stage pass rates with their errors and counts."""
        out: dict[str, Any] = {"accuracy": self.accuracy, "stderr": self.stderr, "n": self.n,
                               "distinct": self.distinct, "mean_reward": self.mean_reward}
        if self.samples_per_problem > 1:
            out.update({name: getattr(self, name) for name in SAMPLED_FIGURES})
        if self.stage_pass:
            out.update({name: dict(getattr(self, name)) for name in STAGE_FIGURES})
        return out


SAMPLED_FIGURES = ("samples_per_problem", "avg_at_k", "avg_at_k_stderr", "pass_at_k", "pass_at_k_stderr")
"""The :class:`EvalResult` fields a sampled evaluation (k > 1) adds to :meth:`EvalResult.figures`."""
STAGE_FIGURES = ("stage_pass", "stage_stderr", "stage_n")
"""The :class:`EvalResult` fields (each stage name -> figure) an evaluation of an env that reports
stages adds to :meth:`EvalResult.figures`."""
STAGES_KEY = "stages"
"""Where an env reports a round's stages (``last_outcome["info"][STAGES_KEY]``) and where a
``per_task`` entry (and each of its samples) keeps them."""


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


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased estimate of pass@k from ``n`` samples of which ``c`` solved the problem (Chen et
    al. 2021): ``1 - C(n - c, k) / C(n, k)``, the chance that ``k`` samples drawn without
    replacement from the ``n`` include a solved one. With ``k = n`` it is 1 when ``c > 0``."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def sample_seed(seed: int, sample: int) -> int:
    """The torch seed of sample pass ``sample`` of an evaluation seeded with ``seed``; pass 0 uses
    ``seed`` itself, so a one-sample evaluation is unchanged by the passes' existence."""
    if sample == 0:
        return seed
    return int(np.random.SeedSequence([seed, 0x5A3E, sample]).generate_state(1)[0])


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
    samples_per_problem: int = 1,
    scripted: dict[str, Any] | None = None,
) -> EvalResult:
    """Play ``n_problems`` fixed problems of ``env_id`` with ``policy`` and score them.

    Args:
        policy: a ``MultiAgentPolicy`` (with whatever adapters it holds: load trained ones first).
        env_kwargs: kwargs for ``marft_envs.make`` (e.g. the test split).
        greedy: greedy decoding; otherwise sampling with ``sampling`` (seeded by ``seed``).
        sampling: a ``SamplingConfig``; None = its defaults. ``greedy`` overrides ``do_sample``.
        num_envs: env instances played in lock-step (batching generation).
        progress: show a progress bar over the problems with this label (None: no bar).
        world: a ``WorldInfo`` of several ranks (``marft_agents/runtime/distributed.py``; every rank must
            call): each plays its contiguous share of the problems and the results are gathered
            in problem order, so every rank returns the figures of the whole set. With greedy
            decoding they equal one process's; sampled decoding draws per-rank samples.
        samples_per_problem: plays of each problem (k); k > 1 needs sampling (``greedy`` False)
            and adds avg@k and pass@k to the result (see the module docstring).
        scripted: seats played by scripted policies (agent id -> ``fn(agent, observation, info)``;
            the run's ``scripted_seats``, see ``marft_agents.collector``).
    """
    import torch

    from marft_agents.runtime.seeding import fork_rng

    k = samples_per_problem
    _check_samples_per_problem(k, greedy)
    started = time.perf_counter()
    env_kwargs = dict(env_kwargs or {})
    envs, tasks = _problem_envs(env_id, env_kwargs, num_envs)
    warn_if_training_tasks(envs[0], env_id, env_kwargs)
    indices = problem_indices(len(tasks), n_problems, seed)
    sampling = _decoding(sampling, greedy)
    bar = _progress_bar(progress, len(indices) * k)
    stages: dict[int, dict[str, bool]] = {}  # task index -> its stages, this pass
    envs = [_Watched(env, bar, stages) for env in envs]
    mine = list(indices) if world is None else [indices[j] for j in world.share(len(indices))]
    py_state, np_state = random.getstate(), np.random.get_state()
    per_task: list[dict[str, Any]] = []
    try:
        with fork_rng(policy.device):  # this process's CPU and GPU RNG, not other ranks' GPUs
            for j in range(k if mine else 0):
                stages.clear()
                torch.manual_seed(sample_seed(seed, j))
                rollout = _play_pass(envs, policy, sampling, seed, mine, j, scripted)
                if j == 0:
                    per_task = _task_records(mine, rollout, tasks, stages)
                if k > 1:
                    _add_samples(per_task, rollout, j, stages)
    finally:
        random.setstate(py_state)
        np.random.set_state(np_state)
        if bar is not None:
            bar.close()
    per_task = _gathered(per_task, world)
    prompts = [tasks[i].prompt for i in indices]
    return dataclasses.replace(score(per_task, prompts, k), seconds=time.perf_counter() - started)


def _check_samples_per_problem(k: Any, greedy: bool) -> None:
    """Refuse a ``samples_per_problem`` that is not a positive int, or k > 1 plays of one greedy
    answer (they would all be the same play)."""
    if not isinstance(k, int) or k < 1:
        raise ValueError(f"samples_per_problem must be an int >= 1, got {k!r}")
    if k > 1 and greedy:
        raise ValueError(f"samples_per_problem = {k} with greedy decoding would play the same answer {k} "
                         "times; set greedy false (sampling) or samples_per_problem 1")


def _problem_envs(env_id: str, env_kwargs: dict[str, Any], num_envs: int) -> tuple[list[Any], Any]:
    """``num_envs`` (at least 1) instances of ``env_id`` and the task source of the first: the
    fixed problem set is drawn from it, so an env without one (not a ``TextTaskEnv``) is refused."""
    envs = [marft_envs.make(env_id, **env_kwargs) for _ in range(max(1, num_envs))]
    tasks = getattr(envs[0].unwrapped, "tasks", None)
    if tasks is None:
        raise ValueError(f"env {env_id!r} exposes no task source (env.unwrapped.tasks); a fixed "
                         "problem set needs a TextTaskEnv")
    return envs, tasks


def _decoding(sampling: Any, greedy: bool) -> Any:
    """The evaluation's ``SamplingConfig``: ``sampling`` (None: the defaults) with ``do_sample``
    set by ``greedy``, which overrides it."""
    from marft_agents.settings.sampling import SamplingConfig

    return dataclasses.replace(sampling or SamplingConfig(), do_sample=not greedy)


def _progress_bar(progress: str | None, total: int) -> Any:
    """A tqdm bar over ``total`` plays labelled ``progress``; None when no label is given."""
    if not progress:
        return None
    from tqdm import tqdm

    return tqdm(total=total, desc=progress, unit="problem", leave=False, dynamic_ncols=True)


def _play_pass(envs: list[Any], policy: Any, sampling: Any, seed: int, mine: list[int], sample: int,
               scripted: dict[str, Any] | None) -> Any:
    """Sample pass ``sample``: play each of this rank's problems ``mine`` once, an env reset with
    its own seed per problem and pass; returns the collector's rollout (episodes in ``mine`` order)."""
    from marft_agents.collector import RolloutCollector

    plans = [(_reset_seed(seed, i, sample), {"task_index": i}) for i in mine]
    collector = RolloutCollector(envs[: len(plans)], policy, sampling, values=None, seed=seed,
                                 scripted=scripted)
    return collector.collect(len(plans), plans)


def _task_records(mine: list[int], rollout: Any, tasks: Any, stages: dict[int, dict[str, bool]]
                  ) -> list[dict[str, Any]]:
    """One record per problem of pass 0: the problem, its answer, the outcome, the transcript of
    every decision and the stages the env reported (the per-task entries ``score`` reads and
    ``eval_*.json`` holds)."""
    per_task = [
        {"task_index": i, "task_id": ep.task_id, "problem": tasks[i].prompt,
         "answer": _plain(tasks[i].answer), "solved": ep.solved, "reward": ep.team_return,
         "rounds": ep.rounds,
         "transcript": [{"agent": d.agent_id, "round": d.round, "observation": d.observation,
                         "text": d.text} for d in decisions]}
        for i, ep, decisions in zip(mine, rollout.episodes, rollout.episode_decisions())
    ]
    for task in per_task:
        task.update(_stages_of(stages, task["task_index"]))
    return per_task


def _add_samples(per_task: list[dict[str, Any]], rollout: Any, sample: int,
                 stages: dict[int, dict[str, bool]]) -> None:
    """Append pass ``sample``'s outcome of each problem to its record's ``samples`` (k > 1 only:
    avg@k and pass@k are scored from them)."""
    for task, ep in zip(per_task, rollout.episodes):
        task.setdefault("samples", []).append(
            {"pass": sample, "solved": ep.solved, "reward": ep.team_return, "rounds": ep.rounds,
             **_stages_of(stages, task["task_index"])})


def _gathered(per_task: list[dict[str, Any]], world: Any) -> list[dict[str, Any]]:
    """Every rank's records in problem order (each rank played a contiguous share); ``per_task``
    itself in a single process."""
    if world is None:
        return per_task
    import torch.distributed as dist

    parts: list[Any] = [None] * world.world_size
    dist.all_gather_object(parts, per_task)
    return [task for part in parts for task in part]

def score(per_task: list[dict[str, Any]], prompts: list[str], k: int = 1) -> EvalResult:
    """The :class:`EvalResult` of played problems (``per_task`` entries as :func:`evaluate` makes
    them; with ``k > 1`` each holds its ``k`` ``samples``), ``prompts[i]`` the statement of
    problem ``i``: the clustering key of the standard errors."""
    n = len(per_task)
    plays = [t.get("samples", [t]) if k > 1 else [t] for t in per_task]
    if any(len(p) != k for p in plays):
        raise ValueError(f"every problem needs {k} samples, got {[len(p) for p in plays]}")
    outcomes = [float(s["solved"]) for p in plays for s in p]
    groups = [prompt for prompt, p in zip(prompts, plays) for _ in p]
    avg = sum(outcomes) / len(outcomes)
    avg_stderr = clustered_stderr(outcomes, groups)
    passes = [pass_at_k(k, sum(bool(s["solved"]) for s in p), k) for p in plays]
    stage_figures = score_stages([(prompt, s.get(STAGES_KEY)) for prompt, p in zip(prompts, plays) for s in p])
    return EvalResult(
        accuracy=avg,
        stderr=avg_stderr,
        n=n,
        distinct=len(set(prompts)),
        mean_reward=sum(s["reward"] for p in plays for s in p) / len(outcomes),
        per_task=per_task,
        samples_per_problem=k,
        avg_at_k=avg,
        avg_at_k_stderr=avg_stderr,
        pass_at_k=sum(passes) / n,
        pass_at_k_stderr=clustered_stderr(passes, prompts),
        **stage_figures,
    )


def score_stages(plays: list[tuple[Any, dict[str, bool] | None]]) -> dict[str, dict[str, Any]]:
    """The per-stage figures (:data:`STAGE_FIGURES`) of ``plays``, each (clustering key: the
    problem statement, its stages or None): for every stage name, in the order first reported, the
    share of the plays reporting it that passed it, its clustered standard error and the count.
    All empty when no play reports stages."""
    names = list(dict.fromkeys(name for _, stages in plays for name in stages or {}))
    out: dict[str, dict[str, Any]] = {figure: {} for figure in STAGE_FIGURES}
    for name in names:
        reported = [(key, float(bool(stages[name]))) for key, stages in plays if stages and name in stages]
        outcomes = [y for _, y in reported]
        out["stage_pass"][name] = sum(outcomes) / len(outcomes)
        out["stage_stderr"][name] = clustered_stderr(outcomes, [key for key, _ in reported])
        out["stage_n"][name] = len(outcomes)
    return out


def _reset_seed(seed: int, task_index: int, sample: int) -> int:
    """The env reset seed of ``sample`` of problem ``task_index`` (sample 0: as a one-sample run)."""
    key = [seed, task_index] if sample == 0 else [seed, task_index, sample]
    return int(np.random.SeedSequence(key).generate_state(1)[0])


def _plain(value: Any) -> Any:
    """``value`` when it survives JSON (answers, test-case lists), else its ``repr``."""
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        return repr(value)


def _stages_of(stages: dict[int, dict[str, bool]], task_index: int) -> dict[str, Any]:
    """``{"stages": ...}`` of the problem ``task_index`` this pass when its env reported stages, else {}."""
    return {STAGES_KEY: dict(stages[task_index])} if task_index in stages else {}


class _Watched:
    """An AEC env watched for what the evaluation keeps of each episode beyond the collector's
    record: when an episode ends (its last agent leaves) it advances the progress bar (if any)
    and keeps the stages its last graded round reported (``last_outcome["info"]["stages"]``) in
    ``stages`` under the task index it was reset with (each index is played once per pass).

    Everything but ``reset`` and ``step`` is forwarded unchanged, so the collector plays it like
    the env itself.
    """

    def __init__(self, env: Any, bar: Any, stages: dict[int, dict[str, bool]]):
        self._env, self._bar, self._stages = env, bar, stages
        self._index: int | None = None
        self._last: dict[str, bool] | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._env, name)

    def reset(self, seed: int | None = None, options: dict | None = None) -> None:
        self._index, self._last = (options or {}).get("task_index"), None
        self._env.reset(seed=seed, options=options)

    def step(self, action: Any) -> None:
        self._env.step(action)
        # Every agent's info holds the last graded round's outcome until the agent leaves.
        info = next(iter(self._env.infos.values()), {})
        reported = ((info.get("last_outcome") or {}).get("info") or {}).get(STAGES_KEY)
        if reported is not None:
            self._last = reported
        if not self._env.agents:
            if self._bar is not None:
                self._bar.update(1)
            if self._last is not None and self._index is not None:
                self._stages[self._index] = self._last
