"""leaderboards/stats.py against scipy.stats (a test-only dependency) and hand-computed values."""

import copy
import itertools
import json
import math
from pathlib import Path

import numpy as np
import pytest

from leaderboards import stats

scipy_stats = pytest.importorskip("scipy.stats")
scipy_special = pytest.importorskip("scipy.special")

REPO = Path(__file__).resolve().parents[1]
# Seed accuracies of the kind a grid has: 2-4 seeds, wide spread, some bimodal.
SAMPLES = [([0.79, 0.86, 0.89], [0.39, 0.41, 0.22]), ([0.40, 0.00, 0.06], [0.45, 0.21, 0.05]),
           ([0.56, 0.06], [0.39, 0.41, 0.22]), ([0.1, 0.3, 0.2, 0.6], [0.05, 0.5, 0.45])]


@pytest.mark.parametrize("df", [1, 2, 2.7, 4, 9.5, 30, 400])
def test_student_t_matches_scipy(df):
    for t in (-40.0, -4.3, -1.0, -0.01, 0.0, 0.3, 2.0, 7.5, 1e4):
        assert stats.t_cdf(t, df) == pytest.approx(scipy_stats.t.cdf(t, df), rel=1e-10, abs=1e-14)
        assert stats.t_two_sided_p(t, df) == pytest.approx(2 * scipy_stats.t.sf(abs(t), df), rel=1e-10, abs=1e-14)
    for q in (0.001, 0.025, 0.3, 0.5, 0.9, 0.975, 0.995, 0.99999):
        assert stats.t_ppf(q, df) == pytest.approx(scipy_stats.t.ppf(q, df), rel=1e-9, abs=1e-12)


def test_incomplete_beta_matches_scipy():
    for a, b in [(0.5, 0.5), (1.0, 0.5), (2.35, 0.5), (15.0, 0.5), (3.0, 7.0), (200.0, 0.5)]:
        for x in (0.0, 1e-6, 0.01, 0.3, 0.5, 0.77, 0.999, 1.0):
            assert stats.betainc(a, b, x) == pytest.approx(scipy_special.betainc(a, b, x), rel=1e-11, abs=1e-15)


def test_t_quantile_by_hand():
    # tables: t(0.975, 2) = 4.303, t(0.975, 4) = 2.776; one degree of freedom is Cauchy: tan(pi (q - 1/2))
    assert stats.t_ppf(0.975, 2) == pytest.approx(4.30265, abs=1e-5)
    assert stats.t_ppf(0.975, 4) == pytest.approx(2.77645, abs=1e-5)
    assert stats.t_ppf(0.9, 1) == pytest.approx(math.tan(math.pi * 0.4), rel=1e-10)


@pytest.mark.parametrize("a,b", SAMPLES)
def test_welch_matches_scipy(a, b):
    mine, ref = stats.welch_t(a, b, alpha=0.05), scipy_stats.ttest_ind(a, b, equal_var=False)
    assert mine.p == pytest.approx(ref.pvalue, rel=1e-9)
    assert mine.df == pytest.approx(ref.df, rel=1e-12)
    ci = ref.confidence_interval(0.95)
    assert mine.ci == pytest.approx((ci.low, ci.high), rel=1e-9)
    assert mine.difference == pytest.approx(np.mean(a) - np.mean(b))


def test_paired_and_one_sample_t_match_scipy():
    a, b = [0.39, 0.41, 0.22, 0.30], [0.02, 0.01, 0.09, 0.05]
    mine, ref = stats.paired_t(a, b), scipy_stats.ttest_rel(a, b)
    assert mine.p == pytest.approx(ref.pvalue, rel=1e-9) and mine.df == 3
    assert mine.ci == pytest.approx(tuple(ref.confidence_interval(0.95)), rel=1e-9)
    mine, ref = stats.one_sample_t(a, 0.05, alpha=0.10), scipy_stats.ttest_1samp(a, 0.05)
    assert mine.p == pytest.approx(ref.pvalue, rel=1e-9)
    assert mine.ci == pytest.approx(tuple(np.array(ref.confidence_interval(0.90)) - 0.05), rel=1e-9)


