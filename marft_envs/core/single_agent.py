"""A Gymnasium single-agent view of a one-agent env: ``marft_envs.single_agent(env)``.

Why
    A one-role profile (``solo``, ``coder``, ``shopper``) makes a marft env a single-agent task,
    but PettingZoo's AEC API is not what single-agent tooling takes: Gymnasium's ``check_env``,
    its wrappers and single-agent RL libraries want a ``gymnasium.Env``. :class:`SingleAgentEnv`
    is that env, over any AEC env with exactly one agent; a team is refused in one line (it is
    not a single-agent task: use the AEC env, or the parallel view
    :class:`~marft_envs.core.parallel.DependencyParallelEnv`).

What it returns (nothing is changed: these are the AEC env's own)
    ``reset(seed=, options=)`` -> ``(obs, info)``; ``step(text)`` -> ``(obs, reward, terminated,
    truncated, info)`` with ``obs`` the agent's observation (``{"text": str}``, the AEC env's
    space), ``reward`` what ``env.last()`` reports after the step (for a marft env, the team
    reward of the round that step finished), ``terminated`` / ``truncated`` the agent's flags
    (solved / out of rounds) and ``info`` a copy of ``env.infos[agent]`` (``system_prompt``,
    ``messages`` ...). A step after the episode ended raises a one-line ``RuntimeError``.
    ``reset(seed=s)`` seeds the env's task order and, as Gymnasium asks, ``np_random``.
"""

from __future__ import annotations

import copy
from typing import Any

import gymnasium
from pettingzoo import AECEnv


class SingleAgentEnv(gymnasium.Env):
    """``gymnasium.Env`` over an AEC env with exactly one agent; see the module docstring."""

    def __init__(self, env: AECEnv):
        if not isinstance(getattr(env, "unwrapped", env), AECEnv):
            raise TypeError(f"SingleAgentEnv wraps a PettingZoo AEC env (marft_envs.make(...)), got {type(env).__name__}")
        agents = list(env.possible_agents)
        if len(agents) != 1:
            raise ValueError(_team_message(env, agents))
        self.env = env
        self.agent = agents[0]
        self.observation_space = env.observation_space(self.agent)
        self.action_space = env.action_space(self.agent)
        self.metadata = {"render_modes": list(env.metadata.get("render_modes", [])),
                         "name": env.metadata.get("name", type(env).__name__)}
        self.render_mode = getattr(env, "render_mode", None)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        super().reset(seed=seed)
        self.env.reset(seed=seed, options=options)
        obs, _reward, _terminated, _truncated, info = self.env.last()
        return obs, copy.deepcopy(info)

    def step(self, action: str) -> tuple[dict, float, bool, bool, dict]:
        env = self.env
        if not getattr(env, "agents", None) or env.terminations.get(self.agent, True) or env.truncations.get(self.agent, True):
            raise RuntimeError("SingleAgentEnv.step(): the episode has ended (or never began); call reset() "
                               "to start a new one")
        env.step(action)
        obs, reward, terminated, truncated, info = env.last()
        return obs, float(reward), bool(terminated), bool(truncated), copy.deepcopy(info)

    def render(self) -> Any:
        return self.env.render()

    def close(self) -> None:
        self.env.close()


def _team_message(env: AECEnv, agents: list[str]) -> str:
    """One line: this env is a team, and which profiles would make it a single agent."""
    from marft_envs.core.roles import available_profiles

    profile = getattr(getattr(env, "unwrapped", env), "profile", None)
    what = f"{type(env).__name__}" + (f" with profile {profile.name!r}" if profile is not None else "")
    hint = ""
    if profile is not None:
        solo = [name for name in available_profiles() if len(_agent_ids(name)) == 1]
        hint = f"; make it with a one-agent profile ({', '.join(solo)}), e.g. profile='solo'"
    return (f"a single-agent (Gymnasium) view needs a one-agent env, but {what} has {len(agents)} agents "
            f"({', '.join(agents)}){hint}")


def _agent_ids(profile_name: str) -> tuple[str, ...]:
    from marft_envs.core.roles import load_profile

    try:
        return tuple(load_profile(profile_name).agent_ids)
    except Exception:  # noqa: BLE001 - a broken plugin profile is simply not suggested
        return ()


def single_agent(env: AECEnv | str, **kwargs: Any) -> SingleAgentEnv:
    """The Gymnasium view of ``env``, or of ``marft_envs.make(env, **kwargs)`` when given an id::

        gym_env = marft_envs.single_agent("marft/Arithmetic-v0", level=1, profile="solo")
        obs, info = gym_env.reset(seed=0)
        obs, reward, terminated, truncated, info = gym_env.step("\\\\boxed{5}")
    """
    if isinstance(env, str):
        from marft_envs.registry import make

        env = make(env, **kwargs)
    elif kwargs:
        raise TypeError(f"single_agent takes keyword arguments only with an env id, got {sorted(kwargs)}")
    return SingleAgentEnv(env)


__all__ = ["SingleAgentEnv", "single_agent"]
