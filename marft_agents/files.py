"""File-system helpers shared by the writers of run folders (checkpoints, best/, metrics).

Atomic writers build their output under a temporary name (``tempfile.mkdtemp`` / ``mkstemp``)
and rename it into place. Those functions create private entries (0700 folders, 0600 files) on
purpose, and the rename keeps that mode, so a run folder would mix private and ordinary files.
:func:`make_ordinary` gives such an entry the mode ``open()`` / ``mkdir()`` would have given it
(0755 / 0644 under the usual umask 022), so every file of a run is shared alike.
"""

from __future__ import annotations

import os
from pathlib import Path


def current_umask() -> int:
    """The process umask, read without changing it where the platform allows."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)  # no read-only API elsewhere: set and restore at once
    os.umask(mask)
    return mask


def make_ordinary(path: str | os.PathLike) -> None:
    """chmod ``path`` to the mode a plain ``mkdir`` (folders) or ``open`` (files) would give it."""
    path = Path(path)
    base = 0o777 if path.is_dir() else 0o666
    os.chmod(path, base & ~current_umask())
