"""The maths shared by every PPO-style learner in marft, in one tested module.

Everything here is a pure function of tensors (no model, no env), so it can be checked against
hand-computed values (``tests/agents/test_ppo_math.py``). Conventions:

* ``mask`` tensors are 0/1 (or bool) with the same shape as the data; padded entries are 0.
* GAE works on *sequences of transitions*: entry ``t`` is the transition from state ``s_t`` (value
  ``values[t]``) to ``s_{t+1}`` (value ``values[t+1]``, or ``last_values`` after the last entry),
  with reward ``rewards[t]``. ``dones[t] = 1`` means the episode ended with transition ``t``:
  nothing is bootstrapped from ``s_{t+1}`` and the recursion restarts.
* ``gamma`` and ``lam`` may be a float or a tensor shaped like ``rewards``: a per-transition
  discount. That one function then covers action-level GAE (one entry per agent decision) and
  token-level GAE (one entry per generated token, with a different discount inside an utterance
  than between utterances).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

Tensor = torch.Tensor


# -- masked statistics ----------------------------------------------------------------------------
def masked_sum(x: Tensor, mask: Tensor | None = None, dim: int | None = None) -> Tensor:
    """Sum of ``x`` where ``mask`` is set (all of ``x`` when ``mask`` is None)."""
    if mask is None:
        return x.sum() if dim is None else x.sum(dim)
    m = mask.to(x.dtype)
    return (x * m).sum() if dim is None else (x * m).sum(dim)


def masked_mean(x: Tensor, mask: Tensor | None = None, dim: int | None = None) -> Tensor:
    """Mean of ``x`` over masked-in entries; 0 where nothing is masked in (never NaN)."""
    if mask is None:
        return x.mean() if dim is None else x.mean(dim)
    m = mask.to(x.dtype)
    count = m.sum() if dim is None else m.sum(dim)
    return masked_sum(x, m, dim) / count.clamp(min=1.0)


def masked_var(x: Tensor, mask: Tensor | None = None, unbiased: bool = True) -> Tensor:
    """Variance of the masked-in entries of ``x`` (a scalar)."""
    mean = masked_mean(x, mask)
    centred_sq = (x - mean) ** 2
    if mask is None:
        n = torch.tensor(float(x.numel()), dtype=x.dtype, device=x.device)
    else:
        n = mask.to(x.dtype).sum()
    var = masked_sum(centred_sq, mask) / n.clamp(min=1.0)
    if unbiased:
        # Bessel's correction; with a single sample the (biased) variance 0 is returned.
        var = torch.where(n > 1, var * n / (n - 1).clamp(min=1.0), var)
    return var


def masked_whiten(x: Tensor, mask: Tensor | None = None, shift_mean: bool = True, eps: float = 1e-8) -> Tensor:
    """Normalise the masked-in entries of ``x`` to unit variance (and zero mean if ``shift_mean``).

    Masked-out entries are returned as 0 so that padding never leaks into a loss.
    """
    mean = masked_mean(x, mask)
    var = masked_var(x, mask, unbiased=False)
    out = (x - mean) * torch.rsqrt(var + eps)
    if not shift_mean:
        out = out + mean
    return out if mask is None else out * mask.to(x.dtype)


# -- advantage estimation -------------------------------------------------------------------------
def gae(
    rewards: Tensor,
    values: Tensor,
    dones: Tensor,
    gamma: float | Tensor = 1.0,
    lam: float | Tensor = 1.0,
    last_values: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """Generalised advantage estimation along the last dimension.

    Args:
        rewards: ``[..., T]`` reward of transition t.
        values: ``[..., T]`` V(s_t) as stored at collection time.
        dones: ``[..., T]`` 1 where the episode ends with transition t (no bootstrap past it).
            Padding after the end of a sequence must also be marked done (its entries are junk
            for the caller to mask out, but they never leak into real entries).
        gamma: discount, float or ``[..., T]`` (discount applied from s_t to s_{t+1}).
        lam: GAE lambda, float or ``[..., T]``.
        last_values: ``[...]`` V(s_T) after the last entry (bootstrap of a cut-off sequence);
            None means 0.

    Returns:
        ``(advantages [..., T], returns [..., T])`` with ``returns = advantages + values``.

    delta_t = r_t + gamma_t * (1 - done_t) * V(s_{t+1}) - V(s_t);
    A_t = delta_t + gamma_t * lam_t * (1 - done_t) * A_{t+1}.
    """
    if rewards.shape != values.shape or rewards.shape != dones.shape:
        raise ValueError(
            f"rewards, values and dones must have the same shape, got {tuple(rewards.shape)}, "
            f"{tuple(values.shape)}, {tuple(dones.shape)}"
        )
    dtype = values.dtype if values.is_floating_point() else torch.float32
    rewards, values = rewards.to(dtype), values.to(dtype)  # [..., T]
    gamma_t = torch.as_tensor(gamma, dtype=dtype, device=values.device).expand_as(values)  # [..., T]
    lam_t = torch.as_tensor(lam, dtype=dtype, device=values.device).expand_as(values)  # [..., T]
    not_done = 1.0 - dones.to(dtype)  # [..., T]
    if last_values is None:
        last_values = torch.zeros(values.shape[:-1], dtype=dtype, device=values.device)  # [...]
    next_values = torch.cat([values[..., 1:], last_values.to(dtype).unsqueeze(-1)], dim=-1)  # [..., T]
    deltas = rewards + gamma_t * not_done * next_values - values  # [..., T]
    advantages = torch.zeros_like(values)  # [..., T]
    running = torch.zeros_like(values[..., 0])  # [...]
    for t in range(values.shape[-1] - 1, -1, -1):
        running = deltas[..., t] + gamma_t[..., t] * lam_t[..., t] * not_done[..., t] * running
        advantages[..., t] = running
    return advantages, advantages + values


def gae_action_level(
    rewards: Tensor,
    values: Tensor,
    dones: Tensor,
    gamma: float | Tensor = 1.0,
    lam: float | Tensor = 0.95,
) -> tuple[Tensor, Tensor]:
    """GAE over the sequence of agent decisions of each episode (MARFT-A).

    ``[B, K]`` tensors: row b is one episode's decisions in the order they were taken (all
    agents interleaved, as the env scheduled them); V(s_{k+1}) is the next decision's value,
    whichever agent made it, so credit flows from later agents to earlier ones. Pad rows with
    ``dones = 1``. Returns ``(advantages [B, K], returns [B, K])``.

    Over rounds (a team's turns; ``tests/agents/test_ppo_math_rounds.py`` checks a 3-round
    example by hand). The critic values every decision's state, so there is one value per agent
    turn, several per round. ``gamma [B, K]`` is the credit assignment's
    (``learners/credit.py``): under ``team`` (the default) it is 1 between the decisions of one
    round and ``ppo.gamma`` on the decision that closes a round, i.e. **gamma is applied once per
    round**, and with ``lam = 1`` every decision of round t has the same return,
    ``sum_{t' >= t} gamma**(t' - t) R_t'``; under ``step_discounted`` it is ``ppo.gamma`` on every
    decision (once per agent turn). **Lambda is applied per decision** (per agent turn, whatever
    the credit assignment): ``A_k = delta_k + gamma_k * lam * A_{k+1}``, so inside a round (gamma
    1) the next agent's advantage reaches the earlier one weighted by ``lam``, and across a round
    boundary by ``gamma * lam``.
    """
    return gae(rewards, values, dones, gamma, lam)


@dataclass
class TokenGAEInput:
    """One episode for :func:`gae_token_level`: its utterances in decision order."""

    token_values: Sequence[Sequence[float]] | Sequence[Tensor]
    """Per utterance, V(state before token j) for each response token j (``[L_k]`` each)."""
    rewards: Sequence[float]
    """Per utterance, the reward credited at its last token."""
    dones: Sequence[bool]
    """Per utterance, whether the episode ended with it."""
    gammas: Sequence[float] | None = None
    """Per utterance, the discount from its last token to the next utterance's first token
    (None: the ``gamma`` argument of :func:`gae_token_level` for every utterance)."""


def gae_token_level(
    episodes: Sequence[TokenGAEInput],
    gamma: float = 1.0,
    lam: float = 0.95,
    gamma_token: float = 1.0,
    lam_token: float = 1.0,
) -> list[list[tuple[Tensor, Tensor]]]:
    """Token-level GAE (MARFT-T): every generated token is an action.

    Within an episode the utterances are concatenated into one token sequence: the transition
    from token j to j+1 of the same utterance has reward 0, discount ``gamma_token`` and lambda
    ``lam_token``; the transition from an utterance's last token bridges into the *next
    agent's first token* with the utterance's reward, discount ``gamma`` (or ``gammas[k]``) and
    lambda ``lam``.

    Why ``gamma_token`` defaults to 1.0: a discount per token makes the credit reaching the first
    token of an utterance depend on its length (the original applied 0.99 per token, so after
    512 tokens only 0.99**512 ~ 0.006 of the reward reached the first one). Discounting is a
    statement about *time steps of the task*; the tokens of one utterance are one step of it.
    ``lam_token`` (default 1.0) likewise keeps the within-utterance estimate unbiased; lower
    it to trade bias for variance once the token critic is good.

    Returns, per episode and per utterance, ``(advantages [L_k], returns [L_k])``.
    """
    out: list[list[tuple[Tensor, Tensor]]] = []
    for episode in episodes:
        n = len(episode.token_values)
        if len(episode.rewards) != n or len(episode.dones) != n:
            raise ValueError(
                f"an episode has {n} utterances but {len(episode.rewards)} rewards and "
                f"{len(episode.dones)} dones; give one of each per utterance"
            )
        vals, rews, done, gam, lm, lengths = [], [], [], [], [], []
        for k in range(n):
            v = torch.as_tensor(episode.token_values[k], dtype=torch.float32).reshape(-1)  # [L_k]
            length = v.numel()
            if length == 0:
                raise ValueError(f"utterance {k} has no tokens; token-level GAE needs >= 1 token")
            lengths.append(length)
            vals.append(v)
            r = torch.zeros(length)  # [L_k] reward only on the bridging (last) transition
            r[-1] = float(episode.rewards[k])
            rews.append(r)
            d = torch.zeros(length)  # [L_k]
            d[-1] = float(bool(episode.dones[k]))
            done.append(d)
            g = torch.full((length,), float(gamma_token))  # [L_k]
            g[-1] = float(episode.gammas[k] if episode.gammas is not None else gamma)
            gam.append(g)
            lt = torch.full((length,), float(lam_token))  # [L_k]
            lt[-1] = float(lam)
            lm.append(lt)
        adv, ret = gae(torch.cat(rews), torch.cat(vals), torch.cat(done), torch.cat(gam), torch.cat(lm))  # [sum L]
        out.append(list(zip(adv.split(lengths), ret.split(lengths))))
    return out


# -- losses ----------------------------------------------------------------------------------------
def huber(x: Tensor, delta: float) -> Tensor:
    """Elementwise two-sided Huber: ``x**2/2`` for ``|x| <= delta``, else ``delta*(|x|-delta/2)``.

    Symmetric in ``x`` (the original implementation only linearised positive errors, so large
    negative errors got *no* loss at all).
    """
    abs_x = x.abs()
    return torch.where(abs_x <= delta, 0.5 * x * x, delta * (abs_x - 0.5 * delta))


def clipped_surrogate(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    clip_eps: float = 0.2,
    clip_eps_high: float | None = None,
) -> tuple[Tensor, Tensor]:
    """Per-element PPO clipped surrogate, unreduced: ``(loss [...], clipped [...] bool)``.

    The loss of one element (a decision or a token) is the pessimistic branch
    ``max(-A * ratio, -A * clip(ratio, 1 - eps, 1 + eps_high))``; ``clipped`` marks the elements
    where the clipped branch is the active one (its gradient is zero there). The learners'
    engine reduces these once per minibatch (``learners/base.py``).
    """
    eps_high = clip_eps if clip_eps_high is None else clip_eps_high
    ratio = torch.exp(logprobs - old_logprobs)  # [...]
    unclipped = -advantages * ratio  # [...]
    clipped = -advantages * torch.clamp(ratio, 1.0 - clip_eps, 1.0 + eps_high)  # [...]
    return torch.maximum(unclipped, clipped), (clipped > unclipped).detach()


def policy_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor | None = None,
    clip_eps: float = 0.2,
    clip_eps_high: float | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """PPO clipped surrogate (:func:`clipped_surrogate`), masked mean, to be minimised.

    All inputs ``[...]`` (per decision or per token). Returns the masked mean and detached
    stats: ``clipfrac`` (share of elements where the clipped branch was active) and
    ``approx_kl`` (k3 estimate of KL(old || new)).
    """
    per_element, clipped = clipped_surrogate(logprobs, old_logprobs, advantages, clip_eps, clip_eps_high)
    loss = masked_mean(per_element, mask)
    with torch.no_grad():
        stats = {
            "clipfrac": masked_mean(clipped.to(per_element.dtype), mask),
            "approx_kl": masked_mean(approx_kl(logprobs, old_logprobs), mask),
            "ratio_mean": masked_mean(torch.exp(logprobs - old_logprobs), mask),
        }
    return loss, stats


def value_loss_elements(
    values: Tensor,
    old_values: Tensor,
    returns: Tensor,
    clip_range: float | None = 0.2,
    huber_delta: float | None = 10.0,
) -> tuple[Tensor, Tensor]:
    """Per-element clipped value loss, unreduced: ``(loss [...], clipped [...] bool)``.

    ``max(l(R - V), l(R - V_clipped))`` with l = Huber or ``0.5 * err**2``, where
    ``V_clipped = V_old + clip(V - V_old, -clip_range, clip_range)`` keeps the critic from moving
    far from the values the advantages were computed with. ``clip_range=None`` disables clipping;
    ``huber_delta=None`` uses the squared error. ``clipped`` marks where the clipped branch won
    *because the clamp binds* (``|V - V_old| > clip_range``): where it does not, both branches are
    the same value up to rounding, and a rounding difference is not a clip.
    """

    def elementwise(e: Tensor) -> Tensor:
        return 0.5 * e * e if huber_delta is None else huber(e, huber_delta)

    loss_unclipped = elementwise(returns - values)  # [...]
    if clip_range is None:
        return loss_unclipped, torch.zeros_like(loss_unclipped, dtype=torch.bool)
    v_clipped = old_values + torch.clamp(values - old_values, -clip_range, clip_range)  # [...]
    loss_clipped = elementwise(returns - v_clipped)  # [...]
    binds = (values - old_values).abs() > clip_range  # [...]
    return torch.maximum(loss_unclipped, loss_clipped), (binds & (loss_clipped > loss_unclipped)).detach()


def value_loss(
    values: Tensor,
    old_values: Tensor,
    returns: Tensor,
    mask: Tensor | None = None,
    clip_range: float | None = 0.2,
    huber_delta: float | None = 10.0,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Masked mean of :func:`value_loss_elements`, with the share of clipped elements."""
    per_element, clipped = value_loss_elements(values, old_values, returns, clip_range, huber_delta)
    clipped_frac = masked_mean(clipped.to(per_element.dtype), mask)
    return masked_mean(per_element, mask), {"losses/value_clipfrac": clipped_frac.detach()}


