"""What a rollout records: one :class:`Decision` per agent turn, one :class:`EpisodeRecord` per
episode, the :class:`Rollout` that holds them, and :func:`rollout_metrics` over them.

``marft_agents/collector.py`` (the collector) fills them; its docstring says what each field means
for rewards, rounds and task groups. Learners read them (``learners/``) without touching the env.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

VALUE_MODES: tuple[str | None, ...] = (None, "state", "token")
"""What a learner may ask the collector to record from the critic (``Learner.value_mode``):
nothing (and no critic is built at all), ``Decision.value`` = V(prompt) per decision, or
``Decision.token_values`` = V(prompt + response[:j]) before every response token."""


@dataclass
class Decision:
    """One agent decision (one utterance) and everything a learner needs about it."""

    env_index: int
    """Which env instance produced it."""
    episode: int
    """Index of its episode within the rollout (``Rollout.episodes[episode]``)."""
    step: int
    """Position of the decision within its episode (0, 1, ... across all agents)."""
    round: int
    """Round of the episode in which it was taken."""
    agent_id: str
    adapter: str
    """Name of the adapter that generated it (``policy.adapter_for(agent_id)``)."""
    observation: str
    """The observation text the agent acted on (the user turn of its prompt)."""
    prompt_ids: list[int]
    response_ids: list[int]
    text: str
    logprobs: list[float]
    """Sampling-time log-probs of ``response_ids``, as the sampling engine computed them: the PPO
    "old" log-probs, unless the learner rescores those (``ppo.recompute_old_logprobs``; required
    with an engine whose kernels differ from the learner's, e.g. vLLM), in which case these stay
    the behaviour log-probs (``Sample.behaviour_logprobs``)."""
    value: float | None = None
    """Critic's state value V(prompt) at collection time (action level)."""
    token_values: list[float] | None = None
    """Critic's value before each response token at collection time (token level)."""
    team_reward: float = 0.0
    """The env's reward for this transition: the team reward if this decision closed a round."""
    agent_reward: float = 0.0
    """The env-reported per-agent reward of this agent for this decision's round."""
    closes_round: bool = False
    """Whether the round was graded right after this decision."""
    done: bool = False
    """Whether the episode ended with this decision (terminated or truncated)."""
    terminated: bool = False
    truncated: bool = False
    adjacency: list[list[int]] | None = None
    """D_t (``[N, N]`` 0/1, ``D[i][j] = 1``: j sees i) in force when the agent acted."""
    task_id: str = ""
    prefix_len: int = 0
    """Leading prompt tokens computed once for the whole batch (the agent's system turn; 0 =
    none): the learner must score the decision with the same split (``Generation.prefix_len``)."""
    group: int = 0
    """Task group of its episode within the rollout (``EpisodeRecord.group``)."""
    critic_prompt_ids: list[int] | None = None
    """What the critic valued at this decision (``critic.mode``: the global-state prompt under
    ``centralised``/``per_agent``, ``prompt_ids`` under ``local``; None when no critic ran). The
    learner's value loss scores exactly these ids (with the response appended at token level)."""
    critic_prefix_len: int = 0
    """Shared-prefix length of ``critic_prompt_ids`` (the critic's system turn, or 0)."""
    scripted: bool = False
    """Played by a scripted policy (``scripted_seats``): ``text`` was not sampled, ``logprobs``
    are 0, it counts in no token budget and no learner trains on it (the critic still values
    it: it is part of the team's episode)."""


@dataclass
class EpisodeRecord:
    """Summary of one finished episode."""

    env_index: int
    task_id: str
    decisions: list[int] = field(default_factory=list)
    """Indices into ``Rollout.decisions`` in the order they were taken."""
    team_return: float = 0.0
    """Sum of the team rewards of all graded rounds."""
    agent_returns: dict[str, float] = field(default_factory=dict)
    """Per agent, the sum of the rewards the env gave it (PettingZoo return)."""
    solved: bool = False
    rounds: int = 0
    group: int = 0
    """Index of its task group within the rollout: the episodes of one group played the same
    task (same reset seed and options) with independent samples (see the module docstring)."""


@dataclass
class Rollout:
    """A batch of finished episodes."""

    decisions: list[Decision] = field(default_factory=list)
    episodes: list[EpisodeRecord] = field(default_factory=list)

    def episode_decisions(self) -> list[list[Decision]]:
        """Decisions grouped by episode, each list in the order the decisions were taken."""
        return [[self.decisions[i] for i in ep.decisions] for ep in self.episodes]

    def groups(self) -> dict[int, list[int]]:
        """Episode indices of every task group, by group index (in episode order)."""
        out: dict[int, list[int]] = {}
        for e, episode in enumerate(self.episodes):
            out.setdefault(episode.group, []).append(e)
        return out

    @property
    def num_tokens(self) -> int:
        """Sampled response tokens (scripted seats' utterances are not sampled)."""
        return sum(len(d.response_ids) for d in self.decisions if not d.scripted)


def rollout_metrics(rollout: Rollout, agent_ids: Sequence[str]) -> dict[str, float]:
    """Flat metrics of a rollout: team reward, solve rate, lengths, and per-agent figures.

    ``agent/<id>/reward`` is the agent's PettingZoo return (the sum of the rewards the env gave
    it) averaged over episodes; ``agent/<id>/agent_reward`` the mean env-reported per-agent
    reward of its decisions; ``agent/<id>/length`` its mean response length in tokens.
    """
    episodes = rollout.episodes
    n = max(len(episodes), 1)
    out = {
        "rollout/reward_mean": sum(e.team_return for e in episodes) / n,
        "rollout/solved_rate": sum(e.solved for e in episodes) / n,
        "rollout/episodes": float(len(episodes)),
        "rollout/decisions": float(len(rollout.decisions)),
        "rollout/tokens": float(rollout.num_tokens),
        "rollout/rounds_mean": sum(e.rounds for e in episodes) / n,
    }
    for agent in agent_ids:
        mine = [d for d in rollout.decisions if d.agent_id == agent]
        out[f"agent/{agent}/reward"] = sum(e.agent_returns.get(agent, 0.0) for e in episodes) / n
        out[f"agent/{agent}/agent_reward"] = (
            sum(d.agent_reward for d in mine) / len(mine) if mine else float("nan"))
        out[f"agent/{agent}/length"] = (
            sum(len(d.response_ids) for d in mine) / len(mine) if mine else float("nan"))
        out[f"agent/{agent}/decisions"] = float(len(mine))
    return out
