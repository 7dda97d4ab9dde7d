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

bf16 speed: whether bfloat16 beats float32 on a CPU with bf16 dot-product instructions but no
matrix unit (AVX512-BF16, AVX-NE-CONVERT) depends on the core and on the kernels torch dispatches
to: on one such core bf16 ran slower than float32, on another twice as fast. So it is measured
(:func:`bf16_speedup`): a short timed step at decoder shapes, once per process, kept on disk
per CPU and torch version so that later processes read it; :func:`bf16_wins` decides.

Threads: torch's default is one intra-op thread per core the process may run on. On a machine
that other jobs already keep busy that is much slower than fewer threads, because OpenMP threads
spin-wait for siblings the scheduler has pre-empted; :func:`choose_threads` picks a count for the
machine as it is when the model loads, and says why in one line.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
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


# -- is bf16 faster than float32 here? ----------------------------------------------------------
BF16_WIN_RATIO = 1.2
"""bfloat16 is chosen when a step runs at least this many times faster than in float32: a clear
win pays for bf16's coarser rounding, a tie does not."""
KERNEL_CAP_VARIABLES = ("ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA", "ATEN_CPU_CAPABILITY")
"""Environment variables that cap the instruction set torch's kernels use (``make test-avx2``):
part of the cache key, since a capped process runs other kernels on the same CPU."""
BF16_PROBE_SHAPES = (576, 1536, 64)
"""(hidden, intermediate, rows) of the timed step: SmolLM2-135M's MLP, an update's micro-batch rows."""
BF16_PROBE_BUDGET_S = 0.5
"""The timed pairs stop once this much time is spent (after at least ``BF16_PROBE_MIN_PAIRS``)."""
BF16_PROBE_MIN_PAIRS, BF16_PROBE_MAX_PAIRS = 2, 15

Bf16Timer = Callable[[], tuple[Sequence[float], Sequence[float]]]
"""A timer: seconds per step in float32 and in bfloat16, one entry per interleaved pair."""

_speedups: dict[str, float] = {}
"""The speed-ups measured or read in this process, by :func:`bf16_probe_key`."""


def bf16_speedup_from(float32_s: Sequence[float], bfloat16_s: Sequence[float]) -> float:
    """bf16's speed over float32's: the median over interleaved pairs of (float32 time / bfloat16
    time); above 1, bf16 is faster. A pair that a pre-empted step spoiled moves the median little."""
    if not float32_s or len(float32_s) != len(bfloat16_s):
        raise ValueError(f"expected as many float32 as bfloat16 timings (at least one), got "
                         f"{len(float32_s)} and {len(bfloat16_s)}")
    return statistics.median(f / max(b, 1e-12) for f, b in zip(float32_s, bfloat16_s))


def bf16_wins(speedup: float) -> bool:
    """Whether a measured speed-up (:func:`bf16_speedup_from`) makes bfloat16 the faster choice."""
    return speedup >= BF16_WIN_RATIO


def _decoder_step(dtype: torch.dtype) -> Callable[[], None]:
    """One timed step in ``dtype``: an MLP's up and down products for one decoded row (no grad)
    and for ``rows`` rows with the backward to the input (LoRA training: frozen base weights)."""
    hidden, inter, rows = BF16_PROBE_SHAPES
    gen = torch.Generator().manual_seed(0)
    up = torch.randn(inter, hidden, generator=gen).to(dtype)  # [inter, hidden]
    down = torch.randn(hidden, inter, generator=gen).to(dtype)  # [hidden, inter]
    token = torch.randn(1, hidden, generator=gen).to(dtype)  # [1, hidden]
    batch = torch.randn(rows, hidden, generator=gen).to(dtype).requires_grad_()  # [rows, hidden]

    def step() -> None:
        with torch.no_grad():
            F.linear(F.linear(token, up), down)  # [1, hidden]
        out = F.linear(F.linear(batch, up), down)  # [rows, hidden]
        torch.autograd.grad(out.sum(), batch)  # [rows, hidden]

    return step


