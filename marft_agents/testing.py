"""Contract tests for learners, installed with marft (the learner counterpart of PettingZoo's
``pettingzoo.test.api_test`` for envs). A plugin's whole test::

    from marft_agents.testing import learner_api_test
    from my_package import MyLearner

    def test_my_learner_follows_the_learner_api():
        learner_api_test(MyLearner)

:func:`learner_api_test` builds real Trainers (``marft_agents.run.trainer.Trainer``) around the
class, on a tiny random Llama (``marft_agents.model.tiny_models``, no file, no download) and a
two-agent test env (one agent when the class's ``max_agents`` is 1), on the CPU, in seconds.
It checks, in this order (each failure is an ``AssertionError`` whose message starts with
``learner_api_test[<check>]``, ``<check>`` one of :data:`CHECKS`; an exception raised by the
learner's own code, in its constructor, ``update``, ``state_dict`` or ``load_state_dict``, fails the
check in progress the same way, naming the exception, its message and the line that raised it,
with the original exception chained):

``interface``
    The class satisfies :class:`marft_agents.learners.interface.Learner` (``check_learner_class``:
    methods, ``value_mode``, ``options_class``; optional ``trains``, ``max_agents``); a
    constructed learner is an instance of it with an int ``group_size >= 1``,
    ``trainable_agents(0)`` names known agents (some, when ``trains``), ``data_parallel`` is None
    or the one-process stand-in ``distributed.SINGLE_PROCESS`` when declared, ``update`` returns a flat ``{str: number}`` dict and ``state_dict()`` goes
    through ``torch.save`` / ``torch.load`` (what checkpoints do).
``options``
    Every field of ``options_class`` has a docstring; the defaults (or ``options``) load and
    survive ``config_to_dict`` -> ``load_config`` (checkpoints and leaderboard records); an
    unknown key, a value of the wrong type for any field, and each mapping of ``bad_options``
    raise the project's ``ConfigError`` with a one-line message. A class without options must
    refuse a non-empty ``learner:`` section the same way.
``update direction``
    One update on a fixed rollout: the collector plays the test env, then every episode gets a
    fixed team reward, +1 for the first half of each task group's episodes and -1 for the
    second half (0 for a middle one of an odd group; without groups, +1 and -1 alternate
    between episodes), paid on the episode's last decision, with every recorded critic value 0
    (so whatever baseline a learner uses, the +1 responses have the higher advantage). After
    ``update(rollout, 0)``, for *each* agent that ``trainable_agents(0)`` names, its adapter must
    have changed and the advantage-weighted change of its responses' log-probs,
    ``sum(reward_i * (log p_after(response_i) - log p_before(response_i)))`` over that agent's
    decisions, must be > 0: its +1 responses became more likely relative to its -1 ones. Checked
    per agent, so a learner that never trains one agent fails even when the other agent's change
    carries the sum. To first order the change is ``lr * |gradient|`` for a learner whose loss
    goes the right way, and its negative for one whose sign is flipped. For a class with
    ``trains = False`` the check is instead that no adapter parameter changed.
``frozen base``
    The same update must leave every weight of the base model bit-identical (the base is shared
    by every agent and is the reference model of KL terms; a learner trains adapters only:
    ``policy.adapter_parameters``). Checked right after the update, before its direction, so a
    learner that moves the base fails here whatever its direction.
``state round trip``
    A fresh learner that loads a trained learner's ``state_dict()`` (after ``torch.save`` /
    ``torch.load``) returns an equal ``state_dict()``.
``exact resume``
    Learner A updates twice; learner B, built fresh, gets A's adapters and ``state_dict()`` after
    the first update (and the global RNG states, as ``Trainer.restore`` does) and runs the second
    update on the same rollout: every adapter and value-head tensor must be bit-identical to
    A's. These two updates' rewards are +1 and -0.5 (:func:`fix_rewards`'s ``high`` and ``low``),
    whose mean is not 0, so that running statistics a learner keeps (a reward baseline, a
    normaliser) move during the first update. This fails for a learner that does not save its
    optimizer state, its RNG or such running state.

A learner whose defaults cannot run here passes ``options`` (its ``learner:`` section) or
``overrides`` (dotted config keys, e.g. ``{"schedule.actor_lr": 1e-3}``); see
:func:`learner_api_test`.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import io
import itertools
import math
import numbers
import tempfile
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

import marft_envs
from marft_envs import RoundOutcome, Task, TextTaskEnv

CHECKS: tuple[str, ...] = ("interface", "options", "update direction", "frozen base", "state round trip",
                           "exact resume")
"""The names a failure message starts with (``learner_api_test[<check>]``), in the order listed in
the module docstring (``frozen base`` is checked on the update of ``update direction``, first)."""

RESUME_REWARDS = (1.0, -0.5)
"""The (high, low) team rewards of the ``exact resume`` updates: their mean is not 0, so a
learner's running statistics of rewards move (:func:`fix_rewards`)."""

