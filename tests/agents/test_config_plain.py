"""Configs are plain data: importing ``marft_agents.config`` (and every ``marft_agents.settings``
module), loading and validating every shipped YAML config (``TrainConfig.validate`` included, and
every run of every shipped grid) loads no deep-learning library.

Each check runs in a fresh interpreter, since this test session has long imported torch.
Validation reads a learner's capabilities from the registry's declarations
(:class:`~marft_agents.learners.registry.LearnerSpec`) instead of importing the learner, and a
sampling engine's from ``settings.sampling.SCORED_ELSEWHERE``; the tests below pin that the
declarations agree with the classes. ``model.device`` / ``model.dtype`` "auto" are resolved by
``TrainConfig.resolve_hardware`` (torch), which the last test pins.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from marft_agents.config import config_from_dict
from marft_agents.learners import registry
from marft_agents.learners.registry import BUILTIN_LEARNERS, Capabilities, LearnerSpec

REPO = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "transformers", "peft")
SETTINGS = sorted(p.stem for p in (REPO / "marft_agents" / "settings").glob("*.py") if p.stem != "__init__")
EXAMPLE_YAMLS = sorted([*REPO.glob("examples/*/configs/*.yaml"), *REPO.glob("examples/*/*.yaml")])
CONFIGS = sorted((REPO / "baselines" / "configs").rglob("*.yaml")) + [
    # an example of a learner plugin needs the plugin installed (it is imported to be validated)
    path for path in EXAMPLE_YAMLS if (yaml.safe_load(path.read_text()) or {}).get("algorithm") in BUILTIN_LEARNERS]
GRIDS = sorted((REPO / "baselines" / "grids").glob("*.yaml"))


def _run(code: str) -> dict:
    """Run ``code`` in a fresh interpreter from the repository root; it prints one JSON line."""
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_importing_the_config_loads_no_torch_transformers_or_peft():
    modules = ", ".join(["marft_agents.config", *(f"marft_agents.settings.{name}" for name in SETTINGS)])
    out = _run(f"import importlib, json, sys\n"
               f"for m in {modules.split(', ')!r}: importlib.import_module(m)\n"
               f"print(json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)))")
    assert out == []
    assert {"model", "lora", "critic", "sampling", "grpo"} <= set(SETTINGS)


def test_loading_and_validating_every_shipped_config_and_grid_loads_no_torch():
    assert len(CONFIGS) > 10 and any(p.is_relative_to(REPO / "examples") for p in CONFIGS) and GRIDS
    out = _run(
        "import json, sys\n"
        "from baselines.grid import load_grid, plan\n"
        "from marft_agents.config import describe_config, load_config\n"
        f"cfgs = [load_config(path).validate() for path in {[str(p) for p in CONFIGS]!r}]\n"
        f"runs = [run for path in {[str(p) for p in GRIDS]!r} for run in plan(load_grid(path))]\n"
        "rows = describe_config(cfgs[0])\n"
        f"print(json.dumps({{'heavy': sorted(m for m in {HEAVY!r} if m in sys.modules), 'n': len(cfgs), "
        "'runs': len(runs), 'rows': len(rows), 'algorithms': sorted({c.algorithm for c in cfgs}), "
        "'engines': sorted({c.sampling.engine for c in cfgs})}))")
    assert out["heavy"] == []
    assert out["n"] == len(CONFIGS) and out["runs"] > 0 and out["rows"] > 50
    # the shipped configs reach the learners' options (grpo), a non-training learner and vLLM's checks
    assert {"grpo", "mappo_action", "mappo_token", "eval_only"} <= set(out["algorithms"])
    assert "vllm" in out["engines"]


def test_every_shipped_learner_agrees_with_its_declared_spec():
    for name, spec in BUILTIN_LEARNERS.items():
        cls = registry.get_learner(name)  # raises when the class and the spec disagree
        assert Capabilities.of(cls) == spec.capabilities(), name
        assert registry.learner_capabilities(name) == spec.capabilities()


def test_a_spec_that_disagrees_with_its_class_is_refused(monkeypatch):
    wrong = LearnerSpec("marft_agents.learners.grpo:GRPO", "state", options="marft_agents.settings.grpo:GRPOOptions")
    monkeypatch.setitem(registry._registry, "grpo", wrong)
    with pytest.raises(TypeError, match="make the two agree"):
        registry.get_learner("grpo")


def test_a_plugin_registered_by_spec_is_validated_without_importing_it(monkeypatch):
    spec = LearnerSpec("no_such_package.learner:Learner", None, options="marft_agents.settings.grpo:GRPOOptions")
    monkeypatch.setitem(registry._registry, "spec_only", spec)
    cfg = config_from_dict({"algorithm": "spec_only", "learner": {"group_size": 8}})
    assert cfg.learner.group_size == 8  # its options were checked; its (missing) module never imported
    with pytest.raises(ImportError, match="no_such_package"):
        registry.get_learner("spec_only")


def test_the_engines_scored_elsewhere_are_read_from_their_one_declaration():
    from marft_agents.engine import registry as engines
    from marft_agents.settings.sampling import SCORED_ELSEWHERE

    assert {name for name, cls in engines.engine_classes().items() if cls.scores_in_learner} == SCORED_ELSEWHERE


def test_resolving_the_hardware_replaces_auto_in_a_fresh_interpreter():
    out = _run("import json, sys\n"
               "from marft_agents.config import load_config\n"
               f"cfgs = [load_config(path) for path in {[str(p) for p in CONFIGS]!r}]\n"
               f"before = sorted(m for m in {HEAVY!r} if m in sys.modules)\n"
               "for c in cfgs: c.resolve_hardware()\n"
               "print(json.dumps({'before': before, 'dtypes': sorted({c.model.dtype for c in cfgs}), "
               "'devices': sorted({c.model.device for c in cfgs})}))")
    assert out["before"] == []
    assert "auto" not in out["dtypes"] and "auto" not in out["devices"]  # records name what ran
