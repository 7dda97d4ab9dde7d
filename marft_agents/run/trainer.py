"""The training loop: rollouts, learner updates, evaluation and checkpoints, resumable exactly.

``train(cfg)`` runs ``cfg.schedule.num_updates`` updates (fewer when a budget of the schedule,
seconds, episodes or sampled tokens, runs out first: :meth:`Trainer.budget_spent`) inside the
run session that ``marft train`` also uses (the evaluation before training first, metric files,
summary.json, plot, SIGINT/SIGTERM handling: :mod:`marft_agents.run.session`) and returns a
:class:`TrainResult`; ``iter_train(cfg)`` is the bare loop as a generator that yields each
update's metrics. One update:

1. the :class:`~marft_agents.collector.RolloutCollector` plays ``episodes_per_update`` episodes on
   ``env.num_envs`` env instances (generation batched across envs per adapter);
2. the learner (``cfg.algorithm``) runs its PPO epochs on them, inside the sampling engine's
   ``suspend()`` (vLLM sleeps), after which the engine is synced to the new adapters
   (``engine/base.py``; a restore syncs too);
3. every ``eval.interval`` updates (and at the end) the policy is scored on a fixed problem set,
   its per-problem outcomes kept in ``<output_dir>/evals/``; an evaluation that beats every
   earlier one saves its adapters to ``<output_dir>/best/`` (``eval.keep_best``);
4. every ``schedule.checkpoint_interval`` updates (and after the last) a checkpoint is written.

Metric keys include ``losses/policy_loss``, ``losses/value_loss``, ``losses/entropy``,
``losses/approx_kl``, ``losses/clipfrac``, ``losses/explained_variance``,
``rollout/reward_mean``, ``agent/<id>/reward``, ``agent/<id>/length``, ``counters/*``,
``time/*`` and, when evaluated, ``eval/accuracy`` / ``eval/stderr`` / ``eval/seconds`` (its wall time).

Resuming: ``resume=True`` loads the latest checkpoint in ``cfg.output_dir`` (adapters, value
head, optimizer states, counters, RNG states, the task order) and continues with the next update;
the result is the same as a run that was never interrupted (tested on CPU). Starting a fresh run
in a folder that already has checkpoints is refused rather than silently overwriting them, and so
is a resume that changes the evaluation setting (``eval.n_problems``, ``eval.seed``, the split ...:
:data:`EVAL_SET_FIELDS`), whose "best" would otherwise compare accuracies on different problem sets.
Setting ``Trainer.stop_requested`` (the session's signal handlers do) ends the loop after the
update in progress, with a checkpoint, so a preempted run resumes exactly; a stop requested once
the last update has started leaves a complete run (:attr:`Trainer.finished`).

One lifecycle: a :class:`Trainer` is a context manager, and every entry point (``train``,
``iter_train``, ``marft train``, ``baselines/run.py`` and the grid through it, the benchmarks)
holds it as ``with prepare_trainer(cfg, resume) as trainer:``; leaving the block, on error too,
closes the sampling engine (vLLM's memory and exported adapter folders). An evaluation without
training holds its policy the same way (``with build_policy(...) as policy:``).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import marft_envs
from marft_agents.run.checkpoint import (
    capture_rng_state,
    checkpoint_name,
    checkpoint_root,
    latest_checkpoint,
    load_best_meta,
    load_checkpoint,
    load_checkpoint_config,
    restore_rng_state,
    save_best_adapters,
    save_checkpoint,
)
from marft_agents.runtime import distributed
from marft_agents.config import ConfigError, TrainConfig, config_to_dict
from marft_agents.env_check import check_before_loading
from marft_agents.evaluation.problem_set import EvalResult, evaluate
from marft_agents.learners import make_learner
from marft_agents.learners.registry import learner_trains
from marft_agents.learners.interface import run_values
from marft_agents.run_plan import RunPlan
from marft_agents.episodes import rollout_metrics
from marft_agents.collector import RolloutCollector
from marft_agents.runtime.seeding import seed_everything
from marft_agents.settings.team import DEFAULT_MODEL_NAME
from marft_agents.team_layout import TeamLayout, team_layout  # noqa: F401 (trainer.team_layout: also checked before loading)

log = logging.getLogger(__name__)

Callback = Callable[[int, dict[str, float]], None]
"""Called after every update with ``(update_index, metrics)`` (update_index counts from 0)."""


@dataclass
class TrainResult:
    """What a finished :func:`train` call returns."""

    history: list[dict[str, float]] = field(default_factory=list)
    """Metrics of every update run by this call (a resumed call starts after the checkpoint)."""
    output_dir: Path = Path(".")
    last_checkpoint: Path | None = None
    final_eval: EvalResult | None = None
    """Evaluation after the last update (``eval.at_end``)."""
    best_eval: dict[str, float] | None = None
    """``{"update", "accuracy", "stderr"}`` of the best evaluation during training (None if none ran)."""
    counters: dict[str, int] = field(default_factory=dict)
    """``update`` (updates done), ``episodes``, ``decisions``, ``tokens``."""
    policy: Any = None
    """The trained ``MultiAgentPolicy`` (evaluate it or save its adapters)."""
    summary: dict[str, Any] = field(default_factory=dict)
    """What ``<output_dir>/summary.json`` holds: ``eval_before``, ``eval_after``, ``eval_best``,
    ``counters``, ... (see :mod:`marft_agents.run.session`)."""
    stopped_by: str | None = None
    """``"SIGINT"`` / ``"SIGTERM"`` when a signal stopped the run early (after a checkpoint)."""


def scripted_seats(cfg: TrainConfig, agent_ids: Sequence[str]) -> dict[str, Any]:
    """The config's ``scripted_seats`` as functions (``ConfigError`` naming the bad entry)."""
    from marft_agents.evaluation.scripted import ScriptedPolicyError, load_seats

    try:
        return load_seats(dict(cfg.scripted_seats), list(agent_ids))
    except ScriptedPolicyError as err:
        raise ConfigError(str(err)) from None


