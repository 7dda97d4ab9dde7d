"""VowelCount-v0: how many vowels are in a made-up word? Graded on the final answer.

Tasks are pure functions of ``(split, task_seed, index)``. The ``train`` and ``test`` splits are
disjoint by construction: a word belongs to the split given by one bit of its SHA-256 digest, so
no test word is ever a training word (the split convention of ``marft_envs/ADDING_AN_ENV.md``).
"""

from __future__ import annotations

import hashlib
import random
from typing import Any

from marft_envs import FinalAnswerEnv, Task

VOWELS = "aeiou"
SPLITS = ("train", "test")
TASKS_PER_SPLIT = 10_000


def split_of(word: str) -> str:
    """The split a word belongs to (one bit of its digest, so the splits never overlap)."""
    return SPLITS[hashlib.sha256(word.encode()).digest()[0] & 1]


class VowelTasks:
    """``TASKS_PER_SPLIT`` words of 4-9 letters per split; task ``i`` is fixed by ``(split, seed, i)``."""

    def __init__(self, split: str = "train", seed: int = 0):
        if split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
        self.split, self.seed = split, seed

    def __len__(self) -> int:
        return TASKS_PER_SPLIT

    def __getitem__(self, index: int) -> Task:
        if not 0 <= index < TASKS_PER_SPLIT:
            raise IndexError(f"task index {index} out of range(0, {TASKS_PER_SPLIT})")
        rng = random.Random(f"vowels/{self.seed}/{index}")
        while True:  # redraw until the word falls into this split (half the draws do)
            word = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(4, 9)))
            if split_of(word) == self.split:
                break
        count = sum(c in VOWELS for c in word)
        return Task(task_id=f"vowels/{self.split}/{index}",
                    prompt=f"How many vowels (a, e, i, o, u) are in the word '{word}'?",
                    answer=str(count), metadata={"word": word})


class VowelCountEnv(FinalAnswerEnv):
    """VowelCount-v0. Agents: the profile's roles (default ``planner_solver``: planner_0, solver_0).
    Observations ``{"text"}``; actions: utterances. Reward 1 when the solver's final answer equals
    the vowel count. Keywords: ``split`` ("train" | "test"), ``task_seed``, ``horizon`` (default 2,
    so the planner's first-round-only schedule matters) and every ``TextTaskEnv`` keyword."""

    metadata = {"name": "vowel_count_v0", "render_modes": ["ansi", "human"], "is_parallelizable": True}
    default_profile = "planner_solver"  # found through this package's marft_envs.profiles entry point

    def __init__(self, split: str = "train", task_seed: int = 0, horizon: int = 2, **kwargs: Any):
        super().__init__(VowelTasks(split, task_seed), horizon=horizon, **kwargs)
