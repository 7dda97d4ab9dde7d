"""Training configuration: dataclasses declared once, loadable from YAML with clear errors.

``load_config("run.yaml")`` (or ``config_from_dict(data)``) builds a :class:`TrainConfig`.
Sections not given keep their defaults. Validation is strict, because a typo in a YAML key
silently ignored means an experiment that did not run what its author thinks:

* an unknown key raises ``ConfigError`` naming it and listing the valid keys of its section;
* a value of the wrong type raises ``ConfigError`` saying which type was expected;
* cross-field checks (``TrainConfig.validate``) explain how to fix the combination.

Plain data: this module holds the run-level sections (``env``, ``ppo``, ``schedule``, ``eval``);
the model-side ones (``model``, ``lora``, ``critic``, ``sampling``) and GRPO's options are in
:mod:`marft_agents.settings`. Loading and validating a config imports no torch, transformers or
peft, so every mistake in a config answers at once: the learner's capabilities come from the
registry's declarations (``marft_agents/learners/registry.py``) without importing the learner.
Only :meth:`TrainConfig.resolve_hardware`, called where the model is about to load, probes the
device (torch) to replace ``model.device`` / ``model.dtype`` "auto" by what they stand for.

Example::

    algorithm: mappo_action
    env: {id: marft/Arithmetic-v0, kwargs: {level: 1, profile: dual}, num_envs: 8}
    model: {name_or_path: smollm2-135m-instruct, dtype: auto}
    sampling: {max_new_tokens: 128, temperature: 1.0}
    ppo: {gamma: 1.0, lam: 0.95, clip_eps: 0.2, credit: team}
    schedule: {num_updates: 50, episodes_per_update: 32, minibatch_size: 8}
"""

from __future__ import annotations

import dataclasses
import difflib
import re
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import yaml

from marft_agents.config_schema import ConfigError, build_dataclass, field_docs, join_key, type_name
from marft_agents.learners.registry import Capabilities, UnknownLearnerError, learner_capabilities
from marft_agents.run_plan import (GroupSetting, LearnerTraits, RescoringSetting, ResolvedHardware, RunPlan, WhoTrains,
                                   resolve_plan)
from marft_agents.settings.advantage import AdvantageConfig
from marft_agents.settings.credit import CREDIT_STRATEGIES, CreditStrategy
from marft_agents.settings.critic import CriticConfig
from marft_agents.settings.env import EnvConfig
from marft_agents.settings.eval import EvalConfig
from marft_agents.settings.lora import LoraSpec
from marft_agents.settings.model import (  # noqa: F401 (AUTO_DTYPE: re-exported, baselines/grid.py)
    AUTO_DEVICE,
    AUTO_DTYPE,
    DTYPE_NAMES,
    ModelConfig,
    alias_typo,
    attn_implementation_error,
)
from marft_agents.settings.ppo import PPOConfig
from marft_agents.settings.sampling import SamplingConfig
from marft_agents.settings.schedule import ScheduleConfig
from marft_agents.settings.team import DEFAULT_MODEL_NAME, AgentSpec
from marft_agents.settings.vllm import VLLMConfig

__all__ = ["CREDIT_STRATEGIES", "ConfigError", "CreditStrategy", "EnvConfig", "EvalConfig", "PPOConfig",
           "ScheduleConfig", "TrainConfig", "build_dataclass", "config_from_dict", "config_to_dict", "describe_config",
           "field_docs", "load_config"]

_DEVICE_PATTERN = re.compile(r"(?!gpu\b)[a-z_]+(:[0-9]+)?")
"""The shape of a torch device string: a type, optionally ``:index`` ("gpu" is no torch device)."""
_COMMON_DEVICES = ("cpu", "cuda", "mps", "xpu")

# Common shorthands of dtype names, for the "did you mean" of a dtype error (not accepted as is:
# a config says what it runs in one spelling).
_DTYPE_SHORTHANDS = {"bf16": "bfloat16", "fp16": "float16", "f16": "float16", "half": "float16",
                     "fp32": "float32", "f32": "float32", "float": "float32"}

