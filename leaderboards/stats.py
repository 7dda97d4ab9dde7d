"""Statistics for comparing learners over a handful of training seeds (the grid reports).

A grid cell is trained with a few seeds (2-5), so every test here is one that stays honest at
that size:

- :func:`welch_t` (two cells trained independently), :func:`one_sample_t` (a cell against a
  seed-free value, e.g. the greedy evaluation of the untrained model) and :func:`paired_t` (two
  cells whose seeds pair, e.g. an ablation that re-evaluates a cell's own trained runs): Student
  t with the Welch-Satterthwaite degrees of freedom, never a normal z, whose tails are far too
  thin at 2-4 degrees of freedom.
- :func:`permutation_test` and :func:`sign_flip_test`: exact tests that assume no distribution
  (seed outcomes are often bimodal: a run takes off or it does not). They enumerate every
  relabelling, so they have a smallest attainable p (``min_p``): 3 seeds against 3 cannot go
  below 0.10 two-sided, 3 paired seeds not below 0.25, however large the effect.
- :func:`bootstrap_difference`: a percentile CI of the difference, resampling seeds and then
  problems within each seed (when the records carry per-problem outcomes), so both the seed
  spread and the evaluation's finite problem set are in it.
- :func:`holm`: Holm-Bonferroni adjusted p-values over a family of comparisons declared before
  the runs (the family-wise error stays at alpha however many are declared).
- :func:`equivalence_test`: two one-sided tests (TOST) against a declared margin, the test for
  a claim of "no difference".
- :func:`seeds_needed`: a planning estimate of the seeds per cell at which an unresolved
  comparison's observed effect, with its observed seed spread, would reach the test's alpha.
- Planning before the runs (``python -m baselines.grid GRID --plan``):
  :func:`minimal_detectable_effect` (the true difference a t test detects with a given power at
  the declared seeds), :func:`minimal_equivalence_margin` (the narrowest margin a null can be
  shown equivalent within), :func:`planned_seeds` (the fewest seeds at which either reaches a
  target), :func:`exact_p_floor` and :func:`holm_floors` (the least p an exact test
  can give at those seeds, before and after the family's correction), :func:`bounded_sd` (the
  largest seed spread a score in [0, 1] can have at a given mean, when no pilot measured one) and
  :func:`at_floor` (a mean one evaluation cannot tell from zero), :func:`binomial_interval` (the
  exact interval of a pilot's reward rate, for the start gates).
- :func:`took_off`, :func:`takeoff_rate` and :func:`curve_auc`: per-cell summaries of learning
  curves that a mean of final accuracies hides.
- :func:`duplicate_runs`: records that are the same run (counted once, never twice).

Pure Python and numpy (scipy is a test dependency only, to check these against): the Student t
distribution comes from the regularised incomplete beta function (a continued fraction, as in
Numerical Recipes' ``betacf``), its quantile from bisection on the CDF.
"""

from __future__ import annotations

import itertools
import json
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

# -- the Student t distribution -------------------------------------------------------------------
_EPS = 1e-15
_TINY = 1e-300
_MAX_TERMS = 10_000


