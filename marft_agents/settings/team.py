"""The ``models:`` and ``agents:`` sections: which base model each agent runs on, and what of it trains.

Plain data. A team may mix base models: a planner on a small model beside a solver on a large one,
or a trained agent beside a frozen partner. ``model:`` stays the model of every agent the config
does not place elsewhere (named :data:`DEFAULT_MODEL_NAME`); ``models:`` names further ones;
``agents:`` sets, per agent id, the model it runs on, whether it trains, and its own learning rate
and LoRA settings::

    model: {name_or_path: smollm2-135m-instruct, dtype: auto}   # "default": every agent not placed elsewhere
    models:
      solver: {name_or_path: /models/Qwen2.5-7B-Instruct, dtype: bfloat16}
    agents:
      reasoner_0: {model: solver, actor_lr: 2.0e-5, lora: {r: 16}}
      actor_0: {trainable: false}                       # frozen at its base model
    critic: {model: solver}                              # default: the first agent's model

Each distinct model loads once, with its own tokenizer, chat template and dtype; the agents on
one model share its base and keep one LoRA adapter each (:mod:`marft_agents.model.team`). A
frozen agent (``trainable: false``) acts with its base model, or with a fixed adapter loaded
from ``adapter`` (a peft adapter folder, as a checkpoint's ``models/<model>/<adapter>/`` holds),
and is never trained: its learning rate and LoRA settings are not its to set.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

DEFAULT_MODEL_NAME = "default"
"""The name of ``model:`` among a team's models: the model of every agent not placed on another."""


@dataclass(frozen=True)
class AgentSpec:
    """One agent's model and training settings (``agents.<agent_id>``)."""

    model: str = DEFAULT_MODEL_NAME
    """The model it runs on: ``default`` (the ``model:`` section) or a name in ``models:``."""
    trainable: bool = True
    """False: a frozen teammate. Its utterances are sampled from its model (base, or ``adapter``)
    and never trained on; it is reported as ``agent/<id>/trained`` 0."""
    adapter: str | None = None
    """A frozen agent's fixed LoRA adapter: a peft adapter folder (``adapter_config.json`` +
    weights), e.g. a checkpoint's ``models/<model>/policy_<id>/``. None: the base model itself."""
    actor_lr: float | None = None
    """This agent's policy learning rate; None = ``schedule.actor_lr``."""
    lora: dict[str, Any] = field(default_factory=dict)
    """LoRA settings of this agent's adapter, over the ``lora:`` section's (e.g. ``{r: 16}``);
    empty = the ``lora:`` section."""

    @property
    def sets_learner_options(self) -> list[str]:
        """The training settings given (which a frozen agent may not have)."""
        return [name for name, value in (("actor_lr", self.actor_lr), ("lora", self.lora)) if value]
