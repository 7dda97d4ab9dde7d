"""The public learner interface: what the Trainer gives a learner and what it expects back.

A learner is any class with the attributes and methods of :class:`Learner` (structural typing:
no base class to inherit). ``marft_agents/ADDING_A_LEARNER.md`` walks through writing one;
``marft_agents.register_learner`` (or the ``marft_agents.learners`` entry-point group) makes it
available as ``algorithm: <name>`` in a config.

Life of a learner in a run (``marft_agents/trainer.py``):

1. ``cfg.learner`` is built from the YAML ``learner:`` section as an instance of the class's
   ``options_class`` (strict keys and types, like every other section), or is None when the
   class declares no options.
2. The policy is built with a critic only when ``value_mode`` is not None.
3. ``cls(policy, cfg, agent_ids)`` constructs the learner.
4. The collector is built with ``values=learner.value_mode`` and
   ``group_size=learner.samples_per_task``.
5. Every update: ``rollout = collector.collect(cfg.schedule.episodes_per_update)`` then
   ``metrics = learner.update(rollout, update_index)``.
6. Checkpoints save ``learner.state_dict()``; a resume calls ``load_state_dict`` on a fresh learner.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar, Protocol, runtime_checkable

from marft_agents.rollout import Rollout

VALUE_MODES: tuple[str | None, ...] = (None, "state", "token")
"""What a learner may ask the collector to record from the critic: nothing (and no critic is
built at all), ``Decision.value`` = V(prompt) per decision, or ``Decision.token_values`` =
V(prompt + response[:j]) before every response token."""


@runtime_checkable
class Learner(Protocol):
    """A training algorithm the Trainer can run (see the module docstring for the call order).

    Class attributes (read before the learner exists, to build the policy and validate config):
    ``value_mode`` and ``options_class``; optional: ``max_agents``. Instance attribute:
    ``samples_per_task`` (it may come from the options).
    """

    value_mode: ClassVar[str | None]
    """One of ``VALUE_MODES``. None: no critic adapter, no value head, no value pass."""
    options_class: ClassVar[type | None]
    """A dataclass declaring this learner's options, one docstring per field (None: no options;
    the config's ``learner:`` section must then be empty)."""
    samples_per_task: int
    """Episodes per task group: the collector plays this many episodes of the same task (same
    reset seed and options, independent policy samples) one after another in the plan, and
    records the group in ``EpisodeRecord.group`` / ``Decision.group``. 1 = every episode its own
    task. ``schedule.episodes_per_update`` must be a multiple of it."""

    def __init__(self, policy: Any, cfg: Any, agent_ids: Sequence[str]) -> None:
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


def check_learner_class(name: str, cls: Any) -> None:
    """Raise ``TypeError`` saying what is missing when ``cls`` cannot serve as a learner."""
    if not isinstance(cls, type):
        raise TypeError(f"learner {name!r} must be a class, got {type(cls).__name__} {cls!r}")
    missing = [m for m in ("update", "state_dict", "load_state_dict", "trainable_agents")
               if not callable(getattr(cls, m, None))]
    if missing:
        raise TypeError(f"learner {name!r} ({cls.__module__}.{cls.__qualname__}) lacks the methods "
                        f"{missing}; see marft_agents/ADDING_A_LEARNER.md")
    mode = getattr(cls, "value_mode", "<missing>")
    if mode not in VALUE_MODES:
        raise TypeError(f"learner {name!r}: value_mode must be one of {VALUE_MODES}, got {mode!r}")
    options = getattr(cls, "options_class", None)
    if options is not None and not hasattr(options, "__dataclass_fields__"):
        raise TypeError(f"learner {name!r}: options_class must be a dataclass or None, got {options!r}")