@dataclass
class TrainConfig:
    """Everything a training run needs; ``load_config`` builds it from YAML."""

    algorithm: str = "mappo_action"
    """The learner, by registered name: ``marft_agents.list_learners()`` lists them, the shipped
    ones are ``BUILTIN_LEARNERS`` in ``marft_agents/learners/registry.py``, and plugins add theirs
    by entry point (``marft_agents/ADDING_A_LEARNER.md``)."""
    learner: Any = None
    """Options of the chosen learner, a mapping checked against its ``options_class`` (e.g.
    ``learner: {group_size: 4}``); after loading, an instance of that class (None when the
    learner declares no options). PPO-family settings stay in ``ppo``."""
    env: EnvConfig = field(default_factory=EnvConfig)
    """The environment."""
    model: ModelConfig = field(default_factory=ModelConfig)
    """The base model of every agent not placed on another (``default`` among the team's models)."""
    models: dict[str, ModelConfig] = field(default_factory=dict)
    """Further base models by name, each a ``model:`` section: a team of different models
    (:mod:`marft_agents.settings.team`). Empty: every agent on ``model``."""
    agents: dict[str, AgentSpec] = field(default_factory=dict)
    """Per agent id: the model it runs on (a name in ``models``, or ``default``), ``trainable:
    false`` for a frozen teammate (its base model, or a fixed ``adapter``), its own ``actor_lr``
    and ``lora`` settings. Agents not named keep the defaults."""
    lora: LoraSpec = field(default_factory=LoraSpec)
    """LoRA adapters of the agents."""
    critic: CriticConfig | None = field(default_factory=CriticConfig)
    """The critic: its own adapter and value head on the shared base; ``critic.mode`` chooses
    what it reads and how many there are (``centralised``, ``per_agent`` or ``local``). Built only
    for learners that use values (``value_mode``); ``null`` is accepted only by those that do not."""
    advantage: AdvantageConfig = field(default_factory=AdvantageConfig)
    """The MAPPO learners' baseline: ``critic``, ``group`` or ``group_critic``."""
    shared_adapter: bool = False
    """One policy adapter for all agents instead of one per agent."""
    init_adapters: str | None = None
    """Start from another run's adapters and value heads instead of fresh ones: a checkpoint folder
    (with ``adapters.pt``), an ``adapters.pt`` file, or a run folder (its latest checkpoint).
    Optimizer states, counters and the task stream start fresh, so a run can continue training
    on another task or level (a curriculum). The adapters must match this config's (same agents,
    ``shared_adapter``, LoRA rank and targets, critic); ``--resume`` loads the run's own checkpoint
    over them."""
    scripted_seats: dict[str, str] = field(default_factory=dict)
    """Agents played by a scripted policy instead of the model: agent id -> ``"module:function"``
    (``function(agent, observation, info) -> str``, as ``marft score --policy scripted:...``).
    A scripted seat's utterances are not sampled and never trained on (``ppo.train_agents``
    defaults to the other agents), in training and in every evaluation of the run: a role
    trained alone against a scripted partner (e.g. the Relay oracle,
    ``marft_envs.tasks.scripted_teams:relay_oracle_seat``)."""
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    """Generation settings for rollouts (their temperature is also used in the loss)."""
    vllm: VLLMConfig = field(default_factory=VLLMConfig)
    """Options of the vLLM sampling engine (read only with ``sampling.engine: vllm``)."""
    ppo: PPOConfig = field(default_factory=PPOConfig)
    """PPO hyperparameters."""
    schedule: ScheduleConfig = field(default_factory=ScheduleConfig)
    """Updates, batch sizes, learning rates, checkpoints."""
    eval: EvalConfig = field(default_factory=EvalConfig)
    """Evaluation settings."""
    seed: int = 0
    """Seeds python, numpy, torch and the task order."""
    output_dir: str = "runs/default"
    """Where checkpoints (and the lead's logs) go."""

    _team_hardware = None  # not a field: {model name: (its settings, ResolvedHardware)} of ``models``
    _hardware = None  # not a field (config.yaml holds model.*): (the model settings it was decided for, ResolvedHardware)

    def _check_scripted_seats(self) -> None:
        seats, chosen = self.scripted_seats, self.ppo.train_agents
        if not isinstance(seats, dict) or not all(isinstance(k, str) and isinstance(v, str) and ":" in v
                                                  for k, v in seats.items()):
            raise ConfigError(f"scripted_seats must map agent ids to 'module:function' strings, got {seats!r}")
        if seats and self.shared_adapter:
            raise ConfigError("scripted_seats needs one adapter per agent (the seats not scripted train); set "
                              "shared_adapter: false")
        if chosen is not None and set(chosen) & set(seats):
            raise ConfigError(f"ppo.train_agents names scripted seats {sorted(set(chosen) & set(seats))}: a "
                              "scripted seat's utterances are not sampled and cannot be trained on")

    def validate(self) -> TrainConfig:
        """Cross-field checks; returns self. Plain data: reads the learner's capabilities from the
        registry without importing the learner, and loads no torch (``model.device`` and
        ``model.dtype`` "auto" stay "auto" until :meth:`resolve_hardware`). The steps: the learner
        and its options, the run plan (:meth:`plan`), counts and sizes, PPO's ranges, who trains,
        learning rates, the model, what training needs of the sampling, plain data."""
        capabilities = self._check_learner()
        self.advantage.baseline = self.plan().baseline  # a validated config holds the baseline "auto" chose
        self._check_counts()
        self._check_ppo_ranges()
        self._check_who_trains()
        self._check_learning_rates()
        self._check_model()
        self._check_team()
        if capabilities.trains:
            self._check_training_policy()
        if self.sampling.temperature <= 0:
            raise ConfigError(f"sampling.temperature must be > 0 (it scales the logits in the loss), "
                              f"got {self.sampling.temperature}; use do_sample: false for greedy decoding")
        for where, kwargs in (("env.kwargs", self.env.kwargs), ("eval.env_kwargs", self.eval.env_kwargs)):
            _require_plain_data(kwargs, where)
        return self

    def _check_counts(self) -> None:
        """Sizes and counts of the schedule, the envs and the evaluation: >= 1 (or >= 0 where 0
        means off), budgets included."""
        s = self.schedule
        positive = {"schedule.num_updates": s.num_updates, "schedule.episodes_per_update": s.episodes_per_update,
                    "schedule.ppo_epochs": s.ppo_epochs, "schedule.minibatch_size": s.minibatch_size,
                    "env.num_envs": self.env.num_envs, "schedule.keep_checkpoints": s.keep_checkpoints,
                    "eval.num_envs": self.eval.num_envs}
        for name, value in positive.items():
            if value < 1:
                raise ConfigError(f"{name} must be >= 1, got {value}")
        s.check_budgets()
        if s.critic_epochs is not None and s.critic_epochs < 1:
            raise ConfigError(f"schedule.critic_epochs must be >= 1 or null (= ppo_epochs), got {s.critic_epochs}")
        if s.micro_batch_size is not None and s.micro_batch_size < 1:
            raise ConfigError(f"schedule.micro_batch_size must be >= 1 or null, got {s.micro_batch_size}")
        if s.max_tokens_per_micro_batch is not None and s.max_tokens_per_micro_batch < 1:
            raise ConfigError(f"schedule.max_tokens_per_micro_batch must be >= 1 or null (no cap), "
                              f"got {s.max_tokens_per_micro_batch}")
        for name in ("checkpoint_interval",):
            if getattr(s, name) < 0:
                raise ConfigError(f"schedule.{name} must be >= 0, got {getattr(s, name)}")
        if self.model.threads < 0:
            raise ConfigError(f"model.threads must be >= 0 (0 = torch's default, one per core), "
                              f"got {self.model.threads}")
        if self.eval.interval < 0 or self.eval.n_problems < 1:
            raise ConfigError("eval.interval must be >= 0 and eval.n_problems >= 1")
        if self.eval.samples_per_problem < 1 or (self.eval.samples_per_problem > 1 and self.eval.greedy):
            raise ConfigError(f"eval.samples_per_problem must be >= 1, and > 1 only with eval.greedy: false "
                              f"(greedy decoding plays the same answer each time), got "
                              f"{self.eval.samples_per_problem} with greedy {self.eval.greedy}")

    def _check_ppo_ranges(self) -> None:
        """PPO's discounts in [0, 1], clip ranges > 0, interval and warm-up >= 0."""
        p = self.ppo
        for name in ("gamma", "lam", "gamma_token", "lam_token"):
            if not 0.0 <= getattr(p, name) <= 1.0:
                raise ConfigError(f"ppo.{name} must be in [0, 1], got {getattr(p, name)}")
        if p.clip_eps <= 0 or (p.clip_eps_high is not None and p.clip_eps_high <= 0):
            raise ConfigError("ppo.clip_eps (and clip_eps_high) must be > 0")
        if p.agent_iteration_interval < 0 or p.critic_warmup_updates < 0:
            raise ConfigError("ppo.agent_iteration_interval and ppo.critic_warmup_updates must be >= 0")

    def _check_who_trains(self) -> None:
        """``ppo.train_agents``, ``scripted_seats`` and agent-by-agent training: each needs one
        adapter per agent."""
        p = self.ppo
        if p.train_agents is not None and (not p.train_agents or len(set(p.train_agents)) != len(p.train_agents)):
            raise ConfigError(f"ppo.train_agents must be a non-empty list of distinct agent ids or null (all), "
                              f"got {p.train_agents}")
        if p.train_agents is not None and self.shared_adapter:
            raise ConfigError("ppo.train_agents needs one adapter per agent (with one shared adapter the others "
                              "would change too); set shared_adapter: false or train_agents: null")
        self._check_scripted_seats()
        if p.agent_iteration_interval > 0 and self.shared_adapter:
            raise ConfigError(
                "ppo.agent_iteration_interval > 0 (agent-by-agent training) needs one adapter per agent; "
                "set shared_adapter: false or agent_iteration_interval: 0"
            )

    def _check_learning_rates(self) -> None:
        """Learning rates >= 0 (0 freezes), weight decay >= 0."""
        s = self.schedule
        if s.value_head_lr is not None and not s.value_head_lr >= 0:
            raise ConfigError(f"schedule.value_head_lr must be >= 0 or null (= critic_lr), got {s.value_head_lr}")
        for name in ("actor_lr", "critic_lr"):
            if not getattr(s, name) >= 0:  # also rejects NaN; 0 freezes (tests use it)
                raise ConfigError(f"schedule.{name} must be >= 0, got {getattr(s, name)} (e.g. 5e-5)")
        if s.weight_decay < 0:
            raise ConfigError(f"schedule.weight_decay must be >= 0, got {s.weight_decay}")

    def _check_model(self) -> None:
        """``model``: a known alias (or a folder / Hub id), a device string, an attention
        implementation and a dtype name (with a "did you mean" for shorthands)."""
        typo_of = alias_typo(self.model.name_or_path)
        if typo_of:
            raise ConfigError(f"model.name_or_path {self.model.name_or_path!r} is no model alias, folder or Hub id; "
                              f"did you mean {typo_of!r}?")
        self._check_model_device()
        attn_error = attn_implementation_error(self.model.attn_implementation)
        if attn_error:
            raise ConfigError(attn_error)
        if self.model.dtype not in DTYPE_NAMES:
            close = ([_DTYPE_SHORTHANDS[self.model.dtype.lower()]] if self.model.dtype.lower() in _DTYPE_SHORTHANDS
                     else difflib.get_close_matches(self.model.dtype, DTYPE_NAMES, n=1, cutoff=0.5))
            raise ConfigError(f"model.dtype must be one of {', '.join(DTYPE_NAMES)}, got {self.model.dtype!r}"
                              + (f"; did you mean {close[0]!r}?" if close else ""))

    # -- teams of different models (settings/team.py) ------------------------------------------
    def team_models(self) -> dict[str, ModelConfig]:
        """Every base model of the team by name: ``default`` (``model``) first, then ``models``."""
        return {DEFAULT_MODEL_NAME: self.model, **self.models}

    def agent_spec(self, agent_id: str) -> AgentSpec:
        """``agents[agent_id]``, or the defaults (the default model, trained, the run's settings)."""
        return self.agents.get(agent_id) or AgentSpec()

    def model_of(self, agent_id: str) -> str:
        """The name of the model ``agent_id`` runs on."""
        return self.agent_spec(agent_id).model

    def lora_of(self, agent_id: str) -> LoraSpec:
        """``agent_id``'s LoRA settings: the ``lora`` section with ``agents.<id>.lora`` over it."""
        overrides = self.agent_spec(agent_id).lora
        if not overrides:
            return self.lora
        return build_dataclass(LoraSpec, {**dataclasses.asdict(self.lora), **overrides}, f"agents.{agent_id}.lora")

    def agent_models(self, agent_ids: typing.Sequence[str]) -> dict[str, str]:
        """What a record names of a team: agent id -> its model's name or path, ``(frozen)`` after a
        frozen teammate's; empty when every agent runs on ``model`` and trains (the one-model run)."""
        if not self.models and not self.agents:
            return {}
        models = self.team_models()
        return {a: models[self.model_of(a)].name_or_path + ("" if self.agent_spec(a).trainable else " (frozen)")
                for a in agent_ids}

    def actor_lr_of(self, agent_id: str) -> float:
        """``agent_id``'s policy learning rate: ``agents.<id>.actor_lr``, else ``schedule.actor_lr``."""
        own = self.agent_spec(agent_id).actor_lr
        return self.schedule.actor_lr if own is None else own

    @property
    def frozen_agents(self) -> tuple[str, ...]:
        """The agents given ``trainable: false`` (in the order the config names them)."""
        return tuple(a for a, spec in self.agents.items() if not spec.trainable)

    def critic_model(self, agent_ids: typing.Sequence[str]) -> str:
        """The model the critic runs on: ``critic.model``, else the first agent's."""
        named = self.critic.model if self.critic is not None else None
        return named or self.model_of(agent_ids[0])

    def uses_several_models(self, agent_ids: typing.Sequence[str]) -> bool:
        """Whether the agents (and the critic) run on more than one base model."""
        used = {self.model_of(a) for a in agent_ids}
        if self.critic is not None and self.plan().builds_critic:
            used.add(self.critic_model(agent_ids))
        return len(used) > 1

    def _check_team(self) -> None:
        """``models`` and ``agents``: model names known and usable as folder names, a frozen agent
        given no learner option, per-agent settings only where each agent has its own adapter."""
        known = list(self.team_models())
        for name, model in self.models.items():
            if name == DEFAULT_MODEL_NAME or not re.fullmatch(r"[A-Za-z0-9_\-]+", name):
                raise ConfigError(f"models: {name!r} cannot name a model (letters, digits, '_' and '-', and not "
                                  f"{DEFAULT_MODEL_NAME!r}, which is the model: section)")
            if alias_typo(model.name_or_path):
                raise ConfigError(f"models.{name}.name_or_path {model.name_or_path!r} is no model alias, folder or "
                                  f"Hub id; did you mean {alias_typo(model.name_or_path)!r}?")
            if model.dtype not in DTYPE_NAMES:
                raise ConfigError(f"models.{name}.dtype must be one of {', '.join(DTYPE_NAMES)}, got {model.dtype!r}")
        critic_model = self.critic.model if self.critic is not None else None
        for where, name in [(f"agents.{a}.model", spec.model) for a, spec in self.agents.items()] + [
                ("critic.model", critic_model)]:
            if name is not None and name not in known:
                close = difflib.get_close_matches(name, known, n=1, cutoff=0.5)
                raise ConfigError(f"{where} {name!r} names no model; the team's models are {', '.join(known)}"
                                  + (f"; did you mean {close[0]!r}?" if close else ""))
        for agent, spec in self.agents.items():
            if not spec.trainable and spec.sets_learner_options:
                raise ConfigError(f"agents.{agent} is frozen (trainable: false) but sets {', '.join(spec.sets_learner_options)}: "
                                  "a frozen agent is never trained; remove them (or set trainable: true)")
            if spec.trainable and spec.adapter is not None:
                raise ConfigError(f"agents.{agent}.adapter is a frozen agent's fixed adapter; set trainable: false "
                                  "(to start a trained agent from earlier adapters, use init_adapters)")
            if spec.actor_lr is not None and not spec.actor_lr >= 0:
                raise ConfigError(f"agents.{agent}.actor_lr must be >= 0 or null (= schedule.actor_lr), got {spec.actor_lr}")
            if agent in self.scripted_seats:
                raise ConfigError(f"agents.{agent}: {agent!r} is a scripted seat (scripted_seats), which runs no model")
            if spec.lora:
                self.lora_of(agent)  # an unknown LoRA key or a bad value: one line
        several = len({spec.model for spec in self.agents.values()} | {DEFAULT_MODEL_NAME}) > 1 or bool(self.models)
        per_agent = any(spec.lora or spec.actor_lr is not None or not spec.trainable for spec in self.agents.values())
        if self.shared_adapter and (several or per_agent):
            raise ConfigError("shared_adapter: true gives every agent one adapter, but agents: places agents on their "
                              "own models or gives them their own settings; set shared_adapter: false")
        frozen = set(self.frozen_agents)
        if self.ppo.train_agents is not None and frozen & set(self.ppo.train_agents):
            raise ConfigError(f"ppo.train_agents names frozen agents {sorted(frozen & set(self.ppo.train_agents))} "
                              "(agents.<id>.trainable: false); remove them from one of the two")

    def _check_model_device(self) -> None:
        """``model.device`` "auto" or shaped like a torch device string (``type`` or
        ``type:index``); whether torch knows the type is checked by :meth:`resolve_hardware`."""
        device = str(self.model.device)
        if device != AUTO_DEVICE and not _DEVICE_PATTERN.fullmatch(device):
            typed = re.fullmatch(r"([a-z]+)([0-9]+)", device.lower())  # cuda0 -> cuda:0
            close = (["cuda"] if device.lower().startswith("gpu") else [f"{typed[1]}:{typed[2]}"] if typed
                     else difflib.get_close_matches(device.lower(), _COMMON_DEVICES, n=1, cutoff=0.5))
            raise ConfigError(f"model.device must be 'auto' or a torch device string such as 'cpu', 'cuda' or "
                              f"'cuda:1', got {device!r}" + (f"; did you mean {close[0]!r}?" if close else ""))

    def resolve_hardware(self) -> TrainConfig:
        """Decide the device, dtype and threads of this run once
        (:func:`marft_agents.model.loading.decide_hardware`), which :meth:`plan` carries from then
        on (``plan().hardware``); returns self. ``model.device`` and ``model.dtype`` "auto" are
        written over with what they stand for, so that every record and checkpoint's config.yaml
        names the device and dtype the run used ("cuda" stays "cuda": each rank's current GPU).
        Loads torch to probe the device (and may time bf16 on a CPU), so it runs where the model
        is about to load (the trainer, ``marft eval``, ``marft score``), not in :meth:`validate`;
        a second call keeps the first decision unless ``model`` changed since."""
        from marft_agents.model import loading  # loads torch

        if self._hardware is None or self._hardware[0] != (self.model.device, self.model.dtype, self.model.threads):
            try:
                loading.resolve_device(self.model.device)
            except ValueError as err:
                raise ConfigError(f"model.{err}") from None
            hardware = loading.decide_hardware(self.model)
            self.model.device, self.model.dtype = hardware.device, hardware.dtype
            self._hardware = ((hardware.device, hardware.dtype, self.model.threads), hardware)
        team = dict(self._team_hardware or {})
        for name, model in self.models.items():  # a team's further models: each its own dtype and device
            key = (model.device, model.dtype, model.threads)
            if name not in team or team[name][0] != key:
                try:
                    loading.resolve_device(model.device)
                except ValueError as err:
                    raise ConfigError(f"models.{name}.{err}") from None
                decided = loading.decide_hardware(model)
                model.device, model.dtype = decided.device, decided.dtype
                team[name] = ((decided.device, decided.dtype, model.threads), decided)
        self._team_hardware = team
        return self

    def hardware_of(self, model_name: str) -> ResolvedHardware | None:
        """The resolved hardware of the team's model ``model_name`` (``default``: :attr:`hardware`)."""
        if model_name == DEFAULT_MODEL_NAME:
            return self.hardware
        found = (self._team_hardware or {}).get(model_name)
        return found[1] if found is not None else None

    @property
    def hardware(self) -> ResolvedHardware | None:
        """The device, dtype and threads :meth:`resolve_hardware` decided (None before)."""
        return self._hardware[1] if self._hardware is not None else None

    def _capabilities(self) -> Capabilities:
        """The capabilities the learner ``algorithm`` declares (read without importing a shipped
        learner); ``ConfigError`` for an unknown name or a plug-in that fails to import."""
        try:
            return learner_capabilities(self.algorithm)
        except UnknownLearnerError as err:
            raise ConfigError(f"algorithm: {err}") from None
        except (ImportError, TypeError) as err:  # the plug-in's own failure: its cause stays on the error
            raise ConfigError(f"algorithm: {err}") from err

    def plan(self, quiet: bool = True) -> RunPlan:
        """The run's cross-field decisions, resolved once (:mod:`marft_agents.run_plan`): the
        baseline, the critic, the group size, the rescoring, who trains when. Every consumer (learner, trainer,
        collector, the data-parallel split) reads them from here; ``quiet``: no log line when
        grouped sampling is off (the learner asks with ``quiet=False``, once). ``ConfigError`` on a
        combination that cannot run."""
        cls, s, p = self._capabilities(), self.schedule, self.ppo
        learner = LearnerTraits(self.algorithm, cls.value_mode, cls.baselines, cls.trains, self.learner)
        groups = GroupSetting(s.group_size, self.critic.ceiling_group_size if self.critic else None,
                              s.episodes_per_update)
        rescoring = RescoringSetting(self.sampling.engine, p.recompute_old_logprobs, self.sampling.recompute_logprobs,
                                     p.behaviour_is_cap)
        who = WhoTrains(tuple(p.train_agents) if p.train_agents is not None else None,
                        tuple(self.scripted_seats or {}), p.agent_iteration_interval, self.frozen_agents)
        return resolve_plan(learner, groups, self.advantage.baseline, rescoring, who, quiet=quiet,
                            hardware=self.hardware)

    def _check_learner(self) -> Capabilities:
        """``algorithm`` names a registered learner; ``learner`` becomes its options object.
        Returns the learner's capabilities (read without importing a shipped learner)."""
        cls = self._capabilities()
        options_class = cls.options_class
        if options_class is None:
            if self.learner not in (None, {}):
                raise ConfigError(f"learner: algorithm {self.algorithm!r} declares no learner options, "
                                  f"got {self.learner!r}; remove the learner section (PPO settings go in ppo)")
            self.learner = None
        elif not isinstance(self.learner, options_class):
            if dataclasses.is_dataclass(self.learner):
                raise ConfigError(f"learner: algorithm {self.algorithm!r} takes {options_class.__name__} "
                                  f"options, got a {type(self.learner).__name__}")
            self.learner = build_dataclass(options_class, self.learner, "learner")
        if self.critic is None and cls.value_mode is not None:
            raise ConfigError(f"critic: algorithm {self.algorithm!r} needs a critic (value_mode "
                              f"{cls.value_mode!r}); remove 'critic: null'")
        if self.critic is not None and self.critic.head_refit_window > 0 and cls.value_mode != "state":
            raise ConfigError(f"critic.head_refit_window: algorithm {self.algorithm!r} has value_mode "
                              f"{cls.value_mode!r}, but only state values (one per decision, e.g. mappo_action) "
                              "are refit; set critic.head_refit_window: 0")
        return cls

    def _check_training_policy(self) -> None:
        """What PPO's ratio needs: the sampled policy is the scored one, in the same mode."""
        if self.sampling.top_p < 1.0 or self.sampling.top_k > 0:
            raise ConfigError(
                f"sampling.top_p = {self.sampling.top_p} / sampling.top_k = {self.sampling.top_k} truncate the "
                "sampling distribution, but the PPO loss scores tokens under the untruncated one, so the "
                "ratio would compare a different policy from the one that acted; set top_p: 1.0 and top_k: 0 "
                "for training (lower sampling.temperature instead to sample more conservatively)")
        for where, spec in (("lora", self.lora), ("critic.lora", self.critic.lora if self.critic else None)):
            if spec is not None and spec.dropout > 0:
                raise ConfigError(
                    f"{where}.dropout = {spec.dropout}: LoRA dropout is not applied during training (actions "
                    "are sampled and their old log-probs scored without dropout, and a PPO ratio must compare "
                    "that same function), so it would do nothing; set dropout: 0.0")


