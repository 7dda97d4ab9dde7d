"""The ``lora:`` section (and ``critic.lora:``): LoRA hyper-parameters of one adapter.

Plain data (no peft): :func:`marft_agents.model.adapters.to_peft_config` turns a spec into a
``peft.LoraConfig``.
"""

from __future__ import annotations

from dataclasses import dataclass


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
    """Module names to adapt, e.g. ("q_proj", "v_proj") or "all-linear" (more capacity, a
    larger adapter cost). None = peft's default for the architecture (q_proj + v_proj for
    Llama/Qwen/Mistral, c_attn for GPT-2, ...); for a model type peft has no default for, the
    model's attention projections (the fused QKV projection, else the query and value ones; see
    ``marft_agents.model.adapters.default_target_modules``), named in one log line."""

    def __post_init__(self) -> None:
        if self.r < 1:
            raise ValueError(f"LoRA rank r must be >= 1, got {self.r}")
        if not 0 <= self.dropout < 1:
            raise ValueError(f"LoRA dropout must be in [0, 1), got {self.dropout}")
        if isinstance(self.target_modules, list):  # YAML gives lists; keep the spec hashable
            object.__setattr__(self, "target_modules", tuple(self.target_modules))