API_TEST_ENV = "marft-testing/Echo-v0"
"""The env :func:`learner_api_test` plays (registered on first use): short tasks, one round."""

_DUAL = {"name": "api_test_dual", "roles": [{"name": "reasoner", "system_prompt": "Think."},
                                            {"name": "actor", "system_prompt": "Answer.", "graded": True}]}
_SOLO = {"name": "api_test_solo", "roles": [{"name": "actor", "system_prompt": "Answer.", "graded": True}]}
_WRONG_VALUES: tuple[Any, ...] = ({"learner_api_test": "a mapping"}, ["learner_api_test"], "learner_api_test")
"""Values tried for each option field until one is refused (a field typed ``Any`` accepts all)."""
_UNKNOWN_KEY = "learner_api_test_unknown_key"


class _EchoTasks:
    """Sixteen short tasks; grading is irrelevant (the test fixes the rewards)."""

    def __len__(self) -> int:
        return 16

    def __getitem__(self, index: int) -> Task:
        return Task(task_id=f"echo/{index}", prompt=f"Say {index}.", answer=None)


class ApiTestEnv(TextTaskEnv):
    """The test env of :func:`learner_api_test`: one round, short prompts, team reward 0."""

    metadata = {"name": "marft_api_test_v0", "render_modes": ["ansi", "human"], "is_parallelizable": True}

    def __init__(self, **kwargs: Any):
        kwargs.setdefault("profile", _DUAL)
        kwargs.setdefault("horizon", 1)
        super().__init__(_EchoTasks(), **kwargs)

    def grade_round(self, task: Task, outputs: dict[str, str], round_index: int) -> RoundOutcome:
        return RoundOutcome(team_reward=0.0, solved=False, feedback="")


def _fail(check: str, label: str, message: str) -> AssertionError:
    return AssertionError(f"learner_api_test[{check}] {label}: {message}")


def _raised_where(err: BaseException) -> str:
    """``file:line in function`` of the innermost frame of ``err``'s traceback outside installed
    packages and the standard library (the learner's own code, as far as it can be told), else
    the innermost frame."""
    import sysconfig
    import traceback

    frames = traceback.extract_tb(err.__traceback__)
    if not frames:
        return "?"
    library = tuple(str(Path(sysconfig.get_paths()[key]).resolve()) for key in ("purelib", "platlib", "stdlib"))
    own = [f for f in frames if not str(Path(f.filename).resolve()).startswith(library)]
    frame = (own or frames)[-1]
    return f"{frame.filename}:{frame.lineno} in {frame.name}"


@contextlib.contextmanager
def _learner_code(check: str, label: str, what: str) -> Iterator[None]:
    """Inside, an exception of the learner's code (``what``, e.g. ``"update(rollout, 0)"``) fails
    ``check``: ``learner_api_test[<check>] <label>: <what> raised <Type>: <message> (at
    <file:line in function>)``, the original exception chained."""
    try:
        yield
    except AssertionError as err:
        if str(err).startswith("learner_api_test["):  # a failure of this test already
            raise
        raise _fail(check, label, f"{what} raised AssertionError: {err} (at {_raised_where(err)})") from err
    except Exception as err:  # noqa: BLE001 - any exception here is the learner's to explain
        message = str(err).splitlines()[0] if str(err) else ""
        raise _fail(check, label, f"{what} raised {type(err).__name__}: {message} (at {_raised_where(err)})") from err


