"""Where a run keeps its checkpoints, as paths alone (no torch): ``<output_dir>/checkpoints/
update_<NNNNNN>/`` and ``<output_dir>/best/``. The pre-flight checks (``env_check``) find a run's
checkpoints with these before torch loads; ``run/checkpoint.py`` writes and reads what is in them.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

CHECKPOINT_DIR = "checkpoints"
BEST_DIR = "best"
"""``<output_dir>/best/``: adapters of the best evaluation so far (``eval.keep_best``)."""
_NAME = re.compile(r"^update_(\d{6,})$")


def checkpoint_root(output_dir: str | os.PathLike) -> Path:
    return Path(output_dir) / CHECKPOINT_DIR


def list_checkpoints(output_dir: str | os.PathLike) -> list[Path]:
    """Complete checkpoints under ``output_dir``, oldest first."""
    root = checkpoint_root(output_dir)
    if not root.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in root.iterdir() if p.is_dir() and (m := _NAME.match(p.name))]
    return [p for _, p in sorted(found) if (p / "state.pt").is_file() and (p / "adapters.pt").is_file()]


def checkpoint_name(update: int) -> str:
    """Folder name of the checkpoint written after ``update`` updates."""
    return f"update_{update:06d}"


def latest_checkpoint(output_dir: str | os.PathLike) -> Path | None:
    """The most recent complete checkpoint, or None."""
    found = list_checkpoints(output_dir)
    return found[-1] if found else None
