"""Bad input to a team of different models (``models:``, ``agents:``, ``critic.model``) is one line,
before any model loads: :meth:`TrainConfig.validate` for what the config alone decides, and
:func:`marft_agents.env_check.check_before_loading` (``marft train``, ``marft eval``, ``marft
config --config``) for what needs the env's agents or files on disk (model folders, chat
templates, a frozen agent's fixed adapter) and for the team's layout (a critic that cannot read
its agents' tokens on one model, an engine that holds one model).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from agent_helpers import CLI_CONFIG, LETTERS_ID, no_model_load, small_config  # noqa: F401 (a fixture)
from marft_agents.config_schema import ConfigError
from marft_agents.env_check import check_before_loading
from marft_agents.model.source import ModelNotFoundError

OTHER = {"other": {"name_or_path": "tiny-other", "device": "cpu"}}
"""A second model: the name of no folder or alias; the checks that read files skip it."""


def team(tmp_path, **sections):
    """The Letters env's dual team (reasoner_0, actor_0): actor_0 on ``other``, or as ``sections`` set."""
    sections.setdefault("models", OTHER)
    sections.setdefault("agents", {"actor_0": {"model": "other"}})
    return small_config(tmp_path, **sections)


def one_line(err: pytest.ExceptionInfo) -> str:
    message = str(err.value)
    assert "\n" not in message, message
    return message


def refusal(cfg) -> str:
    """The one line ``check_before_loading`` refuses ``cfg`` with (it must refuse)."""
    with pytest.raises(ConfigError) as err:
        check_before_loading(cfg, model=False)
    return one_line(err)


def test_a_valid_team_passes_every_check(tmp_path, no_model_load):
    cfg = team(tmp_path)
    assert check_before_loading(cfg, model=False) == ["reasoner_0", "actor_0"]
    assert cfg.model_of("actor_0") == "other" and cfg.model_of("reasoner_0") == "default"


# -- TrainConfig.validate ------------------------------------------------------------------------
@pytest.mark.parametrize("sections, expected", [
    ({"agents": {"actor_0": {"model": "othr"}}}, "agents.actor_0.model 'othr' names no model; the team's models are "
                                                 "default, other; did you mean 'other'?"),
    ({"critic": {"model": "defualt"}}, "critic.model 'defualt' names no model; the team's models are default, other; "
                                       "did you mean 'default'?"),
    ({"agents": {"actor_0": {"trainable": False, "actor_lr": 1e-3}}}, "agents.actor_0 is frozen (trainable: false) "
                                                                      "but sets actor_lr"),
    ({"agents": {"actor_0": {"trainable": False, "lora": {"r": 4}}}}, "agents.actor_0 is frozen (trainable: false) "
                                                                      "but sets lora"),
    ({"agents": {"actor_0": {"adapter": "some/folder"}}}, "agents.actor_0.adapter is a frozen agent's fixed adapter"),
    ({"agents": {"actor_0": {"lora": {"rank": 4}}}}, "agents.actor_0.lora"),
    ({"models": {"default": {"name_or_path": "x"}}}, "models: 'default' cannot name a model"),
    ({"agents": {"actor_0": {"trainable": False}}, "ppo.train_agents": ["actor_0"]},
     "ppo.train_agents names frozen agents ['actor_0']"),
    ({"shared_adapter": True}, "shared_adapter: true gives every agent one adapter"),
])
def test_the_config_refuses_a_bad_team_in_one_line(tmp_path, sections, expected):
    with pytest.raises(ConfigError) as err:
        team(tmp_path, **sections)
    assert expected in one_line(err)


# -- check_before_loading: the env's agents ------------------------------------------------------
def test_an_agent_the_env_does_not_have_is_refused_with_the_close_one(tmp_path, no_model_load):
    line = refusal(team(tmp_path, agents={"reasonr_0": {"model": "other"}}))
    assert line.startswith(f"agents.reasonr_0: 'reasonr_0' is not an agent of {LETTERS_ID}")
    assert "its agents: reasoner_0, actor_0; did you mean 'reasoner_0'?" in line