def learner_api_test(learner_class: type, options: Mapping[str, Any] | None = None, *,
                     bad_options: Sequence[Mapping[str, Any]] = (), overrides: Mapping[str, Any] | None = None,
                     device: str = "cpu", seed: int = 0) -> dict[str, Any]:
    """Check ``learner_class`` against the learner contract (see the module docstring).

    Args:
        learner_class: the class, as ``register_learner`` would take it (it is registered under
            a temporary name for the duration of the test, then forgotten).
        options: the ``learner:`` section to run with (default: the options' defaults).
        bad_options: ``learner:`` sections your options must refuse (e.g. ``[{"group_size": 1}]``),
            each with a one-line ``ConfigError``.
        overrides: dotted config keys over the test's small config (e.g. ``{"schedule.actor_lr":
            1e-3}``).
        device: where the tiny model runs.
        seed: the config's seed.

    Returns:
        What was measured: ``{"name", "group_size", "direction", "positive_change",
        "negative_change", "decisions", "per_agent"}`` (``direction`` is the advantage-weighted
        log-prob change over every trained agent, ``per_agent`` the same per agent; None and
        ``{}`` for a class with ``trains = False``).

    Raises:
        AssertionError: ``learner_api_test[<check>] <class>: <what is wrong>``.
    """
    cls = learner_class
    label = f"{getattr(cls, '__module__', '?')}.{getattr(cls, '__qualname__', repr(cls))}"
    _check_class(cls, label)
    with _registered(cls) as name, _single_thread(), _global_rng_kept(), \
            tempfile.TemporaryDirectory(prefix="learner_api_test_") as tmp:
        run = _Run(cls, name, label, dict(options or {}), dict(overrides or {}), device, seed, Path(tmp))
        run.check_options(bad_options)
        group_size = run.probe()
        direction = run.check_update_direction()
        run.check_resume()
    return {"name": label, "group_size": group_size, **direction}


# -- interface -------------------------------------------------------------------------------------
def _check_class(cls: Any, label: str) -> None:
    from marft_agents.learners.interface import check_learner_class

    try:
        check_learner_class(label, cls)
    except TypeError as err:
        raise _fail("interface", label, str(err)) from None
    declared = getattr(cls, "data_parallel", None)
    if not _one_process(declared):
        raise _fail("interface", label, f"data_parallel must be None or distributed.SINGLE_PROCESS on the class "
                                       f"(the Trainer sets it under torchrun), got {declared!r}")


def _one_process(data_parallel: Any) -> bool:
    """Whether a ``data_parallel`` value is one a learner may hold before the Trainer sets it."""
    from marft_agents.runtime.distributed import SingleProcess

    return data_parallel is None or isinstance(data_parallel, SingleProcess)


def _check_instance(learner: Any, name: str, label: str, agent_ids: list[str]) -> None:
    from marft_agents.learners.interface import check_learner_instance

    try:
        check_learner_instance(name, learner)
    except TypeError as err:
        raise _fail("interface", label, str(err)) from None
    if not _one_process(getattr(learner, "data_parallel", None)):
        raise _fail("interface", label, "data_parallel must be None or distributed.SINGLE_PROCESS until the "
                                       "Trainer sets it (one process here)")
    agents = learner.trainable_agents(0)
    if not isinstance(agents, list) or not set(agents) <= set(agent_ids):
        raise _fail("interface", label, f"trainable_agents(0) must be a list of the env's agents {agent_ids}, "
                                       f"got {agents!r}")
    if _trains(type(learner)) and not agents:
        raise _fail("interface", label, "trains is True but trainable_agents(0) is empty")


