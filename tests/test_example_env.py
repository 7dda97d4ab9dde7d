"""The outside env package ``examples/marft-example-env``, used exactly as a user would.

The package is installed with pip (offline, ``--target`` a temporary folder put on ``sys.path``),
so its ``pyproject.toml`` is validated and built like a user's, and marft finds the env, the
profile and the dependency only through the installed entry points. Then: plain ``pettingzoo.make``
right after ``import marft_envs``, the package's own test of the env contract (``marft_envs.testing``),
two training updates on a tiny random model through ``marft train``, a checkpoint, a resume, and
``marft score`` writing a record into the current folder.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import yaml

import marft_envs

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "examples" / "marft-example-env"
ENV_ID = "example/VowelCount-v0"


def pip_install(project_dir: Path, target: Path, scratch: Path) -> None:
    """``pip install`` the project into ``target`` with no network and no build isolation.

    Built from a copy, so the build's ``build/`` and ``*.egg-info`` never land in the repository.
    """
    source = scratch / project_dir.name
    shutil.copytree(project_dir, source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                    "--no-index", "--disable-pip-version-check", "--target", str(target), str(source)],
                   check=True, capture_output=True, text=True)


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    pytest.importorskip("setuptools", reason="installing the example package offline needs setuptools "
                        "(pip install setuptools) in the test environment")
    site, scratch = tmp_path_factory.mktemp("site"), tmp_path_factory.mktemp("build")
    pip_install(EXAMPLE, site, scratch)
    sys.path.insert(0, str(site))
    yield {"site": site, "source": scratch / EXAMPLE.name}
    sys.path.remove(str(site))
    # Forget the plugin so later tests see marft as installed without it.
    import pettingzoo.env_registry.registration as pz

    from marft_envs.core import dependency, roles

    roles._entry_point_profiles.pop("planner_solver", None)
    marft_envs.registry._registered.pop(ENV_ID, None)
    pz.aec_registry.pop(ENV_ID, None)
    dependency._named.pop("plan_then_solo", None)
    for module in [m for m in sys.modules if m.startswith("marft_example_env")]:
        del sys.modules[module]


def test_plain_pettingzoo_make_finds_the_plugin_right_after_import(installed):
    code = ("import sys, marft_envs, pettingzoo\n"
            "lazy = 'marft_example_env' not in sys.modules\n"  # registered by string, nothing imported
            f"env = pettingzoo.make('aec', {ENV_ID!r})\n"
            "env.reset(seed=0)\n"
            "print(lazy, env.possible_agents)\n")
    path = os.pathsep.join([str(REPO), str(installed["site"])])
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": path}).stdout
    assert out.strip() == "True ['planner_0', 'solver_0']"


def test_its_own_test_passes_the_env_contract(installed):
    """The package's ``tests/`` run as its author would: ``pytest tests`` with the package installed."""
    path = os.pathsep.join([str(REPO), str(installed["site"])])
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"],
                          cwd=installed["source"], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": path, "PYTHONDONTWRITEBYTECODE": "1"})
    assert done.returncode == 0 and "1 passed" in done.stdout, done.stdout + done.stderr


def test_profile_and_time_varying_dependency_come_from_entry_points(installed):
    assert "planner_solver" in marft_envs.available_profiles()
    assert "plan_then_solo" in marft_envs.Dependency.registered()
    env = marft_envs.make(ENV_ID)
    assert env.profile.name == "planner_solver" and env.dependency.name == "plan_then_solo"
    env.reset(seed=0, options={"task_index": 3})
    speakers = []
    for agent in env.agent_iter():
        _, _, terminated, truncated, info = env.last()
        if not (terminated or truncated):
            speakers.append((info["round"], agent, info["parents"]))
        env.step(None if terminated or truncated else "\\boxed{99}")  # always wrong: both rounds run
    assert speakers == [(0, "planner_0", []), (0, "solver_0", ["planner_0"]), (1, "solver_0", [])]
    described = marft_envs.describe_env(ENV_ID)
    assert (described["distribution"], described["version"]) == ("marft-example-env", "0.1.0")
    assert described["agents"] == ["planner_0", "solver_0"] and described["default_profile"] == "planner_solver"


