"""``marft config --config`` runs the checks ``marft train`` and ``marft eval`` run before a model
loads (one function, :func:`marft_agents.env_check.check_before_loading`), and bad checkpoint
paths or model names stop before the model loader is called."""

from __future__ import annotations

import pytest
import yaml

import marft_agents.env_check as env_check
from agent_helpers import CLI_CONFIG, no_model_load  # noqa: F401 (a fixture)
from marft_agents.cli import main
from marft_agents.config_schema import ConfigError

GOOD = CLI_CONFIG


def _config(tmp_path, **sections) -> str:
    data = yaml.safe_load(yaml.safe_dump(GOOD))
    for section, value in sections.items():
        if isinstance(value, dict) and isinstance(data.get(section), dict):
            data[section].update(value)
        else:
            data[section] = value
    data["output_dir"] = str(tmp_path / "run")
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def _error_line(capsys) -> str:
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    return lines[0]


@pytest.mark.parametrize("sections, expected", [
    # eval.env_kwargs on top of env.kwargs, rejected by the env (the paper config's mistake)
    ({"eval": {"env_kwargs": {"level": 99}}}, "eval.env_kwargs"),
    ({"init_adapters": "no/such/run"}, "init_adapters 'no/such/run' does not exist"),
    ({"scripted_seats": {"coach_0": "marft_envs.tasks.scripted_teams:relay_oracle_seat"}}, "not agents of this env"),
])
@pytest.mark.parametrize("command", ["config", "train", "eval"])
def test_config_train_and_eval_refuse_the_same_config_in_one_line(tmp_path, capsys, no_model_load, command,
                                                                   sections, expected):
    extra = ["--checkpoint", "none"] if command == "eval" else []
    assert main([command, "--config", _config(tmp_path, **sections), *extra]) == 2
    line = _error_line(capsys)
    assert line.startswith(f"marft {command}: error:") and expected in line, line


def test_train_eval_and_config_call_one_shared_check(tmp_path, capsys, monkeypatch, no_model_load):
    calls = []

    def spy(cfg, *, model=True):
        calls.append(model)
        raise ConfigError("the shared check ran")

    monkeypatch.setattr(env_check, "check_before_loading", spy)
    path = _config(tmp_path)
    for command in (["train"], ["eval", "--checkpoint", "none"], ["config"]):
        assert main([command[0], "--config", path, *command[1:]]) == 2
        assert "the shared check ran" in _error_line(capsys)
    # train and eval also check that the model can load here; config does not (a GPU config's model)
    assert calls == [True, True, False]


def test_config_of_a_valid_file_passes_and_says_so(tmp_path, capsys):
    assert main(["config", "--config", _config(tmp_path)]) == 0
    assert "valid (the checks marft train and marft eval run" in capsys.readouterr().err


def test_a_bad_eval_checkpoint_path_stops_before_the_model_loads(tmp_path, capsys, no_model_load, monkeypatch):
    from marft_agents.config import TrainConfig

    def no_probe(self):
        raise AssertionError("resolve_hardware (torch, the dtype probe) ran before the path was checked")

    monkeypatch.setattr(TrainConfig, "resolve_hardware", no_probe)
    assert main(["eval", "--config", _config(tmp_path), "--checkpoint", str(tmp_path / "nope")]) == 2
    assert "does not exist; expected a checkpoint folder" in _error_line(capsys)
    (tmp_path / "empty").mkdir()
    assert main(["eval", "--config", _config(tmp_path), "--checkpoint", str(tmp_path / "empty")]) == 2
    assert "without adapters.pt or checkpoints" in _error_line(capsys)


def test_a_bad_score_checkpoint_path_stops_before_the_model_loads(tmp_path, capsys, no_model_load):
    code = main(["score", "--policy", _config(tmp_path), "--checkpoint", str(tmp_path / "nope"),
                 "--records", str(tmp_path / "records")])
    assert code == 2
    assert "--checkpoint" in _error_line(capsys)
    assert not (tmp_path / "records").exists()


@pytest.mark.parametrize("command", [["train"], ["eval", "--checkpoint", "none"], ["score"]])
def test_an_unreachable_hub_id_fails_in_one_line_without_loading(tmp_path, capsys, monkeypatch, no_model_load,
                                                                  command):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-cache"))  # an empty cache
    path = _config(tmp_path, model={"name_or_path": "some-lab/no-such-model"})
    argv = ["score", "--policy", path] if command == ["score"] else [command[0], "--config", path, *command[1:]]
    assert main(argv) == 2
    line = _error_line(capsys)
    assert "'some-lab/no-such-model' is neither an alias" in line and "HF_HUB_OFFLINE is set" in line, line


def test_a_cached_hub_id_passes_the_model_check(tmp_path, monkeypatch):
    from marft_agents.model.source import check_model_source
    from marft_agents.settings.model import ModelConfig

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    import huggingface_hub.constants as hub_constants

    monkeypatch.setattr(hub_constants, "HF_HUB_CACHE", str(tmp_path))
    snapshot = tmp_path / "models--some-lab--cached-model" / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    refs = tmp_path / "models--some-lab--cached-model" / "refs"
    refs.mkdir()
    (refs / "main").write_text("abc123")
    check_model_source(ModelConfig(name_or_path="some-lab/cached-model"))  # no error: it is in the cache
    with pytest.raises(FileNotFoundError, match="neither an alias"):
        check_model_source(ModelConfig(name_or_path="some-lab/other-model"))


def test_config_notes_a_model_that_is_not_on_this_machine(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    assert main(["config", "--config", _config(tmp_path, model={"name_or_path": "some-lab/no-such-model"})]) == 0
    assert "note: not loadable on this machine" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [
    ["eval", "--checkpoint", "{tmp}/no-such-run"],
    ["score", "--checkpoint", "{tmp}/no-such-run"],
    ["train", "--set", "model.name_or_path=some-lab/no-such-model"],
    ["eval", "--checkpoint", "none", "--set", "model.name_or_path=some-lab/no-such-model"],
])
def test_a_bad_checkpoint_or_model_is_reported_before_torch_is_imported(tmp_path, argv):
    """What makes these fast: the answer comes before torch (seconds to import on a busy machine),
    the dtype probe and the model loader; checked in a fresh interpreter, not by the clock."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    config = _config(tmp_path)
    words = [w.format(tmp=tmp_path) for w in argv]
    words[1:1] = ["--policy", config] if words[0] == "score" else ["--config", config]
    script = ("import sys; from marft_agents.cli import main; code = main(sys.argv[1:]); "
              "print('exit', code, 'torch imported:', 'torch' in sys.modules)")
    path = os.pathsep.join([str(repo)] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else []))
    env = {**os.environ, "PYTHONPATH": path, "HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(tmp_path / "hf-cache")}
    done = subprocess.run([sys.executable, "-c", script, *words], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=120)
    assert done.stdout.strip().splitlines()[-1] == "exit 2 torch imported: False", (done.stdout, done.stderr)
    assert len([line for line in done.stderr.splitlines() if "error:" in line]) == 1, done.stderr
