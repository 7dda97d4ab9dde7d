"""The grid report (tables, tests and plot) is regenerated from the records alone."""

import collections
import json
import math
from pathlib import Path

import pytest

from leaderboards import stats
from leaderboards.build import build
from leaderboards.grid_report import (ALPHA, MIN_SPREAD_SEEDS, Comparison, compare, compare_all, comparison_table, contribution_table, in_family,
                                      baseline_table, counted_records, critic_table, gain_table, reported_records, curve_series, grid_records, grid_state, plotted_series, report,
                                      sampled_table, stage_table, summarise, summary, write_report)
from leaderboards.records import Record, write_record


def _record(records, cell, seed, accuracy, kind="train", algorithm="mappo_action", profile="relay", start=0.1,
            episodes=None, config=None, solved=None, after=None, task_revision=None, commit="abc1234", code="", **grid):
    curve = [] if kind != "train" else [
        {"update": 0, "accuracy": start, "stderr": 0.03, "train_seconds": 0.0},
        {"update": 2, "accuracy": (start + accuracy) / 2, "stderr": 0.04, "train_seconds": 180.0},
        {"update": 4, "accuracy": accuracy, "stderr": 0.04, "train_seconds": 360.0 + seed}]
    if episodes is not None:
        for point, count in zip(curve, (0, episodes // 2, episodes)):
            point["episodes"], point["sampled_tokens"] = count, 10 * count
    if kind == "untrained":
        curve = [{"update": 0, "accuracy": accuracy, "stderr": 0.04, "train_seconds": 0.0}]
    write_record(Record(name=f"{cell}_seed{seed}", env_id="marft/Relay-v0", env_kwargs={"profile": profile},
                        algorithm=algorithm, model="m",
                        eval_after={"accuracy": accuracy, "stderr": 0.04, "n": 100, "greedy": True, **(after or {})},
                        eval_curve=curve, budget={"updates": 4, "episodes": 128, "wall_clock_s": 360.0 + seed,
                                                  "tokens": 1000 + 17 * seed + len(cell)},
                        config=config or {}, commit=commit, code=code, task_revision=task_revision,
                        eval_outcomes={"update": 4, "task_index": list(range(10, 10 + len(solved))), "solved": solved,
                                       "reward": solved} if solved else None,
                        grid={"grid": "g", "cell": cell, "seed": seed, "kind": kind, "wall_s": 600.0, **grid}), records)


def test_table_has_mean_se_over_seeds_take_off_and_auc(tmp_path):
    records = tmp_path / "grids" / "g" / "records"
    for seed, acc in enumerate([0.60, 0.70, 0.12]):
        _record(records, "marft_a", seed, acc)
    _record(records, "solo_ppo", 0, 0.9, algorithm="ppo", profile="solo")
    for seed, acc in enumerate([0.20, 0.30, 0.10]):
        _record(records, "marft_a_swapped", seed, acc, kind="swapped", source="marft_a")
    write_record(Record(name="not_in_a_grid", env_id="e", env_kwargs={}, algorithm="ppo", model="m",
                        eval_after={"accuracy": 0.5, "stderr": 0.1, "n": 10}), records)

    summaries = summarise(grid_records(records), order=["solo_ppo", "marft_a", "marft_a_swapped"])
    assert [s.cell for s in summaries] == ["solo_ppo", "marft_a", "marft_a_swapped"]
    assert math.isclose(summaries[1].mean, 1.42 / 3) and summaries[0].se_over_seeds is None
    # took off: 60 and 70 from 10 +- 3 (final +- 4): > 2 x 5 = 10 points; 12 is not
    assert summaries[1].takeoff() == (2, 3) and summaries[2].takeoff() is None
    # AUC of 10 -> 35 -> 60 over 0, 180, 360 s: (180 x 22.5 + 180 x 47.5) / 360 = 35
    assert math.isclose(stats.curve_auc(*summaries[1].curves[0]), 0.35)

    path = write_report(tmp_path / "grids" / "g", "Grid g", ["solo_ppo", "marft_a", "marft_a_swapped"], "What g shows.")
    text = path.read_text()
    auc = 100 * sum(stats.curve_auc(*c) for c in summaries[1].curves) / 3
    assert (f"| marft_a | train | mappo_action | relay | 3 | 47.3 +- 17.9 | s0: 60.0 +- 4.0 / s1: 70.0 +- 4.0 / "
            f"s2: 12.0 +- 4.0 | 2/3 | {auc:.1f} | 6.0 | 4 | 128 | abc1234 |") in text
    assert "| solo_ppo | train | ppo | solo | 1 | 90.0 (one seed) |" in text
    assert "| marft_a_swapped | swapped (marft_a) | mappo_action | relay | 3 | 20.0 +- 5.8 |" in text
    assert text.index("| solo_ppo |") < text.index("| marft_a |") < text.index("| marft_a_swapped |")
    assert "not_in_a_grid" not in text and "What g shows." in text
    assert "1.17 h over the 7 runs counted here." in text  # 7 x 600 s
    assert "Every counted record was made at commit abc1234." in text
    assert (tmp_path / "grids" / "g" / "curves.png").read_bytes()[:4] == b"\x89PNG"
    # regenerating from the same records gives the same report
    assert write_report(tmp_path / "grids" / "g", "Grid g", ["solo_ppo", "marft_a", "marft_a_swapped"],
                        "What g shows.").read_text() == text


def test_write_report_reads_the_records_and_compares_once(tmp_path, monkeypatch):
    """The report and summary.json come from one GridState: the records are read and the declared
    comparisons (bootstrap included) computed once per write, and both files agree."""
    import leaderboards.grid_report as grid_report

    records = tmp_path / "g" / "records"
    for seed, (team, solo) in enumerate([(0.5, 0.2), (0.6, 0.3), (0.7, 0.4)]):
        _record(records, "marft_a", seed, team)
        _record(records, "solo_ppo", seed, solo, algorithm="ppo", profile="solo")
    calls = collections.Counter()
    for name in ("grid_records", "compare_all"):
        original = getattr(grid_report, name)
        monkeypatch.setattr(grid_report, name, lambda *a, _f=original, _n=name, **k: calls.update([_n]) or _f(*a, **k))
    comparisons = [Comparison("marft_a", "solo_ppo", "team vs solo?")]
    text = write_report(tmp_path / "g", "Grid g", ["solo_ppo", "marft_a"], comparisons=comparisons).read_text()
    assert calls == {"grid_records": 1, "compare_all": 1}
    entry = json.loads((tmp_path / "g" / "summary.json").read_text())["comparisons"][0]
    assert entry["difference"] == 30.0 and f"| {entry['difference']:+.1f} |" in text


def test_main_leaderboard_links_the_grid_reports(tmp_path):
    records = tmp_path / "grids" / "g" / "records"
    for seed, accuracy in enumerate([0.5, 0.6]):
        _record(records, "marft_a", seed, accuracy)
    comparisons = [Comparison("marft_a", "solo_ppo", "team vs solo?"), Comparison("marft_a", "untrained", "training?")]
    write_report(tmp_path / "grids" / "g", "Grid g", ["solo_ppo", "marft_a"], comparisons=comparisons)
    summary = json.loads((tmp_path / "grids" / "g" / "summary.json").read_text())
    assert summary["records"] == 2 and [c["run"] for c in summary["comparisons"]] == [False, False]
    _record(records, "solo_ppo", 0, 0.2, algorithm="ppo", profile="solo")
    _record(records, "solo_ppo", 1, 0.3, algorithm="ppo", profile="solo")
    write_report(tmp_path / "grids" / "g", "Grid g", ["solo_ppo", "marft_a"], comparisons=comparisons)
    (tmp_path / "records").mkdir()
    text = build(tmp_path / "records")
    assert "### [Grid g](grids/g/README.md)" in text and "[4 records](grids/g/README.md). [Machine time" in text
    # the front page's row comes from summary.json: 55 - 25 = +30 points, Welch over 2 + 2 seeds;
    # every figure links to the report's comparisons table
    row = next(line for line in text.splitlines() if line.startswith("| team vs solo? |"))
    link = "(grids/g/README.md#comparisons)"
    assert f"| marft_a: [55.0]{link} (2) | solo_ppo: [25.0]{link} (2) | [+30.0]{link} |" in row and "not resolved" in row
    assert "1 of its 2 comparisons waits for runs." in text
    # a grid folder whose summary is lost says how to get it back, and the rest still builds
    (tmp_path / "grids" / "g" / "summary.json").unlink()
    text = build(tmp_path / "records")
    assert "Its `summary.json` is missing: regenerate it with `python -m baselines.grid GRID --report-only`." in text
    (tmp_path / "grids" / "g" / "summary.json").write_text("{not json")
    assert "Its `summary.json` is unreadable (JSONDecodeError)" in build(tmp_path / "records")


def test_empty_grid_report_says_how_to_fill_it(tmp_path):
    assert "No records yet" in write_report(tmp_path / "g", "Grid g").read_text()


def _summaries(tmp_path, cells, kinds=None):
    records = tmp_path / "records"
    for cell, accuracies in cells.items():
        for seed, accuracy in enumerate(accuracies):
            _record(records, cell, seed, accuracy, kind=(kinds or {}).get(cell, "train"))
    return summarise(grid_records(records))


def test_a_declared_pair_with_the_same_seeds_gets_the_paired_tests(tmp_path):
    records = tmp_path / "records"
    # seeds spread widely; the swap costs each seed 35-45 points
    for seed, (trained, swapped, other) in enumerate([(0.60, 0.20, 0.5), (0.90, 0.45, 0.6), (0.40, 0.05, 0.4)]):
        _record(records, "marft_a", seed, trained)
        _record(records, "marft_a_swapped", seed, swapped, kind="swapped", source="marft_a")
        _record(records, "marft_t", seed, other)
    summaries = summarise(grid_records(records))
    a, b = [0.20, 0.45, 0.05], [0.60, 0.90, 0.40]
    paired = compare(summaries, Comparison(a="marft_a_swapped", b="marft_a", paired=True))
    assert paired.design == "paired seeds" and paired.test.test == "paired t"
    assert paired.test.p == pytest.approx(stats.paired_t(a, b).p)
    assert paired.exact.test == "exact sign-flip" and paired.exact.min_p == pytest.approx(0.25)
    assert math.isclose(paired.difference, -0.40)
    # undeclared, the same cells are independent samples: Welch, and a much larger p
    unpaired = compare(summaries, Comparison(a="marft_a_swapped", b="marft_a"))
    assert unpaired.test.test == "Welch t" and unpaired.test.p == pytest.approx(stats.welch_t(a, b).p)
    assert unpaired.exact.test == "exact permutation" and paired.test.p < 0.01 < unpaired.test.p


def test_a_declared_pair_with_different_seeds_is_tested_as_independent(tmp_path):
    summaries = _summaries(tmp_path, {"marft_a": [0.6, 0.7, 0.8], "solo_ppo": [0.9, 0.7]})
    result = compare(summaries, Comparison(a="marft_a", b="solo_ppo", paired=True))
    assert result.design == "independent seeds" and result.test.test == "Welch t"
    assert "seeds differ" in result.note


def test_a_seed_free_untrained_cell_is_a_constant_and_a_one_seed_trained_cell_is_not_testable(tmp_path):
    summaries = _summaries(tmp_path, {"marft_a": [0.39, 0.41, 0.22], "untrained": [0.05], "grpo_agent": [0.56]},
                           kinds={"untrained": "untrained"})
    result = compare(summaries, Comparison(a="marft_a", b="untrained"))
    assert result.design == "against a seed-free value" and result.test.test == "one-sample t"
    assert result.test.p == pytest.approx(stats.one_sample_t([0.39, 0.41, 0.22], 0.05).p)
    flipped = compare(summaries, Comparison(a="untrained", b="marft_a"))
    assert flipped.difference == pytest.approx(-result.difference) and flipped.test.p == pytest.approx(result.test.p)
    assert flipped.test.ci == pytest.approx((-result.test.ci[1], -result.test.ci[0]))
    single = compare(summaries, Comparison(a="grpo_agent", b="marft_a"))
    assert single.test is None and single.exact.min_p == pytest.approx(0.25)
    assert single.verdict() == "not resolved: grpo_agent has one seed: its spread over seeds is unknown"


def test_holm_runs_over_the_declared_set_and_the_verdicts_say_what_is_resolved(tmp_path):
    summaries = _summaries(tmp_path, {"solo_ppo": [0.80, 0.84, 0.86, 0.83], "marft_a": [0.30, 0.35, 0.28, 0.33],
                                      "marft_t": [0.72, 0.80, 0.78, 0.74], "grpo": [0.31, 0.36, 0.27, 0.33]})
    comparisons = [Comparison(a="marft_a", b="solo_ppo", question="A vs solo"),
                   Comparison(a="marft_t", b="solo_ppo", question="T vs solo"),
                   Comparison(a="grpo", b="marft_a", question="grpo vs A", margin=8),
                   Comparison(a="marft_t_shared", b="solo_ppo", question="not run")]
    results = compare_all(summaries, comparisons)
    raw = [r.test.p for r in results[:3]]
    # four declared, one not run yet: it still counts in m
    assert [r.holm_p for r in results[:3]] == pytest.approx(stats.holm([*raw, None])[:3])
    assert results[3] is None
    assert results[0].verdict() == "resolved: solo_ppo > marft_a"
    assert raw[1] < ALPHA < results[1].holm_p  # "significant" alone, not after Holm
    # 4 seeds per cell: too few for a seeds-needed figure (MIN_SPREAD_SEEDS)
    assert results[1].verdict() == "not resolved (no seeds-needed estimate: the spread rests on 4 seeds, under 5)"
    tost = results[2].equivalence_holm_p
    assert results[2].equivalence.p < ALPHA and tost == pytest.approx(stats.holm([results[2].equivalence.p])[0])
    assert results[2].verdict() == f"resolved: equivalent within +-8 points (TOST Holm p {tost:.3f})"
    rows = comparison_table(summaries, comparisons)
    # 4 v 4 seeds: the exact permutation test's floor is 2 / C(8, 4) = 0.029
    assert rows[2] == ("| A vs solo | marft_a: 31.5 (4) | solo_ppo: 83.2 (4) | -51.8 | [-56.7, -46.8] "
                       "| [-55.0, -48.3] (seeds) | Welch t, df 5.7 | <0.001 | 0.029 (0.029) | <0.001 "
                       "| resolved: solo_ppo > marft_a |")
    assert rows[5] == "| not run | marft_t_shared | solo_ppo | not run yet | | | | | | | |"


def test_seeds_needed_is_printed_only_on_spreads_of_enough_seeds(tmp_path):
    five = {"solo_ppo": [0.80, 0.84, 0.86, 0.83, 0.79], "marft_t": [0.72, 0.80, 0.78, 0.74, 0.86]}
    result, = compare_all(_summaries(tmp_path / "five", five), [Comparison(a="marft_t", b="solo_ppo")])
    sd = {s.cell: s.sd for s in _summaries(tmp_path / "five", five)}
    n = stats.seeds_needed(result.difference, sd["marft_t"], sd["solo_ppo"], ALPHA)
    assert not result.resolved and result.spread_seeds == MIN_SPREAD_SEEDS == 5
    assert result.verdict() == f"not resolved ({n} seeds per cell would be needed at this effect)"
    four = {"solo_ppo": [0.80, 0.84, 0.86, 0.83], "marft_t": [0.72, 0.80, 0.78, 0.86]}
    result, = compare_all(_summaries(tmp_path / "four", four), [Comparison(a="marft_t", b="solo_ppo")])
    assert not result.resolved
    assert result.verdict() == "not resolved (no seeds-needed estimate: the spread rests on 4 seeds, under 5)"


def test_a_look_at_fewer_seeds_than_declared_is_interim_and_carries_its_tost_p(tmp_path):
    cells = {"joint": [0.46, 0.54], "solo": [0.47, 0.28]}
    comparisons = [Comparison(a="joint", b="solo", margin=15)]
    summaries = _summaries(tmp_path, cells)
    interim, = compare_all(summaries, comparisons, declared={"joint": 17, "solo": 17})
    tost = interim.equivalence_holm_p
    assert interim.interim == (2, 2, 17, 17) and tost > ALPHA
    assert interim.verdict() == ("interim look at 2 and 2 of the 17 and 17 declared seeds, decides nothing: not resolved "
                                 "(no seeds-needed estimate: the spread rests on 2 seeds, under 5); not shown "
                                 f"equivalent within +-15 (TOST Holm p {tost:.3f})")
    complete, = compare_all(summaries, comparisons, declared={"joint": 2, "solo": 2})
    assert complete.interim is None and not complete.verdict().startswith("interim")
    untold, = compare_all(summaries, comparisons)
    assert untold.interim is None
    # the summary (front pages) carries the same verdict as the report
    write_report(tmp_path, "t", ["joint", "solo"], comparisons=comparisons, declared={"joint": 17, "solo": 17})
    entry = json.loads((tmp_path / "summary.json").read_text())["comparisons"][0]
    assert entry["verdict"] == interim.verdict()
    assert interim.verdict() in (tmp_path / "README.md").read_text()


def test_two_cells_at_the_floor_get_no_seeds_needed_figure(tmp_path):
    # 100 problems per evaluation: means of 0.4 % and 1.0 % are within 2 binomial s.e. of zero
    # (the floor is 4 / 104 = 3.8 %); 6.6 % is not
    summaries = _summaries(tmp_path, {"marft_a": [0.01, 0.0, 0.0, 0.0, 0.01], "shared": [0.0, 0.0, 0.0, 0.0, 0.05],
                                      "solo_ppo": [0.12, 0.0, 0.10, 0.01, 0.10]})
    by_name = {s.cell: s for s in summaries}
    assert by_name["marft_a"].at_floor and by_name["shared"].at_floor and not by_name["solo_ppo"].at_floor
    comparisons = [Comparison(a="marft_a", b="shared", question="floor vs floor"),
                   Comparison(a="marft_a", b="solo_ppo", question="floor vs not")]
    floor, one_side = compare_all(summaries, comparisons)
    assert floor.both_at_floor and floor.seeds_needed is None
    assert floor.verdict() == "not resolved: not estimable (both at the floor)"
    assert not one_side.both_at_floor and one_side.seeds_needed is not None
    assert "seeds per cell would be needed" in one_side.verdict()
    rows = comparison_table(summaries, comparisons)
    assert rows[2].endswith("| not resolved: not estimable (both at the floor) |")


def test_the_family_sentence_agrees_with_the_number_not_run(tmp_path):
    _summaries(tmp_path / "g", {"a": [0.3, 0.4], "b": [0.1, 0.2]})
    ran = Comparison(a="a", b="b", question="ran")

    def text(comparisons):
        return write_report(tmp_path / "g", "Grid g", ["a", "b"], comparisons=comparisons).read_text()

    assert "(every declared comparison counts in the family's size)" in text([ran])
    assert "(the one not run yet counts in the family's size too)" in text([ran, Comparison(a="a", b="c")])
    assert "(the 2 not run yet count in the family's size too)" in text(
        [ran, Comparison(a="a", b="c"), Comparison(a="c", b="b")])
    assert "one not run yet still counts" not in text([ran])


def test_a_plan_is_shown_in_the_report_and_the_summary(tmp_path):
    plan = {"made": {"commit": "abc1234", "code": "c0de", "date": "2026-12-01 10:00 UTC"}, "accepted": False,
            "refusals": ["cell team: its starting policy earned the reward in 0 of 128 sampled episodes"],
            "alpha": 0.05, "family": 1, "power": 0.8, "meaningful_effect": 10,
            "gate": {"episodes": 128, "min_signal": 0.25},
            "gates": [{"cell": "team", "source": "pilot", "episodes": 128, "rewarded": 0, "rate": 0.0,
                       "episodes_per_update": 32, "signal": 0.0, "passed": False}],
            "contrasts": [{"question": "q", "a": "a", "b": "b", "design": "paired", "seeds": "5", "sd": [0.1],
                           "basis": "records, paired", "mde": 0.2192, "least_passing": 0.1771,
                           "exact_floor": 0.0625, "exact_floor_holm": 0.0625, "answers": False, "margin_needed": 0.2611,
                           "notes": ["pairing does not help: x"]}],
            "time": {"line": "Machine time: 1.00 h recorded for the 2 runs done; 0.00 h estimated for the 0 to run."},
            "spread_from": {"grid": "earlier", "file": "e.yaml", "cells": ["a"], "differ": {"b": ["config.lora.r"]}}}
    comparisons = [Comparison(a="a", b="b", question="q", paired=True)]
    _summaries(tmp_path / "g", {"a": [0.3, 0.4], "b": [0.1, 0.2]})
    text = write_report(tmp_path / "g", "Grid g", ["a", "b"], comparisons=comparisons, plan=plan).read_text()
    assert "## Plan" in text and "**refused**" in text and f"- {plan['refusals'][0]}" in text
    assert "| team | pilot | 0 / 128 | 0.00 | 32 | 0.00 | FAIL |" in text
    assert "| q | a - b | paired, 5 | 10.0 (records, paired) | 21.9 | 17.7 | +-26.1 | 0.062 (0.062) | no |" in text
    assert "- contrast a - b: pairing does not help: x" in text
    assert ("from the records of grid earlier (`e.yaml`), for its cells of the same name that are the same runs apart "
            "from the seed and the evaluation points: a; of the same name but not the same runs (not used): "
            "b (config.lora.r).") in text
    assert json.loads((tmp_path / "g" / "summary.json").read_text())["plan"] == plan
    assert "## Plan" not in write_report(tmp_path / "g", "Grid g", ["a", "b"], comparisons=comparisons).read_text()
    # a grid with no records yet shows its plan too
    assert "## Plan" in write_report(tmp_path / "empty", "Grid e", ["a", "b"], comparisons=comparisons,
                                     plan=plan).read_text()


def test_the_bootstrap_resamples_problems_when_every_seed_has_its_outcomes(tmp_path):
    records = tmp_path / "records"
    a = [[1, 1, 0, 1, 0, 1, 1, 0], [1, 0, 0, 1, 0, 1, 1, 1], [1, 1, 1, 1, 0, 1, 1, 0]]
    b = [[0, 1, 0, 0, 0, 1, 0, 0], [1, 0, 0, 0, 0, 1, 0, 0]]
    for seed, solved in enumerate(a):
        _record(records, "marft_a", seed, sum(solved) / 8, solved=solved)
    for seed, solved in enumerate(b):
        _record(records, "solo_ppo", seed, sum(solved) / 8, solved=solved)
    _record(records, "marft_t", 0, 0.5)  # no per-problem outcomes
    _record(records, "marft_t", 1, 0.25)
    summaries = summarise(grid_records(records))
    result = compare(summaries, Comparison(a="marft_a", b="solo_ppo"))
    assert result.bootstrap.basis == "seeds x problems"
    assert result.bootstrap == stats.bootstrap_difference(a, b, seed=0)
    assert compare(summaries, Comparison(a="marft_t", b="solo_ppo")).bootstrap.basis == "seeds"


def test_a_descriptive_comparison_shows_its_difference_on_shared_seeds_and_leaves_holm_alone(tmp_path):
    summaries = _summaries(tmp_path, {"solo_ppo": [0.80, 0.84, 0.86, 0.83], "marft_a": [0.30, 0.35, 0.28, 0.33],
                                      "marft_t": [0.72, 0.80, 0.78, 0.74], "short": [0.50, 0.20]})
    tested = [Comparison(a="marft_a", b="solo_ppo", question="A vs solo"),
              Comparison(a="marft_t", b="solo_ppo", question="T vs solo")]
    described = Comparison(a="marft_a", b="short", question="A vs short", paired=True, descriptive=True)
    alone, both = compare_all(summaries, tested), compare_all(summaries, [*tested, described])
    # Holm over the two tested, as without it
    assert [r.holm_p for r in both[:2]] == [r.holm_p for r in alone]
    assert [r.seeds_needed for r in both[:2]] == [r.seeds_needed for r in alone]
    result = both[2]
    # paired on seeds 0 and 1 only: (30 - 50) and (35 - 20) -> mean -2.5 points
    assert result.design == "paired seeds" and result.a.seeds == [0, 1] and result.a.accuracies == [0.30, 0.35]
    assert result.difference == pytest.approx(-0.025) and result.holm_p is None and result.seeds_needed is None
    assert result.verdict() == "descriptive: not tested (outside the Holm family)"
    assert "paired on the 2 seeds both cells have (0, 1)" in result.note
    row = comparison_table(summaries, [*tested, described])[-1]
    assert row.startswith("| A vs short [paired, descriptive, outside the Holm family] | marft_a: 32.5 (2) "
                          "| short: 35.0 (2) | -2.5 |")
    assert "| none (paired seeds) | - | - | - | descriptive: not tested (outside the Holm family)" in row
    # not declared descriptive, the same pair differs in seeds: tested as independent, in the family
    plain = compare_all(summaries, [*tested, Comparison(a="marft_a", b="short", paired=True)])
    assert plain[2].design == "independent seeds" and plain[2].holm_p is not None
    assert plain[0].holm_p != both[0].holm_p
    text = write_report(tmp_path, "Grid g", comparisons=[*tested, described]).read_text()
    assert "Only the 2 comparisons declared in the grid file are tested (1 more declared descriptive" in text
    assert "Bonferroni level 0.05 / 2" in text


def test_a_comparison_names_two_different_cells_and_a_positive_margin():
    with pytest.raises(ValueError, match="two different cells"):
        Comparison(a="marft_a", b="marft_a")
    with pytest.raises(ValueError, match="margin must be > 0"):
        Comparison(a="marft_a", b="solo_ppo", margin=0)
    with pytest.raises(ValueError, match="descriptive comparison is not tested"):
        Comparison(a="marft_a", b="solo_ppo", margin=5, descriptive=True)


def test_a_duplicate_run_is_reported_and_counted_once(tmp_path):
    records = tmp_path / "g" / "records"
    config = {"seed": 0, "algorithm": "grpo", "output_dir": "runs/g/grpo/seed0", "learner": {"grouping": "team"}}
    _record(records, "grpo", 0, 0.56, config=config)
    _record(records, "grpo", 1, 0.06, config={**config, "seed": 1, "output_dir": "runs/g/grpo/seed1"})
    _record(records, "grpo_again", 0, 0.56, config={**config, "output_dir": "runs/g/grpo_again/seed0"})
    counted, duplicates = counted_records(grid_records(records), ["grpo", "grpo_again"])
    assert [r["name"] for r in counted] == ["grpo_seed0", "grpo_seed1"]
    assert [(d.kept, d.dropped, d.reason) for d in duplicates] == [("grpo_seed0", "grpo_again_seed0", "same config")]
    text = write_report(tmp_path / "g", "Grid g", ["grpo", "grpo_again"]).read_text()
    assert "## Duplicate runs" in text and "`grpo_again_seed0` is the same run as `grpo_seed0`" in text
    assert "| grpo_again |" not in text and "cell `grpo_again` has no other record" in text
    assert [line["cell"] for line in curve_series(grid_records(records), ["grpo", "grpo_again"])] == ["grpo", "grpo"]


def test_records_of_a_cell_the_grid_file_no_longer_declares_are_named_not_tested(tmp_path):
    records = tmp_path / "g" / "records"
    _record(records, "marft_a", 0, 0.5)
    _record(records, "marft_a", 1, 0.6)
    _record(records, "removed", 0, 0.9)  # a cell taken out of the grid file after its run
    comparisons = [Comparison(a="removed", b="marft_a")]
    text = write_report(tmp_path / "g", "Grid g", ["marft_a"], comparisons=comparisons).read_text()
    assert "| removed |" not in text.split("## Records of cells not in the grid file")[0]
    assert "- `removed` (`removed_seed0`): not in the grid file: not tested" in text
    assert "| removed: 90.0" not in text and "| not run yet |" in text  # a comparison naming it is not answered
    assert [line["cell"] for line in curve_series(grid_records(records), ["marft_a"])] == ["marft_a", "marft_a"]
    # without a grid file (no cell order) every cell is reported
    assert "| removed |" in write_report(tmp_path / "g", "Grid g").read_text()


def test_an_empty_report_lists_the_comparisons_declared_before_the_runs(tmp_path):
    comparisons = [Comparison(a="a", b="b", question="does a beat b?"),
                   Comparison(a="a", b="b", question="same?", paired=True, margin=5)]
    text = write_report(tmp_path / "g", "Grid g", ["a", "b"], comparisons=comparisons).read_text()
    assert "No records yet" in text and "| does a beat b? | a | b | not run yet |" in text
    assert "| same? [paired, margin +-5 points] | a | b | not run yet |" in text  # what was declared, up front


SAMPLED = {"samples_per_problem": 4, "avg_at_k": 0.30, "avg_at_k_stderr": 0.03, "pass_at_k": 0.55,
           "pass_at_k_stderr": 0.05}


def test_sampled_cells_show_avg_and_pass_at_k_with_their_errors(tmp_path):
    records = tmp_path / "g" / "records"
    _record(records, "marft_a", 0, 0.5)
    _record(records, "marft_a", 1, 0.6)
    for seed, (avg, passed) in enumerate([(0.30, 0.55), (0.40, 0.75)]):
        _record(records, "marft_a_k4", seed, avg, kind="final", source="marft_a",
                after={**SAMPLED, "avg_at_k": avg, "pass_at_k": passed, "greedy": False})
    summaries = summarise(grid_records(records), ["marft_a", "marft_a_k4"])
    rows = sampled_table(summaries)
    assert len(rows) == 3  # header, rule, and only the sampled cell
    # avg@4 35.0 +- 5.0 (stdev 0.0707 / sqrt 2), pass@4 65.0 +- 10.0
    assert rows[2] == ("| marft_a_k4 | final (marft_a) | 4 | 35.0 +- 5.0 | 65.0 +- 10.0 "
                       "| s0: 30.0 +- 3.0 / 55.0 +- 5.0 / s1: 40.0 +- 3.0 / 75.0 +- 5.0 |")
    text = write_report(tmp_path / "g", "Grid g", ["marft_a", "marft_a_k4"]).read_text()
    assert "## Sampled evaluations" in text and rows[2] in text
    assert sampled_table(summaries[:1]) == []
    assert "## Sampled evaluations" not in write_report(tmp_path / "h", "Grid h").read_text()


def _stages(reduce, answer, se=(0.05, 0.04), n=100):
    return {"stage_pass": {"reduce": reduce, "answer": answer}, "stage_stderr": {"reduce": se[0], "answer": se[1]},
            "stage_n": {"reduce": n, "answer": n}}


def test_cells_with_stages_show_each_stages_pass_rate(tmp_path):
    records = tmp_path / "g" / "records"
    _record(records, "marft_a", 0, 0.5, after=_stages(0.60, 0.50))
    _record(records, "marft_a", 1, 0.6, after=_stages(0.80, 0.70))
    _record(records, "untrained", 0, 0.0, kind="untrained", after=_stages(0.13, 0.0, se=(0.034, 0.0)))
    _record(records, "old", 0, 0.2)  # a record without stages: no row
    order = ["marft_a", "untrained", "old"]
    rows = stage_table(summarise(grid_records(records), order))
    assert rows[0] == ("| cell | kind | seeds | reduce: the reducer passed A + B, %: mean +- s.e. over seeds "
                       "| answer: the answerer was right given what it heard, %: mean +- s.e. over seeds "
                       "| per seed (+- eval s.e.): reduce, answer | plays per seed |")
    # reduce 70.0 +- 10.0 (stdev 0.1414 / sqrt 2), answer 60.0 +- 10.0
    assert rows[2] == ("| marft_a | train | 2 | 70.0 +- 10.0 | 60.0 +- 10.0 "
                       "| s0: 60.0 +- 5.0, 50.0 +- 4.0 / s1: 80.0 +- 5.0, 70.0 +- 4.0 | 100 |")
    assert rows[3] == "| untrained | untrained | 1 | 13.0 (one seed) | 0.0 (one seed) | s0: 13.0 +- 3.4, 0.0 +- 0.0 | 100 |"
    assert len(rows) == 4
    text = write_report(tmp_path / "g", "Grid g", order).read_text()
    assert "## Per-stage outcomes" in text and rows[2] in text and rows[3] in text
    # records without stages: no section, the report as before
    assert stage_table(summarise(grid_records(records), order)[2:]) == []
    plain = tmp_path / "h" / "records"
    _record(plain, "old", 0, 0.2)
    assert "## Per-stage outcomes" not in write_report(tmp_path / "h", "Grid h", ["old"]).read_text()


def test_per_agent_contribution_is_the_drop_from_the_same_seeds_trained_team(tmp_path):
    records = tmp_path / "g" / "records"
    trained = [[1, 1, 1, 0, 1, 1, 0, 1], [1, 1, 0, 0, 1, 1, 1, 1]]
    base = [[1, 0, 0, 0, 1, 0, 0, 1], [0, 1, 0, 0, 1, 0, 0, 1]]
    for seed, (t, b) in enumerate(zip(trained, base)):
        _record(records, "marft_a", seed, sum(t) / 8, solved=t)
        _record(records, "base_holder", seed, sum(b) / 8, kind="base_seat", source="marft_a", seat="holder_0", solved=b)
        _record(records, "mute_holder", seed, 0.0, kind="fixed_message", source="marft_a", seat="holder_0",
                message="I don't know.")
    _record(records, "marft_a_swapped", 0, 0.1, kind="swapped", source="marft_a")  # no seat: no contribution row
    order = ["marft_a", "base_holder", "mute_holder", "marft_a_swapped"]
    rows = contribution_table(summarise(grid_records(records), order))
    # seed 0: 6/8 - 3/8 = +37.5; seed 1: 6/8 - 3/8 = +37.5 (no spread over seeds)
    d0 = [x - y for x, y in zip(trained[0], base[0])]
    se0 = math.sqrt(sum((d - sum(d0) / 8) ** 2 for d in d0)) / 8
    assert rows[2].startswith("| holder_0 | base_holder | base_seat | marft_a: 75.0 | 37.5 | +37.5 +- 0.0 "
                              f"| s0: +37.5 +- {100 * se0:.1f} / ")
    # the fixed-message records carry no per-problem outcomes: the unpaired s.e. of the two evaluations
    assert rows[3] == ("| holder_0 | mute_holder | fixed_message (\"I don't know.\") | marft_a: 75.0 | 0.0 | +75.0 +- 0.0 "
                       f"| s0: +75.0 +- {100 * math.hypot(0.04, 0.04):.1f} (unpaired) / "
                       f"s1: +75.0 +- {100 * math.hypot(0.04, 0.04):.1f} (unpaired) |")
    assert len(rows) == 4
    assert "## Per-agent contribution" in write_report(tmp_path / "g", "Grid g", order).read_text()


def test_the_critic_table_pools_each_runs_later_half_against_its_ceiling(tmp_path):
    import json

    records = tmp_path / "g" / "records"
    _record(records, "marft_a", 0, 0.5)
    _record(records, "grpo", 0, 0.4, algorithm="grpo")  # no critic: no row
    path = records / "marft_a_seed0.json"
    data = json.loads(path.read_text())
    data["diagnostics"] = {"update": [1, 2, 3, 4], "critic/return_var": [0.2, 0.2, 0.25, 0.25],
                           "critic/residual_var_first": [0.2, 0.2, 0.2, 0.15],
                           "critic/between_task_var": [0.0, 0.0, 0.1, 0.1], "critic/within_task_var": [0.2, 0.2, 0.15, 0.15],
                           "critic/value_return_corr": [0.0, 0.1, 0.3, None]}
    path.write_text(json.dumps(data))
    rows = critic_table(grid_records(records), ["marft_a", "grpo"])
    # updates 3-4: EV = 1 - 0.175 / 0.25 = 0.3, ceiling 0.1 / 0.25 = 0.4, ratio 0.75
    assert rows[2] == "| marft_a | 0 | 3-4 (2) | 0.400 | 0.300 | 0.75 | 0.30 to 0.30 |"
    assert len([r for r in rows if r.startswith("| ")]) == 2  # the header and one run
    assert "## The critic against its ceiling" in write_report(tmp_path / "g", "Grid g", ["marft_a", "grpo"]).read_text()


def _baseline_diagnostics(path, wall_clock_s, **per_position):
    """Patch a written record: its training seconds and per-update diagnostics, ``per_position``
    mapping ``<key>`` (e.g. ``loo_residual_var``) to one list of values per update for both positions,
    or to a pair of lists (position 0, position 1)."""
    data = json.loads(path.read_text())
    updates = len(next(iter(per_position.values()))[0])
    data["budget"]["wall_clock_s"] = wall_clock_s
    data["diagnostics"] = {"update": list(range(1, updates + 1)), "critic/return_var": [0.2] * updates}
    for key, (pos0, pos1) in per_position.items():
        data["diagnostics"][f"critic/{key}/pos0"], data["diagnostics"][f"critic/{key}/pos1"] = pos0, pos1
    path.write_text(json.dumps(data))


def _baseline_grid(tmp_path):
    """Two seeds of a critic cell (four updates, two positions) and of a group cell (three logged
    updates, no critic figures); the first half of each run's logged updates is 9, which pooling
    must leave out."""
    records = tmp_path / "g" / "records"
    for cell in ("critic", "group"):
        for seed in (0, 1):
            _record(records, cell, seed, 0.5, config={"advantage": {"baseline": cell}, "schedule": {"group_size": 4}})
    _baseline_diagnostics(records / "critic_seed0.json", 300.0,
                          group_return_var=([9, 9, 0.3, 0.5], [9, 9, 0.3, 0.5]),
                          loo_residual_var=([9, 9, 0.1, 0.3], [9, 9, 0.2, 0.2]),
                          critic_residual_var=([9, 9, 0.1, 0.2], [9, 9, 0.3, 0.3]),
                          anchored_residual_var=([9, 9, 0.1, 0.3], [9, 9, 0.1, 0.1]))
    _baseline_diagnostics(records / "critic_seed1.json", 500.0,
                          group_return_var=([9, 9, 0.6, 0.6], [9, 9, 0.6, 0.6]),
                          loo_residual_var=([9, 9, 0.4, 0.4], [9, 9, 0.4, 0.4]),
                          critic_residual_var=([9, 9, 0.2, 0.2], [9, 9, 0.5, 0.5]),
                          anchored_residual_var=([9, 9, 0.4, 0.4], [9, 9, 0.2, 0.2]))
    _baseline_diagnostics(records / "group_seed0.json", 100.0, group_return_var=([9, 0.2, 0.4], [9, 0.2, 0.4]),
                          loo_residual_var=([9, 0.1, 0.1], [9, 0.1, 0.1]))
    # its first two updates logged nothing (None in the record's columns): not updates of the pooling
    _baseline_diagnostics(records / "group_seed1.json", 140.0,
                          group_return_var=([None, None, 9, 0.5, 0.5], [None, None, 9, 0.5, 0.5]),
                          loo_residual_var=([None, None, 9, 0.3, 0.3], [None, None, 9, 0.3, 0.3]))
    return records


def test_the_baselines_per_position_pool_each_seeds_later_half_then_the_seeds(tmp_path):
    """By hand, critic cell, position 0: seed 0 pools updates 3-4 to none 0.4, LOO 0.2, critic 0.15,
    anchored 0.2; seed 1 to 0.6, 0.4, 0.2, 0.4. Over the seeds: 0.5, 0.3, 0.175, 0.3, so reductions
    1 - 0.3 / 0.5 = 0.4, 1 - 0.175 / 0.5 = 0.65, 0.4, and the gain 1 - 0.175 / 0.3 = 0.417: a ratio of
    the pooled means (the seeds' own gains 0.25 and 0.5 average 0.375; per-update gains, 0 and 1/3
    for seed 0, would give it 0.167). Position 1: 0.5, 0.3, 0.4, 0.15, gain 1 - 0.4 / 0.3 = -0.333,
    the seeds' -0.5 and -0.25. The group cell (its later two logged updates) logged no critic: its critic columns are
    "-". Training seconds: budget.wall_clock_s, 400 and 120 (grid wall_s is 600 for every run); the group
    cell's ratio pairs the seeds, (100 / 300 + 140 / 500) / 2 = 0.307, not the ratio of the means (0.30)."""
    records = _baseline_grid(tmp_path)
    rows = baseline_table(grid_records(records), ["critic", "group"])
    assert rows[0].startswith("| cell | baseline | position | seeds | updates pooled per seed | left: none | group "
                              "| critic | group_critic |")
    assert rows[0].endswith("| training s per run (x critic) |")
    assert rows[2:6] == [
        "| critic | critic | 0 | 2 | 2 | 0.5000 | 0.3000 | 0.1750 | 0.3000 | 0.400 / 0.650 / 0.400 | 0.417 (0.177) "
        "| s0 0.250, s1 0.500 | 400 (x 1.00) |",
        "| critic | critic | 1 | 2 | 2 | 0.5000 | 0.3000 | 0.4000 | 0.1500 | 0.400 / 0.200 / 0.700 | -0.333 (0.177) "
        "| s0 -0.500, s1 -0.250 | 400 (x 1.00) |",
        "| group | group | 0 | 2 | 2 | 0.4000 | 0.2000 | - | - | 0.500 / - / - | - | - | 120 (x 0.31; s0 0.33, s1 0.28) |",
        "| group | group | 1 | 2 | 2 | 0.4000 | 0.2000 | - | - | 0.500 / - / - | - | - | 120 (x 0.31; s0 0.33, s1 0.28) |"]
    assert "k = 4 episodes per task" in "\n".join(rows)
    text = write_report(tmp_path / "g", "Grid g", ["critic", "group"]).read_text()
    assert "## Baselines per decision position" in text and "| group | group | 1 | 2 | 2 |" in text


def test_the_gain_table_shows_every_estimator_per_position_and_reads_older_critic_records(tmp_path):
    """The old-style critic records of :func:`_baseline_grid` give the same gains as the critic's own
    table (0.417 and -0.333, from ``critic/*``; the group cell logged no critic residual: no row). A GRPO
    step cell logs ``baseline/*``: seed 0 pools its later two updates, p0 reference 0.4, residual
    0.1, left-out residual 0.4, coverage 1; p1 reference 0.2, residual 0.15, coverage 0.5; seed 1 (two
    updates, its later one) p0 0.2, 0.1, 0.2; p1 coverage 0 only. Over the seeds: p0 gain
    1 - 0.1 / 0.3 = 0.667 (seeds 0.75, 0.5, sd 0.177), left out 1 - 0.3 / 0.3 = 0; p1 seed 0 alone,
    gain 0.25, coverage (0.5 + 0) / 2."""
    records = _baseline_grid(tmp_path)
    step = {"learner": {"grouping": "step", "normalisation": "mean"}}
    for seed in (0, 1):
        _record(records, "gigpo", seed, 0.5, algorithm="grpo", config=step)
    for seed, columns in ((0, {"baseline/reference_mse/pos0": [9, 0.3, 0.5], "baseline/mse/pos0": [9, 0.1, 0.1],
                               "baseline/loo_mse/pos0": [9, 0.3, 0.5], "baseline/coverage/pos0": [1, 1, 1],
                               "baseline/reference_mse/pos1": [9, 0.2, None], "baseline/mse/pos1": [9, 0.15, None],
                               "baseline/coverage/pos1": [1, 1, 0]}),
                          (1, {"baseline/reference_mse/pos0": [9, 0.2], "baseline/mse/pos0": [9, 0.1],
                               "baseline/loo_mse/pos0": [9, 0.2], "baseline/coverage/pos0": [1, 1],
                               "baseline/coverage/pos1": [1, 0]})):
        path = records / f"gigpo_seed{seed}.json"
        data = json.loads(path.read_text())
        data["diagnostics"] = {"update": list(range(1, len(columns["baseline/mse/pos0"]) + 1)), **columns}
        path.write_text(json.dumps(data))
    order = ["critic", "group", "gigpo"]
    rows = gain_table(grid_records(records), order)
    assert rows[0].startswith("| cell | estimator | position | seeds | updates pooled per seed | coverage |")
    assert rows[2:6] == [
        "| critic | mappo_action critic | 0 | 2 | 2 | 1.00 | 0.3000 | 0.1750 | 0.417 (0.177) | 0.417 "
        "| s0 0.250, s1 0.500 |",
        "| critic | mappo_action critic | 1 | 2 | 2 | 1.00 | 0.3000 | 0.4000 | -0.333 (0.177) | -0.333 "
        "| s0 -0.500, s1 -0.250 |",
        "| gigpo | grpo step, mean (centre: unit included) | 0 | 2 | 2/1 | 1.00 | 0.3000 | 0.1000 | 0.667 (0.177) "
        "| 0.000 | s0 0.750, s1 0.500 |",
        "| gigpo | grpo step, mean (centre: unit included) | 1 | 2 | 1/0 | 0.25 | 0.2000 | 0.1500 | 0.250 "
        "| 0.250 | s0 0.250, s1 - |"]
    assert not rows[6].startswith("| ")
    assert any("critic | critic | 0 |" in r and "0.417 (0.177)" in r for r in baseline_table(grid_records(records), order))
    text = write_report(tmp_path / "g", "Grid g", order).read_text()
    assert "## Baseline gain per decision position, every estimator" in text


def test_no_baselines_per_position_section_without_their_figures(tmp_path):
    records = tmp_path / "g" / "records"
    _record(records, "marft_a", 0, 0.5)
    _record(records, "grpo", 0, 0.4, algorithm="grpo")
    assert baseline_table(grid_records(records)) == []
    assert "## Baselines per decision position" not in write_report(tmp_path / "g", "Grid g").read_text()
    path = records / "marft_a_seed0.json"  # a critic's figures, none of them per position
    data = json.loads(path.read_text())
    data["diagnostics"] = {"update": [1, 2], "critic/return_var": [0.2, 0.2], "critic/residual_var_first": [0.2, 0.1]}
    path.write_text(json.dumps(data))
    assert baseline_table(grid_records(records)) == []
    text = write_report(tmp_path / "g", "Grid g").read_text()
    assert "## The critic against its ceiling" in text and "## Baselines per decision position" not in text


def test_the_budget_axis_is_episodes_when_the_records_count_them(tmp_path):
    records = tmp_path / "g" / "records"
    _record(records, "marft_a", 0, 0.5, episodes=256)
    _record(records, "solo_ppo", 0, 0.9, algorithm="ppo", profile="solo", episodes=256)
    text = write_report(tmp_path / "g", "Grid g", ["solo_ppo", "marft_a"]).read_text()
    assert "Budget axis: training episodes" in text and "equal training wall-clock" not in text
    assert [line["x"] for line in plotted_series(tmp_path / "g" / "curves.png")] == [[0, 128, 256], [0, 128, 256]]
    # a grid budgeted in sampled tokens plots against them
    tokens = {"axis": "sampled_tokens", "sampled_tokens": 2560}
    _record(records, "marft_a", 0, 0.5, episodes=256, budget=tokens)
    _record(records, "solo_ppo", 0, 0.9, algorithm="ppo", profile="solo", episodes=256, budget=tokens)
    assert "Budget axis: sampled tokens" in write_report(tmp_path / "g", "Grid g", ["solo_ppo", "marft_a"]).read_text()
    assert plotted_series(tmp_path / "g" / "curves.png")[0]["x"] == [0, 1280, 2560]


def test_records_run_at_equal_wall_clock_say_so(tmp_path):
    records = tmp_path / "g" / "records"
    _record(records, "marft_a", 0, 0.5, config={"seed": 0, "schedule": {"time_budget_s": 600}})
    text = write_report(tmp_path / "g", "Grid g").read_text()
    assert "Budget axis: training minutes (wall-clock)" in text
    assert "Caveats the records carry:" in text and "(every cell)" in text  # leaderboards.records' own lines
    assert "**equal training wall-clock** (600 s of rollouts and updates per run), **not at equal samples**" in text


def test_a_grid_rerun_under_a_new_protocol_is_reported_on_that_protocol_alone(tmp_path):
    records = tmp_path / "g" / "records"
    wall_clock = {"seed": 0, "schedule": {"time_budget_s": 600}}
    order = ["untrained", "solo_ppo", "marft_a"]
    for seed in (0, 1):
        _record(records, "marft_a", seed, 0.3, config=wall_clock)
        _record(records, "solo_ppo", seed, 0.8, algorithm="ppo", profile="solo", config=wall_clock)
    # an untrained evaluation has no budget: current under any protocol, it supersedes nothing
    _record(records, "untrained", 0, 0.1, kind="untrained", task_revision=1)
    old = summarise(reported_records(grid_records(records), order)[0], order)
    assert [(s.cell, s.seeds) for s in old] == [("untrained", [0]), ("solo_ppo", [0, 1]), ("marft_a", [0, 1])]
    _record(records, "marft_a", 1, 0.6, episodes=128, budget={"axis": "episodes", "episodes": 128},
            task_revision=1, commit="def5678")  # its rerun, under the current protocol
    counted, _ = reported_records(grid_records(records), order)
    assert [(r["grid"]["cell"], r["grid"]["seed"]) for r in counted] == [("untrained", 0), ("marft_a", 1)]
    text = write_report(tmp_path / "g", "Grid g", order).read_text()
    assert "## Records awaiting their rerun" in text and "- `solo_ppo`: s0, s1" in text and "- `marft_a`: s0" in text
    assert "3 records were made under an older protocol" in text and "equal wall-clock" in text
    assert "Budget axis: training episodes" in text  # the current records' axis
    assert "The counted records come from 2 commits (abc1234: 1, def5678: 1)" in text
    assert "Every counted record was made at commit" not in text
    # the grid's cost is its counted runs' (600 s each); the superseded ones' is named apart
    assert ("Machine time of the recorded runs (training, evaluations, loading): 0.33 h over the 2 runs counted "
            "here; the 3 records not counted took another 0.50 h.") in text


def test_records_of_several_commits_are_one_code_state_when_their_code_digests_agree(tmp_path):
    records = tmp_path / "g" / "records"
    _record(records, "marft_a", 0, 0.3, commit="abc1234", code="0ba7565cfccb")
    _record(records, "solo_ppo", 0, 0.8, algorithm="ppo", profile="solo", commit="def5678", code="0ba7565cfccb")
    text = write_report(tmp_path / "g", "Grid g", ["solo_ppo", "marft_a"]).read_text()
    line = next(line for line in text.splitlines() if line.startswith("The counted records come from 2 commits ("))
    assert "abc1234: 1" in line and "def5678: 1" in line
    assert line.endswith(") with the same code (digest 0ba7565cfccb): they differ only outside marft's code.")
    _record(records, "solo_ppo", 0, 0.8, algorithm="ppo", profile="solo", commit="def5678", code="9f00d1e2a3b4")
    text = write_report(tmp_path / "g", "Grid g", ["solo_ppo", "marft_a"]).read_text()
    assert "with the same code" not in text and "may be one of code as well as of algorithm" in text
    # a record made before records carried the digest cannot be shown to share the code
    _record(records, "solo_ppo", 0, 0.8, algorithm="ppo", profile="solo", commit="def5678", code="0ba7565cfccb")
    path = records / "marft_a_seed0.json"
    path.write_text(json.dumps({k: v for k, v in json.loads(path.read_text()).items() if k != "code"}))
    text = write_report(tmp_path / "g", "Grid g", ["solo_ppo", "marft_a"]).read_text()
    assert "with the same code" not in text and "may be one of code as well as of algorithm" in text


def test_code_that_differs_only_between_seeds_leaves_the_pairs_in_one_code_state(tmp_path):
    records = tmp_path / "g" / "records"
    for seed, (commit, code) in enumerate([("abc1234", "0ba7565cfccb"), ("abc1234", "0ba7565cfccb"),
                                           ("def5678", "9f00d1e2a3b4")]):
        _record(records, "marft_a", seed, 0.3, commit=commit, code=code)
        _record(records, "solo_ppo", seed, 0.8, algorithm="ppo", profile="solo", commit=commit, code=code)
    text = write_report(tmp_path / "g", "Grid g", ["solo_ppo", "marft_a"]).read_text()
    assert ("and 2 code digests, but every seed's records share one: the code differs between seeds, never within "
            "one, so a paired contrast compares runs of one code state") in text
    _record(records, "solo_ppo", 2, 0.8, algorithm="ppo", profile="solo", commit="abc1234", code="0ba7565cfccb")
    text = write_report(tmp_path / "g", "Grid g", ["solo_ppo", "marft_a"]).read_text()
    assert "never within one" not in text and "may be one of code as well as of algorithm" in text


def test_the_report_names_each_seeds_dtype_and_flags_a_seed_that_mixes_them(tmp_path):
    records = tmp_path / "g" / "records"

    def config(dtype):
        return {"model": {"dtype": dtype}}

    for seed in (0, 1):
        _record(records, "marft_a", seed, 0.3, config=config("auto"))
        _record(records, "solo_ppo", seed, 0.8, algorithm="ppo", profile="solo", config=config("auto"))
    text = write_report(tmp_path / "g", "Grid g", ["solo_ppo", "marft_a"]).read_text()
    assert "Dtypes the records ran in" not in text and "Every counted record ran in" not in text
    for seed, dtype in ((2, "bfloat16"), (3, "float32")):
        _record(records, "marft_a", seed, 0.3, config=config(dtype))
        _record(records, "solo_ppo", seed, 0.8, algorithm="ppo", profile="solo", config=config(dtype))
    text = write_report(tmp_path / "g", "Grid g", ["solo_ppo", "marft_a"]).read_text()
    assert ("Dtypes the records ran in: auto, not resolved in the record (seeds 0, 1); bfloat16 (seeds 2); "
            "float32 (seeds 3).") in text
    _record(records, "solo_ppo", 3, 0.8, algorithm="ppo", profile="solo", config=config("bfloat16"))
    text = write_report(tmp_path / "g", "Grid g", ["solo_ppo", "marft_a"]).read_text()
    assert "bfloat16 / float32 (seeds 3). **Seeds 3 mix dtypes between their runs**" in text


def test_the_plot_carries_the_numbers_it_draws(tmp_path):
    records = tmp_path / "g" / "records"
    _record(records, "marft_a", 1, 0.5)
    _record(records, "solo_ppo", 0, 0.9, algorithm="ppo", profile="solo")
    write_report(tmp_path / "g", "Grid g", ["solo_ppo", "marft_a"])
    axis = "training minutes (wall-clock)"
    assert plotted_series(tmp_path / "g" / "curves.png") == [
        {"cell": "solo_ppo", "seed": 0, "axis": axis, "x": [0.0, 3.0, 6.0], "accuracy": [10.0, 50.0, 90.0]},
        {"cell": "marft_a", "seed": 1, "axis": axis, "x": [0.0, 3.0, 6.017], "accuracy": [10.0, 30.0, 50.0]}]


REPO = Path(__file__).resolve().parents[1]
GRID_FILES = sorted((REPO / "baselines" / "grids").glob("*.yaml"))


@pytest.mark.parametrize("grid_file", GRID_FILES, ids=lambda p: p.stem)
def test_committed_grid_reports_match_their_records(grid_file, monkeypatch):
    """The tables and plot under leaderboards/grids/ are what the records and the grid file give
    (regenerate with ``python -m baselines.grid GRID --report-only``)."""
    from baselines.grid import load_grid, records_dir, spec_title
    from baselines.grid_spec import declared_seeds
    from baselines.grid_plan import load_plan

    monkeypatch.chdir(REPO)
    spec = load_grid(grid_file.relative_to(REPO))
    folder = records_dir(spec).parent
    order = [c.name for c in spec.cells]
    state = grid_state(folder, order, spec.comparisons, declared_seeds(spec))
    plan = load_plan(spec)  # the grid's last plan (--plan), shown in its report
    expected = report(folder, state, spec_title(spec), order, spec.description, spec.comparisons, write_plot=False,
                      plan=plan)
    text = (folder / "README.md").read_text(encoding="utf-8")
    assert text == expected
    assert json.loads((folder / "summary.json").read_text(encoding="utf-8")) == \
        summary(state, spec_title(spec), order, spec.comparisons, plan)
    series = curve_series(grid_records(folder / "records"), order)
    if series:
        assert plotted_series(folder / "curves.png") == series
    if not spec.comparisons:  # a stage other grids start from: nothing to test
        assert "## Comparisons" not in text
        return
    assert "best of" not in text.split("## Comparisons")[1].split("\n\n")[1]  # the table: declared rows only
    assert f"Only the {len(in_family(spec.comparisons))} comparisons declared in the grid file are tested" in text


def test_the_committed_relay_report_leaves_grpo_agent_out_and_names_its_budget():
    text = (REPO / "leaderboards" / "grids" / "relay" / "README.md").read_text(encoding="utf-8")
    assert "| grpo_agent |" not in text  # its cell was removed from the grid file
    assert "- `grpo_agent` (`grpo_agent_seed0`): not in the grid file: not tested" in text
    # the rerun at equal episodes is complete: every declared run replaced its wall-clock record,
    # all at one commit, so nothing awaits a rerun
    assert "Budget axis: training episodes" in text and "**equal training wall-clock**" not in text
    assert "## Records awaiting their rerun" not in text and "Every counted record was made at commit b3ba6df." in text
    assert "9.73 h over the 27 runs counted here" in text


def test_each_seeds_start_is_read_from_its_first_update(tmp_path):
    records = tmp_path / "g" / "records"
    _record(records, "stage", 0, 0.6)
    _record(records, "stage", 1, 0.5)
    start = {"source": "stage", "adapters": {"answerer_0": "other"}, "seed": 0}
    for seed, (rate, sampled) in enumerate([(0.5625, 32), (0.0, 32), (0.25, 16)]):
        _record(records, "joint", seed, 0.4)
        path = records / f"joint_seed{seed}.json"
        record = json.loads(path.read_text())
        record["grid"]["start"] = {**start, "seed": seed}
        record["diagnostics"] = {"update": [1, 2], "rollout/episodes": [sampled, 32],
                                 "rollout/solved_rate": [rate, 0.9]}
        path.write_text(json.dumps(record))
    text = write_report(tmp_path / "g", "Grid g", ["stage", "joint"]).read_text()
    assert "## Each seed's start" in text
    # (18 + 0 + 4) / (32 + 32 + 16) = 27.5 %; the second seed's first update solved none
    assert ("| joint | stage, other | 3 | s0: 18 of 32 / s1: 0 of 32 / s2: 4 of 16 | 27.5 | 1 |") in text
    assert "| stage |" not in text.split("## Each seed's start")[1].split("\n\n")[1]  # no start: no row
    for seed in range(3):
        (records / f"joint_seed{seed}.json").unlink()
    assert "## Each seed's start" not in write_report(tmp_path / "g", "Grid g", ["stage", "joint"]).read_text()