def test_splits_are_disjoint_and_training_tasks_warn(installed):
    from marft_agents.score import evaluate_scripted, load_scripted
    from marft_agents.evaluation.problem_set import TrainingTasksWarning

    train, test = (marft_envs.make(ENV_ID, split=s).tasks for s in ("train", "test"))
    train_words = {train[i].metadata["word"] for i in range(2000)}
    assert not train_words & {test[i].metadata["word"] for i in range(2000)}
    solver = load_scripted("scripted:marft_example_env.scripted:count_vowels")
    with pytest.warns(TrainingTasksWarning, match="'train' split"):
        evaluate_scripted(solver, ENV_ID, {"split": "train"}, n_problems=3, seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", TrainingTasksWarning)
        assert evaluate_scripted(solver, ENV_ID, {"split": "test"}, n_problems=5, seed=0).accuracy == 1.0


@pytest.fixture
def tiny_loader(monkeypatch):
    import torch

    import marft_agents.model.loading as models
    from marft_agents.model.tiny_models import tiny_model_and_tokenizer

    torch.set_num_threads(1)
    monkeypatch.setattr(models, "load_model_and_tokenizer",
                        lambda cfg, hardware=None: tiny_model_and_tokenizer(seed=0, hidden_size=32, num_layers=1))


def _tiny_config(tmp_path: Path) -> Path:
    """The example's own training config, shrunk to seconds of CPU."""
    data = yaml.safe_load((EXAMPLE / "configs" / "marft_a_vowels.yaml").read_text())
    data["env"]["num_envs"] = 2
    data["sampling"] = {"max_new_tokens": 4, "temperature": 1.0}
    data["schedule"] = {"num_updates": 2, "episodes_per_update": 2, "ppo_epochs": 1, "minibatch_size": 2,
                        "checkpoint_interval": 1, "keep_checkpoints": 5}
    data["eval"] = {**data["eval"], "n_problems": 2, "num_envs": 2, "interval": 0}
    data["output_dir"] = str(tmp_path / "run")
    path = tmp_path / "vowels.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_trains_checkpoints_resumes_and_scores(installed, tiny_loader, tmp_path, monkeypatch, capsys):
    from leaderboards.records import RECORDS_DIR
    from marft_agents.cli import main

    shipped_records = sorted(RECORDS_DIR.glob("*"))
    config = _tiny_config(tmp_path)
    assert main(["train", "--config", str(config), "--quiet", "--no-tensorboard"]) == 0
    ckpt = tmp_path / "run" / "checkpoints"
    saved = yaml.safe_load((sorted(ckpt.iterdir())[-1] / "config.yaml").read_text())
    # The named dependency keeps the saved config plain data (a function here would not serialise).
    assert saved["env"]["kwargs"]["dependency"] == {"named": "plan_then_solo", "kwargs": {"plan_rounds": 1}}
    assert main(["train", "--config", str(config), "--quiet", "--no-tensorboard", "--resume",
                 "--set", "schedule.num_updates=3"]) == 0
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["counters"]["update"] == 3
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "losses/policy_loss" in r] == [1, 2, 3]

    monkeypatch.chdir(tmp_path)
    assert main(["score", "--env", ENV_ID, "--policy", str(config), "--checkpoint", "latest", "--n", "3"]) == 0
    record = json.loads((tmp_path / "score_example_vowelcount_v0_vowels_update_000003.json").read_text())
    assert record["env_package"]["distribution"] == "marft-example-env"
    assert record["env_package"]["version"] == "0.1.0"
    assert record["algorithm"] == "mappo_action" and record["budget"]["updates"] == 3
    assert record["eval_after"]["n"] == 3 and record["env_kwargs"]["split"] == "test"
    assert "marft_version" in record and "commit" in record
    assert record["config"]["checkpoint"].endswith("update_000003")
    assert sorted(RECORDS_DIR.glob("*")) == shipped_records  # nothing written into the package


def test_scripted_score_scores_what_the_policy_earns(installed, tmp_path, monkeypatch):
    from marft_agents.cli import main

    monkeypatch.chdir(tmp_path)
    policy = "scripted:marft_example_env.scripted:always_two"
    assert main(["score", "--env", ENV_ID, "--policy", policy, "--n", "40", "--seed", "5"]) == 0
    record = json.loads((tmp_path / "score_example_vowelcount_v0_always_two.json").read_text())
    # Independent count: "always 2" solves exactly the test words with two vowels.
    from marft_agents.evaluation.problem_set import problem_indices

    tasks = marft_envs.make(ENV_ID, split="test").tasks
    expected = sum(tasks[i].answer == "2" for i in problem_indices(len(tasks), 40, 5)) / 40
    assert 0 < expected < 1 and record["eval_after"]["accuracy"] == pytest.approx(expected)
    assert record["algorithm"] == "scripted" and record["model"] == policy
    assert record["env_kwargs"] == {"split": "test"}
