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

from collections.abc import Sequence
from typing import Any

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


class DependencySpace(spaces.Space):
    """Space of D_t in the env's one dependency format (``RoundGraph.as_dict``), as in
    ``infos[agent]["dependency"]`` and ``state()["dependency"]``.

    A member is a dict with exactly the keys ``agents`` (the env's agent ids, in profile order),
    ``active`` (distinct agent ids, in turn order, at least one), ``edges`` (sorted
    ``[parent, child]`` pairs between active agents, parent before child in ``active``), ``adjacency`` (``[N, N]``
    nested lists of 0/1 agreeing with ``edges``: ``adjacency[i][j] == 1`` iff agent j sees agent i)
    and ``history`` (``"graded"`` or ``"all"``). ``sample()`` draws a random round graph (random
    active set in profile order, random forward edges between them).
    """

    HISTORY = ("graded", "all")

    def __init__(self, agents: Sequence[str], seed: Any = None):
        self.agents = tuple(agents)
        super().__init__(None, None, seed)

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def sample(self, mask: Any = None) -> dict[str, Any]:
        n = len(self.agents)
        rng = self.np_random
        chosen = [a for a in self.agents if rng.random() < 0.5] or [self.agents[int(rng.integers(n))]]
        edges = sorted([a, b] for i, a in enumerate(chosen) for b in chosen[i + 1:] if rng.random() < 0.5)
        return _as_dict(self.agents, chosen, edges, self.HISTORY[int(rng.integers(2))])

    def contains(self, x: Any) -> bool:
        if not isinstance(x, dict) or set(x) != {"agents", "active", "edges", "adjacency", "history"}:
            return False
        agents, active, edges = x["agents"], x["active"], x["edges"]
        if not isinstance(agents, list) or tuple(agents) != self.agents or x["history"] not in self.HISTORY:
            return False
        if not isinstance(active, list) or not active or len(set(active)) != len(active) \
                or not all(isinstance(a, str) and a in self.agents for a in active):
            return False
        if not isinstance(edges, list) or not all(
                isinstance(e, list) and len(e) == 2 and e[0] in active and e[1] in active
                and active.index(e[0]) < active.index(e[1])  # turn order is a topological order
                for e in edges):
            return False
        return x == _as_dict(self.agents, active, edges, x["history"])

    def __repr__(self) -> str:
        return f"DependencySpace({list(self.agents)})"

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, DependencySpace) and other.agents == self.agents


def _as_dict(agents: tuple[str, ...], active: list[str], edges: list, history: str) -> dict[str, Any]:
    index = {a: k for k, a in enumerate(agents)}
    adjacency = [[0] * len(agents) for _ in agents]
    for parent, child in edges:
        adjacency[index[parent]][index[child]] = 1
    return {"agents": list(agents), "active": list(active), "edges": sorted([list(e) for e in edges]),
            "adjacency": adjacency, "history": history}


def dependency_space(agents: Sequence[str]) -> DependencySpace:
    """Space of D_t (``infos[agent]["dependency"]`` and ``state()["dependency"]``) over ``agents``."""
    return DependencySpace(agents)
