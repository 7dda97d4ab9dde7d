"""LoRA targets when ``lora.target_modules`` is unset: peft's default where it has one, else the
model's own attention projections (one log line), else one clear error. Tiny random models of
several architectures, built from transformers configs in-process (no downloads)."""

from __future__ import annotations

import logging

import pytest
import torch
from peft import inject_adapter_in_model
from peft.utils import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING as PEFT_DEFAULTS
from torch import nn
from transformers import (
    GPT2Config,
    GPT2LMHeadModel,
    MambaConfig,
    MambaForCausalLM,
    Phi3Config,
    Phi3ForCausalLM,
    PretrainedConfig,
)

from marft_agents.model.adapters import to_peft_config
from marft_agents.cli import USER_ERRORS
from marft_agents.config import ConfigError
from marft_agents.model.policy import MultiAgentPolicy
from marft_agents.settings.lora import LoraSpec
from marft_agents.model.tiny_models import tiny_model_and_tokenizer, tiny_tokenizer

LOG = "marft_agents.model.adapters"


def _ids(tok) -> dict:
    return {"vocab_size": len(tok), "bos_token_id": tok.bos_token_id or 0, "eos_token_id": tok.eos_token_id,
            "pad_token_id": tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id}


def tiny(arch: str):
    """A tiny random model of ``arch`` and the tiny byte tokenizer."""
    tok = tiny_tokenizer()
    torch.manual_seed(0)
    if arch == "llama":
        return tiny_model_and_tokenizer(seed=0, hidden_size=32, num_layers=2)
    if arch == "gpt2":  # fused QKV projection in a transformers Conv1D
        model = GPT2LMHeadModel(GPT2Config(n_embd=32, n_layer=2, n_head=2, n_positions=256, **_ids(tok)))
    elif arch == "phi3":  # fused qkv_proj; model type phi3 is missing from peft's table
        model = Phi3ForCausalLM(Phi3Config(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                           num_attention_heads=2, num_key_value_heads=2,
                                           max_position_embeddings=256, **_ids(tok)))
    elif arch == "mamba":  # no attention at all
        model = MambaForCausalLM(MambaConfig(hidden_size=32, num_hidden_layers=2, state_size=4, **_ids(tok)))
    else:
        raise ValueError(arch)
    return model.eval(), tok


def adapted(policy: MultiAgentPolicy) -> set[str]:
    """Names (in the base model) of the layers that got LoRA weights."""
    return {name.removeprefix("base_model.model.") for name, module in policy.model.named_modules()
            if hasattr(module, "lora_A") and len(module.lora_A)}


def expect(model, *leaves: str, under: str) -> set[str]:
    return {name for name, _ in model.named_modules()
            if name.rsplit(".", 1)[-1] in leaves and f".{under}." in f".{name}"}


def choices(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOG and "LoRA targets" in r.getMessage()]


@pytest.mark.parametrize("arch, leaves, under", [("llama", ("q_proj", "v_proj"), "self_attn"),
                                                 ("gpt2", ("c_attn",), "attn")])
def test_peft_defaults_are_kept_where_peft_has_them(arch, leaves, under, caplog):
    model, tok = tiny(arch)
    assert model.config.model_type in PEFT_DEFAULTS
    expected = expect(model, *leaves, under=under)
    with caplog.at_level(logging.INFO, logger=LOG):
        policy = MultiAgentPolicy(model, tok, ["a", "b"])
    assert adapted(policy) == expected and len(expected) == 2 * len(leaves)
    assert not choices(caplog)


@pytest.mark.parametrize("arch, forget, targets, under", [
    ("phi3", None, ["qkv_proj"], "self_attn"),  # missing from peft's table as it is
    ("gpt2", "gpt2", ["c_attn"], "attn"),  # Conv1D; c_proj (attention and MLP output) left alone
    ("llama", "llama", ["q_proj", "v_proj"], "self_attn"),
])
def test_a_model_type_without_a_peft_default_gets_its_attention_projections(arch, forget, targets, under,
                                                                            monkeypatch, caplog):
    if forget:
        monkeypatch.delitem(PEFT_DEFAULTS, forget)
    model, tok = tiny(arch)
    assert model.config.model_type not in PEFT_DEFAULTS
    expected = expect(model, *targets, under=under)
    with caplog.at_level(logging.INFO, logger=LOG):
        policy = MultiAgentPolicy(model, tok, ["a", "b"])
    assert adapted(policy) == expected and len(expected) == 2 * len(targets)  # 2 layers
    for name in policy.adapter_names:  # every adapter, the critic's included
        assert sorted(policy.model.peft_config[name].target_modules) == targets
    lines = choices(caplog)
    assert len(lines) == 1 and str(targets) in lines[0] and repr(model.config.model_type) in lines[0]
    prompt = [policy.chat_prompt_ids("", "Say 1")]
    with torch.no_grad():  # the adapted model runs
        stats = policy.token_logprobs(policy.adapter_names[0], prompt, [[40, 41]])
    assert torch.isfinite(stats.logprobs).all()


class _ToyConfig(PretrainedConfig):
    model_type = "toy-lm"


class _Toy(nn.Module):
    """Attention projections with names no rule knows, and an MLP sharing one of them."""

    def __init__(self) -> None:
        super().__init__()
        self.config = _ToyConfig()
        self.blocks = nn.ModuleList(nn.ModuleDict({
            "attn": nn.ModuleDict({"to_q": nn.Linear(8, 8), "to_kv": nn.Linear(8, 16), "proj": nn.Linear(8, 8)}),
            "mlp": nn.ModuleDict({"up": nn.Linear(8, 16), "proj": nn.Linear(16, 8)}),
        }) for _ in range(2))
        self.lm_head = nn.Linear(8, 20)

    def get_output_embeddings(self) -> nn.Module:
        return self.lm_head


def test_unfamiliar_attention_names_adapt_the_whole_attention_block(caplog):
    from marft_agents.model.adapters import default_target_modules

    model = _Toy()
    with caplog.at_level(logging.INFO, logger=LOG):
        targets = default_target_modules(model)
    assert targets == ["attn.proj", "to_kv", "to_q"]  # "proj" alone would hit the MLP's too
    assert len(choices(caplog)) == 1
    inject_adapter_in_model(to_peft_config(LoraSpec(r=2), targets), model)
    got = {name for name, module in model.named_modules() if hasattr(module, "lora_A")}
    assert got == {f"blocks.{i}.attn.{leaf}" for i in range(2) for leaf in ("to_q", "to_kv", "proj")}


def test_no_attention_projection_is_one_line_naming_the_setting_and_the_candidates(caplog):
    model, tok = tiny("mamba")
    assert model.config.model_type not in PEFT_DEFAULTS
    with pytest.raises(ConfigError) as caught:
        MultiAgentPolicy(model, tok, ["a"])
    message = str(caught.value)
    assert "\n" not in message and isinstance(caught.value, USER_ERRORS)  # the CLI prints one line
    assert "lora.target_modules" in message and "'mamba'" in message
    assert "['dt_proj', 'in_proj', 'out_proj', 'x_proj']" in message  # the linear layers found
    assert "lm_head" not in message
    # an explicit setting is used as given, without asking the rule
    assert to_peft_config(LoraSpec(target_modules=["in_proj"]), None).target_modules == {"in_proj"}
