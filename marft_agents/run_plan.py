"""The run plan: the decisions of a training run that read several config sections, made once.

A config's sections each hold settings; some choices of a run depend on several of them and on
the learner's declared capabilities together (the baseline ``auto`` stands for depends on the
learner and the grouped sampling, the group size on the baseline and the critic, ...).
:meth:`marft_agents.config.TrainConfig.plan` resolves them into one frozen :class:`RunPlan`,
each decision in one function of this module, in this order:

1. :func:`decide_baseline`: ``advantage.baseline`` (``auto`` -> ``group`` or ``critic``), one
   the learner implements.
2. :func:`decide_critic`: what the critic values (the learner's ``value_mode``), or None when
   the baseline runs without one: no critic adapter or value head is built, no value recorded
   at collection, no critic pass or optimizer.
3. :func:`decide_group_size`: the episodes per task group the collector plays (the learner's
   own ``learner.group_size`` option, else ``schedule.group_size`` or its automatic value).
4. :func:`decide_rescoring`: which log-probs are rescored before the update (the learner's own
   pass, ``ppo.recompute_old_logprobs``; the sampling loop's, ``sampling.recompute_logprobs``)
   and what a sampler that scores elsewhere (``SCORED_ELSEWHERE``) requires.
5. :func:`decide_schedule`: who trains at each update (``ppo.train_agents`` less the
   ``scripted_seats``; all of them at once, or with ``ppo.agent_iteration_interval = k > 0`` one
   at a time, each for k updates, rotating): an :class:`AgentSchedule`.

The device, dtype and threads (:class:`ResolvedHardware`) need torch and may time the CPU, so
they are decided apart, once, where the model is about to load
(:func:`marft_agents.model.loading.decide_hardware`, called by ``TrainConfig.resolve_hardware``),
and the plan carries them from then on: the model loads with them
(``load_model_and_tokenizer(..., hardware=)``), the trainer's bf16 warning reads them, and
``model.device`` / ``model.dtype`` are written over with them, so that config.yaml and the records
(which the grid reports read) name the resolved device and dtype as before.

Every consumer reads the plan and re-derives none of it: the learners (``learners/base.py``,
``learners/grpo.py``; ``trainable_agents`` is the plan's schedule), the trainer (``build_policy``'s critic, the collector's group size and
values, the rescoring warning) and the data-parallel split (``runtime/distributed.py``).
A bad combination raises :class:`~marft_agents.config_schema.ConfigError` (one line).
Plain data: no torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from marft_agents.config_schema import ConfigError
from marft_agents.settings.advantage import (AUTO_BASELINE, DEFAULT_BASELINE, GROUP_BASELINES, resolve_baseline,
                                              resolve_group_size)
from marft_agents.settings.estimators import estimator
from marft_agents.settings.critic import CriticConfig
from marft_agents.settings.ppo import PPOConfig
from marft_agents.settings.sampling import SCORED_ELSEWHERE, SamplingConfig
from marft_agents.settings.schedule import ScheduleConfig
from marft_agents.settings.vllm import VLLMConfig


@dataclass(frozen=True)
class AgentSchedule:
    """Who trains at each update: the agents of ``train_agents`` (None: all) but the
    ``scripted`` seats (their utterances were not sampled) and the ``frozen`` teammates
    (``agents.<id>.trainable: false``), in profile order; all at once when
    ``interval`` is 0 (simultaneous), else one at a time, each for ``interval`` updates,
    rotating (agent-by-agent)."""

    train_agents: tuple[str, ...] | None
    scripted: tuple[str, ...]
    interval: int
    frozen: tuple[str, ...] = ()

    @property
    def agent_by_agent(self) -> bool:
        """Whether one agent trains at a time (the rotation) rather than all at once."""
        return self.interval > 0

    def trainable(self, agent_ids: list[str], update: int) -> list[str]:
        """The agents of ``agent_ids`` whose adapters train at ``update`` (0-based); ValueError
        when ``train_agents`` names an agent the env does not have."""
        chosen = self.train_agents
        if chosen is not None and set(chosen) - set(agent_ids):
            raise ValueError(f"ppo.train_agents names {sorted(set(chosen) - set(agent_ids))}, not agents of "
                             f"this env; its agents: {', '.join(agent_ids)}")
        pool = [a for a in agent_ids if (chosen is None or a in chosen) and a not in self.scripted
                and a not in self.frozen]
        if not self.agent_by_agent:
            return pool
        return [pool[(update // self.interval) % len(pool)]]


@dataclass(frozen=True)
class ResolvedHardware:
    """What the run computes with on this machine, decided once where the model is about to load
    (:func:`marft_agents.model.loading.decide_hardware`: it loads torch and may time bf16 against
    float32), never "auto": model loading, the trainer and the records read it."""

    device: str
    """The torch device string (``model.device`` "auto" -> ``"cuda"`` or ``"cpu"``)."""
    dtype: str
    """The dtype name (``model.dtype`` "auto" -> ``"bfloat16"`` or ``"float32"``)."""
    threads: int
    """Torch's intra-op threads (torch's current count when ``sets_threads`` is False)."""
    sets_threads: bool
    """True: marft sets ``threads`` (``torch.set_num_threads``); False: an explicit setting stands."""
    line: str
    """The start-up line saying all of it and why (``float32 on cpu (...), 1 thread (...)``)."""


@dataclass(frozen=True)
class RunPlan:
    """The resolved cross-field decisions of one run (module docstring)."""

    baseline: str
    """The advantage baseline (never ``auto``)."""
    critic_values: str | None
    """What the critic values (``"state"`` / ``"token"``); None: no critic is built or run."""
    group_size: int
    """Episodes per task group the collector plays (1: every episode its own task)."""
    rescores_old_logprobs: bool
    """The learner rescores the old log-probs on its own micro-batches before the first epoch."""
    sampler_rescores: bool
    """The sampling loop rescores its log-probs with the training forward pass."""
    schedule: AgentSchedule
    """Who trains at each update (simultaneous or agent-by-agent)."""
    hardware: ResolvedHardware | None = None
    """The device, dtype and threads (:meth:`~marft_agents.config.TrainConfig.resolve_hardware`);
    None until they are resolved (validation loads no torch)."""

    @property
    def builds_critic(self) -> bool:
        """Whether the run has a critic (adapter, value head, optimizer, critic passes)."""
        return self.critic_values is not None


class RunConfig(Protocol):
    """What the parts below the run config (the learners, the engines' settings) read of a
    run's :class:`marft_agents.config.TrainConfig`, which they cannot import (it sits above them,
    ``tests/test_import_graph.py``): its sections (each declared in :mod:`marft_agents.settings`)
    and :meth:`plan`."""

    seed: int
    output_dir: str
    learner: Any
    """The learner's options object (a dataclass instance or None)."""
    ppo: PPOConfig
    schedule: ScheduleConfig
    critic: CriticConfig | None
    sampling: SamplingConfig
    vllm: VLLMConfig
    scripted_seats: dict[str, str]

    def plan(self, quiet: bool = True) -> RunPlan:
        """The run's resolved decisions."""
        ...

    def actor_lr_of(self, agent_id: str) -> float:
        """``agent_id``'s policy learning rate (``agents.<id>.actor_lr``, else ``schedule.actor_lr``)."""
        ...


