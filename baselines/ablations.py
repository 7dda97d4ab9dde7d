"""Evaluation-time ablations of a trained team: what each agent, and joint training, contribute.

Each ablation is an evaluation-only grid cell (``evaluate: <name>``, :mod:`baselines.grid`) that
takes a training cell's final adapters (its ``source``, same seed), changes the team, and
evaluates it; its drop from the source's accuracy measures what was taken away. The cell's
``ablation:`` mapping holds the kind's options (its ``options_class``, checked like a config):

``final``
    No change: the source's final team as trained, for evaluations other than the training
    run's own (the cell's ``eval.*`` overrides, e.g. sampled avg@k / pass@k). No options.
``swapped``
    Did the roles specialise? Each agent gets the next agent's trained adapter (:func:`rotation`;
    for two agents, an exchange). If A's adapter serves B as well as B's own, nothing
    role-specific was learnt. No options.
``base_seat``
    What does one agent's training contribute? ``seat``'s adapter is zeroed (its LoRA update
    ``B A`` is 0, so that agent is exactly the base model); the other agents keep their trained
    adapters bit for bit. One cell per seat.
``fixed_message``
    What does the downstream agent get from one agent's message? ``seat`` is played by a scripted
    policy (:class:`FixedReply`, as a run's ``scripted_seats``) that always says ``message``
    (default ``"I don't know."``), so what its successors read carries no information from it;
    the others play their trained adapters.
``combined``
    Did *joint* training matter? ``adapters`` maps agents to other training cells: those agents
    take the adapter trained in that cell (same seed), the rest the source's. With cells that
    each trained one role alone against a frozen partner (``ppo.train_agents: [<agent>]``) or a
    scripted one (``scripted_seats``), the team of separately trained roles is compared with the
    jointly trained one. The team plays without the source's scripted seats: every seat is a
    model.

``swapped``, ``base_seat`` and ``combined`` need one adapter per agent (a shared one cannot change for one seat).
:func:`swap_agent_adapters`, :func:`zero_seat_adapter` and :func:`combine_adapters` rewrite an
``adapter_state_dict``, touching only the policy adapters (a critic, unused at evaluation, stays as
it was). Nothing here imports torch at import time.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from marft_agents.config_schema import ConfigError, build_dataclass

DEFAULT_MESSAGE = "I don't know."
"""The fixed message of a ``fixed_message`` cell that gives none."""


def rotation(agent_ids: Sequence[str]) -> dict[str, str]:
    """``{agent k: agent k+1 (mod n)}``: who gets whose adapter. Needs two or more agents."""
    agents = list(agent_ids)
    if len(agents) < 2:
        raise ValueError(f"swapping adapters needs two or more agents, got {agents}")
    return {agent: agents[(k + 1) % len(agents)] for k, agent in enumerate(agents)}


def _require_own_adapters(policy: Any, what: str) -> None:
    if getattr(policy, "shared_adapter", False):
        raise ValueError(f"the policy has one shared adapter for all agents: the {what} ablation changes one "
                         "agent's adapter, which would change every agent; it needs a run with one adapter per "
                         "agent (shared_adapter: false)")


def _adapter_prefixes(policy: Any) -> dict[str, str]:
    """Agent -> the ``adapter_state_dict`` key prefix of its policy adapter."""
    return {agent: f"lora/{policy.adapter_for(agent)}/" for agent in policy.agent_ids}


def _adapter_of(state: Mapping[str, Any], prefix: str, agent: str, where: str = "the state dict") -> dict[str, Any]:
    found = {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}
    if not found:
        raise KeyError(f"{where} has no adapter {prefix.split('/')[1]!r} for agent {agent!r}")
    return found


def swap_agent_adapters(state: Mapping[str, Any], policy: Any, assignment: Mapping[str, str]) -> dict[str, Any]:
    """A copy of ``state`` (``policy.adapter_state_dict()`` layout: ``lora/<adapter>/<param>``) in
    which agent ``a``'s adapter holds the weights trained for ``assignment[a]``.

    Args:
        state: the trained adapters (e.g. ``checkpoint.load_adapters(path)``).
        policy: the ``MultiAgentPolicy`` they will be loaded into (names each agent's adapter).
        assignment: agent -> the agent whose trained adapter it receives; must be a permutation
            of the policy's agents.
    """
    agents = list(policy.agent_ids)
    _require_own_adapters(policy, "swapped")
    if sorted(assignment) != sorted(agents) or sorted(assignment.values()) != sorted(agents):
        raise ValueError(f"assignment must map every agent {agents} to a distinct agent, got {dict(assignment)}")
    return combine_adapters(state, policy, {receiver: (state, giver) for receiver, giver in assignment.items()})


def combine_adapters(state: Mapping[str, Any], policy: Any,
                     sources: Mapping[str, tuple[Mapping[str, Any], str]]) -> dict[str, Any]:
    """A copy of ``state`` in which each agent ``a`` of ``sources`` holds the adapter that
    ``sources[a] = (other_state, other_agent)`` trained for ``other_agent``; every other key
    (the other agents' adapters, the critic) stays as in ``state``."""
    _require_own_adapters(policy, "combined")
    prefix = _adapter_prefixes(policy)
    unknown = sorted(set(sources) - set(prefix))
    if unknown:
        raise ValueError(f"agents {unknown} are not agents of the policy {list(policy.agent_ids)}")
    across = [f"{receiver} ({policy.model_of(receiver)}) <- {giver} ({policy.model_of(giver)})"
              for receiver, (_, giver) in sources.items() if policy.model_of(receiver) != policy.model_of(giver)]
    if across:
        raise ValueError(f"an adapter cannot move to another base model: {', '.join(across)}; swap or combine "
                         "only agents that run on the same model (agents: ... model:)")
    combined = {k: v for k, v in state.items() if not any(k.startswith(prefix[a]) for a in sources)}
    for receiver, (other, giver) in sources.items():
        adapter = _adapter_of(other, prefix[giver], giver)
        combined.update({prefix[receiver] + key: value for key, value in adapter.items()})
    return combined


def zero_seat_adapter(state: Mapping[str, Any], policy: Any, seat: str) -> dict[str, Any]:
    """A copy of ``state`` in which ``seat``'s adapter is all zeros (its LoRA update ``B A`` is 0,
    so that agent computes exactly what the base model does); every other key is unchanged."""
    _require_own_adapters(policy, "base_seat")
    prefix = _adapter_prefixes(policy)
    if seat not in prefix:
        raise ValueError(f"seat {seat!r} is not an agent of the policy {list(policy.agent_ids)}")
    _adapter_of(state, prefix[seat], seat)
    return {k: v.new_zeros(v.shape) if k.startswith(prefix[seat]) else v for k, v in state.items()}


@dataclass(frozen=True)
class FixedReply:
    """A scripted policy (``fn(agent, observation, info) -> str``, :mod:`marft_agents.evaluation.scripted`)
    that says ``message`` whatever it is asked."""

    message: str

    def __call__(self, agent: str, observation: Mapping[str, Any], info: Mapping[str, Any]) -> str:
        return self.message


# -- the kinds, as grid cells ------------------------------------------------------------------------
@dataclass
class SeatOptions:
    """``ablation:`` of a ``base_seat`` cell."""

    seat: str
    """The agent whose adapter is zeroed (it plays as the base model)."""


@dataclass
class FixedMessageOptions:
    """``ablation:`` of a ``fixed_message`` cell."""

    seat: str
    """The agent whose output is replaced."""
    message: str = DEFAULT_MESSAGE
    """What it says instead, every time."""


@dataclass
class CombinedOptions:
    """``ablation:`` of a ``combined`` cell."""

    adapters: dict[str, str] = field(default_factory=dict)
    """Agent -> the training cell (same seed) whose adapter for that agent it takes; the agents
    not named keep the source cell's."""


class Ablation:
    """One kind of evaluation-only cell that changes a training cell's final team."""

    name: ClassVar[str]
    """The cell's ``evaluate`` value."""
    options_class: ClassVar[type | None] = None
    """Dataclass of the cell's ``ablation:`` mapping; None: the kind takes no options."""
    own_folder: ClassVar[bool] = True
    """Whether the run writes to its own folder (``<root>/<cell>/seed<k>``); else into its
    source's (the original ``swapped`` layout)."""
    per_agent_adapters: ClassVar[bool] = False
    """Whether the kind changes one agent's adapter, so its source needs one adapter per agent."""
    plays_every_seat: ClassVar[bool] = False
    """Whether the changed team is played without the source's ``scripted_seats``: the kind
    assembles a whole team from roles trained apart (a role trained against a scripted partner
    then plays with its real teammate)."""
    source_accuracy_key: ClassVar[str] = "source_accuracy"
    """Key of the record's ``grid`` section that holds the source run's final accuracy (the
    unchanged team's), for reading off the drop."""

    def __init__(self, options: Any = None):
        self.options = options

    @classmethod
    def from_cell(cls, data: Mapping[str, Any] | None, where: str) -> Ablation:
        """The ablation of a cell with ``ablation: data``; ``ConfigError`` naming ``where``."""
        if cls.options_class is None:
            if data:
                raise ConfigError(f"{where}: evaluate: {cls.name} takes no options, got {dict(data)}")
            return cls()
        return cls(build_dataclass(cls.options_class, dict(data or {}), where))

    def other_cells(self) -> list[str]:
        """Training cells besides the source whose adapters the run reads (same seed)."""
        return []

    def check_team(self, agent_ids: Sequence[str], shared_adapter: bool, where: str) -> None:
        """Refuse (``ConfigError``) options that name agents the env does not have, and a source
        with one shared adapter when the kind changes one agent's adapter."""
        named = [getattr(self.options, "seat", None), *getattr(self.options, "adapters", {})]
        unknown = [a for a in named if a is not None and a not in agent_ids]
        if unknown:
            raise ConfigError(f"{where}: {unknown} not agents of the env; its agents: {', '.join(agent_ids)}")
        if shared_adapter and self.per_agent_adapters:
            raise ConfigError(f"{where}: {self.name} changes one agent's adapter, but the source trains one adapter "
                              "shared by all agents (shared_adapter: true); use a source with one adapter per agent")

    def prepare(self, policy: Any, state: Mapping[str, Any],
                load_cell: Callable[[str], Mapping[str, Any]]) -> dict[str, Any]:
        """Load the changed team into ``policy`` from the source's adapters ``state`` (and
        ``load_cell(cell)``: another training cell's); returns what the record's ``grid`` section
        notes about the change."""
        raise NotImplementedError

    def scripted_seats(self) -> dict[str, Callable[[str, Mapping[str, Any], Mapping[str, Any]], str]]:
        """Seats the changed team plays with a scripted policy (agent id -> ``fn``), beside the
        source config's ``scripted_seats``."""
        return {}


class Final(Ablation):
    name = "final"

    def prepare(self, policy, state, load_cell):
        policy.load_adapter_state_dict(dict(state))
        return {}


class Swapped(Ablation):
    name = "swapped"
    per_agent_adapters = True
    own_folder = False
    source_accuracy_key = "unswapped_accuracy"

    def prepare(self, policy, state, load_cell):
        assignment = rotation(policy.agent_ids)
        policy.load_adapter_state_dict(swap_agent_adapters(state, policy, assignment))
        return {"assignment": assignment}


class BaseSeat(Ablation):
    name = "base_seat"
    per_agent_adapters = True
    options_class = SeatOptions

    def prepare(self, policy, state, load_cell):
        policy.load_adapter_state_dict(zero_seat_adapter(state, policy, self.options.seat))
        return {"seat": self.options.seat}


class FixedMessage(Ablation):
    name = "fixed_message"
    options_class = FixedMessageOptions

    def prepare(self, policy, state, load_cell):
        policy.load_adapter_state_dict(dict(state))
        return {"seat": self.options.seat, "message": self.options.message}

    def scripted_seats(self):
        return {self.options.seat: FixedReply(self.options.message)}


class Combined(Ablation):
    name = "combined"
    per_agent_adapters = True
    plays_every_seat = True
    options_class = CombinedOptions

    def other_cells(self) -> list[str]:
        return list(dict.fromkeys(self.options.adapters.values()))

    @classmethod
    def from_cell(cls, data, where):
        ablation = super().from_cell(data, where)
        if not ablation.options.adapters:
            raise ConfigError(f"{where}.adapters: name at least one agent and the training cell whose adapter "
                              "it takes, e.g. {answerer_0: answerer_alone}")
        return ablation

    def prepare(self, policy, state, load_cell):
        states = {cell: load_cell(cell) for cell in self.other_cells()}
        sources = {agent: (states[cell], agent) for agent, cell in self.options.adapters.items()}
        policy.load_adapter_state_dict(combine_adapters(state, policy, sources))
        return {"adapters": dict(self.options.adapters)}


ABLATIONS: dict[str, type[Ablation]] = {cls.name: cls for cls in (Final, Swapped, BaseSeat, FixedMessage, Combined)}
"""Evaluation-only cell kinds that change a training cell's final team, by ``evaluate`` name."""
