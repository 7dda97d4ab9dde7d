"""Checkpoints keep a peft adapter folder per model and agent, which peft loads and a frozen
teammate takes as its fixed adapter; an adapter never moves to another base model."""

from __future__ import annotations

import pytest
import torch

from agent_helpers import LETTERS_ID, small_config
from marft_agents.model.tiny_models import tiny_model_and_tokenizer
from marft_agents.run.checkpoint import latest_checkpoint, load_adapters
from marft_agents.run.trainer import train

GRPO = {"algorithm": "grpo", "critic": None, "schedule.episodes_per_update": 4, "schedule.minibatch_size": 4,
        "schedule.num_updates": 1}
OTHER = {"models": {"other": {"name_or_path": "tiny-qwen2", "device": "cpu"}}}


def _pairs():
    """The default model (tiny Llama, ChatML tokenizer) and ``other`` (tiny Qwen2, Llama-3 tokenizer)."""
    return {"default": tiny_model_and_tokenizer(seed=0, hidden_size=32, num_layers=1),
            "other": tiny_model_and_tokenizer(seed=1, hidden_size=48, num_layers=1, arch="qwen2", tokenizer="llama3")}


def _other_base():
    return tiny_model_and_tokenizer(seed=1, hidden_size=48, num_layers=1, arch="qwen2", tokenizer="llama3")[0]


def test_checkpoint_holds_a_peft_folder_per_model_that_peft_loads(tmp_path):
    from peft import PeftModel

    cfg = small_config(tmp_path, **GRPO, **OTHER, agents={"actor_0": {"model": "other"}})
    result = train(cfg, model_and_tokenizer=_pairs())
    ckpt = latest_checkpoint(cfg.output_dir)
    assert sorted(p.relative_to(ckpt / "models").as_posix() for p in (ckpt / "models").glob("*/*")) == [
        "default/policy_reasoner_0", "other/policy_actor_0"]
    loaded = PeftModel.from_pretrained(_other_base(), str(ckpt / "models/other/policy_actor_0"))
    member = result.policy.for_agent("actor_0")
    ids = torch.tensor([[5, 6, 7, 8, 9, 10]])
    with torch.no_grad(), member.using("policy_actor_0"):
        ours = member.model(input_ids=ids).logits
    with torch.no_grad():
        theirs = loaded(input_ids=ids).logits
        base = _other_base()(input_ids=ids).logits
    assert (ours - base).abs().max() > 1e-3  # trained: the adapter is not the base model
    torch.testing.assert_close(theirs, ours)


def test_one_model_checkpoint_has_the_same_layout(tmp_path):
    cfg = small_config(tmp_path, **GRPO)
    train(cfg, model_and_tokenizer=tiny_model_and_tokenizer(seed=0, hidden_size=32, num_layers=1))
    ckpt = latest_checkpoint(cfg.output_dir)
    assert sorted(p.name for p in (ckpt / "models/default").iterdir()) == ["policy_actor_0", "policy_reasoner_0"]


def test_a_frozen_teammate_plays_a_fixed_adapter_from_a_peft_folder(tmp_path):
    first = small_config(tmp_path / "a", **GRPO, **OTHER, agents={"actor_0": {"model": "other", "lora": {"r": 4}}})
    train(first, model_and_tokenizer=_pairs())
    ckpt = latest_checkpoint(first.output_dir)
    trained = {k: v for k, v in load_adapters(ckpt).items() if k.startswith("lora/policy_actor_0/")}
    frozen = {"actor_0": {"model": "other", "trainable": False, "adapter": str(ckpt / "models/other/policy_actor_0")}}
    second = small_config(tmp_path / "b", **{**GRPO, "schedule.num_updates": 2}, **OTHER, agents=frozen)
    result = train(second, model_and_tokenizer=_pairs())
    after = result.policy.adapter_state_dict()
    assert trained and all(torch.equal(after[k], v) for k, v in trained.items())  # loaded (rank 4) and never moved
    assert result.history[-1]["agent/actor_0/trained"] == 0.0
    assert result.history[-1]["agent/reasoner_0/trained"] == 1.0


def test_a_swap_across_models_is_refused(tmp_path):
    from baselines.ablations import swap_agent_adapters
    from marft_agents.run.trainer import load_policy

    cfg = small_config(tmp_path, **GRPO, **OTHER, agents={"actor_0": {"model": "other"}})
    policy = load_policy(cfg, ["reasoner_0", "actor_0"], _pairs())
    with pytest.raises(ValueError, match="cannot move to another base model: reasoner_0 \\(default\\) <- actor_0 \\(other\\)"):
        swap_agent_adapters(policy.adapter_state_dict(), policy, {"reasoner_0": "actor_0", "actor_0": "reasoner_0"})


def test_env_is_the_two_agent_letters_env():
    import marft_envs

    assert list(marft_envs.make(LETTERS_ID).possible_agents) == ["reasoner_0", "actor_0"]


def test_base_seat_ablation_gives_that_agent_its_own_base(tmp_path):
    from baselines.ablations import zero_seat_adapter
    from marft_agents.run.trainer import load_policy

    cfg = small_config(tmp_path, **GRPO, **OTHER, agents={"actor_0": {"model": "other"}})
    policy = load_policy(cfg, ["reasoner_0", "actor_0"], _pairs())
    state = {k: torch.full_like(v, 0.05) if "lora_B" in k else v for k, v in policy.adapter_state_dict().items()}
    policy.load_adapter_state_dict(state)
    member, ids = policy.for_agent("actor_0"), torch.tensor([[5, 6, 7, 8, 9, 10]])

    def logits(adapter):
        with torch.no_grad(), member.using(adapter):
            return member.model(input_ids=ids).logits

    base = logits(None)  # the actor's own base: the tiny Qwen2
    assert (logits("policy_actor_0") - base).abs().max() > 1e-3
    policy.load_adapter_state_dict(zero_seat_adapter(state, policy, "actor_0"))
    torch.testing.assert_close(logits("policy_actor_0"), base, rtol=0, atol=0)
    reasoner = policy.for_agent("reasoner_0")
    assert reasoner is not member and any(float(p.abs().max()) > 0 for n, p in reasoner._params["policy_reasoner_0"].items()
                                          if "lora_B" in n)  # the other seat keeps its adapter
