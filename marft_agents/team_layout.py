"""Where a team of different models puts each agent and its critic, and the refusals that layout
implies: plain data, no torch.

:func:`team_layout` reads ``models:`` / ``agents:`` / ``critic.model`` and the run plan into a
:class:`TeamLayout`: the models a run uses (each with its agents) and the model whose critic
values each agent (:func:`critic_placement`). It refuses, in one line, what no
:class:`~marft_agents.model.team.TeamPolicy` can be built for: ``critic.model`` with a critic that
reads each agent's own tokens, and a sampling engine that serves one base model per process
(:data:`ONE_MODEL_ENGINES`). It needs no torch, so
:func:`marft_agents.env_check.check_before_loading` calls it before any model loads and
:func:`marft_agents.run.trainer.load_policy` calls it again to build the team.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from marft_agents.config_schema import ConfigError

ONE_MODEL_ENGINES: tuple[str, ...] = ("vllm",)
"""Sampling engines that serve one base model per process: a team of different models refuses them."""


def critic_placement(values: str | None, mode: str | None) -> str:
    """``"one"`` (one critic model values every agent) or ``"each"`` (every model carries its
    agents' critic): ``each`` where the critic reads the acting agent's own tokens (``critic.mode:
    local``, or token-level values)."""
    return "each" if values == "token" or mode == "local" else "one"


def team_critic_name(model: str) -> str:
    """The adapter of the team critic (``centralised`` / ``local``) on ``model`` when every model
    carries one (names are unique in a team; ``critic`` in a one-model run)."""
    return f"critic-{model}"


@dataclass(frozen=True)
class TeamLayout:
    """Which agents run on which model, and whose critic values whom (:func:`team_layout`)."""

    agents_on: dict[str, list[str]]
    """Model name -> the agents on it, for every model the team uses (the config's order)."""
    critic_of: dict[str, str]
    """Agent id -> the model whose critic values its decisions; empty: no critic is built."""

    @property
    def several(self) -> bool:
        return len(self.agents_on) > 1

    def critic_agents(self, model: str) -> list[str]:
        return [a for a, m in self.critic_of.items() if m == model]


def team_layout(cfg: Any, agent_ids: Sequence[str]) -> TeamLayout:
    """Where every agent and the critic run (:func:`critic_placement`): one critic model
    (``critic.model``, default the first agent's) valuing every agent, or, where the critic reads
    the acting agent's own tokens (``critic.mode: local``, token-level values), each model the
    critic of its own agents. Refuses (one line) ``critic.model`` with the latter, and an engine
    that serves one model per process. ``cfg``: a ``TrainConfig``."""
    agent_ids = list(agent_ids)
    on: dict[str, list[str]] = {name: [] for name in cfg.team_models()}
    for agent in agent_ids:
        on[cfg.model_of(agent)].append(agent)
    critic_of: dict[str, str] = {}
    if cfg.plan().builds_critic:
        several = len({m for m, agents in on.items() if agents} | {cfg.critic_model(agent_ids)}) > 1
        if several and critic_placement(cfg.plan().critic_values, cfg.critic.mode) == "each":
            if cfg.critic.model is not None:
                raise ConfigError(f"critic.model {cfg.critic.model!r}: this critic reads the acting agent's own tokens "
                                  "(critic.mode: local, or token-level values), so in a team each model carries the "
                                  "critic of its own agents; remove critic.model")
            critic_of = {a: cfg.model_of(a) for a in agent_ids}
        else:
            critic_of = {a: cfg.critic_model(agent_ids) for a in agent_ids}
    used = {name: agents for name, agents in on.items() if agents or name in critic_of.values()}
    if len(used) > 1 and cfg.sampling.engine in ONE_MODEL_ENGINES:
        raise ConfigError(f"sampling.engine {cfg.sampling.engine!r} serves one base model per process, but the "
                          f"team runs on {len(used)} ({', '.join(used)}); use sampling.engine direct, fast or legacy")
    return TeamLayout(used, critic_of)
