"""Group-relative advantages and the GRPO-family policy loss, as pure functions.

The companion of ``ppo_math`` for critic-free learners (``learners/grpo.py``): no model, no env,
so every number can be checked by hand (``tests/agents/test_group_math.py``).

Vocabulary. The collector plays each task ``k`` times (a *group*, ``Decision.group``). A
*unit* is what gets one score and one advantage; its *key* says which units are compared:

``team``
    unit = an episode, key = (group,), score = the episode's team return (the sum of its graded
    rounds' team rewards). Every decision of the episode, whichever agent took it, gets the
    episode's advantage.
``agent``
    unit = (episode, agent), key = (group, agent): an agent is compared only with itself on the
    same task. Score = the team return (+ the agent's own per-agent rewards, one per round it
    acted in, with ``agent_rewards``). Episodes in which the agent never acted give it no unit.
``agent_turn``
    unit = (episode, agent, round), key = (group, agent, round): a role's turn-t utterances are
    compared only with the same role's turn-t utterances of the same task. Score = the team
    rewards of rounds >= t (what the turn can still influence; + the agent's per-agent reward of
    round t with ``agent_rewards``). Episodes that ended before round t give no unit.

A key with a single unit has nothing to compare with: its advantage is 0, as is every advantage
of a key whose scores are all equal (never NaN).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Sequence
from typing import Any

import torch

from marft_agents import ppo_math as pm

Tensor = torch.Tensor

GROUPINGS = ("team", "agent", "agent_turn")
NORMALISATIONS = ("mean", "mean_std", "leave_one_out")
AGGREGATIONS = ("token", "sequence")


def group_relative(scores: Sequence[float] | Tensor, keys: Sequence[Hashable], normalisation: str,
                   eps: float = 1e-6) -> Tensor:
    """Advantage of each unit against the units sharing its key -> ``[N]`` float32.

    ``mean``: ``x - mean``. ``mean_std``: ``(x - mean) / (std + eps)`` with the unbiased std.
    ``leave_one_out``: ``x - mean of the others`` (= ``n / (n - 1) * (x - mean)``).
    A key with one unit, or with all scores equal, gives 0 for every normalisation.
    """
    if normalisation not in NORMALISATIONS:
        raise ValueError(f"normalisation must be one of {NORMALISATIONS}, got {normalisation!r}")
    x = torch.as_tensor(scores, dtype=torch.float32).reshape(-1)  # [N]
    if x.numel() != len(keys):
        raise ValueError(f"{x.numel()} scores but {len(keys)} keys")
    members: dict[Hashable, list[int]] = defaultdict(list)
    for i, key in enumerate(keys):
        members[key].append(i)
    out = torch.zeros_like(x)  # [N]
    for idx in members.values():
        n = len(idx)
        if n < 2:
            continue
        xs = x[idx]  # [n]
        centred = xs - xs.mean()  # [n]
        if normalisation == "mean":
            out[idx] = centred
        elif normalisation == "mean_std":
            std = xs.std(unbiased=True)
            if std > 0:  # equal scores stay 0 whatever eps is (0 / 0 would be NaN)
                out[idx] = centred / (std + eps)
        else:
            out[idx] = centred * n / (n - 1)
    return out


def unit_scores(rollout: Any, grouping: str, agent_rewards: bool = False
                ) -> tuple[list[Hashable], list[float], list[list[int]]]:
    """``(keys, scores, decision indices)`` of every unit of ``rollout`` (see the module
    docstring); the decision indices are those that share the unit's advantage."""
    if grouping not in GROUPINGS:
        raise ValueError(f"grouping must be one of {GROUPINGS}, got {grouping!r}")
    keys: list[Hashable] = []
    scores: list[float] = []
    members: list[list[int]] = []
    for episode in rollout.episodes:
        ids = list(episode.decisions)
        decisions = [rollout.decisions[i] for i in ids]
        round_reward: dict[int, float] = defaultdict(float)  # round -> team reward paid for it
        own: dict[tuple[str, int], float] = {}  # (agent, round) -> its per-agent reward
        for d in decisions:
            round_reward[d.round] += d.team_reward
            own[(d.agent_id, d.round)] = d.agent_reward
        team_return = sum(round_reward.values())
        if grouping == "team":
            keys.append((episode.group,))
            scores.append(team_return)
            members.append(ids)
            continue
        units: dict[tuple, list[int]] = defaultdict(list)
        for i, d in zip(ids, decisions):
            units[(d.agent_id,) if grouping == "agent" else (d.agent_id, d.round)].append(i)
        for unit, unit_ids in units.items():
            agent = unit[0]
            if grouping == "agent":
                score = team_return + (sum(r for (a, _), r in own.items() if a == agent) if agent_rewards else 0.0)
            else:
                turn = unit[1]
                score = sum(r for t, r in round_reward.items() if t >= turn)
                score += own[(agent, turn)] if agent_rewards else 0.0
            keys.append((episode.group, *unit))
            scores.append(score)
            members.append(unit_ids)
    return keys, scores, members


