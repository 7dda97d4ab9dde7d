"""Grade a program against a problem's tests in the sandbox.

Two kinds of tests:

- :class:`FunctionTests` (HumanEval, MBPP): code snippets (``assert f(2) == 4``) that pass when
  they raise nothing. All cases of one program run in *one* sandboxed process, in order, each
  under its own alarm, so one slow case does not hide the others. The harness reports each
  case on a dup of stdout, on lines prefixed by a random nonce, so ordinary prints of the
  program cannot be mistaken for results. (This guards against accidents and naive forgery;
  the program runs in the harness's interpreter, so code that deliberately inspects the
  harness's memory could still forge results. The sandbox bounds damage, not cheating.)
- :class:`StdioTests` (competitive programming): each case is a separate sandboxed run of the
  program with the case's stdin; stdout must match the expected output up to whitespace
  (and, optionally, a float tolerance). Cases run concurrently (``max_workers``).

:func:`grade_reply` chains extraction (``extract.py``), a syntax check (``ast.parse`` only, no
execution in this process) and the run, and returns a :class:`GradeResult` whose ``status``
tells format problems (``no_code``, ``syntax_error``) from runtime ones (``timeout``, ...).
"""

from __future__ import annotations

import json
import secrets
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from marft_envs.code.extract import defines_function, extract_code, syntax_error
from marft_envs.code.sandbox import SandboxLimits, SandboxResult, run_program

REWARD_MODES = ("fraction", "all_pass")


@dataclass(frozen=True)
class FunctionTests:
    """Assertion-style tests run in the solution's namespace."""

    cases: tuple[str, ...]
    """Snippets; a case passes when it runs without raising."""
    setup: str = ""
    """Code run after the solution and before the cases (imports, helpers of the tests)."""
    probes: tuple[str | None, ...] = ()
    """Per case, an expression whose value is shown when the case fails (``got ...``)."""
    entry_point: str | None = None
    """Function under test; bound to ``candidate`` when probes are evaluated."""
    labels: tuple[str, ...] = ()
    """Per case, the text shown in feedback (default: the case itself when it is one line)."""


@dataclass(frozen=True)
class StdioTests:
    """Input/output tests: the program reads ``stdin`` and must print ``expected``."""

    cases: tuple[tuple[str, str], ...]
    """``(stdin, expected stdout)`` pairs."""


@dataclass(frozen=True)
class CodeProblem:
    """One coding problem: what the agents see, how a reply becomes a program, the tests."""

    task_id: str
    prompt: str
    """Problem statement shown to the agents."""
    tests: FunctionTests | StdioTests
    prefix: str = ""
    """Code placed before the reply's code (HumanEval: the prompt with imports, helper functions
    and the signature). A reply that does not define ``entry_point`` is appended to it directly,
    i.e. treated as the function body (HumanEval's completion format)."""
    entry_point: str | None = None
    """Function the tests call (None for stdin/stdout problems)."""
    reference: str = ""
    """Reference solution, in the same form as a reply's code (used by the gold check)."""
    metadata: dict[str, Any] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)
    """Data files the program may read (name -> content), written into its work dir: the
    sandbox shows it nothing else of the host's file system."""

    def assemble(self, code: str) -> str:
        """The full program for the reply's ``code``."""
        if not self.prefix:
            return code
        if self.entry_point and defines_function(code, self.entry_point):
            return self.prefix.rstrip() + "\n\n" + code
        return self.prefix + code


@dataclass(frozen=True)
class GradingConfig:
    """How replies are graded."""

    limits: SandboxLimits = SandboxLimits(wall_s=10.0, cpu_s=10.0)
    """Limits of one sandboxed run (function tests: all cases; stdio: each case)."""
    per_case_s: float = 3.0
    """Alarm per function-test case (HumanEval's customary time limit)."""
    reward: str = "fraction"
    """``fraction``: tests passed / total; ``all_pass``: 1 only when every test passes."""
    allow_raw: bool = True
    """Accept a reply without a fenced block when the whole reply parses as Python."""
    float_tol: float = 1e-6
    """Stdio: numeric tokens may differ by this (absolute or relative); 0 = exact tokens."""
    max_workers: int = 2
    """Stdio: concurrent runs (one per test case)."""
    stop_on_first_failure: bool = False
    """Stdio: skip remaining cases after a failure (faster; only sensible with ``all_pass``)."""
    feedback_cases: int = 3
    """How many failed cases the feedback text describes."""

    def __post_init__(self) -> None:
        if self.reward not in REWARD_MODES:
            raise ValueError(f"reward must be one of {REWARD_MODES}, got {self.reward!r}")
        if self.per_case_s <= 0 or self.max_workers < 1:
            raise ValueError("per_case_s must be > 0 and max_workers >= 1")