def build_policy(cfg: TrainConfig, model: Any, tokenizer: Any, agent_ids: Sequence[str],
                 critic_agents: Sequence[str] | None = None, critic_name: str = "critic") -> Any:
    """The ``MultiAgentPolicy`` of the agents ``agent_ids`` on one base model: with a critic only
    if the learner uses values (training and ``marft eval`` build the same adapters, so
    checkpoints load strictly), each agent's own LoRA settings and fixed adapter (``agents:``),
    and the engine settings of the run (:class:`~marft_agents.engine.base.EngineSettings`).
    ``critic_agents``: in a team of different models (:func:`load_policy`), the agents this
    model's critic values (empty: it carries none), named ``critic_name``; None = every agent here,
    when the learner uses values. A caller that only evaluates holds it as
    ``with build_policy(...) as policy:`` (closes its engine)."""
    from marft_agents.engine.base import EngineSettings
    from marft_agents.model.adapters import spec_of_folder
    from marft_agents.model.policy import MultiAgentPolicy

    agent_ids = list(agent_ids)
    # the run plan's critic: none (no adapter, no value head) for a critic-free learner or advantage baseline
    critic_here = cfg.plan().builds_critic and (critic_agents is None or bool(critic_agents))
    fixed = {a: cfg.agent_spec(a).adapter for a in agent_ids if cfg.agent_spec(a).adapter}
    agent_lora = {a: spec_of_folder(fixed[a]) if a in fixed else cfg.lora_of(a) for a in agent_ids
                  if a in fixed or cfg.agent_spec(a).lora}
    others = critic_agents is not None and list(critic_agents) != agent_ids
    policy = MultiAgentPolicy(model, tokenizer, agent_ids, lora=cfg.lora, shared_adapter=cfg.shared_adapter,
                              critic=cfg.critic if critic_here else None,
                              gradient_checkpointing=cfg.schedule.gradient_checkpointing, agent_lora=agent_lora,
                              critic_agents=list(critic_agents) if critic_here and others else None,
                              critic_name=critic_name)
    for agent, folder in fixed.items():  # a frozen teammate's fixed adapter
        policy.load_fixed_adapter(agent, folder)
    # what an engine reads besides each call's sampling; from_pretrained recorded the weights' folder
    policy.engine_settings = EngineSettings.of(cfg, model_folder=model.name_or_path or None)
    return policy


