"""Time-bounded ``math_verify`` equivalence checks: the in-process guard and the worker process.

Why this module exists
    ``math_verify.parse``/``verify`` protect themselves with ``signal.alarm``: whole seconds, the
    main thread only (elsewhere they raise ``ValueError``), and they cancel any alarm the caller
    had armed. Sympy can also spend unbounded time (``9^{9^{9^{9}}}``) or memory on a short
    hostile answer. So marft always calls math-verify with its own timeouts *disabled* and bounds
    the call itself, in one of two ways:

    * **worker process** (default): a persistent ``python <this file>`` child answers JSON-line
      requests. Inside it, a ``setitimer`` guard stops runaway Python-level work after the soft
      limit (the child keeps running); if the child does not answer by the hard limit (a C-level
      loop, a memory blow-up) the parent kills it and starts a new one on the next call. Works
      from any thread; costs a little IPC per call and a one-off start (import plus a warm-up
      comparison, not counted against any timeout). The child caps its
      address space (``RLIMIT_AS``, 4 GiB) so a blow-up fails fast instead of swapping.
    * **inline**: same guard in the calling process. Only possible in the main thread with no
      other ``ITIMER_REAL`` armed; cannot stop C-level loops.

    This file runs standalone as the worker (it imports only the standard library and
    math-verify), so it does not need ``marft_envs`` to be importable in the child.
"""

from __future__ import annotations

import json
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

T = TypeVar("T")
WORKER_MEMORY_LIMIT = 4 * 1024**3  # bytes of address space for the worker (Linux/macOS only)


class GuardTimeout(BaseException):
    """Raised inside a guarded call when its time is up.

    A ``BaseException`` (like math-verify's own ``TimeoutException``) so that sympy's and
    math-verify's broad ``except Exception`` handlers cannot swallow it.
    """


def can_guard_inline() -> bool:
    """True when a ``setitimer`` guard is usable here: POSIX, main thread, no timer armed."""
    if not hasattr(signal, "setitimer") or threading.current_thread() is not threading.main_thread():
        return False
    # Someone else's timer (pytest-timeout, the user's own alarm) is armed: do not clobber it.
    return signal.getitimer(signal.ITIMER_REAL)[0] == 0.0


@contextmanager
def alarm_guard(seconds: float) -> Iterator[None]:
    """Raise :class:`GuardTimeout` in the block after ``seconds`` (caller checks ``can_guard_inline``)."""

    def _handler(signum: int, frame: Any) -> None:
        raise GuardTimeout(f"exceeded {seconds:g} s")

    previous = signal.signal(signal.SIGALRM, _handler)
    signal.setitimer(signal.ITIMER_REAL, max(seconds, 1e-3))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0.0)
        signal.signal(signal.SIGALRM, previous)


_MV: dict[str, Any] = {}


def _math_verify() -> tuple[Callable[..., Any], Callable[..., Any]]:
    """Import math-verify lazily (slow), warm it up, silence its "timeout disabled" warning."""
    if not _MV:
        import math_verify
        from math_verify import grader, parser

        # We pass timeout=None on purpose (see the module docstring); the library would log a
        # warning once per process telling us to provide our own timeout, which we do.
        for module in (parser, grader):
            if hasattr(module, "TIMEOUT_WARNING_SHOWN"):
                module.TIMEOUT_WARNING_SHOWN = True
        parse, verify = math_verify.parse, math_verify.verify
        # Warm up: the first comparison in a process pays for sympy's lazy set-up; pay it here,
        # outside any caller's time budget.
        verify(parse("$x^2+1$", parsing_timeout=None), parse("$1+x*x$", parsing_timeout=None), timeout_seconds=None)
        _MV["parse"], _MV["verify"] = parse, verify
    return _MV["parse"], _MV["verify"]


def equivalent(gold_latex: str, pred_latex: str) -> bool:
    """math-verify equivalence of two LaTeX snippets (already extracted, no delimiters).

    Both sides are wrapped in ``\\boxed{}`` so that math-verify's LaTeX extractor takes the whole
    snippet (rather than searching it for a sub-expression). Unguarded: call it through
    :func:`run_guarded` or the worker.
    """
    parse, verify = _math_verify()
    gold = parse("\\boxed{" + gold_latex + "}", parsing_timeout=None)
    pred = parse("\\boxed{" + pred_latex + "}", parsing_timeout=None)
    if not gold or not pred:
        return False
    return bool(verify(gold, pred, timeout_seconds=None))


def run_guarded(fn: Callable[[], T], seconds: float) -> tuple[str, T | None]:
    """Run ``fn`` under :func:`alarm_guard`; returns ``("ok", value)``, ``("timeout", None)`` or
    ``("error", None)``. Never raises (except KeyboardInterrupt/SystemExit)."""
    try:
        with alarm_guard(seconds):
            return "ok", fn()
    except GuardTimeout:
        return "timeout", None
    except Exception:  # noqa: BLE001 - hostile input may raise anything (incl. MemoryError)
        return "error", None


def _serve() -> None:
    """Worker main loop: one JSON request per stdin line, one JSON answer per stdout line."""
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (WORKER_MEMORY_LIMIT, WORKER_MEMORY_LIMIT))
    except (ImportError, ValueError, OSError):
        pass
    out = sys.stdout
    sys.stdout = sys.stderr  # stray prints from libraries must not corrupt the protocol
    _math_verify()
    out.write(json.dumps({"ready": True}) + "\n")
    out.flush()
    for line in sys.stdin:
        try:
            req = json.loads(line)
            status, value = run_guarded(lambda: equivalent(req["gold"], req["pred"]), float(req["soft_s"]))
            reply = {"id": req["id"], "status": status, "equal": bool(value)}
        except Exception as err:  # noqa: BLE001 - a malformed request must not kill the worker
            reply = {"id": None, "status": "error", "equal": False, "error": repr(err)[:200]}
        out.write(json.dumps(reply) + "\n")
        out.flush()


if __name__ == "__main__":
    _serve()
