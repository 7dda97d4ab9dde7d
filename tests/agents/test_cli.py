"""The ``marft`` command end to end on a tiny random model (the model loader is patched)."""

from __future__ import annotations

import json

import pytest
import yaml

import marft_agents.model.loading as models
from agent_helpers import load_tiny_model, small_config
from marft_agents.cli import main
from marft_agents.config import config_to_dict


@pytest.fixture
def tiny_loader(monkeypatch):
    monkeypatch.setattr(models, "load_model_and_tokenizer", load_tiny_model)


def _write_config(tmp_path, **overrides):
    cfg = small_config(tmp_path, **{"eval.at_end": True, **overrides})
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(config_to_dict(cfg)))
    return path, cfg


def test_train_writes_metrics_summary_plot_and_resumes(tmp_path, tiny_loader, capsys):
    path, cfg = _write_config(tmp_path)
    assert main(["train", "--config", str(path), "--quiet", "--no-tensorboard"]) == 0
    out = tmp_path / "run"
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert rows[0]["step"] == 0 and "eval/accuracy" in rows[0]  # the untrained baseline
    assert [r["step"] for r in rows[1:]] == [1, 2] and "losses/policy_loss" in rows[1]
    summary = json.loads((out / "summary.json").read_text())
    assert {"eval_before", "eval_after"} <= set(summary) and summary["counters"]["update"] == 2
    assert (out / "learning_curve.png").read_bytes()[:4] == b"\x89PNG"
    # Re-running a finished run with --resume trains nothing more and keeps the baseline.
    assert main(["train", "--config", str(path), "--quiet", "--no-tensorboard", "--resume",
                 "--set", "schedule.num_updates=2"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["counters"]["update"] == 2 and "eval_before" in summary
    assert "eval after 2 updates" in capsys.readouterr().out


def test_fresh_run_into_used_folder_is_refused_with_a_hint(tmp_path, tiny_loader, capsys):
    path, _ = _write_config(tmp_path)
    assert main(["train", "--config", str(path), "--quiet", "--no-tensorboard", "--no-eval-before"]) == 0
    assert main(["train", "--config", str(path), "--quiet", "--no-tensorboard"]) == 2
    assert "resume" in capsys.readouterr().err


def test_config_errors_are_one_clear_line(tmp_path, capsys):
    path = tmp_path / "bad.yaml"
    path.write_text("schedule: {num_updatez: 3}\n")
    assert main(["train", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert "num_updatez" in err and "num_updates" in err and "Traceback" not in err


def test_set_override_needs_key_value(capsys):
    assert main(["train", "--config", "x.yaml", "--set", "oops"]) == 2
    assert "section.key=value" in capsys.readouterr().err


def test_envs_lists_registered_ids(capsys):
    assert main(["envs"]) == 0
    assert "marft/Arithmetic-v0" in capsys.readouterr().out.split()


def test_best_adapters_start_from_the_baseline_and_eval_loads_them(tmp_path, tiny_loader, capsys):
    path, _ = _write_config(tmp_path, **{"eval.interval": 1})
    assert main(["train", "--config", str(path), "--quiet", "--no-tensorboard"]) == 0
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    # A random tiny model never beats its untrained self, so best/ holds the untrained adapters.
    assert summary["eval_best"]["update"] == 0
    assert summary["eval_best"]["accuracy"] == summary["eval_before"]["accuracy"]
    capsys.readouterr()
    transcripts = tmp_path / "eval" / "best.jsonl"
    assert main(["eval", "--config", str(path), "--checkpoint", "best", "--transcripts", str(transcripts)]) == 0
    assert f"loaded adapters from {tmp_path / 'run' / 'best'}" in capsys.readouterr().out
    lines = [json.loads(line) for line in transcripts.read_text().splitlines()]
    assert len(lines) == 2  # eval.n_problems
    for task in lines:
        assert {"task_index", "problem", "answer", "solved", "reward", "transcript"} <= set(task)
        assert task["transcript"] and all({"agent", "round", "observation", "text"} <= set(t)
                                          for t in task["transcript"])


def test_eval_of_missing_best_says_why(tmp_path, tiny_loader, capsys):
    path, _ = _write_config(tmp_path, **{"eval.keep_best": False})
    assert main(["train", "--config", str(path), "--quiet", "--no-tensorboard"]) == 0
    assert main(["eval", "--config", str(path), "--checkpoint", "best"]) == 2
    assert "kept no best adapters" in capsys.readouterr().err


def test_eval_decodes_as_the_config_says_and_sampled_adds_sampling(tmp_path, tiny_loader, capsys):
    """``eval.greedy: false`` (as training's evaluations read it) is a sampled evaluation with
    ``eval.samples_per_problem`` plays per problem, not a greedy one under a greedy label."""
    path, _ = _write_config(tmp_path)
    report = tmp_path / "eval.json"
    sampled = ["--set", "eval.greedy=false", "--set", "eval.samples_per_problem=2"]
    assert main(["eval", "--config", str(path), "--checkpoint", "none", "--quiet", "--json", str(report), *sampled]) == 0
    figures = json.loads(report.read_text())
    assert list(figures) == ["sampled"] and "pass_at_k" in json.dumps(figures["sampled"])
    assert "greedy:" not in capsys.readouterr().out
    assert main(["eval", "--config", str(path), "--checkpoint", "none", "--quiet", "--json", str(report), "--sampled",
                 "--set", "eval.samples_per_problem=2"]) == 2  # greedy config: k > 1 needs eval.greedy false
    assert main(["eval", "--config", str(path), "--checkpoint", "none", "--quiet", "--json", str(report),
                 "--sampled"]) == 0
    assert list(json.loads(report.read_text())) == ["greedy", "sampled"]


def test_bm25s_routine_logging_is_silenced(capsys, caplog):
    import logging

    assert main(["envs"]) == 0  # the CLI's logging set-up ran
    # What `import bm25s` does, maybe later than the CLI's set-up (WebShop imports it lazily).
    logging.getLogger("bm25s").setLevel(logging.DEBUG)
    with caplog.at_level(logging.DEBUG):
        logging.getLogger("bm25s").debug("Building index from IDs")
        logging.getLogger("bm25s").info("The query is empty.")
        logging.getLogger("bm25s").warning("a real problem")
    assert [r.getMessage() for r in caplog.records if r.name == "bm25s"] == ["a real problem"]


def test_resume_with_another_evaluation_set_is_one_line_before_the_model_loads(tmp_path, tiny_loader, capsys,
                                                                               monkeypatch):
    path, _ = _write_config(tmp_path, **{"eval.interval": 1})
    assert main(["train", "--config", str(path), "--quiet", "--no-tensorboard"]) == 0
    capsys.readouterr()

    def refuse(cfg, hardware=None):
        raise AssertionError("the model was loaded before the changed evaluation set was refused")

    monkeypatch.setattr(models, "load_model_and_tokenizer", refuse)
    assert main(["train", "--config", str(path), "--quiet", "--no-tensorboard", "--resume",
                 "--set", "eval.n_problems=5", "--set", "schedule.num_updates=4"]) == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert "eval.n_problems: 2 -> 5" in lines[0] and "--output-dir" in lines[0]
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["counters"]["update"] == 2
