"""Tables, tests and plots of a grid's records (``python -m baselines.grid GRID --report-only``).

``baselines/grid.py`` writes one record per (cell, seed) into ``<grid folder>/records`` and calls
:func:`write_report` after every run, which regenerates ``<grid folder>/README.md``,
``<grid folder>/curves.png`` and ``<grid folder>/summary.json`` (the front pages' figures as data,
:func:`summary`) from the records and the grid file alone (so a test regenerates the committed
reports and compares):

- per cell: the mean final accuracy over seeds with its standard error over seeds, every seed's
  accuracy with its own evaluation standard error, the take-off rate (seeds whose final accuracy
  left their untrained evaluation by more than :data:`TAKEOFF_SE` standard errors of the
  difference), the area under the evaluation curve over the budget axis (its mean height), and
  the costs (training minutes, updates, episodes);
- the grid's declared :class:`Comparison` s, each answered by the tests of
  :mod:`leaderboards.stats`: a t test (paired when the grid declares the pair and both cells have
  the same seeds; one-sample against a seed-free untrained evaluation; else Welch) with its CI,
  an exact permutation or sign-flip test beside it, a bootstrap CI over seeds x problems, Holm's
  correction over every declared comparison, an equivalence test where a margin is declared,
  and a verdict that says "not resolved" where it is not, with a planning estimate of the seeds
  it would take. Only declared comparisons are tested: nothing is chosen after the results;
- cells evaluated with several samples per problem: avg@k and pass@k with their s.e.
  (:func:`sampled_table`); cells whose env reports stages (Relay level 4: did the reducer pass
  A + B, was the answerer right given what it heard): each stage's pass rate at the final
  evaluation (:func:`stage_table`); ablations of one agent (``base_seat``, ``fixed_message``): the drop
  from the source cell, that agent's contribution, with its s.e. (:func:`contribution_table`);
- a grid that asks for it (``leaderboard: true``, a benchmark's): the cells ranked by accuracy with
  their 95 % CIs (:func:`leaderboard_table`);
- duplicate runs (:func:`leaderboards.stats.duplicate_runs`) are named and counted once; records
  of cells the grid file no longer declares are named as not tested and read nowhere else
  (:func:`undeclared_records`), so a removed cell cannot slip back into a table;
- the plot: evaluation accuracy against the budget axis, one colour per cell, one line per seed
  (the PNG carries the plotted numbers, :func:`plotted_series`).

The budget axis is the one the training records were budgeted on (``grid.budget.axis``: episodes
or sampled tokens, counted at every evaluation), so every cell is read at the same samples;
records of grids run at equal training time, before the sample budgets, carry no sample count
per evaluation and are plotted against training minutes, and the report says so, with every
caveat the records carry (:func:`leaderboards.records.record_caveats`).
"""

from __future__ import annotations

import collections
import json
import math
import os
import statistics
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from leaderboards import stats
from leaderboards.records import WALL_CLOCK, grid_budget, load_records
from marft_agents.evaluation.problem_set import SAMPLED_FIGURES, STAGE_FIGURES

README = "README.md"
PLOT = "curves.png"
SUMMARY = "summary.json"
"""The report's headline figures as data (:func:`summary`), read by ``leaderboards.build`` for the
front pages instead of the markdown."""
ALPHA = 0.05
"""Family-wise error rate of a grid's declared comparisons (Holm), and the level of each CI."""
TAKEOFF_SE = 2.0
"""A seed took off when its final accuracy exceeds its own untrained evaluation by more than this
many standard errors of the difference of the two evaluations."""
MIN_SPREAD_SEEDS = 5
"""The fewest seeds a spread over seeds must rest on before an unresolved comparison prints a
seeds-needed estimate: a standard deviation from k seeds has k - 1 degrees of freedom, and its 95 %
upper bound is 32 times the estimate at 2 seeds, 2.9 times at 5; below 5 the figure would rest on
noise (the grids' headers re-plan after 5 seeds for the same reason)."""
BOOTSTRAP_RESAMPLES = 10_000
BOOTSTRAP_SEED = 0
AXES = {"episodes": ("episodes", "training episodes", 1.0),
        "sampled_tokens": ("sampled_tokens", "sampled tokens", 1.0),
        WALL_CLOCK: ("train_seconds", "training minutes (wall-clock)", 1 / 60),
        "updates": ("update", "updates", 1.0)}
"""Budget axes (a grid record's ``grid.budget.axis``, :func:`leaderboards.records.grid_budget`) as
(eval-curve point key, label, scale), in order of preference when the records do not say."""


@dataclass
class CellSummary:
    """A grid cell's records, summarised over seeds."""

    cell: str
    kind: str
    """``train``, ``untrained`` or an evaluation-only ablation (e.g. ``swapped``)."""
    algorithm: str
    profile: str
    seeds: list[int] = field(default_factory=list)
    accuracies: list[float] = field(default_factory=list)
    """Final accuracy per seed (same order as ``seeds``)."""
    stderrs: list[float] = field(default_factory=list)
    """Each seed's evaluation standard error."""
    outcomes: list[dict[int, float] | None] = field(default_factory=list)
    """Each seed's final per-problem outcomes (task index -> share of its samples solved), when
    its record has them."""
    starts: list[tuple[float, float] | None] = field(default_factory=list)
    """Each seed's untrained evaluation (accuracy, s.e.): its curve's update-0 point."""
    curves: list[tuple[list[float], list[float]]] = field(default_factory=list)
    """Each seed's evaluation curve on the budget axis: (x, accuracy); empty for no curve."""
    minutes: list[float] = field(default_factory=list)
    """Training minutes per seed (a cost)."""
    updates: list[int] = field(default_factory=list)
    episodes: list[int] = field(default_factory=list)
    greedy: bool = True
    """Every evaluation greedy (so an untrained cell's result does not depend on the seed)."""
    source: str | None = None
    """For an ablation cell, the cell whose trained adapters it evaluated."""
    seat: str | None = None
    """For an ablation of one agent (``base_seat``, ``fixed_message``: its records name a
    ``seat``), that agent: the cell's drop from its source is the agent's contribution."""
    message: str | None = None
    """For a ``fixed_message`` cell, what the seat said instead of its output."""
    sampled: list[dict[str, Any] | None] = field(default_factory=list)
    """Each seed's sampled-evaluation figures (:data:`marft_agents.evaluation.problem_set.SAMPLED_FIGURES`:
    ``samples_per_problem`` k, avg@k, pass@k and their s.e.), when its record has them (k > 1)."""
    stages: list[dict[str, Any] | None] = field(default_factory=list)
    """Each seed's per-stage figures at the final evaluation (:data:`marft_agents.evaluation.
    problem_set.STAGE_FIGURES`: stage name -> pass rate, its s.e., plays counted), when its env
    reports stages."""
    env_id: str = ""
    commits: list[str] = field(default_factory=list)
    problems_evaluated: list[int] = field(default_factory=list)
    """Each seed's number of evaluated problems (its record's ``eval_after.n``)."""

    @property
    def mean(self) -> float:
        return statistics.mean(self.accuracies)

    @property
    def sd(self) -> float | None:
        """Standard deviation of the per-seed accuracies; None with one seed."""
        return statistics.stdev(self.accuracies) if len(self.accuracies) > 1 else None

    @property
    def se_over_seeds(self) -> float | None:
        """``stdev / sqrt(k)`` of the per-seed accuracies; None with one seed."""
        return self.sd / math.sqrt(len(self.accuracies)) if self.sd is not None else None

    @property
    def seed_free(self) -> bool:
        """A greedy evaluation of the untrained model: the same for every seed, so one record is
        the cell's exact value on its problem set (a constant in a comparison)."""
        return self.kind == "untrained" and self.greedy and len(self.seeds) == 1

    @property
    def at_floor(self) -> bool:
        """Its mean is one a single evaluation cannot tell from zero (:func:`leaderboards.stats.at_floor`
        at its fewest evaluated problems, :data:`TAKEOFF_SE` standard errors)."""
        problems = min(self.problems_evaluated) if self.problems_evaluated else 0
        return problems > 0 and stats.at_floor(self.mean, problems, TAKEOFF_SE)

    def takeoff(self) -> tuple[int, int] | None:
        """(seeds that took off, seeds with an untrained start) for a training cell, else None."""
        runs = [(acc, se, *start) for acc, se, start in zip(self.accuracies, self.stderrs, self.starts)
                if start is not None]
        if self.kind != "train" or not runs:
            return None
        return sum(stats.took_off(*run, n_se=TAKEOFF_SE) for run in runs), len(runs)

    def auc(self) -> float | None:
        """Mean over seeds of each curve's area per unit of budget axis; None without curves."""
        areas = [stats.curve_auc(x, y) for x, y in self.curves if len(x) > 1]
        return statistics.mean(areas) if areas else None

    def problems(self) -> set[int] | None:
        """The problems every seed's per-problem outcomes cover, when all seeds have the same."""
        sets = [frozenset(o) if o is not None else None for o in self.outcomes]
        return set(sets[0]) if sets and None not in sets and len(set(sets)) == 1 else None


def _bootstrap_units(a: CellSummary, b: CellSummary) -> tuple[list[Any], list[Any]]:
    """Per seed of each cell, its per-problem outcomes in one problem order when every seed of both
    cells has them on the same problems (a problem-matched bootstrap), else its accuracy."""
    problems = a.problems()
    if problems is None or problems != b.problems():
        return list(a.accuracies), list(b.accuracies)
    order = sorted(problems)
    return ([[o[k] for k in order] for o in a.outcomes], [[o[k] for k in order] for o in b.outcomes])


@dataclass
class Comparison:
    """A question the grid answers, declared in the grid file before the runs: cell ``a`` minus
    cell ``b``, in accuracy points. Holm's correction runs over all of a grid's comparisons."""

    a: str
    """The cell measured."""
    b: str
    """The reference cell (e.g. the single agent, or the source of an ablation)."""
    question: str = ""
    """What the difference answers, shown in the report."""
    paired: bool = False
    """``a``'s seed k and ``b``'s seed k pair (e.g. ``a`` re-evaluates ``b``'s own trained runs), so
    the paired tests apply when both cells have the same seeds."""
    margin: float | None = None
    """Equivalence margin in accuracy points: with it, "no difference" is a claim the report can
    resolve (both one-sided tests reject a difference beyond +-margin)."""
    descriptive: bool = False
    """Declared outside the Holm family: the report prints its difference and confidence intervals
    but no test, p or verdict, and it does not count in the family's size; the plan sizes it but
    does not refuse on it. For a contrast the grid still shows after its plan found it cannot answer
    at the seeds the grid can afford (stopped on futility): dropped from the family, not hidden. A
    paired one pairs on the seeds both cells have."""

    def __post_init__(self) -> None:
        if self.a == self.b:
            raise ValueError(f"a comparison needs two different cells, got {self.a!r} twice")
        if self.descriptive and self.margin is not None:
            raise ValueError("a descriptive comparison is not tested, so it takes no equivalence margin")
        if self.margin is not None and self.margin <= 0:
            raise ValueError(f"margin must be > 0 accuracy points, got {self.margin}")


