"""Procedural "relay" problems: an expression over named values whose values are spread over a team.

A problem is a short expression over variables (``A + B``) and the value of each variable
(``A = 7``, ``B = 12``). The env (:mod:`marft_envs.envs.relay`) deals the values out to the agents
so that no agent holds all of them; only the agent that must answer sees the expression. This
module makes the problems and decides who holds what (:func:`deal`).

Levels (``level=`` takes the number or the name)::

    1 sum_small     A + B, values 2..20                      A = 7, B = 12         -> 19
    2 two_digit     A + B or A - B, values 10..99, A > B     A = 85, B = 38        -> 47 (A - B)
    3 three_terms   A + B - C or A - B + C, values 2..50     A = 40, B = 9, C = 3  -> 34 (A - B + C)

Answers are integers as strings. ``Task.prompt`` is the *whole* problem (every value and the
expression): what a single agent that sees everything is shown, and the key by which evaluation
clusters repeated problems. ``Task.metadata`` holds ``values`` (variable -> int, in variable
order) and ``expression``, from which the env renders each agent's partial view.

Determinism and splits
    Item ``i`` is a pure function of ``(seed, split, level, i)``, drawn by a ``random.Random``
    seeded with the string ``"marft-relay/<seed>/<split>/<level>/<i>/<k>"`` (no global RNG). A
    problem is in *test* when the SHA-256 of its canonical key (level name, expression and
    values) is 0 mod 5, else in *train*; item ``i`` of a split redraws (``k = 0, 1, ...``) until
    the problem belongs to that split, so the splits are disjoint for every seed.
"""

from __future__ import annotations

import hashlib
import operator
import random
from collections.abc import Callable, Sequence

from marft_envs.core.task import Task

LEVELS: dict[int, str] = {1: "sum_small", 2: "two_digit", 3: "three_terms"}
"""Level number -> name."""
SPLITS = ("train", "test")
TEST_MODULUS = 5
INDEX_SPACE = 10**9

# (expression over variable names, {variable: value})
Problem = tuple[str, dict[str, int]]


def _sum_small(rng: random.Random) -> Problem:
    return "A + B", {"A": rng.randint(2, 20), "B": rng.randint(2, 20)}


def _two_digit(rng: random.Random) -> Problem:
    a, b = rng.randint(11, 99), rng.randint(10, 98)
    a, b = (a, b) if a > b else (b + 1, a)  # A > B keeps A - B positive
    return rng.choice(["A + B", "A - B"]), {"A": a, "B": b}


def _three_terms(rng: random.Random) -> Problem:
    values = {name: rng.randint(2, 50) for name in "ABC"}
    return rng.choice(["A + B - C", "A - B + C"]), values


_GENERATORS: dict[str, Callable[[random.Random], Problem]] = {
    "sum_small": _sum_small, "two_digit": _two_digit, "three_terms": _three_terms,
}


def evaluate_expression(expression: str, values: dict[str, int]) -> int:
    """Value of ``expression`` (variables joined by ``+`` and ``-``, left to right)."""
    tokens = expression.split()
    total = values[tokens[0]]
    for op, name in zip(tokens[1::2], tokens[2::2]):
        if op not in "+-":
            raise ValueError(f"relay expressions use + and - only, got {op!r} in {expression!r}")
        total = total + values[name] if op == "+" else total - values[name]
    return total


def format_values(values: dict[str, int]) -> str:
    """``{"A": 7, "B": 12}`` -> ``"A = 7, B = 12"``."""
    return ", ".join(f"{name} = {value}" for name, value in values.items())


def full_prompt(expression: str, values: dict[str, int]) -> str:
    """The whole problem, as one agent that sees everything reads it."""
    return f"The values are {format_values(values)}. Compute {expression}."


def deal(variables: Sequence[str], num_agents: int) -> list[list[str]]:
    """Which variables each of ``num_agents`` agents holds: dealt round-robin from the first agent.

    With two or more agents and two or more variables, every agent misses at least one value,
    so no agent can answer alone.
    """
    if num_agents < 1:
        raise ValueError(f"num_agents must be >= 1, got {num_agents}")
    hands: list[list[str]] = [[] for _ in range(num_agents)]
    for k, name in enumerate(variables):
        hands[k % num_agents].append(name)
    return hands


def level_name(level: int | str) -> str:
    """Normalise ``level`` (1..3 or a name) to its name, with a clear error otherwise."""
    if isinstance(level, int) and not isinstance(level, bool) and level in LEVELS:
        return LEVELS[level]
    if isinstance(level, str) and level.isdigit() and int(level) in LEVELS:
        return LEVELS[int(level)]
    if isinstance(level, str) and level in _GENERATORS:
        return level
    choices = ", ".join(f"{k}={v}" for k, v in LEVELS.items())
    raise ValueError(f"unknown relay level {level!r}; use a number or a name: {choices}")


def split_of(canonical: str) -> str:
    """``"test"`` or ``"train"`` from the SHA-256 of a problem's canonical key."""
    digest = hashlib.sha256(canonical.encode("utf-8")).digest()
    return "test" if int.from_bytes(digest[:8], "big") % TEST_MODULUS == 0 else "train"


class RelayTasks:
    """A :class:`~marft_envs.core.task.TaskSource` of relay problems.

    Args:
        level: difficulty, 1..3 or its name (see the module docstring).
        split: ``"train"`` or ``"test"`` (disjoint sets of problems).
        seed: selects the sequence of problems; item ``i`` depends only on (seed, split, level, i).
    """

    def __init__(self, level: int | str = 1, split: str = "train", seed: int = 0):
        self.level = level_name(level)
        self.level_number = next(k for k, v in LEVELS.items() if v == self.level)
        if split not in SPLITS:
            raise ValueError(f"split must be 'train' or 'test', got {split!r}")
        if not isinstance(seed, int) or isinstance(seed, bool):
            raise TypeError(f"seed must be an int, got {type(seed).__name__}")
        self.split, self.seed = split, seed
        self._generate = _GENERATORS[self.level]

    def __len__(self) -> int:
        return INDEX_SPACE

    def __repr__(self) -> str:
        return f"RelayTasks(level={self.level_number} ({self.level}), split={self.split!r}, seed={self.seed})"

    def __getitem__(self, index: int) -> Task:
        try:
            index = operator.index(index)
        except TypeError:
            raise TypeError(f"task index must be an int, got {type(index).__name__}") from None
        if index < 0:
            index += INDEX_SPACE
        if not 0 <= index < INDEX_SPACE:
            raise IndexError(f"task index out of range [0, {INDEX_SPACE})")
        for attempt in range(1000):  # P(split miss) <= 4/5 per draw
            rng = random.Random(f"marft-relay/{self.seed}/{self.split}/{self.level}/{index}/{attempt}")
            expression, values = self._generate(rng)
            if split_of(f"{self.level}|{expression}|{format_values(values)}") == self.split:
                return Task(
                    task_id=f"relay/{self.level}/{self.split}/seed{self.seed}/{index}",
                    prompt=full_prompt(expression, values),
                    answer=str(evaluate_expression(expression, values)),
                    metadata={"dataset": "relay", "level": self.level_number, "level_name": self.level,
                              "split": self.split, "seed": self.seed, "index": index,
                              "expression": expression, "values": dict(values)},
                )
        raise RuntimeError("could not draw a problem for this split")  # pragma: no cover