def _trains(cls: type) -> bool:
    return bool(getattr(cls, "trains", True))  # optional member, default True (learners/interface.py)


def _check_metrics(metrics: Any, label: str) -> None:
    if not isinstance(metrics, dict):
        raise _fail("interface", label, f"update() must return a dict of metrics, got {type(metrics).__name__}")
    bad = {k: v for k, v in metrics.items()
           if not isinstance(k, str) or isinstance(v, bool) or not isinstance(v, numbers.Real)}
    if bad:
        key, value = next(iter(bad.items()))
        raise _fail("interface", label, f"update() must return flat {{str: float}} metrics; {key!r}: "
                                       f"{type(value).__name__} {value!r}")


def _torch_round_trip(state: Any, label: str) -> Any:
    """``state`` through ``torch.save`` / ``torch.load`` as a checkpoint stores it."""
    if not isinstance(state, dict):
        raise _fail("interface", label, f"state_dict() must return a dict, got {type(state).__name__}")
    buffer = io.BytesIO()
    try:
        torch.save(state, buffer)
    except Exception as err:  # noqa: BLE001 - any failure here is the learner's
        raise _fail("interface", label, f"state_dict() cannot be torch.save'd: {type(err).__name__}: {err}") from None
    buffer.seek(0)
    return torch.load(buffer, map_location="cpu", weights_only=False)


