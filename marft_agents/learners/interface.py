"""The public learner interface: what the Trainer gives a learner and what it expects back.

A learner is any class with the attributes and methods of :class:`Learner` (structural typing:
no base class to inherit; ``isinstance(learner, Learner)`` holds for every learner marft ships).
``marft_agents/ADDING_A_LEARNER.md`` walks through writing one;
``marft_agents.register_learner`` (or the ``marft_agents.learners`` entry-point group) makes it
available as ``algorithm: <name>`` in a config, and ``marft_agents.testing.learner_api_test``
checks one against this contract.

Life of a learner in a run (``marft_agents/run/trainer.py``):

1. ``cfg.learner`` is built from the YAML ``learner:`` section as an instance of the class's
   ``options_class`` (strict keys and types, like every other section), or is None when the
   class declares no options (``options_class = None``). The class's optional ``trains``
   (default True) says whether the run trains at all (the training-only config checks and
   warnings apply only then).
2. The policy is built with a critic only when ``value_mode`` is not None.
3. ``cls(policy, cfg, agent_ids)`` constructs the learner (refused when the env has more agents
   than the class's optional ``max_agents``); :func:`check_learner_instance` checks it.
4. The collector is built with ``values=`` :func:`run_values` (the learner's optional
   ``critic_values``, else its ``value_mode``) and
   ``group_size=learner.group_size``; ``schedule.episodes_per_update`` must be a multiple of it.
5. Under several processes (``torchrun``) the Trainer sets ``learner.data_parallel``, which only
   a class declaring that attribute accepts (optional member; see :data:`OPTIONAL_MEMBERS`). In
   one process it leaves the attribute as the class declared it.
6. Every update: ``rollout = collector.collect(cfg.schedule.episodes_per_update)`` then
   ``metrics = learner.update(rollout, update_index)``.
7. Checkpoints save ``learner.state_dict()``; a resume calls ``load_state_dict`` on a fresh learner.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, ClassVar, Protocol, runtime_checkable

from marft_agents.episodes import VALUE_MODES, Rollout
from marft_agents.run_plan import RunConfig

CLASS_MEMBERS: tuple[str, ...] = ("value_mode", "options_class")
"""Members of :class:`Learner` read from the class, before any learner exists."""
INSTANCE_MEMBERS: tuple[str, ...] = ("group_size",)
"""Data members of :class:`Learner` read from the constructed learner (a class default will do)."""
METHODS: tuple[str, ...] = ("trainable_agents", "update", "state_dict", "load_state_dict")
"""Methods of :class:`Learner` besides ``__init__``."""
REQUIRED_MEMBERS: tuple[str, ...] = CLASS_MEMBERS + INSTANCE_MEMBERS + METHODS
"""Every member of :class:`Learner` (what ``isinstance(learner, Learner)`` looks for)."""

OPTIONAL_MEMBERS: dict[str, str] = {
    "trains": "class attribute, bool, default True: whether update() trains the adapters. False (the "
              "evaluation-only baseline): the run's training-only config checks (sampling the loss can "
              "score, no LoRA dropout) and warnings are skipped, and update() must leave every adapter as "
              "it was (read by marft_agents.learners.registry.learner_trains)",
    "max_agents": "class attribute, int >= 1: the env may have at most this many agents "
                  "(single-agent PPO sets 1); absent = any number",
    "critic_values": "instance attribute, one of VALUE_MODES: what this run's critic values, when the "
                     "run decides not to use the critic the class declares (BaseLearner's: None under a "
                     "baseline without a critic, such as advantage.baseline: group); absent = value_mode "
                     "(read by run_values)",
    "data_parallel": "attribute, on the class None or marft_agents.runtime.distributed.SINGLE_PROCESS (the "
                     "one-process stand-in, with DataParallel's methods; BaseLearner's): declares that "
                     "update() supports several ranks; the Trainer then sets it to a "
                     "marft_agents.runtime.distributed.DataParallel under torchrun and leaves it as declared in one "
                     "process. A learner without it is refused under several ranks",
}
"""Members a learner may declare and the Trainer honours, but need not have (so they are not
members of the ``typing.Protocol``, whose ``isinstance`` would demand them)."""


@runtime_checkable
class Learner(Protocol):
    """A training algorithm the Trainer can run (see the module docstring for the call order).

    Class attributes (read before the learner exists, to build the policy and validate config):
    ``value_mode`` and ``options_class``. Instance attribute: ``group_size`` (it may come from the
    options, or be a class default). Optional (:data:`OPTIONAL_MEMBERS`): ``trains`` (default
    True), ``max_agents``, ``data_parallel``.
    """

    value_mode: ClassVar[str | None]
    """One of ``VALUE_MODES``. None: no critic adapter, no value head, no value pass."""
    options_class: ClassVar[type | None]
    """A dataclass declaring this learner's options, one docstring per field (None: no options;
    the config's ``learner:`` section must then be empty)."""
    group_size: int
    """Episodes per task group: the collector plays this many episodes of the same task (same
    reset seed and options, independent policy samples) one after another in the plan, and
    records the group in ``EpisodeRecord.group`` / ``Decision.group``. 1 = every episode its own
    task. ``schedule.episodes_per_update`` must be a multiple of it."""

    def __init__(self, policy: Any, cfg: RunConfig, agent_ids: Sequence[str]) -> None:
        """``policy``: the ``MultiAgentPolicy`` (adapters per agent or shared, critic only if
        ``value_mode`` is set); ``cfg``: the whole ``TrainConfig`` (``cfg.learner`` = the built
        options); ``agent_ids``: the env's agents in profile order."""

    def trainable_agents(self, update: int) -> list[str]:
        """Agents whose adapters train at update ``update`` (0-based); used for reporting."""

    def update(self, rollout: Rollout, update: int) -> dict[str, float]:
        """Train on one rollout of whole episodes; return flat float metrics (e.g.
        ``losses/policy_loss``). ``update`` counts from 0 and is the same after a resume."""

    def state_dict(self) -> dict[str, Any]:
        """Everything (optimizer states, RNG states, counters) a resumed run needs to continue
        exactly; adapters and value heads are saved by the Trainer, not here. Must be
        ``torch.save``-able."""

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what ``state_dict`` returned."""


def run_values(learner: Any) -> str | None:
    """What the collector records from the critic for ``learner``'s run: its ``critic_values``
    where it declares one (:data:`OPTIONAL_MEMBERS`), else its class's ``value_mode``."""
    return learner.critic_values if hasattr(learner, "critic_values") else learner.value_mode


