"""The ``learner:`` section of ``algorithm: grpo``, and the names its choices accept.

Plain data; the learner is :mod:`marft_agents.learners.grpo`, the advantage maths
:mod:`marft_agents.group_math`; the names the choices accept are the registered estimators
(:mod:`marft_agents.settings.estimators`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from marft_agents.settings.estimators import estimator_names

GROUPINGS: tuple[str, ...] = estimator_names("grouping")
"""The registered groupings (:data:`marft_agents.settings.estimators.ESTIMATORS`)."""
Grouping = Literal[GROUPINGS]  # type: ignore[valid-type]
"""What is compared with what (``GRPOOptions.grouping``, :mod:`marft_agents.group_math`)."""
NORMALISATIONS: tuple[str, ...] = estimator_names("normalisation")
"""The registered normalisations."""
Normalisation = Literal[NORMALISATIONS]  # type: ignore[valid-type]
"""How a unit's score is compared with its group's (``GRPOOptions.normalisation``)."""
Aggregation = Literal["token", "sequence"]
"""How per-token losses are averaged (``GRPOOptions.aggregation``)."""


@dataclass
class GRPOOptions:
    """Options of ``algorithm: grpo`` (the config's ``learner:`` section)."""

    group_size: int = 4
    """Episodes per task (k >= 2): each task drawn is played k times and the k episodes are
    compared with each other. ``schedule.episodes_per_update`` must be a multiple of it (e.g.
    8 tasks x 4 = 32)."""
    grouping: Grouping = "team"
    """What is compared with what (``group_math``). ``team``: an episode's team return against
    the other episodes of its group, the same advantage for every agent's decisions; this is the
    joint-reward grouping of MAGRPO (multi-agent GRPO for LLM collaboration).
    ``agent``: each agent's score normalised only among that agent's samples of the group, the
    per-agent normalisation Dr. MAS argues for, since agents with different reward scales would
    otherwise distort each other's advantages. ``agent_turn``: groups of one agent's utterances
    at one round of one task, as in AT-GRPO (agent- and turn-wise grouping), because a role's
    turn-2 prompt (with feedback) is not comparable with its turn-1 prompt or another role's.
    ``step``: GiGPO's two levels (Feng et al., 2025, arXiv 2505.10978): the ``team`` episode-level
    advantage plus ``step_weight`` times a step-level one, among the decisions whose acting
    agent saw the identical observation text in the same task group (an *anchor state*),
    comparing their discounted returns-to-go (``step_gamma`` per round)."""
    normalisation: Normalisation = "mean_std"
    """``mean_std``: subtract the group mean, divide by the group std (GRPO, Shao et al., 2024,
    DeepSeekMath). ``mean``: subtract the mean only; Dr. GRPO (Liu et al., 2025, "Understanding
    R1-Zero-like training") shows the std division over-weights groups that are almost all right
    or all wrong, i.e. biases updates by question difficulty. ``leave_one_out``: subtract the mean
    of the other k - 1 samples, an unbiased baseline (RLOO, Ahmadian et al., 2024)."""
    aggregation: Aggregation = "token"
    """``token``: average the per-token loss over every token of the batch, so long answers count
    per token (DAPO's token-level loss, Yu et al., 2025). ``sequence``: average within each
    utterance first, then over utterances (the original GRPO objective), which lets each
    utterance weigh the same whatever its length."""
    agent_rewards: bool = False
    """Add each agent's env-reported per-agent rewards (``infos["agent_reward"]``, e.g. a format
    reward) to its score; used by the ``agent`` and ``agent_turn`` groupings only (the ``team``
    score is the team return)."""
    step_gamma: float = 0.95
    """(``grouping: step``) The discount per round of a decision's return-to-go,
    ``sum_{t' >= t} step_gamma**(t' - t) * R_t'`` over the team rewards of its round t and later
    (GiGPO's step return; 0.95 as in verl-agent's GiGPO recipes)."""
    step_weight: float = 1.0
    """(``grouping: step``) GiGPO's omega: the final advantage is the episode-level advantage
    plus ``step_weight`` times the step-level one (1.0, GiGPO's default; 0 gives ``team``)."""
    kl_coef: float = 0.0
    """Weight of a per-token KL(policy || reference) penalty (reference = base model, adapters
    off), in the k2 form ``0.5 * (log pi - log ref)**2`` whose expected gradient is that of
    KL(pi || ref), the direction GRPO's objective penalises (Shao et al., 2024); its k3 estimate
    used directly as a loss would follow KL(ref || pi) instead. 0 = none (no reference pass).
    Use this, not ``ppo.kl_coef``."""

    def __post_init__(self) -> None:
        if self.group_size < 2:
            raise ValueError(f"group_size must be >= 2 (a group of one has nothing to compare with), "
                             f"got {self.group_size}")
        if not 0.0 <= self.step_gamma <= 1.0:
            raise ValueError(f"step_gamma must be in [0, 1], got {self.step_gamma}")
        if self.step_weight < 0:
            raise ValueError(f"step_weight must be >= 0, got {self.step_weight}")
        if self.kl_coef < 0:
            raise ValueError(f"kl_coef must be >= 0, got {self.kl_coef}")