def _beta_continued_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction of the incomplete beta function (modified Lentz's method)."""
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > _TINY else _TINY)
    h = d
    for m in range(1, _MAX_TERMS + 1):
        m2 = 2 * m
        for aa in (m * (b - m) * x / ((qam + m2) * (a + m2)), -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1.0 + aa * d
            d = 1.0 / (d if abs(d) > _TINY else _TINY)
            c = 1.0 + aa / c
            c = c if abs(c) > _TINY else _TINY
            delta = d * c
            h *= delta
        if abs(delta - 1.0) < _EPS:
            return h
    raise ArithmeticError(f"incomplete beta continued fraction did not converge (a={a}, b={b}, x={x})")


def betainc(a: float, b: float, x: float) -> float:
    """The regularised incomplete beta function I_x(a, b), for a, b > 0 and 0 <= x <= 1."""
    if a <= 0 or b <= 0:
        raise ValueError(f"betainc needs a, b > 0, got a={a}, b={b}")
    if not 0.0 <= x <= 1.0:
        raise ValueError(f"betainc needs 0 <= x <= 1, got {x}")
    if x in (0.0, 1.0):
        return x
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    # The fraction converges fast for x < (a + 1) / (a + b + 2); above, use I_x(a, b) = 1 - I_{1-x}(b, a).
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _beta_continued_fraction(a, b, x) / a
    return 1.0 - math.exp(log_front) * _beta_continued_fraction(b, a, 1.0 - x) / b


def t_two_sided_p(t: float, df: float) -> float:
    """P(|T| >= |t|) for Student's T with ``df`` (> 0, not necessarily whole) degrees of freedom."""
    if df <= 0:
        raise ValueError(f"degrees of freedom must be > 0, got {df}")
    if math.isinf(t):
        return 0.0
    return betainc(df / 2.0, 0.5, df / (df + t * t))


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's T with ``df`` degrees of freedom."""
    tail = t_two_sided_p(t, df) / 2.0
    return 1.0 - tail if t > 0 else tail


def t_ppf(q: float, df: float) -> float:
    """The ``q`` quantile of Student's T with ``df`` degrees of freedom (bisection on :func:`t_cdf`)."""
    if not 0.0 < q < 1.0:
        raise ValueError(f"quantile must be in (0, 1), got {q}")
    if q == 0.5:
        return 0.0
    if q < 0.5:
        return -t_ppf(1.0 - q, df)
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < q:
        lo, hi = hi, 2.0 * hi
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if t_cdf(mid, df) < q:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-13 * max(1.0, hi):
            break
    return (lo + hi) / 2.0


# -- tests ------------------------------------------------------------------------------------------
@dataclass
class TestResult:
    """One test of ``a - b`` (or of a mean difference, for a one-sample or paired test)."""

    __test__ = False  # not a pytest test class

    test: str
    """``Welch t``, ``paired t``, ``one-sample t``, ``exact permutation`` or ``exact sign-flip``."""
    difference: float
    """mean(a) - mean(b) (paired and one-sample: the mean difference)."""
    p: float
    """Two-sided p-value; nan when the test is undefined (no spread over seeds at all)."""
    ci: tuple[float, float] | None = None
    """The (1 - alpha) confidence interval of the difference (t tests only)."""
    df: float | None = None
    """Degrees of freedom (t tests only)."""
    min_p: float | None = None
    """The smallest p-value this test can give with these sample sizes (exact tests only)."""
    splits: int = 0
    """Relabellings the exact test enumerated."""


def _variance(x: Sequence[float]) -> float:
    return statistics.variance(x) if len(x) > 1 else 0.0


@dataclass
class _Design:
    """The difference a t test looks at, its standard error and degrees of freedom."""

    test: str
    difference: float
    se: float
    df: float


def _design(a: Sequence[float], b: Sequence[float] | float, paired: bool) -> _Design:
    """``b`` a number: a one-sample test against that constant; ``paired``: the per-seed
    differences; else two independent samples (Welch)."""
    if isinstance(b, (int, float)):
        if len(a) < 2:
            raise ValueError(f"a one-sample t test needs >= 2 values, got {len(a)}")
        return _Design("one-sample t", statistics.fmean(a) - b, math.sqrt(_variance(a) / len(a)), len(a) - 1.0)
    if paired:
        if len(a) != len(b):
            raise ValueError(f"paired samples must have the same length, got {len(a)} and {len(b)}")
        design = _design([x - y for x, y in zip(a, b)], 0.0, False)
        design.test = "paired t"
        return design
    if len(a) < 2 or len(b) < 2:
        raise ValueError(f"Welch's t test needs >= 2 values per sample, got {len(a)} and {len(b)}")
    va, vb = _variance(a) / len(a), _variance(b) / len(b)
    return _Design("Welch t", statistics.fmean(a) - statistics.fmean(b), math.sqrt(va + vb),
                   _welch_df(va, len(a), vb, len(b)))


def _welch_df(va: float, na: int, vb: float, nb: int) -> float:
    """Welch-Satterthwaite degrees of freedom from the squared standard errors ``va``, ``vb``."""
    terms = [v * v / (n - 1) for v, n in ((va, na), (vb, nb)) if v > 0]
    return (va + vb) ** 2 / sum(terms) if terms else float(na + nb - 2)


def _t_test(design: _Design, alpha: float) -> TestResult:
    d = design
    if d.se == 0.0:  # no spread at all: t is 0/0 (no difference: p 1) or infinite (undefined: nan)
        if d.difference == 0:
            return TestResult(d.test, 0.0, 1.0, (0.0, 0.0), d.df)
        return TestResult(d.test, d.difference, math.nan, None, d.df)
    half = t_ppf(1.0 - alpha / 2.0, d.df) * d.se
    return TestResult(d.test, d.difference, t_two_sided_p(d.difference / d.se, d.df),
                      (d.difference - half, d.difference + half), d.df)


def welch_t(a: Sequence[float], b: Sequence[float], alpha: float = 0.05) -> TestResult:
    """Welch's t test of mean(a) - mean(b): two independent samples (>= 2 values each) with
    unequal variances; the CI is the (1 - alpha) one."""
    return _t_test(_design(a, list(b), paired=False), alpha)


def one_sample_t(a: Sequence[float], value: float = 0.0, alpha: float = 0.05) -> TestResult:
    """Student's t test of mean(a) - ``value``, where ``value`` is a known constant."""
    return _t_test(_design(a, float(value), paired=False), alpha)


def paired_t(a: Sequence[float], b: Sequence[float], alpha: float = 0.05) -> TestResult:
    """Paired t test of a - b (``a[i]`` and ``b[i]`` come from the same seed)."""
    return _t_test(_design(a, list(b), paired=True), alpha)


MAX_SPLITS = 1_000_000
"""Exact tests enumerate at most this many relabellings (else they raise: no silent Monte Carlo)."""


def _at_least(values: np.ndarray, observed: float) -> int:
    """How many |values| reach |observed|, with a relative tolerance for rounding."""
    return int(np.sum(np.abs(values) >= abs(observed) * (1 - 1e-12) - 1e-15))


def permutation_test(a: Sequence[float], b: Sequence[float]) -> TestResult:
    """Exact two-sided permutation test of mean(a) - mean(b): every split of the pooled values
    into groups of len(a) and len(b); p is the share whose |difference| reaches the observed one."""
    na, nb = len(a), len(b)
    if na < 1 or nb < 1:
        raise ValueError(f"a permutation test needs both samples non-empty, got {na} and {nb}")
    splits = math.comb(na + nb, na)
    if splits > MAX_SPLITS:
        raise ValueError(f"{splits} splits of {na} + {nb} values exceed MAX_SPLITS ({MAX_SPLITS})")
    pooled = np.asarray([*a, *b], dtype=float)
    total = pooled.sum()
    chosen = np.asarray(list(itertools.combinations(range(na + nb), na)), dtype=int)
    sums = pooled[chosen].sum(axis=1)
    differences = sums / na - (total - sums) / nb
    observed = statistics.fmean(a) - statistics.fmean(b)
    # With distinct values only the observed split (and, for equal sizes, its mirror) is as extreme.
    min_p = (2 if na == nb else 1) / splits
    return TestResult("exact permutation", observed, _at_least(differences, observed) / splits,
                      min_p=min_p, splits=splits)


def sign_flip_test(differences: Sequence[float], value: float = 0.0) -> TestResult:
    """Exact two-sided sign-flip test of mean(differences) = ``value`` (paired seeds, or one sample
    against a constant): every assignment of signs to the centred differences."""
    d = np.asarray(differences, dtype=float) - value
    n = len(d)
    if n < 1:
        raise ValueError("a sign-flip test needs at least one difference")
    splits = 2 ** n
    if splits > MAX_SPLITS:
        raise ValueError(f"{splits} sign assignments of {n} differences exceed MAX_SPLITS ({MAX_SPLITS})")
    signs = np.asarray(list(itertools.product((1.0, -1.0), repeat=n)))
    means = (signs * d).mean(axis=1)
    observed = float(d.mean())
    return TestResult("exact sign-flip", observed, _at_least(means, observed) / splits, min_p=2 / splits,
                      splits=splits)


def holm(p_values: Sequence[float | None]) -> list[float | None]:
    """Holm-Bonferroni adjusted p-values of a family declared in advance. ``None`` (or nan) marks
    a declared comparison that could not be tested: it still counts in the family's size m (it
    was declared), and stays None. The i-th smallest p is multiplied by m - i + 1, then made
    monotone (running maximum) and capped at 1."""
    m = len(p_values)
    tested = sorted((p, k) for k, p in enumerate(p_values) if p is not None and not math.isnan(p))
    adjusted: list[float | None] = [None] * m
    running = 0.0
    for rank, (p, k) in enumerate(tested):
        running = max(running, min(1.0, (m - rank) * p))
        adjusted[k] = running
    return adjusted


def equivalence_test(a: Sequence[float], b: Sequence[float] | float, margin: float, alpha: float = 0.05,
                     paired: bool = False) -> TestResult:
    """Two one-sided t tests (TOST) of ``-margin < a - b < margin``: p is the larger of the two
    one-sided p-values, below alpha exactly when the (1 - 2 alpha) CI (given as ``ci``) lies
    inside the margin. ``b`` a number: a constant (one-sample); ``paired``: the seeds pair
    (paired t); else Welch."""
    if margin <= 0:
        raise ValueError(f"the equivalence margin must be > 0, got {margin}")
    d = _design(a, b if isinstance(b, (int, float)) else list(b), paired)
    if d.se == 0.0:
        p = 0.0 if abs(d.difference) < margin else 1.0
    else:
        p_lower = 1.0 - t_cdf((d.difference + margin) / d.se, d.df)  # H0: a - b <= -margin
        p_upper = t_cdf((d.difference - margin) / d.se, d.df)  # H0: a - b >= margin
        p = max(p_lower, p_upper)
    return TestResult(f"TOST ({d.test})", d.difference, p, _t_test(d, 2 * alpha).ci, d.df)


def seeds_needed(difference: float, sd_a: float, sd_b: float = 0.0, alpha: float = 0.05,
                 max_seeds: int = 1000) -> int | None:
    """A planning estimate: the seeds per cell at which ``difference``, taken as the true effect
    with the seed standard deviations ``sd_a`` and ``sd_b`` taken as the true ones, would give a
    t statistic reaching the two-sided critical value at ``alpha`` (Welch-Satterthwaite degrees
    of freedom at n seeds per cell). At that n the test resolves about half the time; more seeds
    are needed to resolve it reliably. For a paired comparison pass the per-seed differences'
    standard deviation as ``sd_a`` and 0 as ``sd_b``; against a constant, ``sd_b`` = 0 too.
    None: no difference observed, or more than ``max_seeds`` seeds."""
    if difference == 0:
        return None
    variance = sd_a * sd_a + sd_b * sd_b
    if variance == 0:
        return 2
    for n in range(2, max_seeds + 1):
        df = (n - 1) * variance * variance / (sd_a ** 4 + sd_b ** 4)
        if abs(difference) / math.sqrt(variance / n) >= t_ppf(1.0 - alpha / 2.0, df):
            return n
    return None


# -- planning: what a design can resolve before it runs -------------------------------------------
DESIGNS = ("paired", "one-sample", "independent")
"""Designs of a comparison as the grid report tests it: ``paired`` seeds (paired t, sign-flip),
``one-sample`` against a seed-free value (one-sample t, sign-flip), ``independent`` seeds (Welch
t, permutation)."""


@dataclass
class Detectable:
    """What a t test at level ``alpha`` resolves with the planned seeds and seed spreads."""

    effect: float
    """The minimal detectable effect: the true difference that the test rejects with probability
    ``power`` (``(t_crit + t_power) * se``, the usual normal-theory approximation with t quantiles)."""
    least_passing: float
    """The smallest observed difference that can pass at all (``t_crit * se``): at that true
    difference the test resolves about half the time."""
    se: float
    """Standard error of the difference at the planned seeds."""
    df: float
    critical: float
    """Two-sided critical t at ``alpha``."""


def _planned_se_df(design: str, sd_a: float, n_a: int, sd_b: float, n_b: int) -> tuple[float, float]:
    if design not in DESIGNS:
        raise ValueError(f"design must be one of {DESIGNS}, got {design!r}")
    if n_a < 2 or (design == "independent" and n_b < 2):
        raise ValueError(f"a t test needs >= 2 seeds per side, got {n_a} and {n_b}")
    if design != "independent":  # paired: sd_a is the per-seed differences' sd; one-sample: b is a constant
        return sd_a / math.sqrt(n_a), n_a - 1.0
    va, vb = sd_a * sd_a / n_a, sd_b * sd_b / n_b
    return math.sqrt(va + vb), _welch_df(va, n_a, vb, n_b)


def minimal_detectable_effect(design: str, sd_a: float, n_a: int, sd_b: float = 0.0, n_b: int = 0,
                              alpha: float = 0.05, power: float = 0.8) -> Detectable:
    """The difference a two-sided t test at ``alpha`` detects with probability ``power`` at the
    planned seeds: ``(t(1 - alpha / 2, df) + t(power, df)) * se``. ``paired``: ``sd_a`` is the
    standard deviation of the per-seed differences over ``n_a`` pairs; ``one-sample``: ``sd_a``
    and ``n_a`` are the varying cell's (the other is a constant); ``independent``: each cell's sd
    and seeds, Welch-Satterthwaite df. For a family under Holm pass ``alpha / m``: the level the
    first rejection must reach."""
    if not 0.0 < power < 1.0:
        raise ValueError(f"power must be in (0, 1), got {power}")
    se, df = _planned_se_df(design, sd_a, n_a, sd_b, n_b)
    critical = t_ppf(1.0 - alpha / 2.0, df)
    return Detectable((critical + t_ppf(power, df)) * se, critical * se, se, df, critical)


def minimal_equivalence_margin(design: str, sd_a: float, n_a: int, sd_b: float = 0.0, n_b: int = 0,
                               alpha: float = 0.05, power: float = 0.8) -> float:
    """The narrowest margin within which :func:`equivalence_test` (TOST at ``alpha``) shows two
    cells with no true difference equivalent with probability ``power`` at the planned seeds:
    ``(t(1 - alpha, df) + t(1 - (1 - power) / 2, df)) * se`` (both one-sided tests must reject)."""
    if not 0.0 < power < 1.0:
        raise ValueError(f"power must be in (0, 1), got {power}")
    se, df = _planned_se_df(design, sd_a, n_a, sd_b, n_b)
    return (t_ppf(1.0 - alpha, df) + t_ppf(1.0 - (1.0 - power) / 2.0, df)) * se


def planned_seeds(design: str, sd_a: float, target: float, sd_b: float = 0.0, alpha: float = 0.05,
                  power: float = 0.8, equivalence: bool = False, most: int = 1000) -> int | None:
    """The fewest seeds at which a design resolves ``target`` at these spreads: its
    :func:`minimal_detectable_effect` (or, with ``equivalence``, its
    :func:`minimal_equivalence_margin`) is at most ``target``. Seeds count pairs (``paired``), the
    varying cell's seeds (``one-sample``), or seeds per cell, both cells alike (``independent``).
    None when even ``most`` seeds do not. Both figures fall as seeds grow, so the search doubles
    and then bisects."""
    def reaches(n: int) -> bool:
        n_b = n if design == "independent" else 0
        if equivalence:
            return minimal_equivalence_margin(design, sd_a, n, sd_b, n_b, alpha, power) <= target
        return minimal_detectable_effect(design, sd_a, n, sd_b, n_b, alpha, power).effect <= target

    low, high = 1, 2  # reaches(low) is false (a t test needs two seeds); find a high that reaches
    while not reaches(high):
        if high >= most:
            return None
        low, high = high, min(2 * high, most)
    while high - low > 1:  # reaches(high), not reaches(low)
        middle = (low + high) // 2
        low, high = (low, middle) if reaches(middle) else (middle, high)
    return high


def exact_p_floor(design: str, n_a: int, n_b: int = 0) -> float:
    """The smallest two-sided p the grid report's exact test can give at these seeds (as
    :func:`permutation_test` and :func:`sign_flip_test` give it with distinct values):
    ``independent``: ``(2 if n_a == n_b else 1) / C(n_a + n_b, n_a)``; ``paired`` and ``one-sample``
    (sign-flip over ``n_a`` differences): ``2 / 2 ** n_a``."""
    if design not in DESIGNS:
        raise ValueError(f"design must be one of {DESIGNS}, got {design!r}")
    if design != "independent":
        return min(1.0, 2.0 / 2 ** n_a)
    return min(1.0, (2 if n_a == n_b else 1) / math.comb(n_a + n_b, n_a))


def holm_floors(floors: Sequence[float]) -> list[float]:
    """The least Holm-adjusted p each member of a family can reach, given each one's least raw p:
    Holm's adjusted p-values never decrease when a raw p increases, so each is least when every
    raw p sits at its floor: ``holm(floors)``. With ``m`` equal floors ``f`` that is ``min(1, m f)``
    for every member (5 seeds against 5: 2 / 252 = 0.0079, times 14 = 0.111)."""
    return [1.0 if p is None else p for p in holm(list(floors))]


def bounded_sd(mean: float) -> float:
    """The largest standard deviation of seed scores in [0, 1] whose mean is ``mean``:
    ``sqrt(mean * (1 - mean))`` (Bhatia-Davis; reached when every seed ends at 0 or 1, the binomial
    case), 0.5 at most. The planning spread when no pilot measured one."""
    mean = min(1.0, max(0.0, mean))
    return math.sqrt(mean * (1.0 - mean))


def _beta_ppf(q: float, a: float, b: float) -> float:
    """The q-quantile of Beta(a, b), by bisection on :func:`betainc` (monotone in x)."""
    lo, hi = 0.0, 1.0
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        if betainc(a, b, mid) < q:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def binomial_interval(successes: int, trials: int, level: float = 0.90) -> tuple[float, float]:
    """The exact (Clopper-Pearson) two-sided ``level`` interval of a binomial rate: the
    ``(1 - level) / 2`` quantile of Beta(k, n - k + 1) and the ``(1 + level) / 2`` quantile of
    Beta(k + 1, n - k); 0 (1) where k = 0 (k = n). Conservative: it covers the rate at least
    ``level`` of the time whatever the rate, which a normal interval does not near 0."""
    if trials < 1 or not 0 <= successes <= trials:
        raise ValueError(f"binomial_interval needs 0 <= successes <= trials and trials >= 1, got "
                         f"{successes} of {trials}")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level}")
    tail = (1.0 - level) / 2.0
    lower = 0.0 if successes == 0 else _beta_ppf(tail, successes, trials - successes + 1)
    upper = 1.0 if successes == trials else _beta_ppf(1.0 - tail, successes + 1, trials - successes)
    return lower, upper


