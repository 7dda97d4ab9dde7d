"""The public learner interface: registry, entry points, learner options, no-critic learners,
grouped sampling, and the outside example package trained through ``marft train``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from agent_helpers import DEVICE, load_tiny_model, small_config, tiny  # noqa: F401 (fixture)
from marft_agents.config import ConfigError, config_to_dict, load_config
from marft_agents.learners import EvalOnly, Learner, get_learner, list_learners, make_learner, register_learner
from marft_agents.learners.registry import BUILTIN_LEARNERS

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "marft-rloo"


@dataclass
class CountingOptions:
    """Options of the test learner."""

    group_size: int = 2
    """Episodes per task."""
    tag: str = "x"
    """A label."""


class CountingLearner:
    """A learner that only counts what it is given (no critic, grouped sampling)."""

    value_mode = None
    options_class = CountingOptions

    def __init__(self, policy, cfg, agent_ids):
        self.policy, self.agent_ids = policy, list(agent_ids)
        self.group_size = cfg.learner.group_size
        self.seen: list = []

    def trainable_agents(self, update):
        return []

    def update(self, rollout, update):
        self.seen.append(rollout)
        return {"count/episodes": float(len(rollout.episodes))}

    def state_dict(self):
        return {"updates": len(self.seen)}

    def load_state_dict(self, state):
        pass


register_learner("test_counting", CountingLearner, replace=True)


def test_shipped_learners_go_through_the_registry_and_satisfy_the_interface():
    assert set(BUILTIN_LEARNERS) <= set(list_learners())
    for name in BUILTIN_LEARNERS:
        cls = get_learner(name)
        assert cls.value_mode in (None, "state", "token")
        assert all(callable(getattr(cls, m)) for m in ("update", "state_dict", "load_state_dict"))
    assert get_learner("eval_only") is EvalOnly and get_learner("ppo").max_agents == 1
    assert isinstance(CountingLearner(None, small_config(Path("/tmp"), algorithm="test_counting"), ["a"]), Learner)


def test_registering_a_taken_name_or_a_non_learner_is_refused():
    with pytest.raises(ValueError, match="already registered"):
        register_learner("mappo_action", CountingLearner)
    with pytest.raises(TypeError, match="lacks the methods"):
        register_learner("broken", type("Broken", (), {"value_mode": None}))
    with pytest.raises(TypeError, match="value_mode must be one of"):
        register_learner("broken", type("Broken", (CountingLearner,), {"value_mode": "q"}))


def test_unknown_algorithm_lists_known_names_and_where_plugins_come_from(tmp_path):
    with pytest.raises(ConfigError, match=r"unknown algorithm 'grpoo'.*test_counting.*marft_agents.learners"):
        small_config(tmp_path, algorithm="grpoo")


def test_a_plugin_that_fails_to_import_is_one_config_line_that_keeps_its_cause(tmp_path, monkeypatch):
    from marft_agents.learners import registry

    monkeypatch.setitem(registry._registry, "broken_plugin", "marft_no_such_dependency.learner:Learner")
    with pytest.raises(ConfigError) as caught:
        small_config(tmp_path, algorithm="broken_plugin")
    message = str(caught.value)
    assert "\n" not in message and message.startswith("algorithm: learner 'broken_plugin'")
    assert "could not be imported" in message and "marft_no_such_dependency" in message
    assert isinstance(caught.value.__cause__, ImportError)  # the registry's, which chains the plug-in's own
    assert isinstance(caught.value.__cause__.__cause__, ModuleNotFoundError)
    assert caught.value.__cause__.__cause__.name == "marft_no_such_dependency"


def test_learner_options_are_strict_typed_and_saved(tmp_path):
    cfg = small_config(tmp_path, algorithm="test_counting", learner={"group_size": 4},
                       **{"schedule.episodes_per_update": 4})  # whole groups (the run plan checks it on load)
    assert cfg.learner == CountingOptions(group_size=4)
    saved = config_to_dict(cfg)
    assert saved["learner"] == {"group_size": 4, "tag": "x"}
    assert load_config(saved).learner == cfg.learner  # a checkpoint's config loads back
    with pytest.raises(ConfigError, match=r"unknown key 'learner.groupsize' in CountingOptions; "
                       r"did you mean 'learner.group_size'\? valid keys: group_size, tag"):
        small_config(tmp_path, algorithm="test_counting", learner={"groupsize": 4})
    with pytest.raises(ConfigError, match="learner.group_size must be int"):
        small_config(tmp_path, algorithm="test_counting", learner={"group_size": "four"})
    with pytest.raises(ConfigError, match="declares no learner options"):
        small_config(tmp_path, algorithm="mappo_action", learner={"group_size": 4})


def test_critic_null_is_refused_by_learners_that_need_values(tmp_path):
    with pytest.raises(ConfigError, match="needs a critic"):
        small_config(tmp_path, critic=None)
    assert small_config(tmp_path, algorithm="test_counting", critic=None).critic is None


@pytest.mark.parametrize("algorithm", ["test_counting", "eval_only"])
def test_a_learner_without_values_gets_no_critic_at_all(tmp_path, tiny, algorithm):
    from marft_agents.run.trainer import prepare_trainer

    cfg = small_config(tmp_path, algorithm=algorithm, **{"schedule.num_updates": 1, "schedule.episodes_per_update": 4})
    trainer = prepare_trainer(cfg, model_and_tokenizer=tiny)
    policy = trainer.policy
    assert policy.critic_adapters == [] and len(policy.value_heads) == 0
    calls = []
    policy.state_values = policy.token_values = lambda *a, **k: calls.append(1)  # no value pass either
    list(trainer.run())
    assert not calls
    assert not any(k.startswith(("value_head/", "lora/critic")) for k in policy.adapter_state_dict())


def test_grouped_sampling_gives_k_episodes_of_one_task_per_group(tmp_path, tiny):
    from marft_agents.run.trainer import prepare_trainer

    cfg = small_config(tmp_path, algorithm="test_counting", learner={"group_size": 3},
                       **{"schedule.num_updates": 2, "schedule.episodes_per_update": 6, "env.kwargs": {"horizon": 2}})
    trainer = prepare_trainer(cfg, model_and_tokenizer=tiny)
    list(trainer.run())
    tasks_seen = []
    for rollout in trainer.learner.seen:
        groups = rollout.groups()
        assert sorted(groups) == [0, 1] and all(len(eps) == 3 for eps in groups.values())
        for g, eps in groups.items():
            assert len({rollout.episodes[e].task_id for e in eps}) == 1  # one task per group
            assert all(rollout.decisions[i].group == g for e in eps for i in rollout.episodes[e].decisions)
            tasks_seen.append(rollout.episodes[eps[0]].task_id)
        texts = [tuple(rollout.decisions[i].text for i in rollout.episodes[e].decisions) for e in groups[0]]
        assert len(set(texts)) > 1  # independent samples, not copies
    assert len(set(tasks_seen)) == 4  # the groups draw different tasks from the task order


def test_episodes_per_update_must_be_a_multiple_of_the_group(tmp_path):
    # the run plan decides the group size when the config is read: one line before any model loads
    with pytest.raises(ConfigError, match="multiple of the learner's group_size"):
        small_config(tmp_path, algorithm="test_counting", learner={"group_size": 3},
                     **{"schedule.episodes_per_update": 4})


def test_single_agent_limit_comes_from_the_class(tmp_path):
    cfg = small_config(tmp_path, algorithm="ppo")
    with pytest.raises(ValueError, match="single-agent PPO"):
        make_learner("ppo", None, cfg, ["a_0", "b_0"])


# -- the outside example package, found by its entry point only ------------------------------------
def _fake_install(site: Path) -> None:
    """What ``pip install examples/marft-rloo`` leaves for importlib.metadata: a dist-info with
    the package's entry points (the package itself is put on PYTHONPATH)."""
    tomllib = pytest.importorskip("tomllib", reason="reading pyproject.toml needs Python >= 3.11")
    project = tomllib.loads((EXAMPLE / "pyproject.toml").read_text())["project"]
    group = project["entry-points"]["marft_agents.learners"]
    info = site / "marft_rloo-0.1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {project['name']}\nVersion: {project['version']}\n")
    lines = "".join(f"{name} = {target}\n" for name, target in group.items())
    (info / "entry_points.txt").write_text("[marft_agents.learners]\n" + lines)


