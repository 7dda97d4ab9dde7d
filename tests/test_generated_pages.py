"""The pages ``python -m leaderboards.build`` writes (``docs/results.md`` whole, ``leaderboards/README.md``)
are current with the records and grid summaries, carry no figure that is not a link to its source,
and a hand edit is caught."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from leaderboards.build import RESULTS_DOC, generated_pages, main, results_page, stale_pages
from leaderboards.records import RECORDS_DIR

REPO = Path(__file__).resolve().parents[1]


def test_the_committed_generated_pages_are_current():
    pages = generated_pages()
    assert RESULTS_DOC in pages and RESULTS_DOC == REPO / "docs" / "results.md"
    stale = stale_pages(pages)
    assert not stale, f"{[str(p.relative_to(REPO)) for p in stale]} differ from what the build writes: " \
                      "run `python -m leaderboards.build` (never edit them by hand)"


def test_check_mode_is_clean_on_the_committed_pages(capsys):
    assert main(["--check"]) == 0 and "current" in capsys.readouterr().out


def _copy_board(tmp_path: Path) -> tuple[Path, Path]:
    """marft's records and grid reports copied beside a ``docs/results.md`` built from them."""
    board = tmp_path / "leaderboards"
    shutil.copytree(RECORDS_DIR, board / "records")
    shutil.copytree(RECORDS_DIR.parent / "grids", board / "grids")
    page = tmp_path / "docs" / "results.md"
    page.parent.mkdir()
    page.write_text(results_page(board / "records", page), encoding="utf-8")
    return board, page


def test_a_hand_edit_or_a_new_record_makes_the_page_stale(tmp_path):
    board, page = _copy_board(tmp_path)
    expected = lambda: {page: results_page(board / "records", page)}  # noqa: E731
    assert stale_pages(expected()) == []
    text = page.read_text(encoding="utf-8")
    page.write_text(text.replace("92.0 +- 3.4", "93.0 +- 3.4", 1), encoding="utf-8")  # a hand-typed figure
    assert stale_pages(expected()) == [page]
    page.write_text(text, encoding="utf-8")
    (board / "records" / "ppo_solo_arithmetic.json").unlink()  # the records moved on without a build
    assert stale_pages(expected()) == [page]


def test_check_mode_exits_1_naming_a_stale_page(tmp_path, capsys):
    board, page = _copy_board(tmp_path)
    (board / "records" / "README.md").write_text("stale table\n", encoding="utf-8")
    assert main(["--records", str(board / "records"), "--no-readme", "--check"]) == 1
    assert "records/README.md" in capsys.readouterr().out
    assert (board / "records" / "README.md").read_text() == "stale table\n"  # --check writes nothing


def test_every_figure_of_the_results_page_is_a_link_to_its_source():
    text = RESULTS_DOC.read_text(encoding="utf-8")
    links = re.findall(r"\[([^\]]*(?:\[[^\]]*\][^\]]*)?)\]\(([^)]+)\)", text)
    assert links and all((RESULTS_DOC.parent / target.split("#")[0]).exists() for _, target in links), \
        "a link of docs/results.md points to no file"
    unlinked = re.sub(r"\[([^\]]*(?:\[[^\]]*\][^\]]*)?)\]\(([^)]+)\)", "", text)
    unlinked = re.sub(r"`[^`]*`", "", unlinked)
    assert not re.findall(r"\d+\.\d+", unlinked), "a figure of docs/results.md is not a link to its record or report"
    assert "(../leaderboards/grids/relay/README.md)" in text and "(../leaderboards/records/" in text


def test_a_grid_summary_links_every_figure_and_states_its_plan(tmp_path):
    import json

    from leaderboards.build import grid_summary

    report = tmp_path / "g" / "README.md"
    report.parent.mkdir()
    report.write_text("# grid g\n\n## Comparisons\n", encoding="utf-8")
    comparison = {"question": "a beats b?", "a": "a", "b": "b", "run": True, "a_mean": 12.5, "a_seeds": 3,
                  "b_mean": 10.0, "b_seeds": 3, "difference": 2.5, "ci_t": [-1.0, 6.0], "holm_p": 0.4,
                  "verdict": "not resolved"}
    plan = {"accepted": False, "contrasts": [{"answers": False}, {"answers": True}]}
    (report.parent / "summary.json").write_text(json.dumps(
        {"title": "grid g", "records": 6, "machine_time": "1.5 h.", "comparisons": [comparison], "plan": plan}))
    text = "\n".join(grid_summary(report, "g/README.md"))
    assert "[12.5](g/README.md#comparisons)" in text and "[+2.5](g/README.md#comparisons)" in text
    assert "[[-1.0, +6.0]](g/README.md#comparisons)" in text and "[0.400](g/README.md#comparisons)" in text
    assert "[refused](g/README.md)" in text and "[1 of 2](g/README.md)" in text
    report.write_text("# grid g\n", encoding="utf-8")  # no comparisons section: links go to the report's top
    assert "[12.5](g/README.md)" in "\n".join(grid_summary(report, "g/README.md"))
