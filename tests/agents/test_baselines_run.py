"""``python -m baselines.run``: train, then write a leaderboard record from the run's own files."""

from __future__ import annotations

import json

import pytest
import yaml

import marft_agents.model.loading as models
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


def test_record_carries_diagnostics_outcomes_and_transcripts_within_its_size_budget(tmp_path, monkeypatch):
    """A Relay run (partial views, two agents): the record holds the per-update metrics of the run,
    the samples before every evaluation, the final evaluation per problem and the first decisions
    of the same problems at every evaluation, and its file stays under the size budget."""
    from leaderboards.records import DIAGNOSTIC_PREFIXES, RECORD_MAX_BYTES, TRANSCRIPT_PROBLEMS

    monkeypatch.setattr(models, "load_model_and_tokenizer", load_tiny_model)
    cfg = small_config(tmp_path, **{"env.id": "marft/Relay-v0", "env.kwargs": {"level": 1, "horizon": 1},
                                    "eval.env_kwargs": {"split": "test"}, "eval.n_problems": 4, "eval.interval": 1,
                                    "eval.at_end": True, "schedule.num_updates": 2})
    config = tmp_path / "relay_tiny.yaml"
    config.write_text(yaml.safe_dump(config_to_dict(cfg)))
    records = tmp_path / "board" / "records"
    assert main([str(config), "--records", str(records)]) == 0
    path = records / "relay_tiny.json"
    record = json.loads(path.read_text())
    metrics = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    updates = [m for m in metrics if m["step"] >= 1]

    d = record["diagnostics"]
    assert d["update"] == [1, 2] and d["episodes"] == [2, 4]
    assert d["sampled_tokens"] == [int(m["counters/tokens"]) for m in updates]
    logged = {k for m in updates for k in m if k.startswith(DIAGNOSTIC_PREFIXES)}
    assert {"rollout/reward_mean", "losses/value_loss", "losses/entropy", "losses/approx_kl",
            "losses/explained_variance", "agent/holder_0/length"} <= logged
    assert logged <= set(d) and all(len(column) == 2 for column in d.values())
    assert d["losses/value_loss"][1] == pytest.approx(updates[1]["losses/value_loss"], rel=1e-3)

    assert [(p["update"], p["episodes"]) for p in record["eval_curve"]] == [(0, 0), (1, 2), (2, 4)]
    assert record["eval_curve"][2]["sampled_tokens"] == record["budget"]["tokens"]

    outcomes = record["eval_outcomes"]
    assert outcomes["update"] == 2 and len(outcomes["task_index"]) == len(outcomes["solved"]) == 4
    assert sum(outcomes["solved"]) / 4 == record["eval_after"]["accuracy"]

    assert [t["update"] for t in record["transcripts"]] == [0, 1, 2]
    first = [[p["task_index"] for p in t["problems"]] for t in record["transcripts"]]
    assert first[0] == first[1] == first[2] == outcomes["task_index"][:TRANSCRIPT_PROBLEMS]
    decisions = record["transcripts"][0]["problems"][0]["decisions"]
    assert [d["agent"] for d in decisions] == ["holder_0", "answerer_0"] and "You know" in decisions[0]["observation"]
    assert record["transcripts"][0]["problems"][0]["rounds"] == 1  # Relay: one round per episode
    assert record["task_revision"] == 1
    assert path.stat().st_size < RECORD_MAX_BYTES


def test_a_staged_envs_record_carries_its_stages_at_every_evaluation(tmp_path, monkeypatch):
    """Relay level 4 reports its stages: eval_after and every eval-curve point carry the per-stage
    rates, the final per-problem outcomes the stages per problem, and they agree."""
    from marft_agents.evaluation.problem_set import STAGE_FIGURES

    monkeypatch.setattr(models, "load_model_and_tokenizer", load_tiny_model)
    cfg = small_config(tmp_path, **{"env.id": "marft/Relay-v0", "env.kwargs": {"level": 4, "horizon": 1},
                                    "eval.env_kwargs": {"split": "test"}, "eval.n_problems": 4, "eval.interval": 1,
                                    "eval.at_end": True, "schedule.num_updates": 1})
    config = tmp_path / "relay_stages_tiny.yaml"
    config.write_text(yaml.safe_dump(config_to_dict(cfg)))
    records = tmp_path / "board" / "records"
    assert main([str(config), "--records", str(records)]) == 0
    record = json.loads((records / "relay_stages_tiny.json").read_text())
    after, outcomes = record["eval_after"], record["eval_outcomes"]
    assert set(after["stage_pass"]) == {"reduce", "answer"} and after["stage_n"] == {"reduce": 4, "answer": 4}
    assert [p["update"] for p in record["eval_curve"]] == [0, 1]
    assert all(set(STAGE_FIGURES) <= set(point) for point in record["eval_curve"])
    assert {k: record["eval_curve"][-1][k] for k in STAGE_FIGURES} == {k: after[k] for k in STAGE_FIGURES}
    assert {name: sum(column) / 4 for name, column in outcomes["stages_passed"].items()} == after["stage_pass"]


def test_a_long_run_is_thinned_to_the_size_budget():
    """Thousands of updates: the diagnostics keep every k-th update and the last, the transcripts
    the first and last evaluation, and the file fits."""
    from dataclasses import asdict

    from leaderboards.records import RECORD_MAX_BYTES, Record, dumps, fit_to_budget, training_diagnostics

    rows = [{"step": u, "counters/episodes": 32.0 * u, "counters/tokens": 900.0 * u, "time/train_seconds": 2.5 * u,
             **{f"losses/m{k}": 0.123456789 * u for k in range(12)}} for u in range(1, 3001)]
    problems = [{"task_index": i, "solved": 0, "decisions": [{"agent": "a", "observation": "x" * 240, "text": "y" * 240}]}
                for i in range(3)]
    record = Record(name="long", env_id="e", env_kwargs={}, algorithm="mappo_action", model="m",
                    eval_after={"accuracy": 0.5}, diagnostics=training_diagnostics(rows),
                    transcripts=[{"update": u, "episodes": 32 * u, "problems": problems} for u in range(0, 3001, 10)])
    assert len(dumps(asdict(record))) > RECORD_MAX_BYTES
    fit_to_budget(record)
    assert len(dumps(asdict(record))) <= RECORD_MAX_BYTES
    assert json.loads(dumps(asdict(record))) == asdict(record)
    kept = record.diagnostics["update"]
    assert kept[-1] == 3000 and len(kept) < 3000 and len({b - a for a, b in zip(kept, kept[1:])}) == 1
    assert record.diagnostics["losses/m0"][-1] == pytest.approx(0.123456789 * 3000, rel=1e-3)
    assert record.transcripts[0]["update"] == 0 and record.transcripts[-1]["update"] == 3000
