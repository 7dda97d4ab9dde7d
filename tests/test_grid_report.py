"""The grid report (tables and plot) is regenerated from the records alone."""

import math

from leaderboards.build import build
from leaderboards.grid_report import summarise, write_report, grid_records
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
    assert "- [g](grids/g/README.md): 1 records" in build(tmp_path / "records")


def test_empty_grid_report_says_how_to_fill_it(tmp_path):
    assert "No records yet" in write_report(tmp_path / "g", "Grid g").read_text()
