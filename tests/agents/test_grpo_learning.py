"""GRPO learns a known better action, through the whole learner: env-style rewards -> grouping ->
group-relative advantages -> clipped surrogate -> adapters.

``test_grpo.py`` checks the update direction on advantages it fixes by hand, so a wrong sign in
``group_math`` never reaches it; this module does not touch the advantages. Each test plays one
seeded rollout on the tiny random model, then pays it by a fixed rule (a response whose first
token is in :func:`_better`'s half of the vocabulary earns 1, any other 0), as an env's
``grade_round`` would (``team_reward`` on the round-closing decision, or per-agent
``agent_reward``), runs one ``learner.update`` and measures every response's log-prob before and
after. For each trained agent, the responses the rule rewarded must have become more likely and
the others less likely, each by a clear margin (:data:`MARGIN` nats on average), counting only
the responses whose comparison group holds both outcomes (an all-equal group has advantage 0
and so no direction).

These fail when the update goes the wrong way: an advantage negated in
``group_math.group_relative``, or the policy-gradient sign of ``ppo_math.clipped_surrogate``
flipped, or the loss negated in ``learners/base.py`` (checked by breaking each on purpose).
``test_marft_a_with_a_critic_learns_...`` is the same check for MARFT-A (``mappo_action`` with
``advantage.baseline: critic``), whose advantage is GAE on the untrained critic's values, whitened
across the batch; it fails too when ``mappo_action.build_samples`` negates the advantage.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Hashable

import pytest
import torch

from agent_helpers import small_config, tiny  # noqa: F401 (fixture)
from marft_agents.run.trainer import Trainer
from marft_agents.testing import sequence_logprobs

MARGIN = 0.2
"""Nats: the mean log-prob change of an agent's rewarded responses must exceed ``+MARGIN`` and that
of its unrewarded ones be below ``-MARGIN``. Measured over every case below, both agents, tiny-model
seeds 0-4 x config seeds 0-1: +0.32 to +2.63 on the rewarded, -0.87 to -3.53 on the others (seed
0 0, the one the tests run: +0.81 to +1.14 and -0.87 to -2.46); a flipped sign gives about the
mirror image."""

TASKS, GROUP = 4, 4
"""Four tasks, each played by a group of four episodes (16 episodes per update)."""


def _better(decision) -> float:
    """The rule: 1 for a response whose first token id is even (about half of a random model's
    samples), else 0."""
    return 1.0 if decision.response_ids and decision.response_ids[0] % 2 == 0 else 0.0


def _pay_team(rollout) -> list[float]:
    """Team reward = the rule on the round-closing (graded) decision of each round, paid on that
    decision as the collector records an env's ``team_reward``; no per-agent rewards. Returns each
    decision's episode return (what ``team`` grouping and MARFT-A's return compare)."""
    for episode in rollout.episodes:
        total = 0.0
        for i in episode.decisions:
            d = rollout.decisions[i]
            d.team_reward = _better(d) if d.closes_round else 0.0
            d.agent_reward = 0.0
            total += d.team_reward
        episode.team_return = total
        episode.solved = total > 0
        episode.agent_returns = {agent: total for agent in episode.agent_returns}
    return [rollout.episodes[d.episode].team_return for d in rollout.decisions]


def _pay_each_agent(rollout) -> list[float]:
    """Per-agent reward = the rule on the agent's own response (an env's ``agent_rewards``), team
    reward 0: only a grouping that scores an agent by its own rewards sees a signal. Returns each
    decision's own reward."""
    for episode in rollout.episodes:
        for i in episode.decisions:
            d = rollout.decisions[i]
            d.team_reward, d.agent_reward = 0.0, _better(d)
        episode.team_return, episode.solved = 0.0, False
    return [d.agent_reward for d in rollout.decisions]


