"""Gymnasium spaces for free-form text.

``gymnasium.spaces.Text`` checks every character against its charset, and its default charset is
alphanumeric only, so an observation such as ``"Compute 7 + 5."`` would be "out of bounds". A
charset listing all 1.1M Unicode code points works but costs hundreds of MB per space (Text keeps
a set, a tuple and an index dict of it). :class:`UnicodeText` instead accepts *any* ``str`` whose
length is within bounds, and samples from a compact multilingual charset (ASCII, Latin-1, Greek,
CJK, maths symbols, emoji and one lone surrogate) so that random-action tests still exercise
hostile text.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces

_SAMPLE_RANGES = (
    (0x20, 0x7E),  # printable ASCII
    (0x0A, 0x0A),  # newline
    (0xA0, 0xFF),  # Latin-1 supplement
    (0x391, 0x3C9),  # Greek
    (0x2200, 0x22FF),  # mathematical operators
    (0x4E00, 0x4E40),  # a few CJK ideographs
    (0x1F600, 0x1F610),  # a few emoji (outside the BMP)
    (0xD800, 0xD800),  # a lone surrogate: text from broken decoders must not crash envs
)
SAMPLE_CHARSET = "".join(chr(c) for lo, hi in _SAMPLE_RANGES for c in range(lo, hi + 1))
"""Characters :meth:`UnicodeText.sample` draws from (membership accepts every character)."""


class UnicodeText(spaces.Text):
    """A ``Text`` space whose ``contains`` accepts every Unicode string within the length bounds."""

    def __init__(self, max_length: int, *, min_length: int = 0, seed: Any = None):
        super().__init__(max_length, min_length=min_length, charset=SAMPLE_CHARSET, seed=seed)

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and self.min_length <= len(x) <= self.max_length

    def __repr__(self) -> str:
        return f"UnicodeText({self.min_length}, {self.max_length})"

    def __eq__(self, other: Any) -> bool:
        return (
            isinstance(other, UnicodeText)
            and other.min_length == self.min_length
            and other.max_length == self.max_length
        )


def text_observation_space(max_length: int) -> spaces.Dict:
    """The observation space of every marft text env: ``{"text": str}``.

    A ``Dict`` wrapper (rather than a bare ``Text``) because ``pettingzoo.test.api_test`` checks
    dtypes of bare observations and ``Text``'s ``str`` dtype trips that check.
    """
    return spaces.Dict({"text": UnicodeText(max_length)})


def dependency_space(num_agents: int) -> spaces.MultiBinary:
    """Space of one adjacency matrix D_t (``[N, N]`` of 0/1, ``D[i, j] = 1``: j sees i)."""
    return spaces.MultiBinary([num_agents, num_agents])


def empty_adjacency(num_agents: int) -> np.ndarray:
    return np.zeros((num_agents, num_agents), dtype=np.int8)
