"""No import circles anywhere in the repository, no import pointing back up the layers, and no
arrow back up between marft_agents' own parts, counting imports inside functions too: a lazy
import that closes a circle hides a layering mistake (two modules that each need the other belong
together, or their shared piece belongs in a third module), and one that points up makes a layer
depend on what is built on it.

The layers, bottom up: ``marft_envs`` <- ``marft_agents`` <- ``baselines`` / ``leaderboards`` /
``benchmarks`` (the lab). A package may import the layers below it, never one above. Inside
``marft_agents`` the parts (subpackages and top-level modules) have their own order,
:data:`AGENT_LAYERS`. The import graph is ``benchmarks/architecture_counts.py``'s, which prints
the same counts."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))

from architecture_counts import PACKAGES, circles, module_files, module_graph, unit, unit_arrows  # noqa: E402

LAB = ("baselines", "leaderboards", "benchmarks")
FORBIDDEN: dict[str, tuple[str, ...]] = {
    "marft_envs": ("marft_agents", *LAB),
    "marft_agents": LAB,
}
"""Package -> the packages above it, which it must not import."""

AGENT_LAYERS: tuple[tuple[str, ...], ...] = (
    ("config_schema",),
    ("files", "hints", "cli_args", "episodes", "ppo_math", "settings", "checkpoint_layout"),
    ("run_plan", "team_layout"),
    ("group_math", "runtime"),
    ("engine",),
    ("model", "learners"),
    ("config", "collector"),
    ("evaluation",),
    ("env_check",),
    ("run",),
    ("score", "testing"),
    ("cli", "__init__"),
)
"""marft_agents' parts, bottom up (a subpackage by its name, a top-level module by its own, the
package's ``__init__`` as ``__init__``): plain data and pure helpers; the run plan (the
config's cross-field decisions, which every layer above reads) and the team layout (which model
each agent and critic runs on); seeding and the process
group (``runtime``); the sampling engines; the policy and the learners; the run config and the
episode collector; evaluation; the checks before a model loads; the run loop; ``marft score`` and the test kit;
the CLI and the package's lazy names. A part imports parts of lower layers only, never one of
its own layer or above: so no two parts import each other, even through a function."""


def layer_violations(arrows: dict[tuple[str, str], list[str]], layers: tuple[tuple[str, ...], ...]) -> list[str]:
    """The imports of ``arrows`` (:func:`architecture_counts.unit_arrows`) that do not point to a
    lower layer, and the parts no layer declares."""
    level = {part: i for i, layer in enumerate(layers) for part in layer}
    parts = {part for pair in arrows for part in pair}
    found = [f"{part} is in no layer" for part in sorted(parts - set(level))]
    for (a, b), lines in sorted(arrows.items()):
        if a in level and b in level and level[b] >= level[a]:
            found += [f"{a} -> {b}: {line}" for line in lines]
    return found


def test_the_cycle_finder_finds_a_planted_circle():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_no_import_circles_anywhere_in_the_repository():
    edges = module_graph()
    for package in PACKAGES:  # the walk found every package
        assert sum(name.partition(".")[0] == package for name in edges) > 5, package
    assert circles(edges) == []


def test_the_circle_check_finds_a_planted_circle_across_a_function_level_import(tmp_path):
    (tmp_path / "lab").mkdir()
    (tmp_path / "lab" / "__init__.py").write_text("")
    (tmp_path / "lab" / "a.py").write_text("from lab.b import x\n")
    (tmp_path / "lab" / "b.py").write_text("x = 1\n\ndef f():\n    from . import a\n    return a\n")
    (tmp_path / "lab" / "c.py").write_text("import lab.a\n")
    assert circles(module_graph(("lab",), tmp_path)) == [["lab.a", "lab.b"]]
    (tmp_path / "lab" / "b.py").write_text("x = 1\n")
    assert circles(module_graph(("lab",), tmp_path)) == []


def test_the_layer_order_finds_a_planted_back_arrow(tmp_path):
    for folder in ("pkg/low", "pkg/high"):
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / "__init__.py").write_text("")
    (tmp_path / "pkg" / "__init__.py").write_text("_LAZY = {'X': 'pkg.high.mod'}\n")
    (tmp_path / "pkg" / "low" / "base.py").write_text("import json\nfrom pkg.util import helper\n")
    (tmp_path / "pkg" / "util.py").write_text("def helper():\n    return 1\n")
    (tmp_path / "pkg" / "high" / "mod.py").write_text("from ..low import base\n")
    layers = (("util",), ("low",), ("high",), ("__init__",))
    assert layer_violations(unit_arrows("pkg", tmp_path), layers) == []
    (tmp_path / "pkg" / "low" / "late.py").write_text("def f():\n    from pkg.high.mod import base\n    return base\n")
    assert layer_violations(unit_arrows("pkg", tmp_path), layers) == [
        "low -> high: pkg.low.late:2 imports pkg.high.mod (in a function)"]
    assert layer_violations(unit_arrows("pkg", tmp_path), (("util",), ("low", "high"), ("__init__",))) == [
        "high -> low: pkg.high.mod:1 imports pkg.low", "high -> low: pkg.high.mod:1 imports pkg.low.base",
        "low -> high: pkg.low.late:2 imports pkg.high.mod (in a function)"]
    (tmp_path / "pkg" / "low" / "late.py").unlink()
    assert layer_violations(unit_arrows("pkg", tmp_path), (("low",), ("high",), ("__init__",))) == [
        "util is in no layer"]


def test_marft_agents_parts_import_only_lower_layers():
    parts = {unit(name) for name in module_files(("marft_agents",))}
    assert len(parts) > 10  # the walk found the package
    assert sorted(parts - {part for layer in AGENT_LAYERS for part in layer}) == []  # every part has a layer
    assert layer_violations(unit_arrows("marft_agents"), AGENT_LAYERS) == []


def imported_modules(path: Path) -> set[str]:
    """Absolute module names ``path`` imports anywhere in its body (module level, inside functions
    and classes, under ``if``/``try``), plus constant names handed to ``importlib.import_module``
    or ``__import__``; relative imports stay inside their package and are left out."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in ("import_module", "__import__") and isinstance(node.args[0].value, str):
                found.add(node.args[0].value)
    return found


def back_imports(root: Path, forbidden: dict[str, tuple[str, ...]]) -> list[str]:
    """``"file imports module"`` for every import under ``root`` of a package above the file's own."""
    found = []
    for package, above in forbidden.items():
        for path in sorted((root / package).rglob("*.py")):
            for module in sorted(imported_modules(path)):
                if module.partition(".")[0] in above:
                    found.append(f"{path.relative_to(root)} imports {module}")
    return found


def test_the_layer_check_finds_a_planted_back_import(tmp_path):
    (tmp_path / "low" / "deep").mkdir(parents=True)
    (tmp_path / "low" / "ok.py").write_text("import json\nfrom low import deep\nfrom . import ok\n")
    (tmp_path / "low" / "deep" / "late.py").write_text(
        "def f():\n    if True:\n        from high.records import Record\n    return Record\n")
    (tmp_path / "low" / "dyn.py").write_text("import importlib\nm = importlib.import_module('high.x')\n")
    assert back_imports(tmp_path, {"low": ("high",)}) == [
        "low/deep/late.py imports high.records", "low/dyn.py imports high.x"]
    assert back_imports(tmp_path, {"low": ("other",)}) == []


def test_no_layer_imports_a_layer_above_it():
    for package in FORBIDDEN:
        assert len(list((REPO / package).rglob("*.py"))) > 5, package  # the walk found the package
    assert back_imports(REPO, FORBIDDEN) == []
