"""How well the critic explains the returns, against the best any critic could do.

A MAPPO advantage is only as good as its critic: with values that explain none of the return's
variance, the advantage is the return minus a constant and MAPPO is REINFORCE with a baseline at
the price of a critic. These functions give every value learner's update the figures a reviewer
needs to judge that, measured on the update's own rollout and the values recorded at collection
(out of sample: the critic has not trained on these returns yet).

1. Returns. Each decision's Monte Carlo return under the learner's credit assignment
   (``learners/credit.py``): ``G_k = r_k + gamma_k G_{k+1}``, ``G`` past the last decision 0.
   These, not the GAE targets (which mix in the critic's own values), are what a value is an
   estimate of.
2. The ceiling. An episode's first decision sees only the task, so the best possible value of it
   is the task's expected return under the current policy, p_i, and the best explained variance
   of first-decision values is the **between-task share** of the return variance,
   ``sigma_b^2 / (sigma_b^2 + sigma_w^2)`` (Var p_i over the within-task variance). With ``k``
   episodes of each of ``g`` tasks (grouped sampling, ``schedule.group_size``) the one-way
   ANOVA mean squares ``MSB = k sum_i (mean_i - mean)^2 / (g - 1)`` and
   ``MSW = sum_ij (G_ij - mean_i)^2 / (g (k - 1))`` give unbiased ``sigma_w^2 = MSW`` and
   ``sigma_b^2 = (MSB - MSW) / k``: the finite-k correction, without which the spread of k-sample
   means would count sampling noise as between-task variance. The estimate is noisy per update
   (it can be negative); pool its parts over updates (``critic/between_task_var``,
   ``critic/within_task_var``) for a run-level ceiling (:func:`pooled_share`).
   Later decisions (after a parent's output) condition on more than the task, so their ceiling
   is at least the first decision's; it is not estimated (it would need repeated continuations
   of the same parent output), and ``critic/ev_later`` is reported without one.
3. The critic's figures. ``critic/ev_first``: explained variance of the first decisions' recorded
   values for their returns, on the ceiling's footing: under grouped sampling
   ``1 - (residual total) / (sigma_b^2 + sigma_w^2)``, both the unbiased random-effects totals of
   step 2 (``critic/residual_total_var``: step 2's split of ``G - V``). The in-update variance
   of grouped returns undercounts the between-task part by ``(N - k) / (N - 1)``, so on it a
   critic with ``V = p_i`` scores only ~0.93-0.96 of the ceiling at 8 tasks per update; on this
   footing it scores the ceiling and a constant critic 0, both in expectation. Ungrouped,
   ``1 - Var(G - V) / Var(G)``, the usual EV. ``critic/value_return_corr``: their Pearson correlation; ``critic/ev_later``:
   the usual EV for the other decisions; ``critic/return_var``, ``critic/residual_var_first``
   and ``critic/return_std``: in-update (population) figures of the first decisions;
   ``critic/adv_abs_mean`` (mean |advantage| of the update's samples, before whitening): with
   a useless critic about ``critic/return_std``; ``critic/value_std``: the spread of the first
   decisions' values (0: a constant critic).
4. Against the free baseline (:mod:`marft_agents.learners.baselines`, step 5). With grouped
   sampling the leave-one-out (LOO) group mean is a baseline that costs nothing, so every
   update reports, per decision position p, ``critic/loo_residual_var/pos<p>``,
   ``critic/critic_residual_var/pos<p>`` (the residual of the baseline the run uses with its
   critic: ``Var(G - V)`` under ``advantage.baseline: critic``, the anchored baseline's under
   ``group_critic``), ``critic/anchored_residual_var/pos<p>`` (what ``group_critic`` would leave
   with these values), ``critic/group_return_var/pos<p>`` (no baseline) and
   ``critic/baseline_gain/pos<p> = 1 - critic residual / LOO residual``, with
   ``critic/baseline_gain`` pooled over positions (decision-weighted). > 0: the critic is the
   better baseline; a critic that knows each task's success probability scores ``1/k`` at
   position 0, where the LOO mean already is the task's value up to its k - 1 samples.
5. The warnings (:class:`CriticWatch`): ``losses/explained_variance`` below ``health_min_ev`` for
   ``health_window`` updates in a row logs one line, once until the critic recovers; so does
   ``critic/baseline_gain < 0`` for ``health_window`` updates in a row, naming the setting to
   change (``advantage.baseline: group``).
6. The run's figure (:func:`last_half`): over the later half of a run's updates, the first
   decisions' explained variance pooled as ``1 - mean(residual var) / mean(return var)`` against
   the pooled ceiling, and their ratio: how much of what any critic could explain this one did.
   Rows with ``critic/residual_total_var`` pool it on the ceiling's footing (over
   ``between + within``); older rows, the in-update
   ``critic/residual_var_first`` over ``critic/return_var``. ``summary.json``
   (``critic_last_half``) and the grid reports carry it; below :data:`MIN_CEILING` the ceiling
   is too small for the ratio to mean anything.
7. The run's baselines (:func:`pooled_residuals`): per decision position, what each baseline
   leaves of the returns (step 4: none, ``group``, the critic as the run used it,
   ``group_critic``), each averaged over the later half of the updates that logged the position's
   figures. Variance reductions ``1 - left / none`` and the critic's gain ``1 - critic / LOO`` are
   ratios of these means (:func:`variance_reduction`), not means of per-update ratios, which one
   update with a small LOO residual would dominate. ``benchmarks/baseline_variance.py`` prints
   them per run; the grid reports pool them over a cell's seeds.
8. Every estimator's figures. Step 4's gain is also logged under the names every estimator
   shares (``baseline/gain/pos<p>``, ``baseline/reference_mse/pos<p>``, ``baseline/mse/pos<p>``,
   ``baseline/coverage/pos<p>``, ``baseline/gain``: :mod:`marft_agents.learners.baseline_gain`),
   beside GRPO's groupings' and GiGPO's step groups' (``learners/grpo.py``); the ``critic/``
   keys stay, as records and reports before these read them.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch

from marft_agents import ppo_math as pm
from marft_agents.episodes import Rollout
from marft_agents.learners.baseline_gain import from_residuals, gain_metrics, position_key
from marft_agents.learners.baselines import pooled_gain, residual_variances
from marft_agents.learners.credit import assign_credit
from marft_agents.settings.estimators import estimator

log = logging.getLogger(__name__)

HEALTH_KEYS: tuple[str, ...] = (
    "critic/ev_first", "critic/ev_ceiling", "critic/ev_later", "critic/value_return_corr",
    "critic/return_var", "critic/between_task_var", "critic/within_task_var", "critic/residual_var_first",
    "critic/return_std", "critic/value_std", "critic/adv_abs_mean", "critic/residual_total_var",
)
"""The per-update critic-health metrics, declared once (records and docs read this list)."""

POSITION_KEYS: tuple[str, ...] = (
    "critic/group_return_var", "critic/loo_residual_var", "critic/critic_residual_var",
    "critic/anchored_residual_var", "critic/baseline_gain",
)
"""The per-position baseline figures (module docstring, step 4), each logged as ``<key>/pos<p>``."""
GAIN_KEY = "critic/baseline_gain"
"""The pooled baseline gain of an update (module docstring, step 4)."""


BASELINE_RESIDUALS: tuple[tuple[str, str], ...] = (
    ("none", "critic/group_return_var"), ("group", "critic/loo_residual_var"),
    ("critic", "critic/critic_residual_var"), ("group_critic", "critic/anchored_residual_var"),
)
"""Each baseline (``none``: no baseline; else an ``advantage.baseline``, ``critic`` as the run used
its critic) and the per-position key of what it leaves of the returns (step 4)."""


MIN_CEILING = 0.05
"""A pooled ceiling below this is too small to judge a critic against (a ratio of two noises)."""


@dataclass(frozen=True)
class VarianceSplit:
    """One-way random-effects split of grouped returns (module docstring, step 2)."""

    between: float
    """Unbiased sigma_b^2 (may be negative from noise)."""
    within: float
    """Unbiased sigma_w^2."""

    @property
    def share(self) -> float:
        """``between / (between + within)``: the explained-variance ceiling; NaN when both are 0."""
        total = self.between + self.within
        return self.between / total if total > 0 else float("nan")


def between_task_split(groups: Sequence[Sequence[float]]) -> VarianceSplit:
    """The split of ``groups`` (one list of returns per task, all of the same size k >= 2, at
    least two groups); raises ``ValueError`` otherwise."""
    sizes = {len(g) for g in groups}
    if len(groups) < 2 or len(sizes) != 1 or min(sizes) < 2:
        raise ValueError(f"need >= 2 groups of one common size k >= 2, got sizes {sorted(len(g) for g in groups)}")
    data = torch.tensor([list(g) for g in groups], dtype=torch.float64)  # [g, k]
    n_groups, k = data.shape
    means = data.mean(dim=1)  # [g]
    msb = k * ((means - data.mean()) ** 2).sum() / (n_groups - 1)
    msw = ((data - means[:, None]) ** 2).sum() / (n_groups * (k - 1))
    return VarianceSplit(between=float((msb - msw) / k), within=float(msw))


def split_by_task(values: Sequence[float], tasks: Sequence[Hashable]) -> VarianceSplit | None:
    """:func:`between_task_split` of ``values`` grouped by their ``tasks``, every group cut to the
    smallest group's size (groups drawn as k samples per task, some of them trimmed); None with
    fewer than two tasks or a task seen once."""
    groups: dict[Hashable, list[float]] = {}
    for value, task in zip(values, tasks):
        groups.setdefault(task, []).append(float(value))
    k = min((len(g) for g in groups.values()), default=0)
    if len(groups) < 2 or k < 2:
        return None
    return between_task_split([g[:k] for g in groups.values()])


def pooled_share(betweens: Sequence[float], withins: Sequence[float]) -> float:
    """The ceiling from per-update parts pooled over updates: ``mean(between) / (mean(between)
    + mean(within))``, NaN-free parts only."""
    pairs = [(b, w) for b, w in zip(betweens, withins) if math.isfinite(b) and math.isfinite(w)]
    if not pairs:
        return float("nan")
    return VarianceSplit(sum(b for b, _ in pairs) / len(pairs), sum(w for _, w in pairs) / len(pairs)).share


@dataclass(frozen=True)
class CriticSummary:
    """The critic against its ceiling, pooled over a run's later updates (module docstring, step 5)."""

    first_update: int
    last_update: int
    updates: int
    """Updates pooled (those that logged the critic's parts)."""
    ceiling: float
    """Pooled between-task share of the first decisions' return variance."""
    ev_first: float
    """Pooled explained variance of the first decisions' values."""
    corr_min: float
    corr_max: float
    """Range of the per-update value-return correlation."""
    baseline_gain: float = float("nan")
    """Pooled ``1 - sum(critic residual) / sum(LOO residual)`` over the updates and positions
    (module docstring, step 4); NaN when the rows carry no baseline figures."""
    gain_by_position: tuple[float, ...] = ()
    """The same per decision position (0, 1, ...)."""

    @property
    def ratio(self) -> float:
        """``ev_first / ceiling``; NaN below :data:`MIN_CEILING`."""
        return self.ev_first / self.ceiling if math.isfinite(self.ceiling) and self.ceiling >= MIN_CEILING \
            else float("nan")

    def as_dict(self) -> dict[str, Any]:
        """Plain data for JSON: NaN (not measurable) as None."""
        def plain(v: Any) -> Any:
            if isinstance(v, tuple):
                return [plain(x) for x in v]
            return None if isinstance(v, float) and not math.isfinite(v) else v

        return {k: plain(v) for k, v in {**asdict(self), "ratio": self.ratio}.items()}

    def line(self) -> str:
        """One line for a run's end."""
        head = (f"critic over updates {self.first_update}-{self.last_update}: first-decision explained variance "
                f"{self.ev_first:.3f} against a ceiling of {self.ceiling:.3f}")
        gain = (f"; baseline gain over the group mean {self.baseline_gain:.3f}"
                if math.isfinite(self.baseline_gain) else "")
        if not math.isfinite(self.ratio):
            return head + f" (below {MIN_CEILING}: too small to judge the critic against)" + gain
        return head + f", {self.ratio:.2f} of it" + gain


