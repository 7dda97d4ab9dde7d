"""The learner registry: ``algorithm: <name>`` in a config resolves here.

Three sources, one namespace:

* the learners marft ships (``BUILTIN_LEARNERS``);
* ``marft_agents.register_learner(name, cls)`` at run time (a class, a ``"module:Class"`` string
  imported on first use, or a :class:`LearnerSpec`);
* the entry-point group ``marft_agents.learners`` of any installed package, read once, the first
  time a name is looked up or listed; nothing is imported until a learner is used::

      # pyproject.toml of your package
      [project.entry-points."marft_agents.learners"]
      rloo = "marft_rloo:RLOO"

So ``marft train``, ``marft eval`` and ``python -m baselines.run`` find an installed plugin with
no import flag. A name registered at run time wins over an entry point of the same name.

Config validation reads a learner's capabilities (``value_mode``, ``options_class``, ``trains``,
``max_agents``: :class:`Capabilities`) without building it, and for the shipped learners without
importing them: their modules import torch, while a config is plain data. So each shipped
learner is declared here as a :class:`LearnerSpec`, the class to import on first use plus the
capabilities validation needs, its options class named by a torch-free module. That spec is the
one declaration: each shipped class takes its capability attributes from it with the class
decorator :func:`declared_by` (``@declared_by("mappo_action")``), so the two cannot disagree;
the first :func:`get_learner` of a name still checks class against spec (a plugin that registers
a spec may declare its class by hand). A plugin is imported to read its capabilities, unless it
registers (or its entry point names) a :class:`LearnerSpec`.

This module and the options classes it names import no torch.
"""

from __future__ import annotations

import pkgutil
import warnings
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any
from marft_agents.settings.advantage import BASELINES

ENTRY_POINT_GROUP = "marft_agents.learners"

EVAL_ONLY = "eval_only"
"""The name of the evaluation-only baseline (:class:`~marft_agents.learners.eval_only.EvalOnly`),
which records of runs that train nothing name as their algorithm (a grid's untrained cells)."""


@dataclass(frozen=True)
class Capabilities:
    """What a config's validation and the trainer read of a learner class before building it: the
    class attributes of the learner interface (:mod:`marft_agents.learners.interface`)."""

    value_mode: str | None
    """One of ``VALUE_MODES``; None: no critic."""
    options_class: type | None
    """The dataclass of the config's ``learner:`` section; None: the learner takes no options."""
    trains: bool = True
    """False for a learner that never trains (the evaluation-only baseline)."""
    max_agents: int | None = None
    """The env may have at most this many agents; None: any number."""
    baselines: tuple[str, ...] = ("critic",)
    """The ``advantage.baseline`` choices the learner's estimator implements."""

    @classmethod
    def of(cls, learner_class: type) -> Capabilities:
        """The capabilities ``learner_class`` declares (``trains`` and ``max_agents`` optional)."""
        return cls(learner_class.value_mode, learner_class.options_class,
                   bool(getattr(learner_class, "trains", True)), getattr(learner_class, "max_agents", None),
                   tuple(getattr(learner_class, "baselines", ("critic",))))


@dataclass(frozen=True)
class LearnerSpec:
    """A learner declared without importing it: the class (``"module:Class"``, imported on first
    use) and the capabilities validation reads, ``options`` naming the options dataclass in a
    module that imports no torch (``"module:Class"``; None: no options)."""

    target: str
    value_mode: str | None
    options: str | None = None
    trains: bool = True
    max_agents: int | None = None
    baselines: tuple[str, ...] = ("critic",)

    def capabilities(self) -> Capabilities:
        options = pkgutil.resolve_name(self.options) if self.options is not None else None
        return Capabilities(self.value_mode, options, self.trains, self.max_agents, tuple(self.baselines))


BUILTIN_LEARNERS: dict[str, LearnerSpec] = {
    "mappo_action": LearnerSpec("marft_agents.learners.mappo_action:ActionLevelMAPPO", "state",  # MARFT-A
                                baselines=BASELINES),
    "mappo_token": LearnerSpec("marft_agents.learners.mappo_token:TokenLevelMAPPO", "token",  # MARFT-T
                               baselines=BASELINES),
    "ppo": LearnerSpec("marft_agents.learners.single_agent:SingleAgentPPO", "state", max_agents=1,
                       baselines=BASELINES),
    "ppo_token": LearnerSpec("marft_agents.learners.single_agent:SingleAgentTokenPPO", "token", max_agents=1,
                             baselines=BASELINES),
    EVAL_ONLY: LearnerSpec("marft_agents.learners.eval_only:EvalOnly", None, trains=False),  # no training
    "grpo": LearnerSpec("marft_agents.learners.grpo:GRPO", None,  # critic-free, group-relative
                        options="marft_agents.settings.grpo:GRPOOptions"),
}
"""The shipped learners, each imported on first use: the one list of their names."""

_registry: dict[str, Any] = dict(BUILTIN_LEARNERS)  # name -> class, LearnerSpec or "module:Class"
_origin: dict[str, str] = {name: "marft" for name in BUILTIN_LEARNERS}
_plugins_loaded = False


