"""The learner registry: ``algorithm: <name>`` in a config resolves here.

Three sources, one namespace:

* the learners marft ships (``BUILTIN_LEARNERS``);
* ``marft_agents.register_learner(name, cls)`` at run time (a class, or a ``"module:Class"``
  string imported on first use);
* the entry-point group ``marft_agents.learners`` of any installed package, read once, the first
  time a name is looked up or listed; nothing is imported until a learner is used::

      # pyproject.toml of your package
      [project.entry-points."marft_agents.learners"]
      rloo = "marft_rloo:RLOO"

So ``marft train``, ``marft eval`` and ``python -m baselines.run`` find an installed plugin with
no import flag. A name registered at run time wins over an entry point of the same name.
"""

from __future__ import annotations

import pkgutil
import warnings
from importlib.metadata import entry_points
from typing import Any

from marft_agents.learners.protocol import check_learner_class

ENTRY_POINT_GROUP = "marft_agents.learners"

EVAL_ONLY = "eval_only"
"""The name of the evaluation-only baseline (:class:`~marft_agents.learners.eval_only.EvalOnly`),
which records of runs that train nothing name as their algorithm (a grid's untrained cells)."""

BUILTIN_LEARNERS: dict[str, str] = {
    "mappo_action": "marft_agents.learners.mappo_action:ActionLevelMAPPO",  # MARFT-A
    "mappo_token": "marft_agents.learners.mappo_token:TokenLevelMAPPO",  # MARFT-T
    "ppo": "marft_agents.learners.single_agent:SingleAgentPPO",  # one-role profiles only
    "ppo_token": "marft_agents.learners.single_agent:SingleAgentTokenPPO",  # one-role profiles only
    EVAL_ONLY: "marft_agents.learners.eval_only:EvalOnly",  # no training
    "grpo": "marft_agents.learners.grpo:GRPO",  # critic-free, group-relative
}
"""The shipped learners (``module:Class``; imported on first use): the one list of their names."""

_registry: dict[str, Any] = dict(BUILTIN_LEARNERS)  # name -> class or "module:Class"
_origin: dict[str, str] = {name: "marft" for name in BUILTIN_LEARNERS}
_plugins_loaded = False


class UnknownLearnerError(ValueError):
    """``algorithm`` names no registered learner; the message lists the known ones."""


def register_learner(name: str, cls: Any, replace: bool = False) -> None:
    """Make ``cls`` (a learner class or a ``"module:Class"`` string) available as ``name``.

    Registering a taken name raises unless ``replace``; classes are checked against
    :class:`~marft_agents.learners.protocol.Learner` now, strings when first used.
    """
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"a learner name must be a non-empty string, got {name!r}")
    if name in _registry and not replace and _registry[name] is not cls:
        raise ValueError(f"a learner named {name!r} is already registered ({_describe(name)}); "
                         "pass replace=True to override it")
    if not isinstance(cls, str):
        check_learner_class(name, cls)
    _registry[name] = cls
    _origin[name] = "register_learner"


def list_learners() -> list[str]:
    """Names of every registered learner (shipped, registered at run time, entry points)."""
    _load_plugins()
    return sorted(_registry)


def get_learner(name: str) -> type:
    """The learner class registered as ``name`` (importing it if it was given as a string)."""
    _load_plugins()
    if name not in _registry:
        raise UnknownLearnerError(
            f"unknown algorithm {name!r}; known learners: {', '.join(sorted(_registry))}. Plugins come "
            f"from the {ENTRY_POINT_GROUP!r} entry-point group of installed packages or from "
            "marft_agents.register_learner(name, cls); see marft_agents/ADDING_A_LEARNER.md"
        )
    target = _registry[name]
    if isinstance(target, str):
        target = _import(name, target)
        check_learner_class(name, target)
        _registry[name] = target
    return target


def learner_trains(name: str) -> bool:
    """Whether the learner registered as ``name`` trains: its class attribute ``trains`` (optional
    for plugins, True when absent; the evaluation-only baseline sets False). Imports the class."""
    return bool(getattr(get_learner(name), "trains", True))


def _import(name: str, spec: str) -> type:
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