def at_floor(mean: float, problems: int, z: float = 2.0) -> bool:
    """Whether a cell's mean accuracy is one that a single evaluation of ``problems`` problems
    cannot tell from zero: within ``z`` binomial standard errors of 0 at that mean,
    ``mean <= z * sqrt(mean * (1 - mean) / problems)``, i.e. ``mean <= z^2 / (problems + z^2)``
    (3.8 % on 100 problems at z = 2). Between two such cells a difference, and the seeds it would
    take, measure a handful of problems, not an effect."""
    if problems < 1:
        raise ValueError(f"problems must be >= 1, got {problems}")
    return mean <= z * z / (problems + z * z)


# -- bootstrap over seeds x problems ---------------------------------------------------------------
Seed = float | Sequence[float]
"""One seed's result: its accuracy, or its per-problem outcomes (1 solved, 0 not) in problem order."""


def _seed_matrix(seeds: Sequence[Seed]) -> np.ndarray | None:
    """Per-problem outcomes as a seeds x problems array; None unless every seed has them, all of
    the same length (the grid's fixed problem set)."""
    if not seeds or any(isinstance(s, (int, float)) for s in seeds):
        return None
    lengths = {len(s) for s in seeds}
    return np.asarray(seeds, dtype=float) if len(lengths) == 1 and 0 not in lengths else None


