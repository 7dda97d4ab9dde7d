"""The base PettingZoo AEC environment for multi-agent text tasks (a Flex-POMDP).

Episode structure
    An episode is a sequence of *rounds* on one task. In each round the dependency D_t (see
    :mod:`marft_envs.core.dependency`) chooses which agents act and in which order; each acting
    agent's observation is the task, the feedback of earlier rounds and the outputs of its
    parents this round. After the last scheduled agent acts, :meth:`TextTaskEnv.grade_round`
    grades the round. Every agent receives the round's team reward; a solved task terminates the
    episode, otherwise a new round starts until ``horizon`` rounds have run (then truncation).

Observations and actions
    ``observe(agent)`` returns ``{"text": str}`` (space: ``Dict(text=UnicodeText)``). Actions are
    ``str`` utterances. Actions longer than ``max_action_chars`` are truncated (``infos`` reports
    ``action_truncated``); lone surrogates are replaced by ``"?"``; anything that is not a ``str``
    raises ``TypeError``.

Infos (per agent, refreshed after every step)
    ``role``, ``system_prompt``, ``graded``, ``task_id``, ``round``, ``turn_order``, ``parents``,
    ``acts_this_round``, ``dependency`` (D_t, see "Dependency format" below),
    ``agent_reward`` (env-reported per-agent reward of the last graded round), ``messages`` (the
    agent's turn as chat messages, :meth:`TextTaskEnv.chat_messages`) and, once a round has
    been graded, ``last_outcome`` (team reward, solved, feedback, grading details).

Episode end
    Once every agent is done (and has been stepped with ``None``, as PettingZoo's AEC loop does),
    ``step`` raises ``RuntimeError`` saying the episode has ended: call ``reset()``.

State
    ``state()`` returns ``{"text": transcript(), "dependency": D_t}``: the transcript shows every
    round's utterances once, then that round's grade line; the dependency is the same dict as
    ``infos[agent]["dependency"]`` (space: ``state_space``).

Dependency format (``infos[agent]["dependency"]`` and ``state()["dependency"]``, one format)
    D_t of the current round (of the last round once the episode is over) as the JSON-friendly
    dict of :meth:`RoundGraph.as_dict`: ``agents`` (every agent id, profile order: the index space
    of ``adjacency``), ``active`` (who acts this round, in turn order), ``edges`` (sorted
    ``[parent, child]`` pairs: child sees parent's output of this round), ``adjacency`` (``[N, N]``
    nested lists of 0/1, ``adjacency[i][j] == 1`` iff agent j sees agent i; as a matrix:
    ``np.array(d["adjacency"])``) and ``history`` (``"graded"`` or ``"all"``: what earlier rounds
    show). Each call builds a fresh dict; the two are equal (``==``) between steps.

Randomness
    ``np_random`` (Gymnasium's name, read by wrappers that draw random numbers: SuperSuit's
    ``frame_skip_v0`` draws its skip counts from ``env.unwrapped.np_random``) is a generator of
    its own, seeded by ``reset(seed=s)`` as Gymnasium seeds it (``gymnasium.utils.seeding``);
    separate from the task order, so drawing from it changes no episode.

Reset options
    ``{"task_index": i}`` plays task ``i`` of the task source (fixed evaluation sets);
    ``{"task": Task(...)}`` plays a given task. Otherwise tasks follow a seeded permutation of the
    source (re-shuffled every epoch; sources larger than ``2**20`` are sampled with replacement).
"""

from __future__ import annotations

import dataclasses

from typing import Any

import numpy as np
from gymnasium import spaces
from gymnasium.utils import seeding
from pettingzoo import AECEnv

from marft_envs.core.dependency import Dependency, RoundGraph, RoundRecord
from marft_envs.core.roles import Profile, load_profile
from marft_envs.core.spaces import UnicodeText, dependency_space, text_observation_space
from marft_envs.core.task import RoundOutcome, Task, TaskSource
from marft_envs.core.template import ObservationTemplate

