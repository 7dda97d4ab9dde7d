"""The grid report (tables and plot) is regenerated from the records alone."""

import math
from pathlib import Path

import pytest

from leaderboards.build import build
from leaderboards.grid_report import (Comparison, compare, comparison_table, curve_series, grid_records, plotted_series,
                                      report, summarise, write_report)
from leaderboards.records import Record, write_record


def _record(records, cell, seed, accuracy, kind="train", algorithm="mappo_action", profile="relay", **grid):
    curve = [] if kind == "swapped" else [
        {"update": 0, "accuracy": 0.1, "stderr": 0.03, "train_seconds": 0.0},
        {"update": 4, "accuracy": accuracy, "stderr": 0.04, "train_seconds": 360.0 + seed}]
    write_record(Record(name=f"{cell}_seed{seed}", env_id="marft/Relay-v0", env_kwargs={"profile": profile},
                        algorithm=algorithm, model="m", eval_after={"accuracy": accuracy, "stderr": 0.04, "n": 100},
                        eval_curve=curve, budget={"updates": 4, "wall_clock_s": 360.0 + seed},
                        commit="abc1234", grid={"grid": "g", "cell": cell, "seed": seed, "kind": kind,
                                                "wall_s": 600.0, **grid}), records)


def test_table_has_mean_se_over_seeds_and_per_seed_values(tmp_path):
    records = tmp_path / "grids" / "g" / "records"
    for seed, acc in enumerate([0.60, 0.70, 0.80]):
        _record(records, "marft_a", seed, acc)
    _record(records, "solo_ppo", 0, 0.9, algorithm="ppo", profile="solo")
    for seed, acc in enumerate([0.20, 0.30, 0.10]):
        _record(records, "marft_a_swapped", seed, acc, kind="swapped", source="marft_a")
    write_record(Record(name="not_in_a_grid", env_id="e", env_kwargs={}, algorithm="ppo", model="m",
                        eval_after={"accuracy": 0.5, "stderr": 0.1, "n": 10}), records)

    summaries = summarise(grid_records(records), order=["solo_ppo", "marft_a", "marft_a_swapped"])
    assert [s.cell for s in summaries] == ["solo_ppo", "marft_a", "marft_a_swapped"]
    assert math.isclose(summaries[1].mean, 0.7) and math.isclose(summaries[1].se_over_seeds, 0.1 / math.sqrt(3))
    assert summaries[0].se_over_seeds is None

    path = write_report(tmp_path / "grids" / "g", "Grid g", ["solo_ppo", "marft_a", "marft_a_swapped"], "What g shows.")
    text = path.read_text()
    # stdev(60, 70, 80) = 10, / sqrt(3) = 5.8
    assert ("| marft_a | train | mappo_action | relay | 3 | 70.0 +- 5.8 | s0: 60.0 +- 4.0 / s1: 70.0 +- 4.0 / "
            "s2: 80.0 +- 4.0 | 6.0 | 4 | abc1234 |") in text
    assert "| solo_ppo | train | ppo | solo | 1 | 90.0 (one seed) |" in text
    assert "| marft_a_swapped | swapped (marft_a) | mappo_action | relay | 3 | 20.0 +- 5.8 |" in text
    assert text.index("| solo_ppo |") < text.index("| marft_a |") < text.index("| marft_a_swapped |")
    assert "not_in_a_grid" not in text and "What g shows." in text
    assert "1.17 h over 7 runs" in text  # 7 x 600 s
    assert (tmp_path / "grids" / "g" / "curves.png").read_bytes()[:4] == b"\x89PNG"
    # regenerating from the same records gives the same report
    assert write_report(tmp_path / "grids" / "g", "Grid g", ["solo_ppo", "marft_a", "marft_a_swapped"],
                        "What g shows.").read_text() == text


def test_main_leaderboard_links_the_grid_reports(tmp_path):
    _record(tmp_path / "grids" / "g" / "records", "marft_a", 0, 0.5)
    write_report(tmp_path / "grids" / "g", "Grid g")
    (tmp_path / "records").mkdir()
    text = build(tmp_path / "records")
    assert "### [Grid g](grids/g/README.md)" in text and "1 records. Machine time" in text


def test_empty_grid_report_says_how_to_fill_it(tmp_path):
    assert "No records yet" in write_report(tmp_path / "g", "Grid g").read_text()


def _summaries(tmp_path, cells):
    records = tmp_path / "records"
    for cell, accuracies in cells.items():
        for seed, accuracy in enumerate(accuracies):
            _record(records, cell, seed, accuracy)
    return summarise(grid_records(records))


