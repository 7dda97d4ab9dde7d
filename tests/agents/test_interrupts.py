"""Interrupts without tracebacks or debris: a second SIGINT stops ``marft train`` at once with one
line (exit 130) and leaves no empty TensorBoard event file; the line a first signal logs says what
the stop will really do (after the last update the run just completes). Called from Python with
``argv``, ``cli.main`` lets the ``KeyboardInterrupt`` reach its caller (the grid relies on it)."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import marft_agents.model.loading as models
from agent_helpers import load_tiny_model, small_config
from marft_agents.config import config_to_dict
from marft_agents.run.session import StoppedAtOnce, stop_on_signals

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]


class FakeTrainer:
    stop_requested = None
    last_checkpoint = Path("runs/x/checkpoints/update_000003")

    def stop_outcome(self):
        return "the last update is running: the run completes it and its final evaluation"


def test_the_first_sigint_says_what_the_stop_does_and_the_second_stops_at_once(caplog):
    trainer = FakeTrainer()
    before = signal.getsignal(signal.SIGINT)
    with caplog.at_level(logging.WARNING, logger="marft_agents.run.session"):
        with pytest.raises(StoppedAtOnce, match=r"SIGINT again: stopped at once, without a new checkpoint "
                                                r"\(last checkpoint: runs/x/checkpoints/update_000003\)"):
            with stop_on_signals(trainer):
                signal.raise_signal(signal.SIGINT)
                assert trainer.stop_requested == "SIGINT"
                signal.raise_signal(signal.SIGINT)
    assert "SIGINT received: the last update is running: the run completes it" in caplog.text
    assert "stopping after the current update" not in caplog.text
    assert signal.getsignal(signal.SIGINT) is before  # the usual handler is back
    assert isinstance(StoppedAtOnce("x"), KeyboardInterrupt)  # what code that expects Ctrl-C catches


def test_what_a_stop_does_at_each_point_of_the_run(tmp_path):
    from agent_helpers import tiny_on_device
    from marft_agents.run.trainer import prepare_trainer

    with prepare_trainer(small_config(tmp_path, **{"schedule.num_updates": 2}),
                         model_and_tokenizer=tiny_on_device(seed=0, hidden_size=32, num_layers=1)) as trainer:
        assert trainer.stop_outcome() == "stopping before the next update, with a checkpoint"  # baseline eval
        trainer.in_update = 0
        assert trainer.stop_outcome() == "stopping after the current update, with a checkpoint"
        trainer.in_update = 1
        assert "the last update is running: the run completes it" in trainer.stop_outcome()
        trainer.in_update, trainer.counters["update"] = None, 2
        assert "every update is done: finishing the run" in trainer.stop_outcome()  # the final evaluation


def _config(tmp_path, **overrides):
    cfg = small_config(tmp_path, **{"eval.at_end": True, **overrides})
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(config_to_dict(cfg)))
    return path


def test_sigint_during_the_final_evaluation_lets_the_run_finish_and_says_so(tmp_path, monkeypatch, caplog, capsys):
    from marft_agents.cli import main
    from marft_agents.run.trainer import Trainer

    monkeypatch.setattr(models, "load_model_and_tokenizer", load_tiny_model)
    evaluate = Trainer.evaluate

    def interrupted_when_finished(self, progress=None):
        if self.finished:
            signal.raise_signal(signal.SIGINT)
        return evaluate(self, progress)

    monkeypatch.setattr(Trainer, "evaluate", interrupted_when_finished)
    with caplog.at_level(logging.WARNING, logger="marft_agents.run.session"):
        assert main(["train", "--config", str(_config(tmp_path)), "--quiet", "--no-tensorboard"]) == 0
    assert "SIGINT received: every update is done: finishing the run" in caplog.text
    assert "stopping after the current update" not in caplog.text
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert "eval_after" in summary and "stopped_by" not in summary
    assert "the run is complete, not stopped" in capsys.readouterr().out


SECOND_SIGINT = """
import os, signal, sys
sys.path.insert(0, {here!r})
import marft_agents.model.loading as models
from agent_helpers import load_tiny_model
from marft_agents.run.trainer import Trainer

models.load_model_and_tokenizer = load_tiny_model
evaluate = Trainer.evaluate

def pressed_twice(self, progress=None):  # Ctrl-C twice during the baseline evaluation
    os.kill(os.getpid(), signal.SIGINT)
    os.kill(os.getpid(), signal.SIGINT)
    return evaluate(self, progress)

Trainer.evaluate = pressed_twice
from marft_agents.cli import main
sys.argv = ["marft", "train", "--config", {config!r}, "--quiet"]
sys.exit(main())  # as the console script calls it
"""


def test_a_second_sigint_prints_one_line_and_leaves_no_empty_event_file(tmp_path):
    config = _config(tmp_path)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", SECOND_SIGINT.format(here=str(HERE), config=str(config))],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 130, done.stderr[-3000:]
    assert "Traceback" not in done.stderr and "KeyboardInterrupt" not in done.stderr, done.stderr[-3000:]
    assert "marft train: SIGINT again: stopped at once, without a new checkpoint (last checkpoint: none)" in done.stderr
    events = list((tmp_path / "run").glob("tb/**/events.out.tfevents*"))
    assert events == []  # nothing was logged: no event file either


def test_called_from_python_the_interrupt_reaches_the_caller(monkeypatch):
    import marft_agents.cli as cli

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "cmd_envs", interrupted)
    with pytest.raises(KeyboardInterrupt):
        cli.main(["envs"])
    monkeypatch.setattr(sys, "argv", ["marft", "envs"])
    assert cli.main() == cli.INTERRUPTED_EXIT  # as the command: one line instead
