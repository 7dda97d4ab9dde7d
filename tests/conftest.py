import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
# dtype "auto" without timing bf16 on this machine (its answer would vary with the load); the
# tests of that measurement inject their timings (tests/agents/test_cpu_support.py, test_models.py)
os.environ.setdefault("MARFT_DTYPE_PROBE", "0")
sys.path.insert(0, str(Path(__file__).resolve().parent / "envs"))  # the toy env helper


def shared_data_dir() -> Path | None:
    """``$MARFT_DATA`` or ``../shared/data`` next to the repository, when present."""
    env = os.environ.get("MARFT_DATA")
    candidates = [Path(env)] if env else []
    candidates.append(REPO.parent / "shared" / "data")
    return next((c for c in candidates if c.is_dir()), None)


@pytest.fixture
def data_dir() -> Path:
    path = shared_data_dir()
    if path is None:
        pytest.skip("shared data not found: set MARFT_DATA or place it at ../shared/data")
    return path
