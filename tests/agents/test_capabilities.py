"""Learner capabilities are declared once (the registry spec) and never overridden on an instance."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from agent_helpers import FakePolicy, small_config
from marft_agents.learners import registry
from marft_agents.learners.interface import run_values

LEARNERS = Path(registry.__file__).parent
CAPABILITY_FIELDS = ("value_mode", "options_class", "trains", "max_agents", "baselines")


@pytest.mark.parametrize("name", sorted(registry.BUILTIN_LEARNERS))
def test_a_shipped_learner_class_carries_exactly_its_spec(name):
    cls = registry.get_learner(name)
    assert registry.Capabilities.of(cls) == registry.BUILTIN_LEARNERS[name].capabilities()


def test_declared_by_copies_every_capability_from_the_spec():
    @registry.declared_by("grpo")
    class Stub:
        value_mode = "state"  # a class-body value the declaration replaces

    spec = registry.BUILTIN_LEARNERS["grpo"].capabilities()
    assert [getattr(Stub, f) for f in CAPABILITY_FIELDS] == [getattr(spec, f) for f in CAPABILITY_FIELDS]


def test_no_shipped_learner_module_assigns_a_capability_by_hand():
    """Neither a class body nor ``self.<capability> = ...`` anywhere in learners/ (base.py's
    BaseLearner keeps the interface defaults for plugins built on it)."""
    found = []
    for path in sorted(LEARNERS.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
                node, ast.AnnAssign) else []
            for t in targets:
                if isinstance(t, ast.Attribute) and t.attr in CAPABILITY_FIELDS:
                    found.append(f"{path.name}:{node.lineno} self.{t.attr}")
        if path.name in ("base.py", "registry.py", "interface.py"):
            continue
        for cls in (n for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.ClassDef)):
            for stmt in cls.body:
                names = [t.id for t in getattr(stmt, "targets", [getattr(stmt, "target", None)]) if isinstance(t, ast.Name)]
                found += [f"{path.name}:{stmt.lineno} {cls.name}.{n}" for n in names if n in CAPABILITY_FIELDS]
    assert not found, f"capabilities assigned outside the registry: {found}"


def test_a_critic_free_baseline_leaves_the_declared_value_mode_and_says_so_in_critic_values(tmp_path):
    from marft_agents.learners import ActionLevelMAPPO

    cfg = small_config(tmp_path, **{"advantage.baseline": "group", "schedule.episodes_per_update": 8,
                                    "schedule.group_size": 4})
    learner = ActionLevelMAPPO(FakePolicy(), cfg, ["r", "a"])
    assert learner.value_mode == "state" and learner.critic_values is None and run_values(learner) is None
    critic = ActionLevelMAPPO(FakePolicy(), small_config(tmp_path, **{"advantage.baseline": "critic"}), ["r", "a"])
    assert run_values(critic) == "state"