@dataclass
class ComparisonResult:
    """The statistics of one declared comparison."""

    comparison: Comparison
    a: CellSummary
    b: CellSummary
    difference: float
    """mean(a) - mean(b), as a fraction."""
    design: str
    """``paired seeds``, ``independent seeds`` or ``against a seed-free value``."""
    test: stats.TestResult | None
    """The t test (paired, one-sample or Welch); None when it cannot be run (``note`` says why)."""
    exact: stats.TestResult | None
    """The exact permutation (or sign-flip) test of the same difference."""
    bootstrap: stats.BootstrapResult | None
    note: str = ""
    holm_p: float | None = None
    """The t test's p, Holm-adjusted over the grid's declared comparisons."""
    equivalence: stats.TestResult | None = None
    equivalence_holm_p: float | None = None
    """The equivalence test's p, Holm-adjusted over the comparisons that declare a margin."""
    seeds_needed: int | None = None
    """For an unresolved difference: the planning estimate of :func:`leaderboards.stats.seeds_needed`."""
    both_at_floor: bool = False
    """Both cells sit at the floor (:attr:`CellSummary.at_floor`): their difference is a handful of
    problems, so no seeds-needed figure is estimable from it."""
    interim: tuple[int, int, int, int] | None = None
    """An interim look: fewer seeds counted than the grid file declares in either cell, as
    (counted in ``a``, in ``b``, declared for ``a``, for ``b``); None once both cells have all
    their declared seeds (or when the report is not told what was declared)."""

    @property
    def spread_seeds(self) -> int | None:
        """The fewest seeds any spread of this comparison rests on (a paired comparison: its pairs;
        a seed-free side has no spread and does not count); None when no side varies."""
        sides = [s for s in (self.a, self.b) if not s.seed_free]
        return min(len(s.seeds) for s in sides) if sides else None

    @property
    def resolved(self) -> bool:
        return self.holm_p is not None and self.holm_p < ALPHA

    @property
    def equivalent(self) -> bool:
        return self.equivalence_holm_p is not None and self.equivalence_holm_p < ALPHA

    def verdict(self) -> str:
        """The verdict as reports and front pages print it: an interim look says so first; an
        equivalence (shown or not) carries its TOST p (Holm over the margins)."""
        verdict = self._verdict()
        if self.equivalence is not None and not self.resolved and not self.comparison.descriptive:
            tost = f"TOST Holm p {_p(self.equivalence_holm_p)}"
            verdict = (f"{verdict} ({tost})" if self.equivalent else
                       f"{verdict}; not shown equivalent within +-{self.comparison.margin:g} ({tost})")
        if self.interim is not None:
            verdict = ("interim look at {} and {} of the {} and {} declared seeds, decides nothing: ".format(*self.interim)
                       + verdict)
        return verdict

    def _verdict(self) -> str:
        a, b = self.a.cell, self.b.cell
        if self.comparison.descriptive:
            return "descriptive: not tested (outside the Holm family)"
        if self.resolved:
            return f"resolved: {a} > {b}" if self.difference > 0 else f"resolved: {b} > {a}"
        if self.equivalent:
            return f"resolved: equivalent within +-{self.comparison.margin:g} points"
        if self.test is None or math.isnan(self.test.p):
            return f"not resolved: {self.note}"
        if self.difference == 0:
            return "not resolved (no difference observed)"
        if self.both_at_floor:
            return "not resolved: not estimable (both at the floor)"
        if self.spread_seeds is not None and self.spread_seeds < MIN_SPREAD_SEEDS:
            return (f"not resolved (no seeds-needed estimate: the spread rests on {self.spread_seeds} seeds, "
                    f"under {MIN_SPREAD_SEEDS})")
        if self.seeds_needed is None:
            return "not resolved (more than 1000 seeds per cell would be needed at this effect)"
        return f"not resolved ({self.seeds_needed} seeds per cell would be needed at this effect)"


def _flip(result: stats.TestResult) -> stats.TestResult:
    """The same test of the negated difference (``value - mean(x)`` instead of ``mean(x) - value``)."""
    ci = (-result.ci[1], -result.ci[0]) if result.ci is not None else None
    return stats.TestResult(result.test, -result.difference, result.p, ci, result.df, result.min_p, result.splits)


def compare(summaries: list[CellSummary], comparison: Comparison) -> ComparisonResult | None:
    """The tests of ``a - b`` before the family's correction; None while either side has no record."""
    by_name = {s.cell: s for s in summaries}
    a, b = by_name.get(comparison.a), by_name.get(comparison.b)
    if a is None or b is None:
        return None
    test = exact = None
    note = ""
    common = [seed for seed in a.seeds if seed in b.seeds]
    if comparison.descriptive and comparison.paired and a.seeds != b.seeds and common:
        a, b = _on_seeds(a, common), _on_seeds(b, common)
        note = f"paired on the {len(common)} seeds both cells have ({', '.join(map(str, common))})"
    difference = a.mean - b.mean
    paired = comparison.paired and a.seeds == b.seeds
    if comparison.paired and not paired:
        note = f"declared paired, but the seeds differ ({a.seeds} / {b.seeds}): tested as independent"
    if a.seed_free and b.seed_free:
        design, note = "two seed-free values", "both cells are seed-free evaluations: no seed variation to test"
    elif a.seed_free or b.seed_free:
        design = "against a seed-free value"
        varied, value = (b, a.mean) if a.seed_free else (a, b.mean)
        if len(varied.accuracies) < 2:
            note = f"{varied.cell} has one seed: no spread over seeds to test against"
        else:
            test = stats.one_sample_t(varied.accuracies, value, ALPHA)
            exact = stats.sign_flip_test(varied.accuracies, value)
            if a.seed_free:
                test, exact = _flip(test), _flip(exact)
    elif paired:
        design = "paired seeds"
        if len(a.seeds) < 2:
            note = "one paired seed: no spread over seeds to test against"
        else:
            test = stats.paired_t(a.accuracies, b.accuracies, ALPHA)
            exact = stats.sign_flip_test([x - y for x, y in zip(a.accuracies, b.accuracies)])
    else:
        design = "independent seeds"
        exact = stats.permutation_test(a.accuracies, b.accuracies)
        if len(a.seeds) < 2 or len(b.seeds) < 2:
            one = a.cell if len(a.seeds) < 2 else b.cell
            note = f"{one} has one seed: its spread over seeds is unknown"
        else:
            test = stats.welch_t(a.accuracies, b.accuracies, ALPHA)
    if test is not None and math.isnan(test.p):
        note = "no spread over seeds in either cell: the t test is undefined"
    bootstrap = stats.bootstrap_difference(*_bootstrap_units(a, b), paired=paired, alpha=ALPHA,
                                           resamples=BOOTSTRAP_RESAMPLES, seed=BOOTSTRAP_SEED)
    return ComparisonResult(comparison, a, b, difference, design, test, exact, bootstrap, note)


def _on_seeds(summary: CellSummary, seeds: list[int]) -> CellSummary:
    """``summary`` restricted to ``seeds`` (each per-seed list filtered alike)."""
    keep = [k for k, seed in enumerate(summary.seeds) if seed in seeds]
    per_seed = {f.name: [getattr(summary, f.name)[k] for k in keep] for f in fields(summary)
                if isinstance(getattr(summary, f.name), list) and len(getattr(summary, f.name)) == len(summary.seeds)
                and f.name != "commits"}
    return replace(summary, **per_seed)


def in_family(comparisons: list[Comparison]) -> list[Comparison]:
    """The comparisons in the Holm family: the declared ones but the descriptive."""
    return [c for c in comparisons if not c.descriptive]


def compare_all(summaries: list[CellSummary], comparisons: list[Comparison],
                declared: dict[str, int] | None = None) -> list[ComparisonResult | None]:
    """Every declared comparison with Holm's correction over the whole tested set (one not run
    yet still counts in the family's size; a descriptive one is not in it), the equivalence tests
    of those that declare a margin (Holm over those), and, for an unresolved difference, the seeds
    per cell it would take. ``declared``: cell -> the seeds its grid file declares, so that a look
    at fewer is marked interim."""
    results = [compare(summaries, c) for c in comparisons]
    by_name = {s.cell: s for s in summaries}
    for c, result in zip(comparisons, results):
        if result is not None and declared and c.a in declared and c.b in declared:
            counted = (len(by_name[c.a].seeds), len(by_name[c.b].seeds))  # before a descriptive pairing's restriction
            if counted[0] < declared[c.a] or counted[1] < declared[c.b]:
                result.interim = (*counted, declared[c.a], declared[c.b])
    family = [k for k, c in enumerate(comparisons) if not c.descriptive]
    p_values = [results[k].test.p if results[k] is not None and results[k].test is not None else None for k in family]
    for k, adjusted in zip(family, stats.holm(p_values)):
        if results[k] is not None:
            results[k].holm_p = adjusted
    margins = [k for k, c in enumerate(comparisons) if c.margin is not None]
    equivalence_p: list[float | None] = []
    for k in margins:
        result = results[k]
        if result is not None and result.test is not None and not math.isnan(result.test.p):
            result.equivalence = _equivalence(result)
        equivalence_p.append(result.equivalence.p if result is not None and result.equivalence else None)
    for k, adjusted in zip(margins, stats.holm(equivalence_p)):
        if results[k] is not None:
            results[k].equivalence_holm_p = adjusted
    for result in results:
        if result is not None:
            result.both_at_floor = result.a.at_floor and result.b.at_floor
        if result is not None and result.test is not None and not result.resolved and not result.equivalent \
                and not result.both_at_floor and not result.comparison.descriptive:
            # at the family's Bonferroni level alpha / m, the most Holm ever asks of one comparison
            result.seeds_needed = stats.seeds_needed(result.difference, *_seed_sds(result), ALPHA / len(family))
    return results


def _seed_sds(result: ComparisonResult) -> tuple[float, float]:
    """The seed standard deviations the planning estimate assumes (per cell; a paired comparison:
    that of the per-seed differences; a seed-free side: 0)."""
    a, b = result.a, result.b
    if result.design == "paired seeds":
        return statistics.stdev([x - y for x, y in zip(a.accuracies, b.accuracies)]), 0.0
    return (a.sd or 0.0), (b.sd or 0.0)


