"""Multi-agent scheduling for WebShop: a time-varying D_t built on a base dependency.

Roles are recognised by name (any profile may use them):

* ``planner`` acts in round 0 only: it writes a search plan once; later rounds show the plan to
  the other agents instead of running the planner again.
* ``verifier`` acts only in a round where the graded agent (the shopper) has just proposed
  ``click[buy now]`` on an item page: :meth:`WebShopDependency.after_action` adds the verifier to
  that round with the edge shopper -> verifier, so D_t changes within the round.
* every other role acts every round.

Edges come from the base dependency (the profile's, default ``chain``) restricted to the agents
that act, so ``chain``, ``dag`` and ``independent`` keep their meaning for the rest of the team.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from marft_envs.core.dependency import Dependency, RoundGraph, RoundRecord, build_round_graph

PLANNER_ROLE = "planner"
VERIFIER_ROLE = "verifier"
_VERDICT = re.compile(r"\b(approve[sd]?|reject(?:s|ed)?)\b", re.IGNORECASE)


def parse_verdict(text: str) -> bool | None:
    """True for approval, False for rejection, None when the text has neither word (the last
    ``APPROVE``/``REJECT`` wins, so "I would not reject ... APPROVE" approves)."""
    found = _VERDICT.findall(text or "")
    if not found:
        return None
    return found[-1].lower().startswith("approve")


class WebShopDependency(Dependency):
    """Planner once, shopper every round, verifier only on a purchase attempt."""

    name = "webshop"

    def __init__(
        self,
        base: Dependency,
        role_of: Callable[[str], str],
        is_graded: Callable[[str], bool],
        wants_purchase: Callable[[str], bool],
    ):
        self.base = base
        self._role_of = role_of
        self._is_graded = is_graded
        self._wants_purchase = wants_purchase
        self._full: RoundGraph | None = None

    def __repr__(self) -> str:
        return f"Dependency.webshop(base={self.base!r})"

    def _restrict(self, full: RoundGraph, active: Sequence[str], extra=()) -> RoundGraph:
        edges = [(p, c) for p, c in full.edges if p in active and c in active] + list(extra)
        return build_round_graph(full.agents, edges, active=list(active), history=full.history)

    def plan(self, agents: Sequence[str], round_index: int, history: Sequence[RoundRecord]) -> RoundGraph:
        self._full = self.base.plan(agents, round_index, history)
        active = []
        for agent in self._full.active:
            role = self._role_of(agent)
            if role == VERIFIER_ROLE or (role == PLANNER_ROLE and round_index > 0):
                continue
            active.append(agent)
        if not active:
            raise ValueError("a WebShop profile needs a role other than planner/verifier to act every round (a shopper)")
        return self._restrict(self._full, active)

    def validate(self, agents: Sequence[str]) -> None:
        # Round 1 too: a team of only a planner/verifier passes round 0 but has nobody to shop after.
        self.plan(agents, 0, [])
        self.plan(agents, 1, [])
        self._full = None

    def fixed_turn_order(self, agents: Sequence[str]) -> tuple[str, ...] | None:
        # A planner skips every round after the first and a verifier acts only on a purchase
        # attempt: with either, the turn order varies from round to round.
        if any(self._role_of(a) in (PLANNER_ROLE, VERIFIER_ROLE) for a in agents):
            return None
        return self.base.fixed_turn_order(agents)

    def after_action(self, graph: RoundGraph, agent: str, output: str) -> RoundGraph:
        graph = self.base.after_action(graph, agent, output)
        if not self._is_graded(agent) or not self._wants_purchase(output):
            return graph
        verifiers = [a for a in graph.agents if self._role_of(a) == VERIFIER_ROLE and a not in graph.active]
        if not verifiers:
            return graph
        full = self._full or graph
        acted = set(graph.active[: graph.active.index(agent) + 1])
        # Verifiers see the shopper (and whoever the base dependency lets them see among those
        # that acted); no edge may point back into an agent that already acted.
        extra = [(agent, v) for v in verifiers]
        edges = [(p, c) for p, c in full.edges if c in verifiers and p in graph.active and (p, c) not in extra]
        kept = [(p, c) for p, c in graph.edges if not (c in acted and p in verifiers)]
        return build_round_graph(graph.agents, kept + edges + extra, active=[*graph.active, *verifiers],
                                 history=graph.history)
