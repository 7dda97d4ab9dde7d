"""Group-relative advantages for the GRPO family, as pure functions.

The companion of ``ppo_math`` for critic-free learners (``learners/grpo.py``): no model, no env,
so every number can be checked by hand (``tests/agents/test_group_math.py``).

Every grouping and normalisation is a registered estimator
(:mod:`marft_agents.settings.estimators`): a grouping is ``fn(rollout, options) -> list[Units]``,
a normalisation ``fn(scores [n], eps) -> [n]``; :func:`decision_advantages` composes them.

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
``step`` (GiGPO, Feng et al., 2025, arXiv 2505.10978; verl-agent's ``core_gigpo.py``)
    Two unit sets, summed per decision. Episode level: ``team``'s units (weight 1). Step level
    (weight ``step_weight``, GiGPO's omega, default 1): unit = one decision, key = its *anchor
    state* (group, agent, observation text): the decisions of one task group whose acting agent
    saw the identical observation; score = the decision's discounted return-to-go,
    ``sum_{t' >= t} step_gamma**(t' - t) * R_t'`` over the team rewards of its round t and later
    (+ the agent's per-agent reward of round t with ``agent_rewards``), gamma applied per round.
    Both levels use ``normalisation`` (verl-agent's one ``mode`` for both). A step group of one
    decision (an observation no other episode reached) gets step advantage 0, as in verl-agent,
    so such a decision keeps its episode-level advantage alone.
``agent_turn``
    unit = (episode, agent, round), key = (group, agent, round): a role's turn-t utterances are
    compared only with the same role's turn-t utterances of the same task. Score = the team
    rewards of rounds >= t (what the turn can still influence; + the agent's per-agent reward of
    round t with ``agent_rewards``). Episodes that ended before round t give no unit.

Baselines (:func:`decision_baselines`). Before any scaling a unit's advantage is its score minus
the centre its normalisation declares (``Estimator.centre``: the key's mean, or the other units'
mean); per decision, that centre of its unit in the grouping's last unit set (the finest: ``step``'s
step level) and the unit's score are what ``baseline/gain`` compares
(:mod:`marft_agents.learners.baseline_gain`).

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
from dataclasses import dataclass, field
from typing import Any

import torch

from marft_agents.settings.estimators import estimator, estimator_function
from marft_agents.settings.grpo import GRPOOptions

Tensor = torch.Tensor

EQUAL_ULPS = 8
"""A group's scores are equal when their spread is at most this many units in the last place
(of the scores' own precision: float64 for Python floats) of their largest magnitude: what
summing a few rewards in different orders can leave, and far below any reward difference."""


@dataclass
class Units:
    """One set of compared units: per unit its key, score and the decisions (indices into
    ``rollout.decisions``) that receive ``weight`` times its advantage."""

    keys: list[Hashable] = field(default_factory=list)
    scores: list[float] = field(default_factory=list)
    members: list[list[int]] = field(default_factory=list)
    weight: float = 1.0

    def add(self, key: Hashable, score: float, ids: list[int]) -> None:
        self.keys.append(key)
        self.scores.append(score)
        self.members.append(ids)


# -- normalisations: fn(scores [n], eps) -> [n], for a group of n >= 2 not all equal -------------
def mean_only(xs: Tensor, eps: float) -> Tensor:
    """``mean``: ``x - mean`` (Dr. GRPO)."""
    return xs - xs.mean()  # [n]


def mean_std(xs: Tensor, eps: float) -> Tensor:
    """``mean_std``: ``(x - mean) / (std + eps)`` with the unbiased std (GRPO); 0 where the std
    is 0 (0 / 0 would be NaN)."""
    centred = xs - xs.mean()  # [n]
    std = xs.std(unbiased=True)
    return centred / (std + eps) if std > 0 else torch.zeros_like(xs)


def leave_one_out(xs: Tensor, eps: float) -> Tensor:
    """``leave_one_out``: ``x - mean of the others`` = ``n / (n - 1) * (x - mean)`` (RLOO)."""
    n = xs.numel()
    return (xs - xs.mean()) * n / (n - 1)  # [n]


def equal_scores(scores: Tensor, eps: float) -> bool:
    """Whether ``scores [n]`` are all equal up to rounding: ``max - min <= EQUAL_ULPS * eps *
    max |x|`` (``eps``: the machine epsilon of the precision the scores were computed in)."""
    spread = scores.max() - scores.min()
    return bool(spread <= EQUAL_ULPS * eps * scores.abs().max())


def group_relative(scores: Sequence[float] | Tensor, keys: Sequence[Hashable], normalisation: str,
                   eps: float = 1e-6) -> Tensor:
    """Advantage of each unit against the units sharing its key -> ``[N]`` float32, by the
    registered ``normalisation`` (``mean``, ``mean_std``, ``leave_one_out``, ...).

    A key with one unit, or with all scores equal (up to rounding: :func:`equal_scores`, on the
    scores as given, not their float32 cast), gives 0 for every normalisation.
    """
    normalise = estimator_function("normalisation", normalisation)
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
        if len(idx) < 2 or equal_scores(raw[idx], precision):
            continue
        out[idx] = normalise(x[idx], eps)  # [n]
    return out


# -- groupings: fn(rollout, options) -> list[Units] ------------------------------------------------
def _episode_rewards(rollout: Any, episode: Any) -> tuple[list[int], list[Any], dict[int, float],
                                                         dict[tuple[str, int], float]]:
    """An episode's decision ids, decisions, team reward per round and per-agent reward per
    (agent, round)."""
    ids = list(episode.decisions)
    decisions = [rollout.decisions[i] for i in ids]
    round_reward: dict[int, float] = defaultdict(float)  # round -> team reward paid for it
    own: dict[tuple[str, int], float] = {}  # (agent, round) -> its per-agent reward
    for d in decisions:
        round_reward[d.round] += d.team_reward
        own[(d.agent_id, d.round)] = d.agent_reward
    return ids, decisions, round_reward, own


def team_units(rollout: Any, options: Any) -> list[Units]:
    """``team``: one unit per episode, key (group,), score the team return."""
    units = Units()
    for episode in rollout.episodes:
        ids, _, round_reward, _ = _episode_rewards(rollout, episode)
        units.add((episode.group,), sum(round_reward.values()), ids)
    return [units]


def agent_units(rollout: Any, options: Any) -> list[Units]:
    """``agent``: one unit per (episode, agent that acted), key (group, agent), score the team
    return (+ the agent's per-agent rewards with ``agent_rewards``)."""
    units = Units()
    for episode in rollout.episodes:
        ids, decisions, round_reward, own = _episode_rewards(rollout, episode)
        team_return = sum(round_reward.values())
        mine: dict[str, list[int]] = defaultdict(list)
        for i, d in zip(ids, decisions):
            mine[d.agent_id].append(i)
        for agent, unit_ids in mine.items():
            extra = sum(r for (a, _), r in own.items() if a == agent) if options.agent_rewards else 0.0
            units.add((episode.group, agent), team_return + extra, unit_ids)
    return [units]


def agent_turn_units(rollout: Any, options: Any) -> list[Units]:
    """``agent_turn``: one unit per (episode, agent, round), key (group, agent, round), score the
    team rewards of rounds >= the turn (+ the agent's per-agent reward of the turn)."""
    units = Units()
    for episode in rollout.episodes:
        ids, decisions, round_reward, own = _episode_rewards(rollout, episode)
        turns: dict[tuple[str, int], list[int]] = defaultdict(list)
        for i, d in zip(ids, decisions):
            turns[(d.agent_id, d.round)].append(i)
        for (agent, turn), unit_ids in turns.items():
            score = sum(r for t, r in round_reward.items() if t >= turn)
            score += own[(agent, turn)] if options.agent_rewards else 0.0
            units.add((episode.group, agent, turn), score, unit_ids)
    return [units]


def step_units(rollout: Any, options: Any) -> list[Units]:
    """``step``: GiGPO's episode-level units (``team``, weight 1) and step-level units (one per
    decision, keyed by its anchor state, weight ``options.step_weight``)."""
    steps = Units(weight=float(options.step_weight))
    for episode in rollout.episodes:
        ids, decisions, round_reward, own = _episode_rewards(rollout, episode)
        to_go, running = {}, 0.0  # round -> discounted team return from that round on
        for t in sorted(round_reward, reverse=True):
            running = round_reward[t] + options.step_gamma * running
            to_go[t] = running
        for i, d in zip(ids, decisions):
            score = to_go[d.round] + (own[(d.agent_id, d.round)] if options.agent_rewards else 0.0)
            steps.add((episode.group, d.agent_id, d.observation), score, [i])
    return [*team_units(rollout, options), steps]


def centres(scores: Sequence[float], keys: Sequence[Hashable], centre: str) -> list[float | None]:
    """Per unit, the baseline its advantage deviates from before any scaling: the mean of the
    scores sharing its key (``centre`` ``mean``: this one included; ``others``: the other units'
    only), in float64; None for a unit alone in its key."""
    members: dict[Hashable, list[int]] = defaultdict(list)
    for i, key in enumerate(keys):
        members[key].append(i)
    out: list[float | None] = [None] * len(scores)
    for idx in members.values():
        if len(idx) < 2:
            continue
        total = sum(float(scores[i]) for i in idx)
        for i in idx:
            out[i] = total / len(idx) if centre == "mean" else (total - float(scores[i])) / (len(idx) - 1)
    return out


@dataclass
class DecisionBaselines:
    """Per decision of a rollout (``[N]`` lists, :func:`decision_baselines`)."""

    centre: str
    """The normalisation's centre (``Estimator.centre``)."""
    targets: list[float]
    """Its unit's score (0 for a decision in no unit)."""
    baselines: list[float | None]
    """Its unit's centre; None for a unit alone in its key or a decision in no unit."""
    others: list[float | None]
    """The same groups' leave-one-out mean (``baselines`` itself under an ``others`` centre)."""


def decision_baselines(rollout: Any, grouping: str, normalisation: str, options: Any) -> DecisionBaselines | None:
    """Every decision's unit score and baseline in the grouping's last unit set (module
    docstring, Baselines); None when the normalisation declares no centre."""
    centre = estimator("normalisation", normalisation).centre
    if centre is None:
        return None
    units = estimator_function("grouping", grouping)(rollout, options)[-1]
    n = len(rollout.decisions)
    out = DecisionBaselines(centre, [0.0] * n, [None] * n, [None] * n)
    own = centres(units.scores, units.keys, centre)
    others = own if centre == "others" else centres(units.scores, units.keys, "others")
    for score, base, other, ids in zip(units.scores, own, others, units.members):
        for i in ids:
            out.targets[i], out.baselines[i], out.others[i] = float(score), base, other
    return out


def unit_scores(rollout: Any, grouping: str, agent_rewards: bool = False
                ) -> tuple[list[Hashable], list[float], list[list[int]]]:
    """``(keys, scores, decision indices)`` of every unit of ``rollout`` under a one-set
    ``grouping`` (see the module docstring); the decision indices share the unit's advantage."""
    (units,) = estimator_function("grouping", grouping)(rollout, GRPOOptions(agent_rewards=agent_rewards))
    return units.keys, units.scores, units.members


def decision_advantages(rollout: Any, grouping: str, normalisation: str, agent_rewards: bool = False,
                        eps: float = 1e-6, options: Any = None) -> Tensor:
    """Group-relative advantage of every decision of ``rollout`` -> ``[len(rollout.decisions)]``:
    the sum over the grouping's unit sets of ``weight * advantage`` of each decision's unit
    (``options``: the learner's :class:`~marft_agents.settings.grpo.GRPOOptions`; None: the
    defaults with ``agent_rewards``)."""
    options = options if options is not None else GRPOOptions(agent_rewards=agent_rewards)
    sets = estimator_function("grouping", grouping)(rollout, options)
    out = torch.zeros(len(rollout.decisions))  # [N]
    for n, units in enumerate(sets):
        per_unit = group_relative(units.scores, units.keys, normalisation, eps)  # [U]
        for advantage, ids in zip(per_unit.tolist(), units.members):
            if n == 0:
                out[ids] = advantage if units.weight == 1.0 else units.weight * advantage
            else:
                out[ids] += units.weight * advantage
    return out