def test_unpaired_test_on_paired_data_gives_a_larger_p():
    # Seeds differ a lot from each other, but every seed's ablation costs it ~5 points: pairing
    # removes the seed-to-seed spread. Treating the cells as independent hides the effect.
    a = [0.30, 0.50, 0.70, 0.90]
    b = [0.25, 0.44, 0.66, 0.85]
    paired, welch = stats.paired_t(a, b), stats.welch_t(a, b)
    assert paired.p == pytest.approx(scipy_stats.ttest_rel(a, b).pvalue, rel=1e-9)
    assert paired.p < 0.01 and welch.p > 0.7
    assert paired.difference == pytest.approx(welch.difference)


def _enumerated_p(a, b):
    """The exact two-sided permutation p by brute force over every relabelling."""
    pooled, na = a + b, len(a)
    observed = abs(np.mean(a) - np.mean(b))
    hits = total = 0
    for chosen in itertools.combinations(range(len(pooled)), na):
        x = [pooled[k] for k in chosen]
        y = [pooled[k] for k in range(len(pooled)) if k not in chosen]
        hits += abs(np.mean(x) - np.mean(y)) >= observed - 1e-12
        total += 1
    return hits / total


@pytest.mark.parametrize("a,b", SAMPLES)
def test_permutation_test_matches_enumeration_and_scipy(a, b):
    mine = stats.permutation_test(a, b)
    assert mine.p == pytest.approx(_enumerated_p(a, b))
    ref = scipy_stats.permutation_test((a, b), lambda x, y, axis: np.abs(np.mean(x, axis=axis) - np.mean(y, axis=axis)),
                                       permutation_type="independent", alternative="greater", n_resamples=np.inf)
    assert mine.p == pytest.approx(ref.pvalue)
    assert mine.splits == math.comb(len(a) + len(b), len(a))


def test_exact_tests_have_a_floor_with_few_seeds():
    # 3 seeds against 3, however far apart: 2 of the 20 splits are as extreme, p = 0.10
    far = stats.permutation_test([0.9, 0.91, 0.92], [0.0, 0.01, 0.02])
    assert far.p == pytest.approx(0.10) and far.min_p == pytest.approx(0.10)
    assert stats.permutation_test([0.9, 0.91, 0.92], [0.0, 0.01]).min_p == pytest.approx(0.10)  # 1 / C(5, 2)
    assert stats.permutation_test([0.9, 0.91], [0.0, 0.01]).min_p == pytest.approx(1 / 3)
    flips = stats.sign_flip_test([0.3, 0.4, 0.35])
    assert flips.p == pytest.approx(0.25) and flips.min_p == pytest.approx(0.25)  # 2 of 8 sign patterns


def test_sign_flip_test_matches_scipy_and_enumeration():
    a, b = [0.39, 0.41, 0.22, 0.30, 0.5], [0.02, 0.45, 0.09, 0.05, 0.2]
    d = [x - y for x, y in zip(a, b)]
    mine = stats.sign_flip_test(d)
    ref = scipy_stats.permutation_test((a, b), lambda x, y, axis: np.abs(np.mean(x - y, axis=axis)),
                                       permutation_type="samples", alternative="greater", n_resamples=np.inf)
    assert mine.p == pytest.approx(ref.pvalue)
    by_hand = np.mean([abs(np.mean(np.array(s) * d)) >= abs(np.mean(d)) - 1e-12
                       for s in itertools.product((1, -1), repeat=5)])
    assert mine.p == pytest.approx(by_hand)
    # against a constant: the differences from it
    assert stats.sign_flip_test(a, 0.05).p == pytest.approx(stats.sign_flip_test([x - 0.05 for x in a]).p)