# -- the test's runs --------------------------------------------------------------------------------
@dataclasses.dataclass
class _Run:
    cls: type
    name: str
    label: str
    options: dict[str, Any]
    overrides: dict[str, Any]
    device: str
    seed: int
    tmp: Path
    episodes: int = 4
    _count: Any = dataclasses.field(default_factory=itertools.count)

    @property
    def profile(self) -> dict[str, Any]:
        limit = getattr(self.cls, "max_agents", None)
        return _SOLO if limit is not None and limit < 2 else _DUAL

    def config_data(self, learner: Any = None, minibatch: int = 64) -> dict[str, Any]:
        return {
            "algorithm": self.name,
            "learner": dict(self.options) if learner is None else learner,
            "seed": self.seed,
            "model": {"device": self.device, "dtype": "float32"},
            "env": {"id": API_TEST_ENV, "kwargs": {"profile": self.profile, "horizon": 1}, "num_envs": 2},
            "sampling": {"max_new_tokens": 6, "temperature": 1.0},
            "schedule": {"num_updates": 2, "episodes_per_update": self.episodes, "ppo_epochs": 1,
                         "minibatch_size": minibatch, "actor_lr": 1e-2, "critic_lr": 1e-2,
                         "checkpoint_interval": 0},
            "eval": {"at_end": False, "n_problems": 2, "num_envs": 2},
            "output_dir": str(self.tmp / f"run{next(self._count)}"),
        }

    def config(self, learner: Any = None, minibatch: int = 64) -> Any:
        from marft_agents.config import load_config

        return load_config(self.config_data(learner, minibatch), overrides=dict(self.overrides))

    def model(self) -> tuple[Any, Any]:
        from marft_agents.model.tiny_models import tiny_model_and_tokenizer

        model, tokenizer = tiny_model_and_tokenizer(seed=self.seed, hidden_size=32, num_layers=1)
        return model.to(self.device), tokenizer

    def trainer(self, check: str, minibatch: int = 64) -> Any:
        """A Trainer around the class (a failure while building it fails ``check``)."""
        from marft_agents.run.trainer import Trainer

        cfg, model = self.config(minibatch=minibatch), self.model()
        with _learner_code(check, self.label, "building a Trainer around the learner"):
            return Trainer(cfg, model)

    # -- options -------------------------------------------------------------------------------
    def check_options(self, bad_options: Sequence[Mapping[str, Any]]) -> None:
        from marft_agents.config import config_to_dict, load_config
        from marft_agents.config_schema import ConfigError, field_docs

        options_class = self.cls.options_class
        cases: list[tuple[str, dict[str, Any]]] = []
        if options_class is None:
            cases.append(("a learner: section for a class without options", {_UNKNOWN_KEY: 1}))
        else:
            fields = [f.name for f in dataclasses.fields(options_class) if f.init]
            undocumented = sorted(set(fields) - set(field_docs(options_class)))
            if undocumented:
                raise _fail("options", self.label, f"{options_class.__name__} fields without a docstring under "
                                                   f"them: {undocumented} (marft config --show prints them)")
            try:
                cfg = self.config()
            except ConfigError as err:
                raise _fail("options", self.label, f"the options {self.options} do not load: {err}") from None
            if not isinstance(cfg.learner, options_class):
                raise _fail("options", self.label, f"cfg.learner is {type(cfg.learner).__name__}, "
                                                   f"not {options_class.__name__}")
            saved = config_to_dict(cfg)
            if load_config(saved).learner != cfg.learner:
                raise _fail("options", self.label, f"the saved options {saved['learner']} do not load back equal")
            cases.append((f"the unknown key {_UNKNOWN_KEY!r}", {**self.options, _UNKNOWN_KEY: 1}))
            for field in fields:
                for wrong in _WRONG_VALUES:
                    section = {**self.options, field: wrong}
                    if self._refused(section):
                        cases.append((f"learner.{field} = {wrong!r}", section))
                        break
        cases += [(f"bad_options {dict(section)}", dict(section)) for section in bad_options]
        for what, section in cases:
            try:
                self.config(learner=section)
            except ConfigError as err:
                message = str(err)
                if "\n" in message or not message.strip():
                    raise _fail("options", self.label, f"{what}: the ConfigError must be one line, got "
                                                       f"{message!r}") from None
                continue
            except Exception as err:  # noqa: BLE001 - anything but ConfigError is the finding
                raise _fail("options", self.label, f"{what} raised {type(err).__name__} ({err}), not the "
                                                   "project's ConfigError (raise ValueError in __post_init__)") from None
            raise _fail("options", self.label, f"{what} was accepted; it must raise ConfigError")

    def _refused(self, section: dict[str, Any]) -> bool:
        from marft_agents.config_schema import ConfigError

        try:
            self.config(learner=section)
        except ConfigError:
            return True
        except Exception:  # noqa: BLE001 - reported by the caller's second attempt
            return True
        return False

    # -- construction --------------------------------------------------------------------------
    def probe(self) -> int:
        """Build one learner as the Trainer does; check the instance; size the rollouts."""
        from marft_agents.learners import make_learner
        from marft_agents.run.trainer import build_policy

        cfg = self.config()
        agent_ids = list(marft_envs.make(API_TEST_ENV, **cfg.env.kwargs).possible_agents)
        model, tokenizer = self.model()
        policy = build_policy(cfg, model, tokenizer, agent_ids)
        with _learner_code("interface", self.label, "building the learner as the Trainer does"):
            try:  # make_learner checks the instance too (learners.interface.check_learner_instance)
                learner = make_learner(self.name, policy, cfg, agent_ids)
            except TypeError as err:
                raise _fail("interface", self.label, f"building the learner as the Trainer does: {err}") from None
        _check_instance(learner, self.name, self.label, agent_ids)
        with _learner_code("interface", self.label, "state_dict()"):
            state = learner.state_dict()
        _torch_round_trip(state, self.label)
        k = learner.group_size
        self.episodes = k * (2 if k > 1 else 4)  # an even number of groups with both signs of reward
        return k

    # -- update direction and frozen base -------------------------------------------------------
    def check_update_direction(self) -> dict[str, Any]:
        trainer = self.trainer("update direction")
        learner, policy = trainer.learner, trainer.policy
        _check_instance(learner, self.name, self.label, trainer.agent_ids)
        rollout = trainer.collector.collect(self.episodes)
        rewards = fix_rewards(rollout)
        trained = list(learner.trainable_agents(0))
        rows = [i for i, d in enumerate(rollout.decisions)
                if d.response_ids and rewards[i] != 0 and d.agent_id in trained]
        decisions = [rollout.decisions[i] for i in rows]
        temperature = float(trainer.cfg.sampling.temperature)
        adapters_before, base_before = policy.adapter_state_dict(), base_weights(policy)
        before = sequence_logprobs(policy, decisions, temperature)
        with _learner_code("update direction", self.label, "update(rollout, 0)"):
            metrics = learner.update(rollout, 0)
        _check_metrics(metrics, self.label)
        moved_base = _changed_tensors(base_before, base_weights(policy))
        if moved_base:
            raise _fail("frozen base", self.label, (
                f"update() changed {len(moved_base)} weights of the frozen base model (e.g. {moved_base[:3]}); "
                "a learner trains adapter parameters only (policy.adapter_parameters(name), policy.set_trainable): "
                "the base is shared by every agent and is the reference model of KL terms"))
        after = sequence_logprobs(policy, decisions, temperature)
        changed = _changed_tensors(adapters_before, policy.adapter_state_dict())
        out: dict[str, Any] = {"direction": None, "positive_change": None, "negative_change": None,
                               "decisions": len(rows), "per_agent": {}}
        if not _trains(self.cls):
            if changed:
                raise _fail("update direction", self.label, f"trains is False but update() changed {changed[:3]}")
            return out
        sign = torch.tensor([rewards[i] for i in rows], dtype=torch.float64)
        delta = after - before
        agent_of = [d.agent_id for d in decisions]
        for agent in trained:
            adapter = policy.adapter_for(agent)
            if not any(k.startswith(f"lora/{adapter}/") for k in changed):
                raise _fail("update direction", self.label, (
                    f"trainable_agents(0) names {agent!r}, but one update on a rollout with rewards +1 and -1 "
                    f"changed no parameter of its adapter {adapter!r}: is it in the optimizer, and does its "
                    "loss reach it?"))
            mine = torch.tensor([a == agent for a in agent_of], dtype=torch.bool)
            if not ((sign[mine] > 0).any() and (sign[mine] < 0).any()):
                raise _fail("update direction", self.label, f"the fixed rollout has no responses of {agent!r} of "
                                                            "both signs to compare (empty responses?)")
            score = float((sign[mine] * delta[mine]).sum())
            up, down = float(delta[mine & (sign > 0)].mean()), float(delta[mine & (sign < 0)].mean())
            out["per_agent"][agent] = score
            if not (math.isfinite(score) and score > 0):
                raise _fail("update direction", self.label, (
                    f"after one update on fixed rewards (+1 / -1 per episode of each task group, critic values 0) "
                    f"the advantage-weighted change of agent {agent!r}'s response log-probs is {score:.4g} (mean "
                    f"change {up:+.4g} on its +1 responses, {down:+.4g} on its -1 ones, {int(mine.sum())} "
                    "decisions); it must be > 0 for every trained agent. The update pushes against the advantage "
                    "(is the loss's sign, or the advantage's, flipped?) or does not reach this agent's responses"))
        score = float((sign * delta).sum())
        out.update(direction=score, positive_change=float(delta[sign > 0].mean()),
                   negative_change=float(delta[sign < 0].mean()))
        return out

    # -- state round trip and exact resume -----------------------------------------------------
    def check_resume(self) -> None:
        from marft_agents.run.checkpoint import capture_rng_state, restore_rng_state

        high, low = RESUME_REWARDS
        # Small minibatches: several optimizer steps per update, in an order the learner's RNG draws.
        a = self.trainer("exact resume", minibatch=2)
        first = a.collector.collect(self.episodes)
        fix_rewards(first, high, low)
        with _learner_code("exact resume", self.label, "update(rollout, 0)"):
            a.learner.update(first, 0)
        adapters = a.policy.adapter_state_dict()
        with _learner_code("state round trip", self.label, "state_dict()"):
            saved = _torch_round_trip(a.learner.state_dict(), self.label)
        second = a.collector.collect(self.episodes)
        fix_rewards(second, high, low)
        replay = copy.deepcopy(second)
        rng = capture_rng_state()
        with _learner_code("exact resume", self.label, "update(rollout, 1)"):
            a.learner.update(second, 1)
        want = a.policy.adapter_state_dict()

        b = self.trainer("exact resume", minibatch=2)
        b.policy.load_adapter_state_dict(adapters)
        with _learner_code("state round trip", self.label, "load_state_dict(state)"):
            b.learner.load_state_dict(_torch_round_trip(saved, self.label))
        with _learner_code("state round trip", self.label, "state_dict() after load_state_dict"):
            where = _first_difference(saved, _torch_round_trip(b.learner.state_dict(), self.label))
        if where is not None:
            raise _fail("state round trip", self.label, f"a fresh learner given load_state_dict(state) returns a "
                                                        f"different state_dict(): {where}")
        restore_rng_state(rng)
        with _learner_code("exact resume", self.label, "update(rollout, 1) of the resumed learner"):
            b.learner.update(replay, 1)
        differ = _changed_tensors(want, b.policy.adapter_state_dict())
        if differ:
            raise _fail("exact resume", self.label, (
                f"update 1 of a learner resumed from update 0's state_dict() gives other adapters than the "
                f"uninterrupted learner's ({len(differ)} tensors differ, e.g. {differ[:3]}); save every "
                "optimizer state, RNG state and running statistic (a reward baseline, a normaliser: the "
                f"rewards here, {high:+g} / {low:+g}, move them) in state_dict() and restore it in "
                "load_state_dict()"))