def test_example_learner_trains_through_marft_train_by_entry_point(tmp_path, tiny):
    model, tokenizer = tiny
    model_dir = tmp_path / "tiny_model"
    model.save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    site = tmp_path / "site"
    _fake_install(site)
    cfg = yaml.safe_load((EXAMPLE / "rloo_arithmetic.yaml").read_text())
    cfg.update(output_dir=str(tmp_path / "run"), model={"name_or_path": str(model_dir), "threads": 1, "device": str(DEVICE)})
    cfg["env"]["num_envs"] = 4
    cfg["sampling"]["max_new_tokens"] = 4
    cfg["schedule"] = {"num_updates": 2, "episodes_per_update": 8, "checkpoint_interval": 1}
    cfg["eval"] = {"n_problems": 4, "num_envs": 4, "interval": 0, "at_end": True, "env_kwargs": {"split": "test"}}
    config = tmp_path / "rloo.yaml"
    config.write_text(yaml.safe_dump(cfg))
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           # an inherited PYTHONPATH is kept (where the dependencies come from one, with no venv)
           "PYTHONPATH": os.pathsep.join([str(site), str(EXAMPLE), str(REPO)]
                                         + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else []))}
    run = subprocess.run([sys.executable, "-m", "marft_agents.cli", "train", "--config", str(config), "--quiet",
                          "--no-tensorboard", "--no-eval-before"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2] and all("rloo/advantage_abs_mean" in r for r in rows)
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["counters"]["update"] == 2 and summary["counters"]["episodes"] == 16
    ev = subprocess.run([sys.executable, "-m", "marft_agents.cli", "eval", "--config", str(config), "--n", "2"],
                        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert ev.returncode == 0, ev.stderr[-3000:]
    assert "greedy: accuracy" in ev.stdout and "loaded adapters from" in ev.stdout


def test_leaderboard_record_carries_the_learner_options(tmp_path, monkeypatch):
    import baselines.run
    import marft_agents.model.loading as models

    monkeypatch.setattr(baselines.run, "git_commit", lambda: "abc1234")
    monkeypatch.setattr(models, "load_model_and_tokenizer", load_tiny_model)
    cfg = small_config(tmp_path, algorithm="test_counting", learner={"group_size": 2, "tag": "y"},
                       **{"schedule.num_updates": 1, "eval.at_end": True})
    config = tmp_path / "counting.yaml"
    config.write_text(yaml.safe_dump(config_to_dict(cfg)))
    assert baselines.run.main([str(config), "--records", str(tmp_path / "board" / "records")]) == 0
    record = json.loads((tmp_path / "board" / "records" / "counting.json").read_text())
    assert record["algorithm"] == "test_counting"
    assert record["config"]["learner"] == {"group_size": 2, "tag": "y"} and record["config"]["critic"] is not None