def load_policy(cfg: TrainConfig, agent_ids: Sequence[str], model_and_tokenizer: Any = None,
                seed: int | None = None) -> Any:
    """Load every base model the team uses once and build the run's policy: a plain
    ``MultiAgentPolicy`` when every agent (and the critic) runs on one model, else a
    :class:`~marft_agents.model.team.TeamPolicy` of one member per model (:func:`team_layout`),
    the start-up line naming each model, its dtype and its agents. ``model_and_tokenizer``:
    already-loaded ``(model, tokenizer)`` of the default model, or ``{model name: (model,
    tokenizer)}`` (tests pass tiny models); the rest load from ``cfg``. ``seed``: seed every RNG
    after the models load, before the adapters are built. Call after ``cfg.resolve_hardware()``."""
    from marft_agents.model.loading import load_model_and_tokenizer

    agent_ids = list(agent_ids)
    layout = team_layout(cfg, agent_ids)
    given = model_and_tokenizer if isinstance(model_and_tokenizer, dict) else (
        {DEFAULT_MODEL_NAME: model_and_tokenizer} if model_and_tokenizer is not None else {})
    models = cfg.team_models()
    pairs = {name: given.get(name) or load_model_and_tokenizer(models[name], hardware=cfg.hardware_of(name))
             for name in layout.agents_on}
    if seed is not None:
        seed_everything(seed)
    if not layout.several:
        return build_policy(cfg, *pairs[next(iter(layout.agents_on))], agent_ids)
    from marft_agents.engine.base import EngineSettings
    from marft_agents.model.team import TeamPolicy
    from marft_agents.team_layout import critic_placement, team_critic_name

    each = bool(layout.critic_of) and critic_placement(cfg.plan().critic_values, cfg.critic.mode) == "each"
    members = {name: build_policy(cfg, *pairs[name], agents, layout.critic_agents(name),
                                  team_critic_name(name) if each else "critic")
               for name, agents in layout.agents_on.items()}
    team = TeamPolicy(members, {a: cfg.model_of(a) for a in agent_ids}, layout.critic_of)
    team.engine_settings = EngineSettings.of(cfg, model_folder=None)
    for line in team.describe():
        log.info("team: %s", line)
    return team


def check_follows_plan(algorithm: str, learner: Any, plan: RunPlan) -> None:
    """A learner's ``group_size`` and recorded values (:func:`~marft_agents.learners.interface.run_values`)
    are the run plan's, which the collector plays: a plug-in that sets its own is refused (one line)."""
    found = {"group_size": learner.group_size, "critic values": run_values(learner)}
    want = {"group_size": plan.group_size, "critic values": plan.critic_values}
    for name in found:
        if found[name] != want[name]:
            raise ConfigError(f"learner {algorithm!r} has {name} {found[name]!r}, but the run plan "
                              f"(TrainConfig.plan(), marft_agents/run_plan.py) says {want[name]!r}; take it from "
                              "cfg.plan() or the learner.group_size option")


EVAL_OUTCOMES_DIR = "evals"
"""Folder of ``output_dir`` holding every evaluation's per-problem outcomes (``update_<k>.json``)."""

EVAL_SET_FIELDS = ("n_problems", "seed", "greedy", "samples_per_problem", "env_kwargs")
"""The ``eval`` fields that decide what an evaluation measures: which problems (``n_problems``,
``seed``, the env keywords such as ``split``) and how they are decoded (``greedy``,
``samples_per_problem``). A resumed run
compares its evaluations (``best/``, the evaluation before training at step 0) with those before the interruption, so
these must not change on resume; the others (``interval``, ``at_end``, ``num_envs``,
``keep_best``) may."""


