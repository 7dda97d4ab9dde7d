"""``python -m baselines.run``: train, then write a leaderboard record from the run's own files."""

from __future__ import annotations

import json

import yaml

import marft_agents.models as models
from agent_helpers import load_tiny_model, small_config
from baselines.run import main
from marft_agents.config import config_to_dict


def test_record_holds_the_run_s_curve_best_and_budget(tmp_path, monkeypatch):
    import baselines.run

    commits = iter(["abc1234", "moved-on"])  # HEAD when training starts, then a later one
    monkeypatch.setattr(baselines.run, "git_commit", lambda: next(commits))
    monkeypatch.setattr(models, "load_model_and_tokenizer", load_tiny_model)
    cfg = small_config(tmp_path, **{"eval.interval": 1, "eval.at_end": True, "schedule.num_updates": 2})
    config = tmp_path / "tiny_baseline.yaml"
    config.write_text(yaml.safe_dump(config_to_dict(cfg)))
    records = tmp_path / "board" / "records"

    assert main([str(config), "--records", str(records)]) == 0

    record = json.loads((records / "tiny_baseline.json").read_text())
    metrics = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    evaluated = [m for m in metrics if "eval/accuracy" in m]
    assert [p["update"] for p in record["eval_curve"]] == [m["step"] for m in evaluated] == [0, 1, 2]
    assert record["eval_curve"][-1]["accuracy"] == record["eval_after"]["accuracy"]
    assert record["eval_best"]["update"] == 0  # a random tiny model never beats its baseline
    assert record["budget"]["updates"] == 2 and record["config"]["algorithm"] == "mappo_action"
    assert record["commit"] == "abc1234"
    assert "| tiny_baseline |" in (records.parent / "README.md").read_text()