def _number(row: Mapping[str, Any], key: str) -> float:
    value = row.get(key)
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else float("nan")


def _positions(row: Mapping[str, Any]) -> list[int]:
    """The decision positions a row logged baseline figures for."""
    prefix = "critic/loo_residual_var/pos"
    return sorted(int(k[len(prefix):]) for k in row if k.startswith(prefix) and k[len(prefix):].isdigit())


def _pooled_gain(rows: Sequence[Mapping[str, Any]], positions: Sequence[int] | None) -> float:
    """``1 - sum critic residual / sum LOO residual`` over ``rows`` and ``positions`` (None: all)."""
    critic = loo = 0.0
    for r in rows:
        for p in _positions(r) if positions is None else positions:
            c = _number(r, position_key("critic/critic_residual_var", p))
            b = _number(r, position_key("critic/loo_residual_var", p))
            if math.isfinite(c) and math.isfinite(b):
                critic, loo = critic + c, loo + b
    return 1.0 - critic / loo if loo > 0 else float("nan")


def _logged_positions(row: Mapping[str, Any]) -> list[int]:
    """The positions whose LOO residual ``row`` holds as a number (a record's column-wise
    diagnostics hold None where an update did not log a position)."""
    return [p for p in _positions(row) if math.isfinite(_number(row, position_key("critic/loo_residual_var", p)))]


