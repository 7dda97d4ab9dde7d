import numpy as np
import pytest

from marft_envs import Dependency, RoundRecord
from marft_envs.core.dependency import build_round_graph, parse_next_agents

AGENTS = ["planner_0", "reasoner_0", "actor_0", "verifier_0"]


def test_chain_is_upper_triangular_and_ordered():
    g = Dependency.chain().plan(AGENTS, 0, [])
    assert g.active == tuple(AGENTS)
    assert np.array_equal(g.adjacency(), np.triu(np.ones((4, 4), dtype=np.int8), k=1))
    assert g.parents("actor_0") == ("planner_0", "reasoner_0")
    assert g.history == "graded"


def test_full_shows_all_history_and_independent_has_no_edges():
    assert Dependency.full().plan(AGENTS, 0, []).history == "all"
    g = Dependency.independent().plan(AGENTS, 0, [])
    assert g.adjacency().sum() == 0 and g.active == tuple(AGENTS)


def test_dag_turn_order_is_topological_with_profile_tiebreak():
    # verifier must come after actor; actor before planner; reasoner has no constraint.
    g = Dependency.dag([("actor", "verifier_0"), ("actor_0", "planner")]).plan(AGENTS, 0, [])
    order = g.active
    assert order.index("actor_0") < order.index("verifier_0")
    assert order.index("actor_0") < order.index("planner_0")
    assert order == ("reasoner_0", "actor_0", "planner_0", "verifier_0")
    assert g.parents("planner_0") == ("actor_0",)


@pytest.mark.parametrize(
    "edges, message",
    [
        ([("actor_0", "ghost_0")], "ghost_0"),
        ([("actor_0", "actor_0")], "self-loop"),
        ([("actor_0", "verifier_0"), ("verifier_0", "reasoner_0"), ("reasoner_0", "actor_0")], "cycle"),
        ([("actor_0",)], "pair"),
    ],
)
def test_invalid_dags_name_the_bad_edge(edges, message):
    with pytest.raises(ValueError, match=message):
        Dependency.dag(edges).validate(AGENTS)


def test_cycle_error_names_an_edge_on_the_cycle():
    edges = [("planner_0", "reasoner_0"), ("actor_0", "verifier_0"), ("verifier_0", "actor_0")]
    with pytest.raises(ValueError) as err:
        build_round_graph(AGENTS, edges)
    assert "('actor_0', 'verifier_0')" in str(err.value) or "('verifier_0', 'actor_0')" in str(err.value)


def test_callable_dependency_changes_per_round_and_sees_history():
    seen = []

    def schedule(round_index, history):
        seen.append(len(history))
        if round_index == 0:
            return [("reasoner_0", "actor_0")]
        return {"actor_0": ["verifier_0"]}  # child -> parents form

    dep = Dependency.from_callable(schedule)
    g0 = dep.plan(AGENTS, 0, [])
    g1 = dep.plan(AGENTS, 1, [RoundRecord(0, g0, {})])
    assert g0.parents("actor_0") == ("reasoner_0",)
    assert g1.parents("actor_0") == ("verifier_0",)
    assert g1.active.index("verifier_0") < g1.active.index("actor_0")
    assert seen == [0, 1]


def test_callable_adjacency_matrix_is_validated():
    good = np.zeros((4, 4), dtype=int)
    good[0, 3] = 1
    g = Dependency.from_callable(lambda r, h: good).plan(AGENTS, 0, [])
    assert g.parents("verifier_0") == ("planner_0",)
    with pytest.raises(ValueError, match="4x4"):
        Dependency.from_callable(lambda r, h: np.ones((3, 3))).plan(AGENTS, 0, [])


def test_orchestrated_schedules_named_agents_in_order():
    agents = ["orchestrator_0", "reasoner_0", "actor_0"]
    dep = Dependency.orchestrated()
    g = dep.plan(agents, 0, [])
    assert g.active == ("orchestrator_0",)
    g = dep.after_action(g, "orchestrator_0", "Let us see.\nNEXT: actor, reasoner")
    assert g.active == ("orchestrator_0", "actor_0", "reasoner_0")
    assert g.parents("reasoner_0") == ("orchestrator_0", "actor_0")
    # Naming nobody falls back to everyone in profile order.
    g = dep.after_action(dep.plan(agents, 0, []), "orchestrator_0", "hmm")
    assert g.active == tuple(agents)


def test_parse_next_agents_prefers_the_next_line():
    cands = ["reasoner_0", "actor_0"]
    assert parse_next_agents("actor thinks... NEXT: reasoner_0", cands) == ["reasoner_0"]
    assert parse_next_agents("first the reasoner then the actor", cands) == ["reasoner_0", "actor_0"]
    assert parse_next_agents("nobody", cands) == []


@pytest.mark.parametrize("spec", ["chain", "full", "independent", {"dag": [["reasoner_0", "actor_0"]]}])
def test_from_spec(spec):
    assert isinstance(Dependency.from_spec(spec), Dependency)


def test_from_spec_rejects_unknown_names():
    with pytest.raises(ValueError, match="expected one of"):
        Dependency.from_spec("ring")


def test_callable_can_choose_who_acts_each_round():
    def planner_only_first(round_index, history):
        if round_index == 0:
            return {"active": ["planner_0", "actor_0"], "edges": [("planner_0", "actor_0")]}
        return {"active": ["actor_0"]}

    dep = Dependency.from_callable(planner_only_first)
    assert dep.plan(AGENTS, 0, []).active == ("planner_0", "actor_0")
    assert dep.plan(AGENTS, 1, []).active == ("actor_0",)
    with pytest.raises(ValueError, match="does not act"):
        Dependency.from_callable(lambda r, h: {"active": ["actor_0"], "edges": [("planner_0", "actor_0")]}).validate(AGENTS)
