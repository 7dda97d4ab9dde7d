"""Run untrusted (model-written) Python programs in a contained child process.

Usage::

    from marft_envs.code.sandbox import run_program, SandboxLimits
    res = run_program("print(input()[::-1])", stdin="abc\\n")
    res.status, res.stdout          # ("ok", "cba\\n")

Every program runs in its own process tree, never in the caller's process. The child side is
``_launcher.py`` (read its docstring for the process tree and the isolation steps). What the
host side guarantees on top of it:

- a fresh temporary work dir per program (removed afterwards), a minimal environment (nothing
  from ``os.environ`` is passed on), stdin from a string;
- CPU-time (RLIMIT_CPU), address-space (RLIMIT_AS), file-size (RLIMIT_FSIZE), open-file
  (RLIMIT_NOFILE) and process-count (RLIMIT_NPROC) limits, and a wall-clock deadline after
  which the whole process group is SIGKILLed; stdout/stderr are read at most up to a cap,
  after which the program is killed (a 1 GB print costs ~the cap, not 1 GB);
- no network: a new network namespace with only a downed loopback;
- no host files: a private root file system that holds only the interpreter, its standard
  library and shared libraries, a few /dev nodes, the sandbox's own /proc and tmpfs /tmp (work
  dir /tmp/work) and /dev/shm (``_fsroot.py``; ``files=`` puts data in the work dir,
  ``SandboxLimits.site_packages`` / ``read_only_paths`` expose more).
- no host paths of the interpreter or the checkout: inside, the interpreter's prefix is
  ``/usr/lib/sandbox-python`` and ``sys.executable`` is ``/usr/bin/python3`` (``sys.prefix``,
  ``sys.path`` and module paths follow), and ``/proc/1/cmdline`` (the sandbox's init) and the
  program's own command line read ``/usr/bin/python3 -I -S /tmp/work/main.py`` (``_launcher.py``
  lists what still shows host paths: ``/proc/self/mountinfo``, ``maps``, ``exe``).

How much isolation the kernel allows is detected per run and reported in
``SandboxResult.isolation``. As root (this project's CI and most containers) everything above
applies and the program runs under a fresh random uid: RLIMIT_NPROC does not apply to root,
so without the uid switch a fork bomb would only be stopped by the deadline. Not root: an
unprivileged user namespace gives the same namespaces (the program keeps the invoking user's
uid outside and sees the same private root). Where the private root cannot be built the
program sees the host's file system read-only (``no-fsroot``; ``detail`` says why). Where
namespaces are refused (some container runtimes) the fallback is rlimits + process-group kill +
(as root) the uid switch and a kill of every process of that uid; the network and the file
system are then NOT isolated — pass ``SandboxLimits(require_isolation=True)`` to get
``status="sandbox_error"`` instead of running.
"""

from __future__ import annotations

import marshal
import os
import secrets
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import Any

_LAUNCHER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_launcher.py")
_SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"

STATUSES = ("ok", "crash", "timeout", "memory", "output_limit", "file_limit", "sandbox_error")
"""Possible ``SandboxResult.status`` values; ``ok`` means exit code 0."""


@dataclass(frozen=True)
class SandboxLimits:
    """Resource limits for one program. Defaults suit unit-test style programs."""

    wall_s: float = 10.0
    """Wall-clock deadline (seconds) counted from start-up; then the process group is killed."""
    cpu_s: float = 5.0
    """CPU-time limit of the program process (RLIMIT_CPU, rounded up to whole seconds)."""
    memory_mb: int = 1024
    """Address-space limit (RLIMIT_AS) in MiB; Python itself needs ~40 MiB."""
    file_mb: int = 16
    """Largest file the program may write (RLIMIT_FSIZE) in MiB."""
    disk_mb: int = 64
    """Size of each private tmpfs (work dir, /tmp, /var/tmp, /dev/shm) when namespaces work."""
    processes: int = 32
    """RLIMIT_NPROC: processes+threads the program's uid may have (only where the count is the
    sandbox's alone: fresh uid or user namespace; otherwise the deadline kill bounds forks)."""
    open_files: int = 64
    """RLIMIT_NOFILE: open file descriptors per process."""
    stdout_bytes: int = 1 << 20
    """Most stdout kept; more makes the run end with status ``output_limit``."""
    stderr_bytes: int = 64 << 10
    """Most stderr kept; more makes the run end with status ``output_limit``."""
    network: bool = False
    """True leaves the network reachable (no network namespace). Keep False for model code."""
    isolate: bool = True
    """False skips all namespaces (rlimits, uid switch and group kill remain); for debugging."""
    require_isolation: bool = False
    """True: refuse to run (status ``sandbox_error``) when the network/PID namespaces or (with
    ``fs_isolation``) the private root file system could not be created, instead of the
    documented weaker fallback."""
    fs_isolation: bool = True
    """True: the program sees a private root file system holding only the interpreter, its
    standard library and shared libraries, /dev nodes, its /proc and its tmpfs (``_fsroot.py``).
    False: the host's whole file system, read-only (the older, weaker view)."""
    site_packages: bool = False
    """True exposes the interpreter's site-packages (read-only) and puts them on ``sys.path``;
    for graders whose tests import installed packages (numpy, ...)."""
    read_only_paths: tuple[str, ...] = ()
    """Further host files/dirs exposed read-only at the same absolute path. A data file that
    belongs to one problem is better given in its work dir (``run_program(files=...)``)."""

    def __post_init__(self) -> None:
        for name in ("wall_s", "cpu_s", "memory_mb", "file_mb", "disk_mb", "processes",
                     "open_files", "stdout_bytes", "stderr_bytes"):
            if not getattr(self, name) > 0:
                raise ValueError(f"SandboxLimits.{name} must be > 0, got {getattr(self, name)!r}")
        if isinstance(self.read_only_paths, str) or not all(
                isinstance(p, str) and os.path.isabs(p) for p in self.read_only_paths):
            raise ValueError("SandboxLimits.read_only_paths must be a sequence of absolute paths, "
                             f"got {self.read_only_paths!r}")
        object.__setattr__(self, "read_only_paths", tuple(self.read_only_paths))