@dataclass
class BootstrapResult:
    """A percentile bootstrap CI of mean(a) - mean(b)."""

    difference: float
    low: float
    high: float
    basis: str
    """``seeds x problems`` (both cells had per-problem outcomes) or ``seeds``."""
    resamples: int


def bootstrap_difference(a: Sequence[Seed], b: Sequence[Seed], paired: bool = False, alpha: float = 0.05,
                         resamples: int = 10_000, seed: int = 0) -> BootstrapResult:
    """Hierarchical bootstrap of mean(a) - mean(b) over seeds, then problems: each resample draws
    each cell's seeds with replacement (``paired``: the same draw for both, keeping pairs), then
    the problems with replacement. All seeds of both cells were evaluated on the same fixed
    problem set, so one problem draw is shared by every seed of a resample, which keeps the
    comparison problem-matched. Without per-problem outcomes for every seed it resamples the
    seeds' accuracies only (``basis`` says which). Seeded: the same inputs give the same CI."""
    if not a or not b:
        raise ValueError("bootstrap_difference needs at least one seed per cell")
    if paired and len(a) != len(b):
        raise ValueError(f"paired cells must have the same seeds, got {len(a)} and {len(b)}")
    rng = np.random.default_rng(seed)
    ma, mb = _seed_matrix(a), _seed_matrix(b)
    if ma is not None and mb is not None and ma.shape[1] == mb.shape[1]:
        basis = "seeds x problems"
        problems = rng.integers(0, ma.shape[1], size=(resamples, ma.shape[1]))
        # per resample and seed: the mean outcome over the drawn problems
        per_seed_a = ma[:, problems].mean(axis=2).T  # resamples x seeds
        per_seed_b = mb[:, problems].mean(axis=2).T
        point = float(ma.mean() - mb.mean())
    else:
        basis = "seeds"
        acc_a = np.asarray([_accuracy(s) for s in a], dtype=float)
        acc_b = np.asarray([_accuracy(s) for s in b], dtype=float)
        per_seed_a, per_seed_b = np.tile(acc_a, (resamples, 1)), np.tile(acc_b, (resamples, 1))
        point = float(acc_a.mean() - acc_b.mean())
    draw_a = rng.integers(0, len(a), size=(resamples, len(a)))
    draw_b = draw_a if paired else rng.integers(0, len(b), size=(resamples, len(b)))
    rows = np.arange(resamples)[:, None]
    differences = per_seed_a[rows, draw_a].mean(axis=1) - per_seed_b[rows, draw_b].mean(axis=1)
    low, high = np.quantile(differences, [alpha / 2.0, 1.0 - alpha / 2.0])
    return BootstrapResult(point, float(low), float(high), basis, resamples)