def eval_setting_changes(saved: dict[str, Any] | None, now: dict[str, Any]) -> list[str]:
    """``"key: old -> new"`` for every setting of the evaluation that differs between the config
    a run was saved with (``saved``, plain data) and ``now``; empty when none (or nothing saved).

    Compared: the :data:`EVAL_SET_FIELDS` of ``eval``, the env id, the keywords the evaluation
    env gets (``env.kwargs`` overlaid with ``eval.env_kwargs``; each change is named by the
    section it comes from) and ``scripted_seats`` (who plays a seat; a config without it had
    none). Another field the saved config lacks (an older version) is not compared.
    """
    if not saved:
        return []
    seats_before, seats_now = saved.get("scripted_seats") or {}, now.get("scripted_seats") or {}
    seat_changes = [f"scripted_seats: {seats_before!r} -> {seats_now!r}"] if seats_before != seats_now else []
    old_eval, new_eval = saved.get("eval") or {}, now.get("eval") or {}
    old_env, new_env = saved.get("env") or {}, now.get("env") or {}
    changes = [f"eval.{key}: {old_eval[key]!r} -> {new_eval.get(key)!r}" for key in EVAL_SET_FIELDS
               if key in old_eval and key != "env_kwargs" and old_eval[key] != new_eval.get(key)]
    if "id" in old_env and old_env["id"] != new_env.get("id"):
        changes.append(f"env.id: {old_env['id']!r} -> {new_env.get('id')!r}")
    if "kwargs" in old_env and "env_kwargs" in old_eval:
        old_kwargs = {**(old_env["kwargs"] or {}), **(old_eval["env_kwargs"] or {})}
        new_kwargs = {**(new_env.get("kwargs") or {}), **(new_eval.get("env_kwargs") or {})}
        missing = "<unset>"
        for key in sorted(set(old_kwargs) | set(new_kwargs)):
            before, after = old_kwargs.get(key, missing), new_kwargs.get(key, missing)
            if before != after:
                in_eval = key in (old_eval["env_kwargs"] or {}) or key in (new_eval.get("env_kwargs") or {})
                section = "eval.env_kwargs" if in_eval else "env.kwargs"
                changes.append(f"{section}.{key}: {before if before is missing else repr(before)} -> "
                               f"{after if after is missing else repr(after)}")
    return changes + seat_changes


def check_eval_setting_unchanged(saved: dict[str, Any] | None, cfg: TrainConfig, where: str | Path) -> None:
    """Refuse (``ConfigError``, one line) to resume the run saved at ``where`` with another
    evaluation setting: its best adapters and its evaluation before training were measured on the old one, so a "best"
    picked across both would compare accuracies on different problem sets."""
    changes = eval_setting_changes(saved, config_to_dict(cfg))
    if changes:
        raise ConfigError(
            f"cannot resume {where}: the evaluation setting changed ({'; '.join(changes)}), so its "
            "evaluations (best/, the one before training) would be compared with ones on a different problem set; "
            "restore the old value(s) (in the config or with --set) to resume, or start a new run in "
            "another output_dir (--output-dir)")