@dataclass
class SandboxResult:
    """Outcome of one program run."""

    status: str
    """One of ``STATUSES``."""
    returncode: int | None
    """Exit code of the program (negative: killed by that signal); None if it never ran."""
    stdout: str
    """Captured stdout (UTF-8, undecodable bytes replaced), at most ``stdout_bytes``."""
    stderr: str
    """Captured stderr, at most ``stderr_bytes``."""
    wall_s: float
    """Wall time of the whole run as seen by the host (start-up and teardown included)."""
    cpu_s: float | None = None
    """User+system CPU seconds of the program process (None when it was killed from outside)."""
    max_rss_kb: int | None = None
    """Peak resident memory of the program process (KiB)."""
    isolation: tuple[str, ...] = ()
    """Isolation steps that took effect (see ``_launcher.py``); empty when unknown."""
    uid: int | None = None
    """The fresh uid the program ran under (root only), for stray-process checks."""
    detail: str = ""
    """Human-readable reason for a non-ok status (e.g. 'wall-clock limit 2.0 s'), and why the
    private root file system was not available when it was not (``no-fsroot`` in isolation)."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _minimal_env(workdir: str, extra: dict[str, str] | None) -> dict[str, str]:
    env = {"PATH": _SAFE_PATH, "HOME": workdir, "TMPDIR": "/tmp", "LANG": "C.UTF-8",
           "LC_ALL": "C.UTF-8", "PYTHONIOENCODING": "utf-8", "PYTHONDONTWRITEBYTECODE": "1",
           "PYTHONHASHSEED": "0"}
    env.update(extra or {})
    return env


def _kill_tree(pgid: int, uid: int | None) -> None:
    """SIGKILL the process group, then (root, fallback) every process still owned by ``uid``."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    if uid is None:
        return
    # A program may leave its process group (setsid). Its fresh uid still marks it; with a PID
    # namespace this finds nothing (the kernel killed the namespace), so it is cheap.
    for _ in range(20):
        found = False
        for pid in _pids_of_uid(uid):
            found = True
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        if not found:
            return
        time.sleep(0.005)


def _pids_of_uid(uid: int) -> list[int]:
    pids = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if os.stat(f"/proc/{name}").st_uid == uid:
                    pids.append(int(name))
            except OSError:
                pass
    return pids


def _classify(returncode: int | None, stderr: str, lim: SandboxLimits,
              cpu_s: float | None) -> tuple[str, str]:
    if returncode == 0:
        return "ok", ""
    tail = stderr[-2000:]
    # SIGXCPU at the soft CPU limit; SIGKILL at the hard one, a second later, for a program
    # that ignored SIGXCPU.
    if returncode == -signal.SIGXCPU or (returncode == -signal.SIGKILL and cpu_s is not None
                                         and cpu_s >= max(1, int(lim.cpu_s + 0.999))):
        return "timeout", f"CPU-time limit {lim.cpu_s:g} s"
    last = tail.strip().splitlines()[-1] if tail.strip() else ""
    if last.startswith("MemoryError") or "MemoryError" in last:
        return "memory", f"address-space limit {lim.memory_mb} MiB"
    if returncode == -signal.SIGXFSZ or "[Errno 27] File too large" in tail:
        return "file_limit", f"file-size limit {lim.file_mb} MiB"
    if returncode is not None and returncode < 0:
        return "crash", f"killed by signal {signal.Signals(-returncode).name}" \
            if -returncode in signal.valid_signals() else f"killed by signal {-returncode}"
    return "crash", f"exit code {returncode}"


