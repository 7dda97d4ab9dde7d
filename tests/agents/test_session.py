"""The run session shared by ``train()`` and ``marft train``: baseline, metric files, summary,
signals that stop with a checkpoint, and resumes that log every step once."""

from __future__ import annotations

import csv
import json
import os
import signal
from pathlib import Path

import pytest
import torch

from agent_helpers import small_config, tiny_on_device
from marft_agents.run.checkpoint import list_checkpoints
from marft_agents.run.metrics import read_metrics
from marft_agents.run.trainer import train


def _tiny():
    return tiny_on_device(seed=0, hidden_size=32, num_layers=1)


def _steps(out) -> tuple[list[int], list[int]]:
    jsonl = [row["step"] for row in read_metrics(out / "metrics.jsonl")]
    with (out / "metrics.csv").open(newline="") as handle:
        csv_steps = [int(row["step"]) for row in csv.DictReader(handle)]
    return jsonl, csv_steps


def test_train_from_python_follows_the_cli_session(tmp_path):
    cfg = small_config(tmp_path, **{"eval.at_end": True})
    result = train(cfg, model_and_tokenizer=_tiny(), tensorboard=False)
    out = tmp_path / "run"
    summary = json.loads((out / "summary.json").read_text())
    assert {"eval_before", "eval_after", "eval_best", "counters"} <= set(summary)
    assert summary["eval_before"]["n"] == 2 and summary["counters"]["update"] == 2
    assert result.summary == summary and result.stopped_by is None
    assert _steps(out) == ([0, 1, 2], [0, 1, 2])  # step 0 = the untrained baseline
    critic = summary["critic_last_half"]  # MAPPO's critic over the later half: update 2
    assert (critic["first_update"], critic["last_update"], critic["updates"]) == (2, 2, 1)
    assert (out / "learning_curve.png").is_file()
    evaluated = [row for row in read_metrics(out / "metrics.jsonl") if row.get("eval/accuracy") is not None]
    # every evaluation (the baseline at step 0, the one at the end) logs its wall time
    assert [row["step"] for row in evaluated] == [0, 2]
    assert all(row["eval/seconds"] > 0 for row in evaluated), evaluated
    # the per-problem transcripts docs/getting_started.md points at: evals/update_000000.json (before training)
    guide = (Path(__file__).resolve().parents[2] / "docs" / "getting_started.md").read_text()
    first = json.loads((out / "evals" / "update_000000.json").read_text())["per_task"][0]
    keys = ("agent", "round", "observation", "text")
    assert set(keys) <= set(first["transcript"][0]) and {"problem", "answer", "solved", "reward"} <= set(first)
    assert "evals/update_<NNNNNN>.json" in guide and "update_000000.json" in guide
    assert all(f"`{key}`" in guide for key in keys)


class _Crash(Exception):
    pass


def test_a_crashed_and_resumed_run_logs_every_step_once(tmp_path):
    cfg = small_config(tmp_path, **{"schedule.num_updates": 4, "schedule.checkpoint_interval": 2})

    def crash_after_update_3(index, metrics):
        if index == 2:
            raise _Crash

    with pytest.raises(_Crash):
        train(cfg, callbacks=[crash_after_update_3], model_and_tokenizer=_tiny(), tensorboard=False)
    out = tmp_path / "run"
    assert _steps(out) == ([0, 1, 2, 3], [0, 1, 2, 3])  # update 3 logged, its checkpoint not written
    assert [p.name for p in list_checkpoints(out)] == ["update_000002"]
    resumed = train(cfg, resume=True, model_and_tokenizer=_tiny(), tensorboard=False)
    assert _steps(out) == ([0, 1, 2, 3, 4], [0, 1, 2, 3, 4])
    assert "eval_before" in resumed.summary  # read back from the step-0 row


def test_sigterm_checkpoints_and_the_resume_is_bit_identical(tmp_path):
    overrides = {"schedule.num_updates": 3, "schedule.checkpoint_interval": 0, "schedule.ppo_epochs": 2}
    full = train(small_config(tmp_path / "full", **overrides), model_and_tokenizer=_tiny(), tensorboard=False,
                 eval_before=False, plot=False)

    cfg = small_config(tmp_path / "cut", **overrides)
    handler_before = signal.getsignal(signal.SIGTERM)

    def preempt(index, metrics):
        if index == 0:
            os.kill(os.getpid(), signal.SIGTERM)  # what a scheduler (or `timeout`) sends

    cut = train(cfg, callbacks=[preempt], model_and_tokenizer=_tiny(), tensorboard=False, eval_before=False,
                plot=False)
    assert cut.stopped_by == "SIGTERM" and cut.counters["update"] == 1
    # checkpoint_interval 0 saves only after the last update: this checkpoint is the signal's.
    assert [p.name for p in list_checkpoints(cfg.output_dir)] == ["update_000001"]
    assert json.loads((tmp_path / "cut" / "run" / "summary.json").read_text())["stopped_by"] == "SIGTERM"
    assert signal.getsignal(signal.SIGTERM) == handler_before  # the session's handler is gone

    resumed = train(cfg, resume=True, model_and_tokenizer=_tiny(), tensorboard=False, eval_before=False,
                    plot=False)
    assert resumed.stopped_by is None and resumed.counters["update"] == 3
    a, b = full.policy.adapter_state_dict(), resumed.policy.adapter_state_dict()
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a), [k for k in a if not torch.equal(a[k], b[k])]
    assert _steps(tmp_path / "cut" / "run") == ([1, 2, 3], [1, 2, 3])


