import json
from pathlib import Path

import pytest

from leaderboards.build import _plan_line, build
from leaderboards.records import Record, load_records, write_record


def test_records_round_trip_and_table_is_sorted_by_accuracy(tmp_path):
    for name, acc in (("weak", 0.2), ("strong", 0.6)):
        write_record(Record(name=name, env_id="marft/Arithmetic-v0", env_kwargs={"level": 1},
                            algorithm="marft_a", model="m", eval_after={"accuracy": acc, "stderr": 0.03, "n": 200, "greedy": True}),
                     tmp_path)
    records = load_records(tmp_path)
    assert {r["name"] for r in records} == {"weak", "strong"} and all(r["commit"] is not None for r in records)
    table = build(tmp_path)
    assert table.index("| strong |") < table.index("| weak |")
    assert "60.0 +- 3.0 (n=200)" in table


def test_incomplete_record_is_rejected_with_its_path(tmp_path):
    (tmp_path / "bad.json").write_text(json.dumps({"name": "bad"}))
    with pytest.raises(ValueError, match="bad.json"):
        load_records(tmp_path)


def test_peak_column_reads_the_curve_and_ignores_the_untrained_point(tmp_path):
    curve = [{"update": 0, "accuracy": 0.9, "stderr": 0.1}, {"update": 10, "accuracy": 0.5, "stderr": 0.1},
             {"update": 20, "accuracy": 0.7, "stderr": 0.1}, {"update": 30, "accuracy": 0.7, "stderr": 0.1}]
    write_record(Record(name="run", env_id="e", env_kwargs={}, algorithm="mappo_action", model="m",
                        eval_after={"accuracy": 0.6, "stderr": 0.05, "n": 100}, eval_curve=curve), tmp_path)
    write_record(Record(name="old", env_id="e", env_kwargs={}, algorithm="mappo_action", model="m",
                        eval_after={"accuracy": 0.1, "stderr": 0.05, "n": 100}), tmp_path)
    table = build(tmp_path)
    assert "| 70.0 (update 20) |" in table  # the first of the tied peaks
    assert "| 10.0 +- 5.0 (n=100) | - |" in table  # records without a curve show no peak


def _curve_record(tmp_path, name, env_id="e", with_seconds=True):
    curve = [{"update": u, "accuracy": a, "stderr": 0.05, **({"train_seconds": 60.0 * u} if with_seconds else {})}
             for u, a in ((0, 0.2), (10, 0.5), (20, 0.7))]
    write_record(Record(name=name, env_id=env_id, env_kwargs={}, algorithm="mappo_action", model="m",
                        eval_after={"accuracy": 0.7, "stderr": 0.05, "n": 100}, eval_curve=curve), tmp_path)


def test_plot_converts_the_budget_clock_to_minutes_and_writes_a_png(tmp_path):
    from leaderboards.plot import curve_points, plot_records

    _curve_record(tmp_path, "a")
    _curve_record(tmp_path, "b")
    xs, ys, errs = curve_points(load_records(tmp_path)[0], "minutes")
    assert xs == [0.0, 10.0, 20.0] and ys == [0.2, 0.5, 0.7] and errs == [0.05] * 3
    assert curve_points(load_records(tmp_path)[0], "update")[0] == [0, 10, 20]
    out = plot_records("e", tmp_path / "curves.png", tmp_path)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_errors_name_the_fix(tmp_path):
    from leaderboards.plot import plot_records

    _curve_record(tmp_path, "old", with_seconds=False)
    with pytest.raises(ValueError, match="--x update"):
        plot_records("e", tmp_path / "x.png", tmp_path)
    assert plot_records("e", tmp_path / "x.png", tmp_path, x="update").is_file()
    with pytest.raises(ValueError, match=r"no records .* for 'other'.*\['e'\]"):
        plot_records("other", tmp_path / "y.png", tmp_path)


def _seeded(tmp_path, name, seed, accuracy, lr=5e-4, extra_eval=None):
    config = {"seed": seed, "output_dir": f"runs/{name}", "schedule": {"actor_lr": lr},
              "eval": {"n_problems": 200, **(extra_eval or {})}}
    write_record(Record(name=name, env_id="e", env_kwargs={"level": 1}, algorithm="mappo_action", model="m",
                        eval_after={"accuracy": accuracy, "stderr": 0.05, "n": 200}, config=config), tmp_path)