ENTROPY_LOGP_FLOOR = -80.0
"""Log-probs below this enter the entropy's ``p`` as ``exp(-80)`` (1.8e-35): see
:func:`entropy_from_logprobs`."""


def floored_probs(logp: Tensor, out: Tensor | None = None) -> Tensor:
    """``exp(max(logp, ENTROPY_LOGP_FLOOR))`` ``[..., V]``; written into ``out`` (same shape,
    float32, outside autograd) when given, so a caller can reuse a buffer."""
    if out is None:
        return logp.clamp(min=ENTROPY_LOGP_FLOOR).exp()
    return torch.clamp(logp, min=ENTROPY_LOGP_FLOOR, out=out).exp_()


def entropy_from_logprobs(logp: Tensor, out: Tensor | None = None) -> Tensor:
    """Entropy ``-sum p log p`` of the distributions given by float32 log-probs ``[..., V]`` ->
    ``[...]``.

    ``p`` is taken as ``exp(max(logp, -80))``: below ``exp(-87.3)`` float32 goes subnormal, and
    CPUs compute on subnormals several times slower (at temperature 0.5 most of SmolLM2's
    vocabulary sits there, so the ``exp`` and the products over a ``[16, 32, 49152]`` tensor
    were a large share of a PPO step). The floor changes the entropy by less than
    ``V * 1.8e-35 * |logp|`` (< 1e-27 for V = 49152), far below float32's resolution.
    ``out`` (optional, outside autograd): a buffer like ``logp`` for ``p`` and its products.
    """
    probs = floored_probs(logp, out)  # [..., V]
    if out is None:
        return -(probs * logp).sum(-1)
    return probs.mul_(logp).sum(-1).neg_()