def baseline_rows(rows: Sequence[Mapping[str, Any]], all_updates: bool = False) -> list[Mapping[str, Any]]:
    """The rows (one per update, in order) that logged the per-position baseline figures (step 4),
    the later half of them unless ``all_updates``; for an odd count the middle update counts in
    the later half."""
    logged = [r for r in rows if _logged_positions(r)]
    return logged if all_updates else logged[len(logged) // 2:]


def pooled_residuals(rows: Sequence[Mapping[str, Any]], all_updates: bool = False) -> dict[int, dict[str, float]]:
    """Step 7: per decision position, each baseline of :data:`BASELINE_RESIDUALS` -> its residual
    averaged over :func:`baseline_rows` that logged it (NaN where none did); {} without such rows."""
    rows = baseline_rows(rows, all_updates)
    out: dict[int, dict[str, float]] = {}
    for p in sorted({p for r in rows for p in _logged_positions(r)}):
        figures = {}
        for name, key in BASELINE_RESIDUALS:
            values = [v for v in (_number(r, position_key(key, p)) for r in rows) if math.isfinite(v)]
            figures[name] = sum(values) / len(values) if values else float("nan")
        out[p] = figures
    return out


def variance_reduction(left: float, reference: float) -> float:
    """``1 - left / reference``: the share of ``reference``'s variance a baseline removes (step 7);
    NaN unless ``reference`` > 0 and ``left`` is finite."""
    return 1.0 - left / reference if reference > 0 and math.isfinite(left) else float("nan")


def last_half(rows: Sequence[Mapping[str, Any]], step_key: str = "step") -> CriticSummary | None:
    """:class:`CriticSummary` of the later half of ``rows`` (per-update metrics with the update
    number under ``step_key``, e.g. ``metrics.jsonl``'s rows) that logged the critic's variance
    parts; for an odd count the middle update counts in the later half. None without such rows.
    Rows with the per-position parts (step 4) are pooled on the ceiling's footing (step 6)."""
    logged = {int(r[step_key]): r for r in rows
              if math.isfinite(_number(r, "critic/return_var")) and math.isfinite(_number(r, "critic/residual_var_first"))}
    ordered = [logged[k] for k in sorted(logged)]
    late = ordered[len(ordered) // 2:]
    if not late:
        return None
    between = [_number(r, "critic/between_task_var") for r in late]
    within = [_number(r, "critic/within_task_var") for r in late]
    footed = [(b + w, _number(r, "critic/residual_total_var"))
              for r, b, w in zip(late, between, within)]
    footed = [(t, c) for t, c in footed if math.isfinite(t) and math.isfinite(c)]
    if footed:  # the ceiling's footing: both random-effects totals
        total = sum(t for t, _ in footed) / len(footed)
        residual = sum(c for _, c in footed) / len(footed)
    else:  # rows from before the baseline figures: in-update variances
        total = sum(_number(r, "critic/return_var") for r in late) / len(late)
        residual = sum(_number(r, "critic/residual_var_first") for r in late) / len(late)
    corr = [c for c in (_number(r, "critic/value_return_corr") for r in late) if math.isfinite(c)]
    positions = sorted({p for r in late for p in _positions(r)})
    return CriticSummary(
        first_update=int(late[0][step_key]), last_update=int(late[-1][step_key]), updates=len(late),
        ceiling=pooled_share(between, within),
        ev_first=1.0 - residual / total if total > 0 else float("nan"),
        corr_min=min(corr, default=float("nan")), corr_max=max(corr, default=float("nan")),
        baseline_gain=_pooled_gain(late, None),
        gain_by_position=tuple(_pooled_gain(late, [p]) for p in positions))


def monte_carlo_returns(rewards: Sequence[float], gammas: Sequence[float]) -> list[float]:
    """``G_k = r_k + gamma_k G_{k+1}`` for one episode's decisions (``G`` after the last = 0)."""
    out, running = [0.0] * len(rewards), 0.0
    for k in range(len(rewards) - 1, -1, -1):
        running = rewards[k] + gammas[k] * running
        out[k] = running
    return out


def _ev(values: list[float], returns: list[float]) -> float:
    if len(values) < 2:
        return float("nan")
    return float(pm.explained_variance(torch.tensor(values, dtype=torch.float64),
                                       torch.tensor(returns, dtype=torch.float64)))


def _corr(x: list[float], y: list[float]) -> float:
    if len(x) < 2:
        return float("nan")
    a, b = torch.tensor(x, dtype=torch.float64), torch.tensor(y, dtype=torch.float64)
    a, b = a - a.mean(), b - b.mean()
    denom = float(a.norm() * b.norm())
    return float((a * b).sum()) / denom if denom > 0 else float("nan")


def episode_returns(rollout: Rollout, credit: str, gamma: float) -> list[list[float]]:
    """Step 1: every episode's Monte Carlo returns, per decision position."""
    out = []
    for decisions in rollout.episode_decisions():
        rewards, gammas = assign_credit(decisions, credit, gamma) if decisions else ([], [])
        out.append(monte_carlo_returns(rewards, gammas))
    return out


def equal_groups(rollout: Rollout) -> list[list[int]] | None:
    """The rollout's task groups when there are >= 2 of one common size >= 2 (grouped sampling),
    else None."""
    groups = [members for members in rollout.groups().values()]
    sizes = {len(m) for m in groups}
    return groups if len(groups) >= 2 and len(sizes) == 1 and min(sizes) >= 2 else None


def baseline_figures(returns: Sequence[Sequence[float]], groups: Sequence[Sequence[int]],
                     values: Sequence[Sequence[float]] | None, baseline: str = "critic") -> dict[str, float]:
    """Step 4's per-position figures and the pooled gain (``baseline``: the run's
    ``advantage.baseline``: under ``group_critic`` the critic's residual is the anchored one),
    and the same as every estimator's ``baseline/*`` figures
    (:mod:`marft_agents.learners.baseline_gain`; ``group``'s gain is 0, its baseline the
    reference), which need the values under a baseline with a critic."""
    anchored = baseline == "group_critic"
    positions = residual_variances(returns, groups, values)
    out: dict[str, float] = {}
    for r in positions:
        critic = r.anchored if anchored else r.critic
        out[position_key("critic/group_return_var", r.position)] = r.return_var
        out[position_key("critic/loo_residual_var", r.position)] = r.loo
        if values is not None:
            out[position_key("critic/critic_residual_var", r.position)] = critic
            out[position_key("critic/anchored_residual_var", r.position)] = r.anchored
            out[position_key(GAIN_KEY, r.position)] = r.gain(critic)
    if values is not None and positions:
        out[GAIN_KEY] = pooled_gain(positions, anchored)
    if values is not None or not estimator("baseline", baseline).uses_critic:  # the figures every estimator logs
        out.update(gain_metrics(from_residuals(positions, baseline)))
    return out


def critic_health(rollout: Rollout, first_values: Sequence[float | None], credit: str, gamma: float,
                  advantages: torch.Tensor | None = None, baseline: str = "critic") -> dict[str, float]:
    """The health metrics of one update (module docstring, steps 1-4).

    Args:
        rollout: the update's episodes (``Rollout.episode_decisions``, ``Rollout.groups``).
        first_values: per decision of ``rollout.decisions``, the value recorded at collection of
            the state the decision was taken in (its token-level first value at token level);
            None where none was recorded.
        credit, gamma: the learner's credit assignment (``ppo.credit``, ``ppo.gamma``).
        advantages: ``[N]`` the update's advantages before whitening (for ``critic/adv_abs_mean``).
        baseline: the run's ``advantage.baseline`` (which residual the gain compares).
    """
    index = {id(d): i for i, d in enumerate(rollout.decisions)}
    returns = episode_returns(rollout, credit, gamma)
    values: list[list[float]] = []
    first_v, first_g, later_v, later_g = [], [], [], []
    for e, decisions in enumerate(rollout.episode_decisions()):
        row = [first_values[index[id(d)]] for d in decisions]
        values.append([float("nan") if v is None else float(v) for v in row])
        for k, (v, g) in enumerate(zip(row, returns[e])):
            if v is None:
                continue
            (first_v if k == 0 else later_v).append(float(v))
            (first_g if k == 0 else later_g).append(g)
    out = {"critic/ev_first": _ev(first_v, first_g), "critic/ev_later": _ev(later_v, later_g),
           "critic/value_return_corr": _corr(first_v, first_g)}
    if len(first_g) >= 2:
        g = torch.tensor(first_g, dtype=torch.float64)
        v = torch.tensor(first_v, dtype=torch.float64)
        out["critic/return_var"] = float(g.var(unbiased=False))
        out["critic/return_std"] = float(g.std(unbiased=False))
        out["critic/value_std"] = float(v.std(unbiased=False))
        out["critic/residual_var_first"] = float((g - v).var(unbiased=False))
    groups = equal_groups(rollout)
    first_returns = [r[0] for r in returns if r]
    if groups is not None and len(first_returns) == len(returns):
        split = between_task_split([[returns[e][0] for e in members] for members in groups])
        out.update({"critic/between_task_var": split.between, "critic/within_task_var": split.within,
                    "critic/ev_ceiling": split.share})
        total = split.between + split.within
        if len(first_g) == len(first_returns) and total > 0:  # step 3: the ceiling's footing
            residual = between_task_split([[returns[e][0] - values[e][0] for e in members] for members in groups])
            out["critic/residual_total_var"] = residual.between + residual.within
            out["critic/ev_first"] = 1.0 - out["critic/residual_total_var"] / total
        known = all(math.isfinite(v) for row in values for v in row)
        out.update(baseline_figures(returns, groups, values if known else None, baseline))
    if advantages is not None and advantages.numel():
        out["critic/adv_abs_mean"] = float(advantages.abs().mean())
    return out


class _Streak:
    """Counts updates in a row on which a figure was bad; due once when the streak reaches
    ``window`` (and again only after a good update reset it). Non-finite figures are skipped."""

    def __init__(self, window: int):
        self.window = window
        self.streak, self.warned = 0, False

    def due(self, value: float, bad: bool) -> bool:
        if not math.isfinite(value):
            return False
        if not bad:
            self.streak, self.warned = 0, False
            return False
        self.streak += 1
        if self.streak < self.window or self.warned:
            return False
        self.warned = True
        return True


class CriticWatch(_Streak):
    """Warns once when the critic has explained < ``min_ev`` of the variance for ``window``
    updates in a row (again after it has recovered in between)."""

    def __init__(self, window: int, min_ev: float):
        super().__init__(window)
        self.min_ev = min_ev

    def observe(self, update: int, explained_variance: float, ceiling: float = float("nan")) -> bool:
        """Count one update; returns True when it logged the warning."""
        if not self.due(explained_variance, explained_variance < self.min_ev):
            return False
        hint = (f"; the measured ceiling is only {ceiling:.3f}: the task's returns barely depend on the "
                "state the critic sees" if math.isfinite(ceiling) and ceiling < self.min_ev else "")
        log.warning("update %d: the critic has explained < %.0f%% of the return variance for %d updates "
                    "(explained variance %.3f): the critic is not learning; MAPPO is behaving like REINFORCE%s",
                    update, 100 * self.min_ev, self.streak, explained_variance, hint)
        return True


class GainWatch(_Streak):
    """Warns once when the critic has been a worse baseline than the leave-one-out group mean
    (``critic/baseline_gain < 0``) for ``window`` updates in a row (again after a recovery)."""

    def observe(self, update: int, gain: float, baseline: str = "critic") -> bool:
        """Count one update; returns True when it logged the warning."""
        if not self.due(gain, gain < 0):
            return False
        log.warning("update %d: the critic (advantage.baseline: %s) has been a worse baseline than the group mean for "
                    "%d updates (critic/baseline_gain %.3f); set advantage.baseline: group to drop it", update, baseline,
                    self.streak, gain)
        return True