def time_bf16_step() -> tuple[list[float], list[float]]:
    """Seconds per :func:`_decoder_step` in float32 and bfloat16, on one thread, in interleaved
    pairs (the order alternates, so a change in the machine's load hits both) after one warm-up
    step each; stops once ``BF16_PROBE_BUDGET_S`` is spent (at least 2 pairs, at most 15)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one core's kernels: steadier on a busy machine than a thread team
    try:
        steps = {torch.float32: _decoder_step(torch.float32), torch.bfloat16: _decoder_step(torch.bfloat16)}
        started = time.perf_counter()
        for step in steps.values():
            step()
        seconds: dict[torch.dtype, list[float]] = {dtype: [] for dtype in steps}
        for pair in range(BF16_PROBE_MAX_PAIRS):
            if pair >= BF16_PROBE_MIN_PAIRS and time.perf_counter() - started > BF16_PROBE_BUDGET_S:
                break
            for dtype in (list(steps) if pair % 2 == 0 else list(steps)[::-1]):
                tic = time.perf_counter()
                steps[dtype]()
                seconds[dtype].append(time.perf_counter() - tic)
    finally:
        torch.set_num_threads(threads)
    return seconds[torch.float32], seconds[torch.bfloat16]


def cpuinfo_field(cpuinfo: str, *names: str) -> str | None:
    """The value of the first line of ``/proc/cpuinfo`` text whose key is one of ``names``."""
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip().lower() in names:
            return value.strip()
    return None


def bf16_probe_key(cpuinfo: str, environ: Mapping[str, str] | None = None) -> str:
    """What a measured speed-up holds for: the CPU model name, a digest of its flags, the torch
    version, and any kernel ISA cap in the environment (``KERNEL_CAP_VARIABLES``)."""
    environ = os.environ if environ is None else environ
    flags = " ".join(sorted((cpuinfo_field(cpuinfo, "flags", "features") or "").split()))
    caps = ",".join(f"{name}={environ[name]}" for name in KERNEL_CAP_VARIABLES if environ.get(name))
    return (f"{cpuinfo_field(cpuinfo, 'model name', 'cpu model') or 'unknown cpu'}"
            f"|flags {hashlib.sha256(flags.encode()).hexdigest()[:16]}|torch {torch.__version__}"
            + (f"|{caps}" if caps else ""))


def _read_probe_cache(path: Path) -> dict[str, float]:
    """The speed-ups stored in ``path``; empty (with one line) when it is missing or damaged."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except OSError as err:
        log.warning("ignoring the bf16 speed cache %s (%s)", path, err)
        return {}
    try:
        data = json.loads(text)
        return {str(k): float(v) for k, v in data.items() if float(v) > 0}
    except (ValueError, TypeError, AttributeError) as err:
        log.warning("ignoring the damaged bf16 speed cache %s (%s); measuring again", path, err)
        return {}


def _write_probe_cache(path: Path, entries: dict[str, float]) -> None:
    """Write ``entries`` to ``path`` atomically (a temporary file renamed into place); a cache
    that cannot be written only costs a new measurement in the next process."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump(entries, out, indent=1, sort_keys=True)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except OSError as err:
        log.warning("could not store the bf16 speed in %s (%s); the next process measures again", path, err)


@contextlib.contextmanager
def _probe_lock(cache_file: Path | None) -> Iterator[None]:
    """Hold an exclusive lock on ``<cache_file>.lock`` for the block, so that processes started
    together (the ranks of one ``torchrun``) measure one after the other and the later ones read
    the first one's answer: every rank then resolves "auto" to the same dtype. No lock where the
    file cannot be opened or there is no ``fcntl`` (Windows)."""
    try:
        import fcntl
    except ImportError:
        fcntl = None  # type: ignore[assignment]
    fd = None
    if cache_file is not None and fcntl is not None:
        try:
            cache_file.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(cache_file.with_name(cache_file.name + ".lock"), os.O_RDWR | os.O_CREAT, 0o666)
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError:
            if fd is not None:
                os.close(fd)
            fd = None
    try:
        yield
    finally:
        if fd is not None:
            os.close(fd)  # releases the lock


def bf16_speedup(cpuinfo: str, cache_file: Path | None, timer: Bf16Timer | None = None) -> float:
    """bf16's measured speed over float32's on this CPU (:func:`bf16_speedup_from`).

    Measured once per process and :func:`bf16_probe_key`; with ``cache_file``, read from it when
    an earlier process stored it (a damaged file is ignored and rewritten), else measured with
    ``timer`` (default :func:`time_bf16_step`, under a second) and stored there, with one log line.
    Reading, measuring and storing hold a lock beside the file (:func:`_probe_lock`).
    """
    key = bf16_probe_key(cpuinfo)
    if key in _speedups:
        return _speedups[key]
    with _probe_lock(cache_file):
        stored = _read_probe_cache(cache_file) if cache_file is not None else {}
        if key not in stored:
            float32_s, bfloat16_s = (timer or time_bf16_step)()
            stored[key] = bf16_speedup_from(float32_s, bfloat16_s)
            log.info("measured bf16 at %.2fx float32's speed on this CPU (median of %d timed pairs)%s",
                     stored[key], len(float32_s), f"; stored in {cache_file}" if cache_file is not None else "")
            if cache_file is not None:
                _write_probe_cache(cache_file, stored)
    _speedups[key] = stored[key]
    return stored[key]


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
