"""Count what a reader of the architecture would count: arrows both ways between marft_agents'
subpackages, module circles anywhere in the repository, ``cfg: Any`` parameters, ``getattr`` on
config objects, and functions over 80 lines.

Every import statement counts, at any depth (a function-level import that closes a circle hides
it from Python, not from the reader), plus the module names of a ``_LAZY`` table (the lazy
re-exports of a package ``__init__``) and constant names handed to ``importlib.import_module``.
``tests/test_import_graph.py`` asserts the first two counts are zero with these same functions.

Usage::

    python benchmarks/architecture_counts.py
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("marft_envs", "marft_agents", "baselines", "leaderboards", "benchmarks")
"""The repository's code, bottom up (tests and examples are not counted)."""
LONG_FUNCTION = 80
"""A function longer than this many lines (``def`` to its last line, docstring included) is long."""
CONFIG_NAMES = ("cfg", "settings")
"""A ``getattr`` whose object's name (the last dotted part) ends with one of these reads a run
config (``cfg``, ``self.cfg``, ``self.engine_settings``); ``config`` is left out: in ``engine/`` and
``model/`` it is the Hugging Face model config."""


def module_files(packages: tuple[str, ...] = PACKAGES, root: Path = REPO) -> dict[str, Path]:
    """Dotted module name -> file, for every ``.py`` under the packages (a package's ``__init__``
    named by its package)."""
    files = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return files


def imports_of(name: str, path: Path) -> Iterator[tuple[str, int, bool]]:
    """(dotted target, line, inside a function) for each name the module at ``path`` imports:
    import statements (relative ones resolved), ``_LAZY`` table values and constant
    ``import_module`` / ``__import__`` arguments."""
    is_package = path.name == "__init__.py"
    tree = ast.parse(path.read_text(encoding="utf-8"))
    inside: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            inside.update(id(child) for child in ast.walk(node) if child is not node)
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the module's package, up level - 1 more
                anchor = name.split(".") if is_package else name.split(".")[:-1]
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join(anchor + ([node.module] if node.module else []))
            targets = [base] + [f"{base}.{alias.name}" for alias in node.names]
        elif (isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict)
              and any(isinstance(t, ast.Name) and t.id == "_LAZY" for t in node.targets)):
            targets = [v.value for v in node.value.values if isinstance(v, ast.Constant) and isinstance(v.value, str)]
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if called in ("import_module", "__import__") and isinstance(node.args[0].value, str):
                targets = [node.args[0].value]
        for target in targets:
            yield target, node.lineno, id(node) in inside


def import_lines(files: dict[str, Path]) -> dict[tuple[str, str], list[tuple[int, bool]]]:
    """(importer, imported module) -> [(line, inside a function)], over the modules of ``files``;
    a module importing itself, its own package's ``__init__`` or a parent package is left out."""
    found: dict[tuple[str, str], list[tuple[int, bool]]] = {}
    for name, path in files.items():
        for target, line, lazy in imports_of(name, path):
            while target and target not in files:
                target = target.rpartition(".")[0]
            if target and target != name and not name.startswith(target + "."):
                found.setdefault((name, target), [])
                if (line, lazy) not in found[(name, target)]:
                    found[(name, target)].append((line, lazy))
    return found


def module_graph(packages: tuple[str, ...] = PACKAGES, root: Path = REPO) -> dict[str, set[str]]:
    """module -> the modules (of ``packages``) it imports, at any depth."""
    files = module_files(packages, root)
    edges: dict[str, set[str]] = {name: set() for name in files}
    for importer, imported in import_lines(files):
        edges[importer].add(imported)
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