class Trainer:
    """Holds the envs, policy, learner and collector of one run; see the module docstring.

    Setting ``stop_requested`` (to the reason, e.g. ``"SIGTERM"``) makes :meth:`run` stop at the
    next safe point, the end of the update in progress, after writing a checkpoint
    (:meth:`stop_outcome` says which it will be now).

    A context manager: ``with Trainer(...) as trainer:`` (or ``prepare_trainer``) closes the
    sampling engine when the block ends, on error too (:meth:`close`).

    Args:
        cfg: the run's configuration.
        model_and_tokenizer: an already-loaded ``(model, tokenizer)`` (tests pass a tiny model);
            None loads ``cfg.model``.
    """

    stop_requested: str | None = None
    in_update: int | None = None
    """The index of the update in progress (rollout and learner update); None between updates."""

    def __init__(self, cfg: TrainConfig, model_and_tokenizer: Any = None):
        self.cfg = cfg.validate().resolve_hardware()  # "auto" device/dtype named before the model loads
        self.plan = cfg.plan()
        """The run's resolved decisions (:mod:`marft_agents.run_plan`), which the learner, the
        collector and the data-parallel split read."""
        trains = learner_trains(cfg.algorithm)
        hardware = self.plan.hardware  # the device, dtype and threads resolve_hardware decided
        if (trains and hardware.dtype != "float32" and not self.plan.rescores_old_logprobs
                and not self.plan.sampler_rescores):
            # In bfloat16, cached-decoding log-probs differ from the training forward pass (other
            # kernels, other padding) by far more than the clip range allows, so PPO ratios would
            # not start at 1.
            log.warning("model.dtype is %s but ppo.recompute_old_logprobs is false: PPO ratios will "
                        "start away from 1; set ppo.recompute_old_logprobs: true", hardware.dtype)
        seed_everything(cfg.seed)
        self.envs = [marft_envs.make(cfg.env.id, **cfg.env.kwargs) for _ in range(cfg.env.num_envs)]
        self.agent_ids = list(self.envs[0].possible_agents)
        horizon = getattr(getattr(self.envs[0], "unwrapped", self.envs[0]), "horizon", 1)
        if trains and isinstance(horizon, int) and horizon > 1 and cfg.ppo.gamma == 1.0:
            log.warning("env horizon is %d rounds but ppo.gamma is 1.0: a task solved after failed rounds is "
                        "worth as much as a first-try success; set ppo.gamma < 1 (e.g. 0.9) to prefer the "
                        "latter", horizon)
        self.policy = load_policy(cfg, self.agent_ids, model_and_tokenizer)
        self.scripted = scripted_seats(cfg, self.agent_ids)
        if trains and set(self.agent_ids) <= set(self.scripted):
            raise ConfigError(f"scripted_seats plays every agent ({', '.join(self.agent_ids)}): nothing is left to "
                              "train; leave at least one seat to the model")
        if trains and set(self.agent_ids) <= set(self.scripted) | set(cfg.frozen_agents):
            raise ConfigError(f"every agent is frozen (agents.<id>.trainable: false) or scripted "
                              f"({', '.join(self.agent_ids)}): nothing is left to train; let one train")
        if cfg.init_adapters is not None:
            self._init_adapters(cfg.init_adapters)
        self.learner = make_learner(cfg.algorithm, self.policy, cfg, self.agent_ids)
        trained_scripts = sorted(set(self.learner.trainable_agents(0)) & set(self.scripted))
        if trained_scripts:
            raise ConfigError(f"learner {cfg.algorithm!r} would train the scripted seats {trained_scripts}, whose "
                              "utterances were not sampled; its trainable_agents must leave out cfg.scripted_seats "
                              "(marft_agents/ADDING_A_LEARNER.md)")
        check_follows_plan(cfg.algorithm, self.learner, self.plan)
        self.collector = RolloutCollector(self.envs, self.policy, cfg.sampling, values=self.plan.critic_values,
                                          seed=cfg.seed, group_size=self.plan.group_size, scripted=self.scripted)
        # train_seconds: rollout + update time so far (evaluation excluded), for time budgets.
        self.counters = {"update": 0, "episodes": 0, "decisions": 0, "tokens": 0, "train_seconds": 0.0}
        self.output_dir = Path(cfg.output_dir)
        self.last_checkpoint: Path | None = None
        self.final_eval: EvalResult | None = None
        # The best evaluation during training; best/meta.json holds it, so a resume reads it back.
        self.best_eval: dict[str, float] | None = None
        # Under torchrun: this rank's place and the collectives (distributed.SingleProcess in one process).
        self.world = distributed.current_world()
        self.data_parallel = distributed.attach(self)

    # -- checkpoints ---------------------------------------------------------------------------
    def save(self) -> Path:
        state = {
            "counters": dict(self.counters),
            "learner": self.learner.state_dict(),
            "collector": self.collector.state_dict(),
            "rng": capture_rng_state(),
            "agent_ids": self.agent_ids,
        }
        state.update(distributed.rank_states(self, state["rng"]))
        if not self.world.is_main:  # rank 0 writes the checkpoint, with every rank's RNG state
            self.last_checkpoint = checkpoint_root(self.output_dir) / checkpoint_name(self.counters["update"])
            return self.last_checkpoint
        self.last_checkpoint = save_checkpoint(
            self.output_dir, self.counters["update"], self.policy.adapter_state_dict(), state,
            config=config_to_dict(self.cfg), keep_last=self.cfg.schedule.keep_checkpoints,
            extra_files=self.policy.peft_files(),
        )
        return self.last_checkpoint

    def restore(self, path: str | Path | None = None) -> bool:
        """Load ``path`` (default: the latest checkpoint of ``output_dir``); False if none."""
        path = Path(path) if path is not None else latest_checkpoint(self.output_dir)
        if path is None:
            return False
        ckpt = load_checkpoint(path)
        state = ckpt["state"]
        if list(state["agent_ids"]) != self.agent_ids:
            raise ValueError(f"checkpoint {path} was trained with agents {state['agent_ids']}, "
                             f"this run has {self.agent_ids}; use the same env profile to resume")
        check_eval_setting_unchanged(ckpt["config"], self.cfg, path)
        self._warn_config_changes(ckpt["config"])
        self.policy.load_adapter_state_dict(ckpt["adapters"])
        self.policy.sync_engine(int(state["counters"]["update"]))  # the engine samples the restored weights
        self.learner.load_state_dict(state["learner"])
        self.collector.load_state_dict(state["collector"])
        self.counters = dict(state["counters"])
        rng = distributed.rng_state_to_restore(self, state)
        if rng is not None:
            restore_rng_state(rng)
        self.best_eval = self._best_on_disk()
        self.last_checkpoint = path
        log.info("resumed from %s after %d updates", path, self.counters["update"])
        return True

    def _best_on_disk(self) -> dict[str, float] | None:
        """The best evaluation to beat after a resume, read from best/meta.json (None if absent).

        Read from best/ rather than the checkpoint: best/ is written at evaluation time, so it can
        be ahead of the last checkpoint (a crash between an evaluation and the next checkpoint).
        Its adapters are real and measured; comparing against an older figure would let a weaker
        evaluation of the re-run updates overwrite them.
        """
        on_disk = load_best_meta(self.output_dir)
        return None if on_disk is None else {key: on_disk[key] for key in ("update", "accuracy", "stderr")}

    def _init_adapters(self, source: str) -> None:
        """Load ``init_adapters`` (:attr:`TrainConfig.init_adapters`) into the fresh policy."""
        from marft_agents.run.checkpoint import load_adapters, start_state

        try:
            state = load_adapters(source)
        except FileNotFoundError as err:
            raise ConfigError(f"init_adapters: {err}; expected a checkpoint folder (with adapters.pt), an "
                              "adapters.pt file or a run folder with checkpoints") from None
        try:
            self.policy.load_adapter_state_dict(start_state(state, self.policy))
        except (KeyError, ValueError, RuntimeError) as err:
            raise ConfigError(f"init_adapters: {source} does not fit this config's adapters "
                              f"({', '.join(self.policy.adapter_names)}): {str(err).splitlines()[0]}") from None
        log.info("started from the adapters of %s", source)

    def _warn_config_changes(self, saved: dict[str, Any] | None) -> None:
        if not saved:
            return
        now = config_to_dict(self.cfg)
        changed = [f"{section}.{key}" for section, values in now.items() if isinstance(values, dict)
                   for key in values if saved.get(section, {}).get(key) != values[key]]
        changed += [k for k, v in now.items() if not isinstance(v, dict) and saved.get(k) != v]
        changed = [c for c in changed if c != "schedule.num_updates"]
        if changed:
            log.warning("resuming with a changed configuration: %s", ", ".join(sorted(changed)))

    # -- the loop ------------------------------------------------------------------------------
    def evaluate(self, progress: str | None = None) -> EvalResult:
        """Score the policy on the fixed problem set; ``progress`` labels a progress bar. Every
        evaluation's per-problem outcomes go to ``<output_dir>/evals/`` (:meth:`keep_outcomes`)."""
        e = self.cfg.eval
        result = evaluate(self.policy, self.cfg.env.id, {**self.cfg.env.kwargs, **e.env_kwargs},
                        n_problems=e.n_problems, greedy=e.greedy, seed=e.seed,
                        samples_per_problem=e.samples_per_problem,
                        sampling=self.cfg.sampling, num_envs=e.num_envs,
                        progress=progress if self.world.is_main else None,
                        world=self.world if self.world.world_size > 1 else None, scripted=self.scripted)
        self.keep_outcomes(result)
        return result

    def keep_outcomes(self, result: EvalResult) -> Path | None:
        """Write ``evals/update_<k>.json``: where the run stands (update, episodes, sampled tokens,
        training seconds) and ``result.per_task`` (each problem's outcome and transcript), so the
        leaderboard record can carry per-problem outcomes and transcripts of every evaluation
        (``baselines/run.py``). One file per update: a resumed run's re-evaluation replaces it."""
        if not self.world.is_main:
            return None
        folder = self.output_dir / EVAL_OUTCOMES_DIR
        folder.mkdir(parents=True, exist_ok=True)
        c = self.counters
        path = folder / f"update_{c['update']:06d}.json"
        data = {"update": c["update"], "episodes": c["episodes"], "sampled_tokens": c["tokens"],
                "train_seconds": round(float(c.get("train_seconds", 0.0)), 1), "accuracy": result.accuracy,
                "stderr": result.stderr, "n": result.n, "per_task": result.per_task}
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data), encoding="utf-8")
        tmp.replace(path)
        return path

    def _save_unless_saved(self) -> None:
        if self.last_checkpoint is None or self.last_checkpoint.name != checkpoint_name(self.counters["update"]):
            self.save()

    def keep_if_best(self, result: EvalResult) -> None:
        """Save the adapters to ``best/`` when ``result`` beats every evaluation so far."""
        # Strictly better only: on a tie the earlier (less trained, closer to the base) adapters stay.
        if not self.cfg.eval.keep_best or (self.best_eval and result.accuracy <= self.best_eval["accuracy"]):
            return
        self.best_eval = {"update": self.counters["update"], "accuracy": result.accuracy, "stderr": result.stderr}
        if self.world.is_main:
            save_best_adapters(self.output_dir, self.policy.adapter_state_dict(),
                               {**self.best_eval, "n": result.n, "distinct": result.distinct})

    def run(self) -> Iterator[dict[str, float]]:
        """Run the remaining updates, yielding each update's metrics."""
        s = self.cfg.schedule
        while self.counters["update"] < s.num_updates:
            if distributed.agree_on_stop(self):  # arrived between updates (or before the first)
                self._save_unless_saved()
                log.info("%s: stopped after %d updates", self.stop_requested, self.counters["update"])
                break
            if self.budget_spent() is not None:
                # Resuming a run that already spent its budget adds no update.
                log.info("budget %s already used; no update to run", self.budget_spent())
                break
            update = self.counters["update"]
            self.in_update = update
            t0 = time.perf_counter()
            rollout = distributed.collect(self, s.episodes_per_update)
            t1 = time.perf_counter()
            with self.policy.engine.suspend():  # e.g. vLLM sleeps: its memory is the update's
                metrics = self.learner.update(rollout, update)
            self.policy.sync_engine(update + 1)  # the next rollout and evaluation sample the new weights
            t2 = time.perf_counter()
            metrics.update(rollout_metrics(rollout, self.agent_ids))
            self.counters["update"] += 1
            self.in_update = None
            self.counters["episodes"] += len(rollout.episodes)
            self.counters["decisions"] += len(rollout.decisions)
            self.counters["tokens"] += rollout.num_tokens
            self.counters["train_seconds"] = (self.counters.get("train_seconds", 0.0)
                                              + distributed.agree_on_seconds(self, t2 - t0))
            spent = self.budget_spent()
            metrics.update({f"counters/{k}": float(v) for k, v in self.counters.items() if k != "train_seconds"})
            metrics.update({"time/rollout_s": t1 - t0, "time/update_s": t2 - t1,
                            "time/train_seconds": float(self.counters["train_seconds"]),
                            "time/rollout_tokens_per_s": rollout.num_tokens / max(t1 - t0, 1e-9)})
            done = self.counters["update"]
            last = self.finished  # every update run, or a budget reached
            every = self.cfg.eval.interval
            if (every and done % every == 0) or (last and self.cfg.eval.at_end):
                result = self.evaluate()
                self.final_eval = result if last else None
                metrics.update({"eval/accuracy": result.accuracy, "eval/stderr": result.stderr,
                                "eval/n": float(result.n), "eval/mean_reward": result.mean_reward,
                                "eval/seconds": result.seconds})
                self.keep_if_best(result)
            stopping = distributed.agree_on_stop(self) is not None  # read once: a signal may arrive any time
            if last or stopping or (s.checkpoint_interval and done % s.checkpoint_interval == 0):
                self.save()
            yield metrics
            if stopping and not last:
                log.info("%s: stopped after %d updates", self.stop_requested, done)
                break
            if spent is not None:
                log.info("budget %s used after %d updates (%d episodes, %d sampled tokens); stopping", spent, done,
                         self.counters["episodes"], self.counters["tokens"])
                break

    def close(self) -> None:
        """Release the sampling engine (vLLM's GPU memory and exported adapters); the policy
        builds a new one if asked to generate again."""
        self.policy.close_engine()

    def __enter__(self) -> Trainer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def stop_outcome(self) -> str:
        """What a stop requested now leads to, in words (the signal handler's line says it):
        once the schedule is done (:attr:`finished`: the last update's evaluation, the final one)
        or during the last update, the run completes; otherwise it stops at the next safe point
        with a checkpoint."""
        if self.finished:
            return "every update is done: finishing the run (final evaluation, summary), nothing left to stop"
        if self.in_update is not None and self.in_update + 1 >= self.cfg.schedule.num_updates:
            return "the last update is running: the run completes it and its final evaluation"
        if self.in_update is not None:
            return "stopping after the current update, with a checkpoint"
        return "stopping before the next update, with a checkpoint"

    @property
    def finished(self) -> bool:
        """Whether the schedule is done (every update run, or a budget reached). A stop signal
        that arrives once it is (during the last update or its evaluation) stops nothing: the run
        is complete, and the session records it as such."""
        return self.cfg.schedule.done(self.counters)

    def budget_spent(self) -> str | None:
        """The first budget of the schedule (seconds, episodes, sampled tokens:
        :attr:`~marft_agents.config.ScheduleConfig.BUDGETS`) the counters have reached, as
        ``"schedule.max_episodes = 320"``; None while none is. With ``max_episodes`` a multiple of ``episodes_per_update`` (the config
        requires it) the run stops after exactly that many episodes."""
        return self.cfg.schedule.budget_spent(self.counters)


