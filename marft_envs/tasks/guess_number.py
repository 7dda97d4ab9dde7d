r"""Procedural "guess the number" tasks: a hidden integer in a stated range, found by feedback.

A task is a range ``low..high`` (stated to the agents) and a hidden integer in it (never shown).
Each round the team guesses; the environment (:mod:`marft_envs.envs.guess_number`) answers "too
high" or "too low", so every later guess can use what earlier feedback ruled out. Binary search
finds any number of a range of width ``2**k - 1`` in ``k`` guesses: a level's width is chosen so
that its default horizon is exactly enough.

Levels (``level=`` takes the number or the name)::

    1 width_7    7 numbers,  low 1..40   "Find the hidden integer from 11 to 17."   3 guesses
    2 width_15   15 numbers, low 1..40   "Find the hidden integer from 20 to 34."   4 guesses
    3 width_31   31 numbers, low 1..40   "Find the hidden integer from 5 to 35."    5 guesses

``Task.prompt`` is the range statement (what every agent sees first), ``Task.answer`` the hidden
integer as a string, ``Task.metadata`` holds ``low``, ``high`` and ``hidden``.

Determinism and splits
    Item ``i`` is a pure function of ``(seed, split, level, i)`` (a ``random.Random`` seeded with
    the string ``"marft-guess_number/<seed>/<split>/<level>/<i>/<k>"``; no global RNG). A task is
    in *test* when the SHA-256 of its canonical key, the level and the *range* (not the hidden
    number), is 0 mod 5, else in *train*; items redraw until they land in their split. So the
    two splits never share a range: no test prompt is a training prompt, and a policy evaluated
    on the test split has never seen its ranges (on level 1, 33 training ranges, 7 test ones).

Scripted policies (``function(agent, observation, info) -> str``, for ``marft score
--policy scripted:marft_envs.tasks.guess_number:binary_search``): :func:`binary_search` (the
optimal team: it reads only the observation text), :func:`random_guess` (uniform in the range,
ignoring feedback) and :func:`constant_guess` (always the range's low end).
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Callable
from typing import Any

from marft_envs.core.task import Task
from marft_envs.tasks.math_grading import extract_boxed
from marft_envs.tasks.procedural import ProceduralTasks

LEVELS: dict[int, str] = {1: "width_7", 2: "width_15", 3: "width_31"}
"""Level number -> name."""
WIDTHS: dict[str, int] = {"width_7": 7, "width_15": 15, "width_31": 31}
"""Level name -> how many integers its range holds."""
LOWEST = (1, 40)
"""The range's low end is drawn uniformly from these bounds (inclusive)."""

VERDICTS = ("correct", "too high", "too low", "no guess")
"""What the environment answers to a guess (``info["verdict"]`` of a graded round)."""
_INTEGER = re.compile(r"[-+]?\d+")


def rounds_needed(width: int) -> int:
    """The guesses binary search needs, at most, to find any of ``width`` numbers: ceil(log2(width + 1))."""
    return math.ceil(math.log2(width + 1))


def parse_guess(utterance: str) -> int | None:
    """The guess an utterance makes: the last ``\\boxed{}``'s content if it is an integer, else the
    last integer in the utterance, else None (``"between 1 and 7, so \\boxed{4}"`` -> 4)."""
    boxed = extract_boxed(utterance)
    if boxed is not None and _INTEGER.fullmatch(boxed.strip()):
        return int(boxed)
    numbers = _INTEGER.findall(utterance)
    return int(numbers[-1]) if numbers else None


def verdict(guess: int | None, hidden: int) -> str:
    """One of :data:`VERDICTS` for ``guess`` against the hidden number."""
    if guess is None:
        return "no guess"
    return "correct" if guess == hidden else ("too high" if guess > hidden else "too low")


def narrow(candidates: tuple[int, int], guess: int | None, said: str) -> tuple[int, int]:
    """The numbers still possible, as an inclusive ``(low, high)`` (empty when low > high), after
    ``said`` (a verdict) about ``guess``; a missing guess rules nothing out."""
    low, high = candidates
    if guess is None or said == "no guess":
        return low, high
    if said == "correct":
        return guess, guess
    return (low, min(high, guess - 1)) if said == "too high" else (max(low, guess + 1), high)


class GuessTasks(ProceduralTasks):
    """A :class:`~marft_envs.core.task.TaskSource` of guessing tasks (see the module docstring)."""

    dataset = "guess_number"
    LEVELS = LEVELS

    @property
    def width(self) -> int:
        """How many integers a range of this level holds."""
        return WIDTHS[self.level]

    def draw(self, rng: random.Random) -> tuple[str, Callable[[dict], Task]]:
        low = rng.randint(*LOWEST)
        high = low + self.width - 1
        hidden = rng.randint(low, high)

        def build(common: dict) -> Task:
            return Task(task_id=common["task_id"], prompt=range_prompt(low, high), answer=str(hidden),
                        metadata={**common["metadata"], "low": low, "high": high, "hidden": hidden})
        return f"{low}..{high}", build


def range_prompt(low: int, high: int) -> str:
    """The task statement: ``"Find the hidden integer from 11 to 17."``."""
    return f"Find the hidden integer from {low} to {high}."


# -- scripted policies (read only the observation) ---------------------------------------------
_RANGE = re.compile(r"from (-?\d+) to (-?\d+)")
_FEEDBACK = re.compile(r"Guess \d+: (-?\d+) is (too high|too low)")


def feasible_from_observation(observation: str) -> tuple[int, int]:
    """The numbers the observation's range and feedback still allow, as ``(low, high)``."""
    match = _RANGE.search(observation)
    if match is None:
        raise ValueError(f"no range 'from L to H' in the observation: {observation[:80]!r}")
    candidates = (int(match.group(1)), int(match.group(2)))
    for guess, said in _FEEDBACK.findall(observation):
        candidates = narrow(candidates, int(guess), said)
    return candidates


def binary_search(agent: str, observation: str, info: dict[str, Any]) -> str:
    """The optimal team: the middle of what the feedback still allows (the lower middle of an
    even count), boxed."""
    low, high = feasible_from_observation(observation)
    return f"\\boxed{{{(low + high) // 2}}}"


def random_guess(agent: str, observation: str, info: dict[str, Any]) -> str:
    """Uniform in the stated range, ignoring feedback (seeded by the observation: reproducible)."""
    match = _RANGE.search(observation)
    low, high = int(match.group(1)), int(match.group(2))
    return f"\\boxed{{{random.Random(observation).randint(low, high)}}}"


def constant_guess(agent: str, observation: str, info: dict[str, Any]) -> str:
    """Always the range's low end."""
    return f"\\boxed{{{_RANGE.search(observation).group(1)}}}"
