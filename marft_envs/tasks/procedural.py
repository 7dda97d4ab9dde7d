"""What every procedural, seeded task source shares: levels, disjoint train/test splits by hash,
and deterministic indexing.

Item ``i`` of a source depends only on ``(dataset, seed, split, level, i)``: it is drawn from a
``random.Random`` seeded with those, and redrawn (``attempt`` 1, 2, ...) until the problem's
canonical key hashes into the requested split, so the two splits never share a problem. A
subclass declares its ``dataset`` name and ``LEVELS`` and implements ``draw`` (one problem from
an RNG).
"""

from __future__ import annotations

import hashlib
import operator
import random
from collections.abc import Callable

from marft_envs.core.task import Task

SPLITS = ("train", "test")
TEST_MODULUS = 5
"""A problem is in the test split when its hash is 0 mod this (about 1 in 5)."""
INDEX_SPACE = 10**9


def split_of(canonical: str) -> str:
    """``"test"`` or ``"train"`` from the SHA-256 of a problem's canonical key."""
    digest = hashlib.sha256(canonical.encode("utf-8")).digest()
    return "test" if int.from_bytes(digest[:8], "big") % TEST_MODULUS == 0 else "train"


class ProceduralTasks:
    """A :class:`~marft_envs.core.task.TaskSource` of generated problems (see the module docstring).

    Args:
        level: difficulty, a number of ``LEVELS`` or its name.
        split: ``"train"`` or ``"test"`` (disjoint sets of problems).
        seed: selects the sequence of problems; item ``i`` depends only on (seed, split, level, i).
    """

    dataset: str = ""
    """Name used in task ids, metadata and the RNG seed."""
    LEVELS: dict[int, str] = {}
    """Level number -> name."""

    def __init__(self, level: int | str = 1, split: str = "train", seed: int = 0):
        self.level = self.level_name(level)
        self.level_number = next(k for k, v in self.LEVELS.items() if v == self.level)
        if split not in SPLITS:
            raise ValueError(f"split must be 'train' or 'test', got {split!r}")
        if not isinstance(seed, int) or isinstance(seed, bool):
            raise TypeError(f"seed must be an int, got {type(seed).__name__}")
        self.split, self.seed = split, seed

    def level_name(self, level: int | str) -> str:
        """Normalise ``level`` (a number of ``LEVELS``, as int or digits, or a name) to its name,
        with a clear error otherwise."""
        if isinstance(level, int) and not isinstance(level, bool) and level in self.LEVELS:
            return self.LEVELS[level]
        if isinstance(level, str) and level.isdigit() and int(level) in self.LEVELS:
            return self.LEVELS[int(level)]
        if isinstance(level, str) and level in self.LEVELS.values():
            return level
        choices = ", ".join(f"{k}={v}" for k, v in self.LEVELS.items())
        raise ValueError(f"unknown {self.dataset} level {level!r}; use a number or a name: {choices}")

    def draw(self, rng: random.Random) -> tuple[str, Callable[[dict], Task]]:
        """One problem from ``rng``: its canonical key (decides the split) and a function that
        builds its :class:`Task` from the common fields (``task_id`` and base ``metadata``)."""
        raise NotImplementedError

    def __len__(self) -> int:
        return INDEX_SPACE

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(level={self.level_number} ({self.level}), split={self.split!r}, "
                f"seed={self.seed})")

    def __getitem__(self, index: int) -> Task:
        try:
            index = operator.index(index)
        except TypeError:
            raise TypeError(f"task index must be an int, got {type(index).__name__}") from None
        if index < 0:
            index += INDEX_SPACE
        if not 0 <= index < INDEX_SPACE:
            raise IndexError(f"task index out of range [0, {INDEX_SPACE})")
        for attempt in range(1000):  # P(split miss) <= 4/5 per draw, so 1000 misses never happen
            rng = random.Random(f"marft-{self.dataset}/{self.seed}/{self.split}/{self.level}/{index}/{attempt}")
            canonical, build = self.draw(rng)
            if split_of(f"{self.level}|{canonical}") == self.split:
                return build({
                    "task_id": f"{self.dataset}/{self.level}/{self.split}/seed{self.seed}/{index}",
                    "metadata": {"dataset": self.dataset, "level": self.level_number, "level_name": self.level,
                                 "split": self.split, "seed": self.seed, "index": index},
                })
        raise RuntimeError("could not draw a problem for this split")  # pragma: no cover
