"""What this CPU's torch kernels can do, found by trying, with one fallback switch; and how many
threads to run on the machine as it is (:func:`choose_threads`).

Fast paths that exist only on some CPUs (oneDNN's prepacked bfloat16 products need AVX-512
BW/VL/DQ or AVX-NE-CONVERT; an AVX2-only EPYC or laptop core has neither) are chosen here by
running the operation once on a tiny input and checking it against the plain operation, not by
reading CPU flags: the flags say what the core has, not what this torch build dispatches to (an
``ONEDNN_MAX_CPU_ISA`` cap, an Arm build, a build without oneDNN). A failed probe logs one line
and the plain path runs: same arithmetic, slower.

``MARFT_PLAIN_KERNELS=1`` (or :func:`plain_kernels` in tests) turns every probed fast path off,
so a machine that has them still exercises the fallback; the suite does so in
``tests/agents/test_cpu_support.py``.

Threads: torch's default is one intra-op thread per core the process may run on. On a machine
that other jobs already keep busy that is much slower than fewer threads, because OpenMP threads
spin-wait for siblings the scheduler has pre-empted; :func:`choose_threads` picks a count for the
machine as it is when the model loads, and says why in one line.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

log = logging.getLogger(__name__)

PLAIN_KERNELS_VARIABLE = "MARFT_PLAIN_KERNELS"
"""Environment variable: "1" makes every probe below answer "unsupported"."""

_forced_plain = False
_probed: dict[str, bool] = {}


def _plain_forced() -> bool:
    return _forced_plain or os.environ.get(PLAIN_KERNELS_VARIABLE, "") not in ("", "0")


@contextlib.contextmanager
def plain_kernels() -> Iterator[None]:
    """Within the block every probe answers "unsupported" (the fallback path runs). Objects built
    before the block keep the path they chose, as in a real run."""
    global _forced_plain
    before = _forced_plain
    _forced_plain = True
    try:
        yield
    finally:
        _forced_plain = before


def _try_onednn_bf16_prepack() -> str | None:
    """None when a prepacked bf16 product runs and equals ``F.linear`` bit for bit, else why not."""
    if not torch.backends.mkldnn.is_available() or not hasattr(torch.ops.mkldnn, "_reorder_linear_weight"):
        return "this torch build has no oneDNN linear prepacking"
    gen = torch.Generator().manual_seed(0)
    weight = torch.randn(24, 16, generator=gen).to(torch.bfloat16)  # [out, in]
    x = torch.randn(4, 16, generator=gen).to(torch.bfloat16)  # [rows, in]
    try:
        packed = torch.ops.mkldnn._reorder_linear_weight(weight, 4)
        y = torch.ops.mkldnn._linear_pointwise(x, packed, None, "none", [], "")  # [rows, out]
    except RuntimeError as err:
        return f"{type(err).__name__}: {str(err).splitlines()[0]}"
    if not torch.equal(y, F.linear(x, weight)):
        return "its product differs from F.linear"
    return None


def onednn_bf16_prepack() -> bool:
    """Whether bfloat16 weights can be multiplied through oneDNN-prepacked copies on this CPU
    (probed once per process; see the module docstring)."""
    if _plain_forced():
        return False
    if "onednn_bf16_prepack" not in _probed:
        why_not = _try_onednn_bf16_prepack()
        if why_not is not None:
            log.warning("bf16 weight prepacking unavailable on this CPU (%s); bf16 products use F.linear", why_not)
        _probed["onednn_bf16_prepack"] = why_not is None
    return _probed["onednn_bf16_prepack"]


THREADS_VARIABLE = "MARFT_THREADS"
"""Environment variable: the number of torch intra-op threads to run (overrides the choice)."""
_THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")
"""Variables that set torch's (OpenMP's, MKL's) thread count at start-up: when set, respected."""
_applied: int | None = None
"""The count :func:`apply_threads` last set (a later load in the process may choose again)."""


