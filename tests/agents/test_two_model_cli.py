"""A team of two models from model folders on disk, end to end through the ``marft`` command:
train, resume, eval from a checkpoint and ``marft score``, loading each model once with its own
tokenizer (no loader patched)."""

from __future__ import annotations

import json

import pytest
import torch
import yaml

from agent_helpers import small_config
from marft_agents.cli import main
from marft_agents.config import config_to_dict
from marft_agents.model.tiny_models import tiny_model_and_tokenizer


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """A tiny Llama (ChatML tokenizer) and a tiny Qwen2 (Llama-3 tokenizer) saved as model folders."""
    root = tmp_path_factory.mktemp("models")
    out = {}
    for name, kwargs in (("llama", {"seed": 0, "hidden_size": 32}),
                         ("qwen2", {"seed": 1, "hidden_size": 48, "arch": "qwen2", "tokenizer": "llama3"})):
        model, tokenizer = tiny_model_and_tokenizer(num_layers=1, **kwargs)
        model.save_pretrained(root / name)
        tokenizer.save_pretrained(root / name)
        out[name] = root / name
    return out


def _config(tmp_path, folders, **overrides):
    cfg = small_config(tmp_path, **{
        "algorithm": "mappo_action", "model.name_or_path": str(folders["llama"]), "model.dtype": "float32",
        "models": {"solver": {"name_or_path": str(folders["qwen2"]), "dtype": "float32", "device": "cpu"}},
        "agents": {"actor_0": {"model": "solver", "actor_lr": 5e-3}}, "eval.at_end": True, **overrides})
    path = tmp_path / "team.yaml"
    path.write_text(yaml.safe_dump(config_to_dict(cfg)))
    return path


def test_train_resume_eval_and_score_a_two_model_team(tmp_path, folders, capsys, caplog):
    path = _config(tmp_path, folders)
    caplog.set_level("INFO")
    assert main(["train", "--config", str(path), "--quiet", "--no-tensorboard", "--set", "schedule.num_updates=1"]) == 0
    team_lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("team: ")]
    assert len(team_lines) == 2 and "reasoner_0 + critic critic" in team_lines[0] and team_lines[1].endswith(": actor_0")
    assert "float32 on cpu" in team_lines[1] and str(folders["qwen2"]) in team_lines[1]
    assert main(["train", "--config", str(path), "--quiet", "--no-tensorboard", "--resume"]) == 0
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["counters"]["update"] == 2
    ckpt = tmp_path / "run" / "checkpoints" / "update_000002"
    assert (ckpt / "models" / "solver" / "policy_actor_0" / "adapter_model.safetensors").is_file()
    capsys.readouterr()
    assert main(["eval", "--config", str(path), "--checkpoint", str(ckpt)]) == 0
    assert f"loaded adapters from {ckpt}" in capsys.readouterr().out
    records = tmp_path / "records"
    assert main(["score", "--policy", str(path), "--checkpoint", str(ckpt), "--n", "2", "--records", str(records)]) == 0
    (record_file,) = records.glob("*.json")
    record = json.loads(record_file.read_text())
    assert record["agent_models"] == {"reasoner_0": str(folders["llama"]), "actor_0": str(folders["qwen2"])}
    adapters = torch.load(ckpt / "adapters.pt")
    assert adapters["lora/policy_actor_0/base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"].shape[1] == 48


def test_a_model_folder_without_a_chat_template_is_one_line(tmp_path, folders, capsys):
    from marft_agents.model.tiny_models import tiny_model_and_tokenizer as tiny

    model, tokenizer = tiny(seed=2, hidden_size=32, num_layers=1)
    tokenizer.chat_template = None
    model.save_pretrained(tmp_path / "plain")
    tokenizer.save_pretrained(tmp_path / "plain")
    for leftover in (tmp_path / "plain").glob("chat_template*"):
        leftover.unlink()
    path = _config(tmp_path, folders, **{"models.solver.name_or_path": str(tmp_path / "plain")})
    capsys.readouterr()  # save_pretrained's progress bars
    assert main(["train", "--config", str(path), "--quiet", "--no-tensorboard"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "chat template" in err[0] and "plain" in err[0]


def test_marft_config_notes_each_team_model_this_machine_cannot_load(tmp_path, folders, capsys):
    path = _config(tmp_path, folders, **{"models.solver.name_or_path": str(tmp_path / "nowhere" / "qwen")})
    assert main(["config", "--config", str(path)]) == 0
    err = capsys.readouterr().err
    assert "note: not loadable on this machine: models.solver:" in err and "nowhere" in err
    assert f"{path}: valid" in err
