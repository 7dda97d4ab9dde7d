"""Baseline gain per decision position for every estimator (``learners/baseline_gain.py``), by hand.

One task group of three episodes (the GiGPO fixture of ``test_step_groups``: agents r then a
each round, ep2 solved in round 0), the reference (the leave-one-out mean at the position) and
each estimator's baseline worked out on paper: GiGPO's step groups under ``leave_one_out`` and
``mean``, ``team`` under ``mean_std`` (its centre before the std division), MAPPO's ``group``
(the reference itself) and the critic (its old ``critic/`` figures under the new names); then
the pooling over a run's updates, old rows included.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from marft_agents import group_math as gm
from marft_agents.evaluation.records import DIAGNOSTIC_PREFIXES
from marft_agents.learners import baseline_gain as bg
from marft_agents.learners.critic_health import baseline_figures
from marft_agents.learners.grpo import GRPO
from marft_agents.settings.grpo import GRPOOptions
from test_step_groups import _rollout


def _metrics(grouping, normalisation, **options):
    learner = SimpleNamespace(options=GRPOOptions(grouping=grouping, normalisation=normalisation, **options))
    return GRPO.baseline_gain(learner, _rollout())


# Positions: 0 r@0, 1 a@0, 2 r@1, 3 a@1 (ep2 has 0 and 1 only). Step targets (step_gamma 0.5), per
# episode and position: ep0 [0.5, 0.5, 1, 1], ep1 [0, 0, 0, 0], ep2 [1, 1].
# Reference, LOO at the position: p0 and p1 residuals 0, 0.75^2, 0.75^2; p2 and p3 (ep0, ep1) 1, 1.
# Step groups: r "task" (all three at p0): its LOO is the reference, gain 0. a "m1" (ep0, ep1 at
# p1; ep2's "m2" alone: not covered, coverage 2/3): reference over them (0 + 0.5625) / 2 =
# 0.28125, step LOO residuals 0.5^2, 0.5^2 -> 0.25, gain 1 - 0.25 / 0.28125 = 1/9. r "fb" (ep0,
# ep1 at p2): LOO 0 and 1, residuals 1, 1: gain 0. a "fb" and a "y" are alone: p3 coverage 0, no gain.
def test_step_groups_with_leave_one_out_by_hand():
    got = _metrics("step", "leave_one_out", step_gamma=0.5)
    assert got == pytest.approx({
        "baseline/coverage/pos0": 1.0, "baseline/reference_mse/pos0": 0.375, "baseline/mse/pos0": 0.375,
        "baseline/gain/pos0": 0.0,
        "baseline/coverage/pos1": 2 / 3, "baseline/reference_mse/pos1": 0.28125, "baseline/mse/pos1": 0.25,
        "baseline/gain/pos1": 1 / 9,
        "baseline/coverage/pos2": 1.0, "baseline/reference_mse/pos2": 1.0, "baseline/mse/pos2": 1.0,
        "baseline/gain/pos2": 0.0,
        "baseline/coverage/pos3": 0.0,
        # pooled over p0-p2, weighted by decisions: 1 - (3 * 0.375 + 2 * 0.25 + 2) / (3 * 0.375 + 2 * 0.28125 + 2)
        "baseline/gain": 1 - 3.625 / 3.6875})
    declared = {bg.GAIN_KEY} | {bg.position_key(k, p) for k in bg.POSITION_KEYS for p in range(4)}
    assert set(got) <= declared and set(_metrics("step", "mean")) <= declared  # the names declared once


def test_step_groups_with_the_mean_centre_include_the_unit_and_log_its_leave_one_out_residual():
    got = _metrics("step", "mean", step_gamma=0.5)
    # p0: mean 0.5 of (0.5, 0, 1), residuals 0, 0.25, 0.25 -> 1/6: the reference's (2/3)^2
    assert got["baseline/mse/pos0"] == pytest.approx(1 / 6)
    assert got["baseline/gain/pos0"] == pytest.approx(1 - (2 / 3) ** 2)
    # p1: mean 0.25 of (0.5, 0), residuals 0.0625 each; left out: 0.25 as above
    assert got["baseline/mse/pos1"] == pytest.approx(0.0625)
    assert got["baseline/gain/pos1"] == pytest.approx(1 - 0.0625 / 0.28125)
    assert got["baseline/loo_mse/pos0"] == pytest.approx(0.375)
    assert got["baseline/loo_mse/pos1"] == pytest.approx(0.25)
    assert "baseline/loo_mse/pos0" not in _metrics("step", "leave_one_out", step_gamma=0.5)


# team: every decision's target is its episode's return (1, 0, 1), the centre before the std
# division the mean 2/3 (unit included). p0, p1: reference 0.25, 1, 0.25 -> 0.5; residuals 1/9,
# 4/9, 1/9 -> 2/9, gain 1 - (2/9) / 0.5 = 5/9. p2, p3 (ep0, ep1): reference 1, 1 -> 1; residuals
# 1/9, 4/9 -> 5/18. Left out: the team's LOO 0.5 and 1 (ep2, solved early, still counts): 0.625.
def test_team_under_mean_std_is_measured_at_its_centre_before_the_std_division():
    got = _metrics("team", "mean_std")
    for p in (0, 1):
        assert got[f"baseline/reference_mse/pos{p}"] == pytest.approx(0.5)
        assert got[f"baseline/mse/pos{p}"] == pytest.approx(2 / 9)
        assert got[f"baseline/gain/pos{p}"] == pytest.approx(5 / 9)
        assert got[f"baseline/loo_mse/pos{p}"] == pytest.approx(0.5)
    for p in (2, 3):
        assert got[f"baseline/reference_mse/pos{p}"] == pytest.approx(1.0)
        assert got[f"baseline/mse/pos{p}"] == pytest.approx(5 / 18)
        assert got[f"baseline/loo_mse/pos{p}"] == pytest.approx(0.625)
        assert got[f"baseline/coverage/pos{p}"] == 1.0
    assert got["baseline/gain"] == pytest.approx(1 - (6 * 2 / 9 + 4 * 5 / 18) / 7)


def test_a_normalisation_without_a_declared_centre_logs_nothing(monkeypatch):
    from marft_agents.settings import estimators as registry

    undeclared = registry.Estimator("mean", "normalisation", "marft_agents.group_math:mean_only")
    monkeypatch.setitem(registry._BY_NAME, ("normalisation", "mean"), undeclared)
    assert gm.decision_baselines(_rollout(), "team", "mean", GRPOOptions()) is None
    assert _metrics("team", "mean") == {}
    with pytest.raises(ValueError, match="centre must be one of mean, others or None"):
        registry.Estimator("x", "normalisation", "m:f", centre="median")


# -- MAPPO: the critic's figures under the shared names --------------------------------------------------
RETURNS = [[1.0, 1.0], [0.0, 0.0], [0.0, 1.0], [1.0], [0.0, 0.0]]
GROUPS = [[0, 1, 2], [3, 4]]
VALUES = [[0.9, 0.8], [0.1, 0.3], [0.4, 0.6], [0.7], [0.2, 0.1]]


def test_mappo_group_is_the_reference_and_the_critic_keeps_its_figures_under_both_names():
    # reference, p0: LOO residuals 1, 0.25, 0.25 (group 0), 1, 1 (group 1) -> 0.7; p1: 0.25, 1, 0.25
    # (ep3 has no p1, so ep4 has nobody to compare with) -> 0.5
    group = baseline_figures(RETURNS, GROUPS, None, "group")
    assert {k: v for k, v in group.items() if k.startswith("baseline/")} == pytest.approx({
        "baseline/coverage/pos0": 1.0, "baseline/reference_mse/pos0": 0.7, "baseline/mse/pos0": 0.7,
        "baseline/gain/pos0": 0.0, "baseline/coverage/pos1": 1.0, "baseline/reference_mse/pos1": 0.5,
        "baseline/mse/pos1": 0.5, "baseline/gain/pos1": 0.0, "baseline/gain": 0.0})
    assert not any(k.startswith("baseline/") for k in baseline_figures(RETURNS, GROUPS, None, "critic"))
    for baseline, residual in (("critic", "critic_residual_var"), ("group_critic", "anchored_residual_var")):
        got = baseline_figures(RETURNS, GROUPS, VALUES, baseline)
        for p in (0, 1):
            assert got[f"baseline/reference_mse/pos{p}"] == got[f"critic/loo_residual_var/pos{p}"]
            assert got[f"baseline/mse/pos{p}"] == got[f"critic/{residual}/pos{p}"]
            assert got[f"baseline/gain/pos{p}"] == pytest.approx(got[f"critic/baseline_gain/pos{p}"])
        assert got["baseline/gain"] == pytest.approx(got["critic/baseline_gain"])
    assert bg.PREFIX in DIAGNOSTIC_PREFIXES  # records keep them


# -- over a run -------------------------------------------------------------------------------------------
def test_pooling_takes_the_later_half_and_reads_the_critics_older_rows():
    rows = [
        {"step": 1, "baseline/reference_mse/pos0": 9.0, "baseline/mse/pos0": 9.0, "baseline/coverage/pos0": 1.0},
        {"step": 2, "baseline/reference_mse/pos0": 9.0, "baseline/mse/pos0": 0.0, "baseline/coverage/pos0": 1.0,
         "baseline/coverage/pos1": 0.0},
        {"step": 3, "baseline/reference_mse/pos0": 0.4, "baseline/mse/pos0": 0.3, "baseline/coverage/pos0": 1.0,
         "baseline/loo_mse/pos0": 0.5, "baseline/coverage/pos1": 0.5, "baseline/reference_mse/pos1": 0.2,
         "baseline/mse/pos1": 0.1},
        {"step": 4, "baseline/reference_mse/pos0": 0.2, "baseline/mse/pos0": 0.2, "baseline/coverage/pos0": 1.0,
         "baseline/loo_mse/pos0": 0.3, "baseline/coverage/pos1": 0.0},
        {"step": 5, "critic/loo_residual_var/pos0": None},  # logged nothing: not an update of the pooling
    ]
    got = bg.pooled_gains(rows)
    # updates 3-4: p0 reference 0.3, residual 0.25, gain 1/6, left out 0.4 -> -1/3; p1 only update 3
    # logged figures, coverage (0.5 + 0) / 2
    assert got[0] == bg.PooledGain(2, pytest.approx(0.3), pytest.approx(0.25), 1.0, pytest.approx(0.4))
    assert got[0].gain == pytest.approx(1 / 6) and got[0].loo_gain == pytest.approx(-1 / 3)
    assert (got[1].updates, got[1].reference, got[1].mse, got[1].coverage) == (1, 0.2, 0.1, 0.25)
    assert math.isnan(got[1].loo_mse) and got[1].loo_gain == pytest.approx(0.5)  # none left out: the gain itself
    old = [{"critic/loo_residual_var/pos0": 0.4, "critic/critic_residual_var/pos0": 0.1},
           {"critic/loo_residual_var/pos0": 0.2, "critic/critic_residual_var/pos0": 0.2,
            "critic/loo_residual_var/pos1": 0.5}]  # no critic residual at p1: not logged
    ((p, pooled),) = bg.pooled_gains(old, all_updates=True).items()
    assert (p, pooled.updates, pooled.reference, pooled.mse, pooled.coverage) == (0, 2, pytest.approx(0.3), pytest.approx(0.15), 1.0)
    assert bg.pooled_gains([{"step": 1, "losses/policy_loss": 0.1}]) == {}
    assert math.isnan(bg.PositionGain(0, 2, 2, 0.0, 0.0).gain)
