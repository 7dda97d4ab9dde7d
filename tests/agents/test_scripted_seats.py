"""Scripted seats (``scripted_seats``): an agent played by a function, never sampled or trained."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch

import marft_envs
from agent_helpers import small_config, tiny  # noqa: F401 (fixture)
from marft_agents.config import ConfigError

REPO = Path(__file__).resolve().parents[2]
REPLY = "abc def"
SEAT = {"reasoner_0": "test_scripted_seats:fixed_reply"}


def fixed_reply(agent, observation, info):
    """The scripted reasoner of these tests (importable as ``test_scripted_seats:fixed_reply``)."""
    assert isinstance(observation["text"], str) and "round" in info
    return REPLY


def test_scripted_seat_plays_its_function_and_is_never_trained(tmp_path, tiny):
    from marft_agents.run.trainer import Trainer

    trainer = Trainer(small_config(tmp_path, scripted_seats=SEAT), tiny)
    rollout = trainer.collector.collect(2)
    mine = [d for d in rollout.decisions if d.agent_id == "reasoner_0"]
    theirs = [d for d in rollout.decisions if d.agent_id == "actor_0"]
    assert mine and theirs
    assert all(d.scripted and d.text == REPLY and d.logprobs == [0.0] * len(d.response_ids) for d in mine)
    assert not any(d.scripted for d in theirs)
    # The actor read the scripted utterance; only sampled tokens count.
    assert all(REPLY in d.observation for d in theirs)
    assert rollout.num_tokens == sum(len(d.response_ids) for d in theirs)

    before = trainer.policy.adapter_state_dict()
    history = list(trainer.run())
    after = trainer.policy.adapter_state_dict()
    assert [m["agent/reasoner_0/trained"] for m in history] == [0.0, 0.0]
    assert [m["agent/actor_0/trained"] for m in history] == [1.0, 1.0]
    scripted = [k for k in before if k.startswith("lora/policy_reasoner_0/")]
    trained = [k for k in before if k.startswith("lora/policy_actor_0/")]
    assert scripted and all(torch.equal(before[k], after[k]) for k in scripted)
    assert any(not torch.equal(before[k], after[k]) for k in trained)


def test_evaluation_plays_the_scripted_seat(tmp_path, tiny):
    from marft_agents.run.trainer import Trainer

    trainer = Trainer(small_config(tmp_path, scripted_seats=SEAT), tiny)
    result = trainer.evaluate()
    said = [turn["text"] for task in result.per_task for turn in task["transcript"] if turn["agent"] == "reasoner_0"]
    assert said and set(said) == {REPLY}


@pytest.mark.parametrize(("overrides", "expected"), [
    ({"ppo.train_agents": ["reasoner_0"]}, "names scripted seats ['reasoner_0']"),
    ({"shared_adapter": True}, "needs one adapter per agent"),
    ({"scripted_seats": {"reasoner_0": "no_colon"}}, "'module:function' strings"),
])
def test_config_refuses_what_cannot_work(tmp_path, overrides, expected):
    with pytest.raises(ConfigError, match=expected.replace("[", r"\[").replace("]", r"\]")):
        small_config(tmp_path, **{"scripted_seats": SEAT, **overrides}).validate()


@pytest.mark.parametrize(("seats", "expected"), [
    ({"critic_0": "test_scripted_seats:fixed_reply"}, "not agents of this env"),
    ({"reasoner_0": "test_scripted_seats:missing"}, "has no function 'missing'"),
])
def test_trainer_refuses_unknown_seats_and_functions(tmp_path, tiny, seats, expected):
    from marft_agents.run.trainer import Trainer

    with pytest.raises(ConfigError, match=expected):
        Trainer(small_config(tmp_path, scripted_seats=seats), tiny)


def test_relay_oracle_answerer_makes_the_team_reward_the_first_stage():
    """Level 4 with the oracle answerer: the team is right exactly when the reducer's number is
    A + B, so a reducer trained against it is paid its own stage's accuracy."""
    from marft_envs.tasks.scripted_teams import relay_oracle_seat

    env = marft_envs.make("marft/Relay-v0", level=4, profile="relay_reduce", horizon=1)
    rng = random.Random(0)
    outcomes = []
    for index in range(60):
        env.reset(seed=index, options={"task_index": index})
        stage = env.unwrapped.stage_value(env.unwrapped.task)
        for agent in env.agent_iter():
            obs, _, terminated, truncated, info = env.last()
            if terminated or truncated:
                env.step(None)
                continue
            if agent == "reducer_0":
                said = rng.choice([stage, stage + 1, stage - 2])
                env.step(f"A + B = \\boxed{{{said}}}")
            else:
                env.step(relay_oracle_seat(agent, obs, info))
        outcomes.append((said == stage, env.unwrapped.history[-1].outcome.solved))
    assert all(right == solved for right, solved in outcomes)
    assert 0 < sum(right for right, _ in outcomes) < len(outcomes)