def _learning_check(trainer, pay: Callable, key: Callable) -> dict[str, tuple[float, float]]:
    """Collect, pay by the rule, update once; per trained agent assert the rewarded responses'
    mean log-prob change > MARGIN and the unrewarded ones' < -MARGIN, over the decisions whose
    comparison group (``key(decision)``) holds both outcomes. Returns ``{agent: (up, down)}``."""
    learner, policy = trainer.learner, trainer.policy
    rollout = trainer.collector.collect(TASKS * GROUP)
    reward = pay(rollout)  # [N]
    outcomes: dict[Hashable, set[float]] = defaultdict(set)
    for d, r in zip(rollout.decisions, reward):
        outcomes[key(d)].add(r)
    rows = [i for i, d in enumerate(rollout.decisions) if d.response_ids and len(outcomes[key(d)]) == 2]
    decisions = [rollout.decisions[i] for i in rows]
    rewarded = torch.tensor([reward[i] > 0 for i in rows])  # [n]
    temperature = float(trainer.cfg.sampling.temperature)
    before = sequence_logprobs(policy, decisions, temperature)  # [n]
    metrics = learner.update(rollout, 0)
    assert metrics["ppo/policy_trained"] == 1.0 and metrics["guard/skipped_steps"] == 0
    delta = sequence_logprobs(policy, decisions, temperature) - before  # [n]
    found = {}
    for agent in learner.trainable_agents(0):
        mine = torch.tensor([d.agent_id == agent for d in decisions], dtype=torch.bool)  # [n]
        assert (mine & rewarded).sum() >= 3 and (mine & ~rewarded).sum() >= 3, f"too few {agent} responses"
        found[agent] = (float(delta[mine & rewarded].mean()), float(delta[mine & ~rewarded].mean()))
    assert set(found) == {"reasoner_0", "actor_0"}  # both agents train (one adapter each)
    wrong = {agent: f"{up:+.3f} rewarded, {down:+.3f} others" for agent, (up, down) in found.items()
             if not (up > MARGIN and down < -MARGIN)}
    assert not wrong, (f"mean response log-prob change after one update, want > +{MARGIN} on the rewarded and "
                       f"< -{MARGIN} on the others: {wrong} (is an advantage or the surrogate's sign flipped?)")
    return found


def _config(tmp_path, algorithm: str, horizon: int = 1, **sections):
    return small_config(tmp_path, algorithm=algorithm, **{
        "env.kwargs": {"horizon": horizon}, "ppo.gamma": 0.9, "sampling.max_new_tokens": 4,
        "schedule.episodes_per_update": TASKS * GROUP, "schedule.minibatch_size": 8, "schedule.ppo_epochs": 2,
        "schedule.actor_lr": 1e-2, "schedule.num_updates": 1, **sections})


CASES = {
    # grouping: (horizon, agent_rewards, pay, comparison key). team and step: the actor's response
    # decides the episode's return, which every decision of the episode shares (step adds, for the
    # reasoner, the identical-observation level of the same sign). agent and agent_turn: each
    # agent is paid for its own response, per round with agent_turn (two rounds).
    "team": (1, False, _pay_team, lambda d: d.group),
    "step": (1, False, _pay_team, lambda d: d.group),
    "agent": (1, True, _pay_each_agent, lambda d: (d.group, d.agent_id)),
    "agent_turn": (2, True, _pay_each_agent, lambda d: (d.group, d.agent_id, d.round)),
}


@pytest.mark.parametrize("grouping", list(CASES))
def test_grpo_makes_the_rewarded_responses_more_likely_and_the_others_less(tmp_path, tiny, grouping):
    horizon, agent_rewards, pay, key = CASES[grouping]
    cfg = _config(tmp_path, "grpo", horizon, learner={"group_size": GROUP, "grouping": grouping,
                                                      "agent_rewards": agent_rewards})
    _learning_check(Trainer(cfg, tiny), pay, key)


def test_marft_a_with_a_critic_learns_the_rewarded_responses(tmp_path, tiny):
    cfg = _config(tmp_path, "mappo_action", **{"advantage.baseline": "critic", "schedule.group_size": 1})
    trainer = Trainer(cfg, tiny)
    assert trainer.policy.value_heads  # the advantage is GAE on the (untrained) critic's values
    _learning_check(trainer, _pay_team, lambda d: "batch")  # advantages whitened across the batch