@pytest.mark.parametrize("sections, expected", [
    ({"agents": {"actor_0": {"trainable": False}, "reasoner_0": {"trainable": False}}},
     "every agent is frozen (agents.<id>.trainable: false: actor_0, reasoner_0): nothing is left to train"),
    ({"agents": {"actor_0": {"trainable": False}},
      "scripted_seats": {"reasoner_0": "marft_envs.tasks.scripted_teams:relay_oracle_seat"}},
     "every agent is frozen (agents.<id>.trainable: false: actor_0) or scripted (scripted_seats: reasoner_0): "
     "nothing is left to train"),
])
def test_a_team_with_no_agent_left_to_train_is_refused(tmp_path, no_model_load, sections, expected):
    assert expected in refusal(team(tmp_path, **sections))
    # a learner that does not train may evaluate a frozen team
    assert check_before_loading(team(tmp_path, algorithm="eval_only", **sections), model=False)


# -- check_before_loading: the team's layout ---------------------------------------------------------
REMOVE_CRITIC_MODEL = ("this critic reads the acting agent's own tokens (critic.mode: local, or token-level values), "
                       "so in a team each model carries the critic of its own agents; remove critic.model")


@pytest.mark.parametrize("sections, expected", [
    ({"algorithm": "mappo_token", "critic": {"model": "other"}}, f"critic.model 'other': {REMOVE_CRITIC_MODEL}"),
    ({"critic": {"mode": "local", "model": "default"}}, f"critic.model 'default': {REMOVE_CRITIC_MODEL}"),
    ({"sampling": {"engine": "vllm", "max_new_tokens": 4}, "ppo.recompute_old_logprobs": True},
     "sampling.engine 'vllm' serves one base model per process, but the team runs on 2 (default, other)"),
])
def test_a_layout_no_team_can_run_is_refused_before_loading(tmp_path, no_model_load, sections, expected):
    assert expected in refusal(team(tmp_path, **sections))


def test_the_refused_layouts_run_without_critic_model_or_on_one_model(tmp_path, no_model_load):
    """Own-token critics pass with a critic on each model (no ``critic.model``), and with
    ``critic.model`` when every agent is on that model; vLLM passes on one model."""
    from marft_agents.team_layout import team_layout

    for sections in ({"algorithm": "mappo_token"}, {"critic": {"mode": "local"}}):
        cfg = team(tmp_path, **sections)
        assert check_before_loading(cfg, model=False)
        assert team_layout(cfg, ["reasoner_0", "actor_0"]).critic_of == {"reasoner_0": "default", "actor_0": "other"}
        cfg = team(tmp_path, agents={"actor_0": {"model": "other"}, "reasoner_0": {"model": "other"}},
                   **{**sections, "critic": {**sections.get("critic", {}), "model": "other"}})
        assert check_before_loading(cfg, model=False)
        assert not team_layout(cfg, ["reasoner_0", "actor_0"]).several
    cfg = team(tmp_path, agents={}, **{"sampling": {"engine": "vllm", "max_new_tokens": 4},
                                       "ppo.recompute_old_logprobs": True})
    assert check_before_loading(cfg, model=False)  # models: named but unused: one model


# -- check_before_loading: files -------------------------------------------------------------------
def test_a_model_folder_that_does_not_load_is_named(tmp_path, no_model_load):
    missing = tmp_path / "no-such-model"
    cfg = team(tmp_path, models={"other": {"name_or_path": str(missing)}})
    assert check_before_loading(cfg, model=False)  # marft config: the folder is the GPU machine's
    with pytest.raises(ModelNotFoundError) as err:
        check_before_loading(cfg, model=True)
    assert one_line(err).startswith(f"models.other.name_or_path: model folder {str(missing)!r} does not exist")
    missing.mkdir()  # a folder, but not a Hugging Face one
    with pytest.raises(ModelNotFoundError, match="models.other.name_or_path: .* has no config.json"):
        check_before_loading(cfg, model=True)


def _saved_tiny_model(folder: Path, tokenizer: str) -> Path:
    from marft_agents.model.tiny_models import tiny_model_and_tokenizer

    model, tok = tiny_model_and_tokenizer(seed=0, hidden_size=16, num_layers=1, arch="qwen2", tokenizer=tokenizer)
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


@pytest.mark.parametrize("where", ["model", "models.other"])
def test_a_local_tokenizer_without_a_chat_template_is_refused(tmp_path, no_model_load, where):
    folder = _saved_tiny_model(tmp_path / "m", "llama3")
    section = {"name_or_path": str(folder), "device": "cpu"}
    cfg = team(tmp_path, **({"model": section} if where == "model" else {"models": {"other": section}}))
    assert check_before_loading(cfg, model=False)  # saved with its template: it loads (read whatever `model` says)
    (folder / "chat_template.jinja").unlink()
    config = json.loads((folder / "tokenizer_config.json").read_text())
    assert "chat_template" not in config  # transformers keeps it in chat_template.jinja only
    assert refusal(cfg).startswith(f"{where}.name_or_path {str(folder)!r}: its tokenizer has no chat template")
    # the template kept the older way, in tokenizer_config.json, counts
    (folder / "tokenizer_config.json").write_text(json.dumps({**config, "chat_template": "{{ messages }}"}))
    assert check_before_loading(cfg, model=False)