def test_every_seat_scripted_is_refused(tmp_path, tiny):
    from marft_agents.run.trainer import Trainer

    both = {**SEAT, "actor_0": "test_scripted_seats:fixed_reply"}
    with pytest.raises(ConfigError, match="plays every agent"):
        Trainer(small_config(tmp_path, scripted_seats=both), tiny)


def test_a_learner_that_would_train_a_scripted_seat_is_refused(tmp_path, tiny, monkeypatch):
    from marft_agents.learners.base import BaseLearner
    from marft_agents.run.trainer import Trainer

    monkeypatch.setattr(BaseLearner, "trainable_agents", lambda self, update: list(self.agent_ids))
    with pytest.raises(ConfigError, match=r"would train the scripted seats \['reasoner_0'\]"):
        Trainer(small_config(tmp_path, scripted_seats=SEAT), tiny)


def test_resume_refuses_other_scripted_seats():
    from marft_agents.run.trainer import eval_setting_changes

    saved = {"eval": {}, "env": {}, "scripted_seats": {}}
    assert eval_setting_changes(saved, {**saved}) == []
    assert eval_setting_changes({"eval": {}, "env": {}}, {**saved}) == []  # a config from before the key
    changed = eval_setting_changes(saved, {**saved, "scripted_seats": SEAT})
    assert changed == [f"scripted_seats: {{}} -> {SEAT!r}"]


def test_a_combined_team_must_replace_every_scripted_seat(tmp_path, monkeypatch):
    import yaml

    from baselines import grid as grid_mod

    monkeypatch.chdir(REPO)
    stages = yaml.safe_load((REPO / "baselines/grids/relay_stages.yaml").read_text())
    separate = next(c for c in stages["cells"] if c["name"] == "separate")
    separate["ablation"] = {"adapters": {"reducer_0": "answerer_alone"}}  # leaves the scripted answerer_0 out
    path = tmp_path / "grid.yaml"
    path.write_text(yaml.safe_dump(stages))
    with pytest.raises(ConfigError, match=r"plays \['answerer_0'\] with a script"):
        grid_mod.plan(grid_mod.load_grid(path))


def test_grpo_zero_advantage_share_counts_only_sampled_decisions(tmp_path, tiny, monkeypatch):
    from marft_agents.learners import GRPO
    from marft_agents.learners import grpo as grpo_module
    from marft_agents.run.trainer import prepare_trainer

    cfg = small_config(tmp_path, scripted_seats=SEAT, algorithm="grpo", learner={"group_size": 2},
                       **{"schedule.episodes_per_update": 2})
    trainer = prepare_trainer(cfg, model_and_tokenizer=tiny)
    rollout = trainer.collector.collect(2)
    scripted = torch.tensor([d.scripted for d in rollout.decisions])  # [N]
    assert scripted.any() and not scripted.all()
    # Scripted decisions get advantage 0, sampled ones 1: no sampled decision lacks a signal.
    monkeypatch.setattr(grpo_module.gm, "decision_advantages", lambda *a, **k: (~scripted).float())
    assert GRPO.diagnostics(trainer.learner, rollout)["grpo/zero_advantage_share"] == 0.0
