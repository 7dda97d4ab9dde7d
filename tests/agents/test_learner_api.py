"""``marft_agents.testing.learner_api_test``, the installed learner contract test: every registered
learner, the outside example and the guide's example pass it, and learners that break the contract
(a flipped loss sign, an agent never trained, a trained base model, a forgotten RNG state or running
statistic, an exception in ``update``, a missing member, loose options) fail it at the right check."""

from __future__ import annotations

import importlib.util
import re
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path

import pytest
import torch

import agent_helpers  # noqa: F401 (one intra-op thread, like the other model tests)
from marft_agents.learners import GRPO, ActionLevelMAPPO, EvalOnly, Learner, get_learner, list_learners
from marft_agents.learners.interface import METHODS, REQUIRED_MEMBERS
from marft_agents.learners.registry import BUILTIN_LEARNERS, ENTRY_POINT_GROUP
from marft_agents.engine.attention import training_passes
from marft_agents.testing import CHECKS, learner_api_test

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "marft-rloo"


@pytest.fixture
def rloo(monkeypatch):
    """The example package, importable as an installed one would be."""
    monkeypatch.syspath_prepend(str(EXAMPLE))
    import marft_rloo

    return marft_rloo


def _registered_for_users() -> list[str]:
    """The shipped learners and every installed plugin's (entry points), not the test doubles that
    other test modules register at run time."""
    return sorted(set(BUILTIN_LEARNERS) | {ep.name for ep in entry_points(group=ENTRY_POINT_GROUP)})


# -- what passes ------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", _registered_for_users())
def test_every_registered_learner_passes_the_api_test(name):
    cls = get_learner(name)
    report = learner_api_test(cls)
    if getattr(cls, "trains", True):
        assert report["direction"] > 0 and report["positive_change"] > report["negative_change"]
    else:
        assert report["direction"] is None


