"""Baseline gain per decision position, for every advantage estimator, in return units.

Every estimator's advantage of a decision is, before any scaling by a spread, a *target* (a
return) minus a *baseline* (its prediction of that return from what the estimator compares the
decision with). How good the baseline is, is how much of the target's variance it removes; these
figures measure that at each decision position against one reference, the same for every
estimator, so their numbers can be compared (a critic against GiGPO's step groups against the
group mean). Pure functions on per-episode lists, torch-free (``tests/agents/test_baseline_gain.py``
checks them by hand).

1. Position. Episode e's decisions are numbered p = 0, 1, ... in the order D_t scheduled them
   (agents and rounds interleaved: ``Rollout.episode_decisions``), as in the critic's figures
   (:mod:`marft_agents.learners.baselines`).
2. Target ``y[e][p]``, in return units, before any normalisation: the return the estimator's
   advantage is a deviation of. MAPPO (``advantage.baseline``): the Monte Carlo return from the
   decision under ``ppo.credit`` / ``ppo.gamma``. GRPO (``learner.grouping``), the score of the
   decision's unit (:mod:`marft_agents.group_math`): ``team``/``agent`` the team return (+ the
   agent's own rewards with ``agent_rewards``), ``agent_turn`` the team rewards of the turn's
   round and later, ``step`` the step level's discounted return-to-go (``step_gamma`` per
   round) from the decision's round.
3. The reference, what the critic's ``critic/baseline_gain`` compares against: the leave-one-out
   (LOO) mean of ``y`` at the same position over the other episodes of the task group that
   reached it, ``ref_p = mean (y - LOO_p(y))^2`` (``critic/loo_residual_var/pos<p>``). It is
   free (no critic) and sees the task but nothing that differs between the episodes.
4. The estimator's baseline ``b[e][p]`` and ``mse_p = mean (y - b)^2``. ``critic``: the value V
   (the residual centred, ``Var(y - V)`` on the population footing, since whitening removes a
   constant offset: ``critic/critic_residual_var``); ``group_critic``: its anchored baseline;
   ``group``: the LOO mean at the position, the reference itself (gain 0 by construction).
   GRPO: the mean of the scores of the units sharing the decision's key (step: its anchor state,
   the step level's groups; GiGPO's episode level is ``team``'s), the normalisation's
   registered ``centre``: ``others`` (``leave_one_out``) the other units' mean, ``mean``
   (``mean``, ``mean_std``: the centre before the std division) the mean with the unit itself.
   A unit alone in its key has no baseline (its advantage is 0, it is not predicted).
5. Per position: ``D_p``, the decisions at p with both a reference and a baseline (the same
   decisions for both figures); ``baseline/reference_mse/pos<p>`` and ``baseline/mse/pos<p>``
   over ``D_p``; ``baseline/gain/pos<p> = 1 - mse / reference``; ``baseline/coverage/pos<p>``:
   ``|D_p|`` over the decisions at p with a reference (below 1: step groups that did not form,
   an observation no other episode reached); ``baseline/gain``: pooled over positions,
   weighted by ``|D_p|``. A position with fewer than two decisions in ``D_p`` logs its coverage only.
   Reading: > 0, the baseline predicts the return better than the free position mean (it sees
   what differs between the episodes: a critic's state, a step group's identical observation);
   0, no better; < 0, worse. A baseline that includes the unit itself is closer to it by
   construction: when a key's n units are the position's, ``y - mean = (n - 1) / n (y - LOO)``,
   so its residual is ``((n - 1) / n)^2`` of the reference and its gain ``1 - ((n - 1) / n)^2``
   (0.75 at n = 2, 0.556 at n = 3, 0.4375 at n = 4) from the self-inclusion alone, no
   information (the advantage is the leave-one-out one shrunk by ``(n - 1) / n``). So a ``mean``
   centre also logs ``baseline/loo_mse/pos<p>``, the same groups' residual with the unit left
   out, whose gain ``1 - loo_mse / reference`` is the one to compare across estimators
   (:attr:`PooledGain.loo_gain`; the others' baselines leave the unit out already).
6. Over a run (:func:`pooled_gains`): per position, each figure averaged over the later half of
   the updates that logged it, the gain a ratio of those means (as the critic's
   ``pooled_residuals``); rows from before these keys read the critic's (``critic/*``) instead.
   The grid reports pool them over a cell's seeds (``leaderboards/grid_report.py``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from marft_agents.learners.baselines import PositionResiduals, Table, loo_baseline

PREFIX = "baseline/"
"""The metric family of these figures (records keep it: ``evaluation.records.DIAGNOSTIC_PREFIXES``)."""
GAIN_KEY = "baseline/gain"
"""The pooled gain of an update (module docstring, step 5)."""
REFERENCE_KEY, MSE_KEY, COVERAGE_KEY = "baseline/reference_mse", "baseline/mse", "baseline/coverage"
LOO_MSE_KEY = "baseline/loo_mse"
POSITION_KEYS: tuple[str, ...] = (REFERENCE_KEY, MSE_KEY, GAIN_KEY, COVERAGE_KEY, LOO_MSE_KEY)
"""The per-position figures (step 5), each logged as ``<key>/pos<p>``."""
CRITIC_KEYS = {REFERENCE_KEY: "critic/loo_residual_var", MSE_KEY: "critic/critic_residual_var"}
"""The critic's per-position keys that carry the same figures in rows from before ``baseline/``
(step 6; ``learners/critic_health.py``)."""
MIN_DECISIONS = 2
"""Fewer decisions than this in ``D_p``: the position logs its coverage only (step 5)."""

BaselineTable = Sequence[Sequence[float | None]]
"""Per episode, per position: a baseline, None where there is none."""


def position_key(key: str, position: int) -> str:
    """``baseline/gain`` at position 2 -> ``baseline/gain/pos2``."""
    return f"{key}/pos{position}"


@dataclass(frozen=True)
class PositionGain:
    """An estimator's baseline against the reference at one decision position (step 5)."""

    position: int
    n: int
    """``|D_p|``: decisions with both a reference and a baseline."""
    referenced: int
    """Decisions at the position with a reference."""
    reference: float
    """``mean (y - LOO_p(y))^2`` over ``D_p``."""
    mse: float
    """The estimator's residual over ``D_p``."""
    loo_mse: float = float("nan")
    """(a ``mean`` centre) The residual of the same groups' baseline with the unit left out."""

    @property
    def gain(self) -> float:
        """``1 - mse / reference``; NaN when the reference is 0 or undefined."""
        return _gain(self.mse, self.reference)

    @property
    def coverage(self) -> float:
        return self.n / self.referenced if self.referenced else float("nan")


