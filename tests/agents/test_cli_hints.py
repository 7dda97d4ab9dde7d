"""Every command the ``marft`` CLI prints for the user to run next works as printed: each test
takes the printed command, runs it (through the CLI's own parser, ``make -n``, or for real), and
checks it does what the hint says. Also: typos answered with the nearest valid name, and output
cut short by its reader ending without a traceback."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

import marft_agents.model.loading as models
import marft_agents.run.session as session
from agent_helpers import load_tiny_model, small_config
from marft_agents import hints
from marft_agents.cli import build_parser, main
from marft_agents.config import config_to_dict

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def tiny_loader(monkeypatch):
    monkeypatch.setattr(models, "load_model_and_tokenizer", load_tiny_model)


@pytest.fixture
def outside_make(monkeypatch):
    monkeypatch.delenv("MAKELEVEL", raising=False)  # `make test` runs the tests under make


def _config(tmp_path: Path, **overrides) -> Path:
    cfg = small_config(tmp_path, **{"eval.at_end": False, **overrides})
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(config_to_dict(cfg)))
    return path


def _quoted(text: str) -> list[str]:
    """The commands between backticks in ``text``."""
    return re.findall(r"`([^`]+)`", text)


def _marft_argv(command: str) -> list[str]:
    """The arguments of a printed ``marft ...`` command (after the program), checked by the parser."""
    words = shlex.split(command)
    assert words[0] == "marft", command
    build_parser().parse_args(words[1:])  # accepted as printed (exits on a bad flag)
    return words[1:]


def _updates(tmp_path: Path) -> int:
    return json.loads((tmp_path / "run" / "summary.json").read_text())["counters"]["update"]


def test_the_stop_hint_continues_the_run_as_printed(tmp_path, tiny_loader, outside_make, capsys, monkeypatch):
    path = _config(tmp_path, **{"schedule.num_updates": 3})
    log = session.MetricsLogger.log

    def interrupt_after_the_first_update(self, step, metrics):
        log(self, step, metrics)
        if step == 1:
            signal.raise_signal(signal.SIGINT)  # Ctrl-C during the run

    monkeypatch.setattr(session.MetricsLogger, "log", interrupt_after_the_first_update)
    argv = ["train", "--config", str(path), "--set", "schedule.checkpoint_interval=1", "--quiet", "--no-tensorboard"]
    assert main(argv) == 128 + signal.SIGINT
    line = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("stopped by SIGINT"))
    [command] = _quoted(line)
    resumed = _marft_argv(command)
    assert "--resume" in resumed and "--config" in resumed and "schedule.checkpoint_interval=1" in resumed
    monkeypatch.setattr(session.MetricsLogger, "log", log)
    assert main(resumed) == 0  # pasted: continues to the end
    assert _updates(tmp_path) == 3


def test_under_make_the_stop_hint_is_the_make_target(tmp_path, monkeypatch):
    monkeypatch.setenv("MAKELEVEL", "1")
    assert hints.resume_hint(hints.MAKE_DEMO_CONFIG).startswith("`make demo RESUME=1`")
    [plain] = _quoted(hints.resume_hint(str(tmp_path / "my run.yaml")))  # make would split the path
    assert _marft_argv(plain)[-1] == "--resume"
    make_form, plain = _quoted(hints.resume_hint(str(tmp_path / "my_run.yaml")))
    assert _marft_argv(plain)[-1] == "--resume"
    # What make runs for the printed target (-n: print, run nothing): marft train with --resume.
    words = shlex.split(make_form)
    done = subprocess.run([*words[:1], "-n", "-C", str(REPO), *words[1:]], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    [train] = [line for line in done.stdout.splitlines() if "marft train" in line]
    argv = shlex.split(train)[1:]
    args = build_parser().parse_args(argv)
    assert args.resume and args.config == str(tmp_path / "my_run.yaml")


def test_an_unfinished_run_is_refused_with_the_command_that_continues_it(tmp_path, tiny_loader, outside_make,
                                                                        capsys, monkeypatch):
    path = _config(tmp_path)
    assert main(["train", "--config", str(path), "--quiet", "--no-tensorboard", "--no-eval-before"]) == 0
    capsys.readouterr()
    longer = ["train", "--config", str(path), "--quiet", "--no-tensorboard", "--set", "schedule.num_updates=3"]
    assert main(longer) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "already holds checkpoints" in err, err
    resume, remove = _quoted(err)
    assert main(_marft_argv(resume)) == 0  # pasted: the run goes on to update 3
    assert _updates(tmp_path) == 3
    assert shlex.split(remove) == ["rm", "-r", str(tmp_path / "run")]


def test_a_finished_run_is_refused_with_how_to_start_over(tmp_path, tiny_loader, outside_make, capsys):
    path = _config(tmp_path)
    argv = ["train", "--config", str(path), "--quiet", "--no-tensorboard", "--no-eval-before"]
    assert main(argv) == 0
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "holds a finished run" in err and "--resume" not in _quoted(err)[0], err
    [remove] = _quoted(err)
    words = shlex.split(remove)
    assert words[:2] == ["rm", "-r"]
    subprocess.run(words, check=True, timeout=60)  # pasted: the folder goes
    assert main(argv) == 0  # and the run starts over


def test_under_make_a_finished_run_names_make_clean_runs(tmp_path, monkeypatch):
    monkeypatch.setenv("MAKELEVEL", "1")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs" / "demo").mkdir(parents=True)
    hint = hints.start_over_hint("runs/demo")
    make_form, remove = _quoted(hint)
    assert make_form == "make clean-runs" and shlex.split(remove) == ["rm", "-r", "runs/demo"]
    # The target, run as make would from the checkout (-f: here, in a scratch folder): runs/ goes.
    subprocess.run(["make", "-s", "-f", str(REPO / "Makefile"), "clean-runs"], check=True, timeout=60,
                   env={**os.environ, "MAKELEVEL": ""})
    assert not (tmp_path / "runs").exists()
    assert "make clean-runs" not in hints.start_over_hint(str(tmp_path / "elsewhere"))  # not under runs/


def test_the_install_hint_fits_a_checkout_and_an_installed_package(tmp_path):
    command = hints.install_agents_hint(cwd=REPO)
    assert command == "pip install -e '.[agents]'"
    words = shlex.split(hints.install_agents_hint(cwd=tmp_path))
    assert words[:4] == ["pip", "install", "-e", f"{REPO}[agents]"]
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["name"] == "marft" and "agents" in project["optional-dependencies"]
    (tmp_path / "marft_agents").mkdir()  # a site-packages: no marft pyproject.toml beside the package
    assert hints.install_agents_hint(root=tmp_path) == "pip install 'marft[agents]'"


def test_the_program_is_named_as_it_can_be_called(tmp_path, monkeypatch):
    script = tmp_path / "bin" / "marft"
    script.parent.mkdir()
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", "/nonexistent")
    assert hints.program(str(script)) == ["./bin/marft"]  # called by path, not on the PATH
    monkeypatch.setenv("PATH", str(script.parent))
    assert hints.program(str(script)) == ["marft"]
    assert hints.program("-c") == ["marft"]  # main() called from Python


@pytest.mark.parametrize("argv, expected", [
    (["train", "--confg", "run.yaml"], "unrecognized option '--confg'; did you mean '--config'?"),
    (["train", "--config", "run.yaml", "--reusme"], "unrecognized option '--reusme'; did you mean '--resume'?"),
    (["eval", "--config", "run.yaml", "--chekpoint", "best"], "did you mean '--checkpoint'?"),
    (["trian", "--config", "run.yaml"], "invalid choice: 'trian'"),
    (["trian", "--config", "run.yaml"], "did you mean 'train'?"),
])
def test_a_misspelt_option_is_named_with_the_nearest_one(capsys, argv, expected):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and expected in err, err
    assert "required" not in err


def test_a_misspelt_set_key_gets_the_nearest_key(tmp_path, capsys):
    path = _config(tmp_path)
    assert main(["train", "--config", str(path), "--set", "schedule.actor_lrr=1e-4"]) == 2
    err = capsys.readouterr().err
    assert "unknown key 'schedule.actor_lrr'" in err and "did you mean 'schedule.actor_lr'?" in err


@pytest.mark.parametrize("argv", [["config", "--show"], ["envs", "--verbose"]])
def test_output_cut_short_by_its_reader_ends_quietly(argv):
    # `marft ... | head -1`, with a reader that is gone before the output is written
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    read, write = os.pipe()
    os.close(read)
    with os.fdopen(write, "wb") as closed:
        done = subprocess.run([sys.executable, "-m", "marft_agents.cli", *argv], stdout=closed, stderr=subprocess.PIPE,
                              text=True, env=env, cwd=REPO, timeout=120)
    assert done.stderr == "" and done.returncode == 141