# -- pieces a hand-written learner test can reuse ---------------------------------------------------
def fix_rewards(rollout: Any, high: float = 1.0, low: float = -1.0) -> list[float]:
    """Give ``rollout`` fixed rewards (see ``update direction`` in the module docstring) in place.

    Per task group: the first half of its episodes gets team reward ``high`` (+1), the second
    half ``low`` (-1; a middle episode of an odd group 0); when every group has one episode,
    ``high`` and ``low`` alternate between episodes. The reward is the episode's ``team_return``
    and every agent's return, paid on its last decision (``team_reward``); per-agent rewards
    become 0 and every recorded critic value (``value``, ``token_values``) 0. Returns each
    decision's reward (its episode's).
    """
    if not high > 0 > low:
        raise ValueError(f"fix_rewards needs high > 0 > low, got high={high}, low={low}")
    groups = rollout.groups()
    reward: dict[int, float] = {}
    if all(len(episodes) == 1 for episodes in groups.values()):
        ordered = [groups[g][0] for g in sorted(groups)]
        for n, e in enumerate(ordered):
            reward[e] = 0.0 if n == len(ordered) - 1 and len(ordered) % 2 else (high if n % 2 == 0 else low)
    else:
        for episodes in groups.values():
            half = len(episodes) // 2
            for n, e in enumerate(episodes):
                reward[e] = high if n < half else (low if n >= len(episodes) - half else 0.0)
    for e, episode in enumerate(rollout.episodes):
        r = reward.get(e, 0.0)
        episode.team_return = r
        episode.solved = r > 0
        episode.agent_returns = {agent: r for agent in episode.agent_returns}
        for n, i in enumerate(episode.decisions):
            d = rollout.decisions[i]
            d.team_reward = r if n == len(episode.decisions) - 1 else 0.0
            d.agent_reward = 0.0
            if d.value is not None:
                d.value = 0.0
            if d.token_values is not None:
                d.token_values = [0.0] * len(d.response_ids)
    return [reward.get(d.episode, 0.0) for d in rollout.decisions]


