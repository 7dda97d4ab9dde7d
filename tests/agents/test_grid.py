"""``python -m baselines.grid``: a declared grid runs, skips finished runs, resumes interrupted ones."""

from __future__ import annotations

import json
import math
import re
import shutil
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

import marft_agents.model.loading as models
from agent_helpers import load_tiny_model, small_config, tiny, tiny_on_device  # noqa: F401 (fixture)
from baselines import grid as grid_mod
from baselines import grid_spec
from baselines.ablations import rotation, swap_agent_adapters
from marft_agents.config import config_to_dict

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def tiny_models(monkeypatch):
    monkeypatch.setattr(models, "load_model_and_tokenizer", load_tiny_model)


def _grid(tmp_path, cells, seeds=(0, 1), budget=None, **extra):
    """A grid file over the tiny test config (2 episodes per update); its budget is one update
    unless ``budget`` (grid keys: ``budget``, ``eval_every``, or the former ``time_budget_s``) says
    otherwise; its start gates pilot 4 episodes and pass whatever they find unless ``gate`` says otherwise."""
    cfg = small_config(tmp_path, **{"schedule.num_updates": 100, "eval.at_end": True})
    base = tmp_path / "base.yaml"
    base.write_text(yaml.safe_dump(config_to_dict(cfg)))
    spec = {"name": "tiny", "base": str(base), **(budget if budget is not None else {"budget": {"episodes": 2}}),
            "seeds": list(seeds),
            "cells": cells, "records": str(tmp_path / "board" / "records"), "output_root": str(tmp_path / "runs"),
            "gate": {"episodes": 4, "min_signal": 0},  # a short pilot that refuses nothing, unless a test says
            **extra}
    path = tmp_path / "tiny_grid.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def _records(tmp_path):
    folder = tmp_path / "board" / "records"
    return {p.stem: json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))}


SOLO_PROFILE = {"name": "tsolo", "roles": [{"name": "actor", "system_prompt": "Answer.", "graded": True}]}
"""A one-agent profile of the test env (cheaper per episode than its two-agent default)."""

CELLS = [{"name": "team", "overrides": {"algorithm": "mappo_action"}},
         {"name": "team_swapped", "evaluate": "swapped", "source": "team"}]


