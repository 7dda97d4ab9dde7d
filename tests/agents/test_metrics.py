import json

import pytest

from marft_agents.metrics import MetricsLogger, read_metrics
from marft_agents.plotting import plot_learning_curve


def test_metrics_logger_writes_jsonl_and_csv_and_appends_on_reopen(tmp_path):
    logger = MetricsLogger(tmp_path, tensorboard=False)
    logger.log(0, {"losses/policy_loss": 0.5, "rollout/reward_mean": 0.25})
    logger.close()
    logger = MetricsLogger(tmp_path, tensorboard=False)  # a resumed run appends
    logger.log(1, {"losses/policy_loss": 0.25, "rollout/reward_mean": 0.5, "new/key": 1})
    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in rows] == [0, 1] and rows[1]["new/key"] == 1
    lines = (tmp_path / "metrics.csv").read_text().splitlines()
    # The new key widens the CSV (rebuilt from the JSONL); the earlier row gets an empty cell.
    assert lines == ["step,losses/policy_loss,rollout/reward_mean,new/key", "0,0.5,0.25,", "1,0.25,0.5,1"]


def test_csv_keeps_training_columns_after_a_step0_eval_row(tmp_path):
    logger = MetricsLogger(tmp_path, tensorboard=False)
    logger.log(0, {"eval/accuracy": 0.2})  # the baseline evaluation comes first
    logger.log(1, {"losses/policy_loss": 0.1})
    logger.log(2, {"losses/policy_loss": 0.3})
    lines = (tmp_path / "metrics.csv").read_text().splitlines()
    assert lines == ["step,eval/accuracy,losses/policy_loss", "0,0.2,", "1,,0.1", "2,,0.3"]
    assert not list(tmp_path.glob("*.tmp"))


def test_read_metrics_skips_a_torn_last_line(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text(json.dumps({"step": 0, "a": 1}) + "\n" + '{"step": 1, "a"')
    assert read_metrics(path) == [{"step": 0, "a": 1}]


def test_plot_learning_curve_writes_a_png(tmp_path):
    pytest.importorskip("matplotlib")
    logger = MetricsLogger(tmp_path, tensorboard=False)
    for step in range(4):
        logger.log(step, {"rollout/reward_mean": step / 4, "eval/accuracy": 0.1 * step, "eval/stderr": 0.02})
    out = plot_learning_curve(tmp_path / "metrics.jsonl", tmp_path / "curve.png", title="t")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
