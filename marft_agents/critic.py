"""Critic configuration, the critic's view of the global state, and the value head.

The critic is a LoRA adapter on the *same* base model as the agents plus a linear value head
reading the final hidden state (after the model's last norm). The head is kept in float32
whatever the base dtype: it is tiny and its outputs feed value losses whose scale matters.

Critic modes (``CriticConfig.mode``, listed once in ``CRITIC_MODES``)
--------------------------------------------------------------------
``centralised`` (default; MAPPO's centralised training, decentralised execution)
    One critic adapter ``critic`` for the team; its input at a decision is the **global state**
    before the acting agent speaks (:func:`render_global_state`): the task, every agent's output
    so far (earlier rounds with their grades, and this round's outputs up to now) and D_t.
``per_agent`` (the SII-MARFT option)
    One critic adapter ``critic_<agent_id>`` per agent, each reading the same global state; an
    agent's decisions are valued (and trained) by its own critic.
``local`` (ablation; the behaviour before critic modes existed)
    One critic adapter ``critic`` reading the acting agent's own prompt (system prompt +
    observation). Under ``chain`` this sees the same outputs as the global state; under
    ``independent`` / ``dag`` / ``orchestrated`` it ignores what the agent cannot see.

Every mode gives action-level values (at the last token of the critic's prompt) and token-level
values (the acting agent's response appended to the critic's prompt, one value per prefix).

The global-state template
-------------------------
The critic's user turn, under the system prompt ``CRITIC_SYSTEM_PROMPT``, is::

    GLOBAL STATE before <agent> (<role>) acts in round <r>
    <env.state()["text"]: "TASK <id>: <prompt>", then one "[round k] <agent>: <output>" line per
     utterance so far (earlier rounds and this one) and one "[round k] grade: ..." line per graded
     round>
    DEPENDENCY D_t (round <r>): acting order <a> -> <b> -> ...; <parent> -> <child> (child sees
     parent's output), ... | no edges: agents act independently
    NEXT TO ACT: <agent>

The transcript is the env's ``state()`` text (``TextTaskEnv.transcript``) read at the decision,
before the agent acts, and D_t is the round graph in the agent's ``infos["dependency"]`` (the
same graph ``state()["dependency"]`` holds as a matrix); both are whatever the env's dependency
produced, so every dependency kind (built-in, ``orchestrated``, user callables) is covered.
A transcript longer than ``max_state_chars`` keeps its head (the task) and its tail (the
freshest outputs).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import torch
from torch import nn

if TYPE_CHECKING:
    from marft_agents.policy import LoraSpec

CRITIC_MODES = ("centralised", "per_agent", "local")
"""What the critic reads and how many there are (see the module docstring)."""
GLOBAL_STATE_MODES = ("centralised", "per_agent")
"""Modes whose critics read the global state rather than the acting agent's prompt."""
CRITIC_SYSTEM_PROMPT = ("You are the critic of a team of agents solving a task together. Judge how "
                        "likely the team is to solve it, given the state below.")
"""The critic's system turn for the global-state modes (shared prefix of every critic prompt)."""


@dataclass(frozen=True)
class CriticConfig:
    """The value function(s) built next to the agents' adapters."""

    mode: Literal["centralised", "per_agent", "local"] = "centralised"
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
    """Longest global-state transcript the critic reads (head and tail kept); 0 = no limit."""
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


def describe_dependency(dependency: Mapping[str, Any] | None) -> str:
    """D_t as one line: acting order and edges (``infos["dependency"]``, ``RoundGraph.as_dict``)."""
    if not dependency:
        return "unknown"
    order = " -> ".join(dependency.get("active", [])) or "nobody"
    edges = [f"{parent} -> {child}" for parent, child in dependency.get("edges", [])]
    seen = "; ".join(edges) + " (child sees parent's output)" if edges else "no edges: agents act independently"
    return f"acting order {order}; {seen}"


def render_global_state(transcript: str, dependency: Mapping[str, Any] | None, agent: str, role: str,
                        round_index: int, max_chars: int = 0) -> str:
    """The critic's user turn for the global-state modes (template in the module docstring)."""
    if max_chars and len(transcript) > max_chars:
        half = max_chars // 2 - 16
        transcript = transcript[:half] + "\n[... truncated ...]\n" + transcript[-half:]
    return (f"GLOBAL STATE before {agent} ({role}) acts in round {round_index}\n{transcript}\n"
            f"DEPENDENCY D_t (round {round_index}): {describe_dependency(dependency)}\n"
            f"NEXT TO ACT: {agent}")


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