def test_holm_adjusts_by_hand_and_resolves_less_than_naive_p():
    raw = [0.01, 0.04, 0.03, 0.005]
    # sorted: 0.005 x 4 = 0.02; 0.01 x 3 = 0.03; 0.03 x 2 = 0.06; 0.04 x 1 = 0.04 -> running max 0.06
    assert stats.holm(raw) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    naive = [p < 0.05 for p in raw]
    holm = [p < 0.05 for p in stats.holm(raw)]
    assert naive == [True, True, True, True] and holm == [True, False, False, True]
    # a declared comparison not run yet counts in m and stays None
    assert stats.holm([0.02, None, 0.01]) == [pytest.approx(0.04), None, pytest.approx(0.03)]
    assert stats.holm([0.03, 0.02]) == pytest.approx([0.04, 0.04])  # 0.03 x 1 < 0.02 x 2: made monotone
    assert stats.holm([0.02, 0.9]) == pytest.approx([0.04, 0.9])
    assert stats.holm([0.6, 0.7]) == pytest.approx([1.0, 1.0])  # capped at 1


def test_equivalence_test_is_two_one_sided_tests():
    a, b, margin = [0.30, 0.33, 0.31, 0.35], [0.32, 0.30, 0.34, 0.31], 0.05
    for x, y in ((a, b), (b, a)):  # a - b > 0, then < 0: each of the two one-sided tests decides once
        lower = scipy_stats.ttest_ind(np.array(x) + margin, y, equal_var=False, alternative="greater").pvalue
        upper = scipy_stats.ttest_ind(np.array(x) - margin, y, equal_var=False, alternative="less").pvalue
        assert stats.equivalence_test(x, y, margin).p == pytest.approx(max(lower, upper), rel=1e-9)
    mine = stats.equivalence_test(a, b, margin)
    assert mine.p < 0.05 and -margin < mine.ci[0] < mine.ci[1] < margin  # inside: equivalent
    wide = stats.equivalence_test(a, b, 0.01)
    assert wide.p > 0.05 and not (-0.01 < wide.ci[0] < wide.ci[1] < 0.01)
    # paired and against a constant
    paired = stats.equivalence_test(a, b, margin, paired=True)
    d = np.subtract(a, b)
    assert paired.p == pytest.approx(max(scipy_stats.ttest_1samp(d, -margin, alternative="greater").pvalue,
                                         scipy_stats.ttest_1samp(d, margin, alternative="less").pvalue), rel=1e-9)
    constant = stats.equivalence_test(a, 0.3, margin)
    assert constant.p == pytest.approx(max(scipy_stats.ttest_1samp(a, 0.3 - margin, alternative="greater").pvalue,
                                           scipy_stats.ttest_1samp(a, 0.3 + margin, alternative="less").pvalue))


def test_seeds_needed_reaches_the_critical_value_first_at_n():
    # sd 0.1 per cell, difference 0.1: t = 0.1 / sqrt(0.02 / n) = sqrt(n / 2) against t(0.975, 2n - 2):
    # n = 8: 2.000 < 2.145; n = 9: 2.1213 >= 2.1199
    assert stats.seeds_needed(0.1, 0.1, 0.1, alpha=0.05) == 9
    assert stats.seeds_needed(-0.1, 0.1, 0.1, alpha=0.05) == 9
    for difference, sd_a, sd_b, alpha in [(0.3, 0.12, 0.05, 0.05 / 12), (0.05, 0.2, 0.0, 0.05), (0.17, 0.13, 0.2, 0.01)]:
        n = stats.seeds_needed(difference, sd_a, sd_b, alpha)

        def reaches(k):
            va, vb = sd_a ** 2 / k, sd_b ** 2 / k
            df = (va + vb) ** 2 / sum(v * v / (k - 1) for v in (va, vb) if v > 0)
            return difference / math.sqrt(va + vb) >= scipy_stats.t.ppf(1 - alpha / 2, df)

        assert reaches(n) and (n == 2 or not reaches(n - 1))
    assert stats.seeds_needed(0.0, 0.1, 0.1) is None
    assert stats.seeds_needed(0.001, 0.3, 0.3, max_seeds=50) is None


