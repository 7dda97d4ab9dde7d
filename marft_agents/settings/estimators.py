"""The advantage estimators, registered by name: the one list of the names a config accepts.

Three families, each a registry of pure functions with one calling convention (verl keeps its
``ADV_ESTIMATOR_REGISTRY`` the same way):

``baseline`` (``advantage.baseline``, the MAPPO learners)
    ``fn(batch: EpisodeTables) -> DecisionTargets``: per episode and decision position, the
    advantage and the critic's regression target
    (:mod:`marft_agents.learners.estimators`). An estimator may also have a ``token`` form
    (``fn(inputs, gamma, lam, gamma_token, lam_token)``, per-token GAE) that the token-level
    learner runs instead of broadcasting the decision's advantage over the utterance.
``grouping`` (``learner.grouping``, GRPO)
    ``fn(rollout, options) -> list[Units]``: which units are compared with which, and their
    scores, in one or more weighted unit sets (:mod:`marft_agents.group_math`).
``normalisation`` (``learner.normalisation``, GRPO)
    ``fn(scores [n], eps) -> [n]``: a group's advantages from its scores, for a group of
    n >= 2 whose scores are not all equal (equal or single-unit groups get 0 before it runs).

A new estimator is its function plus one :class:`Estimator` line in :data:`ESTIMATORS`; the
config's choices (``settings.advantage.BASELINES``, ``settings.grpo.GROUPINGS`` /
``NORMALISATIONS``) and its capabilities (whether a critic runs, whether task groups are
needed) are read from here. Torch-free: the functions are named ``"module:function"`` and
imported on first use (:func:`estimator_function`).
"""

from __future__ import annotations

import pkgutil
from dataclasses import dataclass
from typing import Any, Callable

FAMILIES = ("baseline", "grouping", "normalisation")
"""The estimator families (module docstring)."""
CENTRES = ("mean", "others")
"""What a normalisation centres a unit's score on before any scaling (:attr:`Estimator.centre`)."""


@dataclass(frozen=True)
class Estimator:
    """One registered estimator: its name, family, function and the capabilities the config's
    resolution and the learners read without importing it."""

    name: str
    family: str
    function: str
    """``"module:function"``, imported on first use."""
    uses_critic: bool = False
    """(``baseline``) Whether the critic is valued at collection and trained."""
    needs_groups: bool = False
    """Whether it compares the episodes of a task group (``schedule.group_size`` >= 2)."""
    token_function: str | None = None
    """(``baseline``) Its per-token form for the token-level learner; None: the decision's
    advantage is broadcast over the utterance's tokens."""
    centre: str | None = None
    """(``normalisation``) The baseline its advantages deviate from before any scaling (one of
    :data:`CENTRES`): ``mean``, the mean of the key's units, this one included; ``others``, the
    mean of the other units (leave-one-out). What ``baseline/gain`` measures
    (:mod:`marft_agents.learners.baseline_gain`); None: not declared (no such figures)."""

    def __post_init__(self) -> None:
        if self.centre is not None and self.centre not in CENTRES:
            raise ValueError(f"estimator {self.name!r}: centre must be one of {', '.join(CENTRES)} or None, "
                             f"got {self.centre!r}")


_E = "marft_agents.learners.estimators"
_G = "marft_agents.group_math"
ESTIMATORS: tuple[Estimator, ...] = (
    Estimator("critic", "baseline", f"{_E}:critic_gae", uses_critic=True,
              token_function="marft_agents.ppo_math:gae_token_level"),
    Estimator("group", "baseline", f"{_E}:group_loo", needs_groups=True),
    Estimator("group_critic", "baseline", f"{_E}:group_critic", uses_critic=True, needs_groups=True),
    Estimator("team", "grouping", f"{_G}:team_units", needs_groups=True),
    Estimator("agent", "grouping", f"{_G}:agent_units", needs_groups=True),
    Estimator("agent_turn", "grouping", f"{_G}:agent_turn_units", needs_groups=True),
    Estimator("step", "grouping", f"{_G}:step_units", needs_groups=True),
    Estimator("mean", "normalisation", f"{_G}:mean_only", centre="mean"),
    Estimator("mean_std", "normalisation", f"{_G}:mean_std", centre="mean"),
    Estimator("leave_one_out", "normalisation", f"{_G}:leave_one_out", centre="others"),
)
"""Every registered estimator, in the order the config lists its choices."""

_BY_NAME = {(e.family, e.name): e for e in ESTIMATORS}
_FUNCTIONS: dict[str, Callable[..., Any]] = {}


def estimator_names(family: str) -> tuple[str, ...]:
    """The registered names of ``family``, in declaration order."""
    if family not in FAMILIES:
        raise ValueError(f"estimator family must be one of {', '.join(FAMILIES)}, got {family!r}")
    return tuple(e.name for e in ESTIMATORS if e.family == family)


def estimator(family: str, name: str) -> Estimator:
    """The :class:`Estimator` registered as ``name`` in ``family``; one line naming the
    registered ones otherwise."""
    found = _BY_NAME.get((family, name))
    if found is None:
        raise ValueError(f"unknown {family} estimator {name!r}; registered: {', '.join(estimator_names(family))}")
    return found


def estimator_function(family: str, name: str, token: bool = False) -> Callable[..., Any]:
    """The function registered as ``name`` (``token``: its per-token form, None if it has none)."""
    spec = estimator(family, name)
    target = spec.token_function if token else spec.function
    if target is None:
        return None  # type: ignore[return-value]
    if target not in _FUNCTIONS:
        _FUNCTIONS[target] = pkgutil.resolve_name(target)
    return _FUNCTIONS[target]
