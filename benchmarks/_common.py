"""Helpers the throughput benchmarks share: threads, clocks, load average, model loading."""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

import torch

from marft_agents.model.loading import load_model_and_tokenizer
from marft_agents.settings.model import DEFAULT_MODEL, ModelConfig
from marft_agents.model.tiny_models import DEFAULT_TINY_ARCHITECTURE, TINY_ARCHITECTURES, tiny_model_and_tokenizer


def add_common_args(parser: argparse.ArgumentParser) -> None:
    """``--model`` / ``--tiny`` (``--tiny-arch``), ``--dtype``, ``--repeats``, ``--threads`` and
    ``--device``, the same in every benchmark; :func:`load_model` takes the model ones."""
    parser.add_argument("--model", default=None, metavar="NAME_OR_PATH",
                        help=f"the base model: an alias, a local Hugging Face folder or a Hub id, as "
                             f"model.name_or_path (default: {DEFAULT_MODEL}, packaged)")
    parser.add_argument("--tiny", action="store_true", help="tiny random model instead of --model")
    parser.add_argument("--tiny-arch", default=None, choices=TINY_ARCHITECTURES,
                        help=f"architecture of the --tiny model (default: {DEFAULT_TINY_ARCHITECTURE})")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=0,
                        help="torch threads; 0 = auto: torch's default, or 1 when the machine is already busy")
    parser.add_argument("--device", default="cpu", help="torch device of the model: cpu (default), cuda, cuda:1, ...")


def load_avg() -> str:
    return "load %.2f %.2f %.2f" % os.getloadavg()


def set_threads(requested: int) -> None:
    """Use ``requested`` torch threads; 0 = auto.

    Auto keeps torch's default (one per core) on an idle machine but drops to 1 thread when the
    1-minute load average already reaches the core count: OpenMP threads that spin-wait for
    siblings pre-empted by other processes make a multi-thread matmul far *slower* than a
    1-thread one on a loaded machine.
    """
    if requested == 0:
        cores = os.cpu_count() or 1
        requested = 1 if os.getloadavg()[0] >= cores else torch.get_num_threads()
    torch.set_num_threads(requested)


def load_model(tiny: bool, dtype: str, device: str = "cpu", model: str | None = None,
               tiny_arch: str | None = None) -> tuple[Any, Any, str]:
    """(model, tokenizer, name) on ``device``: ``model`` (an alias, a local Hugging Face folder or
    a Hub id; default the packaged SmolLM2-135M-Instruct), or with ``tiny`` a tiny random model
    of architecture ``tiny_arch`` (default Llama). ``model`` and ``tiny``, or ``tiny_arch``
    without ``tiny``, exclude each other (a benchmark must not report one model and time another)."""
    if tiny:
        if model is not None:
            raise SystemExit(f"--tiny and --model {model} exclude each other: choose one")
        arch = tiny_arch or DEFAULT_TINY_ARCHITECTURE
        lm, tok = tiny_model_and_tokenizer(seed=0, dtype=dtype, arch=arch)
        return lm.to(device), tok, f"tiny-random-{arch}"
    if tiny_arch is not None:
        raise SystemExit("--tiny-arch needs --tiny")
    cfg = ModelConfig(model or DEFAULT_MODEL, dtype=dtype, device=device)
    lm, tok = load_model_and_tokenizer(cfg)
    return lm, tok, cfg.name_or_path


def now() -> tuple[float, float]:
    """(wall seconds, this process's CPU seconds)."""
    return time.perf_counter(), time.process_time()


def since(start: tuple[float, float]) -> tuple[float, float]:
    """(wall, cpu) seconds since ``start`` (a :func:`now`)."""
    end = now()
    return end[0] - start[0], end[1] - start[1]