def test_bootstrap_is_seeded_and_falls_back_to_seed_accuracies():
    a, b = [0.79, 0.86, 0.89], [0.39, 0.41, 0.22]
    first, again = stats.bootstrap_difference(a, b, seed=3), stats.bootstrap_difference(a, b, seed=3)
    assert first == again and first.basis == "seeds"
    assert first.difference == pytest.approx(np.mean(a) - np.mean(b))
    # every resample is a mean of drawn seeds: the CI lies within the extremes of those means
    assert 0.79 - 0.41 <= first.low <= first.difference <= first.high <= 0.89 - 0.22
    # a constant per-seed difference: paired resampling keeps it exactly
    paired = stats.bootstrap_difference([0.3, 0.5, 0.9], [0.2, 0.4, 0.8], paired=True)
    assert paired.low == pytest.approx(0.1) and paired.high == pytest.approx(0.1)
    unpaired = stats.bootstrap_difference([0.3, 0.5, 0.9], [0.2, 0.4, 0.8])
    assert unpaired.high - unpaired.low > 0.3


def test_bootstrap_over_problems_has_the_evaluation_spread():
    rng = np.random.default_rng(0)
    a = [(rng.random(400) < 0.5).astype(float)]  # one seed each, 400 problems
    b = [(rng.random(400) < 0.3).astype(float)]
    result = stats.bootstrap_difference(a, b, resamples=4000)
    assert result.basis == "seeds x problems"
    assert result.difference == pytest.approx(a[0].mean() - b[0].mean())
    # one seed: the CI is the problems' sampling error of a paired-by-problem difference
    se = np.std(a[0] - b[0], ddof=1) / math.sqrt(400)
    assert (result.high - result.low) / 2 == pytest.approx(1.96 * se, rel=0.1)
    # with seeds that differ, the seed level widens it
    a_seeds = [(rng.random(400) < p).astype(float) for p in (0.2, 0.5, 0.8)]
    b_seeds = [(rng.random(400) < 0.3).astype(float) for _ in range(3)]
    spread = stats.bootstrap_difference(a_seeds, b_seeds, resamples=4000)
    assert spread.high - spread.low > 2 * (result.high - result.low)
    # one seed without outcomes: accuracies only
    assert stats.bootstrap_difference([*a_seeds[:2], 0.8], b_seeds).basis == "seeds"


def test_take_off_and_area_under_the_curve_by_hand():
    # 39 +- 7.2 from 5 +- 3.2: 34 > 2 x hypot(7.2, 3.2) = 15.8; 6 +- 2.8 from 5 +- 3.2: 1 < 8.5
    assert stats.took_off(0.39, 0.072, 0.05, 0.032) and not stats.took_off(0.06, 0.028, 0.05, 0.032)
    assert not stats.took_off(0.01, 0.01, 0.0, 0.0)  # 1 solved in 100 from 0: 1 point < 2 x 1
    assert not stats.took_off(0.17, 0.05, 0.05, 0.05)  # 12 < 2 x hypot(5, 5) = 14.1: both errors count
    assert stats.took_off(0.20, 0.05, 0.05, 0.0, n_se=2.9) and not stats.took_off(0.20, 0.05, 0.05, 0.0, n_se=3.1)
    runs = [(0.39, 0.072, 0.05, 0.032), (0.0, 0.0, 0.05, 0.032), (0.06, 0.028, 0.05, 0.032)]
    assert stats.takeoff_rate(runs) == pytest.approx(1 / 3)
    # trapezoids: 100 x 0.25 + 200 x 0.5 = 125 over an axis of 300
    assert stats.curve_auc([0, 100, 300], [0.0, 0.5, 0.5]) == pytest.approx(125 / 300)
    assert stats.curve_auc([10, 20], [0.2, 0.4]) == pytest.approx(0.3)
    assert stats.curve_auc([0], [0.7]) == 0.7
    with pytest.raises(ValueError, match="must not decrease"):
        stats.curve_auc([0, 200, 100], [0.0, 0.1, 0.2])