@dataclass(frozen=True)
class ThreadChoice:
    """How many torch intra-op threads to run, and why (:func:`choose_threads`)."""

    threads: int
    """The count (torch's current one when ``apply`` is False)."""
    why: str
    """The reason, as the start-up line prints it (``"2 cores in affinity, load 1.9: busy"``)."""
    apply: bool
    """True: marft sets it (``torch.set_num_threads``); False: an explicit setting stands."""
    automatic: bool = False
    """True: chosen for the machine (no explicit setting), so the user may want to override it."""


def cores_in_affinity() -> int:
    """The cores this process may run on (``os.sched_getaffinity``: a container's or ``taskset``'s
    share, not the machine's), else ``os.cpu_count()``."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # no affinity call (macOS, Windows)
        return max(1, os.cpu_count() or 1)


def load_average() -> float | None:
    """The 1-minute load average (runnable threads, ours included), None where there is none."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


def own_load() -> float:
    """This process's own part of the 1-minute load average, estimated from its CPU time: CPU
    seconds over the time it has run, at least a minute (the average's time constant); 0 where
    its start time cannot be read (no ``/proc``)."""
    import time

    try:
        start_ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        elapsed = uptime - start_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return 0.0
    return time.process_time() / max(elapsed, 60.0)


def choose_threads(configured: int = 0, *, environ: Mapping[str, str] | None = None, cores: int | None = None,
                   load: float | Callable[[], float | None] | None = None, own: float | None = None,
                   current: int | None = None) -> ThreadChoice:
    """The torch intra-op thread count for this run, in this order:

    1. ``configured`` (``model.threads``) when > 0;
    2. ``MARFT_THREADS`` when set (a whole number >= 1, else ``ValueError``);
    3. an explicit setting stands: ``OMP_NUM_THREADS`` / ``MKL_NUM_THREADS`` in the environment,
       or a torch thread count (``current``, default ``torch.get_num_threads()``) other than the
       cores in the affinity mask, torch's own default (someone called ``torch.set_num_threads``);
    4. otherwise chosen for the machine as it is: ``cores`` (default :func:`cores_in_affinity`)
       minus the load of other work, rounded, between 1 and ``cores``; that load is the 1-minute
       load average (``load``: a number, or a function giving it or None where there is none;
       default :func:`load_average`) less this process's own part (``own``, default
       :func:`own_load`). Fewer threads than cores means the machine is busy with other work,
       which the reason says (``"busy"``): then fewer threads run faster than one per core.
       Where no load average exists, every core.
    """
    environ = os.environ if environ is None else environ
    cores = cores_in_affinity() if cores is None else cores
    if configured > 0:
        return ThreadChoice(configured, "model.threads", True)
    text = environ.get(THREADS_VARIABLE, "").strip()
    if text:
        try:
            threads = int(text)
        except ValueError:
            threads = 0
        if threads < 1:
            raise ValueError(f"{THREADS_VARIABLE} must be a whole number >= 1, got {text!r}")
        return ThreadChoice(threads, THREADS_VARIABLE, True)
    current = torch.get_num_threads() if current is None else current
    for name in _THREAD_VARIABLES:
        if environ.get(name, "").strip():
            return ThreadChoice(current, f"{name}={environ[name].strip()}", False)
    if current != cores and current != _applied:
        return ThreadChoice(current, "set by torch.set_num_threads", False)
    in_affinity = f"{cores} core{'s' if cores != 1 else ''} in affinity"
    load = load_average() if load is None else (load() if callable(load) else load)
    if load is None:
        return ThreadChoice(cores, in_affinity, True, automatic=True)
    others = max(0.0, load - (own_load() if own is None else own))
    threads = max(1, min(cores, int(cores - others + 0.5)))
    state = "busy" if threads < cores else "idle"
    return ThreadChoice(threads, f"{in_affinity}, load {others:.1f} besides marft: {state}", True, automatic=True)


def apply_threads(choice: ThreadChoice) -> None:
    """Set torch's intra-op thread count as ``choice`` says (nothing when an explicit setting stands)."""
    global _applied
    if choice.apply:
        torch.set_num_threads(choice.threads)
        _applied = choice.threads
