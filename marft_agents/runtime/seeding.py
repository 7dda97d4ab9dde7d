"""Seeding and forking the RNGs a run draws from (Python's, NumPy's global, torch's CPU and CUDA).

Its own module because both the single-process trainer (``trainer.py``) and each rank of a
data-parallel run (``distributed.py``) seed with it, and neither should import the other for it.

One CUDA device per process: under ``torchrun`` every rank sees all of the machine's GPUs, but
samples on one (``cuda:<LOCAL_RANK>``, the current device ``distributed.process_group`` sets).
Forking or saving the RNG state of *every* visible GPU from every rank (``torch.random.fork_rng``
without ``devices``, ``torch.cuda.get_rng_state_all``) initialises each of them in each process
(torch warns it is slow) for state no rank draws from. :func:`cuda_rng_devices` names the one
device whose state matters; :func:`fork_rng`, :func:`cuda_rng_state` and
:func:`restore_cuda_rng_state` touch that device only. Seeding (:func:`seed_everything`) keeps
``torch.manual_seed``, which also seeds the other devices' generators of this process: a
host-side value, queued until CUDA starts, that creates nothing on those GPUs.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterator, Sequence

import numpy as np
import torch


def seed_everything(seed: int) -> None:
    """Seed Python's ``random``, NumPy's global RNG and torch's (CPU and CUDA) with ``seed``."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def cuda_rng_devices(device: torch.device | str | None = None) -> list[int]:
    """The CUDA device (as a one-item list of its index) whose RNG this process draws from.

    With ``device`` (where the model runs): its index when it is a CUDA device (the current one
    for a bare ``"cuda"``), none otherwise. Without: the current CUDA device when CUDA is
    available (on a rank of a ``torchrun`` job, ``cuda:<LOCAL_RANK>``), else none. Never the
    other visible GPUs (see the module docstring).
    """
    if device is not None:
        device = torch.device(device)
        if device.type != "cuda":
            return []
        return [device.index if device.index is not None else torch.cuda.current_device()]
    if not torch.cuda.is_available():
        return []
    return [torch.cuda.current_device()]


@contextlib.contextmanager
def fork_rng(device: torch.device | str | None = None) -> Iterator[None]:
    """Draws inside the block leave torch's CPU RNG and that of this process's CUDA device
    (:func:`cuda_rng_devices` of ``device``) as they were; other GPUs are not touched."""
    with torch.random.fork_rng(devices=cuda_rng_devices(device), device_type="cuda"):
        yield


def cuda_rng_state(device: torch.device | str | None = None) -> torch.Tensor | None:
    """The RNG state of this process's CUDA device (:func:`cuda_rng_devices`); None without one."""
    devices = cuda_rng_devices(device)
    return torch.cuda.get_rng_state(devices[0]) if devices else None


def restore_cuda_rng_state(saved: torch.Tensor | Sequence[torch.Tensor] | None,
                           device: torch.device | str | None = None) -> None:
    """Put a state from :func:`cuda_rng_state` back onto this process's CUDA device.

    ``saved`` may also be a list of every device's state (``torch.cuda.get_rng_state_all``, what
    checkpoints held before): this device's entry is restored, if the list has one. No-op without
    a CUDA device or a saved state.
    """
    devices = cuda_rng_devices(device)
    if not devices or saved is None:
        return
    index = devices[0]
    if not isinstance(saved, torch.Tensor):
        if index >= len(saved):
            return
        saved = saved[index]
    torch.cuda.set_rng_state(saved, index)
