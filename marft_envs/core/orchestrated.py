"""The ``orchestrated`` dependency: an orchestrator agent acts first each round, and its output
names who acts next (``Dependency.orchestrated``, documented in ``dependency.py``)."""

from __future__ import annotations

import re
from collections.abc import Sequence

from marft_envs.core.dependency import Dependency, build_round_graph, resolve_name


_NEXT_LINE = re.compile(r"next\s*:\s*(.+)", re.IGNORECASE)


def parse_next_agents(text: str, candidates: Sequence[str]) -> list[str]:
    """Agents named by an orchestrator: the last ``NEXT: a, b`` line, else mentions in text order.

    Names may be agent ids (``actor_0``) or role names (``actor``); unknown names are ignored.
    """
    lines = _NEXT_LINE.findall(text)
    source = lines[-1] if lines else text
    found: list[tuple[int, str]] = []
    for agent in candidates:
        role = agent.rsplit("_", 1)[0]
        for pattern in (re.escape(agent), rf"\b{re.escape(role)}\b"):
            match = re.search(pattern, source, re.IGNORECASE)
            if match:
                found.append((match.start(), agent))
                break
    return [a for _, a in sorted(found)]


class Orchestrated(Dependency):
    """``Dependency.orchestrated``: the orchestrator acts first; the agents its output names act
    next, in the order named (all of them when it names nobody)."""

    name = "orchestrated"

    def __init__(self, orchestrator: str, parse):
        self._orchestrator_name, self._parse = orchestrator, parse

    def _orchestrator(self, agents):
        return resolve_name(self._orchestrator_name, agents)

    def plan(self, agents, round_index, history):
        return build_round_graph(agents, [], active=[self._orchestrator(agents)])

    def after_action(self, graph, agent, output):
        orchestrator = self._orchestrator(graph.agents)
        if agent != orchestrator:
            return graph
        others = [a for a in graph.agents if a != orchestrator]
        named = list(dict.fromkeys(self._parse(output, others)))
        # Why a fallback: a weak model often names nobody; running everyone keeps the episode
        # meaningful instead of producing an empty round.
        followers = named or others
        edges = [(orchestrator, a) for a in followers]
        edges += [(a, b) for i, a in enumerate(followers) for b in followers[i + 1 :]]
        # The chain edges among followers force the topological order to be the named order.
        return build_round_graph(graph.agents, edges, active=[orchestrator, *followers])