def unit(module: str, package: str = "marft_agents") -> str:
    """The part of ``package`` a module belongs to: its subpackage (``engine``), or for a top-level
    module its own name (``config``); the package's ``__init__`` is ``__init__``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def unit_arrows(package: str = "marft_agents", root: Path = REPO) -> dict[tuple[str, str], list[str]]:
    """(importing unit, imported unit) -> ``"module:line imports module"`` (``(in a function)``
    added for a function-level import), for every import between two units of ``package``."""
    arrows: dict[tuple[str, str], list[str]] = {}
    files = module_files((package,), root)
    for (importer, imported), lines in sorted(import_lines(files).items()):
        a, b = unit(importer, package), unit(imported, package)
        if a != b:
            for line, lazy in lines:
                arrows.setdefault((a, b), []).append(
                    f"{importer}:{line} imports {imported}" + (" (in a function)" if lazy else ""))
    return arrows


def two_way(arrows: dict[tuple[str, str], list[str]]) -> list[tuple[str, str]]:
    """The unit pairs with arrows both ways, each once (sorted)."""
    return sorted({tuple(sorted(pair)) for pair in arrows if pair[::-1] in arrows})  # type: ignore[misc]


def functions(path: Path) -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    """(qualified name, node) for every function and method in the file, nested ones included."""
    def walk(node: ast.AST, prefix: str) -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield prefix + child.name, child
                yield from walk(child, prefix + child.name + ".")
            elif isinstance(child, ast.ClassDef):
                yield from walk(child, prefix + child.name + ".")
            else:
                yield from walk(child, prefix)
    yield from walk(ast.parse(path.read_text(encoding="utf-8")), "")


def is_any(annotation: ast.expr | None) -> bool:
    text = ast.unparse(annotation) if annotation is not None else ""
    return text.strip("'\"") in ("Any", "typing.Any")


def config_getattr(node: ast.AST) -> bool:
    """``getattr(x, ...)`` whose object ``x`` is named like a config (:data:`CONFIG_NAMES`)."""
    if not (isinstance(node, ast.Call) and getattr(node.func, "id", "") == "getattr" and node.args):
        return False
    obj = node.args[0]
    name = obj.attr if isinstance(obj, ast.Attribute) else getattr(obj, "id", "")
    return name.lower().endswith(CONFIG_NAMES)


def code_counts(files: dict[str, Path]) -> dict[str, list[str]]:
    """``cfg: Any`` parameters, ``getattr`` on configs, long functions and function-level imports,
    each as a list of ``"module:line what"`` lines."""
    counts: dict[str, list[str]] = {"cfg: Any": [], "getattr(config": [], "long": []}
    for module, path in files.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if config_getattr(node):
                counts["getattr(config"].append(f"{module}:{node.lineno} {ast.unparse(node)}")
        for qualname, fn in functions(path):
            args = fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs
            for arg in args:
                if arg.arg == "cfg" and is_any(arg.annotation):
                    counts["cfg: Any"].append(f"{module}:{fn.lineno} {qualname}(cfg: Any)")
            length = fn.end_lineno - fn.lineno + 1  # type: ignore[operator]
            if length > LONG_FUNCTION:
                counts["long"].append(f"{module}:{fn.lineno} {qualname} {length} lines")
    return counts


def main() -> None:
    files = module_files()
    arrows = unit_arrows()
    pairs = two_way(arrows)
    print(f"two-way arrows between marft_agents subpackages / top-level modules: {len(pairs)}")
    for a, b in pairs:
        print(f"  {a} <-> {b}")
        for direction in ((a, b), (b, a)):
            for line in arrows[direction]:
                print(f"    {direction[0]} -> {direction[1]}: {line}")
    lazy = {(importer, line) for (importer, _), lines in import_lines(module_files(("marft_agents",))).items()
            for line, inside in lines if inside}
    print(f"function-level import statements inside marft_agents (of marft_agents modules): {len(lazy)}")
    found = circles(module_graph())
    print(f"module circles in {', '.join(PACKAGES)}: {len(found)}")
    for members in found:
        print(f"  {' <-> '.join(members)}")
    agents = {name: path for name, path in files.items() if name.startswith("marft_agents")}
    for label, scope in (("marft_agents", agents), ("repo", files)):
        counts = code_counts(scope)
        print(f"[{label}] `cfg: Any` parameters: {len(counts['cfg: Any'])}")
        print(f"[{label}] getattr( on config objects: {len(counts['getattr(config'])}")
        print(f"[{label}] functions over {LONG_FUNCTION} lines: {len(counts['long'])}")
        if label == "repo":
            for key in counts:
                for line in counts[key]:
                    print(f"    {key}: {line}")


if __name__ == "__main__":
    main()