PERMUTATION_LIMIT = 2**20


class TextTaskEnv(AECEnv):
    """Base class; subclasses implement :meth:`grade_round` (and optionally the other hooks)."""

    metadata = {"name": "marft_text_task_v0", "render_modes": ["ansi", "human"], "is_parallelizable": True}
    default_profile: str | dict | Profile = "dual"
    """The profile used when none is passed: a name (shipped, ``$MARFT_PROFILE_PATH`` or a
    ``marft_envs.profiles`` entry point), a file path, a mapping in the profile file format or a
    :class:`Profile` (see :mod:`marft_envs.core.roles`)."""

    def __init__(
        self,
        tasks: TaskSource,
        profile: str | Profile | dict | None = None,
        dependency: Any = None,
        horizon: int = 3,
        max_action_chars: int = 16_384,
        max_observation_chars: int = 200_000,
        template: ObservationTemplate | None = None,
        render_mode: str | None = None,
    ):
        super().__init__()
        if not isinstance(tasks, TaskSource):
            raise TypeError(f"tasks must implement __len__ and __getitem__ (TaskSource), got {type(tasks).__name__}")
        if len(tasks) == 0:
            raise ValueError("the task source is empty; check the data path and filters")
        if not isinstance(horizon, int) or horizon < 1:
            raise ValueError(f"horizon must be a positive int (rounds per episode), got {horizon!r}")
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be one of {self.metadata['render_modes']} or None, got {render_mode!r}")
        self.tasks = tasks
        self.profile = load_profile(profile if profile is not None else self.default_profile)
        # (the dependency's setter also sets this env's metadata["is_parallelizable"])
        self.dependency = Dependency.from_spec(dependency if dependency is not None else self.profile.dependency)
        self.horizon = horizon
        self.max_action_chars = max_action_chars
        self.max_observation_chars = max_observation_chars
        self.template = template or ObservationTemplate()
        self.render_mode = render_mode
        self.possible_agents = list(self.profile.agent_ids)
        self.dependency.validate(self.possible_agents)
        obs_space = text_observation_space(max_observation_chars)
        act_space = UnicodeText(max_action_chars)
        # The same space objects on every call: PettingZoo's api_test and seeding rely on it.
        self.observation_spaces = {a: obs_space for a in self.possible_agents}
        self.action_spaces = {a: act_space for a in self.possible_agents}
        self.state_space = spaces.Dict(
            {"text": UnicodeText(10 * max_observation_chars), "dependency": dependency_space(self.possible_agents)}
        )
        self._rng: np.random.Generator | None = None  # the task order
        self._np_random: np.random.Generator | None = None  # for wrappers (see "Randomness")
        self._order: np.ndarray | None = None
        self._cursor = 0
        self.task: Task | None = None
        self.history: list[RoundRecord] = []
        self.agents: list[str] = []
        self._round_open = False  # a round has begun and is not graded yet (see transcript())

    @property
    def np_random(self) -> np.random.Generator:
        """The generator for wrappers (module docstring, "Randomness"): seeded by
        ``reset(seed=...)``, from OS entropy when first used before a seeded reset."""
        if self._np_random is None:
            self._np_random, _ = seeding.np_random()
        return self._np_random

    @np_random.setter
    def np_random(self, value: np.random.Generator) -> None:
        self._np_random = value

    # -- the dependency and what it allows ---------------------------------------------------------
    @property
    def dependency(self) -> Dependency:
        """D_t (see :mod:`marft_envs.core.dependency`). Setting it also sets this env's
        ``metadata["is_parallelizable"]``: true only when the class declares it and every round
        has every agent act once, in profile order (:meth:`Dependency.fixed_turn_order`), which
        is what PettingZoo's ``aec_to_parallel`` needs. Other D_t (agents skipping rounds,
        orchestration) have the D_t-wave view :class:`~marft_envs.core.parallel.DependencyParallelEnv`."""
        return self._dependency

    @dependency.setter
    def dependency(self, value: Dependency) -> None:
        self._dependency = value
        agents = tuple(self.profile.agent_ids)
        cycles = value.fixed_turn_order(agents) == agents
        declared = bool(type(self).metadata.get("is_parallelizable", False))
        self.metadata = {**type(self).metadata, "is_parallelizable": declared and cycles}

    # -- hooks for subclasses --------------------------------------------------------------------
    def grade_round(self, task: Task, outputs: dict[str, str], round_index: int) -> RoundOutcome:
        """Grade a finished round. ``outputs``: agent id -> utterance, in turn order."""
        raise NotImplementedError

    def start_episode(self, task: Task) -> None:
        """Called at reset with the chosen task (create per-episode state here)."""

    def extra_info(self, agent: str) -> dict[str, Any]:
        """Extra per-agent info merged into ``infos`` after every step."""
        return {}

    def agent_view(self, task: Task, agent: str) -> Task:
        """The task as ``agent`` sees it (default: the whole task, the same for every agent).

        Override for partial observability: return the task with a ``prompt`` holding only what
        ``agent`` may know (e.g. ``dataclasses.replace(task, prompt=...)``). The default
        observation shows this view's prompt; ``transcript()`` and evaluation keep the full task.
        """
        return task

    def compose_observation(self, agent: str) -> str:
        """The text ``agent`` observes now (default: :class:`ObservationTemplate`); teammates'
        utterances, this round's and earlier rounds', pass through :meth:`heard`."""
        def hear(speaker: str, text: str) -> str:
            return text if speaker == agent else self.heard(agent, speaker, text)

        return self.template.render(
            task=self.agent_view(self.task, agent),
            history=[dataclasses.replace(record, outputs={a: hear(a, t) for a, t in record.outputs.items()})
                     for record in self.history],
            # Parents that have not acted yet (observing out of turn) are simply not shown.
            parents=[(p, self.profile.role_of(p).name, hear(p, self.round_outputs[p]))
                     for p in self.graph.parents(agent) if p in self.round_outputs],
            graded_agent=self.quoted_output_agent,
        )

    def heard(self, listener: str, speaker: str, utterance: str) -> str:
        """What ``listener`` reads of a teammate's ``utterance`` (default: all of it; the template
        may still cut it). Override for a narrower channel, e.g. Relay's one-number channel."""
        return utterance

    def quoted_output_agent(self, outputs: dict[str, str]) -> str | None:
        """Whose utterance an earlier round's history quotes as the team's attempt.

        Default: the graded agent's (:meth:`graded_output_agent`). Override when the graded
        utterance is not the attempt itself, e.g. a reviewer's "APPROVE" of a coder's program.
        """
        return self.graded_output_agent(outputs)

    # -- helpers for subclasses --------------------------------------------------------------------
    def graded_output_agent(self, outputs: dict[str, str]) -> str | None:
        """The last agent in ``outputs`` whose role is graded (None if no graded role acted)."""
        graded = [a for a in outputs if self.profile.role_of(a).graded]
        return graded[-1] if graded else None

    def graded_output(self, outputs: dict[str, str]) -> str:
        """The utterance that is graded this round ("" if no graded role acted)."""
        agent = self.graded_output_agent(outputs)
        return outputs[agent] if agent is not None else ""

    # -- PettingZoo API --------------------------------------------------------------------------
    def observation_space(self, agent: str) -> spaces.Space:
        return self.observation_spaces[agent]

    def action_space(self, agent: str) -> spaces.Space:
        return self.action_spaces[agent]

    def reset(self, seed: int | None = None, options: dict | None = None) -> None:
        if seed is not None or self._rng is None:
            # Without a seed, fresh OS entropy: never the global numpy RNG.
            self._rng = np.random.default_rng(seed)
            self._order, self._cursor = None, 0
        if seed is not None:
            self._np_random, _ = seeding.np_random(seed)
        options = options or {}
        if "task" in options:
            if not isinstance(options["task"], Task):
                raise TypeError(f"options['task'] must be a marft_envs Task, got {type(options['task']).__name__}")
            self.task = options["task"]
        elif "task_index" in options:
            index = options["task_index"]
            if not isinstance(index, (int, np.integer)) or not 0 <= index < len(self.tasks):
                raise ValueError(f"options['task_index'] must be an int in [0, {len(self.tasks)}), got {index!r}")
            self.task = self.tasks[int(index)]
        else:
            self.task = self.tasks[self._next_task_index()]
        self.agents = list(self.possible_agents)
        self.rewards = {a: 0.0 for a in self.agents}
        self._cumulative_rewards = {a: 0.0 for a in self.agents}
        self.terminations = {a: False for a in self.agents}
        self.truncations = {a: False for a in self.agents}
        self.infos = {a: {} for a in self.agents}
        self.history = []
        self.round_index = 0
        self._last_outcome: RoundOutcome | None = None
        self._truncated_flags: dict[str, bool] = {}
        self.start_episode(self.task)
        self._begin_round()
        self._refresh_infos()

    def _next_task_index(self) -> int:
        n = len(self.tasks)
        if n > PERMUTATION_LIMIT:
            return int(self._rng.integers(n))
        if self._order is None or self._cursor >= n:
            self._order, self._cursor = self._rng.permutation(n), 0
        self._cursor += 1
        return int(self._order[self._cursor - 1])

    def _begin_round(self) -> None:
        self.graph: RoundGraph = self.dependency.plan(self.possible_agents, self.round_index, self.history)
        self.round_outputs: dict[str, str] = {}
        self._turn = 0
        self._round_open = True
        self.agent_selection = self.graph.active[0]

    def observe(self, agent: str) -> dict[str, str]:
        text = self.compose_observation(agent)
        if len(text) > self.max_observation_chars:
            # Keep the head (the task) and the tail (the freshest context).
            half = self.max_observation_chars // 2 - 16
            text = text[:half] + "\n[... truncated ...]\n" + text[-half:]
        return {"text": text}

    def state(self) -> dict[str, Any]:
        """The global state: ``{"text": transcript(), "dependency": D_t}``, D_t in the same format
        as ``infos[agent]["dependency"]`` (module docstring, "Dependency format")."""
        return {"text": self.transcript(), "dependency": self.graph.as_dict()}

    def step(self, action: Any) -> None:
        if not self.agents:
            raise RuntimeError(self._no_episode_message())
        agent = self.agent_selection
        if self.terminations[agent] or self.truncations[agent]:
            self._was_dead_step(action)
            return
        text = self._sanitize_action(agent, action)
        self._cumulative_rewards[agent] = 0.0
        self._clear_rewards()
        self.round_outputs[agent] = text
        self.graph = self.dependency.after_action(self.graph, agent, text)
        self._turn += 1
        if self._turn < len(self.graph.active):
            self.agent_selection = self.graph.active[self._turn]
        else:
            self._finish_round()
        self._refresh_infos()
        self._accumulate_rewards()
        self._deads_step_first()

    def _no_episode_message(self, owner: str | None = None) -> str:
        """The one line for a step with no episode running (``owner``: whose ``step`` was called)."""
        owner = owner or type(self).__name__
        if self.task is None:
            return f"{owner}.step() before reset(): call reset() to start an episode"
        return f"{owner}.step(): the episode has ended (every agent is done); call reset() to start a new one"

    def _sanitize_action(self, agent: str, action: Any) -> str:
        if isinstance(action, (bytes, bytearray)):
            raise TypeError(
                f"action for {agent} must be a str (the agent's utterance), got bytes; "
                "decode it first, e.g. action.decode('utf-8', errors='replace')"
            )
        if not isinstance(action, str):
            raise TypeError(
                f"action for {agent} must be a str (the agent's utterance), got {type(action).__name__}"
            )
        self._truncated_flags[agent] = len(action) > self.max_action_chars
        action = action[: self.max_action_chars]
        # Lone surrogates (from broken decoders) cannot be encoded; replace them with "?".
        return action.encode("utf-8", errors="replace").decode("utf-8")

    def _finish_round(self) -> None:
        outcome = self.grade_round(self.task, dict(self.round_outputs), self.round_index)
        if not isinstance(outcome, RoundOutcome):
            raise TypeError(f"{type(self).__name__}.grade_round must return a RoundOutcome, got {type(outcome).__name__}")
        self._last_outcome = outcome
        self.history.append(RoundRecord(self.round_index, self.graph, dict(self.round_outputs), outcome))
        # The round is in ``history`` now; ``round_outputs`` keeps its outputs until the next
        # round begins (observations of a finished episode still show them), but they are no
        # longer the open round's.
        self._round_open = False
        for a in self.agents:
            self.rewards[a] = float(outcome.team_reward)
        if outcome.solved:
            self.terminations = {a: True for a in self.agents}
        elif self.round_index + 1 >= self.horizon:
            self.truncations = {a: True for a in self.agents}
        else:
            self.round_index += 1
            self._begin_round()

    def _refresh_infos(self) -> None:
        dependency = self.graph.as_dict()
        outcome = self._last_outcome
        for a in self.agents:
            role = self.profile.role_of(a)
            info = {
                "role": role.name,
                "system_prompt": role.system_prompt,
                "graded": role.graded,
                "task_id": self.task.task_id,
                "round": self.round_index,
                "turn_order": list(self.graph.active),
                "parents": list(self.graph.parents(a)),
                "acts_this_round": a in self.graph.active,
                "dependency": dependency,
                "action_truncated": self._truncated_flags.get(a, False),
                "agent_reward": float(outcome.agent_rewards.get(a, 0.0)) if outcome else 0.0,
                "messages": self.chat_messages(a),
            }
            if outcome is not None:
                info["last_outcome"] = {
                    "team_reward": float(outcome.team_reward),
                    "solved": bool(outcome.solved),
                    "feedback": outcome.feedback,
                    "info": outcome.info,
                }
            info.update(self.extra_info(a))
            self.infos[a] = info

    def chat_messages(self, agent: str) -> list[dict[str, str]]:
        """``agent``'s turn as chat messages: ``{"role": "system", "content": <its system prompt>}``
        (left out when the prompt is empty), then ``{"role": "user", "content": observe(agent)["text"]}``.

        Exactly what marft's own agents send to the model (``chat_prompt_ids(system_prompt,
        obs["text"])``): the observation already holds the task, earlier rounds and this round's
        parents, so one user turn is the whole conversation as the agent sees it. Also in
        ``infos[agent]["messages"]`` after every step.
        """
        system = self.profile.role_of(agent).system_prompt
        messages = [{"role": "system", "content": system}] if system else []
        messages.append({"role": "user", "content": self.observe(agent)["text"]})
        return messages

    # -- rendering -------------------------------------------------------------------------------
    def transcript(self) -> str:
        """Every utterance and grade of the episode so far, as plain text: each round's utterances
        once, in turn order, then that round's grade line; the round in progress (if any) last,
        without a grade line."""
        if not self.task:
            return ""
        lines = [f"TASK {self.task.task_id}: {self.task.prompt}"]
        records = list(self.history)
        if self._round_open:  # a graded round is in history only: never shown twice
            records.append(RoundRecord(self.round_index, self.graph, self.round_outputs))
        for record in records:
            if record.outcome is None and not record.outputs:
                continue
            for agent, text in record.outputs.items():
                lines.append(f"[round {record.round_index}] {agent}: {text}")
            if record.outcome is not None:
                o = record.outcome
                lines.append(f"[round {record.round_index}] grade: reward={o.team_reward:g} solved={o.solved} {o.feedback}".rstrip())
        return "\n".join(lines)

    def render(self) -> str | None:
        if self.render_mode is None:
            return None
        text = self.transcript()
        if self.render_mode == "human":
            print(text)
            return None
        return text

    def close(self) -> None:
        pass