def test_comparison_pairs_seeds_of_an_ablation_with_its_source_runs_only(tmp_path):
    records = tmp_path / "records"
    for seed, (trained, swapped, other) in enumerate([(0.60, 0.20, 0.5), (0.70, 0.40, 0.6), (0.80, 0.30, 0.4)]):
        _record(records, "marft_a", seed, trained)
        _record(records, "marft_a_swapped", seed, swapped, kind="swapped", source="marft_a")
        _record(records, "marft_t", seed, other)
    summaries = summarise(grid_records(records))
    result = compare(summaries, Comparison(a=["marft_a_swapped"], b="marft_a"))
    # per-seed differences -40, -30, -50: mean -40, stdev 10, s.e. 10 / sqrt(3)
    assert math.isclose(result.difference, -0.40) and result.se_basis == "paired seeds"
    assert math.isclose(result.stderr, 0.10 / math.sqrt(3))
    # independently trained cells with the same seed numbers are not paired
    independent = compare(summaries, Comparison(a=["marft_t"], b="marft_a"))
    assert independent.se_basis == "seeds" and math.isclose(independent.stderr, math.hypot(0.1, 0.1) / math.sqrt(3))


def test_comparison_of_unpaired_cells_adds_their_standard_errors(tmp_path):
    summaries = _summaries(tmp_path, {"marft_a": [0.60, 0.70, 0.80], "solo_ppo": [0.9, 0.7]})
    result = compare(summaries, Comparison(a=["marft_a"], b="solo_ppo"))
    assert result.se_basis == "seeds" and math.isclose(result.difference, -0.10)
    assert math.isclose(result.stderr, math.hypot(0.10 / math.sqrt(3), math.sqrt(0.02) / math.sqrt(2)))


def test_comparison_with_one_seed_falls_back_to_evaluation_errors_and_picks_the_best_of_a(tmp_path):
    summaries = _summaries(tmp_path, {"marft_a": [0.30], "marft_t": [0.50], "solo_ppo": [0.80]})
    result = compare(summaries, Comparison(a=["marft_a", "marft_t", "grpo"], b="solo_ppo"))
    assert result.a.cell == "marft_t" and math.isclose(result.difference, -0.30)
    assert result.se_basis == "evaluation" and math.isclose(result.stderr, math.hypot(0.04, 0.04))
    assert compare(summaries, Comparison(a=["grpo"], b="solo_ppo")) is None
    rows = comparison_table(summaries, [Comparison(a=["marft_a", "marft_t"], b="solo_ppo", question="team?"),
                                        Comparison(a=["grpo"], b="marft_a", question="grpo?")])
    assert rows[2] == ("| team? | marft_t (best of marft_a, marft_t): 50.0 (1) | solo_ppo: 80.0 (1) | -30.0 | 5.7 "
                       "| -5.3 | evaluation |")
    assert rows[3] == "| grpo? | grpo | marft_a | not run yet | | | |"


def test_the_plot_carries_the_numbers_it_draws(tmp_path):
    records = tmp_path / "g" / "records"
    _record(records, "marft_a", 1, 0.5)
    _record(records, "solo_ppo", 0, 0.9, algorithm="ppo", profile="solo")
    write_report(tmp_path / "g", "Grid g", ["solo_ppo", "marft_a"])
    assert plotted_series(tmp_path / "g" / "curves.png") == [
        {"cell": "solo_ppo", "seed": 0, "minutes": [0.0, 6.0], "accuracy": [10.0, 90.0]},
        {"cell": "marft_a", "seed": 1, "minutes": [0.0, 6.017], "accuracy": [10.0, 50.0]}]


REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("grid_file", sorted((REPO / "baselines" / "grids").glob("*.yaml")), ids=lambda p: p.stem)
def test_committed_grid_reports_match_their_records(grid_file, monkeypatch):
    """The tables and plot under leaderboards/grids/ are what the records and the grid file give
    (regenerate with ``python -m baselines.grid GRID --report-only``)."""
    from baselines.grid import load_grid, records_dir, spec_title

    monkeypatch.chdir(REPO)
    spec = load_grid(grid_file.relative_to(REPO))
    folder = records_dir(spec).parent
    expected = report(folder, spec_title(spec), [c.name for c in spec.cells], spec.description, spec.comparisons,
                      write_plot=False)
    assert (folder / "README.md").read_text(encoding="utf-8") == expected
    series = curve_series(grid_records(folder / "records"), [c.name for c in spec.cells])
    if series:
        assert plotted_series(folder / "curves.png") == series


def test_comparison_of_a_one_seed_cell_with_a_seeded_one_keeps_the_spread_over_seeds(tmp_path):
    # solo_ppo's seeds spread (s.e. 0.10 / sqrt(3)); dropping that for its evaluation s.e. (0.04)
    # would understate the difference's s.e.
    summaries = _summaries(tmp_path, {"grpo_agent": [0.50], "solo_ppo": [0.70, 0.80, 0.90]})
    result = compare(summaries, Comparison(a=["grpo_agent"], b="solo_ppo"))
    assert result.se_basis == "evaluation / seeds" and math.isclose(result.difference, -0.30)
    assert math.isclose(result.stderr, math.hypot(0.04, 0.10 / math.sqrt(3)))