def _accuracy(seed: Seed) -> float:
    return float(seed) if isinstance(seed, (int, float)) else statistics.fmean(seed)


# -- learning curves ------------------------------------------------------------------------------
def took_off(final: float, final_se: float, start: float, start_se: float, n_se: float = 2.0) -> bool:
    """Whether a run left its untrained level: its final accuracy exceeds the untrained one by
    more than ``n_se`` standard errors of the difference of the two evaluations."""
    return final - start > n_se * math.hypot(final_se, start_se)


def takeoff_rate(runs: Sequence[tuple[float, float, float, float]], n_se: float = 2.0) -> float:
    """The share of ``runs``, each ``(final, final_se, start, start_se)``, that :func:`took_off`."""
    if not runs:
        raise ValueError("takeoff_rate needs at least one run")
    return sum(took_off(*run, n_se=n_se) for run in runs) / len(runs)


def curve_auc(x: Sequence[float], y: Sequence[float]) -> float:
    """Area under the curve ``y(x)`` by the trapezoid rule, divided by the length of the x axis
    it covers: the curve's mean height over its budget (a one-point curve: that point)."""
    if len(x) != len(y) or not x:
        raise ValueError(f"a curve needs as many x as y values, at least one; got {len(x)} and {len(y)}")
    if any(later < earlier for earlier, later in zip(x, x[1:])):
        raise ValueError(f"the budget axis must not decrease, got {list(x)}")
    span = x[-1] - x[0]
    if span == 0:
        return statistics.fmean(y)
    area = sum((x1 - x0) * (y0 + y1) / 2.0 for x0, x1, y0, y1 in zip(x, x[1:], y, y[1:]))
    return area / span


