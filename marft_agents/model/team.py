"""A team of different base models: each agent on the model its role needs (``models:``, ``agents:``).

:class:`TeamPolicy` holds one :class:`~marft_agents.model.policy.MultiAgentPolicy` per distinct
base model (its *members*): each loads once, with its own tokenizer, chat template and dtype, and
carries the LoRA adapters of the agents that run on it; the critic's adapter(s) and value
head(s) sit on one member (``critic.model``, default the first agent's model) and read the
global state rendered with that member's tokenizer. Adapter names are unique across the team
(``policy_<agent>``, the critic's), so everything that names an adapter (the learners' micro-batches,
the optimizers, ``adapters.pt``) works unchanged; the team routes each call to the member that
owns the adapter or the agent:

* prompts and tokens of an agent's turn come from its own model (:meth:`TeamPolicy.for_agent`);
  the critic's from :meth:`TeamPolicy.critic_reader` (the member whose critic values that agent);
* ``generate`` splits a batch of requests by model and merges the answers in request order;
  each member has its own sampling engine (``direct``, ``fast``, ``legacy``); vLLM holds one
  model per engine process, so a team refuses it (:data:`ONE_MODEL_ENGINES`);
* reference log-probs (KL terms) run each row on its own agent's base (``adapters=``).

A team with one model is never built: :func:`marft_agents.run.trainer.load_policy` builds the
plain ``MultiAgentPolicy`` then, which keeps the one-model path exactly as it was.

Where the critic sits (:func:`~marft_agents.team_layout.critic_placement`, decided before any model loads):

* **one critic model** (``critic.model``, default the first agent's): an action-level critic
  (MARFT-A's state values) on the global state (``critic.mode: centralised`` or ``per_agent``),
  which the critic's own tokenizer renders; it values every agent's decisions;
* **a critic on every model**: values in the acting agent's own tokens (``critic.mode: local``
  reads the agent's prompt; token-level values, MARFT-T's, value each of its response tokens)
  need that agent's tokenizer, so each model carries the critic of the agents on it (a team
  critic per model, ``critic-<model>``, or ``critic_<agent>`` under ``per_agent``), reading the
  state (or prompt) rendered in its own tokens; ``critic.model`` is then refused.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from typing import Any

import torch
from torch import nn

from marft_agents.config_schema import ConfigError
from marft_agents.engine import GenRequest, Generation
from marft_agents.model.policy import MultiAgentPolicy
from marft_agents.model.scoring import TokenStats, _merge_rows
from marft_agents.settings.sampling import SamplingConfig
from marft_agents.team_layout import (  # noqa: F401 (torch-free: checked before loading)
    ONE_MODEL_ENGINES, critic_placement, team_critic_name)


class TeamEngine:
    """The sampling engines of a team's members as one: ``generate`` splits requests by model,
    ``suspend`` / ``sync`` / ``close`` reach every member's engine."""

    def __init__(self, team: TeamPolicy, name: str) -> None:
        self.team, self.name = team, name
        self.engines = {model: member.engine_for(name) for model, member in team.members.items()}

    @property
    def mixes_adapters(self) -> bool:
        """Whether one call batches several adapters (every member's engine does)."""
        return all(engine.mixes_adapters for engine in self.engines.values())

    def generate(self, requests: Sequence[GenRequest], sampling: SamplingConfig,
                 generator: torch.Generator | None = None) -> list[Generation]:
        by_model: dict[str, list[int]] = {}
        for k, request in enumerate(requests):
            by_model.setdefault(self.team.model_of(request.agent_id), []).append(k)
        out: list[Any] = [None] * len(requests)
        for model in self.team.members:  # a fixed order: the RNG draws are reproducible
            rows = by_model.get(model)
            if rows:
                for k, gen in zip(rows, self.engines[model].generate([requests[k] for k in rows], sampling, generator)):
                    out[k] = gen
        return out

    def sync(self, version: int) -> None:
        for engine in self.engines.values():
            engine.sync(version)

    @contextmanager
    def suspend(self) -> Iterator[None]:
        with ExitStack() as stack:
            for engine in self.engines.values():
                stack.enter_context(engine.suspend())
            yield

    def close(self) -> None:
        for member in self.team.members.values():
            member.close_engine()


