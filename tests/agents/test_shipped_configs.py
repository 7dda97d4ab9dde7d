"""Every shipped training config passes the checks ``marft train`` runs before loading a model.

The same function ``marft train``, ``marft eval`` and ``marft config --config`` call
(:func:`marft_agents.env_check.check_before_loading`, without the "is the model on this machine"
part: the GPU configs name Qwen2.5). Configs of the data envs (MATH, GSM8K, MBPP) are skipped,
saying so, where the shared data is absent; the example plugins' configs run with their package
on ``sys.path`` and registered as their entry points would register them.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

from conftest import shared_data_dir
from marft_agents.config import load_config
from marft_agents.env_check import check_before_loading

REPO = Path(__file__).resolve().parents[2]
CONFIGS = sorted([*REPO.glob("baselines/configs/**/*.yaml"), *REPO.glob("examples/*/configs/*.yaml"),
                  *REPO.glob("examples/*/*.yaml")])
DATA_ENVS = {"marft/MATH-v0", "marft/GSM8K-v0", "marft/MBPP-v0"}
EXAMPLE_ENV = REPO / "examples" / "marft-example-env"
EXAMPLE_LEARNER = REPO / "examples" / "marft-rloo"


def test_the_shipped_configs_are_found():
    names = {path.name for path in CONFIGS}
    assert {"marft_a_math_qwen2.5.yaml", "marft_a_mbpp_qwen2.5.yaml", "demo.yaml", "relay.yaml",
            "marft_a_vowels.yaml", "rloo_arithmetic.yaml"} <= names


@pytest.fixture(scope="module")
def example_plugins():
    """The example env (its env id, profile and dependency) and the RLOO learner, registered
    from their source folders as their installed entry points would register them, and
    forgotten after, so later tests see marft without them."""
    import pettingzoo.env_registry.registration as pz

    import marft_envs
    from marft_agents import register_learner
    from marft_agents.learners import registry as learners
    from marft_envs.core import dependency, roles

    sys.path[:0] = [str(EXAMPLE_ENV), str(EXAMPLE_LEARNER)]
    from marft_example_env.dependencies import plan_then_solo
    from marft_rloo import RLOO

    marft_envs.register("example/VowelCount-v0", "marft_example_env.vowels:VowelCountEnv")
    search_dirs = roles._search_dirs
    roles._search_dirs = lambda: [*search_dirs(), EXAMPLE_ENV / "marft_example_env" / "profiles"]
    dependency.Dependency.register("plan_then_solo", plan_then_solo, replace=True)
    register_learner("rloo", RLOO, replace=True)
    yield
    roles._search_dirs = search_dirs
    marft_envs.registry._registered.pop("example/VowelCount-v0", None)
    pz.aec_registry.pop("example/VowelCount-v0", None)
    dependency._named.pop("plan_then_solo", None)
    learners._registry.pop("rloo", None)
    learners._origin.pop("rloo", None)
    for folder in (EXAMPLE_ENV, EXAMPLE_LEARNER):
        sys.path.remove(str(folder))
    for name in [m for m in sys.modules if m.startswith(("marft_example_env", "marft_rloo"))]:
        sys.modules.pop(name)


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: str(p.relative_to(REPO)))
def test_every_shipped_config_passes_the_checks_train_runs(path, example_plugins):
    env_id = yaml.safe_load(path.read_text())["env"]["id"]
    if env_id in DATA_ENVS and shared_data_dir() is None:
        pytest.skip(f"{env_id} reads the shared data: set MARFT_DATA or place it at ../shared/data")
    cfg = load_config(path)
    agent_ids = check_before_loading(cfg, model=False)
    assert agent_ids, path


def _yaml_block_after(heading: str) -> dict:
    """The first ```yaml block of marft_envs/ADDING_AN_ENV.md after ``heading``, parsed."""
    text = (REPO / "marft_envs" / "ADDING_AN_ENV.md").read_text(encoding="utf-8")
    after = text[text.index(heading):]
    return yaml.safe_load(after.split("```yaml\n", 1)[1].split("```", 1)[0])


class _Stop(Exception):
    pass


def _recompute_warnings(cfg, monkeypatch, caplog) -> list[str]:
    """The log lines of building a Trainer for ``cfg`` up to the point where it loads anything
    (stopped right after its dtype check, at ``seed_everything``)."""
    import logging

    import marft_agents.run.trainer as trainer

    def stop(seed):
        raise _Stop

    monkeypatch.setattr(trainer, "seed_everything", stop)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger=trainer.__name__), pytest.raises(_Stop):
        trainer.Trainer(cfg)
    return [r.getMessage() for r in caplog.records if "recompute_old_logprobs" in r.getMessage()]


def test_the_guides_training_config_passes_and_does_not_warn_in_bfloat16(example_plugins, monkeypatch, caplog):
    """ADDING_AN_ENV.md step 7: ``dtype: auto`` (bfloat16 where faster), without the warning."""
    data = _yaml_block_after("## 7. Write its training config")
    assert data["model"]["dtype"] == "auto" and data["env"]["id"] == "example/VowelCount-v0"
    cfg = load_config(data)
    assert check_before_loading(cfg, model=False) == ["planner_0", "solver_0"]
    bf16 = load_config(data, {"model.dtype": "bfloat16"})  # what auto picks where bf16 is faster
    assert _recompute_warnings(bf16, monkeypatch, caplog) == []
    # the control: the same config without the setting warns, so the check above can fail
    off = load_config(data, {"model.dtype": "bfloat16", "ppo.recompute_old_logprobs": False})
    assert len(_recompute_warnings(off, monkeypatch, caplog)) == 1


def test_the_guides_profile_yaml_is_a_valid_profile():
    from marft_envs.core.roles import profile_from_dict

    profile = profile_from_dict(_yaml_block_after("## 3. Profiles: who the agents are"))
    assert profile.agent_ids == ("planner_0", "solver_0") and profile.dependency == "plan_then_solo"
    assert [r.graded for r in profile.roles] == [False, True] and profile.roles[1].description