def test_records_differing_only_in_seed_are_summarised_together(tmp_path):
    from leaderboards.build import seed_groups

    _seeded(tmp_path, "a", 0, 0.90)
    _seeded(tmp_path, "a_seed1", 1, 0.80, extra_eval={"keep_best": True})  # a field added later
    _seeded(tmp_path, "a_lr", 0, 0.50, lr=2.5e-4)  # another setup
    groups = seed_groups(load_records(tmp_path))
    assert sorted(sorted(r["name"] for r in g) for g in groups) == [["a", "a_seed1"], ["a_lr"]]
    table = build(tmp_path)
    assert "| a, a_seed1 | mappo_action | 0, 1 | 85.0 | 90.0 / 80.0 |" in table
    assert "| a_lr, " not in table  # a setup with one seed gets no summary row


def test_no_seed_summary_without_repeated_setups(tmp_path):
    _seeded(tmp_path, "a", 0, 0.90)
    _seeded(tmp_path, "b", 0, 0.50, lr=1e-4)
    assert "several seeds" not in build(tmp_path)


def test_git_commit_is_dirty_for_code_changes_but_not_for_generated_leaderboards(tmp_path):
    import shutil
    import subprocess

    from leaderboards.records import git_commit

    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    files = {"marft_agents/x.py": "x = 1\n", "leaderboards/README.md": "board\n",
             "leaderboards/records/r.json": "{}\n", "leaderboards/grids/g/README.md": "grid\n",
             "leaderboards/records.py": "code = 1\n"}
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "c"], check=True)
    clean = git_commit(tmp_path / "marft_agents")
    assert clean and not clean.endswith("-dirty")
    for generated in ("leaderboards/README.md", "leaderboards/records/r.json", "leaderboards/grids/g/README.md"):
        (tmp_path / generated).write_text("regenerated\n")
    assert git_commit(tmp_path / "marft_agents") == clean  # a grid rewrote its report: code unchanged
    (tmp_path / "leaderboards/records.py").write_text("code = 2\n")
    assert git_commit(tmp_path / "marft_agents") == clean + "-dirty"


def test_code_digest_changes_with_the_code_only_and_needs_no_git(tmp_path):
    """Two checkouts with the same code get one digest whatever else differs (docs, records, grid
    declarations, caches); a changed line of code, config or package file changes it; no ``.git``
    is read."""
    from leaderboards.records import code_digest

    files = {"marft_agents/x.py": "x = 1\n", "marft_envs/y.py": "y = 1\n", "baselines/configs/c.yaml": "a: 1\n",
             "baselines/grid.py": "g = 1\n", "pyproject.toml": "[project]\n", "docs/d.md": "doc\n",
             "baselines/grids/g.yaml": "cells: []\n", "leaderboards/records/r.json": "{}\n"}
    copies = [tmp_path / "a", tmp_path / "b"]
    for root in copies:
        for name, text in files.items():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / name).write_text(text)
    first = code_digest(copies[0])
    assert len(first) == 12 and code_digest(copies[1]) == first
    for name in ("docs/d.md", "baselines/grids/g.yaml", "leaderboards/records/r.json"):
        (copies[1] / name).write_text("changed\n")
    (copies[1] / "marft_agents" / "__pycache__").mkdir()
    (copies[1] / "marft_agents" / "__pycache__" / "x.py").write_text("cached\n")
    assert code_digest(copies[1]) == first
    for name in ("marft_agents/x.py", "marft_envs/y.py", "baselines/configs/c.yaml", "pyproject.toml"):
        (copies[1] / name).write_text("changed\n")
        assert code_digest(copies[1]) != first, name
        (copies[1] / name).write_text(files[name])
    assert code_digest(copies[1]) == first
    (copies[1] / "marft_envs" / "z.py").write_text("")  # a new file counts, even empty
    assert code_digest(copies[1]) != first
    assert code_digest(tmp_path / "empty") == ""
    assert code_digest() == code_digest(REPO)  # this checkout's code


