"""A fast stand-in for the GGUF conversion of ``model/loading.py`` (for ``test_models.py``), and the
converter process its concurrency test spawns (module level, so a spawned child can import it).

The fake replaces only what reads the GGUF (``packaged_gguf_path`` and the two ``from_pretrained``
calls given ``gguf_file=``): those return the tiny random model and tokenizer, so the rest of the
conversion (saving, the cache folder's rename into place, the locking) is marft's own code. Every
conversion appends a line to ``counter`` (the converting process id).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))


class _FakeAuto:
    """An ``Auto*`` class whose ``from_pretrained(..., gguf_file=...)`` builds the tiny model."""

    def __init__(self, real: Any, make) -> None:
        self._real, self._make = real, make

    def from_pretrained(self, *args, **kwargs):
        if "gguf_file" not in kwargs:  # reading the converted folder: the real loader
            return self._real.from_pretrained(*args, **kwargs)
        return self._make()


def fake_gguf_patches(counter: Path, delay_s: float = 0.0) -> dict[str, Any]:
    """``{attribute of marft_agents.model.loading: replacement}`` that fakes reading the GGUF."""
    from marft_agents.model import loading as models
    from marft_agents.model.tiny_models import tiny_model_and_tokenizer

    def make_model():
        with open(counter, "a", encoding="utf-8") as f:
            f.write(f"{os.getpid()}\n")
        time.sleep(delay_s)  # a conversion takes a while: concurrent loads overlap
        return tiny_model_and_tokenizer(seed=0, hidden_size=32, num_layers=1)[0]

    def make_tokenizer():
        return tiny_model_and_tokenizer(seed=0, hidden_size=32, num_layers=1)[1]

    return {
        "packaged_gguf_path": lambda alias: Path("/nonexistent-package") / f"{alias}.gguf",
        "AutoModelForCausalLM": _FakeAuto(models.AutoModelForCausalLM, make_model),
        "AutoTokenizer": _FakeAuto(models.AutoTokenizer, make_tokenizer),
    }


def load_in_child(cache_dir: str, counter: str, result: str, barrier) -> None:
    """A spawned process: load the default alias from ``cache_dir`` once every process is ready,
    converting with the fake; writes the loaded model's parameter count to ``result``."""
    from marft_agents.model import loading as models
    from marft_agents.settings.model import ModelConfig

    for name, value in fake_gguf_patches(Path(counter), delay_s=1.5).items():
        setattr(models, name, value)
    barrier.wait(timeout=120)
    model, tokenizer = models.load_model_and_tokenizer(ModelConfig(cache_dir=cache_dir))
    Path(result).write_text(f"{sum(p.numel() for p in model.parameters())} {tokenizer.eos_token}\n")