@pytest.mark.parametrize("when", ["during the last evaluation", "after the last update"])
def test_a_sigterm_once_the_last_update_has_started_leaves_a_complete_run(tmp_path, monkeypatch, when):
    """A stop that arrives when nothing is left to stop (a job's time limit hitting the last
    update's evaluation, say) must not turn a finished run into an unrecorded, stopped one."""
    from marft_agents.run.trainer import Trainer

    cfg = small_config(tmp_path, **{"schedule.checkpoint_interval": 0, "eval.at_end": True})
    callbacks = []
    if when == "during the last evaluation":
        evaluate = Trainer.evaluate

        def evaluate_then_preempt(self, *args, **kwargs):
            if self.counters["update"] == cfg.schedule.num_updates:
                os.kill(os.getpid(), signal.SIGTERM)
            return evaluate(self, *args, **kwargs)

        monkeypatch.setattr(Trainer, "evaluate", evaluate_then_preempt)
    else:
        callbacks.append(lambda index, metrics: index == cfg.schedule.num_updates - 1
                         and os.kill(os.getpid(), signal.SIGTERM))
    result = train(cfg, callbacks=callbacks, model_and_tokenizer=_tiny(), tensorboard=False, plot=False)
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert result.stopped_by is None and "stopped_by" not in summary
    assert summary["counters"]["update"] == cfg.schedule.num_updates
    assert summary["eval_after"]["n"] == 2  # the final evaluation is the run's result
    assert [p.name for p in list_checkpoints(cfg.output_dir)] == [f"update_{cfg.schedule.num_updates:06d}"]


def test_marft_train_stops_on_sigterm_with_exit_status_143(tmp_path, monkeypatch, capsys):
    import yaml

    import marft_agents.model.loading as models
    from marft_agents.cli import main
    from marft_agents.config import config_to_dict
    from marft_agents.run.metrics import MetricsLogger

    monkeypatch.setattr(models, "load_model_and_tokenizer", lambda cfg, hardware=None: _tiny())
    log = MetricsLogger.log

    def log_then_preempt(self, step, metrics):
        log(self, step, metrics)
        if step == 1:
            os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(MetricsLogger, "log", log_then_preempt)
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(config_to_dict(small_config(tmp_path, **{"schedule.checkpoint_interval": 0}))))
    assert main(["train", "--config", str(path), "--quiet", "--no-tensorboard"]) == 128 + signal.SIGTERM
    assert "stopped by SIGTERM after 1 updates" in capsys.readouterr().out
    assert [p.name for p in list_checkpoints(tmp_path / "run")] == ["update_000001"]


def test_log_lines_during_the_updates_go_above_the_progress_bar(tmp_path, monkeypatch):
    """With the bar on, a log record emitted during an update is written by ``tqdm.write`` (a
    line above the bar), not by the console handler onto the bar's own line."""
    import logging
    import sys

    import tqdm

    from marft_agents.run.session import SessionOptions, run_session
    from marft_agents.run.trainer import prepare_trainer

    written = []
    monkeypatch.setattr(tqdm.tqdm, "write", classmethod(lambda cls, s, file=None, end="\n", nolock=False:
                                                        written.append(s)))
    console = logging.StreamHandler(sys.stderr)  # a console handler, as marft train's basicConfig makes
    logging.root.addHandler(console)
    try:
        cfg = small_config(tmp_path, **{"schedule.num_updates": 1})
        with prepare_trainer(cfg, False, _tiny()) as trainer:
            run_session(trainer, SessionOptions(
                eval_before=False, tensorboard=False, plot=False, progress=True, handle_signals=False,
                callbacks=[lambda update, metrics: logging.getLogger("marft.test").warning("mid-run line")]))
    finally:
        logging.root.removeHandler(console)
    assert any("mid-run line" in line for line in written)