def test_a_written_record_carries_the_code_digest(tmp_path):
    from leaderboards.records import code_digest

    write_record(Record(name="r", env_id="e", env_kwargs={}, algorithm="ppo", model="m",
                        eval_after={"accuracy": 0.5, "stderr": 0.1, "n": 10}), tmp_path)
    assert json.loads((tmp_path / "r.json").read_text())["code"] == code_digest()


REPO = Path(__file__).resolve().parents[1]


def test_committed_leaderboard_and_results_grid_block_are_current():
    """``python -m leaderboards.build`` regenerates both from the records; this fails when a record
    landed without them."""
    from leaderboards.build import RESULTS_DOC, link_prefix_for, readme_with_grids

    board = REPO / "leaderboards"
    assert (board / "README.md").read_text(encoding="utf-8") == build(board / "records")
    assert RESULTS_DOC == REPO / "docs" / "results.md" and link_prefix_for(RESULTS_DOC, board / "grids") == "../leaderboards/"
    results = RESULTS_DOC.read_text(encoding="utf-8")
    assert readme_with_grids(results, board / "grids", "../leaderboards/") == results, \
        "docs/results.md's grid block is out of date: run `python -m leaderboards.build`"
    assert "(../leaderboards/grids/relay/README.md)" in results  # links resolve from docs/


def test_the_front_page_readme_has_no_grid_block_and_links_the_results():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert "<!-- grids" not in readme and "docs/results.md" in readme


def test_readme_without_the_grid_block_is_refused_with_the_fix(tmp_path):
    from leaderboards.build import README_START, readme_with_grids

    with pytest.raises(ValueError, match="add the lines"):
        readme_with_grids("# a readme\n", tmp_path)
    assert readme_with_grids(f"a\n{README_START}\nold\n<!-- /grids -->\nb\n", tmp_path) == \
        f"a\n{README_START}\n\n<!-- /grids -->\nb\n"


