"""Collect multi-agent episodes from many env instances, batching generation across them.

The collector drives any registered marft env (``marft_envs.make(id, **kwargs)``) through the
PettingZoo AEC API. Within one env the agents act one after another (the env's D_t decides the
order), but different envs are advanced in lock-step: at every tick each running env is at some
agent's turn, and all envs whose current agent uses the same adapter are answered by *one*
``policy.generate`` call (or all of them by one call, when the sampling engine batches several
adapters together: ``SamplingEngine.mixes_adapters``). Dead agents (terminated/truncated) are
stepped with ``None`` until the env has no agents left; then the env starts its next planned
episode, if any.

A scripted seat (``scripted``: agent id -> ``fn(agent, observation, info) -> str``, the run's
``scripted_seats``) is answered by its function instead of the model; its decision is recorded
like any other (the critic values it, its rewards count) and marked ``scripted``.

Every agent decision becomes a :class:`Decision`: who acted, on what prompt (token ids of the
tokenizer's chat template applied to the role's system prompt and the observation text), what it
said (response ids, text, sampling-time log-probs), what the critic read (``critic_prompt_ids``:
the episode's global-state log from ``env.unwrapped.state()`` and D_t up to this decision, or the
agent's own prompt under ``critic.mode: local``; see ``marft_agents/model/critic.py``) and its values
(action-level ones filled in when the collection ends), and what the
env paid for it. Rewards follow the env's AEC semantics: right after an agent's step, ``env.rewards`` holds
the rewards of *that* transition, so ``team_reward`` is the round's team reward on the decision
that closed the round and 0 on the others; the per-agent rewards a task reports
(``infos[agent]["agent_reward"]``) are filled in on every decision of the round once it is graded.
Learners turn these into training rewards (credit assignment) without touching the env.

Task order: when the env exposes its task source (``env.unwrapped.tasks``, as every
``TextTaskEnv`` does), the collector draws task indices from its own seeded permutation (each
task once per epoch) and resets with ``options={"task_index": i}``; otherwise every episode is
reset with its own derived seed. Either way the order depends only on the collector's seed and
its state (``state_dict``), which checkpoints save, so a resumed run sees the same tasks.

Grouped sampling (``group_size = k > 1``, asked for by a learner's ``group_size``, i.e.
``schedule.group_size`` or GRPO's ``learner.group_size``): each
plan drawn from the task order is played k times, with the *same* reset seed and options (so the
same task, and for envs without a task source the same seeded start), and independent policy
samples. The k episodes form one group: ``EpisodeRecord.group`` and ``Decision.group`` hold its
index within the rollout, and ``Rollout.groups()`` lists the episodes of each. With k = 1 every
episode is its own group and the task order is exactly the ungrouped one.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from pettingzoo import AECEnv

from marft_agents.episodes import VALUE_MODES, Decision, EpisodeRecord, Rollout

PERMUTATION_LIMIT = 2**20  # larger task sources are sampled with replacement


def implements_state(env: Any) -> bool:
    """Whether ``env`` has a global ``state()`` of its own: a method of its class other than
    PettingZoo's ``AECEnv.state`` placeholder (which only raises NotImplementedError). Asked of
    the class before the call, so that an error raised inside a real ``state()`` is the env's own
    and reaches the caller as it is."""
    method = getattr(type(env), "state", None)
    return callable(method) and method is not AECEnv.state

@dataclass
class _Slot:
    """An env instance and the episode it is playing."""

    env: Any
    index: int
    episode: int = -1
    round_decisions: list[int] = field(default_factory=list)
    active: bool = False
    critic_logs: dict[int, Any] = field(default_factory=dict)
    """The episode's ``GlobalStateLog`` (global-state critics), started at its first decision: one
    per model whose critic values the episode's decisions (by ``id`` of that model's policy; one
    in a one-model run)."""


class RolloutCollector:
    """Runs ``envs`` in lock-step with ``policy`` and returns :class:`Rollout` batches.

    Args:
        envs: env instances (AEC), all of the same id and agents.
        policy: a ``MultiAgentPolicy`` (generate, chat_prompt_ids, adapter_for, state_values,
            token_values).
        sampling: the ``SamplingConfig`` used for generation.
        values: ``"state"`` (record V(prompt)), ``"token"`` (record per-token values) or None.
        seed: seeds the task order.
        group_size: episodes per task group (see the module docstring); ``collect`` then needs a
            multiple of it.
        scripted: agent id -> scripted policy ``fn(agent, observation, info) -> str`` for the
            seats the model does not play (see the module docstring).
    """

    def __init__(self, envs: Sequence[Any], policy: Any, sampling: Any, values: str | None = "state", seed: int = 0,
                 group_size: int = 1, scripted: Mapping[str, Callable[..., str]] | None = None):
        if not envs:
            raise ValueError("RolloutCollector needs at least one env instance")
        if not isinstance(group_size, int) or group_size < 1:
            raise ValueError(f"group_size must be an int >= 1, got {group_size!r}")
        self.group_size = group_size
        if values not in VALUE_MODES:
            raise ValueError(f"values must be one of {VALUE_MODES} (a learner's value_mode), got {values!r}")
        self.slots = [_Slot(env, i) for i, env in enumerate(envs)]
        self.policy, self.sampling, self.values, self.seed = policy, sampling, values, seed
        self.agent_ids = list(envs[0].possible_agents)
        self.scripted = dict(scripted or {})
        if set(self.scripted) - set(self.agent_ids):
            raise ValueError(f"scripted seats {sorted(set(self.scripted) - set(self.agent_ids))} are not agents of "
                             f"the env; its agents: {', '.join(self.agent_ids)}")
        tasks = getattr(getattr(envs[0], "unwrapped", envs[0]), "tasks", None)
        self.num_tasks = len(tasks) if tasks is not None else None
        self.episodes_started = 0
        self._rng = np.random.default_rng(np.random.SeedSequence([seed, 0x7A5C]))
        self._order: np.ndarray | None = None
        self._cursor = 0

    # -- task plan -----------------------------------------------------------------------------
    def _next_plan(self) -> tuple[int, dict[str, Any]]:
        """(reset seed, reset options) of the next training episode."""
        n = self.episodes_started
        self.episodes_started += 1
        seed = int(np.random.SeedSequence([self.seed, n]).generate_state(1)[0])
        if self.num_tasks is None:
            return seed, {}
        if self.num_tasks > PERMUTATION_LIMIT:
            return seed, {"task_index": int(self._rng.integers(self.num_tasks))}
        if self._order is None or self._cursor >= self.num_tasks:
            self._order, self._cursor = self._rng.permutation(self.num_tasks), 0
        self._cursor += 1
        return seed, {"task_index": int(self._order[self._cursor - 1])}

    def state_dict(self) -> dict[str, Any]:
        return {
            "episodes_started": self.episodes_started,
            "rng": self._rng.bit_generator.state,
            "order": None if self._order is None else self._order.tolist(),
            "cursor": self._cursor,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.episodes_started = int(state["episodes_started"])
        self._rng.bit_generator.state = state["rng"]
        self._order = None if state["order"] is None else np.asarray(state["order"], dtype=np.int64)
        self._cursor = int(state["cursor"])

    # -- collection ----------------------------------------------------------------------------
    def collect(self, num_episodes: int, plans: Sequence[tuple[int | None, dict[str, Any]]] | None = None,
                share: tuple[int, int] | None = None) -> Rollout:
        """Play ``num_episodes`` episodes in groups of ``group_size`` (or exactly the given
        ``(seed, options)`` ``plans``, each its own group).

        ``share = (rank, world_size)``: draw the plan of all ``num_episodes`` (so the task order
        and this collector's state do not depend on the world size) but play only the rank's
        contiguous share of whole groups; groups keep their global index
        (``marft_agents/runtime/distributed.py``)."""
        if plans is None:
            k = self.group_size
            if num_episodes < 1 or num_episodes % k:
                raise ValueError(f"num_episodes must be a positive multiple of group_size {k}, got {num_episodes}")
            planned = [(plan, g) for g in range(num_episodes // k) for plan in [self._next_plan()] * k]
            if share is not None:
                rank, world_size = share
                if (num_episodes // k) % world_size:
                    raise ValueError(f"{num_episodes // k} task groups of {k} cannot be split evenly over "
                                     f"{world_size} ranks")
                per_rank = num_episodes // world_size
                planned = planned[rank * per_rank: (rank + 1) * per_rank]
        else:
            planned = [(plan, i) for i, plan in enumerate(plans)]
        queue = planned[::-1]  # pop() from the end = first plan first
        rollout = Rollout()
        for slot in self.slots:
            self._start_next(slot, queue, rollout)
        while any(s.active for s in self.slots):
            turns = []  # (slot, agent, prompt_ids, info)
            for slot in self.slots:
                while slot.active:
                    turn = self._advance(slot)
                    if turn is not None:
                        turns.append((slot, *turn))
                        break
                    self._start_next(slot, queue, rollout)
            if turns:
                self._play_tick(turns, rollout)
        if self.values is not None:
            self._fill_values(rollout)
        return rollout

    def _start_next(self, slot: _Slot, queue: list, rollout: Rollout) -> None:
        if not queue:
            slot.active = False
            return
        (seed, options), group = queue.pop()
        slot.env.reset(seed=seed, options=dict(options))
        slot.episode = len(rollout.episodes)
        slot.round_decisions = []
        slot.critic_logs = {}
        slot.active = True
        task = getattr(getattr(slot.env, "unwrapped", slot.env), "task", None)
        rollout.episodes.append(EpisodeRecord(slot.index, getattr(task, "task_id", ""),
                                              agent_returns={a: 0.0 for a in self.agent_ids}, group=group))

    def _advance(self, slot: _Slot) -> tuple[str, dict, dict] | None:
        """Step dead agents until someone must act; None once the episode is over."""
        env = slot.env
        while env.agents:
            agent = env.agent_selection
            obs, _reward, terminated, truncated, info = env.last()
            if terminated or truncated:
                env.step(None)
                continue
            return agent, obs, info
        return None

    def _play_tick(self, turns: list[tuple[_Slot, str, dict, dict]], rollout: Rollout) -> None:
        from marft_agents.engine import GenRequest  # lazy: the decoding engine imports transformers

        prompts, prefix_lens = [], []
        for _slot, agent, obs, info in turns:
            system = info.get("system_prompt", "")
            own = self.policy.for_agent(agent)  # the agent's own model: its tokenizer and chat template
            prompts.append(list(own.chat_prompt_ids(system, obs["text"])))
            prefix_lens.append(own.shared_prefix_len(system, prompts[-1]) if self.sampling.share_prefix else 0)
        # One generate call per adapter: all envs whose current agent shares an adapter; or one
        # call for the whole tick when the engine batches several adapters together (vLLM).
        by_adapter: dict[str, list[int]] = defaultdict(list)
        mixed = self.policy.engine_for(self.sampling.engine).mixes_adapters  # a capability of the policy's engine
        generations: list[Any] = [None] * len(turns)
        for k, (_slot, agent, obs, info) in enumerate(turns):
            if agent in self.scripted:
                generations[k] = self._scripted_turn(agent, obs, info, prompts[k], prefix_lens[k])
            else:
                by_adapter["" if mixed else self.policy.adapter_for(agent)].append(k)
        for adapter in sorted(by_adapter):
            idx = by_adapter[adapter]
            outs = self.policy.generate([GenRequest(turns[k][1], prompts[k], prefix_lens[k]) for k in idx],
                                        self.sampling)
            for k, gen in zip(idx, outs):
                generations[k] = gen
        critic_inputs = self._critic_inputs(turns, prompts, generations)
        for k, (slot, agent, obs, info) in enumerate(turns):
            gen = generations[k]
            decision = Decision(
                env_index=slot.index, episode=slot.episode, step=len(rollout.episodes[slot.episode].decisions),
                round=int(info.get("round", 0)), agent_id=agent, adapter=self.policy.adapter_for(agent),
                observation=obs["text"], prompt_ids=prompts[k], response_ids=list(gen.response_ids), text=gen.text,
                logprobs=[float(x) for x in gen.logprobs],
                adjacency=(info.get("dependency") or {}).get("adjacency"), task_id=str(info.get("task_id", "")),
                prefix_len=gen.prefix_len, group=rollout.episodes[slot.episode].group, scripted=agent in self.scripted,
            )
            if critic_inputs is not None:
                decision.critic_prompt_ids, decision.critic_prefix_len = critic_inputs[k]
            self._step(slot, decision, rollout)

    def _scripted_turn(self, agent: str, obs: dict, info: dict, prompt_ids: list[int], prefix_len: int) -> Any:
        """A scripted seat's utterance as a :class:`Generation` (its tokens, log-probs 0: nothing
        was sampled)."""
        from marft_agents.engine import Generation

        text = self.scripted[agent](agent, obs, info)
        if not isinstance(text, str):
            raise TypeError(f"the scripted policy of seat {agent!r} returned {type(text).__name__}, expected str")
        ids = list(self.policy.for_agent(agent).encode_text(text))
        return Generation(agent, list(prompt_ids), ids, text, [0.0] * len(ids), finished=True, prefix_len=prefix_len)

    def _critic_inputs(self, turns: list, prompts: list[list[int]], generations: list[Any]
                       ) -> list[tuple[list[int], int]] | None:
        """Per turn, the critic's ``(prompt ids, shared-prefix length)`` (``critic.mode``).

        Read before any of this tick's agents act: each env is at its current agent's turn, so
        ``state()`` holds the outputs so far and D_t as the agent is about to see them.
        """
        if self.values is None:
            return None
        from marft_agents.model.critic import CRITIC_SYSTEM_PROMPT, GlobalStateLog

        config = self.policy.critic_config
        if not config.reads_global_state:  # local: the acting agent's own prompt, as sampled
            return [(prompts[k], generations[k].prefix_len) for k in range(len(turns))]
        out = []
        for slot, agent, _obs, info in turns:
            reader = self.policy.critic_reader(agent)  # the critic's model renders the global state in its tokens
            system_ids = reader.system_turn_ids(CRITIC_SYSTEM_PROMPT)
            prefix = len(system_ids) if self.sampling.share_prefix else 0
            env = getattr(slot.env, "unwrapped", slot.env)
            if not implements_state(env):
                raise TypeError(
                    f"critic.mode {config.mode!r} values the global state, but env {type(env).__name__} has no "
                    "state(); implement state() -> {'text': ...} (TextTaskEnv does) or use critic.mode: local")
            state = env.state()
            log = slot.critic_logs.get(id(reader))
            if log is None:
                log = slot.critic_logs[id(reader)] = GlobalStateLog(system_ids, reader.encode_text, config.max_state_chars)
            ids = log.extend(str(state["text"]), info.get("dependency"), agent,
                                         str(info.get("role", agent)), int(info.get("round", 0)))
            if self.values == "token":  # so that this input + the response prefixes the next input
                log.add_response(generations[len(out)].response_ids, generations[len(out)].text)
            out.append((ids, prefix))
        return out

    @torch.no_grad()
    def _fill_values(self, rollout: Rollout) -> None:
        """The critic's values of the rollout's decisions, once the collection is over.

        The critic's weights do not change during a collection, so valuing later gives the same
        values; and since an episode's critic inputs extend one another (``GlobalStateLog``: for
        token-level values each input plus its response prefixes the next input), valuing an
        episode's decisions together costs one row per episode (``state_values`` and
        ``token_values`` merge inputs that are prefixes of one another). Episodes go in chunks
        of ``sampling.max_batch_size``, one call per critic adapter."""
        by_critic: dict[str, dict[int, list[Decision]]] = defaultdict(lambda: defaultdict(list))
        for d in rollout.decisions:
            if d.critic_prompt_ids is not None:
                by_critic[self.policy.critic_for(d.agent_id)][d.episode].append(d)
        chunk = max(int(self.sampling.max_batch_size), 1)
        for critic in sorted(by_critic):
            episodes = list(by_critic[critic].values())
            for start in range(0, len(episodes), chunk):
                part = [d for episode in episodes[start: start + chunk] for d in episode]
                ids, prefix_lens = [d.critic_prompt_ids for d in part], [d.critic_prefix_len for d in part]
                actors = [d.agent_id for d in part]  # each decision's value-head slot
                if self.values == "state":
                    values = self.policy.state_values(ids, part[0].agent_id, prefix_lens=prefix_lens,
                                                      actors=actors)  # [B]
                    for d, value in zip(part, values.float().cpu().tolist()):
                        d.value = value
                    continue
                values = self.policy.token_values(ids, [d.response_ids for d in part], part[0].agent_id,
                                                  prefix_lens=prefix_lens, actors=actors).float().cpu()  # [B, T]
                for d, row in zip(part, values):
                    d.token_values = row[: len(d.response_ids)].tolist()

    def _step(self, slot: _Slot, decision: Decision, rollout: Rollout) -> None:
        env, agent = slot.env, decision.agent_id
        episode = rollout.episodes[slot.episode]
        env.step(decision.text)
        # env.rewards now holds this transition's rewards (they are cleared on the next step).
        rewards = {a: float(r) for a, r in env.rewards.items()}
        for a, r in rewards.items():
            episode.agent_returns[a] = episode.agent_returns.get(a, 0.0) + r
        decision.team_reward = rewards.get(agent, 0.0)
        decision.terminated = bool(env.terminations.get(agent, False))
        decision.truncated = bool(env.truncations.get(agent, False))
        decision.done = decision.terminated or decision.truncated
        info = env.infos.get(agent, {})
        decision.closes_round = decision.done or int(info.get("round", decision.round)) != decision.round
        index = len(rollout.decisions)
        rollout.decisions.append(decision)
        episode.decisions.append(index)
        slot.round_decisions.append(index)
        if decision.closes_round:
            # The round is graded: every decision of it gets its agent's reported reward.
            for i in slot.round_decisions:
                d = rollout.decisions[i]
                d.agent_reward = float(env.infos.get(d.agent_id, {}).get("agent_reward", 0.0))
            slot.round_decisions = []
            episode.team_return += decision.team_reward
            episode.rounds += 1
            outcome = info.get("last_outcome") or {}
            episode.solved = bool(outcome.get("solved", decision.terminated))
