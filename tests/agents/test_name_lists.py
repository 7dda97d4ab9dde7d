"""Every list of names is declared once, and every name used is one declared there.

* Learner names: the registry (``BUILTIN_LEARNERS``, plus plugins) is the only list; every
  ``algorithm`` in the shipped configs, grid files, examples and leaderboard records names a
  learner it knows, and the config's error for an unknown one offers exactly the registered names.
* Choice lists of config fields (critic modes, credit strategies, GRPO groupings, ...) and the
  other name tuples (engines, dtypes, value modes): no second literal with the same names in the
  code (a copy drifts the day one of them gains a name).
"""

from __future__ import annotations

import ast
import dataclasses
import json
import re
import tomllib
import typing
from pathlib import Path

import pytest
import yaml

from marft_agents.config import ConfigError, TrainConfig, field_docs, load_config
from marft_agents.episodes import VALUE_MODES
from marft_agents.learners.registry import BUILTIN_LEARNERS, list_learners
from marft_agents.settings.advantage import AUTO_BASELINE
from marft_agents.settings.critic import GLOBAL_STATE_MODES
from marft_agents.settings.estimators import FAMILIES, estimator_names
from marft_agents.settings.grpo import GRPOOptions
from marft_agents.settings.model import DTYPES
from marft_agents.settings.sampling import ENGINES

REPO = Path(__file__).resolve().parents[2]
SCANNED = ("marft_agents", "baselines", "leaderboards", "benchmarks", "examples")
"""Where code lives (tests may spell names out: they check them)."""


def _plugin_learners() -> set[str]:
    """Learner names the example packages declare as entry points (not installed in the tests)."""
    names = set()
    for toml in REPO.glob("examples/*/pyproject.toml"):
        entry_points = tomllib.loads(toml.read_text())["project"].get("entry-points", {})
        names |= set(entry_points.get("marft_agents.learners", {}))
    return names


def _algorithms_used() -> list[tuple[str, str]]:
    """``(where, algorithm)`` of every config, grid cell and leaderboard record in the repository."""
    used = []
    for path in [*REPO.glob("baselines/configs/**/*.yaml"), *REPO.glob("examples/**/*.yaml")]:
        data = yaml.safe_load(path.read_text()) or {}
        if "algorithm" in data:
            used.append((str(path.relative_to(REPO)), data["algorithm"]))
    for path in REPO.glob("baselines/grids/*.yaml"):
        for cell in yaml.safe_load(path.read_text()).get("cells", []):
            if "algorithm" in cell.get("overrides", {}):
                used.append((f"{path.relative_to(REPO)}:{cell['name']}", cell["overrides"]["algorithm"]))
    for path in REPO.glob("leaderboards/**/records/*.json"):
        record = json.loads(path.read_text())
        config = record.get("config") or {}
        if "algorithm" in config:  # a training record; bench records label theirs otherwise
            used += [(str(path.relative_to(REPO)), record["algorithm"]), (str(path.relative_to(REPO)), config["algorithm"])]
    return used


def test_every_algorithm_in_configs_grids_examples_and_records_is_a_registered_learner():
    used = _algorithms_used()
    assert len(used) > 50  # the globs found the files
    known = set(list_learners()) | _plugin_learners()
    unknown = [(where, name) for where, name in used if name not in known]
    assert not unknown, f"algorithms no learner is registered as: {unknown}"


def test_the_config_offers_exactly_the_registered_learners():
    with pytest.raises(ConfigError) as caught:
        load_config({"algorithm": "no_such_learner"})
    offered = re.search(r"known learners: ([^.]*)\.", str(caught.value)).group(1).split(", ")
    assert offered == list_learners() and set(BUILTIN_LEARNERS) <= set(offered)
    assert TrainConfig().algorithm in BUILTIN_LEARNERS
    # the field's documentation (``marft config --show``) points at the registry instead of copying it
    doc = field_docs(TrainConfig)["algorithm"]
    assert "registry" in doc and len({n for n in BUILTIN_LEARNERS if re.search(rf"\b{n}\b", doc)}) < 2


def _declared_name_sets() -> dict[frozenset, str]:
    """Every set of names the config fields accept (their ``Literal`` types), and the name tuples."""
    sets: dict[frozenset, str] = {}

    def visit(cls: type) -> None:
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            for tp in (hints[f.name], *typing.get_args(hints[f.name])):
                if typing.get_origin(tp) is typing.Literal:
                    sets[frozenset(typing.get_args(tp))] = f"{cls.__name__}.{f.name}"
                if dataclasses.is_dataclass(tp):
                    visit(tp)

    visit(TrainConfig)
    visit(GRPOOptions)
    for name, names in (("ENGINES", ENGINES), ("DTYPES", DTYPES), ("VALUE_MODES", VALUE_MODES),
                        ("GLOBAL_STATE_MODES", GLOBAL_STATE_MODES)):
        sets[frozenset(names)] = name
    return sets


def _name_literals():
    """``(file:line, names)`` of every tuple / list / set / dict-keys literal made only of strings
    (and None) in the scanned code, ``Literal[...]`` arguments included."""
    for folder in SCANNED:
        for path in sorted((REPO / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
                    elts = node.elts
                elif isinstance(node, ast.Dict):
                    elts = node.keys
                else:
                    continue
                if len(elts) > 1 and all(isinstance(e, ast.Constant) and (e.value is None or isinstance(e.value, str))
                                         for e in elts):
                    yield f"{path.relative_to(REPO)}:{node.lineno}", frozenset(e.value for e in elts)


def test_every_name_list_is_declared_once():
    sets = _declared_name_sets()
    assert {"CriticConfig.mode", "PPOConfig.credit", "GRPOOptions.grouping", "GRPOOptions.normalisation",
            "ENGINES", "VALUE_MODES"} <= set(sets.values())
    found: dict[frozenset, list[str]] = {names: [] for names in sets}
    learner_lists = []
    for where, names in _name_literals():
        if names in found:
            found[names].append(where)
        if len(names & set(BUILTIN_LEARNERS)) >= 3:
            learner_lists.append(where)
    for family in FAMILIES:  # the estimator registry declares its families' names, one line each
        names = estimator_names(family)
        for declared in (frozenset(names), frozenset((AUTO_BASELINE, *names))):
            if declared in found:
                found[declared].append(f"marft_agents/settings/estimators.py:ESTIMATORS[{family}]")
    copies = {sets[names]: places for names, places in found.items() if len(places) != 1}
    assert not copies, f"name lists declared more (or less) than once: {copies}"
    assert not learner_lists, f"learner names listed outside learners/registry.py: {learner_lists}"