def test_building_an_outside_records_folder_leaves_marfts_files_alone(tmp_path):
    """``python -m leaderboards.build --records DIR --out DIR/README.md`` (marft_envs/ADDING_AN_ENV.md)
    writes the table and nothing of marft's: the grid block of marft's results (then in the
    top-level README) used to be emptied."""
    import subprocess
    import sys

    records = tmp_path / "records"
    for name, acc in (("weak", 0.2), ("strong", 0.6)):
        write_record(Record(name=name, env_id="example/VowelCount-v0", env_kwargs={}, algorithm="none",
                            model="m", eval_after={"accuracy": acc, "stderr": 0.03, "n": 50}), records)
    mine = [REPO / "README.md", REPO / "docs" / "results.md", REPO / "leaderboards" / "README.md"]
    before = [path.read_bytes() for path in mine]
    try:
        done = subprocess.run([sys.executable, "-m", "leaderboards.build", "--records", str(records),
                               "--out", str(records / "README.md")], cwd=REPO, capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 0, done.stderr
        assert [path.read_bytes() for path in mine] == before
    finally:  # put marft's files back if the command rewrote them
        for path, text in zip(mine, before):
            if path.read_bytes() != text:
                path.write_bytes(text)
    table = (records / "README.md").read_text(encoding="utf-8")
    assert table.index("| strong |") < table.index("| weak |")
    assert "refreshed" not in done.stdout
    # the table names the folder it was built from, and the command that rebuilds it
    assert f"Generated by `python -m leaderboards.build --records {records.as_posix()}` from " \
           f"`{records.as_posix()}/*.json`" in table
    assert "leaderboards/records" not in table


def test_an_outside_readme_grid_block_is_refreshed_only_when_named(tmp_path):
    from leaderboards.build import README_START, main

    records = tmp_path / "records"
    write_record(Record(name="r", env_id="e", env_kwargs={}, algorithm="none", model="m",
                        eval_after={"accuracy": 0.5, "stderr": 0.05, "n": 100}), records)
    report = tmp_path / "grids" / "g" / "README.md"
    report.parent.mkdir(parents=True)
    report.write_text("# grid g\n")
    (report.parent / "summary.json").write_text(json.dumps({"title": "grid g", "records": 0, "comparisons": []}))
    readme = tmp_path / "PKG_README.md"
    readme.write_text(f"a\n{README_START}\nold\n<!-- /grids -->\nb\n")
    main(["--records", str(records)])  # no --out: DIR/README.md; no --readme: no README
    assert "| r |" in (records / "README.md").read_text() and "old" in readme.read_text()
    main(["--records", str(records), "--readme", str(readme)])
    assert "old" not in readme.read_text() and "[grid g](grids/g/README.md)" in readme.read_text()  # relative to it
    nested = tmp_path / "docs" / "results.md"
    nested.parent.mkdir()
    nested.write_text(f"{README_START}\n<!-- /grids -->\n")
    main(["--records", str(records), "--readme", str(nested)])
    assert "[grid g](../grids/g/README.md)" in nested.read_text()
    with pytest.raises(SystemExit):
        main(["--records", str(records), "--readme", str(tmp_path / "missing.md")])


def test_records_of_the_former_protocol_are_flagged_when_loaded():
    """The committed grid records made before the sample budgets (no ``grid.budget`` in the file)
    were made at equal wall-clock, Relay's also with the leaky split of task revision 0 (no
    ``task_revision``); loading says so (``caveats``, ``grid.budget``) without editing the files.
    The reruns under the current protocol carry their budget and revision, and no caveat."""
    from leaderboards.records import WALL_CLOCK

    for grid in ("relay", "solve_check", "arithmetic_l3"):
        folder = REPO / "leaderboards" / "grids" / grid / "records"
        raw = {d["name"]: d for d in (json.loads(p.read_text()) for p in folder.glob("*.json"))}
        records = load_records(folder)
        assert records
        for record in records:
            trained = record["grid"]["kind"] != "untrained"
            former_budget = trained and "budget" not in raw[record["name"]]["grid"]
            former_split = grid == "relay" and raw[record["name"]].get("task_revision") is None
            assert (record["grid"].get("budget") == {"axis": WALL_CLOCK, "time_budget_s": 600}) == former_budget
            assert any("equal wall-clock" in c for c in record["caveats"]) == former_budget
            assert any("task revision 0" in c for c in record["caveats"]) == former_split, record["name"]
            assert bool(record["caveats"]) == (former_budget or former_split)


def test_a_record_without_budget_or_task_revision_loads_as_the_former_protocol(tmp_path):
    """Once every grid is rerun no committed record is of the former protocol: make one the way
    those files were (a current Relay record without ``grid.budget`` and ``task_revision``, trained for 600 s)."""
    from leaderboards.records import WALL_CLOCK

    folder = REPO / "leaderboards" / "grids" / "relay" / "records"
    current = next(d for d in (json.loads(p.read_text()) for p in sorted(folder.glob("*.json")))
                   if d["grid"]["kind"] == "train" and "budget" in d["grid"] and d.get("task_revision") is not None)
    former = json.loads(json.dumps(current))
    del former["grid"]["budget"], former["task_revision"]
    former["config"]["schedule"]["time_budget_s"] = 600  # trained for 600 s, the former axis
    (tmp_path / "now.json").write_text(json.dumps(current))
    (tmp_path / "former.json").write_text(json.dumps({**former, "name": "former"}))
    loaded = {r["name"]: r for r in load_records(tmp_path)}
    assert loaded[current["name"]]["caveats"] == []
    old = loaded["former"]
    assert old["grid"]["budget"] == {"axis": WALL_CLOCK, "time_budget_s": 600}
    assert any("equal wall-clock" in c for c in old["caveats"])
    assert any("task revision 0" in c for c in old["caveats"])


def test_a_current_record_has_no_caveats(tmp_path):
    write_record(Record(name="new", env_id="marft/Relay-v0", env_kwargs={}, algorithm="mappo_action", model="m",
                        eval_after={"accuracy": 0.5}, task_revision=1,
                        grid={"grid": "g", "cell": "c", "seed": 0, "kind": "train", "wall_s": 1.0,
                              "budget": {"axis": "episodes", "episodes": 320, "eval_every_episodes": 64}}), tmp_path)
    record, = load_records(tmp_path)
    assert record["caveats"] == [] and record["grid"]["budget"]["episodes"] == 320


def test_the_transcript_sample_shows_the_first_round_and_says_how_many_rounds_the_episode_had():
    """A problem solved in its second round shows its wrong first answer beside ``solved`` 1 and
    ``rounds`` 2, so a reader can tell where the success came from."""
    from leaderboards.records import transcript_sample

    per_task = [{"task_index": 7, "solved": True, "rounds": 2, "transcript": [
        {"agent": "solver_0", "round": 0, "observation": "Compute 85 + 44.", "text": "85 + 44 = 220"},
        {"agent": "checker_0", "round": 0, "observation": "...", "text": "WRONG"},
        {"agent": "solver_0", "round": 1, "observation": "...", "text": "85 + 44 = 129"}]},
        {"task_index": 8, "solved": False, "rounds": 1, "transcript": []}]
    first, second = transcript_sample(per_task)
    assert first["solved"] == 1 and first["rounds"] == 2
    assert [d["text"] for d in first["decisions"]] == ["85 + 44 = 220", "WRONG"]  # round 0 only
    assert second == {"task_index": 8, "solved": 0, "rounds": 1, "decisions": []}


def test_stage_figures_survive_a_record_round_trip_and_old_records_have_none(tmp_path):
    """The per-stage rates of an evaluation (eval_after, each eval-curve point) and the per-problem
    stages of the final one are written and read back as they were; a record without them reads
    as before."""
    from marft_agents.evaluation.problem_set import score
    from marft_agents.evaluation.records import eval_outcomes, read_record, stage_figures

    stages = [{"reduce": True, "answer": False}, {"reduce": False, "answer": True}, {"reduce": True, "answer": True}]
    per_task = [{"task_index": 7 + i, "problem": f"p{i}", "solved": s["reduce"] and s["answer"], "reward": 0.0,
                 "stages": s} for i, s in enumerate(stages)]
    figures = score(per_task, [t["problem"] for t in per_task]).figures()
    assert figures["stage_pass"] == {"reduce": 2 / 3, "answer": 2 / 3} and figures["stage_n"] == {"reduce": 3, "answer": 3}
    curve_point = {"update": 4, "accuracy": figures["accuracy"], "stderr": figures["stderr"], **stage_figures(per_task)}
    assert {k: curve_point[k] for k in ("stage_pass", "stage_stderr", "stage_n")} == {
        k: figures[k] for k in ("stage_pass", "stage_stderr", "stage_n")}
    outcomes = eval_outcomes(per_task, 4)
    assert outcomes["stages_passed"] == {"reduce": [1, 0, 1], "answer": [0, 1, 1]}
    path = write_record(Record(name="staged", env_id="marft/Relay-v0", env_kwargs={"level": 4}, algorithm="none",
                               model="m", eval_after={**figures, "greedy": True}, eval_curve=[curve_point],
                               eval_outcomes=outcomes), tmp_path)
    back = read_record(path)
    assert back["eval_after"]["stage_pass"] == figures["stage_pass"]
    assert back["eval_after"]["stage_stderr"] == figures["stage_stderr"]
    assert back["eval_after"]["stage_n"] == figures["stage_n"]
    assert back["eval_curve"] == [curve_point] and back["eval_outcomes"] == outcomes
    # with k samples per problem: the plays that passed, per problem
    sampled = [{"task_index": 0, "problem": "p0", "solved": False, "reward": 0.0,
                "samples": [{"solved": False, "reward": 0.0, "stages": s} for s in stages[:2]]}]
    assert eval_outcomes(sampled, 1)["stages_passed"] == {"reduce": [1], "answer": [1]}
    # without stages: none of the keys, as records made before
    plain = [{k: v for k, v in t.items() if k != "stages"} for t in per_task]
    assert "stages_passed" not in eval_outcomes(plain, 4) and stage_figures(plain) == {}
    assert "stage_pass" not in score(plain, ["p0", "p1", "p2"]).figures()


def test_the_plan_line_counts_the_tested_contrasts_and_names_the_descriptive():
    plan = {"accepted": True, "contrasts": [{"answers": True}, {"answers": False},
                                            {"answers": False, "descriptive": True}]}
    line = _plan_line(plan, "g/README.md")[0]
    assert "[1 of 2](g/README.md) declared contrasts can answer at the declared seeds" in line
    assert line.endswith("(1 more declared descriptive, not tested).") and "[accepted](g/README.md)" in line
    # a plan made before descriptive contrasts existed: every contrast is tested
    assert _plan_line({"accepted": False, "contrasts": [{"answers": True}]}, "g")[0].endswith("seeds.")
    assert _plan_line({"contrasts": []}, "g") == []