def approx_kl(logprobs: Tensor, old_logprobs: Tensor) -> Tensor:
    """k3 estimator of KL(old || new) per element, for samples drawn from the old policy.

    With ``log r = logprobs - old_logprobs``: ``k3 = (r - 1) - log r``, which is unbiased and
    always >= 0 (Schulman, "Approximating KL divergence", 2020).
    """
    log_ratio = logprobs - old_logprobs  # [...]
    return torch.expm1(log_ratio) - log_ratio


def kl_to_reference(logprobs: Tensor, ref_logprobs: Tensor) -> Tensor:
    """Per-element KL-to-reference *loss* whose gradient is that of KL(current || reference).

    The k2 form ``0.5 * (logprobs - ref_logprobs)**2``. For tokens sampled from the current
    policy pi, ``E_pi[grad k2] = E_pi[(log pi - log ref) * grad log pi] = grad KL(pi || ref)``
    (the score-function term ``E_pi[grad log pi]`` is 0). The k3 form ``exp(ref - cur) - 1 -
    (ref - cur)``, though an unbiased *value* estimate of KL(pi || ref), has the expected gradient
    ``E_pi[(1 - ref/pi) grad log pi] = grad KL(ref || pi)`` when used as a loss: the reverse KL
    (both checked exactly on a small categorical in ``tests/agents/test_ppo_math.py``). PPO's
    samples come from the old policy, which equals the current one at the first step of an
    update; later steps use the same approximation as the surrogate itself.
    """
    diff = logprobs - ref_logprobs  # [...]
    return 0.5 * diff * diff