def _equivalence(result: ComparisonResult) -> stats.TestResult:
    a, b, margin = result.a, result.b, result.comparison.margin / 100
    if result.design == "against a seed-free value":
        varied, value = (b, a.mean) if a.seed_free else (a, b.mean)
        return stats.equivalence_test(varied.accuracies, value, margin, ALPHA)
    return stats.equivalence_test(a.accuracies, b.accuracies, margin, ALPHA, paired=result.design == "paired seeds")


def _waiting_clause(results: list[ComparisonResult | None]) -> str:
    """How the comparisons not run yet enter the family's size, in words that agree with their count."""
    waiting = sum(r is None for r in results)
    if waiting == 0:
        return "every declared comparison counts in the family's size"
    if waiting == 1:
        return "the one not run yet counts in the family's size too"
    return f"the {waiting} not run yet count in the family's size too"


def _p(p: float | None) -> str:
    if p is None or math.isnan(p):
        return "-"
    return "<0.001" if p < 0.001 else f"{p:.3f}"


def _ci(ci: tuple[float, float] | None) -> str:
    return f"[{100 * ci[0]:+.1f}, {100 * ci[1]:+.1f}]" if ci is not None else "-"


def _declared(comparison: Comparison) -> str:
    """The question as the report shows it, with what the grid file declared for it up front
    (paired seeds, an equivalence margin)."""
    declared = [d for d in ("paired" if comparison.paired else "",
                            f"margin +-{comparison.margin:g} points" if comparison.margin is not None else "",
                            "descriptive, outside the Holm family" if comparison.descriptive else "") if d]
    return f"{comparison.question} [{', '.join(declared)}]" if declared else comparison.question