def prepare_trainer(cfg: TrainConfig, resume: bool = False,
                    model_and_tokenizer: tuple[Any, Any] | None = None) -> Trainer:
    """Build a :class:`Trainer`; with ``resume`` restore the latest checkpoint of ``output_dir``.

    A fresh run (``resume=False``) in an ``output_dir`` that already holds checkpoints is refused,
    before the model is loaded; so is a resume whose evaluation setting (:data:`EVAL_SET_FIELDS`,
    the evaluation env) differs from the checkpoint's.
    """
    found = latest_checkpoint(cfg.output_dir)
    if found is not None and not resume:
        raise FileExistsError(
            f"{cfg.output_dir} already holds checkpoints of a run (latest: {found.name}); continue it with "
            "resume=True (train(cfg, resume=True) or prepare_trainer(cfg, resume=True)), or start afresh in "
            "another output_dir or after deleting that folder"
        )
    if found is not None and resume:  # a changed evaluation setting is refused before the model loads
        check_eval_setting_unchanged(load_checkpoint_config(found), cfg, found)
    trainer = Trainer(cfg, model_and_tokenizer)
    try:
        if resume and not trainer.restore():
            log.warning("resume requested but %s has no checkpoint; starting a fresh run", trainer.output_dir)
    except BaseException:
        trainer.close()  # a restore that fails: the caller never gets the trainer to close
        raise
    return trainer