class TeamPolicy(nn.Module):
    """Agents on different base models: one ``MultiAgentPolicy`` per model, one interface."""

    shared_adapter = False
    """Every agent has its own adapter in a team of different models."""

    def __init__(self, members: dict[str, MultiAgentPolicy], model_of: dict[str, str],
                 critic_models: dict[str, str] | None = None) -> None:
        """``members``: model name -> the policy of the agents on that model (with the critic
        adapters it carries); ``model_of``: agent id -> model name, in the team's order;
        ``critic_models``: agent id -> the member whose critic values that agent's decisions
        (None or empty: no critic; :func:`critic_placement`)."""
        super().__init__()
        self.members = nn.ModuleDict(members)
        self.agent_ids = list(model_of)
        self._model_of = dict(model_of)
        self._critic_of = dict(critic_models or {})
        self._owner = {adapter: name for name, member in members.items() for adapter in member.adapter_names}
        clash = [a for a in self._owner if sum(a in m.adapter_names for m in members.values()) > 1]
        if clash:
            raise ValueError(f"adapters {clash} exist on several models; adapter names must be unique in a team")
        self.engine_settings: Any = None
        self.weights_version = 0
        self._engine: TeamEngine | None = None

    # ------------------------------------------------------------------ structure

    def model_of(self, agent_id: str) -> str:
        """The name of the model ``agent_id`` runs on."""
        try:
            return self._model_of[agent_id]
        except KeyError:
            raise KeyError(f"unknown agent {agent_id!r}; this policy serves {self.agent_ids}") from None

    def for_agent(self, agent_id: str) -> MultiAgentPolicy:
        """The member ``agent_id`` runs on: its prompts, tokens and adapter."""
        return self.members[self.model_of(agent_id)]

    def critic_reader(self, agent_id: str) -> MultiAgentPolicy:
        """The member whose critic values ``agent_id``'s decisions (its tokenizer renders their
        global state)."""
        self.model_of(agent_id)
        if not self._critic_of:
            raise RuntimeError("this policy was built with critic=None: no value function")
        return self.members[self._critic_of[agent_id]]

    @property
    def _critic_members(self) -> list[MultiAgentPolicy]:
        return [self.members[name] for name in dict.fromkeys(self._critic_of.values())]

    def member_of_adapter(self, adapter: str) -> MultiAgentPolicy:
        try:
            return self.members[self._owner[adapter]]
        except KeyError:
            raise KeyError(f"unknown adapter {adapter!r}; adapters: {self.adapter_names}") from None

    @property
    def policy_adapters(self) -> list[str]:
        return [self.adapter_for(a) for a in self.agent_ids]

    @property
    def critic_adapters(self) -> list[str]:
        return [name for member in self._critic_members for name in member.critic_adapters]

    @property
    def adapter_names(self) -> list[str]:
        return self.policy_adapters + self.critic_adapters

    def adapter_for(self, agent_id: str) -> str:
        return self.for_agent(agent_id).adapter_for(agent_id)

    def critic_for(self, agent_id: str | None = None) -> str:
        if agent_id is None:
            if len(self.critic_adapters) != 1:
                raise ValueError(f"this team has critics {self.critic_adapters}: pass agent_id to choose whose value")
            return self.critic_adapters[0]
        return self.critic_reader(agent_id).critic_for(agent_id)

    @property
    def critic_config(self) -> Any:
        return self._critic_members[0].critic_config if self._critic_of else None

    @property
    def value_heads(self) -> dict[str, nn.Module]:
        """Every critic's value head by critic adapter (a view: the heads live in their members)."""
        return {name: head for member in self._critic_members for name, head in member.value_heads.items()}

    @property
    def scoring(self) -> _TeamScoring:
        """The value passes, each on the member whose critic values the agent it names (log-probs
        go through :meth:`token_logprobs`)."""
        return _TeamScoring(self)

    @property
    def device(self) -> torch.device:
        """The first agent's model's device."""
        return self.for_agent(self.agent_ids[0]).device

    @property
    def checkpointed_layers(self) -> int:
        return sum(member.checkpointed_layers for member in self.members.values())

    def enable_gradient_checkpointing(self) -> int:
        return sum(member.enable_gradient_checkpointing() for member in self.members.values())

    def describe(self) -> list[str]:
        """One line per model: its name, class, dtype, device and the agents (and critic) on it."""
        lines = []
        for name, member in self.members.items():
            agents = [a for a in self.agent_ids if self._model_of[a] == name]
            critics = [c for c in self.critic_adapters if self.member_of_adapter(c) is member]
            extra = f" + critic {', '.join(critics)}" if critics else ""
            lm = member.lm
            lines.append(f"model {name!r} ({getattr(lm.config, 'name_or_path', '') or type(lm).__name__}, "
                         f"{str(lm.dtype).removeprefix('torch.')} on {member.device}): "
                         f"{', '.join(agents) or 'no agent'}{extra}")
        return lines

    # ------------------------------------------------------------------ training state

    def set_trainable(self, agent_ids: set[str] | None, critic: bool) -> None:
        for name, member in self.members.items():
            mine = None if agent_ids is None else {a for a in agent_ids if self.model_of(a) == name}
            if agent_ids is None and not member.agent_ids:
                mine = set()
            member.set_trainable(mine, critic=critic and bool(member.critic_adapters))

    def adapter_parameters(self, name: str) -> list[nn.Parameter]:
        return self.member_of_adapter(name).adapter_parameters(name)

    def trainable_parameters(self) -> list[nn.Parameter]:
        return [p for member in self.members.values() for p in member.trainable_parameters()]

    @contextmanager
    def using(self, adapter: str | None) -> Iterator[None]:
        if adapter is None:
            raise ValueError("a team of different models has no single base model; use each member's using(None)")
        with self.member_of_adapter(adapter).using(adapter):
            yield

    def adapter_state_dict(self) -> dict[str, torch.Tensor]:
        """Every member's adapters and value heads in one flat dict (names are unique in a team)."""
        state: dict[str, torch.Tensor] = {}
        for member in self.members.values():
            state.update(member.adapter_state_dict())
        return state

    def peft_files(self) -> dict[str, bytes]:
        """Each member's policy adapters as peft folders under ``models/<model name>/``: one
        folder per model (:meth:`MultiAgentPolicy.peft_files`)."""
        files: dict[str, bytes] = {}
        for name, member in self.members.items():
            files.update(member.peft_files(name))
        return files

    def load_adapter_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        """Load what :meth:`adapter_state_dict` produced, each key into the member owning its adapter."""
        parts: dict[str, dict[str, torch.Tensor]] = {name: {} for name in self.members}
        stray = []
        for key, value in state.items():
            adapter = key.split("/", 2)[1] if key.count("/") >= 2 else None
            if adapter not in self._owner:
                stray.append(key)
                continue
            parts[self._owner[adapter]][key] = value
        if stray:
            raise KeyError(f"state dict has keys for unknown adapters: {stray[:5]}; this policy has adapters "
                           f"{self.adapter_names}")
        for name, member in self.members.items():
            member.load_adapter_state_dict(parts[name])

    # ------------------------------------------------------------------ sampling

    def engine_for(self, name: str) -> TeamEngine:
        if name in ONE_MODEL_ENGINES:
            raise ConfigError(f"sampling.engine {name!r} serves one base model per process, but this team runs "
                              f"{len(self.members)} ({', '.join(self.members)}); use sampling.engine direct, fast or legacy")
        if self._engine is None or self._engine.name != name:
            self.close_engine()
            self._engine = TeamEngine(self, name)
        return self._engine

    @property
    def engine(self) -> TeamEngine:
        if self._engine is not None:
            return self._engine
        sampling = getattr(self.engine_settings, "sampling", None) or SamplingConfig()
        return self.engine_for(sampling.engine)

    def sync_engine(self, version: int) -> None:
        self.weights_version = version
        for member in self.members.values():
            member.sync_engine(version)

    def close_engine(self) -> None:
        engine, self._engine = self._engine, None
        if engine is not None:
            engine.close()

    def __enter__(self) -> TeamPolicy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close_engine()

    def generate(self, requests: Sequence[GenRequest], sampling: SamplingConfig | None = None,
                 generator: torch.Generator | None = None) -> list[Generation]:
        sampling = sampling or SamplingConfig()
        return self.engine_for(sampling.engine).generate(requests, sampling, generator)

    # ------------------------------------------------------------------ scoring

    def token_logprobs(self, adapter: str, prompt_ids: Sequence[Sequence[int]],
                       response_ids: Sequence[Sequence[int]], temperature: float = 1.0,
                       with_entropy: bool = True, prefix_lens: Sequence[int] | None = None) -> TokenStats:
        return self.member_of_adapter(adapter).token_logprobs(adapter, prompt_ids, response_ids, temperature,
                                                              with_entropy, prefix_lens)

    def reference_logprobs(self, prompt_ids: Sequence[Sequence[int]], response_ids: Sequence[Sequence[int]],
                           temperature: float = 1.0, with_entropy: bool = False,
                           prefix_lens: Sequence[int] | None = None,
                           adapters: Sequence[str] | None = None) -> TokenStats:
        """Each row's log-probs under its own agent's base model (``adapters``: each row's adapter),
        merged in row order: ``[B, max T]``, right-padded with 0 / False."""
        if adapters is None or len(adapters) != len(prompt_ids):
            raise ValueError("a team of different models scores reference log-probs per row on that row's base: "
                             "pass adapters= (one per row)")
        rows: dict[str, list[int]] = {}
        for b, adapter in enumerate(adapters):
            rows.setdefault(self._owner[adapter], []).append(b)
        parts = []
        for name, idx in rows.items():
            stats = self.members[name].reference_logprobs(
                [prompt_ids[b] for b in idx], [response_ids[b] for b in idx], temperature, with_entropy,
                None if prefix_lens is None else [prefix_lens[b] for b in idx])
            parts.append((idx, stats))
        return TokenStats(logprobs=_merge_rows([(idx, s.logprobs) for idx, s in parts]),
                          entropy=None if not with_entropy else _merge_rows([(idx, s.entropy) for idx, s in parts]),
                          mask=_merge_rows([(idx, s.mask) for idx, s in parts]))

    def _valuer(self, agent_id: str | None, actors: Sequence[str] | None) -> MultiAgentPolicy:
        """The one member whose critic values every row (``actors``, else ``agent_id``)."""
        named = set(actors) if actors is not None else {agent_id} if agent_id is not None else set()
        found = {id(self.critic_reader(a)): self.critic_reader(a) for a in named}
        if len(found) > 1:
            raise ValueError("these rows are valued by critics on different models: value each model's rows apart")
        return next(iter(found.values())) if found else self._critic_members[0]

    def token_values(self, prompt_ids: Sequence[Sequence[int]], response_ids: Sequence[Sequence[int]],
                     agent_id: str | None = None, include_final: bool = False,
                     prefix_lens: Sequence[int] | None = None, actors: Sequence[str] | None = None) -> torch.Tensor:
        return self._valuer(agent_id, actors).token_values(prompt_ids, response_ids, agent_id, include_final,
                                                           prefix_lens, actors)

    def state_values(self, prompt_ids: Sequence[Sequence[int]], agent_id: str | None = None,
                     prefix_lens: Sequence[int] | None = None, actors: Sequence[str] | None = None) -> torch.Tensor:
        return self._valuer(agent_id, actors).state_values(prompt_ids, agent_id, prefix_lens, actors)

    def value_slots(self, actors: Sequence[str] | None, agent_id: str | None, rows: int) -> list[int]:
        return self._valuer(agent_id, actors).value_slots(actors, agent_id, rows)

    def value_rows(self, seqs: Sequence[Sequence[int]]) -> tuple[list[int], list[tuple[int, int]]]:
        return self._critic_members[0].value_rows(seqs)  # sequence structure only: any member's rule


class _TeamScoring:
    """The scorer's value passes a learner calls (``ValueFit``), routed to the member whose
    critic values the agent each call names."""

    def __init__(self, team: TeamPolicy) -> None:
        self.team = team

    def token_values_with_reads(self, prompt_ids: Any, response_ids: Any, agent_id: str | None = None,
                                **kwargs: Any) -> Any:
        return self.team._valuer(agent_id, None).scoring.token_values_with_reads(prompt_ids, response_ids, agent_id,
                                                                                 **kwargs)

    def state_values_with_reads(self, prompt_ids: Any, agent_id: str | None = None, **kwargs: Any) -> Any:
        return self.team._valuer(agent_id, None).scoring.state_values_with_reads(prompt_ids, agent_id, **kwargs)


def team_of(policy: Any) -> dict[str, MultiAgentPolicy]:
    """Every base model's policy by model name: a team's members, or the one policy as ``default``."""
    from marft_agents.settings.team import DEFAULT_MODEL_NAME

    return dict(policy.members) if isinstance(policy, TeamPolicy) else {DEFAULT_MODEL_NAME: policy}
