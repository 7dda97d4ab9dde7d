"""One call that seeds every RNG a run draws from (Python's, NumPy's global and torch's).

Its own module because both the single-process trainer (``trainer.py``) and each rank of a
data-parallel run (``distributed.py``) seed with it, and neither should import the other for it.
"""

from __future__ import annotations

import random

import numpy as np
import torch


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
