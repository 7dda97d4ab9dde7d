"""Where marft looks for local datasets.

``data_root()`` is ``$MARFT_DATA`` when that variable is set, else ``<repo>/../shared/data`` when
that folder exists (a development checkout next to the shared data), else ``None``. Loaders take
an explicit ``data_dir=`` (or a file ``path=``) that overrides both.

Expected layout under the root (files are read, never written)::

    math/MATH_train.jsonl  math/MATH_test.jsonl  math/math500_test.jsonl
    gsm8k/train.jsonl      gsm8k/test.jsonl (optional)
"""

from __future__ import annotations

import os
from pathlib import Path

DATA_ENV_VAR = "MARFT_DATA"


def repo_root() -> Path:
    """The folder that contains the ``marft_envs`` package (the repository in a checkout)."""
    return Path(__file__).resolve().parents[2]


def data_root() -> Path | None:
    """``$MARFT_DATA``, else ``<repo>/../shared/data`` if it exists, else None."""
    env = os.environ.get(DATA_ENV_VAR, "").strip()
    if env:
        return Path(env).expanduser()
    candidate = repo_root().parent / "shared" / "data"
    return candidate if candidate.is_dir() else None
