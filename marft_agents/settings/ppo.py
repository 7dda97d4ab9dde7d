"""The ``ppo:`` section: the PPO / MAPPO hyperparameters the action- and token-level learners
share (the credit strategies it accepts are :mod:`marft_agents.settings.credit`'s). Plain data."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from marft_agents.settings.credit import CreditStrategy


@dataclass
class PPOConfig:
    """PPO / MAPPO hyperparameters shared by the action- and token-level learners."""

    gamma: float = 1.0
    """Discount between rounds (and, with ``credit: step_discounted``, between decisions).
    With ``horizon > 1`` and gamma 1, a task solved in a later round (after failed attempts) is
    worth exactly as much as a first-try success, so nothing pushes the team to get it right
    at once; multi-round configs should set gamma < 1 (e.g. 0.9). The trainer warns when a
    multi-round env trains with gamma 1. 1.0 stays the default because one-round tasks (the
    shipped Arithmetic configs, ``horizon: 1``) have nothing to discount."""
    lam: float = 0.95
    """GAE lambda across decisions (action level) and across utterance boundaries (token level)."""
    gamma_token: float = 1.0
    """Token level: discount between tokens of one utterance. 1.0 because per-token discounting
    shrinks the credit reaching an utterance's first token with its length (0.99**512 ~ 0.006)."""
    lam_token: float = 1.0
    """Token level: GAE lambda between tokens of one utterance."""
    credit: CreditStrategy = "team"
    """Credit assignment (see ``marft_agents/learners/credit.py``)."""
    logprob_reduction: Literal["sum", "mean"] = "sum"
    """Action level: utterance log-prob = sum of token log-probs, or their length-normalised mean."""
    recompute_old_logprobs: bool = False
    """Before the first epoch, replace every policy sample's "old" log-probs with a no-grad pass
    of the learner itself over exactly the micro-batches its policy steps will use (same rows,
    order and padding). In bfloat16 a row's log-probs move with its batch's padding nearly as
    much as cached decoding differs from a full pass (measure it:
    ``python benchmarks/bench_update.py --dtype bfloat16 --recompute-old-logprobs``); with this on, the first
    minibatch starts at ratio exactly 1 and later ones measure only the policy's change. Costs
    one forward pass (no backward) over the policy samples, in the update instead of the
    rollout; makes ``sampling.recompute_logprobs`` unnecessary. Later epochs reshuffle their
    minibatches, so their layouts differ from this pass's."""
    behaviour_is_cap: float | None = None
    """Truncated importance weight for a sampler that is not the learner's own pass (a rollout
    engine with ``scores_in_learner``, e.g. ``sampling.engine: vllm``): each policy-loss unit is
    weighted by ``min(exp(old - behaviour), cap)``, ``old`` the learner's rescored log-prob
    (``recompute_old_logprobs``, required) and ``behaviour`` the sampler's, summed over the
    unit's tokens (truncated importance sampling, as in verl's rollout correction); None = off.
    The sampled distribution is then corrected towards the one the ratio is formed against.
    Logged: ``ppo/behaviour_is_weight`` (mean) and ``ppo/behaviour_is_clipfrac`` (share at the
    cap); ``rollout/behaviour_logprob_gap`` (mean per-token ``|old - behaviour|``) is logged
    whenever the old log-probs are rescored."""
    clip_eps: float = 0.2
    """PPO ratio clip range (lower side, and upper side unless ``clip_eps_high`` is set)."""
    clip_eps_high: float | None = None
    """Upper clip range; None = ``clip_eps``. A larger upper than lower range ("clip higher",
    DAPO, Yu et al., 2025) lets unlikely tokens with positive advantage grow faster, against
    entropy collapse."""
    value_clip: float | None = None
    """Value clipping around the collection-time values (in the value loss's units: normalised
    under ``critic.value_norm``); None (default) disables it. Off by default because it slows the
    critic down without a trust region to protect: a head that starts far from the returns may
    move only ``value_clip`` per update (Andrychowicz et al., 2021, found value clipping does not
    help PPO)."""
    huber_delta: float | None = 10.0
    """Huber threshold of the value loss; None = squared error."""
    entropy_coef: float = 0.0
    """Weight of the entropy bonus."""
    kl_coef: float = 0.0
    """Weight of the KL(policy || reference) loss term (reference = base model, adapters off)."""
    target_kl: float | None = None
    """Stop the remaining PPO epochs of an update once an epoch's mean approx-KL exceeds this."""
    max_grad_norm: float = 1.0
    """Gradient-norm clip, per adapter."""
    normalize_advantages: bool = True
    """Whiten advantages over the decisions (or tokens) of the agents that train this update."""
    critic_warmup_updates: int = 0
    """Updates at the start in which only the critic trains."""
    agent_iteration_interval: int = 0
    """0: all agents train every update. k > 0: agent-by-agent, one agent's adapter trains for k
    updates while the others are frozen, rotating in profile order."""
    train_agents: list[str] | None = None
    """Agents whose adapters train; None = all. The others stay at their initialisation (the
    base model; loaded adapters when resuming): one role trained alone against a frozen
    partner, e.g. to combine separately trained roles at evaluation (``baselines/ablations.py``).
    With ``agent_iteration_interval`` the rotation runs over these agents only."""
