import json

import pytest

from marft_agents.run.metrics import MetricsLogger, read_metrics
from marft_agents.run.plotting import plot_learning_curve


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


@pytest.mark.parametrize("steps", [4, 1])
def test_every_panel_has_a_y_label_and_the_accuracy_band_a_legend_entry(steps):
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    from marft_agents.run.plotting import BAND_LABEL, learning_curve_figure

    rows = [{"step": step, "rollout/reward_mean": step / 4, "eval/accuracy": 0.1 * step, "eval/stderr": 0.02,
             "losses/policy_loss": 0.5, "losses/approx_kl": 0.01} for step in range(steps)]
    fig = learning_curve_figure(rows, title="t")
    try:
        shown = [ax for ax in fig.axes if ax.get_visible()]
        assert len(shown) == 4
        assert all(ax.get_ylabel() for ax in shown), [ax.get_title() for ax in shown if not ax.get_ylabel()]
        accuracy = next(ax for ax in shown if ax.get_title() == "greedy eval accuracy")
        assert accuracy.get_ylabel() == "share of problems solved"
        legend = [text.get_text() for text in accuracy.get_legend().get_texts()]
        assert any(BAND_LABEL in entry for entry in legend), legend
    finally:
        plt.close(fig)


def test_non_finite_values_are_written_as_null(tmp_path):
    logger = MetricsLogger(tmp_path, tensorboard=False)
    logger.log(1, {"agent/verifier_0/length": float("nan"), "x": float("inf"), "y": 0.5})
    text = (tmp_path / "metrics.jsonl").read_text()
    assert "NaN" not in text and "Infinity" not in text
    assert json.loads(text, parse_constant=lambda name: pytest.fail(f"bare {name} in metrics.jsonl"))[
        "agent/verifier_0/length"] is None
    assert read_metrics(tmp_path / "metrics.jsonl") == [{"step": 1, "agent/verifier_0/length": None, "x": None,
                                                         "y": 0.5}]
    assert (tmp_path / "metrics.csv").read_text().splitlines()[1] == "1,,,0.5"
    # Files written before this change hold bare NaN: readers still get None.
    (tmp_path / "old.jsonl").write_text('{"step": 1, "a": NaN}\n')
    assert read_metrics(tmp_path / "old.jsonl") == [{"step": 1, "a": None}]


def test_resume_drops_rows_logged_after_the_checkpoint(tmp_path):
    logger = MetricsLogger(tmp_path, tensorboard=False)
    for step in range(5):  # baseline at 0, updates 1-4; the checkpoint holds update 2
        logger.log(step, {"m": float(step)})
    logger.close()
    logger = MetricsLogger(tmp_path, tensorboard=False, keep_until=2)
    logger.log(3, {"m": 30.0})
    assert [r["step"] for r in read_metrics(tmp_path / "metrics.jsonl")] == [0, 1, 2, 3]
    assert (tmp_path / "metrics.csv").read_text().splitlines()[1:] == ["0,0.0", "1,1.0", "2,2.0", "3,30.0"]
    MetricsLogger(tmp_path, tensorboard=False, keep_until=-1)  # a fresh run in a used folder
    assert read_metrics(tmp_path / "metrics.jsonl") == [] and not (tmp_path / "metrics.csv").exists()


def test_metric_files_get_ordinary_permissions(tmp_path):
    import os
    import stat

    old = os.umask(0o022)
    try:
        logger = MetricsLogger(tmp_path, tensorboard=False)
        logger.log(0, {"a": 1.0})
        logger.log(1, {"a": 1.0, "b": 2.0})  # rebuilds the CSV through a temporary file
        MetricsLogger(tmp_path, tensorboard=False, keep_until=0)  # rewrites both files
    finally:
        os.umask(old)
    for name in ("metrics.csv", "metrics.jsonl"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o644, name


def test_learning_curve_is_a_grid_titled_with_the_run(tmp_path):
    pytest.importorskip("matplotlib")
    from PIL import Image

    from marft_agents.run.plotting import run_title

    logger = MetricsLogger(tmp_path, tensorboard=False)
    keys = ["rollout/reward_mean", "eval/accuracy", "losses/policy_loss", "losses/value_loss",
            "losses/approx_kl", "losses/entropy"]
    for step in range(1, 6):
        logger.log(step, {**{k: 0.1 * step for k in keys}, "eval/stderr": 0.02})
    title = run_title("mappo_action", "marft/Arithmetic-v0", {"profile": "dual", "level": 1})
    assert title == "mappo_action on marft/Arithmetic-v0 (profile dual, level 1)"
    out = plot_learning_curve(tmp_path / "metrics.jsonl", tmp_path / "curve.png", title=title)
    width, height = Image.open(out).size
    assert width / height < 2.5  # six panels on a grid, not a 7:1 strip


def test_tensorboard_opens_its_event_file_with_the_first_row_only(tmp_path):
    pytest.importorskip("tensorboard")
    logger = MetricsLogger(tmp_path)  # a run interrupted before it logged anything
    logger.close()
    assert not list(tmp_path.glob("tb/**/events.out.tfevents*"))
    logger = MetricsLogger(tmp_path)
    logger.log(0, {"eval/accuracy": 0.5})
    logger.close()
    assert len(list(tmp_path.glob("tb/**/events.out.tfevents*"))) == 1