@dataclass(frozen=True)
class LearnerTraits:
    """What the plan reads of the learner: its declared capabilities and its options object."""

    algorithm: str
    value_mode: str | None
    baselines: tuple[str, ...]
    trains: bool
    options: object | None
    """The config's ``learner:`` options (a dataclass instance or None)."""


@dataclass(frozen=True)
class GroupSetting:
    """What the config says about task groups: ``schedule.group_size`` (None: automatic), the
    deprecated ``critic.ceiling_group_size`` (None when unset or without a critic) and
    ``schedule.episodes_per_update``."""

    group_size: int | None
    deprecated: int | None
    episodes_per_update: int


@dataclass(frozen=True)
class RescoringSetting:
    """What the config says about rescoring: ``sampling.engine``, ``ppo.recompute_old_logprobs``,
    ``sampling.recompute_logprobs`` and ``ppo.behaviour_is_cap``."""

    engine: str
    learner_rescores: bool
    sampler_rescores: bool
    behaviour_is_cap: float | None


@dataclass(frozen=True)
class WhoTrains:
    """What the config says about who trains: ``ppo.train_agents`` (None: all), the
    ``scripted_seats``' names and ``ppo.agent_iteration_interval``."""

    train_agents: tuple[str, ...] | None
    scripted_seats: tuple[str, ...]
    interval: int
    frozen: tuple[str, ...] = ()
    """The agents given ``trainable: false`` (``agents:``): frozen teammates."""


def decide_baseline(choice: str, learner: LearnerTraits, groups: GroupSetting) -> str:
    """Step 1: ``choice`` itself, or for ``auto`` :data:`~marft_agents.settings.advantage.DEFAULT_BASELINE`
    where the learner implements it and grouped sampling is on, else ``critic``; refused unless
    the learner implements it."""
    if choice == AUTO_BASELINE:
        try:
            k = resolve_group_size(groups.group_size, groups.episodes_per_update, quiet=True,
                                   uses_groups=learner.value_mode is not None or DEFAULT_BASELINE in learner.baselines,
                                   deprecated=groups.deprecated)
        except ValueError as err:
            raise ConfigError(str(err)) from None
        choice = resolve_baseline(AUTO_BASELINE, learner.baselines, k)
    if choice not in learner.baselines:
        raise ConfigError(f"advantage.baseline: algorithm {learner.algorithm!r} implements "
                          f"{', '.join(learner.baselines)}, got {choice!r}")
    return choice


def decide_critic(value_mode: str | None, baseline: str) -> str | None:
    """Step 2: the learner's ``value_mode`` when the baseline uses a critic, else None."""
    return value_mode if estimator("baseline", baseline).uses_critic else None


