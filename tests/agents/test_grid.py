"""``python -m baselines.grid``: a declared grid runs, skips finished runs, resumes interrupted ones."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

import marft_agents.models as models
from agent_helpers import load_tiny_model, small_config, tiny, tiny_on_device  # noqa: F401 (fixture)
from baselines import grid as grid_mod
from baselines.ablations import rotation, swap_agent_adapters
from marft_agents.config import config_to_dict

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def tiny_models(monkeypatch):
    monkeypatch.setattr(models, "load_model_and_tokenizer", load_tiny_model)


def _grid(tmp_path, cells, seeds=(0, 1), **extra):
    cfg = small_config(tmp_path, **{"schedule.num_updates": 1, "eval.at_end": True})
    base = tmp_path / "base.yaml"
    base.write_text(yaml.safe_dump(config_to_dict(cfg)))
    spec = {"name": "tiny", "base": str(base), "time_budget_s": 600, "seeds": list(seeds), "cells": cells,
            "records": str(tmp_path / "board" / "records"), "output_root": str(tmp_path / "runs"), **extra}
    path = tmp_path / "tiny_grid.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def _records(tmp_path):
    folder = tmp_path / "board" / "records"
    return {p.stem: json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))}


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
    assert team["grid"] == {"grid": "tiny", "cell": "team", "seed": 0, "kind": "train", "wall_s": team["grid"]["wall_s"]}
    assert team["commit"] == "abc1234" and team["budget"]["updates"] == 1
    assert team["config"]["seed"] == 0 and records["team_seed1"]["config"]["seed"] == 1
    assert team["config"]["schedule"]["time_budget_s"] == 600
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


def test_interrupted_cell_resumes_from_its_checkpoint(tmp_path, tiny_models, monkeypatch, capsys):
    from marft_agents.trainer import Trainer

    cell = {"name": "team", "overrides": {"schedule.num_updates": 4, "schedule.checkpoint_interval": 2}}
    path = _grid(tmp_path, [cell], seeds=[0])
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
    capsys.readouterr()
    assert grid_mod.main([str(path), "--dry-run"]) == 0
    assert "partial  team_seed0" in capsys.readouterr().out

    monkeypatch.setattr(Trainer, "run", original_run)
    assert grid_mod.main([str(path)]) == 0
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


def test_dry_run_lists_runs_and_cells_and_shards_select(tmp_path, capsys):
    path = _grid(tmp_path, CELLS + [{"name": "shared", "overrides": {"shared_adapter": True}}])
    assert grid_mod.main([str(path), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "6 runs (4 training runs of 600 s" in out
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
    cells = [{"name": "team"}, {"name": "solo"}]
    good = _grid(tmp_path, cells, comparisons=[{"question": "q", "a": ["team"], "b": "solo"}])
    assert grid_mod.load_grid(good).comparisons[0].a == ["team"]
    bad = _grid(tmp_path, cells, comparisons=[{"a": ["team", "tema"], "b": "solo"}])
    assert grid_mod.main([str(bad), "--dry-run"]) == 2
    assert re.search(r"comparisons\[0\].*unknown \['tema'\]", capsys.readouterr().err)


@pytest.mark.parametrize("grid_file", sorted((REPO / "baselines" / "grids").glob("*.yaml")), ids=lambda p: p.stem)
def test_shipped_grids_plan_and_fit_their_stated_budget(grid_file, monkeypatch):
    monkeypatch.chdir(REPO)
    spec = grid_mod.load_grid(grid_file)
    runs = grid_mod.plan(spec)
    kinds = {r.cell.name: r.kind for r in runs}
    assert "untrained" in kinds.values() and "swapped" in kinds.values()
    assert any(c.b == "solo_ppo" for c in spec.comparisons), "the grid must compare the team with the single agent"
    for cell in ("marft_a", "marft_a_shared", "marft_t", "marft_t_shared"):
        assert sum(r.cell.name == cell for r in runs) >= 3, cell
    training = [r for r in runs if r.kind == "train"]
    # the grid's comment states the training hours on two cores; keep it true
    stated = re.search(r"training time: (\d+) runs x (\d+) s / 2 cores = ([\d.]+) h", grid_file.read_text())
    assert stated, "the grid file must state its budget as 'training time: N runs x S s / 2 cores = H h'"
    assert int(stated.group(1)) == len(training) and int(stated.group(2)) == spec.time_budget_s
    assert float(stated.group(3)) == pytest.approx(len(training) * spec.time_budget_s / 2 / 3600, abs=0.05)


def test_swap_agent_adapters_exchanges_only_policy_adapters(tiny):
    from marft_agents.policy import MultiAgentPolicy

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
    from marft_agents.trainer import train

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