def declared_by(name: str) -> Any:
    """Class decorator: give the learner class the capability attributes (``value_mode``,
    ``options_class``, ``trains``, ``max_agents``, ``baselines``) its :data:`BUILTIN_LEARNERS`
    spec ``name`` declares."""
    capabilities = BUILTIN_LEARNERS[name].capabilities()

    def declare(cls: type) -> type:
        for field_name in ("value_mode", "options_class", "trains", "max_agents", "baselines"):
            setattr(cls, field_name, getattr(capabilities, field_name))
        return cls

    return declare


class UnknownLearnerError(ValueError):
    """``algorithm`` names no registered learner; the message lists the known ones."""


def register_learner(name: str, cls: Any, replace: bool = False) -> None:
    """Make ``cls`` (a learner class, a ``"module:Class"`` string or a :class:`LearnerSpec`)
    available as ``name``.

    Registering a taken name raises unless ``replace``; classes are checked against
    :class:`~marft_agents.learners.interface.Learner` now, strings and specs when first used.
    """
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"a learner name must be a non-empty string, got {name!r}")
    if name in _registry and not replace and _registry[name] is not cls:
        raise ValueError(f"a learner named {name!r} is already registered ({_describe(name)}); "
                         "pass replace=True to override it")
    if not isinstance(cls, (str, LearnerSpec)):
        from marft_agents.learners.interface import check_learner_class

        check_learner_class(name, cls)
    _registry[name] = cls
    _origin[name] = "register_learner"


def list_learners() -> list[str]:
    """Names of every registered learner (shipped, registered at run time, entry points)."""
    _load_plugins()
    return sorted(_registry)


def get_learner(name: str) -> type:
    """The learner class registered as ``name`` (importing it if it was given as a string or spec)."""
    from marft_agents.learners.interface import check_learner_class

    target = _lookup(name)
    if isinstance(target, str):
        target = _import(name, target)
    spec = None
    if isinstance(target, LearnerSpec):
        spec, target = target, _import(name, target.target)
    check_learner_class(name, target)
    if spec is not None and Capabilities.of(target) != spec.capabilities():
        raise TypeError(f"learner {name!r}: {spec.target} declares {Capabilities.of(target)}, but its "
                        f"registered spec says {spec.capabilities()}; make the two agree")
    _registry[name] = target
    return target


def learner_capabilities(name: str) -> Capabilities:
    """What the learner registered as ``name`` declares (:class:`Capabilities`), read from its spec
    without importing it where it was registered as one (every shipped learner), else from its class."""
    target = _lookup(name)
    if isinstance(target, str):
        target = _import(name, target)
        _registry[name] = target
    if isinstance(target, LearnerSpec):
        return target.capabilities()
    return Capabilities.of(get_learner(name))


def learner_trains(name: str) -> bool:
    """Whether the learner registered as ``name`` trains: its class attribute ``trains`` (optional
    for plugins, True when absent; the evaluation-only baseline sets False)."""
    return learner_capabilities(name).trains


def _lookup(name: str) -> Any:
    _load_plugins()
    if name not in _registry:
        raise UnknownLearnerError(
            f"unknown algorithm {name!r}; known learners: {', '.join(sorted(_registry))}. Plugins come "
            f"from the {ENTRY_POINT_GROUP!r} entry-point group of installed packages or from "
            "marft_agents.register_learner(name, cls); see marft_agents/ADDING_A_LEARNER.md"
        )
    return _registry[name]


def _import(name: str, spec: str) -> Any:
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ValueError(f"learner {name!r}: entry point {spec!r} must look like 'package.module:Class'")
    try:
        return pkgutil.resolve_name(spec)
    except AttributeError:
        raise ImportError(f"learner {name!r}: module {module_name!r} has no attribute {attr!r}") from None
    except ImportError as err:
        raise ImportError(f"learner {name!r} ({_describe(name)}) could not be imported: {err}") from err


def _describe(name: str) -> str:
    target = _registry.get(name)
    if isinstance(target, LearnerSpec):
        where = target.target
    else:
        where = target if isinstance(target, str) else f"{target.__module__}:{target.__qualname__}"
    return f"{where}, from {_origin.get(name, '?')}"


def _load_plugins() -> None:
    """Read the ``marft_agents.learners`` entry points once (names only; nothing imported)."""
    global _plugins_loaded
    if _plugins_loaded:
        return
    _plugins_loaded = True
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name in BUILTIN_LEARNERS:
            warnings.warn(f"ignoring learner plugin {ep.name!r} ({ep.value}): the name is taken by a "
                          "learner marft ships; choose another name", stacklevel=3)
            continue
        if ep.name in _registry:
            continue  # registered at run time before the first lookup: that one wins
        dist = getattr(ep, "dist", None)
        _registry[ep.name] = ep.value
        _origin[ep.name] = f"entry point of {dist.name if dist else 'an installed package'}"
