"""Every user error of ``marft`` is one line on stderr with exit status 2, before a model loads."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from agent_helpers import CLI_CONFIG, no_model_load  # noqa: F401 (a fixture)
from marft_agents.cli import main

REPO = Path(__file__).resolve().parents[2]
GOOD = CLI_CONFIG


def _config(tmp_path: Path, text: str | None = None, **changes) -> str:
    data = yaml.safe_load(yaml.safe_dump(GOOD))
    for dotted, value in changes.items():
        node = data
        *parents, last = dotted.split("__")
        for key in parents:
            node = node.setdefault(key, {})
        node[last] = value
    data["output_dir"] = str(tmp_path / "run")
    path = tmp_path / "run.yaml"
    path.write_text(text if text is not None else yaml.safe_dump(data))
    return str(path)


def _one_line_error(capsys, code: int, *expected: str) -> str:
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2, err
    assert len(lines) == 1, err
    assert "Traceback" not in err
    for text in expected:
        assert text in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize("changes, expected", [
    ({"env__kwargs__levle": 2}, ["'levle'", "did you mean 'level'"]),
    ({"env__kwargs__level": 99}, ["unknown arithmetic level 99"]),
    ({"env__kwargs__horizon": 0}, ["horizon must be a positive int"]),
    ({"model__dtype": "bf16"}, ["model.dtype", "did you mean 'bfloat16'"]),
    ({"schedule__actor_lr": -1e-4}, ["schedule.actor_lr must be >= 0"]),
    ({"algorithm": "ppo", "env__kwargs__profile": "trio"}, ["single-agent", "3 agents", "profile"]),
    ({"eval__env_kwargs": {"split": "validation"}}, ["eval.env_kwargs"]),
])
def test_train_config_errors_are_one_line_before_the_model_loads(tmp_path, capsys, no_model_load, changes, expected):
    code = main(["train", "--config", _config(tmp_path, **changes), "--no-tensorboard"])
    _one_line_error(capsys, code, "marft train: error:", *expected)


def test_broken_yaml_is_one_line_with_its_position(tmp_path, capsys, no_model_load):
    path = _config(tmp_path, text="schedule: {num_updates: 3\nenv: [\n")
    _one_line_error(capsys, main(["train", "--config", path]), "not valid YAML", "line")


def test_eval_rejects_a_non_positive_n(tmp_path, capsys, no_model_load):
    code = main(["eval", "--config", _config(tmp_path), "--n", "-2"])
    _one_line_error(capsys, code, "--n", "expected a whole number >= 1, got -2")


def test_eval_without_a_checkpoint_says_how_to_fix_it(tmp_path, capsys, no_model_load):
    code = main(["eval", "--config", _config(tmp_path)])
    _one_line_error(capsys, code, "no checkpoint in", "--checkpoint none")


def test_debug_shows_the_traceback(tmp_path, no_model_load):
    with pytest.raises(Exception, match="did you mean 'bfloat16'"):
        main(["--debug", "train", "--config", _config(tmp_path, model__dtype="bf16")])
    with pytest.raises(Exception, match="did you mean 'bfloat16'"):
        main(["train", "--debug", "--config", _config(tmp_path, model__dtype="bf16")])


def test_the_real_command_prints_one_line_and_exits_2(tmp_path):
    # keep an inherited PYTHONPATH: where the dependencies come from one (no venv), the command needs it
    path = os.pathsep.join([str(REPO)] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else []))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": path}
    done = subprocess.run([sys.executable, "-m", "marft_agents.cli", "train", "--config",
                           _config(tmp_path, env__kwargs__levle=2)], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=300)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().count("\n") == 0 and "did you mean 'level'" in done.stderr, done.stderr


def test_learning_rates_written_as_researchers_write_them(tmp_path):
    from marft_agents.cli_args import parse_overrides
    from marft_agents.config import load_config

    path = _config(tmp_path, text="schedule: {actor_lr: 5e-4, critic_lr: 1e-3}\n")
    cfg = load_config(path)
    assert cfg.schedule.actor_lr == 5e-4 and cfg.schedule.critic_lr == 1e-3  # YAML 1.1 read strings
    cfg = load_config(path, parse_overrides(["schedule.actor_lr=5e-5", "ppo.clip_eps=2E-1"]))
    assert cfg.schedule.actor_lr == 5e-5 and isinstance(cfg.schedule.actor_lr, float) and cfg.ppo.clip_eps == 0.2


def test_config_show_lists_every_key_with_type_default_and_doc(capsys):
    from marft_agents.config import TrainConfig, describe_config

    assert main(["config", "--show"]) == 0
    out = capsys.readouterr().out
    keys = [key for key, *_ in describe_config(TrainConfig())]
    assert "schedule.actor_lr" in keys and "env.kwargs" in keys and "model.dtype" in keys
    for key in keys:
        assert f"\n{key}: " in f"\n{out}", key
    assert "schedule.actor_lr: float (default: 5e-05)" in out
    assert "AdamW learning rate of every policy adapter." in out