def comparison_table(summaries: list[CellSummary], comparisons: list[Comparison],
                     results: list[ComparisonResult | None] | None = None) -> list[str]:
    """Markdown rows: per declared comparison, the cells, a - b in points with its t CI and
    bootstrap CI, the tests' p-values, Holm's adjusted p and the verdict. ``results`` are those
    of :func:`compare_all` on the same summaries when the caller has them already."""
    lines = [f"| question | a: mean (seeds) | b: mean (seeds) | a - b, points | {100 * (1 - ALPHA):g}% CI, t "
             f"| {100 * (1 - ALPHA):g}% CI, bootstrap | test | p | exact test p (least possible) | Holm p "
             "| verdict |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    if results is None:
        results = compare_all(summaries, comparisons)
    for comparison, result in zip(comparisons, results):
        question = _declared(comparison)
        if result is None:
            lines.append(f"| {question} | {comparison.a} | {comparison.b} | not run yet | | | | | | | |")
            continue
        test, exact, boot = result.test, result.exact, result.bootstrap
        test_name = f"{test.test}, df {test.df:.1f}" if test is not None else result.design
        exact_p = f"{_p(exact.p)} ({_p(exact.min_p)})" if exact is not None else "-"
        p = _p(test.p if test else None)
        if comparison.descriptive:  # its CIs are shown; no p, so that none is read as a test
            test_name, p, exact_p = f"none ({result.design})", "-", "-"
        boot_ci = f"{_ci((boot.low, boot.high))} ({boot.basis})" if boot is not None else "-"
        verdict = result.verdict()
        if result.note and result.test is not None and result.note not in verdict:
            verdict += f"; {result.note}"
        lines.append(f"| {question} | {result.a.cell}: {_pct(result.a.mean)} ({len(result.a.seeds)}) "
                     f"| {result.b.cell}: {_pct(result.b.mean)} ({len(result.b.seeds)}) "
                     f"| {100 * result.difference:+.1f} | {_ci(test.ci if test else None)} | {boot_ci} "
                     f"| {test_name} | {p} | {exact_p} | {_p(result.holm_p)} "
                     f"| {verdict} |")
    return lines


def grid_records(records_dir: Path) -> list[dict[str, Any]]:
    """The records of ``records_dir`` that belong to a grid (``record["grid"]`` set)."""
    return [r for r in load_records(records_dir) if r.get("grid")]


def _ordered(records: list[dict[str, Any]], order: list[str] | None) -> list[dict[str, Any]]:
    rank = {name: k for k, name in enumerate(order or [])}
    return sorted(records, key=lambda r: (rank.get(r["grid"]["cell"], len(rank)), r["grid"]["cell"], r["grid"]["seed"]))


def counted_records(records: list[dict[str, Any]], order: list[str] | None = None
                    ) -> tuple[list[dict[str, Any]], list[stats.Duplicate]]:
    """The records in cell order, without those that repeat an earlier run, and the duplicates."""
    ordered = _ordered(records, order)
    duplicates = stats.duplicate_runs(ordered)
    dropped = {d.dropped for d in duplicates}
    return [r for r in ordered if r["name"] not in dropped], duplicates


def undeclared_records(records: list[dict[str, Any]], order: list[str] | None) -> list[dict[str, Any]]:
    """The records of cells that the grid file (its cells, ``order``) no longer declares, e.g. a
    cell removed after its runs: they are named in the report but neither tabulated, plotted nor
    tested. Without ``order`` (no grid file) every cell counts as declared."""
    return [r for r in _ordered(records, order) if order and r["grid"]["cell"] not in order]


def superseded_records(records: list[dict[str, Any]], order: list[str] | None = None) -> list[dict[str, Any]]:
    """The records made under an older protocol (``caveats``) once the grid has any record made
    under the current one: a grid being rerun under a new protocol is reported on that protocol
    alone, so that no cell mixes the two and no comparison sets one against the other. They are
    named in the report until their reruns replace them. While no trained record is current
    (an untrained evaluation has no budget, so it is current under any), none is superseded: the
    older records are reported with their caveats."""
    ordered = [r for r in _ordered(records, order) if not order or r["grid"]["cell"] in order]  # declared cells
    if all(r.get("caveats") or r["grid"]["kind"] == "untrained" for r in ordered):
        return []
    return [r for r in ordered if r.get("caveats")]


def reported_records(records: list[dict[str, Any]], order: list[str] | None = None
                     ) -> tuple[list[dict[str, Any]], list[stats.Duplicate]]:
    """What the tables, plot and comparisons read: :func:`counted_records` (duplicates found over
    every record, so a removed cell that repeats a run is still named) without the records of
    undeclared cells (:func:`undeclared_records`) and the superseded ones
    (:func:`superseded_records`); and the duplicates."""
    counted, duplicates = counted_records(records, order)
    left_out = {r["name"] for r in [*undeclared_records(records, order), *superseded_records(records, order)]}
    return [r for r in counted if r["name"] not in left_out], duplicates


def _training_records(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in records if r["grid"]["kind"] == "train" and len(r.get("eval_curve", [])) > 0]


def budget_axis(records: list[dict[str, Any]]) -> tuple[str, str, float]:
    """The (eval-curve key, label, scale) of the budget axis: the axis the training records were
    budgeted on when they all say the same, else (or when their evaluation points lack it) the
    first of :data:`AXES` that every evaluation point carries."""
    training = _training_records(records)
    declared = {(grid_budget(r) or {}).get("axis") for r in training}
    preference = [AXES[a] for a in declared if a in AXES] if len(declared) == 1 else []
    points = [p for r in training for p in r["eval_curve"]]
    return next(axis for axis in [*preference, *AXES.values()] if all(axis[0] in p for p in points))


def _curve(record: dict[str, Any], axis: tuple[str, str, float]) -> tuple[list[float], list[float]]:
    key, _, scale = axis
    points = record.get("eval_curve", []) if record["grid"]["kind"] == "train" else []
    return [round(p.get(key, 0) * scale, 3) for p in points], [p["accuracy"] for p in points]


def _problem_outcomes(record: dict[str, Any]) -> dict[int, float] | None:
    """The final evaluation per problem (``record["eval_outcomes"]``): task index -> 1 / 0 solved,
    or with several samples per problem the share of them that solved it."""
    table = record.get("eval_outcomes")
    if not table:
        return None
    k = record["eval_after"].get("samples_per_problem", 1)
    values = [c / k for c in table["samples_solved"]] if "samples_solved" in table else table["solved"]
    return {int(i): float(v) for i, v in zip(table["task_index"], values)}


def _start(record: dict[str, Any]) -> tuple[float, float] | None:
    """The run's untrained evaluation: its curve's update-0 point, else ``eval_before``."""
    first = next((p for p in record.get("eval_curve", []) if p.get("update") == 0), None) or record.get("eval_before")
    return (first["accuracy"], first["stderr"]) if first and "stderr" in first else None


def summarise(records: list[dict[str, Any]], order: list[str] | None = None) -> list[CellSummary]:
    """One :class:`CellSummary` per cell, in ``order`` (cells not in it follow, by name). Pass the
    records :func:`counted_records` keeps, so that no run counts twice."""
    cells: dict[str, CellSummary] = {}
    axis = budget_axis(records)
    for record in _ordered(records, order):
        meta = record["grid"]
        summary = cells.get(meta["cell"])
        if summary is None:
            summary = cells[meta["cell"]] = CellSummary(
                meta["cell"], meta["kind"], record["algorithm"], str(record.get("env_kwargs", {}).get("profile", "")),
                source=meta.get("source"), env_id=record.get("env_id", ""))
        after = record["eval_after"]
        budget = record.get("budget", {})
        summary.seeds.append(meta["seed"])
        summary.accuracies.append(after["accuracy"])
        summary.stderrs.append(after["stderr"])
        summary.outcomes.append(_problem_outcomes(record))
        summary.starts.append(_start(record) if meta["kind"] == "train" else None)
        summary.curves.append(_curve(record, axis))
        summary.minutes.append(budget.get("wall_clock_s", 0.0) / 60)
        summary.updates.append(budget.get("updates", 0))
        summary.episodes.append(budget.get("episodes", 0))
        summary.greedy = summary.greedy and after.get("greedy", True) is not False
        summary.sampled.append({key: after[key] for key in SAMPLED_FIGURES}
                               if all(key in after for key in SAMPLED_FIGURES) else None)
        summary.stages.append({key: after[key] for key in STAGE_FIGURES}
                              if all(key in after for key in STAGE_FIGURES) else None)
        summary.seat, summary.message = meta.get("seat"), meta.get("message")
        summary.commits.append(record.get("commit", ""))
        summary.problems_evaluated.append(int(after.get("n", 0)))
    return list(cells.values())


def _pct(x: float) -> str:
    return f"{100 * x:.1f}"


def table(summaries: list[CellSummary]) -> list[str]:
    """Markdown rows of the cell table."""
    lines = ["| cell | kind | algorithm | profile | seeds | accuracy: mean +- s.e. over seeds | per seed (+- eval s.e.) "
             "| took off | AUC, % | train min (cost) | updates | episodes | commits |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for s in summaries:
        se = s.se_over_seeds
        mean = f"{_pct(s.mean)} +- {_pct(se)}" if se is not None else f"{_pct(s.mean)} (one seed)"
        per_seed = " / ".join(f"s{seed}: {_pct(a)} +- {_pct(e)}" for seed, a, e in zip(s.seeds, s.accuracies, s.stderrs))
        kind = f"{s.kind} ({s.source})" if s.source else s.kind
        takeoff = s.takeoff()
        auc = s.auc()
        train = s.kind == "train"
        commits = ", ".join(sorted(set(c for c in s.commits if c)))
        lines.append(f"| {s.cell} | {kind} | {s.algorithm} | {s.profile} | {len(s.seeds)} | {mean} | {per_seed} "
                     f"| {f'{takeoff[0]}/{takeoff[1]}' if takeoff else '-'} "
                     f"| {_pct(auc) if auc is not None else '-'} "
                     f"| {f'{statistics.mean(s.minutes):.1f}' if train else '-'} "
                     f"| {f'{statistics.mean(s.updates):.0f}' if train else '-'} "
                     f"| {f'{statistics.mean(s.episodes):.0f}' if train else '-'} | {commits} |")
    return lines


def leaderboard_table(summaries: list[CellSummary]) -> list[str]:
    """Markdown rows ranking the cells by mean accuracy (a benchmark's leaderboard), each with its
    95 % CI: a t interval over seeds where a cell has two or more, else its one evaluation's normal
    interval (mean +- 1.96 s.e.); the CI column says which."""
    lines = ["| rank | cell | kind | algorithm | profile | seeds | accuracy, % | 95 % CI, % | CI over "
             "| train min (cost) |", "|---|---|---|---|---|---|---|---|---|---|"]
    ranked = sorted(summaries, key=lambda s: -s.mean)
    for rank, s in enumerate(ranked, start=1):
        if s.se_over_seeds is not None:
            half, over = stats.t_ppf(1 - ALPHA / 2, len(s.seeds) - 1) * s.se_over_seeds, f"{len(s.seeds)} seeds (t)"
        else:
            half, over = 1.959964 * s.stderrs[0], "one evaluation (normal)"
        low, high = max(0.0, s.mean - half), min(1.0, s.mean + half)
        kind = f"{s.kind} ({s.source})" if s.source else s.kind
        minutes = f"{statistics.mean(s.minutes):.1f}" if s.kind == "train" and s.minutes else "-"
        lines.append(f"| {rank} | {s.cell} | {kind} | {s.algorithm} | {s.profile} | {len(s.seeds)} | {_pct(s.mean)} "
                     f"| [{_pct(low)}, {_pct(high)}] | {over} | {minutes} |")
    return lines


def critic_table(records: list[dict[str, Any]], order: list[str] | None = None) -> list[str]:
    """Markdown rows, one per training run whose learner logged a critic: its first decisions'
    explained variance against the ceiling, pooled over the later half of its updates
    (:func:`marft_agents.learners.critic_health.last_half`, from the record's per-update
    diagnostics); no rows when no run has a critic."""
    from marft_agents.learners.critic_health import MIN_CEILING, last_half  # torch: only for reports with critics

    def fmt(x: float | None, digits: int = 3) -> str:
        return f"{x:.{digits}f}" if x is not None and math.isfinite(x) else "-"

    rows = []
    for record in _ordered(_training_records(records), order):
        diagnostics = record.get("diagnostics") or {}
        columns = {k: v for k, v in diagnostics.items() if k.startswith("critic/")}
        per_update = [{"update": u, **{k: v[i] for k, v in columns.items()}} for i, u in
                      enumerate(diagnostics.get("update", []))]
        summary = last_half(per_update, step_key="update") if columns else None
        if summary is None:
            continue
        corr = (f"{fmt(summary.corr_min, 2)} to {fmt(summary.corr_max, 2)}" if math.isfinite(summary.corr_min)
                else "-")
        rows.append(f"| {record['grid']['cell']} | {record['grid']['seed']} | {summary.first_update}-{summary.last_update}"
                    f" ({summary.updates}) | {fmt(summary.ceiling)} | {fmt(summary.ev_first)} | {fmt(summary.ratio, 2)} "
                    f"| {corr} |")
    if not rows:
        return []
    return ["| cell | seed | updates pooled (count) | ceiling | EV, first decisions | share of the ceiling "
            "| value-return corr, per update |", "|---|---|---|---|---|---|---|", *rows, "",
            "Over the later half of each run's updates (those its record kept): the explained variance of the "
            "first decisions' values, pooled as 1 - mean(residual variance) / mean(return variance), against the "
            "ceiling, the between-task share of the return variance pooled the same way (what a critic that knew "
            "each task's success probability under the current policy would explain; `critic_health` in "
            "`marft_agents/learners`). \"share of the ceiling\" is their ratio; \"-\" where the ceiling is "
            f"below {MIN_CEILING:g}, too small to judge a critic against, or not measured (no grouped sampling)."]


def _diagnostic_rows(record: dict[str, Any]) -> list[dict[str, Any]]:
    """A record's per-update diagnostics (column-wise in ``record["diagnostics"]``) as one row per
    update: the update number and every ``critic/`` and ``baseline/`` figure."""
    diagnostics = record.get("diagnostics") or {}
    columns = {k: v for k, v in diagnostics.items() if k.startswith(("critic/", "baseline/"))}
    return [{"update": u, **{k: v[i] for k, v in columns.items()}} for i, u in enumerate(diagnostics.get("update", []))]


def _seed_mean(values: list[float]) -> float:
    """Mean of the finite values (NaN without one)."""
    finite = [v for v in values if math.isfinite(v)]
    return statistics.mean(finite) if finite else float("nan")


def baseline_table(records: list[dict[str, Any]], order: list[str] | None = None) -> list[str]:
    """Markdown rows, one per training cell and decision position whose runs logged the
    per-position baseline figures (grouped sampling): what each baseline leaves of the returns,
    per seed pooled over the later half of its updates
    (:func:`marft_agents.learners.critic_health.pooled_residuals`) and averaged over the seeds;
    each one's variance reduction, the critic's gain over the group mean (a ratio of the pooled
    means) with every seed's own, and the cell's training seconds per run against the first
    cell's. No rows when no run logged them."""
    runs = [(r, _diagnostic_rows(r)) for r in _ordered(_training_records(records), order)]
    runs = [(r, rows) for r, rows in runs if any(any(k.startswith("critic/loo_residual_var/pos") for k in row)
                                                 for row in rows)]
    if not runs:
        return []
    from marft_agents.learners.critic_health import (  # torch: only for reports with critics
        BASELINE_RESIDUALS, baseline_rows, pooled_residuals, variance_reduction)

    def fmt(x: float, digits: int = 3) -> str:
        return f"{x:.{digits}f}" if math.isfinite(x) else "-"

    cells: dict[str, list[tuple[dict[str, Any], list[dict[str, Any]]]]] = {}
    for record, rows in runs:
        cells.setdefault(record["grid"]["cell"], []).append((record, rows))
    def wall(record: dict[str, Any]) -> float:
        return float(record.get("budget", {}).get("wall_clock_s", 0.0))

    seconds = {cell: statistics.mean(wall(r) for r, _ in cell_runs) for cell, cell_runs in cells.items()}
    reference = next(iter(cells))
    # The ratio pairs runs by seed: a grid's seeds may run on different CPUs (every cell of a seed
    # on one), so a ratio of means would mix machines where the seeds' ratios do not.
    reference_s = {r["grid"]["seed"]: wall(r) for r, _ in cells[reference]}
    names = [name for name, _ in BASELINE_RESIDUALS]
    lines = [f"| cell | baseline | position | seeds | updates pooled per seed | left: {' | '.join(names)} "
             "| reduction: group / critic / group_critic | critic's gain over group (sd over seeds) | per seed gain "
             f"| training s per run (x {reference}) |", "|---|---|---|---|---|" + "---|" * len(names) + "---|---|---|---|"]
    for cell, cell_runs in cells.items():
        seeds = [r["grid"]["seed"] for r, _ in cell_runs]
        tables = [pooled_residuals(rows) for _, rows in cell_runs]
        counts = "/".join(str(n) for n in dict.fromkeys(len(baseline_rows(rows)) for _, rows in cell_runs))
        baseline = "/".join(dict.fromkeys(str((r.get("config") or {}).get("advantage", {}).get("baseline", "?"))
                                          for r, _ in cell_runs))
        ratios = {r["grid"]["seed"]: wall(r) / reference_s[r["grid"]["seed"]] for r, _ in cell_runs
                  if reference_s.get(r["grid"]["seed"], 0.0) > 0}
        ratio = statistics.mean(ratios.values()) if ratios else float("nan")
        each_ratio = "" if cell == reference else "; " + ", ".join(f"s{k} {fmt(v, 2)}" for k, v in ratios.items())
        for p in sorted({p for t in tables for p in t}):
            nan = {name: float("nan") for name in names}
            per_seed = [t.get(p, nan) for t in tables]
            pooled = {name: _seed_mean([f[name] for f in per_seed]) for name in names}
            cuts = " / ".join(fmt(variance_reduction(pooled[n], pooled["none"])) for n in names if n != "none")
            gains = [variance_reduction(f["critic"], f["group"]) for f in per_seed]
            finite = [g for g in gains if math.isfinite(g)]
            spread = f" ({fmt(statistics.stdev(finite))})" if len(finite) > 1 else ""
            gain = fmt(variance_reduction(pooled["critic"], pooled["group"]))
            each = ", ".join(f"s{seed} {fmt(g)}" for seed, g in zip(seeds, gains)) if finite else "-"
            lines.append(f"| {cell} | {baseline} | {p} | {len(seeds)} | {counts} | "
                         + " | ".join(fmt(pooled[n], 4) for n in names)
                         + f" | {cuts} | {gain if gain == '-' else gain + spread} | {each} "
                         f"| {seconds[cell]:.0f} (x {fmt(ratio, 2)}{each_ratio}) |")
    sizes = sorted({str((r.get("config") or {}).get("schedule", {}).get("group_size", "?")) for r, _ in runs})
    return lines + [
        "", "Left: the return variance each baseline leaves at a decision position (none: the returns' own; group: the "
        "leave-one-out group mean; critic: the critic as the run used it, the anchored baseline under "
        "`group_critic`; group_critic: the anchored baseline with the run's values, where a critic was logged), "
        "averaged over the later half of each run's updates (those its record kept), then over the cell's seeds. "
        "Reductions (1 - left / none) and the critic's gain over the group mean (1 - critic / group) are ratios of "
        "these pooled means, not means of per-update or per-seed ratios; the sd and per seed columns give each "
        "seed's own gain. Training s: the mean of the runs' `budget.wall_clock_s` (rollouts and updates only; the grid's "
        "`wall_s` adds evaluations and loading), and its ratio to the first cell's: the mean over the seeds both ran "
        "of the seed's own ratio (a seed's runs share a machine; the seeds' machines may differ), then each seed's.", "",
        "How to read it: position 0 is the first decision, which sees only the task; there the group mean already "
        "is the task's value up to its k - 1 samples, so even a perfect critic gains at most 1/k over it (k = "
        f"{'/'.join(sizes)} episodes per task here). Position 1 (and on) is a later decision, after the teammate's "
        "message: there a critic can see what the group mean cannot, and a gain above 0 is the critic earning its "
        "place. A gain below 0 at every position says the free group mean (`advantage.baseline: group`) is the "
        "better baseline, and the training seconds say what the critic cost."]


def _estimator(record: dict[str, Any]) -> str:
    """What estimator a training record's run used: GRPO's grouping and normalisation (with the
    normalisation's centre), else its ``advantage.baseline``."""
    from marft_agents.settings.estimators import CENTRES, estimator  # torch-free

    config = record.get("config") or {}
    if record.get("algorithm") == "grpo":
        learner = config.get("learner") or {}
        grouping, normalisation = learner.get("grouping", "team"), learner.get("normalisation", "mean_std")
        try:
            centre = estimator("normalisation", normalisation).centre
        except ValueError:  # a normalisation no longer registered
            centre = None
        said = {CENTRES[0]: "unit included", CENTRES[1]: "leave-one-out"}.get(centre, "?")
        return f"grpo {grouping}, {normalisation} (centre: {said})"
    return f"{record.get('algorithm', '?')} {(config.get('advantage') or {}).get('baseline', '?')}"


def gain_table(records: list[dict[str, Any]], order: list[str] | None = None) -> list[str]:
    """Markdown rows, one per training cell and decision position whose runs logged a baseline
    gain (``baseline/*``, or a critic's older ``critic/*`` figures): every estimator's baseline
    against the leave-one-out mean at the position (:mod:`marft_agents.learners.baseline_gain`),
    per seed pooled over the later half of its updates (``baseline_gain.pooled_gains``), then the
    figures averaged over the seeds and the gain a ratio of those means, with every seed's own.
    No rows when no run logged them."""
    from marft_agents.learners.baseline_gain import pooled_gains  # torch-free

    def fmt(x: float, digits: int = 3) -> str:
        return f"{x:.{digits}f}" if math.isfinite(x) else "-"

    cells: dict[str, list[tuple[dict[str, Any], dict[int, Any]]]] = {}
    for record in _ordered(_training_records(records), order):
        table = pooled_gains(_diagnostic_rows(record))
        if table:
            cells.setdefault(record["grid"]["cell"], []).append((record, table))
    if not cells:
        return []
    lines = ["| cell | estimator | position | seeds | updates pooled per seed | coverage | reference: LOO at the "
             "position | estimator's residual | gain (sd over seeds) | gain, unit left out | per seed gain |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for cell, runs in cells.items():
        estimators = "/".join(dict.fromkeys(_estimator(r) for r, _ in runs))
        for p in sorted({p for _, t in runs for p in t}):
            seeds = [(r["grid"]["seed"], t[p]) for r, t in runs if p in t]
            reference = _seed_mean([g.reference for _, g in seeds])
            mse = _seed_mean([g.mse for _, g in seeds])
            loo = _seed_mean([g.loo_mse if math.isfinite(g.loo_mse) else g.mse for _, g in seeds])
            gains = [g.gain for _, g in seeds]
            finite = [g for g in gains if math.isfinite(g)]
            spread = f" ({fmt(statistics.stdev(finite))})" if len(finite) > 1 else ""
            gain = fmt(1.0 - mse / reference if reference > 0 else float("nan"))
            left_out = fmt(1.0 - loo / reference if reference > 0 else float("nan"))
            counts = "/".join(str(n) for n in dict.fromkeys(g.updates for _, g in seeds))
            each = ", ".join(f"s{seed} {fmt(g.gain)}" for seed, g in seeds)
            lines.append(f"| {cell} | {estimators} | {p} | {len(seeds)} | {counts} "
                         f"| {fmt(_seed_mean([g.coverage for _, g in seeds]), 2)} | {fmt(reference, 4)} | {fmt(mse, 4)} "
                         f"| {gain if gain == '-' else gain + spread} | {left_out} | {each} |")
    return lines + [
        "", "Per decision position (0: the first decision; then every agent's in the order D_t scheduled them), the "
        "return the estimator's advantage deviates from (before any std division: the Monte Carlo return under "
        "MAPPO, the unit's score under GRPO, the discounted return-to-go of GiGPO's step groups) predicted by the "
        "estimator's baseline against the reference every estimator shares, the leave-one-out mean of the same "
        "return at the same position over the task's other episodes: gain = 1 - residual / reference, > 0 where the "
        "baseline sees what differs between the episodes. Coverage: the share of the position's decisions the "
        "baseline covers (step groups form only where episodes reached an identical observation; the rest keep "
        "their episode-level advantage and are not counted). A centre that includes the unit itself (GRPO's "
        "`mean`, `mean_std`) sits closer to it by construction: with n units per group its residual is "
        "((n - 1) / n)^2 of the leave-one-out one, so `gain, unit left out` (the same groups without the unit) "
        "is the column to compare across estimators; elsewhere it equals the gain. Each seed is pooled over the "
        "later half of its updates, then the figures are averaged over the seeds and the gain is a ratio of "
        "those means (`marft_agents/learners/baseline_gain.py`)."]


def _pm(value: float, se: float | None) -> str:
    """``value +- se`` in %, or ``value (one seed)`` without a spread."""
    return f"{_pct(value)} +- {_pct(se)}" if se is not None else f"{_pct(value)} (one seed)"


def _se_over_seeds(values: list[float]) -> float | None:
    return statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else None


def sampled_table(summaries: list[CellSummary]) -> list[str]:
    """Markdown rows, one per cell whose every seed was evaluated with several samples per problem:
    avg@k and pass@k, each as mean +- s.e. over seeds and per seed with its evaluation's s.e.;
    no rows (an empty list) when no cell was."""
    cells = [s for s in summaries if s.sampled and None not in s.sampled]
    if not cells:
        return []
    lines = ["| cell | kind | k | avg@k, %: mean +- s.e. over seeds | pass@k, %: mean +- s.e. over seeds "
             "| per seed avg@k / pass@k (+- eval s.e.) |",
             "|---|---|---|---|---|---|"]
    for s in cells:
        avg = [f["avg_at_k"] for f in s.sampled]
        passed = [f["pass_at_k"] for f in s.sampled]
        ks = "/".join(str(k) for k in sorted({f["samples_per_problem"] for f in s.sampled}))
        per_seed = " / ".join(f"s{seed}: {_pct(f['avg_at_k'])} +- {_pct(f['avg_at_k_stderr'])} / "
                              f"{_pct(f['pass_at_k'])} +- {_pct(f['pass_at_k_stderr'])}"
                              for seed, f in zip(s.seeds, s.sampled))
        kind = f"{s.kind} ({s.source})" if s.source else s.kind
        lines.append(f"| {s.cell} | {kind} | {ks} | {_pm(statistics.mean(avg), _se_over_seeds(avg))} "
                     f"| {_pm(statistics.mean(passed), _se_over_seeds(passed))} | {per_seed} |")
    return lines


def _stage_notes(env_id: str) -> dict[str, str]:
    """The env class's ``stages`` (stage name -> what passing it means), {} when it declares none
    or is not installed here (then the report names the stages without their meaning)."""
    try:
        from marft_envs.registry import env_class

        return dict(getattr(env_class(env_id), "stages", None) or {})
    except Exception:  # noqa: BLE001 - an env not installed here (a plugin) still has its figures
        return {}


def stage_table(summaries: list[CellSummary]) -> list[str]:
    """Markdown rows, one per cell whose final evaluations report stages (every seed whose record
    has them): each stage's pass rate as mean +- s.e. over those seeds, and per seed with its
    evaluation's s.e.; no rows (an empty list) when no cell has stages, so reports of grids
    without them are unchanged."""
    cells = [s for s in summaries if any(s.stages)]
    if not cells:
        return []
    found = list(dict.fromkeys(name for s in cells for f in s.stages if f for name in f["stage_pass"]))
    notes = {name: note for s in cells for name, note in _stage_notes(s.env_id).items()}
    # a record's keys are sorted; the env's declaration gives the order the stages are played
    names = [name for name in notes if name in found] + [name for name in found if name not in notes]
    headers = [f"{name}: {notes[name]}" if name in notes else name for name in names]
    lines = ["| cell | kind | seeds | " + " | ".join(f"{h}, %: mean +- s.e. over seeds" for h in headers)
             + " | per seed (+- eval s.e.): " + ", ".join(names) + " | plays per seed |",
             "|---|---|---|" + "---|" * len(names) + "---|---|"]
    for s in cells:
        staged = [(seed, f) for seed, f in zip(s.seeds, s.stages) if f]
        columns = []
        for name in names:
            rates = [f["stage_pass"][name] for _, f in staged if name in f["stage_pass"]]
            columns.append(_pm(statistics.mean(rates), _se_over_seeds(rates)) if rates else "-")
        per_seed = " / ".join(
            f"s{seed}: " + ", ".join(f"{_pct(f['stage_pass'][n])} +- {_pct(f['stage_stderr'][n])}"
                                     if n in f["stage_pass"] else "-" for n in names) for seed, f in staged)
        plays = "/".join(str(n) for n in sorted({n for _, f in staged for n in f["stage_n"].values()}))
        kind = f"{s.kind} ({s.source})" if s.source else s.kind
        lines.append(f"| {s.cell} | {kind} | {len(staged)} | " + " | ".join(columns) + f" | {per_seed} | {plays} |")
    return lines


def start_table(records: list[dict[str, Any]], order: list[str] | None = None) -> list[str]:
    """Markdown rows, one per training cell with a ``start`` (its records' ``grid.start``: other
    cells' final adapters, a different starting policy at each seed): per seed, the episodes its
    first update's rollout solved of those it sampled. That rollout is sampled from the seed's own
    starting policy, so it is each seed's start gate, seen afterwards, where the plan pilots one
    seed per cell before the run. No rows when no record has a start, so other reports are unchanged."""
    started = [r for r in _ordered(records, order)
               if r["grid"].get("start") and r["grid"]["kind"] == "train" and r.get("diagnostics")]
    if not started:
        return []
    lines = ["| cell | starts from | seeds | first update: solved of sampled, per seed | solved, % over seeds "
             "| seeds with none solved |", "|---|---|---|---|---|---|"]
    for cell in dict.fromkeys(r["grid"]["cell"] for r in started):
        mine = [r for r in started if r["grid"]["cell"] == cell]
        counts = []
        for r in mine:
            d = r["diagnostics"]
            sampled = int(d["rollout/episodes"][0])
            counts.append((r["grid"]["seed"], round(d["rollout/solved_rate"][0] * sampled), sampled))
        start = mine[0]["grid"]["start"]
        sources = ", ".join(dict.fromkeys([start["source"], *start.get("adapters", {}).values()]))
        per_seed = " / ".join(f"s{seed}: {solved} of {sampled}" for seed, solved, sampled in counts)
        share = sum(c[1] for c in counts) / sum(c[2] for c in counts)
        lines.append(f"| {cell} | {sources} | {len(counts)} | {per_seed} | {_pct(share)} "
                     f"| {sum(c[1] == 0 for c in counts)} |")
    return lines


def _paired_drop_se(source: dict[int, float] | None, ablated: dict[int, float] | None) -> float | None:
    """The s.e. of mean(source - ablated) over the problems both evaluations played, paired by
    problem (as an evaluation's own s.e., problems taken as distinct); None unless both have
    per-problem outcomes on the same problems."""
    if not source or not ablated or set(source) != set(ablated):
        return None
    differences = [source[k] - ablated[k] for k in source]
    mean = statistics.mean(differences)
    return math.sqrt(sum((d - mean) ** 2 for d in differences)) / len(differences)


def contribution_table(summaries: list[CellSummary]) -> list[str]:
    """Markdown rows, one per ablation cell of one agent (its records name a ``seat``): the drop
    from its source cell's accuracy, seed by seed (each seed against the same seed's trained
    team), as mean +- s.e. over seeds and per seed with the s.e. of the difference; no rows when
    the grid has no such cell."""
    by_name = {s.cell: s for s in summaries}
    lines: list[str] = []
    for s in summaries:
        source = by_name.get(s.source) if s.seat is not None else None
        if source is None:
            continue
        trained = {seed: (acc, se, outcomes)
                   for seed, acc, se, outcomes in zip(source.seeds, source.accuracies, source.stderrs, source.outcomes)}
        drops, per_seed = [], []
        for seed, acc, se, outcomes in zip(s.seeds, s.accuracies, s.stderrs, s.outcomes):
            if seed not in trained:
                continue
            source_acc, source_se, source_outcomes = trained[seed]
            paired = _paired_drop_se(source_outcomes, outcomes)
            drops.append(source_acc - acc)
            per_seed.append(f"s{seed}: {100 * (source_acc - acc):+.1f} +- "
                            + (_pct(paired) if paired is not None else f"{_pct(math.hypot(source_se, se))} (unpaired)"))
        if not drops:
            continue
        se = _se_over_seeds(drops)
        drop = (f"{100 * statistics.mean(drops):+.1f} +- {_pct(se)}" if se is not None
                else f"{100 * statistics.mean(drops):+.1f} (one seed)")
        change = f"{s.kind} ({s.message!r})" if s.message is not None else s.kind
        lines.append(f"| {s.seat} | {s.cell} | {change} | {source.cell}: {_pct(source.mean)} | {_pct(s.mean)} "
                     f"| {drop} | {' / '.join(per_seed)} |")
    if not lines:
        return []
    return ["| seat | cell | ablation | source: accuracy | ablated: accuracy | drop, points: mean +- s.e. over seeds "
            "| per seed drop (+- s.e.) |",
            "|---|---|---|---|---|---|---|", *lines]


def curve_series(records: list[dict[str, Any]], order: list[str] | None = None) -> list[dict[str, Any]]:
    """What the plot draws: per reported training record (cell order, then seed), its evaluation
    points on the budget axis and its accuracy in %. The PNG carries this list in its metadata,
    so a test can check that a committed plot shows its records."""
    return _series(reported_records(records, order)[0])


def _series(counted: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """:func:`curve_series` of records already counted (:func:`reported_records`)."""
    axis = budget_axis(counted)
    return [{"cell": r["grid"]["cell"], "seed": r["grid"]["seed"], "axis": axis[1], "x": _curve(r, axis)[0],
             "accuracy": [round(100 * p["accuracy"], 2) for p in r["eval_curve"]]}
            for r in _training_records(counted)]


SERIES_KEY = "marft-series"
"""PNG text-chunk key holding :func:`curve_series` as JSON."""


def plot(series: list[dict[str, Any]], out_path: Path, title: str) -> Path | None:
    """Accuracy against the budget axis, a colour per cell and a line per seed (``series`` from
    :func:`curve_series`); None without curves."""
    if not series:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cells = list(dict.fromkeys(line["cell"] for line in series))
    colours = {cell: plt.get_cmap("tab10")(k % 10) for k, cell in enumerate(cells)}
    fig, ax = plt.subplots(figsize=(8, 4.6))
    labelled: set[str] = set()
    for line in series:
        cell = line["cell"]
        ax.plot(line["x"], line["accuracy"], marker="o", markersize=3, linewidth=1, alpha=0.8,
                color=colours[cell], label=None if cell in labelled else cell)
        labelled.add(cell)
    ax.set_xlabel(series[0]["axis"])
    ax.set_ylabel("eval accuracy, %")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    tmp = Path(out_path).with_suffix(f".{os.getpid()}.tmp.png")
    fig.savefig(tmp, dpi=110, metadata={SERIES_KEY: json.dumps(series, sort_keys=True)})
    plt.close(fig)
    os.replace(tmp, out_path)  # two grid shards may regenerate the report at the same time
    return Path(out_path)


def plotted_series(png: Path) -> list[dict[str, Any]] | None:
    """The series a plot written by :func:`plot` carries (None for a PNG without them)."""
    from PIL import Image

    with Image.open(png) as image:
        text = image.text.get(SERIES_KEY) if hasattr(image, "text") else None
    return json.loads(text) if text else None


def _axis_lines(records: list[dict[str, Any]]) -> list[str]:
    """What the budget axis is, and for records run at equal training time, that they were."""
    key, label, _ = budget_axis(records)
    if key != AXES[WALL_CLOCK][0] and key != AXES["updates"][0]:
        return [f"Budget axis: {label} (counted at each evaluation); training wall-clock is a cost column."]
    budgets = sorted({b["time_budget_s"] for b in map(grid_budget, _training_records(records))
                      if b and b.get("axis") == WALL_CLOCK and b.get("time_budget_s") is not None})
    line = f"Budget axis: {label}: these records carry no sample count per evaluation."
    if budgets:
        line += (f" They were run at **equal training wall-clock** ({' / '.join(f'{b:g}' for b in budgets)} s of "
                 "rollouts and updates per run), **not at equal samples**: in the same time a cell with cheaper "
                 "updates ran more episodes (the episodes column), so their comparisons measure this machine's "
                 "throughput as much as the algorithms, and cells were evaluated at different update counts.")
    return [line]


def _commit_line(records: list[dict[str, Any]]) -> list[str]:
    """Which commits the counted records were made at: a grid's records answer its questions when
    they come from one code state (the code is part of the protocol). More than one commit is
    named with its counts, and is one code state when every record carries the same code digest
    (``Record.code``: the commits differ only outside marft's code, e.g. in docs or records)."""
    counts = collections.Counter(record.get("commit") or "unknown" for record in records).most_common()
    if len(counts) == 1:
        return [f"Every counted record was made at commit {counts[0][0]}.", ""]
    named = ", ".join(f"{commit}: {n}" for commit, n in counts)
    codes = {record.get("code") or "" for record in records}
    if len(codes) == 1 and "" not in codes:
        return [f"The counted records come from {len(counts)} commits ({named}) with the same code "
                f"(digest {codes.pop()}): they differ only outside marft's code.", ""]
    by_seed: dict[Any, set[str]] = {}
    for record in records:
        by_seed.setdefault((record.get("grid") or {}).get("seed"), set()).add(record.get("code") or "")
    if None not in by_seed and all(len(c) == 1 and "" not in c for c in by_seed.values()):
        return [f"The counted records come from {len(counts)} commits ({named}) and {len(codes)} code digests, but "
                "every seed's records share one: the code differs between seeds, never within one, so a paired "
                "contrast compares runs of one code state (an unpaired one may mix them).", ""]
    return [f"The counted records come from {len(counts)} commits ({named}): a difference between cells "
            "may be one of code as well as of algorithm.", ""]


def _dtype_lines(records: list[dict[str, Any]]) -> list[str]:
    """Which dtype the counted records ran in, by seed: ``model.dtype`` as the record names it
    (resolved on the machine; ``auto`` in records made before records named it). A seed whose
    records name two resolved dtypes is flagged: its pairs mix bf16's rounding into a contrast."""
    seeds: dict[str, list[Any]] = {}
    mixed = []
    by_seed: dict[Any, set[str]] = {}
    for record in records:
        dtype = ((record.get("config") or {}).get("model") or {}).get("dtype") or "not named"
        by_seed.setdefault((record.get("grid") or {}).get("seed"), set()).add(dtype)
    for seed, dtypes in sorted(by_seed.items(), key=lambda item: str(item[0])):
        named = dtypes - {"auto", "not named"}
        if len(named) > 1:
            mixed.append(seed)
        key = " / ".join(sorted(named)) or ("auto, not resolved in the record" if "auto" in dtypes else "not named")
        seeds.setdefault(key, []).append(seed)
    if len(seeds) == 1 and not mixed:
        (key,) = seeds
        return [] if key.startswith(("auto", "not")) else [f"Every counted record ran in {key}.", ""]
    line = "Dtypes the records ran in: " + "; ".join(f"{key} (seeds {', '.join(map(str, s))})" for key, s in seeds.items())
    line += "." if not mixed else (f". **Seeds {', '.join(map(str, mixed))} mix dtypes between their runs**: their "
                                   "pairs carry a numeric difference as well as the cells'.")
    return [line, ""]


def _caveat_lines(records: list[dict[str, Any]]) -> list[str]:
    """The records' own caveats (:func:`leaderboards.records.record_caveats`: an older protocol),
    each once, with the cells it applies to."""
    cells: dict[str, list[str]] = {}
    for record in records:
        for caveat in record.get("caveats", []):
            cells.setdefault(caveat, [])
            if record["grid"]["cell"] not in cells[caveat]:
                cells[caveat].append(record["grid"]["cell"])
    if not cells:
        return []
    every = list(dict.fromkeys(r["grid"]["cell"] for r in records))
    return ["Caveats the records carry:", ""] + [
        f"- {caveat} ({'every cell' if names == every else 'cells ' + ', '.join(names)})"
        for caveat, names in cells.items()] + [""]


def _duplicate_lines(duplicates: list[stats.Duplicate], records: list[dict[str, Any]],
                     counted: list[dict[str, Any]]) -> list[str]:
    if not duplicates:
        return []
    cell_of = {r["name"]: r["grid"]["cell"] for r in records}
    counted_cells = {r["grid"]["cell"] for r in counted}
    lines = ["## Duplicate runs", ""]
    for d in duplicates:
        why = ("the same config apart from names and output folders" if d.reason == "same config" else
               "identical evaluations, update by update, and identical counts of updates, episodes and "
               "sampled tokens")
        differs = f"; its config differs only in {', '.join(d.config_differences)}" if d.config_differences else ""
        gone = cell_of[d.dropped] not in counted_cells
        lines.append(f"- `{d.dropped}` is the same run as `{d.kept}` ({why}{differs}): counted once, as `{d.kept}`"
                     + (f"; cell `{cell_of[d.dropped]}` has no other record, so it is left out of the tables."
                        if gone else "."))
    return lines + [""]


def _undeclared_lines(records: list[dict[str, Any]], order: list[str] | None,
                      duplicates: list[stats.Duplicate]) -> list[str]:
    """The cells whose records are here but which the grid file no longer declares (:func:`undeclared_records`)."""
    cells: dict[str, list[str]] = {}
    for record in undeclared_records(records, order):
        cells.setdefault(record["grid"]["cell"], []).append(record["name"])
    if not cells:
        return []
    dropped = {d.dropped for d in duplicates}
    lines = ["## Records of cells not in the grid file", ""]
    for cell, names in cells.items():
        repeats = [n for n in names if n in dropped]
        lines.append(f"- `{cell}` ({', '.join(f'`{n}`' for n in names)}): not in the grid file: not tested; left out "
                     "of the tables, the plot and the comparisons"
                     + (f" ({', '.join(f'`{n}`' for n in repeats)}: also a duplicate run, above)." if repeats else "."))
    return lines + [""]


def _superseded_lines(records: list[dict[str, Any]], order: list[str] | None) -> list[str]:
    superseded = superseded_records(records, order)
    if not superseded:
        return []
    cells: dict[str, list[str]] = {}
    for record in superseded:
        cells.setdefault(record["grid"]["cell"], []).append(f"s{record['grid']['seed']}")
    caveats = sorted({c for r in superseded for c in r["caveats"]})
    return ["## Records awaiting their rerun", "",
            f"{len(superseded)} records were made under an older protocol and are being replaced by reruns under this "
            "grid's: they are not counted in the tables, the plot or the comparisons (a cell would otherwise mix the "
            "two protocols). Their caveats: " + "; ".join(caveats) + ".", "",
            *[f"- `{cell}`: {', '.join(seeds)}" for cell, seeds in cells.items()], ""]


def _machine_time_line(records: list[dict[str, Any]], counted: list[dict[str, Any]]) -> str:
    """The machine time of the counted records, and apart from it that of the records left out
    (awaiting their rerun, undeclared cells, duplicates): a grid's cost is what its counted runs took."""
    def hours(rs: list[dict[str, Any]]) -> float:
        return sum(r["grid"].get("wall_s", 0.0) for r in rs) / 3600

    names = {r["name"] for r in counted}
    left_out = [r for r in records if r["name"] not in names]
    line = (f"Machine time of the recorded runs (training, evaluations, loading): {hours(counted):.2f} h "
            f"over the {len(counted)} runs counted here")
    if left_out:
        line += f"; the {len(left_out)} records not counted took another {hours(left_out):.2f} h"
    return line + "."


def _comparison_entry(comparison: Comparison, result: ComparisonResult | None) -> dict[str, Any]:
    """One declared comparison as plain data: the cells, and once both have records the
    difference in points, its t CI, Holm's p and the verdict (as in :func:`comparison_table`)."""
    entry: dict[str, Any] = {"question": _declared(comparison), "a": comparison.a, "b": comparison.b,
                             **({"descriptive": True} if comparison.descriptive else {})}
    if result is None:
        return entry | {"run": False}
    ci = result.test.ci if result.test is not None else None
    return entry | {"run": True, "a_mean": round(100 * result.a.mean, 1), "a_seeds": len(result.a.seeds),
                    "b_mean": round(100 * result.b.mean, 1), "b_seeds": len(result.b.seeds),
                    "difference": round(100 * result.difference, 1),
                    "ci_t": [round(100 * ci[0], 1), round(100 * ci[1], 1)] if ci is not None else None,
                    "holm_p": None if result.holm_p is None or math.isnan(result.holm_p) else round(result.holm_p, 3),
                    "resolved": result.resolved or result.equivalent, "verdict": result.verdict()}


@dataclass(frozen=True)
class GridState:
    """A grid's records read once, and what the report and the summary both show of them: the
    records counted (their duplicates apart), the cells' summaries and the declared comparisons'
    results (bootstrap included), so that writing the two files computes each of them once."""
    records: list[dict[str, Any]]
    counted: list[dict[str, Any]]
    duplicates: list[stats.Duplicate]
    summaries: list[CellSummary]
    results: list[ComparisonResult | None]


def grid_state(grid_dir: Path, order: list[str] | None = None,
               comparisons: list[Comparison] | None = None, declared: dict[str, int] | None = None) -> GridState:
    """Read ``<grid_dir>/records`` and compute the :class:`GridState` of the report and summary
    (``declared``: cell -> its declared seeds, :func:`compare_all`)."""
    records_dir = Path(grid_dir) / "records"
    records = grid_records(records_dir) if records_dir.is_dir() else []
    counted, duplicates = reported_records(records, order)
    summaries = summarise(counted, order)
    results = compare_all(summaries, comparisons, declared) if comparisons else []
    return GridState(records, counted, duplicates, summaries, results)


def summary(state: GridState, title: str, order: list[str] | None = None,
            comparisons: list[Comparison] | None = None, plan: dict[str, Any] | None = None) -> dict[str, Any]:
    """The figures a front page shows of a grid (``<grid_dir>/summary.json``, written beside the
    report): the title, how many records there are and how many are counted, the machine time
    line, and every declared comparison (:func:`_comparison_entry`), so nothing has to be read
    back out of the markdown."""
    records, counted = state.records, state.counted
    return {"title": title, "records": len(records), "counted": len(counted),
            "awaiting_rerun": len(superseded_records(records, order)) if records else 0,
            "machine_time": _machine_time_line(records, counted) if records else "",
            "comparisons": [_comparison_entry(c, r) for c, r in zip(comparisons or [], state.results)],
            **({"plan": plan} if plan else {})}


def report(grid_dir: Path, state: GridState, title: str, order: list[str] | None = None, description: str = "",
           comparisons: list[Comparison] | None = None, write_plot: bool = True,
           plan: dict[str, Any] | None = None, leaderboard: bool = False) -> str:
    """The markdown of ``<grid_dir>/README.md`` from the grid's :class:`GridState`; writes the
    plot too unless ``write_plot`` is False; ``leaderboard``: with the cells ranked
    (:func:`leaderboard_table`)."""
    grid_dir = Path(grid_dir)
    records = state.records
    lines = [f"# {title}", "",
             "Generated by `python -m baselines.grid GRID --report-only` from `records/*.json` (written by "
             "`python -m baselines.grid`); do not edit by hand. Accuracy: on the fixed held-out problem set of the "
             "grid's config, after training. \"s.e. over seeds\" is stdev / sqrt(seeds); each seed's +- is its "
             f"evaluation's standard error (clustered by problem). \"took off\": seeds whose final accuracy exceeds "
             f"their own untrained evaluation by more than {TAKEOFF_SE:g} standard errors of the difference. "
             "\"AUC\": the area under a seed's evaluation curve over the budget axis divided by the axis length "
             "(its mean accuracy over the budget), averaged over seeds.", ""]
    if description:
        lines += [description.strip(), ""]
    if not records:
        lines += ["No records yet: run `python -m baselines.grid <grid file>`.", ""]
        if comparisons:
            tested = len(in_family(comparisons))
            lines += ["## Comparisons", "", *comparison_table([], comparisons, state.results), "",
                      f"Only the {tested} comparisons declared in the grid file are tested"
                      + (f" (and {len(comparisons) - tested} declared descriptive, not tested)"
                         if tested < len(comparisons) else "")
                      + "; they were declared before any run, and none has records yet.", ""]
        return "\n".join(lines + plan_lines(plan))
    counted, duplicates, summaries = state.counted, state.duplicates, state.summaries
    lines += _axis_lines(counted) + [""] + _commit_line(counted) + _dtype_lines(counted) + _caveat_lines(counted) + table(summaries) + [""]
    if leaderboard:
        lines += ["## Leaderboard", "", *leaderboard_table(summaries), "",
                  "Ranked by the mean final accuracy on the held-out problems; a rank is not a test (the comparisons "
                  "below say what is resolved).", ""]
    lines += _duplicate_lines(duplicates, records, counted)
    lines += _undeclared_lines(records, order, duplicates)
    lines += _superseded_lines(records, order)
    sampled = sampled_table(summaries)
    if sampled:
        lines += ["## Sampled evaluations", "", *sampled, "",
                  "avg@k: the share of all k samples per problem that solved it (the expected accuracy of one sampled "
                  "answer; the cell table's accuracy for these cells); pass@k: the share of problems that at least one "
                  "of its k samples solved. Each seed's +- is its evaluation's standard error, clustered by problem "
                  "statement (a problem's k samples are correlated).", ""]
    staged = stage_table(summaries)
    if staged:
        lines += ["## Per-stage outcomes", "", *staged, "",
                  "At each seed's final evaluation, the share of plays (every sample) whose last graded round passed "
                  "each stage the env reports (for Relay level 4, `reduce`: the number the reducer passed equals "
                  "A + B; `answer`: the answerer's answer equals that number plus C, right given what it heard; "
                  "`marft_envs/envs/relay.py`, \"Stages\"). A team can fail the problem with either stage passed, so "
                  "these show which role failed where the cell table's accuracy cannot. Each seed's +- is its "
                  "evaluation's standard error, clustered by problem statement.", ""]
    starts = start_table(counted, order)
    if starts:
        lines += ["## Each seed's start", "", *starts, "",
                  "A cell with a `start` begins each seed from that seed's trained cells, a different policy per seed; "
                  "the plan pilots its start gate at one seed before the run (the Plan section). Each seed's first "
                  "update samples its rollout from that seed's own start, so its solved episodes are the seed's gate "
                  "seen afterwards: an update with none solved carries no policy gradient under a 0/1 team reward.", ""]
    contribution = contribution_table(summaries)
    if contribution:
        lines += ["## Per-agent contribution", "", *contribution, "",
                  "What one agent's training (`base_seat`: its adapter zeroed, it plays the base model) or its message "
                  "(`fixed_message`: its output replaced) contributes: the source cell's accuracy minus the ablated "
                  "team's, each seed against the same seed's trained team. Each seed's +- is the standard error of "
                  "that difference over the problems, paired (both teams played the same problems); \"(unpaired)\" "
                  "where a record lacks per-problem outcomes: sqrt(s.e.^2 + s.e.^2) of the two evaluations, wider. "
                  "Whether a drop is resolved is for a declared comparison (paired) to say.", ""]
    critic = critic_table(counted, order)
    if critic:
        lines += ["## The critic against its ceiling", "", *critic, ""]
    positions = baseline_table(counted, order)
    if positions:
        lines += ["## Baselines per decision position", "", *positions, ""]
    gains = gain_table(counted, order)
    if gains:
        lines += ["## Baseline gain per decision position, every estimator", "", *gains, ""]
    if comparisons:
        lines += ["## Comparisons", ""] + comparison_table(summaries, comparisons, state.results) + [""]
        family = in_family(comparisons)
        descriptive = len(comparisons) - len(family)
        aside = (f" ({descriptive} more declared descriptive: its difference and CIs are shown, on the seeds both "
                 "cells have when paired, with no test; it is not in the family)" if descriptive == 1 else
                 f" ({descriptive} more declared descriptive: their differences and CIs are shown, on the seeds both "
                 "cells have when paired, with no test; they are not in the family)" if descriptive else "")
        waiting = _waiting_clause([r for r, c in zip(state.results, comparisons) if not c.descriptive])
        lines += [
            f"Only the {len(family)} comparisons declared in the grid file are tested{aside}; none is chosen after "
            f"the results (no \"best of\"). Holm's correction keeps the chance of any false \"resolved\" among "
            f"them at {ALPHA:g} ({waiting}). The test: a paired t test where the grid declares "
            "the pair and both cells have the same seeds; a one-sample t test against a seed-free value (a greedy "
            "evaluation of the untrained model); else Welch's t test (Welch-Satterthwaite df). Beside it the exact "
            "permutation test (sign-flip when paired or against a value), which assumes no distribution but "
            "cannot go below its least possible p with so few seeds (3 against 3: 0.100; 3 paired: 0.250). The "
            "bootstrap CI resamples seeds, then problems within them when the records carry per-problem "
            "outcomes, else the seeds' accuracies only (too narrow with 2-3 seeds; the t CI is the one to read). "
            "Verdicts rest on the Holm-adjusted t test. \"n seeds per cell would be needed\" is a planning "
            f"estimate: the seeds per cell at which the observed difference, with the observed spread over "
            f"seeds, would give a t statistic at the family's Bonferroni level {ALPHA:g} / {len(family)}; "
            "at that n it resolves about half the time; it is printed only where every spread rests on at least "
            f"{MIN_SPREAD_SEEDS} seeds. \"not estimable (both at the floor)\": both cells' means are "
            f"within {TAKEOFF_SE:g} binomial standard errors of zero for one evaluation of their problems (3.8 % on "
            "100): their difference is a handful of problems, from which no seeds-needed figure means anything. "
            "Beside every equivalence verdict, shown or not, stands its TOST p (Holm over the comparisons with a "
            "margin). \"interim look\": fewer seeds are counted than the grid file declares; such a row decides "
            "nothing.", ""]
    lines += plan_lines(plan)
    lines += [_machine_time_line(records, counted), ""]
    series = _series(counted)
    drawn = plot(series, grid_dir / PLOT, title) is not None if write_plot else bool(series)
    if drawn:
        lines += [f"![accuracy against {series[0]['axis']}]({PLOT})", ""]
    return "\n".join(lines)


def _signed_pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}"


def _margin(margin: float | None) -> str:
    return "-" if margin is None else f"+-{100 * margin:.1f}"


def _margin_rule_line(rule: dict[str, Any]) -> str:
    """What training did in a contrast's two cells, and the widest margin that allows."""
    line = f"training effect {100 * rule['training_effect']:+.1f} points over {rule['runs']} runs"
    if rule.get("widest") is None:
        return line
    return line + f"; the margin rule ({rule['fraction']:g} x that) allows +-{100 * rule['widest']:.1f} at most"


def plan_lines(plan: dict[str, Any] | None) -> list[str]:
    """The plan of a grid (``python -m baselines.grid GRID --plan``, :mod:`baselines.grid_plan`) as
    markdown: whether it may start, and why not in one line each; each training cell's start gate;
    each declared comparison's minimal detectable effect and exact-test floor; the machine time.
    No lines without a plan."""
    if not plan:
        return []
    made = plan.get("made", {})
    verdict = "accepted" if plan["accepted"] else "refused"
    lines = ["## Plan", "",
             f"Made by `python -m baselines.grid GRID --plan` at commit {made.get('commit', '?')} (code "
             f"{made.get('code', '?')}), {made.get('date', '?')}: **{verdict}**"
             + (" (started anyway with --force)" if plan.get("forced") else "") + ".", ""]
    if plan["refusals"]:
        lines += [f"- {line}" for line in plan["refusals"]] + [""]
    gate = plan.get("gate", {})
    if plan["gates"]:
        lines += [f"Start gates: the sampled team reward of each training cell's starting policy over "
                  f"{gate.get('episodes', '?')} or more episodes of its training tasks; a cell passes when an update "
                  "of its episodes would hold at least one rewarded episode with probability "
                  f">= {gate.get('min_signal', '?')} (1 - (1 - rate)^episodes per update) over the whole exact 90 % "
                  "interval of the pilot's rate (in brackets), fails when it holds nowhere in it, and is inconclusive "
                  "in between: an update with no rewarded episode carries no policy gradient under a 0/1 team "
                  "reward.", "",
                  "| cell | gate from | rewarded / episodes | rate, % | episodes per update | P(update rewarded) "
                  "| gate |", "|---|---|---|---|---|---|---|"]
        for g in plan["gates"]:
            if g.get("rate") is None:
                lines.append(f"| {g['cell']} | {g['source']} | - | - | {g.get('episodes_per_update', '-')} | - "
                             f"| {g.get('note', 'not measured')} |")
                continue
            interval = g.get("signal_interval")
            signal = f"{g['signal']:.2f}" + (f" [{interval[0]:.2f}, {interval[1]:.2f}]" if interval else "")
            verdict = g.get("verdict", "pass" if g["passed"] else "FAIL")
            lines.append(f"| {g['cell']} | {g['source']} | {g['rewarded']:g} / {g['episodes']} | {100 * g['rate']:.2f} "
                         f"| {g['episodes_per_update']} | {signal} | {verdict} |")
        lines.append("")
    if plan["contrasts"]:
        meaningful = plan.get("meaningful_effect")
        descriptive = sum(bool(c.get("descriptive")) for c in plan["contrasts"])
        aside = (f" (and {descriptive} descriptive, outside the family: sized at {plan['alpha']:g} / "
                 f"{plan['family'] + 1} as if it joined it, refusing nothing)" if descriptive else "")
        family = (f"{plan['family']} tested{aside}, Holm over the tested" if descriptive else
                  f"{plan['family']} declared, Holm over all of them")
        lines += [f"Contrasts: {family} at {plan['alpha']:g}: the minimal "
                  f"detectable effect (MDE) is the true difference a t test at the Bonferroni level "
                  f"{plan['alpha']:g} / {plan['family']} detects with power {plan['power']:g}; \"least passing\" the "
                  "smallest observed difference that can pass at all; \"null shown within\" the narrowest equivalence "
                  "margin a null could be shown within with that power, where a margin is declared; the seed spread "
                  "from the grid's records where a cell has two or more seeds that vary, else (a follow-up) from the "
                  "earlier grid's records named below, else the largest a score in [0, 1] can have "
                  "(sqrt(m (1 - m)) at the mean m the cell would have with the meaningful effect, 0.5 at most); "
                  "the exact test's least p at the declared seeds, and after Holm's correction. Meaningful effect: "
                  + (f"{meaningful:g} points." if meaningful is not None else "not declared."), "",
                  "| question | a - b | design, seeds | seed sd, points (basis) | MDE, points | least passing, points "
                  "| null shown within, points | exact test least p (after Holm) | can answer |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for c in plan["contrasts"]:
            sds = " / ".join(_signed_pct(x) for x in c["sd"]) if c.get("sd") else "-"
            answers = "yes" if c["answers"] else "no"
            lines.append(f"| {c['question']} | {c['a']} - {c['b']} | {c['design']}, {c['seeds']} | {sds} ({c['basis']}) "
                         f"| {_signed_pct(c.get('mde'))} | {_signed_pct(c.get('least_passing'))} "
                         f"| {_margin(c.get('margin_needed'))} "
                         f"| {_p(c['exact_floor'])} ({_p(c.get('exact_floor_holm'))}) "
                         f"| {f'descriptive (if tested: {answers})' if c.get('descriptive') else answers} |")
        lines.append("")
        notes = [f"- contrast {c['a']} - {c['b']}: {note}" for c in plan["contrasts"] for note in c.get("notes") or []]
        notes += [f"- contrast {c['a']} - {c['b']}: {_margin_rule_line(c['margin_rule'])}" for c in plan["contrasts"]
                  if (c.get("margin_rule") or {}).get("training_effect") is not None]
        lines += [*notes, ""] if notes else []
    prior = plan.get("spread_from")
    if prior:
        differ = "; ".join(f"{cell} ({', '.join(keys[:4])}{', ...' if len(keys) > 4 else ''})"
                           for cell, keys in prior["differ"].items())
        lines += [f"Spreads, levels and times where this grid has no records of its own yet: from the records of grid "
                  f"{prior['grid']} (`{prior['file']}`), for its cells of the same name that are the same runs apart "
                  f"from the seed and the evaluation points: {', '.join(prior['cells']) or 'none'}"
                  + (f"; of the same name but not the same runs (not used): {differ}" if differ else "") + ".", ""]
    time = plan.get("time")
    if time:
        lines += [time["line"], ""]
    return lines


def write_report(grid_dir: Path, title: str, order: list[str] | None = None, description: str = "",
                 comparisons: list[Comparison] | None = None, plan: dict[str, Any] | None = None,
                 declared: dict[str, int] | None = None, leaderboard: bool = False) -> Path:
    """Regenerate ``<grid_dir>/README.md`` (and ``curves.png``, ``summary.json``); returns the
    README path. ``declared``: cell -> the seeds its grid file declares (interim looks are marked)."""
    grid_dir = Path(grid_dir)
    grid_dir.mkdir(parents=True, exist_ok=True)
    state = grid_state(grid_dir, order, comparisons, declared)
    for name, text in ((README, report(grid_dir, state, title, order, description, comparisons, plan=plan,
                                         leaderboard=leaderboard)),
                       (SUMMARY, json.dumps(summary(state, title, order, comparisons, plan), indent=1) + "\n")):
        path = grid_dir / name
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    return grid_dir / README
