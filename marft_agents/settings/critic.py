"""The ``critic:`` section: the value function(s) built next to the agents' adapters.

Plain data; what the modes mean is in :mod:`marft_agents.model.critic` (its module docstring).
"""

from __future__ import annotations

import logging
import typing
from dataclasses import dataclass
from typing import Literal

from marft_agents.settings.lora import LoraSpec

log = logging.getLogger(__name__)

CriticMode = Literal["centralised", "per_agent", "local"]
"""What the critic reads and how many there are (see :mod:`marft_agents.model.critic`)."""
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
    model: str | None = None
    """The base model the critic runs on in a team of different models (a name in ``models``, or
    ``default``); None = the first agent's. It reads the global state rendered with that model's
    tokenizer (``marft_agents.model.team``)."""
    value_head_init_std: float = 0.0
    """Std of the head's normal weight init; 0 = zero weights, so initial values equal
    ``value_head_bias`` exactly and early value losses do not swamp the policy update."""
    value_head_bias: float = 0.0
    """Initial bias, i.e. the initial value of every state when the weights start at zero."""
    value_norm: bool = True
    """PopArt value normalisation (van Hasselt et al., 2016; MAPPO's ``ValueNorm``): the head
    predicts normalised values ``(V - mu) / sigma``, with ``mu, sigma`` debiased exponential
    moving statistics of the regression targets, updated before every critic step with the
    head's weights rescaled so its outputs do not move; the value loss is taken in normalised
    units. Its first effect is that a fresh head predicts the mean return instead of 0, so the
    early value error is the return's spread, not its mean. False: raw values (the head's
    output is ``w . h + b``, exactly the behaviour before this option existed)."""
    value_norm_beta: float = 0.9
    """Decay of the normalisers' moving moments per update (0.9: the last ~10 rollouts), so
    ``mu, sigma`` follow a success rate that climbs during training (and the feature statistics
    the adapter's drift)."""
    feature_norm: bool = True
    """Standardise each dimension of the hidden state the value head reads, by its moving mean
    and spread over the states valued at collection (the head's weights rescaled so its outputs
    do not move; :class:`marft_agents.model.critic.ValueHead`). Without it the head fits the component
    every state shares and its values stay nearly constant (``benchmarks/critic_probe.py`` shows
    why). False: the plain head, as before this option existed."""
    per_agent_head: bool = True
    """A team critic (``centralised`` / ``local``) values each acting agent's decisions with a
    value-head row and feature statistics of its own, on the one shared critic adapter
    (:class:`marft_agents.model.critic.ValueHead`'s slots): the states at different agents' decision
    points differ far more than different tasks do, so shared statistics and weights leave each
    agent's task spread small and the critic learns more slowly (compare paired runs with
    ``benchmarks/critic_pairs.py``).
    False: one head for every decision, as before this option existed."""
    ceiling_group_size: int | None = None
    """Deprecated: use ``schedule.group_size`` (grouped sampling is a setting of the schedule, which
    decides the training data, not of a diagnostic). Still read, with one warning line, when
    ``schedule.group_size`` is unset."""
    head_refit_window: int = 0
    """After each update, also solve for the value head by ridge regression on the hidden states
    and returns of the last this-many updates, the ridge strength chosen by cross-validation over
    whole tasks, and keep the current head when no strength beats it
    (``learners/head_refit.py``). The gradient-trained head ranks tasks but spreads its values far
    less than the returns (a small ``critic/value_std`` beside a fair ``critic/value_return_corr``);
    the closed-form fit is not limited by step size.
    State values only (MARFT-A, single-agent PPO). 0 = off: only gradient steps train the head."""
    health_window: int = 10
    """Updates in a row with ``losses/explained_variance`` below ``health_min_ev`` before the
    learner warns that the critic is not learning (once per run, again after a recovery); also
    the updates in a row with ``critic/baseline_gain < 0`` (the critic a worse baseline than the
    group mean) before the learner says to set ``advantage.baseline: group``."""
    health_min_ev: float = 0.05
    """Explained variance under which an update counts towards the warning."""
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
        if not 0.0 <= self.value_norm_beta < 1.0:
            raise ValueError(f"value_norm_beta must be in [0, 1), got {self.value_norm_beta}")
        if self.ceiling_group_size is not None:
            if self.ceiling_group_size < 1:
                raise ValueError(f"ceiling_group_size must be >= 1 or null, got {self.ceiling_group_size}; "
                                 "it is deprecated: set schedule.group_size instead")
            log.warning("critic.ceiling_group_size is deprecated: set schedule.group_size: %d instead",
                        self.ceiling_group_size)
        if self.head_refit_window < 0:
            raise ValueError(f"head_refit_window must be >= 0 (0 = off), got {self.head_refit_window}")
        if self.health_window < 1:
            raise ValueError(f"health_window must be >= 1, got {self.health_window}")
        if self.max_state_chars < 0:
            raise ValueError(f"max_state_chars must be >= 0 (0 = no limit), got {self.max_state_chars}")

    @property
    def reads_global_state(self) -> bool:
        return self.mode in GLOBAL_STATE_MODES