@torch.no_grad()
def sequence_logprobs(policy: Any, decisions: Sequence[Any], temperature: float) -> torch.Tensor:
    """``[N]`` float64: each decision's response log-prob (sum over its tokens) under its adapter."""
    out = torch.zeros(len(decisions), dtype=torch.float64)
    rows: dict[str, list[int]] = defaultdict(list)
    for i, d in enumerate(decisions):
        rows[d.adapter].append(i)
    for adapter, idx in sorted(rows.items()):
        ds = [decisions[i] for i in idx]
        stats = policy.token_logprobs(adapter, [d.prompt_ids for d in ds], [d.response_ids for d in ds],
                                      temperature, with_entropy=False, prefix_lens=[d.prefix_len for d in ds])
        logprobs = stats.logprobs.detach().double().cpu()  # [B, T], 0 on padding
        for j, (i, d) in enumerate(zip(idx, ds)):
            out[i] = logprobs[j, : len(d.response_ids)].sum()
    return out


def base_weights(policy: Any) -> dict[str, torch.Tensor]:
    """A copy of every parameter of the policy's model that belongs to no adapter (the frozen
    base), by name: what the ``frozen base`` check compares before and after an update."""
    adapter = {id(p) for name in policy.adapter_names for p in policy.adapter_parameters(name)}
    return {name: p.detach().clone() for name, p in policy.model.named_parameters() if id(p) not in adapter}


