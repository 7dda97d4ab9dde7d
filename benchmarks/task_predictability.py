"""Why the critic lags: how reliable are the problems' success rates, and what predicts them?

A critic's value of a task's first decision is, at best, the task's success probability under the
policy. How well any critic can do is bounded twice: by how much the problems really differ (a
success rate measured from few samples is mostly noise), and by what the critic can read. This
study plays a fixed problem set ``k`` times and measures both, over problems:

1. **Success rates**: problem ``i``'s ``k`` sampled team episodes (the standard sampled
   evaluation, ``evaluation/problem_set.py``) give ``p_i``, the share solved.
2. **Split-half reliability** ``rho``: the correlation over problems of the mean of the first
   ``k/2`` samples with that of the last ``k/2``, Spearman-Brown corrected to ``k`` samples
   (``2 r / (1 + r)``). ``rho`` estimates the share of the between-problem variance of ``p_i``
   that is true difference between problems, not sampling noise: the ceiling of any predictor's
   ``R^2`` against ``p_i``. A binomial estimate of the same share (``1 - mean p(1 - p) / (k - 1) /
   var p``) is reported beside it as a cross-check.
3. **Predictors**, each scored by its out-of-fold ``R^2`` over problems (K folds by problem, a
   fixed shuffle; every fit, ridge strength included, uses the training folds only):

   * *size class*: the training folds' mean success of the problem's class (:func:`size_class`:
     "hard" when an operand reaches ``--hard-from``; Arithmetic level 8 mixes level-1 sums with
     three-digit ones);
   * *critic features*: a ridge regression on the hidden state the value head reads at the first
     decision (the critic adapter as loaded, no grad), strength chosen by an inner
     cross-validation on the training folds (:class:`Ridge`);
   * *critic features + class*: the class means, then that ridge on what they leave;
   * *critic value*: the value head's own output at that state, one feature, linear;
   * *gold log-prob*: the policy's teacher-forced log-probability of the gold answer written as
     the env expects it (``--answer-format``, default ``\\boxed{<answer>}``), summed over its
     tokens, given the graded agent's prompt in a greedy play of the problem (the teammate's
     message in it is the greedy one, not one of the ``k`` samples); one feature, linear.

   ``R^2 / rho`` is each predictor's share of the predictable variance.

Reading it: ``rho`` near 0, the success rates are noise and no critic can do better than the mean;
the class's share near 1, the size class is all there is to learn; the features well below the
class, a better head or more data could help the critic; the features near the class but the
critic's value well below, the head has not learnt what its features hold; the gold log-prob high,
the policy's own confidence tells the hard problems apart.

Usage (the adapters as a run saved them; without ``--adapters`` the base model)::

    python benchmarks/task_predictability.py --config baselines/configs/grid/critic_price.yaml \\
        --adapters runs/grids/critic_price_start/level1/seed0 --problems 200 --samples 16 \\
        --out leaderboards/studies/task_predictability.json

It writes the figures, the per-problem outcomes, the setting and the command to ``--out`` and prints
a markdown table; ``python -m leaderboards.build`` puts that table on ``docs/results.md``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import platform
import re
import shlex
import sys
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

STUDY = "task_predictability"
"""The record's ``study`` field (what ``leaderboards/studies.py`` renders)."""
DEFAULT_OUT = Path("leaderboards/studies/task_predictability.json")
DEFAULT_ALPHAS = tuple(float(10.0 ** e) for e in range(-1, 7))
"""Ridge strengths the inner cross-validation chooses from (on standardised features)."""
HARD_FROM = 100
"""An operand at least this large makes a problem "hard" (:func:`size_class`)."""
ANSWER_FORMAT = "\\boxed{{{answer}}}"
"""The gold answer as the graded agent is asked to write it (``str.format`` with ``answer``)."""
CLASSES = ("easy", "hard")
"""The size classes, in the order they are reported."""
PREDICTORS = (
    ("size_class", "size class"),
    ("critic_features", "ridge on critic features"),
    ("features_and_class", "critic features + class"),
    ("critic_value", "critic value (as trained)"),
    ("gold_logprob", "gold-answer log-prob"),
)
"""Every predictor of the study: record key, label."""

Predictor = Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]
"""``(y of the training rows [m], training rows [m], test rows [t]) -> predictions [t]``."""