def _check_files(files: dict[str, str | bytes] | None) -> dict[str, str | bytes]:
    for name, content in (files or {}).items():
        parts = name.split("/") if isinstance(name, str) else [""]
        if not name or name.startswith("/") or any(p in ("", ".", "..") for p in parts) \
                or name in ("main.py", ".stdin") or not isinstance(content, (str, bytes)):
            raise ValueError(f"run_program(files=...): {name!r} must be a relative path inside "
                             "the work dir (no '..', not main.py/.stdin) mapped to str or bytes")
    return dict(files or {})


def run_program(source: str, stdin: str = "", limits: SandboxLimits | None = None,
                env: dict[str, str] | None = None, python: str | None = None,
                files: dict[str, str | bytes] | None = None) -> SandboxResult:
    """Run ``source`` as a Python program in the sandbox and return what happened.

    ``env`` adds variables to the minimal environment; ``python`` is the interpreter (default:
    the one running the host); ``files`` (relative path -> content) are written into the
    program's work dir beside ``main.py`` (data a problem needs: the program sees nothing of
    the host's file system outside its interpreter). Never raises for anything the program does.
    """
    lim = limits or SandboxLimits()
    files = _check_files(files)
    t0 = time.monotonic()
    missing = [p for p in lim.read_only_paths if not os.path.exists(p)]
    if missing:  # a typo must not silently fall back to the weaker file-system view
        return SandboxResult("sandbox_error", None, "", "", 0.0,
                             detail=f"SandboxLimits.read_only_paths do not exist: {missing}")
    workdir = tempfile.mkdtemp(prefix="marft-sbx-")
    uid = (1 << 20) + secrets.randbelow(1 << 30) if os.geteuid() == 0 else None
    cfg = {"source": source, "stdin": stdin, "workdir": workdir, "uid": uid,
           "network": lim.network, "isolate": lim.isolate, "files": files,
           "fs_isolation": lim.fs_isolation, "site_packages": lim.site_packages,
           "read_only_paths": list(lim.read_only_paths),
           "require_isolation": lim.require_isolation, "env": _minimal_env(workdir, env),
           "limits": {k: getattr(lim, k) for k in ("cpu_s", "memory_mb", "file_mb", "disk_mb",
                                                    "processes", "open_files")}}
    cfg_r, cfg_w = os.pipe()
    rep_r, rep_w = os.pipe()
    try:
        proc = subprocess.Popen(
            [python or sys.executable, "-I", "-S", _LAUNCHER, str(cfg_r), str(rep_w)],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            pass_fds=(cfg_r, rep_w), start_new_session=True, cwd=workdir,
            env=_minimal_env(workdir, None))
    except OSError as e:
        for fd in (cfg_r, cfg_w, rep_r, rep_w):
            os.close(fd)
        shutil.rmtree(workdir, ignore_errors=True)
        return SandboxResult("sandbox_error", None, "", "", time.monotonic() - t0,
                             detail=f"cannot start launcher: {e}")
    os.close(cfg_r)
    os.close(rep_w)
    try:
        try:
            with os.fdopen(cfg_w, "wb") as f:  # launcher reads it all before anything else
                f.write(marshal.dumps(cfg))
        except BrokenPipeError:
            pass
        out, err, report, why = b"", b"", {}, "internal"
        out, err, report, why = _collect(proc, rep_r, lim, t0)
    finally:
        # A launcher that ended by itself has reaped its PID-namespace init, and the kernel
        # killed everything in that namespace before: the /proc sweep is then unnecessary.
        ended_cleanly = (why == "" and proc.poll() is not None
                         and "pidns" in report.get("isolation", ()) and "returncode" in report)
        _kill_tree(proc.pid, None if ended_cleanly else uid)
        proc.wait()
        proc.stdout.close()
        proc.stderr.close()
        os.close(rep_r)
        shutil.rmtree(workdir, ignore_errors=True)
    return _result(out, err, report, why, lim, uid, time.monotonic() - t0)