def decision_advantages(rollout: Any, grouping: str, normalisation: str, agent_rewards: bool = False,
                        eps: float = 1e-6) -> Tensor:
    """Group-relative advantage of every decision of ``rollout`` -> ``[len(rollout.decisions)]``."""
    keys, scores, members = unit_scores(rollout, grouping, agent_rewards)
    per_unit = group_relative(scores, keys, normalisation, eps)  # [U]
    out = torch.zeros(len(rollout.decisions))  # [N]
    for advantage, ids in zip(per_unit.tolist(), members):
        out[ids] = advantage
    return out


def kl_k2(logprobs: Tensor, ref_logprobs: Tensor) -> Tensor:
    """``0.5 * (log pi - log ref)**2`` per token ``[...]``, differentiable in ``logprobs``.

    On tokens sampled from pi its gradient ``(log pi - log ref) * grad log pi`` is, in
    expectation, the gradient of KL(pi || ref) at the sampled states (the score-function form;
    the dependence of later states on earlier tokens is left out, as in every per-token KL
    penalty). The k3 value ``exp(ref - cur) - 1 - (ref - cur)`` used as a loss has instead the
    gradient of KL(ref || pi) in expectation.
    """
    return 0.5 * (logprobs - ref_logprobs) ** 2


def group_policy_loss(logprobs: Tensor, old_logprobs: Tensor, advantages: Tensor, mask: Tensor,
                      clip_eps: float, clip_eps_high: float | None, aggregation: str,
                      ref_logprobs: Tensor | None = None, kl_coef: float = 0.0
                      ) -> tuple[Tensor, dict[str, Tensor]]:
    """Clipped-ratio GRPO loss of one micro-batch, to be minimised.

    ``logprobs``, ``old_logprobs``, ``mask`` (and ``ref_logprobs``): ``[B, T]``; ``advantages``:
    ``[B]`` (one per utterance, broadcast over its tokens). Per token: ``max(-A r, -A clip(r,
    1 - eps, 1 + eps_high))`` plus ``kl_coef * kl_k2``. ``aggregation="token"``: mean over every
    response token of the micro-batch; ``"sequence"``: mean over each utterance's tokens, then
    over utterances.
    """
    if aggregation not in AGGREGATIONS:
        raise ValueError(f"aggregation must be one of {AGGREGATIONS}, got {aggregation!r}")
    eps_high = clip_eps if clip_eps_high is None else clip_eps_high
    adv = advantages.reshape(-1, 1).to(logprobs.dtype)  # [B, 1]
    ratio = torch.exp(logprobs - old_logprobs)  # [B, T]
    unclipped = -adv * ratio  # [B, T]
    clipped = -adv * torch.clamp(ratio, 1.0 - clip_eps, 1.0 + eps_high)  # [B, T]
    per_token = torch.maximum(unclipped, clipped)  # [B, T]
    kl = kl_k2(logprobs, ref_logprobs) if ref_logprobs is not None and kl_coef > 0 else None  # [B, T]
    if kl is not None:
        per_token = per_token + kl_coef * kl

    def reduce(x: Tensor) -> Tensor:
        if aggregation == "token":
            return pm.masked_mean(x, mask)
        return pm.masked_mean(x, mask, dim=-1).mean()  # [B] -> []

    loss = reduce(per_token)
    with torch.no_grad():
        stats = {"losses/clipfrac": reduce((clipped > unclipped).to(per_token.dtype)),
                 "losses/approx_kl": reduce(pm.approx_kl(logprobs, old_logprobs)),
                 "grpo/ratio_mean": reduce(ratio)}
        if kl is not None:
            stats["losses/kl_ref"] = reduce(kl)
    return loss, stats