# -- duplicate runs -------------------------------------------------------------------------------
RUN_LABELS = ("output_dir",)
"""Config keys that name a run (where it writes) without changing what it computes."""
GRID_LABELS = ("grid", "cell", "wall_s", "checkpoint")
"""Grid metadata of a record that names or times a run (``baselines/grid.py``), not what it ran."""
CURVE_OUTCOME_KEYS = ("update", "episodes", "sampled_tokens", "accuracy", "stderr")
"""Eval-curve point keys that are outcomes of the computation (timings are not: they vary)."""
BUDGET_OUTCOME_KEYS = ("updates", "episodes", "tokens")
"""Budget counters a run produced; the number of sampled tokens all but identifies a run."""


@dataclass
class Duplicate:
    """A record that is the same run as an earlier one."""

    kept: str
    """Name of the record counted."""
    dropped: str
    """Name of the record not counted."""
    reason: str
    """``same config`` or ``same outcomes`` (identical evaluations and budget counters)."""
    config_differences: list[str]
    """The config keys that differ (``key: kept value / dropped value``)."""


def _flat(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in config.items():
        if isinstance(value, dict):
            flat.update(_flat(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _config_key(record: dict[str, Any]) -> str | None:
    """What a run computes: its resolved config without the keys that only name it, and how it
    was run (the grid metadata but for names and timings: trained or evaluated, which adapters
    went to which agent, ...). None for a record without its config."""
    if not record.get("config"):
        return None
    config = {k: v for k, v in _flat(record["config"]).items() if k not in RUN_LABELS}
    how = {k: v for k, v in (record.get("grid") or {}).items() if k not in GRID_LABELS}
    return json.dumps({"config": config, "algorithm": record.get("algorithm"), "env_id": record.get("env_id"),
                       "env_kwargs": record.get("env_kwargs"), "model": record.get("model"), "grid": how},
                      sort_keys=True, default=str)


def _outcome_key(record: dict[str, Any]) -> str | None:
    """What a training run produced: every evaluation, its budget counters and the final
    evaluation's per-problem outcomes (when recorded), under its seed. None for a record without
    an evaluation after training, whose outcomes cannot tell runs apart. The seed is part of the
    key: runs with different seeds sample differently, so they are different runs even when a
    model that never solves a problem and always writes to the token cap gives both the same
    zero curve and the same token counts."""
    curve = record.get("eval_curve") or []
    if not any(point.get("update", 0) > 0 for point in curve):
        return None
    points = [{k: point[k] for k in CURVE_OUTCOME_KEYS if k in point} for point in curve]
    budget = {k: v for k, v in (record.get("budget") or {}).items() if k in BUDGET_OUTCOME_KEYS}
    seed = (record.get("config") or {}).get("seed", (record.get("grid") or {}).get("seed"))
    return json.dumps({"seed": seed, "curve": points, "budget": budget, "problems": record.get("eval_outcomes")},
                      sort_keys=True)


def duplicate_runs(records: Sequence[dict[str, Any]]) -> list[Duplicate]:
    """The records that repeat an earlier record of ``records`` (the earlier one is kept): the
    same resolved config apart from run names and output folders (a seeded run is deterministic,
    so that is the same run), or the same outcomes: an identical evaluation curve (every
    evaluation's update, samples, accuracy and s.e.), identical budget counters (updates, episodes,
    sampled tokens) and per-problem outcomes under the same seed, which two different runs all but
    never share. The eval curve alone is not enough: runs that never leave 0 % share their curve."""
    seen: dict[str, dict[str, Any]] = {}
    duplicates = []
    for record in records:
        keys = [("same config", _config_key(record)), ("same outcomes", _outcome_key(record))]
        match = next(((reason, seen[key]) for reason, key in keys if key is not None and key in seen), None)
        if match is not None:
            reason, first = match
            a, b = _flat(first.get("config", {})), _flat(record.get("config", {}))
            differences = [f"{k}: {a.get(k)!r} / {b.get(k)!r}" for k in sorted(set(a) | set(b))
                           if k not in RUN_LABELS and a.get(k) != b.get(k)]
            duplicates.append(Duplicate(first["name"], record["name"], reason, differences))
            continue
        for _, key in keys:
            if key is not None:
                seen[key] = record
    return duplicates
