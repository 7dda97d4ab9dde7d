"""Scripted policies: plain functions that play an agent's seat instead of the model.

A scripted policy is ``function(agent_id, observation, info) -> utterance`` (the AEC
observation dict and info of that agent's turn), named ``module:function`` (``scripted:`` in
front is optional). ``marft score --policy scripted:...`` plays every seat with one; a training
config's ``scripted_seats`` plays some seats with them (a partner that never errs, against which
one role trains alone; :mod:`marft_agents.collector`). The Relay and SolveCheck oracles exist in
this form in :mod:`marft_envs.tasks.scripted_teams`.
"""

from __future__ import annotations

import pkgutil
from collections.abc import Callable
from typing import Any

SCRIPTED_PREFIX = "scripted:"

ScriptedPolicy = Callable[[str, dict[str, Any], dict[str, Any]], str]
"""``fn(agent_id, observation, info) -> utterance``."""


class ScriptedPolicyError(ValueError):
    """A scripted policy that cannot be loaded or a seat that is not an agent; the message says why."""


def load_scripted(spec: str) -> ScriptedPolicy:
    """Import the function named by ``[scripted:]module:function``."""
    target = spec[len(SCRIPTED_PREFIX):] if spec.startswith(SCRIPTED_PREFIX) else spec
    module_name, _, attr = target.partition(":")
    if not module_name or not attr:
        raise ScriptedPolicyError(f"scripted policy {spec!r} must look like 'scripted:module:function'")
    try:
        fn = pkgutil.resolve_name(target)
    except AttributeError:
        fn = None
    except ImportError as err:
        raise ScriptedPolicyError(f"scripted policy {spec!r}: cannot import {module_name!r} ({err})") from err
    if not callable(fn):
        raise ScriptedPolicyError(f"scripted policy {spec!r}: {module_name!r} has no function {attr!r}")
    return fn


def load_seats(seats: dict[str, str], agent_ids: list[str]) -> dict[str, ScriptedPolicy]:
    """A config's ``scripted_seats`` (agent id -> ``"module:function"``) as functions; a seat that
    is not one of ``agent_ids`` is refused."""
    unknown = sorted(set(seats) - set(agent_ids))
    if unknown:
        raise ScriptedPolicyError(f"scripted_seats names {unknown}, not agents of this env; its agents: "
                                  f"{', '.join(agent_ids)}")
    return {agent: load_scripted(spec) for agent, spec in seats.items()}