# -- reliability --------------------------------------------------------------------------------
def spearman_brown(r: float, factor: float = 2.0) -> float:
    """The reliability of a measure ``factor`` times as long as one whose reliability is ``r``."""
    return factor * r / (1.0 + (factor - 1.0) * r)


def split_half(solved: np.ndarray) -> dict[str, float]:
    """Split-half reliability of the problems' success rates from ``solved [n, k]`` (0/1, samples
    in play order): ``r``, the correlation over problems of the first ``k/2`` samples' mean with
    the last ``k/2``'s, and ``rho``, that corrected to ``k`` samples (:func:`spearman_brown`); nan
    when a half does not vary over problems."""
    n, k = solved.shape
    if k < 2 or k % 2:
        raise ValueError(f"split-half reliability needs an even number of samples per problem >= 2, got {k}")
    first, last = solved[:, : k // 2].mean(1), solved[:, k // 2:].mean(1)  # [n], [n]
    if n < 3 or first.std() == 0 or last.std() == 0:
        return {"r": float("nan"), "rho": float("nan")}
    r = float(np.corrcoef(first, last)[0, 1])
    return {"r": r, "rho": spearman_brown(r)}


def binomial_reliability(solved: np.ndarray) -> float:
    """The true-score share of the between-problem variance of ``p = solved.mean(1)`` (``solved
    [n, k]``), from the binomial noise of a mean of ``k`` draws: ``1 - mean(p (1 - p) / (k - 1)) /
    var(p)`` (both unbiased); nan when ``p`` does not vary."""
    n, k = solved.shape
    p = solved.mean(1)  # [n]
    between = p.var(ddof=1) if n > 1 else 0.0
    if k < 2 or between == 0:
        return float("nan")
    return float(1.0 - (p * (1 - p) / (k - 1)).mean() / between)


def bootstrap_se(solved: np.ndarray, statistic: Callable[[np.ndarray], float], draws: int = 1000,
                 seed: int = 0) -> float:
    """Standard error of ``statistic(solved)`` over problems resampled with replacement (draws
    where it is nan are left out)."""
    rng = np.random.default_rng(seed)
    n = len(solved)
    values = np.array([statistic(solved[rng.integers(n, size=n)]) for _ in range(draws)])
    values = values[np.isfinite(values)]
    return float(values.std(ddof=1)) if len(values) > 1 else float("nan")


# -- out-of-fold prediction -----------------------------------------------------------------------
def fold_ids(n: int, folds: int, seed: int) -> np.ndarray:
    """``[n]`` fold of each row: a seeded shuffle dealt round-robin into ``folds`` folds."""
    if not 2 <= folds <= n:
        raise ValueError(f"need 2 <= folds <= rows, got {folds} folds for {n} rows")
    out = np.empty(n, dtype=int)
    out[np.random.default_rng(seed).permutation(n)] = np.arange(n) % folds
    return out


def r_squared(y: np.ndarray, prediction: np.ndarray) -> float:
    """``1 - sum (y - prediction)^2 / sum (y - mean y)^2``; nan when ``y`` does not vary."""
    total = float(((y - y.mean()) ** 2).sum())
    return 1.0 - float(((y - prediction) ** 2).sum()) / total if total > 0 else float("nan")


def out_of_fold(y: np.ndarray, predictor: Predictor, folds: np.ndarray) -> np.ndarray:
    """``[n]`` predictions of ``y [n]``, each made by ``predictor`` fitted on the other folds."""
    prediction = np.empty(len(y))
    for fold in np.unique(folds):
        test, train = np.flatnonzero(folds == fold), np.flatnonzero(folds != fold)
        prediction[test] = predictor(y[train], train, test)
    return prediction


def out_of_fold_r2(y: np.ndarray, predictor: Predictor, folds: np.ndarray) -> float:
    """:func:`r_squared` of the out-of-fold predictions (:func:`out_of_fold`)."""
    return r_squared(y, out_of_fold(y, predictor, folds))


class ClassMeans:
    """Predicts a row by its class's mean over the training rows (their overall mean for a class
    they lack)."""

    def __init__(self, classes: Sequence[Any]):
        self.classes = np.asarray(classes)

    def __call__(self, y_train: np.ndarray, train: np.ndarray, test: np.ndarray) -> np.ndarray:
        means = {c: y_train[self.classes[train] == c].mean() for c in np.unique(self.classes[train])}
        return np.array([means.get(c, y_train.mean()) for c in self.classes[test]])


def ridge_fit_predict(x_train: np.ndarray, y_train: np.ndarray, x_test: np.ndarray,
                      alpha: float) -> np.ndarray:
    """Ridge regression of ``y_train [m]`` on ``x_train [m, f]``, features standardised and ``y``
    centred on the training rows (the intercept unpenalised); predictions for ``x_test [t, f]``.
    ``alpha = 0`` is least squares (minimum-norm where the features are collinear)."""
    mean, sd = x_train.mean(0), x_train.std(0)  # [f]
    sd = np.where(sd > 0, sd, 1.0)  # a constant feature stays 0
    z, z_test = (x_train - mean) / sd, (x_test - mean) / sd  # [m, f], [t, f]
    u, s, vt = np.linalg.svd(z, full_matrices=False)  # [m, r], [r], [r, f]
    keep = s > s.max(initial=0.0) * 1e-10
    gain = np.where(keep, s / np.where(keep, s * s + alpha, 1.0), 0.0)  # [r]
    w = vt.T @ (gain * (u.T @ (y_train - y_train.mean())))  # [f]
    return z_test @ w + y_train.mean()


class Ridge:
    """Ridge on ``x [n, f]`` whose strength each fit chooses from ``alphas`` by an ``inner``-fold
    cross-validation on the training rows alone; with ``offset``, the ridge fits what that
    predictor leaves on the training rows and adds its prediction (features on top of the class).
    ``chosen`` lists the strength of every fit."""

    def __init__(self, x: np.ndarray, alphas: Sequence[float] = DEFAULT_ALPHAS, inner: int = 5, seed: int = 0,
                 offset: Predictor | None = None):
        self.x = np.asarray(x, dtype=float).reshape(len(x), -1)  # [n, f]
        self.alphas, self.inner, self.seed, self.offset = tuple(alphas), inner, seed, offset
        self.chosen: list[float] = []

    def __call__(self, y_train: np.ndarray, train: np.ndarray, test: np.ndarray) -> np.ndarray:
        base_train = base_test = 0.0
        if self.offset is not None:
            base_train, base_test = self.offset(y_train, train, train), self.offset(y_train, train, test)
        target, x = y_train - base_train, self.x[train]
        alpha = self.alphas[0]
        if len(self.alphas) > 1:
            inner = fold_ids(len(train), min(self.inner, len(train)), self.seed)
            alpha = min(self.alphas, key=lambda a: self._inner_error(x, target, a, inner))
        self.chosen.append(alpha)
        return base_test + ridge_fit_predict(x, target, self.x[test], alpha)

    @staticmethod
    def _inner_error(x: np.ndarray, y: np.ndarray, alpha: float, folds: np.ndarray) -> float:
        """Squared error of strength ``alpha``'s out-of-fold predictions of ``y [m]`` from ``x [m, f]``."""
        fit = lambda y_train, train, test: ridge_fit_predict(x[train], y_train, x[test], alpha)  # noqa: E731
        return float(((y - out_of_fold(y, fit, folds)) ** 2).sum())


def linear(feature: np.ndarray) -> Ridge:
    """Least squares on one feature (a :class:`Ridge` of strength 0)."""
    return Ridge(np.asarray(feature, dtype=float)[:, None], alphas=(0.0,))


# -- the problems ---------------------------------------------------------------------------------
def size_class(problem: str, hard_from: int = HARD_FROM) -> str:
    """"hard" when a number in ``problem`` reaches ``hard_from``, else "easy"."""
    numbers = [int(m) for m in re.findall(r"\d+", problem)]
    if not numbers:
        raise ValueError(f"expected a problem with numbers (e.g. 'Compute 7 + 12.'), got {problem!r}")
    return CLASSES[max(numbers) >= hard_from]


def figures(solved: np.ndarray, classes: Sequence[str], predictors: dict[str, Predictor], folds: int,
            fold_seed: int) -> dict[str, Any]:
    """The study's figures from ``solved [n, k]`` (0/1), each problem's size class and the
    predictors (record key -> :data:`Predictor`): reliability, per-class success, and each
    predictor's out-of-fold ``R^2`` and its share of ``rho``."""
    y = solved.mean(1)  # [n]
    half = split_half(solved)
    rho = half["rho"]
    fold_of = fold_ids(len(y), folds, fold_seed)
    rows = {}
    for key, predictor in predictors.items():
        r2 = out_of_fold_r2(y, predictor, fold_of)
        rows[key] = {"r2_oof": r2, "share_of_rho": r2 / rho if rho > 0 else float("nan")}
        if isinstance(predictor, Ridge) and len(predictor.alphas) > 1:
            rows[key]["alphas_chosen"] = predictor.chosen
    classes = np.asarray(classes)
    return {
        "n_problems": int(len(y)), "samples": int(solved.shape[1]), "mean_success": float(y.mean()),
        "between_var": float(y.var()), "split_half_r": half["r"], "rho": rho,
        "rho_se": bootstrap_se(solved, lambda s: split_half(s)["rho"]),
        "rho_binomial": binomial_reliability(solved),
        "classes": {c: {"n": int((classes == c).sum()), "mean_success": float(y[classes == c].mean())}
                    for c in CLASSES if (classes == c).any()},
        "predictors": rows,
    }


# -- playing and reading the model ----------------------------------------------------------------
def greedy_play(policy: Any, cfg: Any, env_kwargs: dict[str, Any], indices: Sequence[int], num_envs: int,
                scripted: dict[str, Any]) -> list[list[Any]]:
    """Each problem played once with greedy decoding, its critic inputs recorded: the decisions of
    each episode (``Decision``), in ``indices`` order."""
    import marft_envs
    from marft_agents.collector import RolloutCollector

    envs = [marft_envs.make(cfg.env.id, **env_kwargs) for _ in range(max(1, min(num_envs, len(indices))))]
    greedy = dataclasses.replace(cfg.sampling, do_sample=False)
    collector = RolloutCollector(envs, policy, greedy, values="state", seed=cfg.eval.seed, scripted=scripted)
    rollout = collector.collect(len(indices), [(cfg.eval.seed, {"task_index": i}) for i in indices])
    return rollout.episode_decisions()


def critic_reads(policy: Any, firsts: Sequence[Any], batch: int) -> tuple[np.ndarray, np.ndarray]:
    """The hidden state the value head reads at each of the decisions ``firsts`` ``[n, H]`` and its
    value there ``[n]``: the critic adapter as loaded, no grad."""
    import torch

    features, values = [], []
    with torch.no_grad():
        for start in range(0, len(firsts), batch):
            part = firsts[start: start + batch]
            agent = part[0].agent_id
            value, reads = policy.scoring.state_values_with_reads(
                [d.critic_prompt_ids for d in part], agent, [d.critic_prefix_len for d in part],
                policy.value_slots([d.agent_id for d in part], agent, len(part)))
            features.append(reads.rows.float().cpu().numpy())  # [b, H]
            values.append(value.float().cpu().numpy())  # [b]
    return np.concatenate(features), np.concatenate(values)


def gold_logprobs(policy: Any, answering: Sequence[Any], answers: Sequence[str], answer_format: str,
                  temperature: float, batch: int) -> np.ndarray:
    """``[n]`` summed log-probability of each gold answer (``answer_format`` filled with it) under
    the adapter of the agent of ``answering[i]``, teacher-forced after that decision's prompt."""
    import torch

    out = []
    with torch.no_grad():
        for start in range(0, len(answering), batch):
            part, gold = answering[start: start + batch], answers[start: start + batch]
            for adapter in sorted({policy.adapter_for(d.agent_id) for d in part}):
                rows = [j for j, d in enumerate(part) if policy.adapter_for(d.agent_id) == adapter]
                stats = policy.token_logprobs(adapter, [part[j].prompt_ids for j in rows],
                                              [policy.encode_text(answer_format.format(answer=gold[j])) for j in rows],
                                              temperature=temperature, with_entropy=False)
                sums = stats.logprobs.sum(-1).float().cpu().numpy()  # [b]
                out += list(zip([start + j for j in rows], sums))
    return np.array([value for _, value in sorted(out)])


def machine() -> dict[str, Any]:
    """The CPU's model, core count and the flags that decide bf16 and AVX-512 speed."""
    info: dict[str, Any] = {"cpu": platform.processor() or platform.machine(), "cpus": os.cpu_count()}
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return info
    fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    fields = {k.strip(): v.strip() for k, v in fields.items()}
    flags = set(fields.get("flags", "").split())
    info["cpu"] = fields.get("model name", info["cpu"])
    info["flags"] = sorted(flags & {"avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile"})
    return info


def run_study(args: argparse.Namespace, command: str) -> dict[str, Any]:
    """Play, read and score as :func:`main`'s arguments say; the record."""
    import warnings

    import torch

    import marft_envs
    from benchmarks._common import set_threads
    from marft_agents.cli_args import parse_overrides
    from marft_agents.config import load_config
    from marft_agents.evaluation.problem_set import TrainingTasksWarning, evaluate, problem_indices
    from marft_agents.evaluation.records import git_commit
    from marft_agents.run.checkpoint import load_adapters
    from marft_agents.run.trainer import build_policy, scripted_seats

    seconds: dict[str, float] = {}
    clock = time.perf_counter()

    def lap(phase: str) -> None:
        nonlocal clock
        seconds[phase] = round(time.perf_counter() - clock, 1)
        clock = time.perf_counter()

    set_threads(args.threads)
    cfg = load_config(args.config, parse_overrides(args.set)).resolve_hardware()
    env_kwargs = {**cfg.env.kwargs, **cfg.eval.env_kwargs}
    agent_ids = list(marft_envs.make(cfg.env.id, **cfg.env.kwargs).possible_agents)
    if args.tiny:
        from marft_agents.model.tiny_models import tiny_model_and_tokenizer

        model, tokenizer = tiny_model_and_tokenizer(seed=0, dtype=cfg.model.dtype)
        model_name = "tiny-random-llama"
    else:
        from marft_agents.model.loading import load_model_and_tokenizer

        model, tokenizer = load_model_and_tokenizer(cfg.model)
        model_name = cfg.model.name_or_path
    num_envs = args.num_envs or cfg.eval.num_envs
    batch = max(int(cfg.sampling.max_batch_size), 1)
    scripted = scripted_seats(cfg, agent_ids)
    with build_policy(cfg, model, tokenizer, agent_ids) as policy, warnings.catch_warnings():
        if not policy.critic_adapters:
            raise SystemExit(f"{args.config}: algorithm {cfg.algorithm} with advantage.baseline "
                             f"{cfg.advantage.baseline} builds no critic; the study reads a critic's features")
        if args.adapters is not None:
            try:
                policy.load_adapter_state_dict(load_adapters(args.adapters))
            except FileNotFoundError as err:
                raise SystemExit(f"--adapters {args.adapters}: {err}; expected a checkpoint folder (with adapters.pt), "
                                 "an adapters.pt file or a run folder with checkpoints") from None
        policy.eval()
        warnings.simplefilter("ignore", TrainingTasksWarning)  # a train split is the caller's choice
        lap("load")
        result = evaluate(policy, cfg.env.id, env_kwargs, n_problems=args.problems, greedy=False, seed=cfg.eval.seed,
                          sampling=cfg.sampling, num_envs=num_envs, samples_per_problem=args.samples,
                          scripted=scripted)
        lap("sample")
        env = marft_envs.make(cfg.env.id, **env_kwargs).unwrapped
        indices = problem_indices(len(env.tasks), args.problems, cfg.eval.seed)
        assert [t["task_index"] for t in result.per_task] == indices, "the evaluation's problems are not the set's"
        episodes = greedy_play(policy, cfg, env_kwargs, indices, num_envs, scripted)
        lap("greedy_play")
        firsts = [decisions[0] for decisions in episodes]
        answering = [next(d for d in reversed(decisions)
                          if d.round == decisions[0].round and env.profile.role_of(d.agent_id).graded)
                     for decisions in episodes]
        features, values = critic_reads(policy, firsts, batch)
        lap("critic_features")
        answers = [str(t["answer"]) for t in result.per_task]
        logprob = gold_logprobs(policy, answering, answers, args.answer_format, cfg.sampling.temperature, batch)
        lap("gold_logprob")
    solved = np.array([[float(s["solved"]) for s in t["samples"]] for t in result.per_task])  # [n, k]
    classes = [size_class(t["problem"], args.hard_from) for t in result.per_task]
    ridge = dict(alphas=args.alphas, inner=args.inner_folds, seed=args.fold_seed)
    predictors: dict[str, Predictor] = {
        "size_class": ClassMeans(classes),
        "critic_features": Ridge(features, **ridge),
        "features_and_class": Ridge(features, offset=ClassMeans(classes), **ridge),
        "critic_value": linear(values),
        "gold_logprob": linear(logprob),
    }
    study = figures(solved, classes, predictors, args.folds, args.fold_seed)
    lap("statistics")
    return {
        "study": STUDY, "command": command, "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "commit": git_commit(), "machine": {**machine(), "torch_threads": torch.get_num_threads()},
        "config": str(args.config), "overrides": list(args.set), "adapters": args.adapters, "model": model_name,
        "env_id": cfg.env.id, "env_kwargs": env_kwargs, "eval_seed": cfg.eval.seed,
        "sampling": {"temperature": cfg.sampling.temperature, "max_new_tokens": cfg.sampling.max_new_tokens,
                     "top_p": cfg.sampling.top_p},
        "critic": {"mode": cfg.critic.mode, "agent": firsts[0].agent_id, "hidden_size": int(features.shape[1])},
        "answer": {"agent": answering[0].agent_id, "format": args.answer_format,
                   "temperature": cfg.sampling.temperature},
        "folds": args.folds, "fold_seed": args.fold_seed, "inner_folds": args.inner_folds, "alphas": list(args.alphas),
        "hard_from": args.hard_from, "predictor_labels": dict(PREDICTORS), **study, "seconds": seconds,
        "per_problem": [{"task_index": t["task_index"], "problem": t["problem"], "answer": t["answer"], "class": c,
                         "solved": [int(s) for s in row], "critic_value": float(v), "gold_logprob": float(lp)}
                        for t, c, row, v, lp in zip(result.per_task, classes, solved, values, logprob)],
    }


def plain(value: Any) -> Any:
    """``value`` with every nan or infinity as None (strict JSON)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", type=Path, default=Path("baselines/configs/grid/critic_price.yaml"),
                        help="the run's config: env, model, critic, sampling and eval set (eval.seed, eval.env_kwargs)")
    parser.add_argument("--adapters", default=None,
                        help="the adapters to load (a checkpoint folder, adapters.pt or a run folder; default: "
                             "none, the base model)")
    parser.add_argument("--problems", type=int, default=200, help="problems of the fixed evaluation set")
    parser.add_argument("--samples", type=int, default=16, help="sampled episodes per problem (even)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="the JSON record to write")
    parser.add_argument("--folds", type=int, default=10, help="outer folds over problems")
    parser.add_argument("--inner-folds", type=int, default=5, help="inner folds that choose the ridge strength")
    parser.add_argument("--fold-seed", type=int, default=0, help="seed of the fold shuffles and the bootstrap")
    parser.add_argument("--alphas", type=float, nargs="+", default=list(DEFAULT_ALPHAS),
                        help="ridge strengths to choose from (standardised features)")
    parser.add_argument("--hard-from", type=int, default=HARD_FROM,
                        help="an operand at least this large makes a problem 'hard'")
    parser.add_argument("--answer-format", default=ANSWER_FORMAT,
                        help="the gold answer as the graded agent writes it ({answer} is replaced)")
    parser.add_argument("--num-envs", type=int, default=0, help="envs played in lock-step (0: the config's eval.num_envs)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config field (YAML value), e.g. --set env.kwargs.level=8")
    parser.add_argument("--tiny", action="store_true", help="a tiny random model instead of the config's (tests)")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: auto, see benchmarks/_common.py)")
    args = parser.parse_args(argv)
    if args.samples < 2 or args.samples % 2:
        parser.error(f"--samples must be even and >= 2 (two halves), got {args.samples}")
    if not 2 <= args.folds <= args.problems:
        parser.error(f"--folds must be between 2 and --problems ({args.problems}), got {args.folds}")
    if args.adapters is not None and not Path(args.adapters).exists():
        parser.error(f"--adapters {args.adapters}: no such file or folder; expected a checkpoint folder (with "
                     "adapters.pt), an adapters.pt file or a run folder with checkpoints")
    if "{answer}" not in args.answer_format:
        parser.error(f"--answer-format must contain {{answer}}, got {args.answer_format!r}")
    return args


def main(argv: list[str] | None = None) -> int:
    from leaderboards.studies import predictability_table

    args = parse_args(argv)
    command = shlex.join(["python", "benchmarks/task_predictability.py", *(sys.argv[1:] if argv is None else argv)])
    record = plain(run_study(args, command))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    print("\n".join(predictability_table(record)))
    print("seconds: " + ", ".join(f"{phase} {s}" for phase, s in record["seconds"].items()))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
