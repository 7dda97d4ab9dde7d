"""No import circles inside marft's packages, and no import pointing back up the layers, counting
imports inside functions too: a lazy import that closes a circle hides a layering mistake (two
modules that each need the other belong together, or their shared piece belongs in a third
module), and one that points up makes a layer depend on what is built on it.

The layers, bottom up: ``marft_envs`` <- ``marft_agents`` <- ``baselines`` / ``leaderboards`` /
``benchmarks`` (the lab). A package may import the layers below it, never one above."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("marft_agents", "marft_envs")
LAB = ("baselines", "leaderboards", "benchmarks")
FORBIDDEN: dict[str, tuple[str, ...]] = {
    "marft_envs": ("marft_agents", *LAB),
    "marft_agents": LAB,
}
"""Package -> the packages above it, which it must not import."""


def module_graph(package: str) -> dict[str, set[str]]:
    """module -> the package's modules it imports (any import statement, at any depth)."""
    files = {}
    for path in (REPO / package).rglob("*.py"):
        parts = path.relative_to(REPO).with_suffix("").parts
        files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    edges: dict[str, set[str]] = {name: set() for name in files}
    for name, path in files.items():
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: from the module's package, up level - 1 more
                    anchor = name.split(".") if is_package else name.split(".")[:-1]
                    anchor = anchor[: len(anchor) - node.level + 1]
                    base = ".".join(anchor + ([node.module] if node.module else []))
                targets = [base] + [f"{base}.{alias.name}" for alias in node.names]
            else:
                continue
            for target in targets:
                while target and target not in files:
                    target = target.rpartition(".")[0]
                # a module importing its own package's __init__ (or a parent) is not an edge here
                if target and target != name and not name.startswith(target + "."):
                    edges[name].add(target)
    return edges


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_cycle_finder_finds_a_planted_circle():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


@pytest.mark.parametrize("package", PACKAGES)
def test_no_import_circles(package):
    edges = module_graph(package)
    assert len(edges) > 5  # the walk found the package
    assert circles(edges) == []


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