def _require_plain_data(value: Any, where: str) -> None:
    """Checkpoints and records save the config as YAML: a function or object in it would crash the
    first checkpoint after minutes of training, so it is refused up front."""
    if isinstance(value, dict):
        for key, item in value.items():
            _require_plain_data(item, f"{where}.{key}")
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            _require_plain_data(item, f"{where}[{index}]")
    elif value is not None and not isinstance(value, (str, int, float, bool)):
        raise ConfigError(
            f"{where} is a {type(value).__name__}, not plain data; the config is saved as YAML in checkpoints. "
            "Name it instead: e.g. Dependency.register('my_schedule', fn) and dependency: my_schedule "
            "(or a marft_envs.dependencies entry point); profiles by name or as a mapping"
        )


# -- loading ---------------------------------------------------------------------------------------
def load_config(source: str | Path | dict[str, Any], overrides: dict[str, Any] | None = None) -> TrainConfig:
    """Build a validated :class:`TrainConfig` from a YAML file (or a dict), then ``overrides``.

    ``overrides`` uses dotted keys, e.g. ``{"schedule.num_updates": 5, "env.kwargs.level": 2}``.
    """
    if isinstance(source, dict):
        data = source
    else:
        path = Path(source)
        if not path.is_file():
            raise ConfigError(f"config file {str(path)!r} does not exist")
        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        except yaml.YAMLError as err:
            mark = getattr(err, "problem_mark", None)
            where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
            problem = getattr(err, "problem", None) or str(err).splitlines()[0]
            raise ConfigError(f"{path} is not valid YAML{where}: {problem}; fix the file "
                              "(check indentation, colons and brackets)") from None
        if not isinstance(data, dict):
            raise ConfigError(f"{path} must hold a mapping of config sections (algorithm:, env:, ...), "
                              f"got a {type(data).__name__}")
    data = _deep_copy(data)
    for dotted, value in (overrides or {}).items():
        node = data
        *parents, last = dotted.split(".")
        for key in parents:
            node = node.setdefault(key, {})
            if not isinstance(node, dict):
                raise ConfigError(f"cannot override {dotted!r}: {key!r} is not a section")
        node[last] = value
    return config_from_dict(data)


