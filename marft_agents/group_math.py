"""Group-relative advantages for the GRPO family, as pure functions.

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
    Without ``agent_rewards`` every agent's score is the team return, so when every agent acts in
    every episode this grouping gives exactly ``team``'s advantages; it differs only with
    per-agent rewards or agents that skip episodes. (Dr. MAS's point is per-agent reward scales, so use ``agent_rewards``.)
``agent_turn``
    unit = (episode, agent, round), key = (group, agent, round): a role's turn-t utterances are
    compared only with the same role's turn-t utterances of the same task. Score = the team
    rewards of rounds >= t (what the turn can still influence; + the agent's per-agent reward of
    round t with ``agent_rewards``). Episodes that ended before round t give no unit.

A key with a single unit has nothing to compare with: its advantage is 0, as is every advantage
of a key whose scores are all equal (never NaN), for every normalisation. "Equal" is decided on
the scores as given (Python floats: float64), before the float32 cast, and up to rounding: a
spread of at most :data:`EQUAL_ULPS` units in the last place of the largest score's magnitude
(:func:`equal_scores`). Deciding it in float32 would not do: the float32 mean of seven 0.7s is
not 0.7, and ``mean_std`` divides that residue by a std of ~1e-7, giving advantages of random
sign up to ~1 where the group carries no signal at all.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Sequence
from typing import Any

import torch

from marft_agents.settings.grpo import GROUPINGS, NORMALISATIONS

Tensor = torch.Tensor

EQUAL_ULPS = 8
"""A group's scores are equal when their spread is at most this many units in the last place
(of the scores' own precision: float64 for Python floats) of their largest magnitude: what
summing a few rewards in different orders can leave, and far below any reward difference."""


def equal_scores(scores: Tensor, eps: float) -> bool:
    """Whether ``scores [n]`` are all equal up to rounding: ``max - min <= EQUAL_ULPS * eps *
    max |x|`` (``eps``: the machine epsilon of the precision the scores were computed in)."""
    spread = scores.max() - scores.min()
    return bool(spread <= EQUAL_ULPS * eps * scores.abs().max())


def group_relative(scores: Sequence[float] | Tensor, keys: Sequence[Hashable], normalisation: str,
                   eps: float = 1e-6) -> Tensor:
    """Advantage of each unit against the units sharing its key -> ``[N]`` float32.

    ``mean``: ``x - mean``. ``mean_std``: ``(x - mean) / (std + eps)`` with the unbiased std.
    ``leave_one_out``: ``x - mean of the others`` (= ``n / (n - 1) * (x - mean)``).
    A key with one unit, or with all scores equal (up to rounding: :func:`equal_scores`, on the
    scores as given, not their float32 cast), gives 0 for every normalisation.
    """
    if normalisation not in NORMALISATIONS:
        raise ValueError(f"normalisation must be one of {NORMALISATIONS}, got {normalisation!r}")
    given = scores if isinstance(scores, Tensor) and scores.is_floating_point() else None
    precision = torch.finfo(given.dtype if given is not None else torch.float64).eps
    raw = torch.as_tensor(scores, dtype=torch.float64).reshape(-1)  # [N] as given (float32 -> float64 is exact)
    x = torch.as_tensor(scores, dtype=torch.float32).reshape(-1)  # [N]
    if x.numel() != len(keys):
        raise ValueError(f"{x.numel()} scores but {len(keys)} keys")
    members: dict[Hashable, list[int]] = defaultdict(list)
    for i, key in enumerate(keys):
        members[key].append(i)
    out = torch.zeros_like(x)  # [N]
    for idx in members.values():
        n = len(idx)
        if n < 2 or equal_scores(raw[idx], precision):
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