@dataclass
class CaseResult:
    passed: bool
    error: str = ""
    """Exception type, ``wrong_answer``, ``not_run`` or a sandbox status."""
    detail: str = ""


@dataclass
class GradeResult:
    status: str
    """``passed``, ``failed`` (ran, some test failed), ``no_code``, ``syntax_error``, or the
    sandbox status that ended the run early (``timeout``, ``crash``, ``memory``, ...)."""
    passed: int
    total: int
    cases: list[CaseResult]
    format: str = "ok"
    """``ok``, ``no_code_block`` (code taken from an unfenced reply), ``no_code``, ``syntax_error``."""
    detail: str = ""
    program: str = ""
    sandbox: SandboxResult | None = None

    @property
    def fraction(self) -> float:
        return self.passed / self.total if self.total else 0.0

    @property
    def all_passed(self) -> bool:
        return self.total > 0 and self.passed == self.total

    def reward(self, mode: str = "fraction") -> float:
        if mode not in REWARD_MODES:
            raise ValueError(f"reward mode must be one of {REWARD_MODES}, got {mode!r}")
        return self.fraction if mode == "fraction" else float(self.all_passed)

    def feedback(self, tests: FunctionTests | StdioTests | None = None, max_cases: int = 3) -> str:
        """Execution feedback for the agents: which tests failed and how."""
        if self.status == "no_code":
            return "No code found: put the program in a ```python code block."
        if self.status == "syntax_error":
            return f"The code does not parse: {self.detail}"
        lines = [f"{self.passed}/{self.total} tests passed."]
        if self.status not in ("passed", "failed"):
            lines.append(f"The run ended early: {self.status} ({self.detail}).")
        shown = 0
        for i, case in enumerate(self.cases):
            if case.passed or shown >= max_cases:
                continue
            shown += 1
            what = _describe_case(tests, i)
            lines.append(f"- test {i + 1}{what}: {case.error}{': ' + case.detail if case.detail else ''}")
        if self.sandbox is not None and self.sandbox.stderr.strip() and self.status != "passed":
            tail = self.sandbox.stderr.strip().splitlines()[-1]
            lines.append(f"stderr (last line): {tail[:300]}")
        return "\n".join(lines)

    def to_info(self) -> dict[str, Any]:
        """JSON-friendly summary for ``infos``."""
        return {
            "status": self.status, "format": self.format, "tests_passed": self.passed,
            "tests_total": self.total, "pass_fraction": self.fraction,
            "all_passed": self.all_passed, "detail": self.detail,
            "failed_tests": [i for i, c in enumerate(self.cases) if not c.passed],
            # Which isolation steps the sandbox got (``fsroot``: the program saw only its
            # interpreter and work dir; ``no-fsroot``: the weaker fallback; [] when nothing ran).
            "isolation": list(self.sandbox.isolation) if self.sandbox is not None else [],
        }  # no timings here: infos must be reproducible under a seed (PettingZoo's seed_test)


def _describe_case(tests, i: int) -> str:
    if isinstance(tests, FunctionTests) and i < len(tests.labels) and tests.labels[i]:
        return f" `{tests.labels[i][:200]}`"
    if isinstance(tests, FunctionTests) and i < len(tests.cases):
        src = tests.cases[i].strip().splitlines()
        if len(src) == 1:
            return f" `{src[0][:200]}`"
    if isinstance(tests, StdioTests) and i < len(tests.cases):
        return f" (input {tests.cases[i][0][:80]!r})"
    return ""