def test_the_example_plugins_own_test_runs_the_api_test(rloo):
    spec = importlib.util.spec_from_file_location("marft_rloo_own_test", EXAMPLE / "tests" / "test_rloo.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.learner_api_test is learner_api_test
    module.test_rloo_follows_the_learner_api()
    assert learner_api_test(rloo.RLOO)["direction"] > 0


def test_the_shipped_classes_satisfy_the_interface_they_publish(tmp_path):
    from agent_helpers import small_config

    published = set(Learner.__annotations__) | {m for m in vars(Learner) if m in METHODS}
    assert published == set(REQUIRED_MEMBERS)
    cfg = small_config(tmp_path, algorithm="eval_only")
    assert isinstance(EvalOnly(None, cfg, ["a"]), Learner)
    for cls in (get_learner(name) for name in BUILTIN_LEARNERS):
        assert all(hasattr(cls, m) for m in REQUIRED_MEMBERS), cls  # class defaults: group_size included


# -- what fails, and at which check -----------------------------------------------------------------
class FlippedGRPO(GRPO):
    """GRPO with the advantage's sign flipped: it unlearns what it is rewarded for."""

    def build_samples(self, rollout):
        samples = super().build_samples(rollout)
        for s in samples:
            s.advantages = -s.advantages
        return samples


class FlippedMAPPO(ActionLevelMAPPO):
    """MARFT-A whose policy loss has the wrong sign (a critic learner)."""

    def policy_units(self, samples, logprobs, mask):
        units = super().policy_units(samples, logprobs, mask)
        units.advantages = -units.advantages
        return units


def _flipped_rloo(rloo):
    class FlippedRLOO(rloo.RLOO):
        def advantages(self, rollout):
            return -super().advantages(rollout)

    return FlippedRLOO


@pytest.mark.parametrize("make", [lambda _: FlippedGRPO, lambda _: FlippedMAPPO, _flipped_rloo],
                         ids=["grpo", "mappo_action", "rloo"])
def test_a_flipped_loss_sign_fails_the_update_direction_check(make, rloo):
    with pytest.raises(AssertionError, match=r"^learner_api_test\[update direction\] .*must be > 0") as caught:
        learner_api_test(make(rloo))
    assert "flipped" in str(caught.value)


class NoRngMAPPO(ActionLevelMAPPO):
    """Saves its optimizers but not the minibatch RNG: its state round-trips, its resume is not exact."""

    def state_dict(self):
        state = super().state_dict()
        del state["rng"]
        return state

    def load_state_dict(self, state):
        super().load_state_dict({**state, "rng": self.rng.bit_generator.state})


def test_a_learner_that_does_not_save_its_rng_fails_exact_resume():
    with pytest.raises(AssertionError, match=r"^learner_api_test\[exact resume\] .*NoRngMAPPO.*tensors differ"):
        learner_api_test(NoRngMAPPO)


def test_a_learner_that_loads_nothing_fails_the_state_round_trip(rloo):
    class Forgetful(rloo.RLOO):
        def load_state_dict(self, state):
            pass

    with pytest.raises(AssertionError, match=r"^learner_api_test\[state round trip\] .*different state_dict"):
        learner_api_test(Forgetful)


@dataclass
class NullOptions:
    """Options of the test learner."""

    group_size: int = 2
    """Episodes per task."""
    tag: str = "x"
    """A label."""

    def __post_init__(self) -> None:
        if self.group_size < 1:
            raise ValueError(f"group_size must be >= 1, got {self.group_size}")


class NullLearner:
    """Trains nothing (``trains = False``), with options: the cheapest complete learner."""

    value_mode = None
    options_class = NullOptions
    trains = False

    def __init__(self, policy, cfg, agent_ids):
        self.agent_ids = list(agent_ids)
        self.group_size = cfg.learner.group_size
        self.updates = 0

    def trainable_agents(self, update):
        return []

    def update(self, rollout, update):
        self.updates += 1
        return {"null/episodes": float(len(rollout.episodes))}

    def state_dict(self):
        return {"updates": self.updates}

    def load_state_dict(self, state):
        self.updates = state["updates"]


def test_a_complete_learner_without_training_passes():
    report = learner_api_test(NullLearner, bad_options=[{"group_size": 0}])
    assert report["group_size"] == 2 and report["direction"] is None


def test_interface_failures_name_the_missing_member():
    class NoGroupSize(NullLearner):
        def __init__(self, policy, cfg, agent_ids):
            self.agent_ids = list(agent_ids)

    with pytest.raises(AssertionError, match=r"^learner_api_test\[interface\] .*lacks the members \['group_size'\]"):
        learner_api_test(NoGroupSize)
    class NoOptionsClass:
        value_mode = None
        trainable_agents, update = NullLearner.trainable_agents, NullLearner.update
        state_dict, load_state_dict = NullLearner.state_dict, NullLearner.load_state_dict

    with pytest.raises(AssertionError, match=r"^learner_api_test\[interface\] .*lacks the class attributes "
                                             r"\['options_class'\]"):
        learner_api_test(NoOptionsClass)

    class TensorMetrics(NullLearner):
        def update(self, rollout, update):
            return {"null/loss": torch.tensor(1.0)}

    with pytest.raises(AssertionError, match=r"^learner_api_test\[interface\] .*flat \{str: float\}.*Tensor"):
        learner_api_test(TensorMetrics)

    class TrainsNobody(NullLearner):
        trains = True

    with pytest.raises(AssertionError, match=r"^learner_api_test\[interface\] .*trainable_agents\(0\) is empty"):
        learner_api_test(TrainsNobody)


def test_options_failures_are_reported():
    with pytest.raises(AssertionError, match=r"^learner_api_test\[options\] .*bad_options \{'tag': 'y'\} was accepted"):
        learner_api_test(NullLearner, bad_options=[{"tag": "y"}])

    @dataclass
    class Undocumented:
        group_size: int = 1

    with pytest.raises(AssertionError, match=r"^learner_api_test\[options\] .*without a docstring.*group_size"):
        learner_api_test(type("U", (NullLearner,), {"options_class": Undocumented}))

    @dataclass
    class Crashing:
        """Options whose check raises the wrong exception."""

        group_size: int = 1
        """Episodes per task."""

        def __post_init__(self) -> None:
            if self.group_size > 5:
                raise KeyError("too big")

    with pytest.raises(AssertionError, match=r"^learner_api_test\[options\] .*raised KeyError .*not the project's ConfigError"):
        learner_api_test(type("C", (NullLearner,), {"options_class": Crashing}), bad_options=[{"group_size": 9}])


def test_an_untrained_learner_must_leave_the_adapters_alone():
    class SecretlyTrains(NullLearner):
        def __init__(self, policy, cfg, agent_ids):
            super().__init__(policy, cfg, agent_ids)
            self.policy = policy

        def update(self, rollout, update):
            with torch.no_grad():
                for name in self.policy.adapter_names:
                    for p in self.policy.adapter_parameters(name):
                        p.add_(0.01)
            return super().update(rollout, update)

    with pytest.raises(AssertionError, match=r"^learner_api_test\[update direction\] .*trains is False but update"):
        learner_api_test(SecretlyTrains)


def test_the_api_test_leaves_no_registration_rng_or_thread_change_behind():
    before, threads, rng = list_learners(), torch.get_num_threads(), torch.get_rng_state()
    with pytest.raises(AssertionError):
        learner_api_test(FlippedGRPO)
    learner_api_test(NullLearner)
    assert list_learners() == before and torch.get_num_threads() == threads
    assert torch.equal(torch.get_rng_state(), rng)
    assert CHECKS == ("interface", "options", "update direction", "frozen base", "state round trip", "exact resume")


def test_a_resume_uses_the_configured_learning_rates_and_keeps_the_moments(tmp_path):
    """torch's ``Optimizer.load_state_dict`` restores the saved learning rates: a resume asked to
    continue with a new ``actor_lr`` / ``value_head_lr`` would silently keep the old ones. The
    learner re-applies its config's rates after loading; the AdamW moments are the saved ones."""
    from agent_helpers import small_config, tiny_on_device
    from marft_agents.run.trainer import iter_train, prepare_trainer

    def model():
        return tiny_on_device(seed=0, hidden_size=32, num_layers=1)

    first = iter_train(small_config(tmp_path, **{"schedule.value_head_lr": 1e-3}), model_and_tokenizer=model())
    next(first)  # one update, checkpointed
    first.close()
    cfg = small_config(tmp_path, **{"schedule.actor_lr": 3e-3, "schedule.critic_lr": 4e-3,
                                    "schedule.value_head_lr": 5e-3})
    trainer = prepare_trainer(cfg, resume=True, model_and_tokenizer=model())
    rates = {name: [g["lr"] for g in opt.param_groups] for name, opt in trainer.learner.optimizers.items()}
    assert rates.pop("critic") == [4e-3, 5e-3]  # the adapter's group, then the value head's
    assert rates and all(r == [3e-3] for r in rates.values()), rates
    moments = [s for opt in trainer.learner.optimizers.values() for s in opt.state.values()]
    assert moments and all(float(s["exp_avg"].abs().sum()) > 0 for s in moments)  # loaded (a fresh one has none)


def test_init_adapters_starts_a_fresh_run_from_another_runs_adapters(tmp_path):
    """``init_adapters``: the new run's policy (and value head) starts as the source run's last
    checkpoint, with a fresh optimizer and counters; a missing source or one that does not fit
    this config is one ConfigError line before training."""
    from agent_helpers import small_config, tiny_on_device
    from marft_agents.run.checkpoint import load_adapters
    from marft_agents.config import ConfigError
    from marft_agents.run.trainer import iter_train, prepare_trainer

    def model():
        return tiny_on_device(seed=0, hidden_size=32, num_layers=1)

    source = iter_train(small_config(tmp_path / "a"), model_and_tokenizer=model())
    next(source)  # one update, checkpointed
    source.close()
    saved = load_adapters(tmp_path / "a" / "run")
    fresh = prepare_trainer(small_config(tmp_path / "b"), model_and_tokenizer=model()).policy.adapter_state_dict()
    assert any(not torch.equal(saved[k], fresh[k]) for k in saved)  # the update moved something
    trainer = prepare_trainer(small_config(tmp_path / "c", init_adapters=str(tmp_path / "a" / "run")),
                              model_and_tokenizer=model())
    started = trainer.policy.adapter_state_dict()
    assert saved.keys() == started.keys() and all(torch.equal(saved[k], started[k].cpu()) for k in saved)
    assert all(not opt.state for opt in trainer.learner.optimizers.values())
    assert trainer.counters["update"] == 0
    # a run without a critic (the group baseline) starts from the source's policy adapters only
    grouped = prepare_trainer(small_config(tmp_path / "g", init_adapters=str(tmp_path / "a" / "run"),
                                           **{"advantage.baseline": "group", "schedule.group_size": 2}),
                              model_and_tokenizer=model())
    assert not grouped.policy.critic_adapters
    policy_keys = [k for k in saved if k.startswith("lora/policy_")]
    started = grouped.policy.adapter_state_dict()
    assert policy_keys and sorted(started) == sorted(policy_keys)
    assert all(torch.equal(saved[k], started[k].cpu()) for k in policy_keys)
    with pytest.raises(ConfigError, match="init_adapters: .*expected a checkpoint folder"):
        prepare_trainer(small_config(tmp_path / "d", init_adapters=str(tmp_path / "nowhere")),
                        model_and_tokenizer=model())
    with pytest.raises(ConfigError, match="does not fit this config's adapters"):
        prepare_trainer(small_config(tmp_path / "e", init_adapters=str(tmp_path / "a" / "run"), **{"lora.r": 4}),
                        model_and_tokenizer=model())


# -- an outside learner written from ADDING_A_LEARNER.md, and broken copies of it -------------------
@dataclass
class ReinforceOptions:
    """Options of the outside REINFORCE learner."""

    lr: float = 1e-2
    """AdamW learning rate of every agent adapter."""
    baseline_decay: float = 0.5
    """Weight of the old value in the running reward baseline."""


class Reinforce:
    """REINFORCE with a running-mean reward baseline (state a resume must restore), written as the
    guide says: an optimizer over the agents' adapters, one loss backwarded per adapter."""

    value_mode = None
    options_class = ReinforceOptions
    group_size = 1

    def __init__(self, policy, cfg, agent_ids):
        self.policy, self.opts = policy, cfg.learner
        self.agent_ids = list(agent_ids)
        self.temperature = cfg.sampling.temperature
        self.baseline = 0.0
        self.optimizer = torch.optim.AdamW(self.parameters(), lr=self.opts.lr)

    def parameters(self):
        adapters = sorted({self.policy.adapter_for(a) for a in self.agent_ids})
        return [p for name in adapters for p in self.policy.adapter_parameters(name)]

    def trainable_agents(self, update):
        return list(self.agent_ids)

    def advantages(self, rollout):
        returns = torch.tensor([rollout.episodes[d.episode].agent_returns[d.agent_id] for d in rollout.decisions])
        return returns - self.baseline, returns

    def update(self, rollout, update):
        advantages, returns = self.advantages(rollout)  # [N decisions]
        self.policy.set_trainable(set(self.agent_ids), critic=False)
        self.optimizer.zero_grad(set_to_none=True)
        total = 0.0
        with training_passes():
            for adapter in sorted({d.adapter for d in rollout.decisions}):
                rows = [i for i, d in enumerate(rollout.decisions) if d.adapter == adapter]
                ds = [rollout.decisions[i] for i in rows]
                stats = self.policy.token_logprobs(adapter, [d.prompt_ids for d in ds], [d.response_ids for d in ds],
                                                   self.temperature, prefix_lens=[d.prefix_len for d in ds])
                loss = -(advantages[rows] * stats.logprobs.sum(-1)).sum() / len(rollout.decisions)
                loss.backward()
                total += float(loss.detach())
        self.optimizer.step()
        decay = self.opts.baseline_decay
        self.baseline = decay * self.baseline + (1 - decay) * float(returns.mean())
        return {"losses/policy_loss": total, "reinforce/baseline": self.baseline}

    def state_dict(self):
        return {"optimizer": self.optimizer.state_dict(), "baseline": self.baseline}

    def load_state_dict(self, state):
        self.optimizer.load_state_dict(state["optimizer"])
        self.baseline = state["baseline"]


def test_an_outside_learner_written_from_the_guide_passes_and_every_agent_moves_the_right_way():
    report = learner_api_test(Reinforce)
    assert set(report["per_agent"]) == {"reasoner_0", "actor_0"}
    assert all(score > 0 for score in report["per_agent"].values())


class LeavesOneAgentOut(Reinforce):
    """Claims both agents, but its optimizer holds the first agent's adapter only."""

    def parameters(self):
        return list(self.policy.adapter_parameters(self.policy.adapter_for(self.agent_ids[0])))


class PushesOneAgentBackwards(Reinforce):
    """Trains the second agent against its advantage, gently: the first agent's change carries the
    summed direction score."""

    def advantages(self, rollout):
        advantages, returns = super().advantages(rollout)
        second = torch.tensor([d.agent_id == self.agent_ids[1] for d in rollout.decisions])
        return torch.where(second, -0.1 * advantages, advantages), returns


def test_an_agent_never_trained_fails_even_when_the_other_carries_the_sum():
    with pytest.raises(AssertionError, match=r"^learner_api_test\[update direction\] .*LeavesOneAgentOut: "
                                             r"trainable_agents\(0\) names 'actor_0'.*changed no parameter"):
        learner_api_test(LeavesOneAgentOut)
    with pytest.raises(AssertionError, match=r"^learner_api_test\[update direction\] .*PushesOneAgentBackwards: .*"
                                             r"agent 'actor_0'.*must be > 0 for every trained agent"):
        learner_api_test(PushesOneAgentBackwards)


class TrainsTheBase(Reinforce):
    """Also puts the frozen base model's weights in its optimizer."""

    def parameters(self):
        adapters = {id(p) for name in self.policy.adapter_names for p in self.policy.adapter_parameters(name)}
        base = [p for p in self.policy.model.parameters() if id(p) not in adapters]
        for p in base:
            p.requires_grad_(True)
        return super().parameters() + base


def test_a_learner_that_trains_the_base_model_fails_saying_so():
    with pytest.raises(AssertionError, match=r"^learner_api_test\[frozen base\] .*TrainsTheBase: update\(\) changed "
                                             r"\d+ weights of the frozen base model") as caught:
        learner_api_test(TrainsTheBase)
    assert "optimizer state" not in str(caught.value)


class ForgetsItsBaseline(Reinforce):
    """Saves its optimizer but not its running reward baseline: a resume starts the baseline at 0."""

    def state_dict(self):
        return {"optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state):
        self.optimizer.load_state_dict(state["optimizer"])


def test_a_learner_that_drops_its_running_state_fails_exact_resume(monkeypatch):
    import marft_agents.testing as testing

    with pytest.raises(AssertionError, match=r"^learner_api_test\[exact resume\] .*ForgetsItsBaseline.*running "
                                             r"statistic"):
        learner_api_test(ForgetsItsBaseline)
    # under rewards that average zero the baseline never moves, and the gap would go unseen
    monkeypatch.setattr(testing, "RESUME_REWARDS", (1.0, -1.0))
    learner_api_test(ForgetsItsBaseline)


class BreaksInUpdate(Reinforce):
    """A bug inside ``update``: a key its rollout does not have."""

    def advantages(self, rollout):
        return rollout.episodes[0].agent_returns["nobody"], None


def test_an_exception_inside_update_names_its_cause_under_the_check_prefix():
    with pytest.raises(AssertionError, match=r"^learner_api_test\[update direction\] .*BreaksInUpdate: "
                                             r"update\(rollout, 0\) raised KeyError: 'nobody' \(at .*"
                                             r"test_learner_api\.py:\d+ in advantages\)") as caught:
        learner_api_test(BreaksInUpdate)
    assert isinstance(caught.value.__cause__, KeyError)


# -- the guide's complete example ---------------------------------------------------------------------
def _guide_example() -> str:
    guide = (REPO / "marft_agents" / "ADDING_A_LEARNER.md").read_text(encoding="utf-8")
    section = guide[guide.index("## 5. A complete learner"):guide.index("## 6. Register it")]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    assert len(blocks) == 1, "section 5 of the guide shows the example in one python block"
    return blocks[0]


def test_the_guide_shows_the_whole_example_and_it_passes_the_contract(tmp_path, monkeypatch):
    """Section 5's block, saved as a module of its own and imported, is a learner that passes."""
    import sys

    code = _guide_example()
    assert code == (EXAMPLE / "marft_rloo" / "__init__.py").read_text(encoding="utf-8")
    assert "training_passes()" in code and "loss.backward()" in code and "..." not in code
    path = tmp_path / "guide_example.py"
    path.write_text(code, encoding="utf-8")
    spec = importlib.util.spec_from_file_location("guide_example", path)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "guide_example", module)
    spec.loader.exec_module(module)
    report = learner_api_test(module.RLOO, bad_options=[{"group_size": 1}])
    assert all(score > 0 for score in report["per_agent"].values())
