"""A PettingZoo ``ParallelEnv`` view of a marft text env that respects D_t: agents act in waves.

Why not PettingZoo's ``turn_based_aec_to_parallel``
    That conversion hands every agent the observation it had when the parallel step began, so
    in a round of a chain (reasoner -> actor) the actor decides without the reasoner's output of
    that round: D_t is silently dropped. The API still passes ``parallel_api_test``, which is
    why the loss is easy to miss.

What :class:`DependencyParallelEnv` does instead
    Each ``step(actions)`` plays one *wave*: the longest run of the round's remaining turn order
    whose agents' parents (this round's D_t edges) have all acted before the wave. Every wave
    agent's observation therefore already holds its parents' outputs. Independent agents
    (``Dependency.independent()``) form one wave per round; a chain gives one agent per wave;
    a DAG gives its topological layers where the turn order allows. The wrapped AEC env is
    stepped underneath in its own turn order, so rewards, infos and the transcript are exactly
    those of the AEC env.

    ``self.wave`` (and ``infos[agent]["acts_in_wave"]``) says who acts in the next step; actions
    of other live agents are ignored (``parallel_api_test`` sends actions for every live agent),
    a missing action of a wave agent raises ``KeyError`` naming it. Rewards returned by a step are
    the sum of the AEC rewards the wave's steps produced (the team reward arrives with the wave
    that ends a round). If the dependency changes the round's graph in reaction to an action
    (``Dependency.orchestrated``), the wave stops at the first agent that is no longer next and
    that agent acts in the next wave, on the updated graph.

Randomness
    ``np_random`` is the wrapped AEC env's (:attr:`TextTaskEnv.np_random`), for wrappers that
    draw random numbers (SuperSuit's ``frame_skip_v0`` draws its skip counts from
    ``env.unwrapped.np_random``); ``reset(seed=s)`` seeds it. It is separate from the env's
    task order, so drawing from it changes no episode.

PettingZoo's ``aec_to_parallel``
    holds only where every agent acts every round in profile order: the env's
    ``metadata["is_parallelizable"]`` says where (:attr:`TextTaskEnv.dependency`).
    :func:`aec_to_parallel` here is PettingZoo's conversion where it holds and a one-line
    ``ValueError`` naming this view elsewhere (PettingZoo's own refuses with a generic assertion).

Usage::

    par = DependencyParallelEnv(marft_envs.make("marft/Arithmetic-v0", profile="dual"))
    obs, infos = par.reset(seed=0)
    while par.agents:
        actions = {a: policy(a, obs[a]["text"]) for a in par.wave}
        obs, rewards, terminations, truncations, infos = par.step(actions)
"""

from __future__ import annotations

from typing import Any

import numpy as np
from pettingzoo import ParallelEnv

from marft_envs.core.text_env import TextTaskEnv


class DependencyParallelEnv(ParallelEnv):
    """Parallel API over a :class:`~marft_envs.core.text_env.TextTaskEnv`, one D_t wave per step."""

    def __init__(self, env: TextTaskEnv):
        if not isinstance(env, TextTaskEnv):
            raise TypeError(f"DependencyParallelEnv wraps a marft TextTaskEnv (with a per-round "
                            f"dependency graph), got {type(env).__name__}")
        self.aec_env = env
        self.possible_agents = list(env.possible_agents)
        self.metadata = dict(getattr(env, "metadata", {}))
        self.render_mode = getattr(env, "render_mode", None)
        self.agents: list[str] = []
        self.wave: tuple[str, ...] = ()

    @property
    def np_random(self) -> np.random.Generator:
        """The wrapped env's generator (see the module docstring), seeded by ``reset(seed=...)``."""
        return self.aec_env.np_random

    @np_random.setter
    def np_random(self, value: np.random.Generator) -> None:
        self.aec_env.np_random = value

    # -- spaces and passthroughs -----------------------------------------------------------------
    def observation_space(self, agent: str):
        return self.aec_env.observation_space(agent)

    def action_space(self, agent: str):
        return self.aec_env.action_space(agent)

    def state(self):
        return self.aec_env.state()

    def render(self):
        return self.aec_env.render()

    def close(self) -> None:
        self.aec_env.close()

    # -- waves -----------------------------------------------------------------------------------
    def _next_wave(self) -> tuple[str, ...]:
        env = self.aec_env
        if not env.agents or all(env.terminations[a] or env.truncations[a] for a in env.agents):
            return ()
        graph, acted = env.graph, set(env.round_outputs)
        start = list(graph.active).index(env.agent_selection)
        wave: list[str] = []
        for agent in graph.active[start:]:
            if any(p not in acted for p in graph.parents(agent)):
                break
            wave.append(agent)
        return tuple(wave)

    def _views(self) -> tuple[dict, dict]:
        env = self.aec_env
        obs = {a: env.observe(a) for a in self.agents}
        infos = {a: dict(env.infos[a], acts_in_wave=a in self.wave, wave=list(self.wave))
                 for a in self.agents}
        return obs, infos

    # -- ParallelEnv API -------------------------------------------------------------------------
    def reset(self, seed: int | None = None, options: dict | None = None):
        self.aec_env.reset(seed=seed, options=options)
        self.agents = list(self.aec_env.agents)
        self.wave = self._next_wave()
        return self._views()

    def step(self, actions: dict[str, Any]):
        env = self.aec_env
        if not self.agents:
            raise RuntimeError(env._no_episode_message(type(self).__name__))
        missing = [a for a in self.wave if a not in actions]
        if missing:
            raise KeyError(f"no action for {missing}: this step's wave is {list(self.wave)} "
                           "(DependencyParallelEnv.wave); other agents' actions are ignored")
        rewards = {a: 0.0 for a in self.agents}
        for agent in self.wave:
            if env.agent_selection != agent or env.terminations[agent] or env.truncations[agent]:
                break  # the graph changed under the wave; the rest act in the next wave
            env.step(actions[agent])
            for a in self.agents:
                rewards[a] += float(env.rewards.get(a, 0.0))
        terminations = {a: bool(env.terminations[a]) for a in self.agents}
        truncations = {a: bool(env.truncations[a]) for a in self.agents}
        self.wave = self._next_wave()
        obs, infos = self._views()
        self.agents = [a for a in self.agents if not (terminations[a] or truncations[a])]
        return obs, rewards, terminations, truncations, infos


def parallel_env(env: Any) -> DependencyParallelEnv:
    """The D_t-respecting parallel view of a marft env (see :class:`DependencyParallelEnv`)."""
    return DependencyParallelEnv(env)


def aec_to_parallel(env: Any) -> ParallelEnv:
    """PettingZoo's ``aec_to_parallel(env)`` where it holds (``metadata["is_parallelizable"]``:
    every agent acts every round, in profile order); elsewhere a ``ValueError`` naming
    :class:`DependencyParallelEnv`, the view that holds for every D_t."""
    from pettingzoo.utils.conversions import aec_to_parallel as pettingzoo_aec_to_parallel

    if not env.metadata.get("is_parallelizable", False):
        base = getattr(env, "unwrapped", env)
        why = (f"its D_t ({base.dependency!r}) does not have every agent act every round in profile order"
               if isinstance(base, TextTaskEnv) else "its metadata['is_parallelizable'] is not true")
        raise ValueError(f"PettingZoo's aec_to_parallel cannot convert this {type(base).__name__}: {why}; "
                         "use marft_envs.DependencyParallelEnv(env), whose steps are D_t waves")
    return pettingzoo_aec_to_parallel(env)


__all__ = ["DependencyParallelEnv", "aec_to_parallel", "parallel_env"]