# -- function tests -------------------------------------------------------------------------------
_HARNESS = r'''
import os as _o, sys as _s, _signal as _sg  # _signal: `signal` imports enum (slow start-up)
_FD = _o.dup(1)
_N = {nonce!r}
def _h(x):  # strings travel hex-encoded: valid JSON without importing json (start-up time)
    return '"' + str(x).encode("utf-8", "replace").hex() + '"'
def _emit(ev, i=-1, ok=False, err="", msg="", got=None, _w=_o.write):
    extra = ',"got":' + _h(got) if got is not None else ""
    line = '{{"ev":%s,"i":%d,"ok":%s,"err":%s,"msg":%s%s}}' % (
        _h(ev), i, "true" if ok else "false", _h(err), _h(msg[:300]), extra)
    _w(_FD, ("\n" + _N + line + "\n").encode())
class _CaseTimeout(BaseException):  # BaseException: `except Exception` in the program can't eat it
    pass
def _alarm(*_):
    raise _CaseTimeout("case time limit {per_case}s")
_sg.signal(_sg.SIGALRM, _alarm)
def _guard(fn, budget={per_case}):
    _sg.setitimer(_sg.ITIMER_REAL, budget)
    try:
        return fn()
    finally:
        _sg.setitimer(_sg.ITIMER_REAL, 0)
_s.stdout = open(_o.devnull, "w")  # the program's prints must not crowd out the results
_ns = {{"__name__": "solution", "__builtins__": __builtins__}}
_SOL, _SETUP, _CASES, _PROBES, _ENTRY = {sol!r}, {setup!r}, {cases!r}, {probes!r}, {entry!r}
try:
    _guard(lambda: exec(compile(_SOL, "solution.py", "exec"), _ns))
    _guard(lambda: exec(compile(_SETUP, "tests_setup.py", "exec"), _ns))
except BaseException as e:
    _emit("load_error", err=type(e).__name__, msg=str(e))
    _o._exit(0)
for _i, _c in enumerate(_CASES):
    try:
        _guard(lambda: exec(compile(_c, "test_%d.py" % _i, "exec"), _ns))
        _emit("case", _i, True)
    except BaseException as e:
        _got = None
        _p = _PROBES[_i] if _i < len(_PROBES) else None
        if _p and isinstance(e, AssertionError):
            try:
                _loc = {{"candidate": _ns.get(_ENTRY)}} if _ENTRY else {{}}
                _got = repr(_guard(lambda: eval(_p, _ns, _loc)))[:200]
            except BaseException:
                pass
        _emit("case", _i, False, type(e).__name__, str(e), _got)
_emit("done")
_o._exit(0)
'''


def function_test_program(program: str, tests: FunctionTests, per_case_s: float, nonce: str) -> str:
    """The harness program that runs ``program`` then each case, reporting with ``nonce``."""
    return _HARNESS.format(nonce=nonce, per_case=float(per_case_s), sol=program,
                           setup=tests.setup, cases=tuple(tests.cases),
                           probes=tuple(tests.probes), entry=tests.entry_point)


def _decode_event(text: str) -> dict[str, Any]:
    ev = json.loads(text)
    for key in ("ev", "err", "msg", "got"):
        if key in ev:
            ev[key] = bytes.fromhex(ev[key]).decode("utf-8", "replace")
    return ev


def run_function_tests(program: str, tests: FunctionTests,
                       cfg: GradingConfig = GradingConfig(),
                       files: dict[str, str] | None = None) -> GradeResult:
    """Run all cases of ``tests`` against ``program`` in one sandboxed process (``files``: data
    files put in its work dir)."""
    nonce = "@@marft-" + secrets.token_hex(12) + "@@"
    res = run_program(function_test_program(program, tests, cfg.per_case_s, nonce), limits=cfg.limits,
                      files=files)
    n = len(tests.cases)
    cases = [CaseResult(False, "not_run", res.status if res.status != "ok" else "") for _ in range(n)]
    load_error = None
    for line in res.stdout.splitlines():
        if not line.startswith(nonce):
            continue
        try:
            ev = _decode_event(line[len(nonce):])
        except (ValueError, KeyError, TypeError):
            continue
        if ev.get("ev") == "load_error":
            load_error = f"{ev['err']}: {ev['msg']}".rstrip(": ")
        elif ev.get("ev") == "case" and isinstance(ev.get("i"), int) and 0 <= ev["i"] < n:
            detail = ev.get("msg", "")
            if "got" in ev:
                detail = (detail + "; " if detail else "") + f"got {ev['got']}"
            cases[ev["i"]] = CaseResult(bool(ev["ok"]), "" if ev["ok"] else ev["err"], detail)
    passed = sum(c.passed for c in cases)
    if load_error is not None:
        cases = [CaseResult(False, "load_error", load_error) for _ in range(n)]
        return GradeResult("crash", 0, n, cases, detail=f"the program failed to load: {load_error}",
                           program=program, sandbox=res)
    if res.status not in ("ok",):
        return GradeResult(res.status, passed, n, cases, detail=res.detail, program=program,
                           sandbox=res)
    return GradeResult("passed" if passed == n and n else "failed", passed, n, cases,
                       program=program, sandbox=res)