def _records(grid):
    return [json.loads(p.read_text()) for p in sorted((REPO / "leaderboards" / "grids" / grid / "records").glob("*.json"))]


def test_relays_grpo_agent_is_caught_as_the_same_run_as_grpo_seed0():
    # What happened on Relay (until its GRPO seed 0 was rerun at equal episodes): the per-agent
    # grouping cell's record was the team-grouping run over again, same outcomes, config differing
    # only in the grouping keys. Rebuilt here from the committed per-agent record.
    agent = next(r for r in _records("relay") if r["name"] == "grpo_agent_seed0")
    team = copy.deepcopy(agent)
    team["name"], team["grid"]["cell"] = "grpo_seed0", "grpo"
    team["config"]["learner"].update(grouping="team", agent_rewards=False)
    duplicates = stats.duplicate_runs([team, agent])
    assert [(d.kept, d.dropped, d.reason) for d in duplicates] == [("grpo_seed0", "grpo_agent_seed0", "same outcomes")]
    assert "learner.grouping: 'team' / 'agent'" in duplicates[0].config_differences
    # the committed records: the rerun seed 0 is another run, so nothing is a duplicate now
    assert stats.duplicate_runs(_records("relay")) == []


def test_runs_that_share_a_flat_curve_are_not_duplicates():
    # Arithmetic level 3: several runs never leave 0 % (identical curves); their sampled tokens differ.
    records = _records("arithmetic_l3")
    flat = [r for r in records if r["grid"]["kind"] == "train" and not any(p["accuracy"] for p in r["eval_curve"])]
    curves = [json.dumps([(p["update"], p["accuracy"], p["stderr"]) for p in r["eval_curve"]]) for r in flat]
    assert len(curves) > len(set(curves))  # some do share their whole curve
    assert stats.duplicate_runs(records) == []


def test_seeds_that_produce_the_same_zero_outcomes_are_different_runs():
    # a model that never solves a problem and always writes to the token cap: two seeds give the
    # same curve, counters and per-problem outcomes, yet they are two runs
    record = copy.deepcopy(_records("relay")[0])
    record["eval_curve"] = [{**p, "accuracy": 0.0, "stderr": 0.0} for p in record["eval_curve"]]
    other_seed = copy.deepcopy(record)
    other_seed["name"], other_seed["config"]["seed"] = "other_seed", record["config"]["seed"] + 1
    other_seed["config"]["output_dir"] = "runs/elsewhere"
    assert stats.duplicate_runs([record, other_seed]) == []
    same_seed = copy.deepcopy(other_seed)
    same_seed["config"]["seed"], same_seed["config"]["learner"] = record["config"]["seed"], {"renamed": True}
    assert [d.reason for d in stats.duplicate_runs([record, same_seed])] == ["same outcomes"]


def test_a_rerun_under_another_name_is_the_same_config():
    record = _records("solve_check")[0]
    again = copy.deepcopy(record)
    again["name"], again["grid"]["cell"] = "renamed_seed0", "renamed"
    again["config"]["output_dir"] = "runs/elsewhere"
    again["grid"]["wall_s"] += 3.0
    other_seed = copy.deepcopy(record)
    other_seed["name"], other_seed["config"]["seed"] = "other_seed", 7
    other_seed["eval_curve"] = [{**p, "accuracy": 0.5} for p in other_seed["eval_curve"]]
    duplicates = stats.duplicate_runs([record, other_seed, again])
    assert [(d.kept, d.dropped, d.reason, d.config_differences) for d in duplicates] == [
        (record["name"], "renamed_seed0", "same config", [])]


