"""Parent side of the bounded math-verify calls (see :mod:`marft_envs.tasks._mv_worker` for why).

``bounded_equivalent(gold, pred, timeout_s, mode)`` returns ``(status, equal)`` where status is
``"ok"``, ``"timeout"`` or ``"error"``; it never raises on hostile input and never waits (much)
longer than ``timeout_s``.

Modes
    ``"process"``: a persistent worker child per Python process, shared by every caller and
        serialised by a lock. Hard bound: the parent kills the child at ``timeout_s`` (the child's
        own guard fires first at 80 % of it, which keeps the child alive). The one-off start
        (importing sympy and a warm-up comparison) is not counted against ``timeout_s``; after a
        hard kill the next call pays it again.
    ``"inline"``: in this process under a ``setitimer`` guard at ``timeout_s``; in a non-main
        thread (or when another timer is armed) the call runs *unguarded*, with a one-time
        warning.
    ``"auto"`` (default): ``"process"``, falling back to ``"inline"`` (with a warning) when a
        child process cannot be started (e.g. a sandbox that forbids it).

Forks: a forked child does not reuse its parent's worker (it starts its own on first use).
"""

from __future__ import annotations

import atexit
import json
import os
import queue
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

from marft_envs.tasks import _mv_worker

WORKER_SCRIPT = str(Path(_mv_worker.__file__).resolve())
STARTUP_TIMEOUT_S = 120.0  # importing sympy on a loaded 2-core machine can take many seconds
SOFT_FRACTION = 0.8  # the child's own guard fires at this fraction of the hard limit
MODES = ("auto", "process", "inline")


class WorkerError(RuntimeError):
    """The worker child could not be started or died."""


class _Worker:
    """One ``python _mv_worker.py`` child speaking JSON lines over its stdin/stdout."""

    def __init__(self) -> None:
        # Run the file by path with '' / cwd dropped from sys.path, so that neither the package
        # nor the user's working directory can shadow modules in the child.
        code = (
            "import runpy, sys; sys.path[:] = [p for p in sys.path if p not in ('', '.')]; "
            f"runpy.run_path({WORKER_SCRIPT!r}, run_name='__main__')"
        )
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-u", "-c", code],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
                encoding="utf-8",
                errors="replace",
                bufsize=1,
                close_fds=True,
            )
        except OSError as err:
            raise WorkerError(f"cannot start the math-verify worker: {err}") from err
        self.owner_pid = os.getpid()
        self.lines: queue.SimpleQueue[str | None] = queue.SimpleQueue()
        self.next_id = 0
        reader = threading.Thread(target=self._read, name="marft-math-verify-reader", daemon=True)
        reader.start()
        try:
            first = self.lines.get(timeout=STARTUP_TIMEOUT_S)
        except queue.Empty:
            first = None
        if first is None or not json.loads(first).get("ready"):
            self.kill()
            raise WorkerError(
                "the math-verify worker did not start (is math-verify installed in this interpreter? "
                f"try: {sys.executable} -c 'import math_verify')"
            )

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)  # EOF: the child exited

    def request(self, gold: str, pred: str, timeout_s: float) -> tuple[str, bool]:
        self.next_id += 1
        req = {"id": self.next_id, "gold": gold, "pred": pred, "soft_s": SOFT_FRACTION * timeout_s}
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.write(json.dumps(req) + "\n")
            self.proc.stdin.flush()
        except (OSError, ValueError) as err:
            raise WorkerError(f"math-verify worker is gone: {err}") from err
        deadline = time.monotonic() + timeout_s
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return "timeout", False
            try:
                line = self.lines.get(timeout=remaining)
            except queue.Empty:
                return "timeout", False
            if line is None:
                raise WorkerError("math-verify worker exited (probably out of memory)")
            reply = json.loads(line)
            if reply.get("id") == self.next_id:  # skip stale replies
                return str(reply["status"]), bool(reply["equal"])

    def alive(self) -> bool:
        return self.owner_pid == os.getpid() and self.proc.poll() is None

    def kill(self) -> None:
        if self.owner_pid != os.getpid():
            return  # a forked copy: the child belongs to our parent process
        try:
            self.proc.kill()
            self.proc.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            pass
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass


_lock = threading.Lock()
_worker: _Worker | None = None
_process_unavailable = False
_warned: set[str] = set()


def _warn_once(key: str, message: str) -> None:
    if key not in _warned:
        _warned.add(key)
        warnings.warn(message, RuntimeWarning, stacklevel=3)


def _after_fork_in_child() -> None:
    global _lock, _worker
    _lock = threading.Lock()  # the parent may have held it while forking
    _worker = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


@atexit.register
def shutdown_worker() -> None:
    """Stop this process's worker child (also called at exit)."""
    global _worker
    if _worker is not None:
        _worker.kill()
        _worker = None


def _process_call(gold: str, pred: str, timeout_s: float) -> tuple[str, bool]:
    global _worker
    with _lock:
        if _worker is None or not _worker.alive():
            _worker = _Worker()
        try:
            status, equal = _worker.request(gold, pred, timeout_s)
        except WorkerError:
            _worker.kill()
            _worker = None
            return "error", False
        if status == "timeout":
            # The child is stuck (C-level work or swapping): kill it; the next call restarts it.
            _worker.kill()
            _worker = None
        return status, equal


def _inline_call(gold: str, pred: str, timeout_s: float) -> tuple[str, bool]:
    _mv_worker._math_verify()  # the slow one-off import must not count against the timeout
    if _mv_worker.can_guard_inline():
        status, value = _mv_worker.run_guarded(lambda: _mv_worker.equivalent(gold, pred), timeout_s)
        return status, bool(value)
    _warn_once(
        "unguarded",
        "math-verify runs without a timeout here (not the main thread, or another timer is armed); "
        "use mode='process' (the default) for a hard time bound",
    )
    try:
        return "ok", _mv_worker.equivalent(gold, pred)
    except Exception:  # noqa: BLE001 - hostile input may raise anything
        return "error", False


def bounded_equivalent(gold: str, pred: str, timeout_s: float, mode: str = "auto") -> tuple[str, bool]:
    """math-verify equivalence of ``pred`` to ``gold`` (LaTeX snippets), bounded by ``timeout_s``."""
    global _process_unavailable
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if not timeout_s > 0:
        raise ValueError(f"timeout_s must be a positive number of seconds, got {timeout_s!r}")
    if mode == "inline" or (mode == "auto" and _process_unavailable):
        return _inline_call(gold, pred, timeout_s)
    try:
        return _process_call(gold, pred, timeout_s)
    except WorkerError as err:
        if mode == "process":
            raise
        _process_unavailable = True
        _warn_once("fallback", f"{err}; grading math answers in-process instead (mode='inline')")
        return _inline_call(gold, pred, timeout_s)