def _adapter_folder(tmp_path: Path) -> Path:
    """A peft LoRA adapter folder of the tiny model (as ``save_pretrained`` writes it)."""
    from peft import LoraConfig, get_peft_model

    from marft_agents.model.tiny_models import tiny_model_and_tokenizer

    model, _ = tiny_model_and_tokenizer(seed=0, hidden_size=16, num_layers=1)
    peft_model = get_peft_model(model, LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj", "v_proj"]))
    folder = tmp_path / "adapter"
    peft_model.save_pretrained(folder)
    return folder


def test_a_frozen_agents_adapter_that_is_no_peft_adapter_is_refused(tmp_path, no_model_load):
    folder = _adapter_folder(tmp_path)
    frozen = lambda path: team(tmp_path, agents={"actor_0": {"model": "other", "trainable": False,  # noqa: E731
                                                             "adapter": str(path)}})
    assert check_before_loading(frozen(folder), model=False)  # a real one passes
    weights = next(folder.glob("adapter_model.*"))
    cases = [(tmp_path / "nowhere", "does not exist; expected a peft LoRA adapter folder"),
             (weights, "is a file; expected a peft LoRA adapter folder")]
    for path, expected in cases:
        assert refusal(frozen(path)) == f"agents.actor_0.adapter {str(path)!r} {expected}, e.g. a checkpoint's " \
                                        "models/<model>/policy_<agent>/"
    config_file = folder / "adapter_config.json"
    config = json.loads(config_file.read_text())
    config_file.write_text(json.dumps({**config, "peft_type": "PREFIX_TUNING"}))
    with pytest.raises(ConfigError, match="holds a PREFIX_TUNING adapter; marft loads LoRA adapters") as err:
        check_before_loading(frozen(folder), model=False)
    one_line(err)
    config_file.write_text("{not json")
    with pytest.raises(ConfigError, match="has no readable adapter_config.json"):
        check_before_loading(frozen(folder), model=False)
    config_file.write_text(json.dumps(config))
    weights.unlink()
    with pytest.raises(ConfigError, match="has adapter_config.json but no weights"):
        check_before_loading(frozen(folder), model=False)


# -- the commands ----------------------------------------------------------------------------------
def _cli_config(tmp_path, **sections) -> str:
    data = {**yaml.safe_load(yaml.safe_dump(CLI_CONFIG)), "models": OTHER, **sections,
            "output_dir": str(tmp_path / "run")}
    path = tmp_path / "team.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


@pytest.mark.parametrize("command", ["config", "train", "eval"])
def test_train_eval_and_config_refuse_a_bad_agent_id_in_one_line(tmp_path, capsys, no_model_load, command):
    from marft_agents.cli import main

    extra = ["--checkpoint", "none"] if command == "eval" else []
    path = _cli_config(tmp_path, agents={"solver_0": {"model": "other"}})  # the dual profile: reasoner_0, actor_0
    assert main([command, "--config", path, *extra]) == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"marft {command}: error: agents.solver_0: 'solver_0' is not an "
                                                   "agent of marft/Arithmetic-v0"), lines


def test_a_refused_team_layout_is_reported_before_torch_is_imported(tmp_path):
    """The layout check (``marft_agents.team_layout``) is plain data: ``marft config`` refuses
    MARFT-T's critic on one model of a team without importing torch (in a fresh interpreter)."""
    repo = Path(__file__).resolve().parents[2]
    path = _cli_config(tmp_path, algorithm="mappo_token", agents={"actor_0": {"model": "other"}},
                       critic={"model": "other"})
    script = ("import sys; from marft_agents.cli import main; code = main(sys.argv[1:]); "
              "print('exit', code, 'torch imported:', 'torch' in sys.modules)")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(repo)] + ([os.environ["PYTHONPATH"]]
                                                                      if os.environ.get("PYTHONPATH") else []))}
    done = subprocess.run([sys.executable, "-c", script, "config", "--config", path], capture_output=True, text=True,
                          env=env, cwd=tmp_path, timeout=120)
    assert done.stdout.strip().splitlines()[-1] == "exit 2 torch imported: False", (done.stdout, done.stderr)
    assert "remove critic.model" in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