def test_minimal_detectable_effect_by_hand():
    # 5 paired seeds, sd of the differences 0.1, Holm over 3 at 0.05, power 0.8:
    # (t(1 - 0.05 / 6, 4) + t(0.8, 4)) * 0.1 / sqrt(5)
    planned = stats.minimal_detectable_effect("paired", 0.1, 5, alpha=0.05 / 3, power=0.8)
    critical, power_t = scipy_stats.t.ppf(1 - 0.05 / 6, 4), scipy_stats.t.ppf(0.8, 4)
    assert planned.se == pytest.approx(0.1 / math.sqrt(5)) and planned.df == 4
    assert planned.critical == pytest.approx(critical, rel=1e-9)
    assert planned.effect == pytest.approx((critical + power_t) * 0.1 / math.sqrt(5), rel=1e-9)
    assert planned.least_passing == pytest.approx(critical * 0.1 / math.sqrt(5), rel=1e-9)
    # Holm over 14 at 5 seeds: a paired t must reach 6.14 at 4 df
    assert stats.minimal_detectable_effect("paired", 0.1, 5, alpha=0.05 / 14).critical == pytest.approx(6.138, abs=1e-3)
    # independent seeds, equal spreads: Welch's df is 2n - 2 and se = sd sqrt(2 / n)
    welch = stats.minimal_detectable_effect("independent", 0.2, 5, 0.2, 5, alpha=0.05, power=0.8)
    assert welch.df == pytest.approx(8) and welch.se == pytest.approx(0.2 * math.sqrt(2 / 5))
    assert welch.effect == pytest.approx((scipy_stats.t.ppf(0.975, 8) + scipy_stats.t.ppf(0.8, 8)) * welch.se)
    # against a constant: the varying cell alone
    one = stats.minimal_detectable_effect("one-sample", 0.2, 5, alpha=0.05)
    assert one.effect == pytest.approx((scipy_stats.t.ppf(0.975, 4) + scipy_stats.t.ppf(0.8, 4)) * 0.2 / math.sqrt(5))
    # a t test at the planned seeds detects the MDE with the planned power (noncentral t)
    power = (scipy_stats.nct.sf(welch.critical, 8, welch.effect / welch.se)
             + scipy_stats.nct.cdf(-welch.critical, 8, welch.effect / welch.se))
    assert power == pytest.approx(0.8, abs=0.02)
    with pytest.raises(ValueError, match=">= 2 seeds"):
        stats.minimal_detectable_effect("independent", 0.1, 5, 0.1, 1)
    # TOST: with no true difference both one-sided tests must reject
    margin = stats.minimal_equivalence_margin("paired", 0.1, 8, alpha=0.05, power=0.8)
    assert margin == pytest.approx((scipy_stats.t.ppf(0.95, 7) + scipy_stats.t.ppf(0.9, 7)) * 0.1 / math.sqrt(8))


def test_planned_seeds_is_the_least_count_that_reaches_the_target_by_hand():
    def mde(n, sd, alpha, df):  # the MDE at n seeds, from scipy's quantiles
        return (scipy_stats.t.ppf(1 - alpha / 2, df) + scipy_stats.t.ppf(0.8, df)) * sd

    # paired: sd of the differences 0.28, Holm over 3, target 15 points
    paired = next(n for n in range(2, 500) if mde(n, 0.28, 0.05 / 3, n - 1) / math.sqrt(n) <= 0.15)
    assert stats.planned_seeds("paired", 0.28, 0.15, alpha=0.05 / 3) == paired
    assert stats.minimal_detectable_effect("paired", 0.28, paired - 1, alpha=0.05 / 3).effect > 0.15
    # independent, both cells at n: Welch's df 2n - 2, se sd sqrt(2 / n)
    apart = next(n for n in range(2, 500) if mde(n, 0.142, 0.05, 2 * n - 2) * math.sqrt(2 / n) <= 0.15)
    assert stats.planned_seeds("independent", 0.142, 0.15, 0.142, alpha=0.05) == apart
    # equivalence: (t(1 - alpha) + t(0.9)) se <= margin
    tost = next(n for n in range(2, 500) if (scipy_stats.t.ppf(0.95, n - 1) + scipy_stats.t.ppf(0.9, n - 1))
                * 0.1 / math.sqrt(n) <= 0.05)
    assert stats.planned_seeds("paired", 0.1, 0.05, equivalence=True) == tost
    # a target no count reaches within the search
    assert stats.planned_seeds("paired", 0.5, 0.001, most=64) is None


