"""Where a team of different models keeps its critic: an action-level critic on one model (the
global state in its tokens), values in the acting agent's own tokens on each agent's model."""

from __future__ import annotations

import pytest
import torch

from agent_helpers import small_config
from marft_agents.config import ConfigError
from marft_agents.model.tiny_models import tiny_model_and_tokenizer
from marft_agents.run.trainer import Trainer, load_policy

AGENTS = ["reasoner_0", "actor_0"]
OTHER = {"models": {"other": {"name_or_path": "tiny-qwen2", "device": "cpu"}}, "agents": {"actor_0": {"model": "other"}}}
HEADERS = {"default": "<|im_start|>system", "other": "<|start_header_id|>system"}


def _pairs():
    return {"default": tiny_model_and_tokenizer(seed=0, hidden_size=32, num_layers=1),
            "other": tiny_model_and_tokenizer(seed=1, hidden_size=48, num_layers=1, arch="qwen2", tokenizer="llama3")}


def _one_update(cfg):
    with Trainer(cfg, _pairs()) as trainer:
        rollout = trainer.collector.collect(cfg.schedule.episodes_per_update)
        before = {k: v.clone() for k, v in trainer.policy.adapter_state_dict().items()}
        trainer.learner.update(rollout, 0)
        after = trainer.policy.adapter_state_dict()
        return trainer.policy, rollout, before, after


def _critic_text(policy, decision):
    tokenizer = policy.critic_reader(decision.agent_id).tokenizer
    return tokenizer.decode(decision.critic_prompt_ids)


@pytest.mark.parametrize("algorithm, mode", [("mappo_token", "centralised"), ("mappo_action", "local"),
                                             ("mappo_token", "per_agent")])
def test_own_token_critics_sit_on_each_agents_model(tmp_path, algorithm, mode):
    cfg = small_config(tmp_path, algorithm=algorithm, **{"critic.mode": mode, "schedule.num_updates": 1}, **OTHER)
    policy, rollout, before, after = _one_update(cfg)
    expected = (["critic_reasoner_0", "critic_actor_0"] if mode == "per_agent" else ["critic-default", "critic-other"])
    assert sorted(policy.critic_adapters) == sorted(expected)
    for agent, model in (("reasoner_0", "default"), ("actor_0", "other")):
        critic = policy.critic_for(agent)
        assert policy.member_of_adapter(critic) is policy.members[model]
        decisions = [d for d in rollout.decisions if d.agent_id == agent]
        assert decisions and all(HEADERS[model] in _critic_text(policy, d) or mode == "local" for d in decisions)
        if algorithm == "mappo_token":  # one value per response token of the agent's own tokens
            assert all(len(d.token_values) == len(d.response_ids) for d in decisions)
        moved = [k for k in after if k.startswith(f"lora/{critic}/") and not torch.equal(after[k], before[k])]
        assert moved, f"{critic} did not train"


def test_an_action_level_critic_reads_the_global_state_in_its_models_tokens(tmp_path):
    cfg = small_config(tmp_path, algorithm="mappo_action", **{"critic.model": "other", "schedule.num_updates": 1},
                       **OTHER)
    policy, rollout, before, after = _one_update(cfg)
    assert policy.critic_adapters == ["critic"]
    assert policy.member_of_adapter("critic") is policy.members["other"]
    assert all(HEADERS["other"] in _critic_text(policy, d) for d in rollout.decisions)  # both agents, other's tokens
    assert not policy.members["default"].critic_adapters
    assert any(not torch.equal(after[k], before[k]) for k in after if k.startswith("lora/critic/"))


def test_critic_model_with_own_token_values_is_refused(tmp_path):
    cfg = small_config(tmp_path, algorithm="mappo_token", **{"critic.model": "other"}, **OTHER)
    with pytest.raises(ConfigError, match="each model carries the critic of its own agents; remove critic.model"):
        load_policy(cfg, AGENTS, _pairs())


def test_vllm_is_refused_for_a_team(tmp_path):
    cfg = small_config(tmp_path, algorithm="grpo", critic=None, **{"schedule.episodes_per_update": 4,
                                                                   "schedule.minibatch_size": 4, "sampling.engine": "vllm",
                                                                   "ppo.recompute_old_logprobs": True}, **OTHER)
    with pytest.raises(ConfigError, match="serves one base model per process"):
        load_policy(cfg, AGENTS, _pairs())
