"""One lifecycle: every entry point that builds a trainer (or, to evaluate only, a policy) holds it
in a context whose end closes the sampling engine, on error too; the collector asks the policy's
engine for its capabilities instead of looking its class up by name."""

from __future__ import annotations

import dataclasses

import pytest
import yaml

import marft_agents.model.loading as models
from agent_helpers import load_tiny_model, small_config, tiny_on_device
from marft_agents.config import config_to_dict
from marft_agents.engine.base import EngineSettings, LoopEngine


@dataclasses.dataclass
class Engines:
    """Every sampling engine built during a test, and those closed."""

    built: list[int] = dataclasses.field(default_factory=list)
    closed: list[int] = dataclasses.field(default_factory=list)

    def all_closed(self) -> bool:
        return bool(self.built) and sorted(self.built) == sorted(self.closed)


@pytest.fixture
def engines(monkeypatch):
    record = Engines()
    init, close = LoopEngine.__init__, LoopEngine.close

    def recording_init(self, policy):
        init(self, policy)
        record.built.append(id(self))

    def recording_close(self):
        record.closed.append(id(self))
        close(self)

    monkeypatch.setattr(LoopEngine, "__init__", recording_init)
    monkeypatch.setattr(LoopEngine, "close", recording_close)
    monkeypatch.setattr(models, "load_model_and_tokenizer", load_tiny_model)
    return record


def _model():
    return tiny_on_device(seed=0, hidden_size=32, num_layers=1)


def _yaml(tmp_path, **overrides):
    cfg = small_config(tmp_path, **{"schedule.num_updates": 1, **overrides})
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(config_to_dict(cfg)))
    return path, cfg


def test_train_closes_its_engine(tmp_path, engines):
    from marft_agents.run.trainer import train

    train(small_config(tmp_path, **{"schedule.num_updates": 1}), model_and_tokenizer=_model(), plot=False,
          tensorboard=False)
    assert engines.all_closed(), engines


def test_iter_train_closes_its_engine_when_the_caller_stops_early(tmp_path, engines):
    from marft_agents.run.trainer import iter_train

    run = iter_train(small_config(tmp_path), model_and_tokenizer=_model())
    next(run)
    assert not engines.closed  # still running: the engine serves the next update
    run.close()
    assert engines.all_closed(), engines


def test_a_trainer_closes_its_engine_when_the_block_raises(tmp_path, engines):
    from marft_agents.run.trainer import prepare_trainer

    with pytest.raises(RuntimeError, match="boom"):
        with prepare_trainer(small_config(tmp_path), model_and_tokenizer=_model()) as trainer:
            trainer.evaluate()
            raise RuntimeError("boom")
    assert engines.all_closed(), engines


def test_a_restore_that_fails_closes_the_engine_it_built(tmp_path, engines, monkeypatch):
    from marft_agents.run.trainer import Trainer, iter_train, prepare_trainer

    first = iter_train(small_config(tmp_path), model_and_tokenizer=_model())
    next(first)  # one update, checkpointed
    first.close()

    def broken_restore(self, path=None):
        self.policy.engine  # noqa: B018 - builds the engine, as a restore's sync may
        raise RuntimeError("damaged checkpoint")

    monkeypatch.setattr(Trainer, "restore", broken_restore)
    with pytest.raises(RuntimeError, match="damaged checkpoint"):
        prepare_trainer(small_config(tmp_path), resume=True, model_and_tokenizer=_model())
    assert engines.all_closed(), engines


def test_marft_train_and_marft_eval_close_their_engines(tmp_path, engines):
    from marft_agents.cli import main

    path, _ = _yaml(tmp_path)
    assert main(["train", "--config", str(path), "--quiet", "--no-tensorboard"]) == 0
    assert engines.all_closed(), engines
    trained = len(engines.built)
    assert main(["eval", "--config", str(path), "--quiet", "--checkpoint", "latest"]) == 0
    assert len(engines.built) > trained and engines.all_closed(), engines


def test_the_baseline_runner_closes_its_engine(tmp_path, engines):
    from baselines.run import main

    path, _ = _yaml(tmp_path, **{"eval.at_end": True})
    assert main([str(path), "--records", str(tmp_path / "board" / "records")]) == 0
    assert engines.all_closed(), engines


def test_the_grid_closes_the_engines_of_training_and_evaluation_cells(tmp_path, engines):
    from baselines import grid

    cfg = small_config(tmp_path, **{"schedule.num_updates": 100, "eval.at_end": True})
    base = tmp_path / "base.yaml"
    base.write_text(yaml.safe_dump(config_to_dict(cfg)))
    spec = {"name": "tiny", "base": str(base), "budget": {"episodes": 2}, "seeds": [0],
            "cells": [{"name": "team", "overrides": {}}, {"name": "untrained", "evaluate": "untrained"}],
            "records": str(tmp_path / "board" / "records"), "output_root": str(tmp_path / "runs")}
    path = tmp_path / "grid.yaml"
    path.write_text(yaml.safe_dump(spec))
    assert grid.main([str(path), "--force"]) == 0  # --force: a two-run grid is too small for its plan
    assert len(engines.built) >= 2 and engines.all_closed(), engines


def test_the_policy_gets_only_the_engine_settings_of_the_run(tmp_path):
    from marft_agents.run.trainer import build_policy

    cfg = small_config(tmp_path)
    model, tokenizer = _model()
    policy = build_policy(cfg, model, tokenizer, ["reasoner_0", "actor_0"])
    settings = policy.engine_settings
    assert isinstance(settings, EngineSettings)
    assert {f.name for f in dataclasses.fields(settings)} == {"sampling", "vllm", "model_folder", "output_dir"}
    assert (settings.sampling, settings.vllm, settings.output_dir) == (cfg.sampling, cfg.vllm, cfg.output_dir)
    assert settings.model_folder is None  # a model built in memory was read from no folder


def test_the_collector_asks_the_policy_s_engine_for_its_capabilities(tmp_path):
    """The collector reads ``mixes_adapters`` from the engine the policy serves (``engine_for``),
    not from a class looked up by the engine's name."""
    import marft_envs
    from marft_agents.collector import RolloutCollector
    from marft_agents.run.trainer import build_policy

    cfg = small_config(tmp_path)
    model, tokenizer = _model()
    policy = build_policy(cfg, model, tokenizer, ["reasoner_0", "actor_0"])
    engine_for, asked = policy.engine_for, []
    policy.engine_for = lambda name: asked.append(name) or engine_for(name)
    envs = [marft_envs.make("marft/Arithmetic-v0", level=1, horizon=1) for _ in range(2)]
    RolloutCollector(envs, policy, cfg.sampling, values=None, seed=0).collect(2)
    assert asked and set(asked) == {cfg.sampling.engine}
