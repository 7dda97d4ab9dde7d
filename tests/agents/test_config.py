"""TrainConfig: YAML loading, strict keys and types, cross-field validation, field docs."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

import marft_envs
from marft_agents import config as C
from marft_agents.learners.registry import learner_trains


def test_defaults_validate_and_yaml_roundtrip(tmp_path):
    cfg = C.TrainConfig().validate()
    path = tmp_path / "run.yaml"
    import yaml

    path.write_text(yaml.safe_dump(C.config_to_dict(cfg)))
    assert C.load_config(path) == cfg


def test_yaml_sections_and_overrides(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text(
        "algorithm: mappo_token\n"
        "env: {id: marft/Arithmetic-v0, kwargs: {level: 2, profile: dual}}\n"
        "ppo: {gamma: 1, clip_eps_high: 0.28, credit: per_step}\n"
        "schedule: {num_updates: 7}\n"
    )
    cfg = C.load_config(path, overrides={"schedule.minibatch_size": 4, "env.kwargs.horizon": 2})
    assert cfg.algorithm == "mappo_token" and cfg.env.kwargs == {"level": 2, "profile": "dual", "horizon": 2}
    assert cfg.ppo.gamma == 1.0 and isinstance(cfg.ppo.gamma, float)  # int accepted for float
    assert cfg.ppo.clip_eps_high == 0.28 and cfg.ppo.credit == "per_step"
    assert cfg.schedule.num_updates == 7 and cfg.schedule.minibatch_size == 4
    assert cfg.schedule.ppo_epochs == C.ScheduleConfig().ppo_epochs  # untouched default


def test_unknown_key_names_it_and_lists_valid_keys():
    with pytest.raises(C.ConfigError) as err:
        C.config_from_dict({"ppo": {"clip_epsilon": 0.1}})
    msg = str(err.value)
    assert "ppo.clip_epsilon" in msg and "clip_eps" in msg and "valid keys" in msg
    with pytest.raises(C.ConfigError, match="unknown key 'learning_rate'.*valid keys: algorithm"):
        C.config_from_dict({"learning_rate": 1})


@pytest.mark.parametrize("data, expected", [
    ({"schedule": {"num_updates": "ten"}}, "schedule.num_updates must be int"),
    ({"schedule": {"num_updates": 2.5}}, "schedule.num_updates must be int"),
    ({"ppo": {"normalize_advantages": "yes"}}, "ppo.normalize_advantages must be bool"),
    ({"ppo": {"gamma": True}}, "ppo.gamma must be float"),
    ({"ppo": {"credit": "shapley"}}, "ppo.credit must be one of 'team'"),
    ({"ppo": {"target_kl": "x"}}, "ppo.target_kl must be float or null"),
    ({"env": {"kwargs": [1, 2]}}, "env.kwargs must be dict"),
    ({"env": "marft/MATH-v0"}, "env must be a mapping of EnvConfig fields"),
    ({"algorithm": "dqn"}, "unknown algorithm .dqn.; known learners: eval_only, grpo, mappo_action.*entry-point group"),
])
def test_wrong_type_says_expected_type(data, expected):
    with pytest.raises(C.ConfigError, match=expected):
        C.config_from_dict(data)


def test_cross_field_validation():
    with pytest.raises(C.ConfigError, match="shared_adapter"):
        C.config_from_dict({"shared_adapter": True, "ppo": {"agent_iteration_interval": 2}})
    with pytest.raises(C.ConfigError, match="minibatch_size must be >= 1"):
        C.config_from_dict({"schedule": {"minibatch_size": 0}})
    with pytest.raises(C.ConfigError, match="gamma must be in"):
        C.config_from_dict({"ppo": {"gamma": 1.5}})
    with pytest.raises(C.ConfigError, match="model.threads must be >= 0"):
        C.config_from_dict({"model": {"threads": -1}})
    with pytest.raises(C.ConfigError, match="does not exist"):
        C.load_config("/nonexistent/run.yaml")


def test_every_field_has_a_docstring():
    for cls in (C.TrainConfig, C.EnvConfig, C.PPOConfig, C.ScheduleConfig, C.EvalConfig):
        docs = C.field_docs(cls)
        missing = [f.name for f in dataclasses.fields(cls) if not docs.get(f.name)]
        assert not missing, f"{cls.__name__} fields without docstring: {missing}"


def test_policy_owned_sections_load_and_their_own_checks_become_config_errors():
    from marft_agents.settings.lora import LoraSpec

    cfg = C.config_from_dict({"lora": {"r": 4, "target_modules": ["q_proj", "v_proj"]},
                              "critic": {"mode": "per_agent", "lora": {"r": 2}},
                              "sampling": {"max_new_tokens": 16, "stop_token_ids": [2]}})
    assert cfg.lora.target_modules == ("q_proj", "v_proj") and isinstance(cfg.critic.lora, LoraSpec)
    assert cfg.critic.lora.r == 2 and cfg.sampling.stop_token_ids == (2,)
    with pytest.raises(C.ConfigError, match="lora: LoRA rank r must be >= 1"):
        C.config_from_dict({"lora": {"r": 0}})
    with pytest.raises(C.ConfigError, match="critic.centralised was replaced by critic.mode.*mode: per_agent"):
        C.config_from_dict({"critic": {"centralised": False}})
    with pytest.raises(C.ConfigError, match="critic.mode must be one of"):
        C.config_from_dict({"critic": {"mode": "global"}})
    with pytest.raises(C.ConfigError, match="sampling.temperature must be float"):
        C.config_from_dict({"sampling": {"temperature": "hot"}})


def test_time_budget_must_be_positive():
    from marft_agents.config import ConfigError, load_config

    assert load_config({"schedule": {"time_budget_s": 60}}).schedule.time_budget_s == 60
    with pytest.raises(ConfigError, match="time_budget_s"):
        load_config({"schedule": {"time_budget_s": 0}})


@pytest.mark.parametrize("path", sorted((Path(__file__).resolve().parents[2] / "baselines" / "configs").glob("*.yaml")),
                         ids=lambda p: p.stem)
def test_every_shipped_config_loads_and_validates(path):
    cfg = C.load_config(path)
    assert cfg.env.id in marft_envs.list_envs()
    if cfg.model.dtype != "float32" and learner_trains(cfg.algorithm):
        # see Trainer: PPO ratios must start at 1
        assert cfg.ppo.recompute_old_logprobs or cfg.sampling.recompute_logprobs


@pytest.mark.parametrize("native, expected", [(True, "bfloat16"), (False, "float32")])
def test_auto_dtype_is_resolved_before_the_model_loads_to_what_the_cpu_runs_natively(monkeypatch, native, expected):
    from marft_agents.model import loading as models
    monkeypatch.setattr(models, "cpu_bf16", lambda: models.CpuBf16(native, "as the test says"))
    cfg = C.config_from_dict({"model": {"dtype": "auto", "device": "auto"}})
    assert (cfg.model.dtype, cfg.model.device) == ("auto", "auto")  # validation is plain data: no device probe
    assert cfg.resolve_hardware() is cfg
    assert (cfg.model.dtype, cfg.model.device) == (expected, "cpu")  # the record names what the run used
    explicit = C.config_from_dict({"model": {"dtype": "float32", "device": "cpu"}}).resolve_hardware()
    assert (explicit.model.dtype, explicit.model.device) == ("float32", "cpu")  # explicit wins


@pytest.mark.parametrize("device, expected", [
    ("cuda0", "did you mean 'cuda:0'"), ("gpu", "did you mean 'cuda'"), ("CUDA", "did you mean 'cuda'"),
    ("cuda:x", "torch device string")])
def test_a_malformed_device_is_refused_at_validation(device, expected):
    with pytest.raises(C.ConfigError, match=expected):
        C.config_from_dict({"model": {"device": device}})


def test_a_device_torch_does_not_know_is_refused_when_resolved():
    cfg = C.config_from_dict({"model": {"device": "nosuchdevice"}})  # shaped like one: torch decides
    with pytest.raises(C.ConfigError, match="model.device must be 'auto' or a torch device string"):
        cfg.resolve_hardware()