def _changed_tensors(before: Mapping[str, torch.Tensor], after: Mapping[str, torch.Tensor]) -> list[str]:
    keys = sorted(set(before) | set(after))
    return [k for k in keys if k not in before or k not in after or not torch.equal(before[k], after[k])]


def _first_difference(a: Any, b: Any, where: str = "state") -> str | None:
    """Where nested ``a`` and ``b`` differ (None: equal; tensors bit for bit, NaN equals NaN)."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)) or a.shape != b.shape \
                or a.dtype != b.dtype or not torch.equal(torch.nan_to_num(a), torch.nan_to_num(b)):
            return where
        return None
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return None if np.array_equal(np.asarray(a), np.asarray(b), equal_nan=True) else where
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        if set(a) != set(b):
            return f"{where} keys {sorted(map(str, set(a) ^ set(b)))}"
        for key in a:
            found = _first_difference(a[key], b[key], f"{where}[{key!r}]")
            if found:
                return found
        return None
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        if len(a) != len(b):
            return f"{where} (length {len(a)} vs {len(b)})"
        for n, (x, y) in enumerate(zip(a, b)):
            found = _first_difference(x, y, f"{where}[{n}]")
            if found:
                return found
        return None
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return None
    try:
        return None if bool(a == b) else f"{where} ({a!r} vs {b!r})"
    except Exception:  # noqa: BLE001 - objects that cannot compare are different
        return where


# -- plumbing ---------------------------------------------------------------------------------------
def _ensure_env() -> None:
    if API_TEST_ENV not in marft_envs.list_envs():
        marft_envs.register(API_TEST_ENV, f"{__name__}:ApiTestEnv")


@contextlib.contextmanager
def _registered(cls: type) -> Iterator[str]:
    """``cls`` registered under a temporary name (and the test env registered), then forgotten."""
    from marft_agents.learners import registry

    _ensure_env()
    name = f"learner_api_test:{cls.__module__}.{cls.__qualname__}"
    previous = registry._registry.get(name), registry._origin.get(name)
    registry.register_learner(name, cls, replace=True)
    try:
        yield name
    finally:
        registry._registry.pop(name, None)
        registry._origin.pop(name, None)
        if previous[0] is not None:
            registry._registry[name], registry._origin[name] = previous


@contextlib.contextmanager
def _global_rng_kept() -> Iterator[None]:
    """The caller's global RNG states as they were (every Trainer built here reseeds them)."""
    from marft_agents.run.checkpoint import capture_rng_state, restore_rng_state

    state = capture_rng_state()
    try:
        yield
    finally:
        restore_rng_state(state)


@contextlib.contextmanager
def _single_thread() -> Iterator[None]:
    """One intra-op thread: a tiny model gains nothing from more, and results are reproducible."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


__all__ = ["API_TEST_ENV", "CHECKS", "RESUME_REWARDS", "ApiTestEnv", "base_weights", "fix_rewards", "learner_api_test",
           "sequence_logprobs"]