# -- stdin/stdout tests --------------------------------------------------------------------------
def outputs_match(got: str, expected: str, float_tol: float = 1e-6) -> bool:
    """Whitespace-insensitive token comparison, numeric tokens within ``float_tol``."""
    a, b = got.split(), expected.split()
    if a == b:
        return True
    if len(a) != len(b) or float_tol <= 0:
        return False
    for x, y in zip(a, b):
        if x == y:
            continue
        try:
            fx, fy = float(x), float(y)
        except ValueError:
            return False
        if abs(fx - fy) > float_tol * max(1.0, abs(fy)):
            return False
    return True


def run_stdio_tests(program: str, tests: StdioTests,
                    cfg: GradingConfig = GradingConfig(),
                    files: dict[str, str] | None = None) -> GradeResult:
    """Run ``program`` once per case (concurrently) and compare stdout with the expected output
    (``files``: data files put in each run's work dir)."""
    n = len(tests.cases)
    cases: list[CaseResult] = [CaseResult(False, "not_run") for _ in range(n)]
    results: list[SandboxResult | None] = [None] * n

    def one(i: int) -> None:
        stdin, expected = tests.cases[i]
        res = run_program(program, stdin=stdin, limits=cfg.limits, files=files)
        results[i] = res
        if res.status != "ok":
            tail = res.stderr.strip().splitlines()[-1][:200] if res.stderr.strip() else res.detail
            cases[i] = CaseResult(False, res.status, tail)
        elif outputs_match(res.stdout, expected, cfg.float_tol):
            cases[i] = CaseResult(True)
        else:
            cases[i] = CaseResult(False, "wrong_answer",
                                  f"expected {expected[:80]!r}, got {res.stdout[:80]!r}")

    if cfg.stop_on_first_failure:
        for i in range(n):
            one(i)
            if not cases[i].passed:
                break
    else:
        with ThreadPoolExecutor(max_workers=cfg.max_workers) as pool:
            list(pool.map(one, range(n)))
    passed = sum(c.passed for c in cases)
    first_bad = next((r for r in results if r is not None and r.status != "ok"), None)
    status = "passed" if passed == n and n else "failed"
    if passed == 0 and first_bad is not None and all(
            r is None or r.status == first_bad.status for r in results):
        status = first_bad.status  # the program fails the same way on every input
    shown = first_bad or next((r for r in results if r is not None), None)
    return GradeResult(status, passed, n, cases, detail=first_bad.detail if first_bad else "",
                       program=program, sandbox=shown)


# -- replies ---------------------------------------------------------------------------------------
def grade_program(problem: CodeProblem, program: str,
                  cfg: GradingConfig = GradingConfig()) -> GradeResult:
    """Grade an already assembled program (no extraction)."""
    err = syntax_error(program)
    n = len(problem.tests.cases)
    if err is not None:
        return GradeResult("syntax_error", 0, n, [CaseResult(False, "syntax_error") for _ in range(n)],
                           format="syntax_error", detail=err, program=program)
    if isinstance(problem.tests, FunctionTests):
        return run_function_tests(program, problem.tests, cfg, problem.files)
    return run_stdio_tests(program, problem.tests, cfg, problem.files)


def find_code(problem: CodeProblem, reply: str, allow_raw: bool = True) -> tuple[str, bool]:
    """``(code, found_block)`` for ``reply`` ("" when none). Besides ``extract_code``'s rules, a
    raw reply whose first line is indented continues ``problem.prefix`` (HumanEval's
    completion format: the function body only) when the two together parse."""
    ext = extract_code(reply, problem.entry_point, allow_raw=allow_raw)
    if ext.code.strip():
        return ext.code, ext.found_block
    first = next((ln for ln in reply.splitlines() if ln.strip()), "")
    if (allow_raw and problem.prefix and first[:1] in (" ", "\t")
            and syntax_error(problem.prefix + reply) is None):
        return reply, False
    return "", False


def grade_reply(problem: CodeProblem, reply: str, cfg: GradingConfig = GradingConfig()) -> GradeResult:
    """Extract the code from a model's ``reply``, assemble the program and grade it."""
    code, found_block = find_code(problem, reply, cfg.allow_raw)
    n = len(problem.tests.cases)
    if not code.strip():
        return GradeResult("no_code", 0, n, [CaseResult(False, "no_code") for _ in range(n)],
                           format="no_code",
                           detail="no code block found")
    result = grade_program(problem, problem.assemble(code), cfg)
    if result.format == "ok" and not found_block:
        result.format = "no_code_block"
    return result


__all__ = ["REWARD_MODES", "FunctionTests", "StdioTests", "CodeProblem", "GradingConfig",
           "CaseResult", "GradeResult", "function_test_program", "run_function_tests",
           "outputs_match", "run_stdio_tests", "grade_program", "find_code", "grade_reply"]