def iter_train(cfg: TrainConfig, resume: bool = False,
               model_and_tokenizer: tuple[Any, Any] | None = None) -> Iterator[dict[str, float]]:
    """Generator form of :func:`train`: yields every update's metrics as soon as it is done
    (closing the generator, or finishing it, closes the sampling engine)."""
    with prepare_trainer(cfg, resume, model_and_tokenizer) as trainer:
        yield from trainer.run()


def train(cfg: TrainConfig, resume: bool = False, callbacks: Sequence[Callback] = (),
          model_and_tokenizer: tuple[Any, Any] | None = None, *, eval_before: bool = True,
          tensorboard: bool = True, plot: bool = True, handle_signals: bool = True) -> TrainResult:
    """Train as configured, following the same run session as ``marft train``.

    The untrained policy is evaluated first (``eval_before``), every update is logged to
    ``<output_dir>/metrics.{jsonl,csv}`` (and TensorBoard), SIGINT/SIGTERM stop after the current
    update with a checkpoint (``handle_signals``, main thread only), and the run ends with
    ``summary.json`` and ``learning_curve.png`` (``plot``); see :mod:`marft_agents.run.session`.
    ``callbacks`` get ``(update_index, metrics)`` after every update. The config gets the checks
    ``marft train`` runs (:func:`~marft_agents.env_check.check_before_loading`) before the model is loaded.
    """
    from marft_agents.run.session import SessionOptions, run_session

    check_before_loading(cfg, model=model_and_tokenizer is None)
    with prepare_trainer(cfg, resume, model_and_tokenizer) as trainer:  # closes the engine after the final evaluation
        outcome = run_session(trainer, SessionOptions(resume=resume, eval_before=eval_before, tensorboard=tensorboard,
                                                      plot=plot, handle_signals=handle_signals,
                                                      callbacks=tuple(callbacks)))
    return TrainResult(history=outcome.history, output_dir=trainer.output_dir,
                       last_checkpoint=trainer.last_checkpoint, final_eval=outcome.final_eval,
                       best_eval=trainer.best_eval, counters=dict(trainer.counters), policy=trainer.policy,
                       summary=outcome.summary, stopped_by=outcome.stopped_by)
