"""LoRA settings and bookkeeping for several named peft adapters on one base model.

peft stores every adapter's weights inside the same injected layers
(``...q_proj.lora_A.<adapter>.weight``); the helpers here group those parameters by adapter
name so the policy can freeze, save and load each adapter on its own.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import torch
from peft import LoraConfig
from torch import nn

# Sub-module names under which peft keeps one entry per adapter; the adapter name is the path
# component right after one of these.
_PER_ADAPTER_CONTAINERS = frozenset({
    "lora_A", "lora_B", "lora_embedding_A", "lora_embedding_B", "lora_magnitude_vector",
})
_VALID_NAME = re.compile(r"^[A-Za-z0-9_\-]+$")


@dataclass(frozen=True)
class LoraSpec:
    """LoRA hyper-parameters of one adapter (named to avoid clashing with ``peft.LoraConfig``)."""

    r: int = 8
    """Rank of the update ``B @ A``."""
    alpha: float = 16.0
    """Scale numerator: the update is multiplied by ``alpha / r``."""
    dropout: float = 0.0
    """Dropout on the adapter input in train mode. The policy samples and trains in eval mode
    (a PPO ratio must compare the function that sampled the actions), so training configs
    reject a value > 0 (``TrainConfig.validate``); it only matters to other uses of the spec."""
    target_modules: tuple[str, ...] | str | None = None
    """Module names to adapt, e.g. ("q_proj", "v_proj") or "all-linear" (more capacity, ~2x
    the adapter cost). None = peft's default for the architecture (q_proj + v_proj for
    Llama/Qwen/Mistral), which also works for other families (GPT-2's c_attn, ...)."""

    def __post_init__(self) -> None:
        if self.r < 1:
            raise ValueError(f"LoRA rank r must be >= 1, got {self.r}")
        if not 0 <= self.dropout < 1:
            raise ValueError(f"LoRA dropout must be in [0, 1), got {self.dropout}")
        if isinstance(self.target_modules, list):  # YAML gives lists; keep the spec hashable
            object.__setattr__(self, "target_modules", tuple(self.target_modules))

    def to_peft(self) -> LoraConfig:
        """The equivalent ``peft.LoraConfig`` for a causal LM."""
        targets: Any = self.target_modules
        if isinstance(targets, tuple):
            targets = list(targets)
        return LoraConfig(task_type="CAUSAL_LM", r=self.r, lora_alpha=self.alpha,
                          lora_dropout=self.dropout, target_modules=targets, bias="none")


def check_adapter_name(name: str) -> str:
    """Adapter names become module-dict keys: letters, digits, '_' and '-' only."""
    if not _VALID_NAME.match(name):
        raise ValueError(f"{name!r} cannot name an adapter: use letters, digits, '_' and '-' "
                         f"only (agent ids such as 'reasoner_0' are fine)")
    return name


def adapter_of(param_name: str) -> tuple[str, str] | None:
    """Split a peft parameter name into (adapter, name with the adapter component removed).

    ``base_model.model.layers.0.self_attn.q_proj.lora_A.policy_a.weight`` ->
    ``("policy_a", "base_model.model.layers.0.self_attn.q_proj.lora_A.weight")``;
    None for parameters that belong to no adapter (the base weights).
    """
    parts = param_name.split(".")
    for i, part in enumerate(parts[:-1]):
        if part in _PER_ADAPTER_CONTAINERS:
            return parts[i + 1], ".".join(parts[: i + 1] + parts[i + 2:])
    return None


def group_adapter_parameters(model: nn.Module) -> dict[str, dict[str, nn.Parameter]]:
    """``{adapter: {name without adapter: parameter}}`` for every adapter in ``model``."""
    groups: dict[str, dict[str, nn.Parameter]] = {}
    for name, param in model.named_parameters():
        split = adapter_of(name)
        if split is not None:
            groups.setdefault(split[0], {})[split[1]] = param
    return groups


def base_parameters(model: nn.Module) -> dict[str, nn.Parameter]:
    """Parameters that belong to no adapter (the shared, frozen base)."""
    return {n: p for n, p in model.named_parameters() if adapter_of(n) is None}


def copy_into(params: dict[str, nn.Parameter], tensors: dict[str, torch.Tensor],
              what: str) -> None:
    """Copy ``tensors`` into ``params`` (same keys and shapes), with errors naming the keys."""
    missing = sorted(set(params) - set(tensors))
    unexpected = sorted(set(tensors) - set(params))
    if missing or unexpected:
        raise KeyError(f"{what}: state dict does not match (missing {missing[:5]}"
                       f"{'...' if len(missing) > 5 else ''}, unexpected {unexpected[:5]}"
                       f"{'...' if len(unexpected) > 5 else ''}); was it saved from a policy "
                       f"with the same agents, LoRA targets and critic layout?")
    with torch.no_grad():
        for key, param in params.items():
            value = tensors[key]
            if value.shape != param.shape:
                raise ValueError(f"{what}: {key} has shape {tuple(value.shape)}, expected "
                                 f"{tuple(param.shape)} (different LoRA rank or model?)")
            param.copy_(value.to(device=param.device, dtype=param.dtype))