def _gain(mse: float, reference: float) -> float:
    return 1.0 - mse / reference if reference > 0 and math.isfinite(mse) else float("nan")


def position_gains(targets: Table, baselines: BaselineTable, groups: Sequence[Sequence[int]],
                   loo_baselines: BaselineTable | None = None) -> list[PositionGain]:
    """Steps 3-5 per position from ``y`` (``targets``), the estimator's ``b`` (``baselines``, None
    where it has none) and the task groups (episode indices); positions with fewer than two
    referenced decisions are left out. ``loo_baselines``: for a ``mean`` centre, the same groups'
    leave-one-out means (None where ``baselines`` is), for ``loo_mse``."""
    reference = loo_baseline(targets, groups)
    out = []
    for p in range(max((len(r) for r in targets), default=0)):
        referenced = [e for e in range(len(targets)) if len(targets[e]) > p and reference[e][p] is not None]
        if len(referenced) < MIN_DECISIONS:
            continue
        rows = [e for e in referenced if baselines[e][p] is not None]
        ref = mse = loo = float("nan")
        if len(rows) >= MIN_DECISIONS:
            ref = sum((targets[e][p] - reference[e][p]) ** 2 for e in rows) / len(rows)
            mse = sum((targets[e][p] - baselines[e][p]) ** 2 for e in rows) / len(rows)
            if loo_baselines is not None:
                loo = sum((targets[e][p] - loo_baselines[e][p]) ** 2 for e in rows) / len(rows)
        out.append(PositionGain(p, len(rows), len(referenced), ref, mse, loo))
    return out


def from_residuals(positions: Sequence[PositionResiduals], baseline: str) -> list[PositionGain]:
    """The MAPPO baselines' figures from the critic's residuals (step 4): ``baseline`` is the
    run's ``advantage.baseline`` (``critic``: the critic's residual, ``group_critic``: the
    anchored one, otherwise ``group``'s, the reference itself)."""
    def mse(r: PositionResiduals) -> float:
        return {"critic": r.critic, "group_critic": r.anchored}.get(baseline, r.loo)

    return [PositionGain(r.position, r.n, r.n, r.loo, mse(r)) for r in positions]


def gain_metrics(positions: Sequence[PositionGain]) -> dict[str, float]:
    """Step 5's metrics: per position its coverage and, where ``D_p`` has two decisions or more,
    the reference, the residual and the gain; the pooled gain over those positions."""
    out: dict[str, float] = {}
    pooled_ref = pooled_mse = 0.0
    for g in positions:
        out[position_key(COVERAGE_KEY, g.position)] = g.coverage
        if g.n < MIN_DECISIONS or not (math.isfinite(g.reference) and math.isfinite(g.mse)):
            continue
        out[position_key(REFERENCE_KEY, g.position)] = g.reference
        out[position_key(MSE_KEY, g.position)] = g.mse
        out[position_key(GAIN_KEY, g.position)] = g.gain
        if math.isfinite(g.loo_mse):
            out[position_key(LOO_MSE_KEY, g.position)] = g.loo_mse
        pooled_ref, pooled_mse = pooled_ref + g.n * g.reference, pooled_mse + g.n * g.mse
    if positions:
        out[GAIN_KEY] = 1.0 - pooled_mse / pooled_ref if pooled_ref > 0 else float("nan")
    return out