def test_exact_p_floors_before_and_after_holm_by_hand():
    # 5 seeds against 5: 2 of the C(10, 5) = 252 splits are as extreme; 5 paired seeds: 2 of 2^5 sign patterns
    assert stats.exact_p_floor("independent", 5, 5) == pytest.approx(2 / 252) == pytest.approx(0.0079365, abs=1e-7)
    assert stats.exact_p_floor("independent", 3, 2) == pytest.approx(1 / 10)
    assert stats.exact_p_floor("paired", 5) == stats.exact_p_floor("one-sample", 5) == pytest.approx(1 / 16)
    # the same floors the tests themselves report
    assert stats.exact_p_floor("independent", 3, 3) == pytest.approx(
        stats.permutation_test([0.9, 0.91, 0.92], [0.0, 0.01, 0.02]).min_p)
    assert stats.exact_p_floor("paired", 3) == pytest.approx(stats.sign_flip_test([0.3, 0.4, 0.35]).min_p)
    # after Holm over 14 such comparisons: 14 x 2 / 252 = 0.111, which can never pass 0.05
    assert stats.holm_floors([2 / 252] * 14) == pytest.approx([14 * 2 / 252] * 14)
    # mixed floors: 0.01 x 3 = 0.03; then 0.1 x 2 = 0.2 for both others (ranked second, kept monotone)
    assert stats.holm_floors([0.01, 0.1, 0.1]) == pytest.approx([0.03, 0.2, 0.2])
    assert stats.holm_floors([2 / 252] * 6) == pytest.approx([12 / 252] * 6)  # 0.048: 6 can pass, 7 cannot
    assert stats.holm_floors([2 / 252] * 7)[0] > 0.05


def test_bounded_sd_and_the_floor_by_hand():
    assert stats.bounded_sd(0.5) == 0.5 and stats.bounded_sd(0.1) == pytest.approx(0.3)
    assert stats.bounded_sd(-0.2) == 0.0 and stats.bounded_sd(1.0) == 0.0
    # the largest spread at a mean: seeds at 0 and 1 only
    seeds = [1.0] + [0.0] * 9
    assert stats.bounded_sd(0.1) == pytest.approx(np.std(seeds))
    # 100 problems, z = 2: the floor is 4 / 104 = 3.85 %
    assert stats.at_floor(0.038, 100) and not stats.at_floor(0.039, 100)
    assert stats.at_floor(0.0, 100) and stats.at_floor(0.004, 100) and not stats.at_floor(0.066, 100)


def test_binomial_interval_is_clopper_pearson():
    """Against scipy's beta quantiles, and the closed forms at k = 0 (1 - (alpha/2)^(1/n)) and k = n."""
    from scipy.stats import beta

    for k, n in [(1, 128), (3, 128), (5, 128), (7, 20), (64, 128)]:
        lo, hi = stats.binomial_interval(k, n, 0.90)
        assert lo == pytest.approx(beta.ppf(0.05, k, n - k + 1), abs=1e-9)
        assert hi == pytest.approx(beta.ppf(0.95, k + 1, n - k), abs=1e-9)
    assert stats.binomial_interval(0, 128, 0.90) == (0.0, pytest.approx(1 - 0.05 ** (1 / 128), abs=1e-9))
    assert stats.binomial_interval(128, 128, 0.90) == (pytest.approx(0.05 ** (1 / 128), abs=1e-9), 1.0)
    with pytest.raises(ValueError, match="successes <= trials"):
        stats.binomial_interval(3, 2)
