"""The ``env:`` section: which environment a run trains on. Plain data."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class EnvConfig:
    """Which environment to train on and how many copies run side by side."""

    id: str = "marft/Arithmetic-v0"
    """A registered env id (``marft_envs.list_envs()``)."""
    kwargs: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments for ``marft_envs.make`` (e.g. ``profile``, ``horizon``, ``split``)."""
    num_envs: int = 8
    """Env instances advanced in lock-step; generation batches across them."""
