"""The ``critic:`` section: the value function(s) built next to the agents' adapters.

Plain data; what the modes mean is in :mod:`marft_agents.critic` (its module docstring).
"""

from __future__ import annotations

import typing
from dataclasses import dataclass
from typing import Literal

from marft_agents.settings.lora import LoraSpec

CriticMode = Literal["centralised", "per_agent", "local"]
"""What the critic reads and how many there are (see :mod:`marft_agents.critic`)."""
CRITIC_MODES: tuple[str, ...] = typing.get_args(CriticMode)
"""The critic modes, in declaration order."""
GLOBAL_STATE_MODES: tuple[str, ...] = ("centralised", "per_agent")
"""Modes whose critics read the global state rather than the acting agent's prompt."""


@dataclass(frozen=True)
class CriticConfig:
    """The value function(s) built next to the agents' adapters."""

    mode: CriticMode = "centralised"
    """``centralised``: one critic on the global state (task, every agent's outputs so far, D_t).
    ``per_agent``: one critic adapter + head per agent (``critic_<agent_id>``), on the global
    state. ``local``: one critic on the acting agent's own prompt (an ablation)."""
    lora: LoraSpec | None = None
    """LoRA settings of the critic adapter(s); None = the same as the agents'."""
    value_head_init_std: float = 0.0
    """Std of the head's normal weight init; 0 = zero weights, so initial values equal
    ``value_head_bias`` exactly and early value losses do not swamp the policy update."""
    value_head_bias: float = 0.0
    """Initial bias, i.e. the initial value of every state when the weights start at zero."""
    max_state_chars: int = 16_000
    """Longest global-state log (characters) the critic reads in one episode; past it the log
    restarts from the current transcript, head and tail kept. 0 = no limit."""
    centralised: bool | None = None
    """Removed: use ``mode``. Setting it raises an error that says how to migrate."""

    def __post_init__(self) -> None:
        if self.centralised is not None:
            old = "true" if self.centralised else "false"
            raise ValueError(
                f"critic.centralised was replaced by critic.mode (one of {', '.join(CRITIC_MODES)}); "
                f"centralised: {old} -> " + ("mode: centralised (it now reads the global state; mode: local "
                                             "keeps the old input, the acting agent's prompt)" if self.centralised
                                             else "mode: per_agent (one critic per agent, now on the global state)")
                + ". Remove the centralised key.")
        if self.mode not in CRITIC_MODES:
            raise ValueError(f"critic mode must be one of {CRITIC_MODES}, got {self.mode!r}")
        if self.value_head_init_std < 0:
            raise ValueError(f"value_head_init_std must be >= 0, got {self.value_head_init_std}")
        if self.max_state_chars < 0:
            raise ValueError(f"max_state_chars must be >= 0 (0 = no limit), got {self.max_state_chars}")

    @property
    def reads_global_state(self) -> bool:
        return self.mode in GLOBAL_STATE_MODES