def _where(name: str, cls: type) -> str:
    return f"learner {name!r} ({cls.__module__}.{cls.__qualname__})"


def check_learner_class(name: str, cls: Any) -> None:
    """Raise ``TypeError`` saying what is missing when ``cls`` cannot serve as a learner."""
    if not isinstance(cls, type):
        raise TypeError(f"learner {name!r} must be a class, got {type(cls).__name__} {cls!r}")
    missing = [m for m in METHODS if not callable(getattr(cls, m, None))]
    if missing:
        raise TypeError(f"{_where(name, cls)} lacks the methods {missing}; see marft_agents/ADDING_A_LEARNER.md")
    absent = [m for m in CLASS_MEMBERS if not hasattr(cls, m)]
    if absent:
        raise TypeError(f"{_where(name, cls)} lacks the class attributes {absent} (value_mode: one of "
                        f"{VALUE_MODES}; options_class: a dataclass or None); see marft_agents/ADDING_A_LEARNER.md")
    mode = cls.value_mode
    if mode not in VALUE_MODES:
        raise TypeError(f"learner {name!r}: value_mode must be one of {VALUE_MODES}, got {mode!r}")
    options = cls.options_class
    if options is not None and not (isinstance(options, type) and dataclasses.is_dataclass(options)):
        raise TypeError(f"learner {name!r}: options_class must be a dataclass or None, got {options!r}")
    trains = getattr(cls, "trains", True)
    if not isinstance(trains, bool):
        raise TypeError(f"learner {name!r}: trains must be True or False (or absent: True), got {trains!r}")
    limit = getattr(cls, "max_agents", None)
    if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 1):
        raise TypeError(f"learner {name!r}: max_agents must be an int >= 1 or absent, got {limit!r}")


def check_learner_instance(name: str, learner: Any) -> None:
    """Raise ``TypeError`` when a constructed learner lacks a :class:`Learner` member or its
    ``group_size`` is not an int >= 1 (what the Trainer reads right after construction)."""
    missing = [m for m in REQUIRED_MEMBERS if not hasattr(learner, m)]
    if missing or not isinstance(learner, Learner):
        raise TypeError(f"{_where(name, type(learner))} lacks the members {missing} of marft_agents.Learner "
                        "(set group_size in __init__, or as a class attribute: 1 = no grouping)")
    size = learner.group_size
    if not isinstance(size, int) or isinstance(size, bool) or size < 1:
        raise TypeError(f"learner {name!r}: group_size must be an int >= 1, got {size!r}")