def decide_group_size(learner: LearnerTraits, groups: GroupSetting, baseline: str, critic_values: str | None,
                      quiet: bool = True) -> int:
    """Step 3: a learner option ``group_size`` (GRPO's, a plugin's) where the learner declares
    one (``schedule.group_size`` must then be unset or equal); 1 for a learner that trains
    nothing; else ``schedule.group_size`` resolved for what reads groups (a critic's ceiling, a
    group baseline: :func:`~marft_agents.settings.advantage.resolve_group_size`; ``quiet``: no
    log line when grouped sampling is off). A group baseline needs groups of 2 or more; the
    update collects whole groups."""
    own = getattr(learner.options, "group_size", None)
    if isinstance(own, int) and not isinstance(own, bool):
        if groups.group_size is not None and groups.group_size != own:
            raise ConfigError(f"algorithm {learner.algorithm} sets its group size with learner.group_size ({own}); "
                              f"remove schedule.group_size ({groups.group_size})")
        k = own
    else:
        reads_groups = critic_values is not None or baseline in GROUP_BASELINES
        try:
            k = resolve_group_size(groups.group_size, groups.episodes_per_update, uses_groups=reads_groups,
                                   deprecated=groups.deprecated if reads_groups else None, quiet=quiet)
        except ValueError as err:
            raise ConfigError(str(err)) from None
        k = k if learner.trains else 1
    if baseline in GROUP_BASELINES and k < 2:
        raise ConfigError(f"advantage.baseline: {baseline} compares the episodes of a task group; set "
                          f"schedule.group_size >= 2 (a divisor of schedule.episodes_per_update "
                          f"{groups.episodes_per_update})")
    if k < 1 or groups.episodes_per_update % k:
        raise ConfigError(f"schedule.episodes_per_update ({groups.episodes_per_update}) must be a multiple of the "
                          f"learner's group_size ({k}, algorithm {learner.algorithm!r}): each update collects whole "
                          "groups of episodes of one task")
    return k


def decide_rescoring(trains: bool, setting: RescoringSetting) -> tuple[bool, bool]:
    """Step 4: ``(learner rescores, sampler rescores)``. For training: a sampler whose log-probs
    are not the learner's pass (``SCORED_ELSEWHERE``, read without importing the engine) needs
    the learner's rescoring and cannot run the loops' own; the importance weight
    (``ppo.behaviour_is_cap``) compares the two, so it needs the learner's rescoring too."""
    engine, learner_rescores, sampler_rescores = setting.engine, setting.learner_rescores, setting.sampler_rescores
    behaviour_is_cap = setting.behaviour_is_cap
    if not trains:
        return learner_rescores, sampler_rescores
    if behaviour_is_cap is not None and not behaviour_is_cap > 0:
        raise ConfigError(f"ppo.behaviour_is_cap must be > 0 or null (off), got {behaviour_is_cap}")
    if behaviour_is_cap is not None and not learner_rescores:
        raise ConfigError("ppo.behaviour_is_cap weighs the learner's old log-probs against the sampler's, so it "
                          "needs ppo.recompute_old_logprobs: true (otherwise the two are the same numbers)")
    if engine in SCORED_ELSEWHERE and not learner_rescores:
        raise ConfigError(f"sampling.engine {engine!r} samples with other kernels than the "
                          "learner's forward pass, so PPO ratios would not start at 1; set "
                          "ppo.recompute_old_logprobs: true")
    if engine in SCORED_ELSEWHERE and sampler_rescores:
        raise ConfigError(f"sampling.recompute_logprobs rescores with the loops' own pass, which sampling.engine "
                          f"{engine!r} does not run; set it to false (ppo.recompute_old_logprobs "
                          "rescores in the learner)")
    return learner_rescores, sampler_rescores


def decide_schedule(who: WhoTrains) -> AgentSchedule:
    """Step 5: the agents ``ppo.train_agents`` names (None: all) less the scripted seats, all at
    once for ``agent_iteration_interval`` 0, else one at a time for that many updates each."""
    chosen = tuple(who.train_agents) if who.train_agents is not None else None
    return AgentSchedule(train_agents=chosen, scripted=tuple(who.scripted_seats), interval=who.interval,
                         frozen=tuple(who.frozen))


def resolve_plan(learner: LearnerTraits, groups: GroupSetting, baseline_choice: str, rescoring: RescoringSetting,
                 who: WhoTrains, quiet: bool = True, hardware: ResolvedHardware | None = None) -> RunPlan:
    """The five decisions in order (module docstring), with the ``hardware`` resolved before."""
    baseline = decide_baseline(baseline_choice, learner, groups)
    critic_values = decide_critic(learner.value_mode, baseline)
    group_size = decide_group_size(learner, groups, baseline, critic_values, quiet=quiet)
    rescores, sampler = decide_rescoring(learner.trains, rescoring)
    return RunPlan(baseline=baseline, critic_values=critic_values, group_size=group_size,
                   rescores_old_logprobs=rescores, sampler_rescores=sampler, schedule=decide_schedule(who),
                   hardware=hardware)
