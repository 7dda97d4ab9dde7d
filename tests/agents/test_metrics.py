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
    assert lines[0] == "step,losses/policy_loss,rollout/reward_mean" and len(lines) == 3


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