def kl_k3_estimate(logprobs: Tensor, ref_logprobs: Tensor) -> Tensor:
    """k3 per-element *value* estimate of KL(current || reference), >= 0, for reporting only.

    ``exp(ref - cur) - 1 - (ref - cur)`` is unbiased for KL(pi || ref) on samples from pi; do
    not differentiate it as a loss (see :func:`kl_to_reference`).
    """
    log_ratio = ref_logprobs - logprobs  # [...]
    return torch.expm1(log_ratio) - log_ratio


def explained_variance(predictions: Tensor, targets: Tensor, mask: Tensor | None = None) -> Tensor:
    """``1 - Var[targets - predictions] / Var[targets]``; NaN when the targets do not vary.

    1 = perfect critic, 0 = no better than a constant, negative = worse than a constant.
    """
    var_targets = masked_var(targets, mask, unbiased=False)
    var_residual = masked_var(targets - predictions, mask, unbiased=False)
    nan = torch.full_like(var_targets, float("nan"))
    return torch.where(var_targets > 0, 1.0 - var_residual / var_targets.clamp(min=1e-30), nan)


def sequence_logprob(token_logprobs: Tensor, mask: Tensor, normalize: bool = False) -> Tensor:
    """Log-prob of a whole utterance from ``[B, T]`` token log-probs -> ``[B]``.

    ``normalize=True`` divides by the utterance length (a length-normalised action log-prob:
    the PPO ratio is then a geometric mean of token ratios, which keeps long utterances from
    saturating the clip range).
    """
    total = masked_sum(token_logprobs, mask, dim=-1)  # [B]
    if not normalize:
        return total
    return total / mask.to(token_logprobs.dtype).sum(-1).clamp(min=1.0)