def config_from_dict(data: dict[str, Any]) -> TrainConfig:
    """Build and validate a :class:`TrainConfig` from plain data (parsed YAML)."""
    return build_dataclass(TrainConfig, data, "").validate()


def config_to_dict(cfg: TrainConfig) -> dict[str, Any]:
    """Plain-data (YAML-safe) view of a run config (what config.yaml and the records hold)."""
    return _deep_copy(dataclasses.asdict(cfg))


def _deep_copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _deep_copy(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_deep_copy(v) for v in value]
    return value


class _Dataclass(Protocol):
    """A dataclass instance (a config or one of its sections)."""

    __dataclass_fields__: typing.ClassVar[dict[str, Any]]


def describe_config(cfg: _Dataclass | None = None, where: str = "") -> list[tuple[str, str, Any, str]]:
    """``(dotted key, type, value, docstring)`` of every field, sections flattened, in order.

    ``cfg`` defaults to ``TrainConfig()``, so the values are the defaults (``marft config --show``).
    """
    cfg = TrainConfig() if cfg is None else cfg
    hints = typing.get_type_hints(type(cfg))
    docs = field_docs(type(cfg))
    rows: list[tuple[str, str, Any, str]] = []
    for f in dataclasses.fields(cfg):
        value, key = getattr(cfg, f.name), join_key(where, f.name)
        if dataclasses.is_dataclass(value):
            rows += describe_config(value, key)
        else:
            rows.append((key, type_name(hints[f.name]), value, docs.get(f.name, "")))
    return rows
