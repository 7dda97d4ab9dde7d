"""What a PPO-style learner trains on: one :class:`Sample` per decision, and the units
(:class:`PolicyUnits`) at which a learner forms its ratio. See ``learners/base.py`` for the update loop
that consumes them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from marft_agents.episodes import Decision


@dataclass
class Sample:
    """Training targets of one decision."""

    agent_id: str
    adapter: str
    """The policy adapter that acted."""
    critic: str
    """The critic adapter that values this decision's states (``policy.critic_for(agent_id)``)."""
    prompt_ids: list[int]
    response_ids: list[int]
    old_logprobs: torch.Tensor
    """``[L]`` sampling-time log-probs of the response tokens."""
    old_values: torch.Tensor
    """``[]`` (action level) or ``[L]`` (token level) critic values at collection time."""
    advantages: torch.Tensor
    """Same shape as ``old_values``."""
    returns: torch.Tensor
    """Same shape as ``old_values``; the critic's regression target."""
    ref_logprobs: torch.Tensor | None = None
    """``[L]`` log-probs under the reference model (adapters disabled), when a KL term is used."""
    prefix_len: int = 0
    """Leading prompt tokens shared with other rows, as sampled (``Decision.prefix_len``)."""
    critic_prompt_ids: list[int] | None = None
    """The critic's input at this decision (``Decision.critic_prompt_ids``); None = ``prompt_ids``."""
    critic_prefix_len: int = 0
    """Shared-prefix length of ``critic_prompt_ids`` as valued at collection time."""
    episode: int = -1
    """The decision's episode in its rollout (``Decision.episode``; -1 = unknown): the value
    loss's minibatches keep an episode's decisions together (``ValueFit.minibatches``)."""
    behaviour_logprobs: torch.Tensor | None = None
    """``[L]`` log-probs of the response tokens as the sampler computed them (the behaviour
    policy's); None at construction = ``old_logprobs`` as given, which every learner builds from
    ``Decision.logprobs``. ``old_logprobs`` may later be rescored by the learner
    (``ppo.recompute_old_logprobs``); these stay, for the importance weight
    ``ppo.behaviour_is_cap`` (:func:`behaviour_weights`)."""

    def __post_init__(self) -> None:
        if self.behaviour_logprobs is None:
            self.behaviour_logprobs = self.old_logprobs

    @property
    def critic_input(self) -> tuple[list[int], int]:
        """``(ids, prefix_len)`` the critic scores for this decision."""
        if self.critic_prompt_ids is None:
            return self.prompt_ids, self.prefix_len
        return self.critic_prompt_ids, self.critic_prefix_len


def sample_from_decision(decision: Decision, critic: str, old_values: torch.Tensor,
                         advantages: torch.Tensor, returns: torch.Tensor) -> Sample:
    """A :class:`Sample` carrying ``decision``'s ids, old log-probs and critic input."""
    return Sample(
        agent_id=decision.agent_id, adapter=decision.adapter, critic=critic,
        prompt_ids=decision.prompt_ids, response_ids=decision.response_ids, prefix_len=decision.prefix_len,
        old_logprobs=torch.tensor(decision.logprobs, dtype=torch.float32),  # [L]
        old_values=old_values, advantages=advantages, returns=returns,
        critic_prompt_ids=decision.critic_prompt_ids, critic_prefix_len=decision.critic_prefix_len,
        episode=decision.episode,
    )


def episode_key(sample: Sample) -> Any:
    """Which episode a sample belongs to (its own group when unknown)."""
    return sample.episode if sample.episode >= 0 else ("unknown", id(sample))


def episode_minibatches(samples: list[Sample], rng: np.random.Generator, size: int) -> list[list[Sample]]:
    """Whole episodes in a random order, an episode's decisions adjacent, cut every ``size``
    decisions: the value loss's minibatches. Together, an episode's critic inputs (each extends
    the one before, ``critic.GlobalStateLog``) share one forward row."""
    if not samples:
        return []
    episodes: dict[Any, list[Sample]] = {}
    for s in samples:
        episodes.setdefault(episode_key(s), []).append(s)
    groups = list(episodes.values())
    flat = [s for g in rng.permutation(len(groups)) for s in groups[g]]
    return [flat[start: start + size] for start in range(0, len(flat), size)]


@dataclass
class PolicyUnits:
    """The units at which a learner forms its PPO ratio, for one micro-batch.

    All tensors share one shape: ``[B]`` (one unit per decision) or ``[B, T]`` (per token).
    """

    logprobs: torch.Tensor
    """Current log-prob of each unit (with grad)."""
    old_logprobs: torch.Tensor
    """Log-prob of each unit when it was sampled (or rescored)."""
    advantages: torch.Tensor
    mask: torch.Tensor | None = None
    """1 on real units, 0 on padding; None = every entry is a unit."""
    weights: torch.Tensor | None = None
    """Per-unit weight in the minibatch sum (None = 1); see ``BaseLearner.units``."""


def behaviour_weights(samples: Sequence[Sample], old: torch.Tensor, mask: torch.Tensor, per_token: bool,
                      cap: float, mean: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Truncated importance weights ``min(exp(old - behaviour), cap)`` of a micro-batch's policy
    units, and the per-token gaps ``|old - behaviour|``.

    ``old [B, T]``: the learner's old log-probs of the response tokens (rescored); ``mask [B, T]``
    their response mask. ``per_token``: one weight per token (``[B, T]``, units of token-level
    learners), else one per decision (``[B]``: the utterance's probability ratio, the exp of the
    summed token log-ratios; with ``mean``, the exp of their mean, the per-token geometric mean
    that matches ``ppo.logprob_reduction: mean``'s decision ratio: a summed ratio over a long
    utterance multiplies many small per-token gaps into a weight that is nearly always
    truncated). No gradient flows through the weights.
    """
    behaviour = pad_stack([s.behaviour_logprobs for s in samples], old.shape[1]).to(old.device)  # [B, T]
    delta = (old.detach().float() - behaviour) * mask  # [B, T] log(pi_old / pi_behaviour) per token
    if per_token:
        log_ratio = delta  # [B, T]
    elif mean:
        log_ratio = delta.sum(dim=1) / mask.sum(dim=1).clamp(min=1)  # [B]
    else:
        log_ratio = delta.sum(dim=1)  # [B]
    return torch.exp(log_ratio).clamp(max=cap), delta.abs()


def pad_stack(rows: Sequence[torch.Tensor], length: int, value: float = 0.0) -> torch.Tensor:
    """Right-pad 1-D tensors to ``length`` and stack them -> ``[B, length]``."""
    out = torch.full((len(rows), length), value, dtype=torch.float32)
    for b, row in enumerate(rows):
        out[b, : row.numel()] = row.float()
    return out


def response_mask(samples: Sequence[Sample], length: int) -> torch.Tensor:
    """``[B, length]`` 1 on the response tokens of each sample."""
    mask = torch.zeros((len(samples), length), dtype=torch.float32)
    for b, s in enumerate(samples):
        mask[b, : len(s.response_ids)] = 1.0
    return mask
