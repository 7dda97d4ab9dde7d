"""Scripted baselines for ``marft score --policy scripted:marft_example_env.scripted:<name>``.

A scripted policy is ``fn(agent, observation, info) -> str``: the agent id, its PettingZoo
observation (``{"text": ...}``) and its ``infos`` entry; it returns the utterance.
"""

from __future__ import annotations

import re
from typing import Any

_WORD = re.compile(r"in the word '([a-z]+)'")


def count_vowels(agent: str, observation: dict[str, Any], info: dict[str, Any]) -> str:
    """Reads the word from the task statement and counts its vowels (an upper bound: always right)."""
    word = _WORD.findall(observation["text"])[-1]
    if info["role"] == "planner":
        return " ".join(c.upper() if c in "aeiou" else c for c in word)
    return f"\\boxed{{{sum(c in 'aeiou' for c in word)}}}"


def always_two(agent: str, observation: dict[str, Any], info: dict[str, Any]) -> str:
    """Answers 2 whatever the word (a floor: the share of words with exactly two vowels)."""
    return "\\boxed{2}"