# -- over a run (step 6) ------------------------------------------------------------------------------
def _number(row: Mapping[str, Any], key: str) -> float:
    value = row.get(key)
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else float("nan")


def _naming(row: Mapping[str, Any]) -> Mapping[str, str]:
    """Which keys carry the reference and the residual in ``row``: its ``baseline/`` ones, or in a
    row without any (from before them) the critic's (step 6)."""
    return {k: k for k in CRITIC_KEYS} if any(k.startswith(PREFIX) for k in row) else CRITIC_KEYS


def _figure(row: Mapping[str, Any], key: str, position: int) -> float:
    """``key`` (:data:`REFERENCE_KEY` or :data:`MSE_KEY`) at ``position`` in ``row``; NaN where not a number."""
    return _number(row, position_key(_naming(row)[key], position))


def _stems(row: Mapping[str, Any], stem: str) -> list[int]:
    stem += "/pos"
    return sorted(int(k[len(stem):]) for k in row if k.startswith(stem) and k[len(stem):].isdigit())


def logged_positions(row: Mapping[str, Any]) -> list[int]:
    """The positions whose reference and residual ``row`` holds as numbers."""
    return [p for p in _stems(row, _naming(row)[REFERENCE_KEY])
            if math.isfinite(_figure(row, REFERENCE_KEY, p)) and math.isfinite(_figure(row, MSE_KEY, p))]


def _coverage(row: Mapping[str, Any], position: int) -> float:
    """The coverage ``row`` logged at ``position``; 1.0 in a row from before ``baseline/`` that
    logged the position's figures (a critic covers every decision), NaN otherwise."""
    if any(k.startswith(PREFIX) for k in row):
        return _number(row, position_key(COVERAGE_KEY, position))
    return 1.0 if position in logged_positions(row) else float("nan")


def covered_positions(row: Mapping[str, Any]) -> list[int]:
    """The positions ``row`` logged a coverage for (every position with a reference)."""
    stems = _stems(row, COVERAGE_KEY) if any(k.startswith(PREFIX) for k in row) else logged_positions(row)
    return [p for p in stems if math.isfinite(_coverage(row, p))]


def gain_rows(rows: Sequence[Mapping[str, Any]], all_updates: bool = False) -> list[Mapping[str, Any]]:
    """The rows (one per update, in order) that logged a position's figures or coverage, the later
    half of them unless ``all_updates`` (for an odd count the middle update counts in the later half)."""
    logged = [r for r in rows if covered_positions(r)]
    return logged if all_updates else logged[len(logged) // 2:]


@dataclass(frozen=True)
class PooledGain:
    """One position's figures pooled over a run's updates (step 6)."""

    updates: int
    """Updates that logged the position's reference and residual (0: its coverage only)."""
    reference: float
    mse: float
    """Their means over those updates (NaN without one)."""
    coverage: float
    """Mean coverage over the pooled updates that logged it."""
    loo_mse: float = float("nan")
    """Mean ``loo_mse`` (a ``mean`` centre's; NaN where the rows have none)."""

    @property
    def gain(self) -> float:
        """``1 - mean mse / mean reference`` (a ratio of the pooled means); NaN when undefined."""
        return _gain(self.mse, self.reference)

    @property
    def loo_gain(self) -> float:
        """The gain of the same groups with the unit left out: ``1 - mean loo_mse / mean
        reference`` under a ``mean`` centre, else :attr:`gain` (the baseline already leaves it out)."""
        return _gain(self.loo_mse, self.reference) if math.isfinite(self.loo_mse) else self.gain


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values and all(math.isfinite(v) for v in values) else float("nan")


def pooled_gains(rows: Sequence[Mapping[str, Any]], all_updates: bool = False) -> dict[int, PooledGain]:
    """Step 6: per decision position, its :class:`PooledGain` over :func:`gain_rows`; {} without such rows."""
    rows = gain_rows(rows, all_updates)
    out: dict[int, PooledGain] = {}
    for p in sorted({p for r in rows for p in covered_positions(r)}):
        kept = [r for r in rows if p in logged_positions(r)]
        coverage = [c for c in (_coverage(r, p) for r in rows) if math.isfinite(c)]
        out[p] = PooledGain(len(kept), _mean([_figure(r, REFERENCE_KEY, p) for r in kept]),
                            _mean([_figure(r, MSE_KEY, p) for r in kept]), _mean(coverage),
                            _mean([_number(r, position_key(LOO_MSE_KEY, p)) for r in kept]))
    return out
