"""``plan_then_solo``: a time-varying dependency D_t, registered by name through an entry point.

Round 0: the planner acts, then the solver, which sees the plan (D(planner, solver) = 1).
Later rounds: the solver acts alone on the feedback; the planner is silent. A YAML config names
it (``dependency: plan_then_solo`` or ``{named: plan_then_solo, kwargs: {plan_rounds: 2}}``), so
the config stays plain data and a checkpointed run resumes with the same D_t.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def plan_then_solo(round_index: int, history: Sequence[Any], plan_rounds: int = 1) -> dict[str, Any]:
    """Who acts in round ``round_index``: planner -> solver for ``plan_rounds`` rounds, then solver only."""
    if round_index < plan_rounds:
        return {"active": ["planner", "solver"], "edges": [("planner", "solver")]}
    return {"active": ["solver"], "edges": []}