def _collect(proc: subprocess.Popen, rep_r: int, lim: SandboxLimits, t0: float):
    """Read stdout/stderr/report until EOF, deadline or cap. Returns (out, err, report, why)."""
    caps = {proc.stdout.fileno(): lim.stdout_bytes, proc.stderr.fileno(): lim.stderr_bytes,
            rep_r: 1 << 20}
    bufs: dict[int, bytearray] = {fd: bytearray() for fd in caps}
    sel = selectors.DefaultSelector()
    for fd in caps:
        os.set_blocking(fd, False)
        sel.register(fd, selectors.EVENT_READ)
    why = ""
    exited_at = None
    try:
        while sel.get_map():
            now = time.monotonic()
            if now - t0 > lim.wall_s:
                why = "timeout"
                break
            if exited_at is None and proc.poll() is not None:
                exited_at = now
            if exited_at is not None and now - exited_at > 0.2:
                break  # launcher gone but a pipe still open: a stray holder, killed below
            for key, _ in sel.select(timeout=min(0.05, max(0.0, lim.wall_s - (now - t0)))):
                fd = key.fd
                try:
                    chunk = os.read(fd, 1 << 16)
                except BlockingIOError:
                    continue
                if not chunk:
                    sel.unregister(fd)
                    continue
                room = caps[fd] - len(bufs[fd])
                bufs[fd] += chunk[:max(0, room)]
                if len(chunk) > room:
                    why = "output_limit"
                    break
            if why:
                break
    finally:
        sel.close()
    out = bytes(bufs[proc.stdout.fileno()])
    err = bytes(bufs[proc.stderr.fileno()])
    return out, err, _parse_reports(bytes(bufs[rep_r])), why


def _parse_reports(data: bytes) -> dict[str, Any]:
    """Merge the launcher's length-prefixed marshalled dicts (written only by the launcher and
    its init, before/after the program runs: the program never holds this pipe)."""
    report: dict[str, Any] = {}
    pos = 0
    while pos + 4 <= len(data):
        n = int.from_bytes(data[pos:pos + 4], "little")
        try:
            obj = marshal.loads(data[pos + 4:pos + 4 + n])
        except (EOFError, ValueError, TypeError):
            break
        if isinstance(obj, dict):
            report.update(obj)
        pos += 4 + n
    return report


def _result(out: bytes, err: bytes, report: dict, why: str, lim: SandboxLimits,
            uid: int | None, wall: float) -> SandboxResult:
    stdout = out.decode("utf-8", "replace")
    stderr = err.decode("utf-8", "replace")
    iso = tuple(report.get("isolation", ()))
    rc = report.get("returncode")
    common = dict(cpu_s=report.get("cpu_s"), max_rss_kb=report.get("max_rss_kb"),
                  isolation=iso, uid=uid if "uid" in iso else None)
    if "sandbox_error" in report:
        return SandboxResult("sandbox_error", rc, stdout, stderr, wall,
                             detail=report["sandbox_error"], **common)
    if why == "timeout":
        return SandboxResult("timeout", rc, stdout, stderr, wall,
                             detail=f"wall-clock limit {lim.wall_s:g} s", **common)
    if why == "output_limit":
        return SandboxResult("output_limit", rc, stdout, stderr, wall,
                             detail=f"output cap {lim.stdout_bytes}/{lim.stderr_bytes} bytes",
                             **common)
    if rc is None:
        return SandboxResult("crash", None, stdout, stderr, wall,
                             detail="program ended without a status report", **common)
    status, detail = _classify(rc, stderr, lim, report.get("cpu_s"))
    if report.get("fsroot_error"):
        detail = "; ".join(filter(None, [detail, "no private root file system (the host's is "
                                         f"visible read-only): {report['fsroot_error']}"]))
    return SandboxResult(status, rc, stdout, stderr, wall, detail=detail, **common)


def run_many(jobs: Iterable[tuple[str, str]], limits: SandboxLimits | None = None,
             max_workers: int | None = None,
             on_result: Callable[[int, SandboxResult], None] | None = None
             ) -> list[SandboxResult]:
    """Run ``(source, stdin)`` jobs concurrently (threads waiting on child processes).

    ``max_workers`` defaults to the number of CPUs; results keep the order of ``jobs``.
    """
    jobs = list(jobs)
    workers = max_workers or os.cpu_count() or 2
    with ThreadPoolExecutor(max_workers=workers) as pool:
        futs = [pool.submit(run_program, src, inp, limits) for src, inp in jobs]
        results = []
        for i, fut in enumerate(futs):
            results.append(fut.result())
            if on_result is not None:
                on_result(i, results[-1])
    return results


_PROBE: dict[str, tuple[str, ...]] = {}


def isolation_available(limits: SandboxLimits | None = None) -> tuple[str, ...]:
    """Isolation steps this machine grants (cached probe run of an empty program)."""
    if "iso" not in _PROBE:
        _PROBE["iso"] = run_program("", limits=limits).isolation
    return _PROBE["iso"]


__all__ = ["STATUSES", "SandboxLimits", "SandboxResult", "run_program", "run_many",
           "isolation_available"]