def test_grid_runs_every_cell_then_skips_them(tmp_path, tiny_models, capsys, monkeypatch):
    import baselines.grid

    monkeypatch.setattr(baselines.grid, "git_commit", lambda: "abc1234")
    path = _grid(tmp_path, CELLS + [{"name": "untrained", "evaluate": "untrained", "seeds": [0]}])
    assert grid_mod.main([str(path)]) == 0
    records = _records(tmp_path)
    assert sorted(records) == ["team_seed0", "team_seed1", "team_swapped_seed0", "team_swapped_seed1", "untrained_seed0"]
    team = records["team_seed0"]
    assert team["grid"] == {"grid": "tiny", "cell": "team", "seed": 0, "kind": "train", "wall_s": team["grid"]["wall_s"],
                            "budget": {"axis": "episodes", "episodes": 2, "eval_every_episodes": None}}
    assert team["commit"] == "abc1234" and team["budget"]["updates"] == 1 and team["budget"]["episodes"] == 2
    assert team["config"]["seed"] == 0 and records["team_seed1"]["config"]["seed"] == 1
    assert team["config"]["schedule"]["max_episodes"] == 2 and team["config"]["schedule"]["time_budget_s"] is None
    assert team["config"]["output_dir"] == str(tmp_path / "runs" / "team" / "seed0")
    swapped = records["team_swapped_seed1"]
    assert swapped["grid"]["source"] == "team" and swapped["grid"]["assignment"] == {
        "reasoner_0": "actor_0", "actor_0": "reasoner_0"}
    assert swapped["grid"]["unswapped_accuracy"] == records["team_seed1"]["eval_after"]["accuracy"]
    assert records["untrained_seed0"]["algorithm"] == "eval_only"
    report = (tmp_path / "board" / "README.md").read_text()
    assert "| team | train | mappo_action |" in report and "| team_swapped | swapped (team) |" in report
    assert (tmp_path / "board" / "curves.png").read_bytes()[:4] == b"\x89PNG"
    assert (tmp_path / "runs" / "team_swapped" / "seed0").exists() is False  # evaluated inside the source's folder
    assert (tmp_path / "runs" / "team" / "seed0" / "swapped_transcripts.jsonl").is_file()

    stamps = {name: (tmp_path / "board" / "records" / f"{name}.json").stat().st_mtime_ns for name in records}
    capsys.readouterr()
    assert grid_mod.main([str(path)]) == 0
    out = capsys.readouterr().out
    assert "ran 0, skipped 5" in out
    assert stamps == {name: (tmp_path / "board" / "records" / f"{name}.json").stat().st_mtime_ns for name in records}

    # Another budget: the trained runs' records are stale, their folders hold checkpoints of the
    # old budget (resuming would mix the two), the untrained evaluation still stands.
    spec = yaml.safe_load(path.read_text())
    path.write_text(yaml.safe_dump({**spec, "budget": {"episodes": 4}}))
    assert grid_mod.main([str(path), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "conflict team_seed0" in out and "blocked  team_swapped_seed0" in out and "done     untrained_seed0" in out
    shutil.rmtree(tmp_path / "runs" / "team" / "seed1")
    assert grid_mod.main([str(path), "--dry-run"]) == 0
    assert "stale    team_seed1" in capsys.readouterr().out


def test_interrupted_cell_resumes_from_its_checkpoint(tmp_path, tiny_models, monkeypatch, capsys):
    from marft_agents.run.trainer import Trainer

    cell = {"name": "team", "overrides": {"schedule.checkpoint_interval": 2}}
    path = _grid(tmp_path, [cell], seeds=[0], budget={"budget": {"episodes": 8}})
    original_run = Trainer.run

    def killed_after_update_3(self):
        for metrics in original_run(self):
            yield metrics
            if self.counters["update"] == 3:
                raise KeyboardInterrupt  # the machine goes down; the last checkpoint is update 2

    monkeypatch.setattr(Trainer, "run", killed_after_update_3)
    with pytest.raises(KeyboardInterrupt):
        grid_mod.main([str(path)])
    assert _records(tmp_path) == {}
    attempts = tmp_path / "runs" / "team" / "seed0" / grid_mod.ATTEMPTS_FILE
    assert json.loads(attempts.read_text())["machine_s"] > 0  # the killed attempt's machine time is kept
    attempts.write_text(json.dumps({"machine_s": 1000.0}))  # say it took 1000 s: the resumed run must add it
    capsys.readouterr()
    assert grid_mod.main([str(path), "--dry-run"]) == 0
    assert "partial  team_seed0" in capsys.readouterr().out

    monkeypatch.setattr(Trainer, "run", original_run)
    started = time.perf_counter()
    assert grid_mod.main([str(path)]) == 0
    elapsed = time.perf_counter() - started
    assert "resume team_seed0" in capsys.readouterr().out
    record = _records(tmp_path)["team_seed0"]
    assert record["budget"]["updates"] == 4
    rows = [json.loads(line) for line in (tmp_path / "runs" / "team" / "seed0" / "metrics.jsonl").open()]
    # update 3 ran again after the checkpoint; resume dropped the rows logged after it
    assert [r["step"] for r in rows] == [0, 1, 2, 3, 4]
    # the record counts each update once: the re-run update 3, not both
    last = {r["step"]: r for r in rows}
    assert record["budget"]["wall_clock_s"] == round(sum(
        r.get("time/rollout_s", 0) + r.get("time/update_s", 0) for r in last.values()), 1)
    assert [p["update"] for p in record["eval_curve"]] == [0, 4]
    # its machine time is both attempts': the first's 1000 s and the second's
    assert 1000.0 < record["grid"]["wall_s"] <= 1000.0 + elapsed
    assert 1000.0 < json.loads(attempts.read_text())["machine_s"] <= record["grid"]["wall_s"]


def test_a_damaged_attempts_file_is_ignored_with_one_line(tmp_path, capsys):
    path = _grid(tmp_path, [{"name": "team", "overrides": {}}], seeds=[0])
    (run,) = grid_mod.plan(grid_mod.load_grid(path))
    folder = Path(run.overrides["output_dir"])
    folder.mkdir(parents=True)
    (folder / grid_mod.ATTEMPTS_FILE).write_text("{not json")
    assert grid_mod.earlier_attempts_s(run) == 0.0
    assert f"{folder / grid_mod.ATTEMPTS_FILE} is unreadable" in capsys.readouterr().err


def test_a_signal_stops_the_grid_with_a_checkpoint_and_a_resume_hint(tmp_path, tiny_models, monkeypatch, capsys):
    """SIGTERM (a scheduler, ``timeout``) during a run: the trainer checkpoints after its update and
    the grid ends with 143 and one line saying how to resume, not a traceback calling it a failure."""
    import os
    import signal

    from marft_agents.run.trainer import Trainer

    path = _grid(tmp_path, [{"name": "team", "overrides": {}}], seeds=[0], budget={"budget": {"episodes": 8}})
    original_run = Trainer.run

    def terminated_during_update_2(self):
        for metrics in original_run(self):
            if self.counters["update"] == 1:
                os.kill(os.getpid(), signal.SIGTERM)
            yield metrics

    monkeypatch.setattr(Trainer, "run", terminated_during_update_2)
    assert grid_mod.main([str(path)]) == 128 + signal.SIGTERM
    err = capsys.readouterr().err
    assert re.search(r"grid: team_seed0 stopped by SIGTERM after saving a checkpoint in \S+; the same command resumes it",
                     err), err
    assert "Traceback" not in err and _records(tmp_path) == {}
    monkeypatch.setattr(Trainer, "run", original_run)
    assert grid_mod.main([str(path)]) == 0
    assert "resume team_seed0" in capsys.readouterr().out
    assert _records(tmp_path)["team_seed0"]["budget"]["updates"] == 4


def test_dry_run_lists_runs_and_cells_and_shards_select(tmp_path, capsys):
    path = _grid(tmp_path, CELLS + [{"name": "shared", "overrides": {"shared_adapter": True}}])
    assert grid_mod.main([str(path), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "6 runs (4 training runs of 2 episodes each = 8 episodes" in out
    assert "todo     team_seed0" in out and "blocked  team_swapped_seed0" in out and '"shared_adapter": true' in out
    assert grid_mod.main([str(path), "--dry-run", "--cells", "shared"]) == 0
    assert "team_seed0" not in capsys.readouterr().out
    assert grid_mod.main([str(path), "--dry-run", "--cells", "team,shared", "--seeds", "1"]) == 0
    out = capsys.readouterr().out
    assert "2 runs (2 training runs" in out and "team_seed1" in out and "shared_seed1" in out
    assert "seed0" not in out
    assert grid_mod.main([str(path), "--dry-run", "--seeds", "one"]) == 2
    assert "--seeds expects comma-separated integers" in capsys.readouterr().err
    spec = grid_mod.load_grid(path)
    runs = grid_mod.plan(spec)
    shards = [grid_mod.shard(runs, i, 2) for i in range(2)]
    assert sorted(r.name for s in shards for r in s) == sorted(r.name for r in runs)
    for part in shards:
        names = {r.name for r in part}
        assert all(r.source.name in names for r in part if r.kind == "swapped")
        assert sum(r.kind == "train" for r in part) == 2
    # the swapped cell alone (its source done already): its runs are dealt over the shards
    swapped_only = [r for r in runs if r.kind == "swapped"]
    parts = [grid_mod.shard(swapped_only, i, 2) for i in range(2)]
    assert sorted(r.name for p in parts for r in p) == sorted(r.name for r in swapped_only)
    assert all(len(p) == 1 for p in parts)
    assert grid_mod.main([str(path), "--cells", "nope"]) == 2
    assert "unknown cells ['nope']" in capsys.readouterr().err
    assert grid_mod.main([str(path), "--shard", "2/2"]) == 2


@pytest.mark.parametrize("cells, message", [
    ([{"name": "a", "overrides": {"schedule.nope": 1}}], "cell 'a'.*schedule.nope"),
    ([{"name": "a"}, {"name": "a"}], "unique"),
    ([{"name": "s", "evaluate": "swapped", "source": "missing"}], "source"),
    ([{"name": "a", "evaluate": "later"}], "evaluate must be one of"),
])
def test_bad_grid_files_are_refused_with_the_reason(tmp_path, capsys, cells, message):
    path = _grid(tmp_path, cells)
    assert grid_mod.main([str(path), "--dry-run"]) == 2
    assert re.search(message, capsys.readouterr().err)


def test_comparisons_must_name_cells_of_the_grid(tmp_path, capsys):
    cells = [{"name": "team"}, {"name": "solo", "overrides": {"env.kwargs.profile": SOLO_PROFILE}}]
    good = _grid(tmp_path, cells, comparisons=[{"question": "q", "a": "team", "b": "solo"}])
    assert grid_mod.load_grid(good).comparisons[0].a == "team"
    bad = _grid(tmp_path, cells, comparisons=[{"a": "tema", "b": "solo"}])
    assert grid_mod.main([str(bad), "--dry-run"]) == 2
    assert re.search(r"comparisons\[0\].*unknown \['tema'\]", capsys.readouterr().err)


@pytest.mark.parametrize("grid_file", sorted((REPO / "baselines" / "grids").glob("*.yaml")), ids=lambda p: p.stem)
def test_shipped_grids_plan_and_fit_their_stated_budget(grid_file, monkeypatch):
    monkeypatch.chdir(REPO)
    spec = grid_mod.load_grid(grid_file)
    runs = grid_mod.plan(spec)  # also refuses two cells that make the same run
    kinds = {r.cell.name: r.kind for r in runs}
    team_question = any(c.b.startswith("solo") for c in spec.comparisons)  # a team against a single agent
    if not spec.comparisons:  # a stage other grids start from (init_adapters into its run folders)
        starts = [str(c.overrides.get("init_adapters", "")) for f in (REPO / "baselines" / "grids").glob("*.yaml")
                  for c in grid_mod.load_grid(f).cells]
        assert any(s.startswith(f"runs/grids/{spec.name}/") for s in starts), "a grid without comparisons is a start"
    elif not team_question:  # a comparison of learner settings: paired contrasts that can pass the exact test
        from leaderboards import stats

        assert spec.meaningful_effect and all(c.paired and c.margin for c in spec.comparisons)
        floors = [stats.exact_p_floor("paired", sum(r.cell.name == c.a for r in runs), 0) for c in spec.comparisons]
        assert max(stats.holm_floors(floors)) < 0.05
    else:
        assert "untrained" in kinds.values()
    if not team_question:
        pass
    elif spec.demo:  # a protocol demonstration: it says so, and every comparison is declared in it
        assert grid_mod.DEMO_MARK in grid_mod.spec_title(spec) and spec.comparisons
    elif spec.spread_from:  # a follow-up: planned from an earlier grid's cells, its contrasts can pass the exact test
        from baselines.grid_plan import load_prior
        from leaderboards import stats

        assert load_prior(spec, runs).cells and spec.comparisons and spec.meaningful_effect
        seeds = {c: sum(r.cell.name == c for r in runs) for c in kinds}
        floors = [stats.exact_p_floor("paired" if c.paired else "independent", seeds[c.a], seeds[c.b])
                  for c in spec.comparisons]
        assert max(stats.holm_floors(floors)) < 0.05
    elif any(c.start for c in spec.cells):  # a curriculum: its paired contrasts can pass the exact test
        from leaderboards import stats

        assert "swapped" in kinds.values() and spec.comparisons and spec.meaningful_effect
        floors = [stats.exact_p_floor("paired", sum(r.cell.name == c.a for r in runs), 0) for c in spec.comparisons]
        assert all(c.paired for c in spec.comparisons) and max(stats.holm_floors(floors)) < 0.05
    else:  # a comparison grid: its main cells at three seeds or more
        assert "swapped" in kinds.values()
        for cell in ("marft_a", "marft_a_shared", "marft_t", "marft_t_shared"):
            assert sum(r.cell.name == cell for r in runs) >= 3, cell
    training = [r for r in runs if r.kind == "train"]
    # the sample axis, with evaluations every cell reaches at the same episode counts
    assert spec.budget.axis == "episodes" and spec.eval_every and spec.time_budget_s is None
    budgets = [grid_mod.cell_budget(spec, r.cell).episodes for r in training]
    for run, budget in zip(training, budgets):
        cfg = grid_mod.run_config(spec, run)
        assert cfg.schedule.max_episodes == budget and cfg.schedule.time_budget_s is None
        assert cfg.eval.interval * cfg.schedule.episodes_per_update == spec.eval_every.episodes
    # the grid's comment states the training budget; keep it true
    text = grid_file.read_text()
    stated = re.search(r"training budget: (\d+) runs x (\d+) episodes = (\d+) episodes", text)
    if stated:
        terms = [(int(stated.group(1)), int(stated.group(2)))]
    else:  # cells of their own budgets: "training budget: N1 x E1 + N2 x E2 ... episodes = T episodes"
        stated = re.search(r"training budget: (\d+ x \d+(?: \+ \d+ x \d+)*) episodes = (\d+) episodes", text)
        assert stated, "the grid file must state its budget as 'training budget: N runs x E episodes = T episodes'"
        terms = [tuple(map(int, term.split(" x "))) for term in stated.group(1).split(" + ")]
    assert sorted(terms) == sorted((budgets.count(e), e) for e in set(budgets))
    assert int(stated.group(stated.lastindex)) == sum(budgets)


def test_swap_agent_adapters_exchanges_only_policy_adapters(tiny):
    from marft_agents.model.policy import MultiAgentPolicy

    model, tokenizer = tiny
    policy = MultiAgentPolicy(model, tokenizer, ["reasoner_0", "actor_0"])
    state = policy.adapter_state_dict()
    for key in state:  # make each adapter recognisable
        state[key] = state[key].clone().fill_(1.0 if "policy_reasoner_0" in key else 2.0 if "policy_actor_0" in key else 3.0)
    assignment = rotation(policy.agent_ids)
    swapped = swap_agent_adapters(state, policy, assignment)
    assert set(swapped) == set(state)
    for key, value in swapped.items():
        expected = 2.0 if "policy_reasoner_0" in key else 1.0 if "policy_actor_0" in key else 3.0
        assert bool((value == expected).all()), key
    policy.load_adapter_state_dict(swapped)
    assert swap_agent_adapters(swapped, policy, assignment).keys() == state.keys()
    other, other_tokenizer = tiny_on_device(seed=0, hidden_size=32, num_layers=1)
    shared = MultiAgentPolicy(other, other_tokenizer, ["reasoner_0", "actor_0"], shared_adapter=True, critic=None)
    with pytest.raises(ValueError, match="shared_adapter: false"):
        swap_agent_adapters(shared.adapter_state_dict(), shared, assignment)
    with pytest.raises(ValueError, match="two or more agents"):
        rotation(["actor_0"])
    with pytest.raises(ValueError, match="distinct agent"):
        swap_agent_adapters(state, policy, {"reasoner_0": "actor_0", "actor_0": "actor_0"})


@pytest.mark.parametrize("env_id, profile", [("marft/Relay-v0", "relay"), ("marft/SolveCheck-v0", "solver_checker"),
                                             ("marft/Relay-v0", "relay_anonymous")])
def test_cooperative_envs_train_and_evaluate_with_a_tiny_model(tmp_path, tiny, env_id, profile):
    from marft_agents.run.trainer import train

    cfg = small_config(tmp_path, **{"env.id": env_id, "env.kwargs": {"profile": profile, "horizon": 2},
                                    "schedule.num_updates": 1, "eval.at_end": True, "eval.env_kwargs": {"split": "test"}})
    result = train(cfg, model_and_tokenizer=tiny)
    assert result.counters["update"] == 1 and result.final_eval.n == 2
    transcript = result.final_eval.per_task[0]["transcript"]
    assert [t["agent"] for t in transcript[:2]] == list(result.policy.agent_ids)
    # the transcript keeps what each agent was shown: in Relay a partial view, not the whole problem
    problem = result.final_eval.per_task[0]["problem"]
    assert problem and all(t["observation"] for t in transcript)
    if env_id == "marft/Relay-v0":
        assert all(t["observation"] != problem for t in transcript)


def test_cells_of_different_costs_are_evaluated_at_the_same_episodes_and_stop_at_the_budget(tmp_path, tiny_models):
    """A two-agent team (2 episodes per update), a single agent (cheaper per episode) and a team
    with 4 episodes per update: each is evaluated at episodes 0, 4, 8 and plays exactly 8."""
    from leaderboards.records import load_records

    cells = [{"name": "team", "overrides": {}},
             {"name": "solo", "overrides": {"env.kwargs.profile": SOLO_PROFILE}},
             {"name": "team_big", "overrides": {"schedule.episodes_per_update": 4}}]
    path = _grid(tmp_path, cells, seeds=[0], budget={"budget": {"episodes": 8}, "eval_every": {"episodes": 4}})
    assert grid_mod.main([str(path)]) == 0
    records = _records(tmp_path)
    for name, updates in (("team_seed0", 4), ("solo_seed0", 4), ("team_big_seed0", 2)):
        record = records[name]
        assert [p["episodes"] for p in record["eval_curve"]] == [0, 4, 8], name
        assert record["budget"]["episodes"] == 8 and record["budget"]["updates"] == updates, name
        assert record["diagnostics"]["episodes"][-1] == 8 and len(record["diagnostics"]["update"]) == updates
        assert record["grid"]["budget"] == {"axis": "episodes", "episodes": 8, "eval_every_episodes": 4}
        assert record["eval_outcomes"]["update"] == updates
        assert [t["episodes"] for t in record["transcripts"]] == [0, 4, 8]
    assert all(r["caveats"] == [] for r in load_records(tmp_path / "board" / "records"))
    # the single agent writes fewer tokens for its 8 episodes: the budget is samples, not tokens
    assert records["solo_seed0"]["budget"]["tokens"] < records["team_seed0"]["budget"]["tokens"]


def test_a_sampled_token_budget_stops_after_the_update_that_reaches_it(tmp_path):
    from agent_helpers import tiny_on_device
    from marft_agents.run.trainer import train

    cfg = small_config(tmp_path, **{"schedule.num_updates": 100, "schedule.max_sampled_tokens": 20,
                                    "schedule.checkpoint_interval": 0})
    result = train(cfg, model_and_tokenizer=tiny_on_device(seed=0, hidden_size=32, num_layers=1))
    per_update = [h["rollout/tokens"] for h in result.history]
    assert sum(per_update[:-1]) < 20 <= sum(per_update) == result.counters["tokens"]
    again = train(cfg, resume=True, model_and_tokenizer=tiny_on_device(seed=0, hidden_size=32, num_layers=1))
    assert again.history == [] and again.counters["tokens"] == result.counters["tokens"]


@pytest.mark.parametrize("budget, cells, message", [
    ({"budget": {"episodes": 8}, "eval_every": {"episodes": 3}}, [{"name": "a"}], r"eval_every.episodes \(3\) must divide"),
    ({"budget": {"episodes": 8}, "eval_every": {"episodes": 4}},
     [{"name": "a", "overrides": {"schedule.episodes_per_update": 8}}], r"cell 'a': eval_every.episodes \(4\) is not a whole"),
    ({"budget": {"episodes": 6}}, [{"name": "a", "overrides": {"schedule.episodes_per_update": 4}}],
     r"max_episodes \(6\) must be a multiple"),
    ({"budget": {"episodes": 8}}, [{"name": "a", "overrides": {"eval.interval": 16}}], r"cell 'a' overrides eval.interval"),
    ({"budget": {"episodes": 8}}, [{"name": "a", "overrides": {"schedule": {"num_updates": 3}}}],
     r"cell 'a' overrides schedule,"),
    ({"budget": {"episodes": 8, "sampled_tokens": 9}}, [{"name": "a"}], r"exactly one budget axis"),
    ({"budget": {"episodes": 8}, "time_budget_s": 600}, [{"name": "a"}], r"give one budget in samples"),
    ({}, [{"name": "a"}], r"give one budget in samples"),
    ({"budget": {"episodes": 8}}, [{"name": "a", "overrides": {"shared_adapter": True}},
                                   {"name": "b", "overrides": {"shared_adapter": True}}],
     r"cells 'a' and 'b' would make the same run for seed 0"),
    # an override equal to the base's value resolves to the same run too
    ({"budget": {"episodes": 8}}, [{"name": "a"}, {"name": "b", "overrides": {"algorithm": "mappo_action"}}],
     r"cells 'a' and 'b' would make the same run"),
])
def test_budgets_and_duplicate_runs_are_refused_with_one_line(tmp_path, capsys, budget, cells, message):
    path = _grid(tmp_path, cells, seeds=[0], budget=budget)
    assert grid_mod.main([str(path), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert re.search(message, err) and err.count("\n") == 1, err


def test_a_wall_clock_grid_of_before_reports_but_does_not_run(tmp_path, capsys):
    """Old grid files (time_budget_s) still load for the report; their records say the axis."""
    from leaderboards.records import Record, load_records, write_record

    path = _grid(tmp_path, [{"name": "team"}], seeds=[0], budget={"time_budget_s": 600})
    config = config_to_dict(small_config(tmp_path, **{"schedule.time_budget_s": 600}))
    write_record(Record(name="team_seed0", env_id="marft/Relay-v0", env_kwargs={}, algorithm="mappo_action",
                        model="m", eval_after={"accuracy": 0.1, "stderr": 0.03, "n": 100}, config=config,
                        eval_curve=[{"update": 0, "accuracy": 0.1, "stderr": 0.03, "train_seconds": 0.0}],
                        grid={"grid": "tiny", "cell": "team", "seed": 0, "kind": "train", "wall_s": 650.0}),
                 tmp_path / "board" / "records")
    assert grid_mod.main([str(path), "--report-only"]) == 0
    assert grid_mod.main([str(path), "--dry-run"]) == 0
    assert "600 s training time each: the former wall-clock axis, records only" in capsys.readouterr().out
    assert grid_mod.main([str(path)]) == 2
    assert "budgets its cells by wall-clock" in capsys.readouterr().err
    record, = load_records(tmp_path / "board" / "records")
    assert record["grid"]["budget"] == {"axis": "wall_clock", "time_budget_s": 600}
    assert any("equal wall-clock" in c for c in record["caveats"])
    assert any("task revision 0" in c for c in record["caveats"])  # made before the Relay split was fixed


DEMO_GRIDS = [p for p in sorted((REPO / "baselines" / "grids").glob("*.yaml")) if yaml.safe_load(p.read_text()).get("demo")]


def test_a_demo_grid_ships():
    assert DEMO_GRIDS, "baselines/grids/ should hold a protocol demonstration (demo: true)"


@pytest.mark.parametrize("grid_file", DEMO_GRIDS, ids=lambda p: p.stem)
def test_a_demo_grid_exercises_every_part_of_the_protocol(grid_file, monkeypatch):
    """A demonstration grid has a cell for every column of the report: an untrained team and
    single agent, seeded training cells (take-off, AUC, paired tests), a sampled evaluation (avg@k,
    pass@k), a base-model seat for every agent of its source and a fixed message (per-agent
    contribution), the two-call solo, and comparisons declared paired and with a margin."""
    from marft_envs.core.roles import load_profile

    monkeypatch.chdir(REPO)
    spec = grid_mod.load_grid(grid_file)
    runs = grid_mod.plan(spec)
    configs = {r.name: grid_mod.run_config(spec, r) for r in runs}
    seeds = {c.name: sorted(r.seed for r in runs if r.cell.name == c.name) for c in spec.cells}
    training = [c for c in spec.cells if c.evaluate is None]
    assert all(len(seeds[c.name]) >= 2 for c in training)
    untrained = [configs[r.name] for r in runs if r.kind == "untrained"]
    assert {len(grid_mod.env_agents(cfg)) > 1 for cfg in untrained} == {True, False}  # a team and a single agent
    sampled = [configs[r.name] for r in runs if r.kind == "final"]
    assert sampled and all(not c.eval.greedy and c.eval.samples_per_problem > 1 for c in sampled)
    for source in {c.source for c in spec.cells if c.evaluate == "base_seat"}:
        agents = grid_mod.env_agents(configs[f"{source}_seed{seeds[source][0]}"])
        seated = {c.ablation["seat"] for c in spec.cells if c.evaluate == "base_seat" and c.source == source}
        assert seated == set(agents), f"a base_seat cell for every agent of {source}"
    assert any(c.evaluate == "base_seat" for c in spec.cells) and any(c.evaluate == "fixed_message" for c in spec.cells)
    two_calls = [r for r in runs if r.kind == "train" and configs[r.name].shared_adapter
                 and load_profile(configs[r.name].env.kwargs["profile"]).solo]
    assert two_calls, "the two-call solo: a solo profile of several calls with one shared adapter"
    paired = [c for c in spec.comparisons if c.paired]
    assert paired and all(seeds[c.a] == seeds[c.b] for c in paired)
    assert any(c.margin is not None for c in spec.comparisons)


# -- the plan: start gates, contrasts, machine time ---------------------------------------------------
def _fake_pilot(rewarded, calls):
    """A gate pilot that finds ``rewarded[cell]`` rewarded episodes (0 when absent), recording each call."""
    def pilot(spec, run, episodes):
        calls.append(run.cell.name)
        return {"source": "pilot", "episodes": episodes, "rewarded": rewarded.get(run.cell.name, 0),
                "mean_reward": 0.0, "seconds": 2.0}
    return pilot


def test_a_cell_at_the_floor_fails_its_gate_and_the_grid_refuses_unless_forced(tmp_path, tiny_models, monkeypatch,
                                                                                 capsys):
    from baselines import grid_plan

    cells = [{"name": "team", "overrides": {}}, {"name": "shared", "overrides": {"shared_adapter": True}},
             {"name": "solo", "overrides": {"env.kwargs.profile": SOLO_PROFILE}}]
    path = _grid(tmp_path, cells, seeds=[0], gate={"episodes": 128, "min_signal": 0.25})
    calls = []
    monkeypatch.setattr(grid_plan, "pilot", _fake_pilot({"solo": 64}, calls))
    assert grid_mod.main([str(path)]) == grid_mod.REFUSED
    captured = capsys.readouterr()
    # team and shared start alike (fresh adapters): one pilot for both; 2 episodes per update
    assert calls == ["team", "solo"]
    for cell in ("team", "shared"):
        # 0 of 128: the rate's exact 90 % interval is [0, 0.0231], so P(update rewarded) <= 1 - 0.9769^2 = 0.046
        assert (f"- cell {cell}: its starting policy earned the reward in 0 of 128 sampled episodes (0.00 %, from "
                "pilot): an update of 2 episodes holds a rewarded one with probability 0.00 [0.00, 0.05] < 0.25"
                ) in captured.out
    assert "cell solo" not in captured.out.split("Start gates")[0]  # 1 - (1 - 0.5)^2 = 0.75: it passes
    assert "| solo | pilot | 64 / 128 | 50.00 | 2 | 0.75 [0.67, 0.82] | pass |" in captured.out
    assert "the plan refuses this grid" in captured.err and _records(tmp_path) == {}
    gate = json.loads((tmp_path / "board" / "gates" / "shared.json").read_text())
    assert gate["rewarded"] == 0 and gate["episodes"] == 128 and gate["code"]
    # --plan alone: the gate records are reused (same start, same code), nothing runs
    assert grid_mod.main([str(path), "--plan"]) == grid_mod.REFUSED
    assert calls == ["team", "solo"] and _records(tmp_path) == {}
    starts = {g["cell"]: g["start"] for g in json.loads((tmp_path / "board" / "plan.json").read_text())["gates"]}
    assert starts["team"] == starts["shared"] != starts["solo"]  # which pilot each gate is (machine time counts it once)
    # a changed start (other sampling) is piloted anew
    spec = yaml.safe_load(path.read_text())
    spec["cells"][2]["overrides"]["sampling.temperature"] = 0.9
    path.write_text(yaml.safe_dump(spec))
    assert grid_mod.main([str(path), "--plan"]) == grid_mod.REFUSED
    assert calls == ["team", "solo", "solo"]
    capsys.readouterr()
    assert grid_mod.main([str(path), "--force"]) == 0
    assert sorted(_records(tmp_path)) == ["shared_seed0", "solo_seed0", "team_seed0"]
    report = (tmp_path / "board" / "README.md").read_text()
    assert "## Plan" in report and "**refused** (started anyway with --force)" in report
    summary = json.loads((tmp_path / "board" / "summary.json").read_text())
    assert summary["plan"]["forced"] and not summary["plan"]["accepted"]


def test_a_pilot_shared_by_cells_counts_once_in_the_machine_time():
    from baselines import grid_plan

    gates = [{"cell": "team", "source": "pilot", "episodes": 128, "seconds": 90.0, "start": "a1"},
             {"cell": "shared", "source": "pilot", "episodes": 128, "seconds": 90.0, "start": "a1"},  # team's pilot
             {"cell": "solo", "source": "pilot", "episodes": 128, "seconds": 30.0, "start": "b2"},
             {"cell": "pooled", "source": "records", "episodes": 128, "seconds": None, "start": "c3"}]
    assert grid_plan.machine_time(None, [], gates)["line"].endswith("the gate pilots took 2.0 min.")


def test_a_gate_whose_interval_straddles_the_threshold_is_inconclusive_and_names_a_pilot_that_can_decide(
        tmp_path, tiny_models, monkeypatch, capsys):
    from baselines import grid_plan

    path = _grid(tmp_path, [{"name": "team", "overrides": {}}], seeds=[0], gate={"episodes": 128, "min_signal": 0.25})
    # 20 of 128: P(update of 2 rewarded) = 1 - (108/128)^2 = 0.29 at the point, but the rate's exact
    # 90 % interval [0.1062, 0.2207] gives [0.20, 0.39] around 0.25: neither pass nor fail
    monkeypatch.setattr(grid_plan, "pilot", _fake_pilot({"team": 20}, []))
    assert grid_mod.main([str(path), "--plan"]) == grid_mod.REFUSED
    out = capsys.readouterr().out
    # at 15.6 % the interval clears 1 - 0.75^(1/2) = 13.4 % only from 1,024 episodes on (512: [0.130, 0.185])
    assert ("holds a rewarded one with probability 0.29 [0.20, 0.39], which straddles 0.25: inconclusive at this "
            "pilot's size; pilot more (--gate-episodes 1024 would decide at this rate)") in out
    assert "| team | pilot | 20 / 128 | 15.62 | 2 | 0.29 [0.20, 0.39] | inconclusive |" in out
    plan = json.loads((tmp_path / "board" / "plan.json").read_text())
    assert plan["gates"][0]["verdict"] == "inconclusive" and not plan["gates"][0]["passed"]


def test_an_inconclusive_gate_pilots_the_deciding_size_up_to_max_episodes_then_judges_that_pilot(
        tmp_path, tiny_models, monkeypatch, capsys):
    from baselines import grid_plan

    calls = []

    def pilot(spec, run, episodes):  # a start whose rate is 15.625 % whatever the pilot's size
        calls.append(episodes)
        return {"source": "pilot", "episodes": episodes, "rewarded": episodes * 20 // 128, "mean_reward": 0.0,
                "seconds": 2.0}

    monkeypatch.setattr(grid_plan, "pilot", pilot)
    # 20 / 128 is inconclusive and 1,024 episodes decide (the test above): under a maximum of 512
    # the grid pilots 512 (80 rewarded: [0.24, 0.34] still straddles 0.25) and refuses
    path = _grid(tmp_path, [{"name": "team", "overrides": {}}], seeds=[0],
                 gate={"episodes": 128, "min_signal": 0.25, "max_episodes": 512})
    assert grid_mod.main([str(path), "--plan"]) == grid_mod.REFUSED
    assert calls == [128, 512]
    out = capsys.readouterr().out
    assert "| team | pilot | 80 / 512 | 15.62 | 2 |" in out and "inconclusive |" in out
    # under 4,096 it pilots the deciding 1,024 (160 rewarded), which passes; kept, and reused
    spec = yaml.safe_load(path.read_text())
    spec["gate"]["max_episodes"] = 4096
    path.write_text(yaml.safe_dump(spec))
    assert grid_mod.main([str(path), "--plan"]) == 0
    assert calls == [128, 512, 1024]
    assert "| team | pilot | 160 / 1024 | 15.62 | 2 |" in capsys.readouterr().out
    assert json.loads((tmp_path / "board" / "gates" / "team.json").read_text())["episodes"] == 1024
    assert grid_mod.main([str(path), "--plan"]) == 0 and calls == [128, 512, 1024]
    # without a maximum the first pilot is judged alone
    spec["gate"].pop("max_episodes")
    spec["cells"][0]["overrides"] = {"sampling.temperature": 0.9}  # another start: piloted anew
    path.write_text(yaml.safe_dump(spec))
    assert grid_mod.main([str(path), "--plan"]) == grid_mod.REFUSED and calls[3:] == [128]
    with pytest.raises(ValueError, match="gate.max_episodes must be >= gate.episodes"):
        grid_spec.GateSpec(episodes=128, max_episodes=64)


def test_the_deciding_pilot_size_and_a_rate_at_the_threshold():
    from baselines.grid_plan import MAX_GATE_EPISODES, deciding_pilot
    from leaderboards.stats import binomial_interval

    # 3 / 128 at 32 episodes per update: 6 / 256 gives a rate interval whose lower end clears
    # 1 - 0.75^(1/32) = 0.895 %, so P(update rewarded) >= 0.25 over all of it
    assert binomial_interval(6, 256)[0] > 1 - 0.75 ** (1 / 32) > binomial_interval(3, 128)[0]
    assert deciding_pilot(3 / 128, 32, 0.25, 128) == 256
    # a rate on the threshold itself is never decided: the hint says to change the start
    assert deciding_pilot(1 - 0.75 ** (1 / 32), 32, 0.25, 128) is None and MAX_GATE_EPISODES == 65536


def _contrast_grid(tmp_path, comparisons, meaningful=None, descriptive=(), short=None, before=None, margin=None,
                   **spec_keys):
    """Two training cells of 5 seeds, with records: a at 45-60 %, b at 15-30 %; the pilot passes.
    ``descriptive``: comparisons (appended after the others) declared descriptive; ``short``: a third
    training cell ``c`` of the first three seeds, at these accuracies; ``before``: every record's
    accuracy before training; ``margin``: the declared comparisons' margin; ``spec_keys``: grid keys."""
    from leaderboards.records import Record, write_record

    cells = [{"name": "a", "overrides": {}}, {"name": "b", "overrides": {"shared_adapter": True}}]
    values = [("a", [0.5, 0.55, 0.6, 0.45, 0.5]), ("b", [0.2, 0.25, 0.3, 0.15, 0.2])]
    if short is not None:
        cells.append({"name": "c", "seeds": [0, 1, 2], "overrides": {"shared_adapter": True, "lora.r": 2}})
        values.append(("c", short))
    extra = {"meaningful_effect": meaningful} if meaningful is not None else {}
    extra.update(spec_keys)
    declared = [{"a": "a", "b": "b", "question": f"q{k}", **({"margin": margin} if margin is not None else {})}
                for k in range(comparisons)]
    declared += [{**c, "descriptive": True} for c in descriptive]
    path = _grid(tmp_path, cells, seeds=range(5), comparisons=declared, **extra)
    for cell, accuracies in values:
        for seed, accuracy in enumerate(accuracies):
            write_record(Record(name=f"{cell}_seed{seed}", env_id="e", env_kwargs={}, algorithm="mappo_action",
                                model="m", eval_after={"accuracy": accuracy, "stderr": 0.05, "n": 100},
                                eval_before=None if before is None else {"accuracy": before, "n": 100},
                                budget={"episodes": 2}, grid={"grid": "tiny", "cell": cell, "seed": seed,
                                                              "kind": "train", "wall_s": 100.0 + seed}),
                         tmp_path / "board" / "records")
    return path


def test_the_plan_sizes_each_contrast_by_hand_and_refuses_an_over_large_family(tmp_path, monkeypatch, capsys):
    from baselines import grid_plan

    scipy_stats = pytest.importorskip("scipy.stats")
    monkeypatch.setattr(grid_plan, "pilot", _fake_pilot({"a": 4, "b": 4}, []))
    path = _contrast_grid(tmp_path, 6, meaningful=20)
    assert grid_mod.main([str(path), "--plan"]) == 0
    plan = json.loads((tmp_path / "board" / grid_plan.PLAN_FILE).read_text())
    assert plan["accepted"] and plan["refusals"] == []
    # Welch, both sds 0.0570 (the records), 5 + 5 seeds: df 8; Holm over 6 at 0.05, power 0.8
    sd = float(np.std([0.5, 0.55, 0.6, 0.45, 0.5], ddof=1))
    se = sd * math.sqrt(2 / 5)
    entry = plan["contrasts"][0]
    assert entry["design"] == "independent" and entry["basis"] == "records" and entry["sd"] == [round(sd, 4)] * 2
    assert entry["mde"] == pytest.approx((scipy_stats.t.ppf(1 - 0.05 / 12, 8) + scipy_stats.t.ppf(0.8, 8)) * se,
                                         abs=1e-4)
    assert entry["least_passing"] == pytest.approx(scipy_stats.t.ppf(1 - 0.05 / 12, 8) * se, abs=1e-4)
    # the exact test: 2 / C(10, 5) = 0.0079, x 6 = 0.048 < 0.05
    assert entry["exact_floor"] == pytest.approx(2 / 252) and entry["exact_floor_holm"] == pytest.approx(12 / 252)
    assert plan["time"]["done_h"] == 0 and plan["time"]["todo_h"] == pytest.approx(10 * 102 / 3600, abs=0.01)
    assert "## Plan" in (tmp_path / "board" / "README.md").read_text()

    # a seventh comparison: 7 x 2 / 252 = 0.056, which the exact test can never pass
    path = _contrast_grid(tmp_path, 7, meaningful=20)
    capsys.readouterr()
    assert grid_mod.main([str(path), "--plan"]) == grid_mod.REFUSED
    out = capsys.readouterr().out
    assert "- contrast a - b: its exact test's least p after Holm over 7 is 0.0556 >= 0.05: it can never pass" in out
    # a meaningful effect below the MDE, and none declared
    path = _contrast_grid(tmp_path, 6, meaningful=10)
    assert grid_mod.main([str(path), "--plan"]) == grid_mod.REFUSED
    # and the seeds per cell at which it would: the least n whose Welch MDE (df 2n - 2) is <= 10 points, by hand
    needed = next(n for n in range(2, 100) if (scipy_stats.t.ppf(1 - 0.05 / 12, 2 * n - 2)
                                               + scipy_stats.t.ppf(0.8, 2 * n - 2)) * sd * math.sqrt(2 / n) <= 0.10)
    assert needed > 5
    assert re.search(r"- contrast a - b: its minimal detectable effect, 1\d\.\d points, exceeds the meaningful "
                     rf"effect, 10 \(at this spread {needed} seeds per cell would detect it\)\n", capsys.readouterr().out)
    refused = json.loads((tmp_path / "board" / grid_plan.PLAN_FILE).read_text())["contrasts"][0]
    assert refused["seeds_for_meaningful"] == needed
    path = _contrast_grid(tmp_path, 6)
    assert grid_mod.main([str(path), "--plan"]) == grid_mod.REFUSED
    assert "- the grid declares no meaningful_effect" in capsys.readouterr().out


def test_the_margin_rule_refuses_a_margin_wider_than_its_share_of_the_training_effect(tmp_path, monkeypatch, capsys):
    from baselines import grid_plan

    monkeypatch.setattr(grid_plan, "pilot", _fake_pilot({"a": 4, "b": 4}, []))
    # every record starts at 10 %: a gains 42 points on average, b 12, so the pair's runs gain 27
    path = _contrast_grid(tmp_path, 1, meaningful=50, before=0.10, margin=15, margin_fraction=0.5)
    assert grid_mod.main([str(path), "--plan"]) == grid_mod.REFUSED
    out = capsys.readouterr().out
    assert ("- contrast a - b: its margin +-15 exceeds 0.5 x the training effect its cells' records measure "
            "(+27.0 points over 10 runs): +-13.5 at most") in out
    rule = json.loads((tmp_path / "board" / grid_plan.PLAN_FILE).read_text())["contrasts"][0]["margin_rule"]
    assert rule == {"training_effect": 0.27, "runs": 10, "fraction": 0.5, "widest": 0.135, "reason": rule["reason"]}
    assert "training effect +27.0 points over 10 runs; the margin rule (0.5 x that) allows +-13.5 at most" in (
        tmp_path / "board" / "README.md").read_text()
    # a margin inside the rule refuses nothing on its account; without the rule the effect is still shown
    path = _contrast_grid(tmp_path, 1, meaningful=50, before=0.10, margin=13, margin_fraction=0.5)
    grid_mod.main([str(path), "--plan"])
    assert "exceeds 0.5 x the training effect" not in capsys.readouterr().out
    path = _contrast_grid(tmp_path, 1, meaningful=50, before=0.10, margin=15)
    grid_mod.main([str(path), "--plan"])
    rule = json.loads((tmp_path / "board" / grid_plan.PLAN_FILE).read_text())["contrasts"][0]["margin_rule"]
    assert rule["training_effect"] == 0.27 and rule["widest"] is None and rule["reason"] is None
    # records without an evaluation before training: the rule waits, saying so
    path = _contrast_grid(tmp_path, 1, meaningful=50, margin=15, margin_fraction=0.5)
    grid_mod.main([str(path), "--plan"])
    entry = json.loads((tmp_path / "board" / grid_plan.PLAN_FILE).read_text())["contrasts"][0]
    assert entry["margin_rule"]["training_effect"] is None
    assert "margin rule (0.5 x the training effect): no record of either cell measures the effect yet" in entry["notes"]
    capsys.readouterr()
    assert grid_mod.main([str(_contrast_grid(tmp_path, 1, meaningful=50, margin_fraction=1.5)), "--plan"]) != 0
    assert "margin_fraction must be in (0, 1] (a share of the training effect), got 1.5" in capsys.readouterr().err


def test_the_plan_says_when_pairing_does_not_help(tmp_path, monkeypatch):
    from baselines import grid_plan
    from leaderboards import stats

    monkeypatch.setattr(grid_plan, "pilot", _fake_pilot({"a": 4, "b": 4, "c": 4}, []))
    # c's seeds 0-2 against a's: differences +5, -10, +20 points (sd 15.0) vary more than the two cells
    # apart (a 5.7 over 5 seeds, c 13.2 over 3: combined 14.4), so the seeds do not pair them
    path = _contrast_grid(tmp_path, 1, meaningful=20, short=[0.45, 0.65, 0.4],
                          descriptive=[{"a": "a", "b": "c", "question": "d", "paired": True}])
    assert grid_mod.main([str(path), "--plan"]) == 0
    described = json.loads((tmp_path / "board" / grid_plan.PLAN_FILE).read_text())["contrasts"][-1]
    sd_a, sd_c = float(np.std([0.5, 0.55, 0.6, 0.45, 0.5], ddof=1)), float(np.std([0.45, 0.65, 0.4], ddof=1))
    assert described["sd"] == [round(float(np.std([0.05, -0.10, 0.20], ddof=1)), 4)]
    needed = stats.planned_seeds("independent", sd_a, 0.20, sd_c, alpha=0.05 / 2)
    assert described["notes"] == [
        f"pairing does not help: the paired differences' sd, 15.0 points, exceeds the two cells' own spreads "
        f"combined, {100 * math.hypot(sd_a, sd_c):.1f} (sqrt(sd_a^2 + sd_b^2), over 5 and 3 seeds): the seeds do not "
        f"pair these cells; as independent seeds {needed} seeds per cell would detect 20 points"]
    assert "- contrast a - c: pairing does not help" in (tmp_path / "board" / "README.md").read_text()
    # pairs that move together (c tracks a): no such note
    path = _contrast_grid(tmp_path, 1, meaningful=20, short=[0.3, 0.36, 0.4],
                          descriptive=[{"a": "a", "b": "c", "question": "d", "paired": True}])
    assert grid_mod.main([str(path), "--plan"]) == 0
    assert json.loads((tmp_path / "board" / grid_plan.PLAN_FILE).read_text())["contrasts"][-1]["notes"] == []


def test_a_follow_up_grid_is_planned_from_an_earlier_grids_records(tmp_path, monkeypatch):
    from baselines import grid_plan
    from leaderboards import stats

    monkeypatch.setattr(grid_plan, "pilot", _fake_pilot({"a": 4, "b": 4}, []))
    (tmp_path / "earlier").mkdir()
    prior = _contrast_grid(tmp_path / "earlier", 1, meaningful=20)  # a and b, 5 seeds each, with records
    follow = tmp_path / "follow"
    follow.mkdir()

    def follow_up(b_overrides):  # the same cells at fresh seeds 10-13, no records of their own
        cells = [{"name": "a", "overrides": {}}, {"name": "b", "overrides": b_overrides}]
        spec = yaml.safe_load(prior.read_text())
        spec.update(cells=cells, seeds=[10, 11, 12, 13], spread_from=str(prior), comparisons=[{"a": "a", "b": "b"}],
                    records=str(follow / "board" / "records"), output_root=str(follow / "runs"))
        path = follow / "grid.yaml"
        path.write_text(yaml.safe_dump(spec))
        assert grid_mod.main([str(path), "--plan"]) in (0, grid_mod.REFUSED)
        return json.loads((follow / "board" / grid_plan.PLAN_FILE).read_text())

    plan = follow_up({"shared_adapter": True})
    entry = plan["contrasts"][0]
    sd_a, sd_b = (float(np.std(v, ddof=1)) for v in ([0.5, 0.55, 0.6, 0.45, 0.5], [0.2, 0.25, 0.3, 0.15, 0.2]))
    assert plan["spread_from"] == {"grid": "tiny", "file": str(prior), "cells": ["a", "b"], "differ": {}}
    assert entry["basis"] == "records of tiny, 5 seeds" and entry["sd"] == [round(sd_a, 4), round(sd_b, 4)]
    assert entry["seeds"] == "4 / 4" and entry["mde"] == pytest.approx(
        stats.minimal_detectable_effect("independent", sd_a, 4, sd_b, 4, alpha=0.05).effect, abs=1e-4)
    # the time of each run to come: the mean of its cell's runs in the earlier grid (100 + seed s each)
    assert plan["time"]["bases"] == {"records of tiny": 8} and plan["time"]["todo_h"] == pytest.approx(8 * 102 / 3600,
                                                                                                         abs=0.01)
    assert "from the records of grid tiny" in (follow / "board" / "README.md").read_text()
    # b is no longer the same run (another LoRA rank): its spread is not borrowed, and the plan says why
    plan = follow_up({"shared_adapter": True, "lora.r": 2})
    assert plan["spread_from"]["cells"] == ["a"] and plan["spread_from"]["differ"] == {"b": ["config.lora.r"]}
    assert plan["contrasts"][0]["basis"] == "records of tiny, 5 seeds / bound"
    # a grid that names itself, or no file, is refused at load
    spec = yaml.safe_load(prior.read_text())
    for bad in (str(prior), str(tmp_path / "missing.yaml")):
        prior.write_text(yaml.safe_dump({**spec, "spread_from": bad}))
        with pytest.raises(grid_mod.ConfigError, match="spread_from must name another grid file"):
            grid_mod.load_grid(prior)


def test_a_descriptive_contrast_is_sized_outside_the_family_and_refuses_nothing(tmp_path, monkeypatch):
    from baselines import grid_plan

    monkeypatch.setattr(grid_plan, "pilot", _fake_pilot({"a": 4, "b": 4, "c": 4}, []))
    # six tested and a seventh descriptive: the family stays at six, so its exact floor 12 / 252 passes
    # (seven tested refuse: the test above); the descriptive one, paired on the three seeds it shares
    # with a (differences 30, 10, 30: sd 11.5 points), is sized at 0.05 / 7 and would not answer
    path = _contrast_grid(tmp_path, 6, meaningful=20, short=[0.2, 0.45, 0.3],
                          descriptive=[{"a": "a", "b": "c", "question": "d", "paired": True}])
    assert grid_mod.main([str(path), "--plan"]) == 0
    plan = json.loads((tmp_path / "board" / grid_plan.PLAN_FILE).read_text())
    assert plan["accepted"] and plan["refusals"] == [] and plan["family"] == 6
    tested, described = plan["contrasts"][0], plan["contrasts"][-1]
    assert not tested["descriptive"] and tested["exact_floor_holm"] == pytest.approx(12 / 252)
    sd = float(np.std([0.30, 0.10, 0.30], ddof=1))
    assert described["descriptive"] and described["design"] == "paired" and described["seeds"] == "3"
    assert described["basis"] == "records, paired" and described["sd"] == [round(sd, 4)]
    from leaderboards import stats
    assert described["mde"] == pytest.approx(stats.minimal_detectable_effect("paired", sd, 3, alpha=0.05 / 7).effect,
                                             abs=1e-4)
    assert described["exact_floor_holm"] is None and not described["answers"] and described["reasons"]
    text = (tmp_path / "board" / "README.md").read_text()
    assert "Contrasts: 6 tested (and 1 descriptive, outside the family" in text
    assert "| descriptive (if tested: no) |" in text
    # the same contrast tested: the family grows to seven and the plan refuses
    path = _contrast_grid(tmp_path, 7, meaningful=20)
    assert grid_mod.main([str(path), "--plan"]) == grid_mod.REFUSED


def test_without_a_pilot_spread_the_plan_takes_the_largest_a_score_can_have(tmp_path, monkeypatch):
    from baselines import grid_plan
    from leaderboards import stats

    monkeypatch.setattr(grid_plan, "pilot", _fake_pilot({"a": 4, "b": 4}, []))
    path = _contrast_grid(tmp_path, 1, meaningful=20)
    for record in (tmp_path / "board" / "records").glob("*.json"):
        record.unlink()
    assert grid_mod.main([str(path), "--plan"]) == grid_mod.REFUSED
    entry = json.loads((tmp_path / "board" / grid_plan.PLAN_FILE).read_text())["contrasts"][0]
    # no records: each cell at its gate's rate (4 / 4 = 1.0) plus 20 points, capped at 0.5: sd 0.5
    assert entry["basis"] == "bound" and entry["sd"] == [0.5, 0.5]
    assert entry["mde"] == pytest.approx(stats.minimal_detectable_effect("independent", 0.5, 5, 0.5, 5).effect, abs=1e-4)


# -- a cell's own budget; a start from other cells' final adapters ------------------------------------
def test_a_cells_own_budget_is_its_runs_records_and_status(tmp_path, tiny_models, capsys):
    cells = [{"name": "team"}, {"name": "long", "budget": {"episodes": 4}, "overrides": {"shared_adapter": True}}]
    path = _grid(tmp_path, cells, seeds=[0])
    runs = {r.name: r for r in grid_mod.plan(grid_mod.load_grid(path))}
    assert runs["team_seed0"].overrides["schedule.max_episodes"] == 2
    assert runs["long_seed0"].overrides["schedule.max_episodes"] == 4
    assert grid_mod.main([str(path), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "2 training runs of their cells' budgets, 1 x 2 + 1 x 4 episodes = 6 episodes" in out
    assert re.search(r"long_seed0 +train \(4 episodes\)", out) and "team_seed0                           train  {" in out
    assert grid_mod.main([str(path)]) == 0
    records = _records(tmp_path)
    assert records["long_seed0"]["grid"]["budget"] == {"axis": "episodes", "episodes": 4, "eval_every_episodes": None}
    assert records["long_seed0"]["budget"]["episodes"] == 4 and records["team_seed0"]["budget"]["episodes"] == 2
    spec = grid_mod.load_grid(path)
    assert [grid_mod.status(spec, r) for r in grid_mod.plan(spec)] == ["done", "done"]
    # the cell's budget changes: its record is no longer current, its folder holds the old budget's run
    data = yaml.safe_load(path.read_text())
    data["cells"][1]["budget"] = {"episodes": 6}
    path.write_text(yaml.safe_dump(data))
    spec = grid_mod.load_grid(path)
    long_run = next(r for r in grid_mod.plan(spec) if r.cell.name == "long")
    assert grid_mod.status(spec, long_run) == "conflict"
    from marft_agents.run.checkpoint import latest_checkpoint
    assert grid_mod.budget_changes(long_run, latest_checkpoint(long_run.overrides["output_dir"])) == [
        "schedule.max_episodes: 4 -> 6"]
    assert not grid_spec.record_is_current(spec, records["long_seed0"], long_run.cell)
    assert grid_spec.record_is_current(spec, records["team_seed0"], spec.cells[0])


@pytest.mark.parametrize("cells, extra, message", [
    ([{"name": "a", "budget": {"episodes": 3}}], {"eval_every": {"episodes": 2}},
     r"cell 'a': eval_every.episodes \(2\) must divide its budget.episodes \(3\)"),
    ([{"name": "a"}, {"name": "s", "evaluate": "swapped", "source": "a", "budget": {"episodes": 4}}], {},
     r"cell 's': an evaluation cell trains nothing"),
    ([{"name": "a", "budget": {"sampled_tokens": 40}}], {}, r"cell 'a': its budget must be on the grid's axis"),
    ([{"name": "a"}, {"name": "b", "budget": {"episodes": 4}}], {"comparisons": [{"a": "b", "b": "a"}]},
     r"comparison b - a: the cells train on different budgets \(4 episodes / 2 episodes\); list it in unequal_budgets"),
    ([{"name": "a"}, {"name": "b", "overrides": {"shared_adapter": True}}],
     {"comparisons": [{"a": "b", "b": "a"}], "unequal_budgets": [{"a": "b", "b": "a", "why": "w"}]},
     r"unequal_budgets: b - a train on the same budget"),
    ([{"name": "a"}, {"name": "b", "start": {"source": "nope"}}], {},
     r"cell 'b': its start names 'nope', which is not a training cell"),
    ([{"name": "b", "start": {"source": "a"}}, {"name": "a"}], {}, r"cell 'b': its start reads cell 'a', declared after it"),
    ([{"name": "a"}, {"name": "b", "start": {"source": "a", "adapters": {"actor_0": "b"}}}], {},
     r"cell 'b': its start reads cell 'b', declared after it"),
    ([{"name": "a"}, {"name": "b", "start": {"source": "a"}, "overrides": {"init_adapters": "x"}}], {},
     r"cell 'b': 'start' and overrides.init_adapters both say where the run starts"),
    ([{"name": "a"}, {"name": "b", "evaluate": "untrained", "start": {"source": "a"}}], {},
     r"cell 'b': 'start' is for training cells"),
    ([{"name": "a"}, {"name": "c", "overrides": {"shared_adapter": True}},
      {"name": "b", "start": {"source": "a", "adapters": {"actor_0": "c"}}}], {},
     r"cell 'b': start: cell 'c' \(shared_adapter: True\) and this run \(shared_adapter: False\) must both"),
    ([{"name": "a"}, {"name": "b", "start": {"source": "a", "adapters": {"holder_0": "a"}}}], {},
     r"cell 'b': start.adapters: \['holder_0'\] not agents of the env"),
    ([{"name": "a"}, {"name": "b", "start": {"source": "a"}, "overrides": {"critic.mode": "per_agent"}}], {},
     r"cell 'b': start: cell 'a''s critic .* does not fit this run's"),
])
def test_bad_budgets_and_starts_are_refused_with_one_line(tmp_path, capsys, cells, extra, message):
    path = _grid(tmp_path, cells, seeds=[0], **extra)
    assert grid_mod.main([str(path), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert re.search(message, err) and err.count("\n") == 1, err


START_CELLS = [
    {"name": "first", "overrides": {"algorithm": "mappo_action"}},
    {"name": "other", "overrides": {"sampling.temperature": 0.9}},
    {"name": "grpo", "overrides": {"algorithm": "grpo", "learner": {"group_size": 2}}},
    {"name": "plain", "start": {"source": "first"}, "overrides": {"schedule.actor_lr": 5e-3}},
    {"name": "combo", "start": {"source": "first", "adapters": {"actor_0": "other"}}},
    {"name": "after_grpo", "start": {"source": "grpo"}},
    {"name": "combo_swapped", "evaluate": "swapped", "source": "combo"},
]


def test_a_start_reads_its_sources_final_adapters_once_they_are_done(tmp_path, tiny_models, capsys, monkeypatch):
    import torch

    from baselines import grid_plan
    from marft_agents.run.checkpoint import latest_checkpoint, load_adapters

    path = _grid(tmp_path, START_CELLS, seeds=[0, 1])
    spec = grid_mod.load_grid(path)
    runs = {r.name: r for r in grid_mod.plan(spec)}
    # a plain start of the same layout: the source's run folder; else a file the grid writes
    assert runs["plain_seed1"].overrides["init_adapters"] == runs["first_seed1"].overrides["output_dir"]
    for cell in ("combo", "after_grpo"):
        assert runs[f"{cell}_seed1"].overrides["init_adapters"] == str(tmp_path / "runs" / cell / "seed1" / "start"
                                                                        / "adapters.pt")
    assert runs["combo_seed1"].source.name == "first_seed1" and [r.name for r in runs["combo_seed1"].others] == [
        "other_seed1"]
    # the identity names the start: the same cell from another source is another run
    cfg = grid_mod.run_config(spec, runs["combo_seed0"])
    assert '"start": {"adapters": {"actor_0": ["other", 0]}, "source": ["first", 0]}' in grid_spec.run_identity(
        runs["combo_seed0"], cfg)
    # each start run goes to its source's shard; the ablation of a start run follows it
    for i in range(2):
        names = {r.name for r in grid_mod.shard(list(runs.values()), i, 2)}
        for seed in (0, 1):
            assert {f"plain_seed{seed}", f"combo_seed{seed}", f"combo_swapped_seed{seed}"} <= names \
                or not ({f"plain_seed{seed}", f"combo_seed{seed}", f"combo_swapped_seed{seed}"} & names)
            assert (f"first_seed{seed}" in names) == (f"combo_seed{seed}" in names)
            assert (f"grpo_seed{seed}" in names) == (f"after_grpo_seed{seed}" in names)
    # before its sources are done: blocked, and its gate waits for them (not a refusal)
    calls = []
    monkeypatch.setattr(grid_plan, "pilot", _fake_pilot({}, calls))
    assert grid_mod.main([str(path), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "blocked  combo_seed0                          train from first_seed0 + actor_0: other_seed0" in out
    assert grid_mod.main([str(path), "--plan"]) == 0
    out = capsys.readouterr().out
    assert "| combo | waiting | - | - | 2 | - | waiting: gated after first, other (its start is their final " in out
    assert calls == ["first", "other"]  # grpo starts as first does; plain, combo and after_grpo wait

    assert grid_mod.main([str(path), "--cells", "first,other,grpo", "--seeds", "0"]) == 0
    assert grid_mod.main([str(path), "--seeds", "0"]) == 0
    out = capsys.readouterr().out
    assert "gate combo: its start is combo_seed0's (seed 0)" in out and calls[-3:] == ["plain", "combo", "after_grpo"]
    records = _records(tmp_path)
    assert {"plain_seed0", "combo_seed0", "after_grpo_seed0", "combo_swapped_seed0"} <= set(records)

    final = {cell: load_adapters(latest_checkpoint(tmp_path / "runs" / cell / "seed0")) for cell in ("first", "other", "grpo")}
    combined = torch.load(tmp_path / "runs" / "combo" / "seed0" / "start" / "adapters.pt", weights_only=True)

    def part(state, prefix):
        return {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}

    def same(a, b):
        return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)

    assert same(part(combined, "lora/policy_reasoner_0/"), part(final["first"], "lora/policy_reasoner_0/"))
    assert same(part(combined, "lora/policy_actor_0/"), part(final["other"], "lora/policy_actor_0/"))
    assert not same(part(combined, "lora/policy_actor_0/"), part(final["first"], "lora/policy_actor_0/"))
    for prefix in ("lora/critic/", "value_head/critic/"):  # the team critic: the source's
        assert part(combined, prefix) and same(part(combined, prefix), part(final["first"], prefix))
    start = records["combo_seed0"]["grid"]["start"]
    assert start["source"] == "first" and start["adapters"] == {"actor_0": "other"}
    assert start["from"] == {"policy_reasoner_0": "first", "policy_actor_0": "other", "critic": "first"}
    assert start["checkpoints"]["other"] == str(latest_checkpoint(tmp_path / "runs" / "other" / "seed0"))
    assert records["combo_seed0"]["config"]["init_adapters"].endswith("start/adapters.pt")
    # a critic-free source (GRPO): its policy adapters, the run's own fresh critic
    after = torch.load(tmp_path / "runs" / "after_grpo" / "seed0" / "start" / "adapters.pt", weights_only=True)
    assert not any(k.startswith("lora/critic/") for k in final["grpo"]) and part(after, "lora/critic/")
    for agent in ("reasoner_0", "actor_0"):
        assert same(part(after, f"lora/policy_{agent}/"), part(final["grpo"], f"lora/policy_{agent}/"))
    assert records["after_grpo_seed0"]["grid"]["start"]["from"]["critic"] == "fresh"
    assert records["plain_seed0"]["grid"]["start"] == {
        "source": "first", "seed": 0, "checkpoints": {"first": str(latest_checkpoint(tmp_path / "runs" / "first" / "seed0"))}}
    assert not (tmp_path / "runs" / "plain" / "seed0" / "start").exists()


def test_a_done_run_whose_adapters_are_gone_is_remade_before_the_runs_that_read_it(tmp_path, tiny_models, capsys,
                                                                                   monkeypatch):
    import shutil

    from baselines import grid_plan

    cells = [START_CELLS[0], START_CELLS[1], START_CELLS[4]]  # first, other; combo starts from both
    path = _grid(tmp_path, cells, seeds=[0])
    monkeypatch.setattr(grid_plan, "pilot", _fake_pilot({}, []))
    assert grid_mod.main([str(path), "--cells", "first,other"]) == 0
    made = _records(tmp_path)
    shutil.rmtree(tmp_path / "runs")  # another machine: the records came with the repository, the run folders did not
    capsys.readouterr()
    grid_mod.main([str(path), "--plan"])  # the plan does not fail on the missing adapters: the start waits
    assert ("| combo | waiting | - | - | 2 | - | waiting: gated after first, other (their records exist but their "
            "final adapters are gone from runs/: the grid re-makes them") in capsys.readouterr().out
    assert grid_mod.main([str(path)]) == 0
    out = capsys.readouterr().out
    for name in ("first_seed0", "other_seed0"):
        assert f"remake {name} (train): combo_seed0 starts from its final adapters, which are not in " in out
        assert f"remade {name}: reproduced its record's evaluations exactly" in out
        assert grid_mod._outcome(_records(tmp_path)[name]["eval_curve"]) == grid_mod._outcome(made[name]["eval_curve"])
    assert out.index("remade other_seed0") < out.index("gate combo:") < out.index("done combo_seed0")
    # a record the re-made run does not reproduce (here: edited) is kept, and the log says so
    shutil.rmtree(tmp_path / "runs")
    (tmp_path / "board" / "records" / "combo_seed0.json").unlink()
    edited = dict(made["first_seed0"], eval_curve=[dict(p, accuracy=0.5) for p in made["first_seed0"]["eval_curve"]])
    (tmp_path / "board" / "records" / "first_seed0.json").write_text(json.dumps(edited))
    capsys.readouterr()
    assert grid_mod.main([str(path)]) == 0
    out = capsys.readouterr().out
    assert "remade first_seed0: did not reproduce its record" in out and "remade other_seed0: reproduced" in out
    kept = list((tmp_path / "board" / grid_mod.REPLACED_DIR).glob("first_seed0.*.json"))
    assert len(kept) == 1 and json.loads(kept[0].read_text())["eval_curve"][0]["accuracy"] == 0.5
    assert grid_mod._outcome(_records(tmp_path)["first_seed0"]["eval_curve"]) == grid_mod._outcome(
        made["first_seed0"]["eval_curve"])
    assert "combo_seed0" in _records(tmp_path)


def test_a_seeds_runs_share_their_dtype_unless_forced(tmp_path, tiny_models, capsys):
    from marft_agents.evaluation.records import ISA_FLAGS, machine_facts

    path = _grid(tmp_path, [{"name": "one"}, {"name": "two", "overrides": {"schedule.actor_lr": 5e-3}}], seeds=[0, 1])
    assert grid_mod.main([str(path), "--cells", "one"]) == 0
    made = _records(tmp_path)["one_seed0"]
    assert made["config"]["model"]["dtype"] == "float32"  # resolved as the trainer resolved it
    assert set(made["machine"]) >= {"platform", "cpus", "python"}
    # seed 0's run of "one" made on a CPU where the config resolved to bfloat16
    made["config"]["model"]["dtype"] = "bfloat16"
    (tmp_path / "board" / "records" / "one_seed0.json").write_text(json.dumps(made))
    capsys.readouterr()
    assert grid_mod.main([str(path)]) == 0
    out = capsys.readouterr().out
    assert ("stop two_seed0: seed 0's records ran in another dtype (bfloat16: one) and two_seed0 would run in float32 "
            "here: a seed's pairs must share their dtype") in out
    assert sorted(_records(tmp_path)) == ["one_seed0", "one_seed1", "two_seed1"]  # seed 1 is all float32: it runs
    assert grid_mod.main([str(path), "--force"]) == 0
    assert "two_seed0" in _records(tmp_path)
    # what a record says of the CPU: the model name and the flags that decide the kernels and the dtype
    cpuinfo = "processor\t: 0\nmodel name\t: Some CPU 9\nflags\t\t: fpu avx2 avx512f amx_bf16\nprocessor\t: 1\n"
    facts = machine_facts(cpuinfo)
    assert facts["cpu"] == "Some CPU 9" and facts["isa"] == ["avx2", "avx512f", "amx_bf16"]
    assert list(ISA_FLAGS).index("avx512f") < list(ISA_FLAGS).index("amx_bf16")


def test_a_start_gate_that_fails_stops_the_start_runs_unless_forced(tmp_path, tiny_models, capsys, monkeypatch):
    from baselines import grid_plan

    cells = [{"name": "first"}, {"name": "plain", "start": {"source": "first"}, "overrides": {"schedule.actor_lr": 5e-3}}]
    path = _grid(tmp_path, cells, seeds=[0], gate={"episodes": 128, "min_signal": 0.25})
    monkeypatch.setattr(grid_plan, "pilot", _fake_pilot({"first": 64}, []))
    assert grid_mod.main([str(path)]) == 0  # first passes its gate; plain's is measured after it, and fails
    out = capsys.readouterr().out
    assert "stop plain_seed0: its start gate refuses it" in out and sorted(_records(tmp_path)) == ["first_seed0"]
    assert grid_mod.main([str(path), "--force"]) == 0
    assert sorted(_records(tmp_path)) == ["first_seed0", "plain_seed0"]
