"""The run plan (``marft_agents/run_plan.py``): each cross-field decision is made in one function,
and every consumer follows it. Each test replaces one decision function by one that answers
otherwise than the config would, and checks the learner, the trainer (its policy's critic, the
collector it builds) and the data-parallel split all act on the replaced answer."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from agent_helpers import small_config, tiny_on_device
from marft_agents import run_plan
from marft_agents.config_schema import ConfigError
from marft_agents.run.trainer import Trainer
from marft_agents.runtime import distributed


def _trainer(tmp_path, **sections) -> Trainer:
    """A Trainer of the tiny random model (a fresh one: each builds its adapters on it)."""
    return Trainer(small_config(tmp_path, **sections),
                   model_and_tokenizer=tiny_on_device(seed=0, hidden_size=32, num_layers=1))


def test_the_plan_is_frozen_and_resolves_auto(tmp_path):
    plan = small_config(tmp_path, **{"schedule.episodes_per_update": 8}).plan()
    assert (plan.baseline, plan.critic_values, plan.group_size) == ("group", None, 4)
    with pytest.raises(AttributeError):
        plan.group_size = 2  # type: ignore[misc]
    grpo = small_config(tmp_path, algorithm="grpo", learner={"group_size": 2}).plan()
    assert (grpo.baseline, grpo.critic_values, grpo.group_size, grpo.builds_critic) == ("critic", None, 2, False)


def test_the_group_size_is_decided_once(tmp_path, monkeypatch):
    # config: mappo_action, 4 episodes per update, critic baseline: groups of 1 (4 is not >= 2 * 4)
    sections = {"schedule.episodes_per_update": 4, "advantage.baseline": "critic"}
    assert small_config(tmp_path, **sections).plan().group_size == 1
    monkeypatch.setattr(run_plan, "decide_group_size", lambda *args, **kwargs: 2)
    trainer = _trainer(tmp_path, **sections)
    assert trainer.plan.group_size == trainer.learner.group_size == trainer.collector.group_size == 2

    def two_ranks(episodes_per_update: int) -> SimpleNamespace:
        cfg = small_config(tmp_path, **{**sections, "schedule.episodes_per_update": episodes_per_update})
        return SimpleNamespace(world=SimpleNamespace(world_size=2, rank=0), cfg=cfg, plan=trainer.plan, learner=object())

    with pytest.raises(ConfigError, match=r"group_size \(2\) times the number of ranks \(2\) = 4"):
        distributed.attach(two_ranks(2))  # groups of 1 would split 2 episodes over 2 ranks
    with pytest.raises(ConfigError, match="does not support data-parallel"):  # past the group check
        distributed.attach(two_ranks(4))
    rollout = trainer.collector.collect(4)
    assert len({rollout.decisions[i].group for e in rollout.episodes for i in e.decisions}) == 2


def test_the_baseline_is_decided_once(tmp_path, monkeypatch):
    sections = {"schedule.episodes_per_update": 4, "schedule.group_size": 2, "advantage.baseline": "critic"}
    monkeypatch.setattr(run_plan, "decide_baseline", lambda *args, **kwargs: "group")
    trainer = _trainer(tmp_path, **sections)
    assert trainer.cfg.advantage.baseline == trainer.learner.baseline == trainer.plan.baseline == "group"
    # the critic follows the baseline: none built, valued, collected or optimised
    assert trainer.learner.critic_values is None and trainer.learner.value_fit is None
    assert trainer.policy.critic_config is None and trainer.collector.values is None
    assert not any(name.startswith("critic") for name in trainer.learner.optimizers)


def test_the_critic_is_decided_once(tmp_path, monkeypatch):
    sections = {"schedule.episodes_per_update": 4, "advantage.baseline": "critic"}
    built = _trainer(tmp_path / "with", **sections)
    assert built.policy.critic_config is not None and built.collector.values == "state"
    monkeypatch.setattr(run_plan, "decide_critic", lambda *args, **kwargs: None)
    trainer = _trainer(tmp_path / "without", **sections)
    assert trainer.plan.critic_values is None and trainer.learner.critic_values is None
    assert trainer.learner.value_fit is None and trainer.policy.critic_config is None
    assert trainer.collector.values is None
    assert not any(name.startswith("critic") for name in trainer.learner.optimizers)


def test_the_rescoring_is_decided_once(tmp_path, monkeypatch):
    from marft_agents.learners.base import BaseLearner

    rescored: list[int] = []
    monkeypatch.setattr(BaseLearner, "_rescore_old_logprobs", lambda self, batches: rescored.append(len(batches)))
    sections = {"schedule.episodes_per_update": 2, "schedule.num_updates": 1, "advantage.baseline": "critic"}
    next(_trainer(tmp_path / "off", **sections).run())
    assert rescored == []  # ppo.recompute_old_logprobs: false
    monkeypatch.setattr(run_plan, "decide_rescoring", lambda *args, **kwargs: (True, False))
    trainer = _trainer(tmp_path / "on", **sections)
    assert trainer.plan.rescores_old_logprobs and trainer.learner.plan.rescores_old_logprobs
    metrics = next(trainer.run())
    assert len(rescored) == 1 and "rollout/behaviour_logprob_gap" in metrics  # once, before the first epoch


def test_a_learner_that_sets_its_own_group_size_is_refused(tmp_path, monkeypatch):
    from marft_agents.learners.mappo_action import ActionLevelMAPPO

    original = ActionLevelMAPPO.__init__

    def own_size(self, *args):
        original(self, *args)
        self.group_size = 2

    monkeypatch.setattr(ActionLevelMAPPO, "__init__", own_size)
    with pytest.raises(ConfigError, match="has group_size 2, but the run plan .* says 1"):
        _trainer(tmp_path, **{"schedule.episodes_per_update": 4, "advantage.baseline": "critic"})


def test_the_agent_schedule_is_decided_once(tmp_path, monkeypatch):
    # config: ppo.agent_iteration_interval 0, every agent trains each update
    sections = {"schedule.episodes_per_update": 2, "schedule.num_updates": 2, "advantage.baseline": "critic",
                "schedule.checkpoint_interval": 0}
    assert not small_config(tmp_path, **sections).plan().schedule.agent_by_agent
    monkeypatch.setattr(run_plan, "decide_schedule", lambda who: run_plan.AgentSchedule(None, who.scripted_seats, 1))
    trainer = _trainer(tmp_path, **sections)
    agents = list(trainer.learner.agent_ids)
    assert len(agents) == 2 and trainer.plan.schedule.agent_by_agent and trainer.learner.plan.schedule.agent_by_agent
    assert [trainer.learner.trainable_agents(u) for u in range(3)] == [[agents[0]], [agents[1]], [agents[0]]]
    runner = trainer.run()
    for update in range(2):  # the learner trains one agent's adapter per update, rotating
        metrics = next(runner)
        assert [metrics[f"agent/{a}/trained"] for a in agents] == [float(i == update) for i in range(2)], update


def test_the_hardware_is_decided_once(tmp_path, monkeypatch, caplog):
    import logging

    import torch

    from agent_helpers import DEVICE
    from marft_agents.config import config_to_dict
    from marft_agents.model import loading
    from marft_agents.model.tiny_models import tiny_model_and_tokenizer

    model, tokenizer = tiny_model_and_tokenizer(seed=0, hidden_size=32, num_layers=1)
    model.save_pretrained(tmp_path / "m")
    tokenizer.save_pretrained(tmp_path / "m")
    asked: list[str] = []

    def bf16_here(model_cfg):  # the config says float32
        asked.append(model_cfg.dtype)
        return run_plan.ResolvedHardware(device=str(DEVICE), dtype="bfloat16", threads=torch.get_num_threads(),
                                         sets_threads=False, line="bfloat16 as the test says")

    monkeypatch.setattr(loading, "decide_hardware", bf16_here)
    cfg = small_config(tmp_path, **{"model.name_or_path": str(tmp_path / "m"), "model.dtype": "float32",
                                    "advantage.baseline": "critic"})
    assert cfg.plan().hardware is None  # validation decides no hardware (no torch)
    with caplog.at_level(logging.INFO):
        trainer = Trainer(cfg)  # loads the saved model itself
    assert asked == ["float32"]  # once: the model loads with the plan's hardware, not a second decision
    assert trainer.plan.hardware.dtype == trainer.learner.plan.hardware.dtype == "bfloat16"
    assert next(trainer.policy.model.parameters()).dtype == torch.bfloat16
    assert "bfloat16 as the test says" in caplog.text  # the start-up line
    assert "model.dtype is bfloat16 but ppo.recompute_old_logprobs is false" in caplog.text
    # config.yaml and the records name the resolved dtype, as before
    assert config_to_dict(trainer.cfg)["model"]["dtype"] == "bfloat16"
