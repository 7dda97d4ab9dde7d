"""Critic configuration and the value head that sits on the shared base model.

The critic is a LoRA adapter on the *same* base model as the agents plus a linear value head
reading the final hidden state (after the model's last norm). A centralised critic is one
adapter + head for the whole team (MAPPO); a decentralised one gives every agent its own
(IPPO-style). The head is kept in float32 whatever the base dtype: it is tiny and its outputs
feed value losses whose scale matters.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import nn

if TYPE_CHECKING:
    from marft_agents.policy import LoraSpec


@dataclass(frozen=True)
class CriticConfig:
    """The value function(s) built next to the agents' adapters."""

    centralised: bool = True
    """True: one critic adapter ``critic`` and one head for all agents. False: one adapter
    ``critic_<agent_id>`` + head per agent (then value calls must name the agent)."""
    lora: LoraSpec | None = None
    """LoRA settings of the critic adapter; None = the same as the agents'."""
    value_head_init_std: float = 0.0
    """Std of the head's normal weight init; 0 = zero weights, so initial values equal
    ``value_head_bias`` exactly and early value losses do not swamp the policy update."""
    value_head_bias: float = 0.0
    """Initial bias, i.e. the initial value of every state when the weights start at zero."""

    def __post_init__(self) -> None:
        if self.value_head_init_std < 0:
            raise ValueError(f"value_head_init_std must be >= 0, got {self.value_head_init_std}")


class ValueHead(nn.Module):
    """``hidden [..., H] -> value [...]``, computed in float32."""

    def __init__(self, hidden_size: int, init_std: float = 0.0, bias: float = 0.0,
                 generator: torch.Generator | None = None) -> None:
        super().__init__()
        self.linear = nn.Linear(hidden_size, 1, dtype=torch.float32)
        with torch.no_grad():
            if init_std > 0:
                self.linear.weight.normal_(0.0, init_std, generator=generator)
            else:
                self.linear.weight.zero_()
            self.linear.bias.fill_(bias)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        # contiguous: callers pass slices, and torch's linear is very slow on strided inputs
        # when the weight is frozen (see MultiAgentPolicy.__init__)
        return self.linear(hidden.float().contiguous()).squeeze(-1)
