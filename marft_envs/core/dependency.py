"""Flex-POMDP dependency functions D_t as first-class, inspectable objects.

The MARFT paper's Flex-POMDP adds a dependency function D to a Dec-POMDP: ``D(i, j) = 1`` when
agent j's action is conditioned on agent i's action in the same round. Here a :class:`Dependency`
produces, at the start of each round, a :class:`RoundGraph`: which agents act this round, in which
order (a topological order of the edges, ties broken by profile order), and whose outputs each
agent sees. ``RoundGraph.adjacency()`` is the ``[N, N]`` 0/1 matrix D_t over all agents, exposed
in ``infos`` and ``state()`` so a centralised critic can condition on it.

Built-ins (``Dependency.<name>(...)`` or a spec for ``Dependency.from_spec``):

=====================  ==============================================================
``chain()``            default, the original MARFT: D(i, j) = 1 for every i < j
``full()``             ``chain`` plus every agent sees *all* agents' outputs of earlier
                       rounds (not only the graded answer and its feedback)
``independent()``      D = 0: a Dec-POMDP, agents see only the task (and feedback)
``dag(edges)``         any acyclic set of ``(parent, child)`` edges (agent ids or role names)
``from_callable(fn)``  ``fn(round_index, history) -> adjacency`` (``[N, N]`` array-like, edge
                       pairs, or ``{child: [parents]}``; all agents act), or ``{"active":
                       [...], "edges": [...]}`` / a ``RoundGraph`` to also choose who acts;
                       re-evaluated every round
``orchestrated(...)``  an orchestrator acts first; its output names who acts next (a line
                       ``NEXT: reasoner_0, actor_0``; role names work too); those agents then
                       act in that order, each seeing the orchestrator and the earlier ones
                       (:class:`Orchestrated`, :func:`parse_next_agents`)
=====================  ==============================================================

Every graph is validated: unknown names, self-loops and cycles raise ``ValueError`` naming the
offending edge.

Named dependencies: ``Dependency.register("plan_then_solo", fn)`` (or the entry-point group
``marft_envs.dependencies``, name -> ``module:attribute``) makes a time-varying D_t usable by name
wherever a spec is accepted: ``dependency: plan_then_solo`` or ``{named: plan_then_solo, kwargs:
{...}}`` in YAML and profiles. A config that names its dependency stays plain data, so it is saved
in checkpoints and leaderboard records and a resumed run rebuilds the same D_t. What may be
registered: a D_t function ``fn(round_index, history, **kwargs)`` (as for ``from_callable``), a
``Dependency`` subclass (built with ``**kwargs``) or a ready ``Dependency`` instance (shared by
every env that names it, so it must keep no per-episode state).
"""

from __future__ import annotations

import functools
import re
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Any

import numpy as np

Edge = tuple[str, str]

DEPENDENCY_ENTRY_POINT_GROUP = "marft_envs.dependencies"
"""Entry-point group of named dependencies shipped by plugin packages (name -> ``module:attribute``)."""
BUILTIN_DEPENDENCIES = ("chain", "full", "independent", "orchestrated")
"""Names ``from_spec`` understands without a registry; they cannot be re-registered."""
_named: dict[str, Any] = {}  # name -> function, Dependency subclass or instance


@dataclass(frozen=True)
class RoundGraph:
    """D_t for one round: who acts, in which order, and who sees whom."""

    agents: tuple[str, ...]
    """All agent ids of the env in profile order (the index space of ``adjacency``)."""
    active: tuple[str, ...]
    """Agents that act this round, in turn order (a topological order of ``edges``)."""
    edges: frozenset[Edge]
    """``(parent, child)``: child's observation includes parent's output of this round."""
    history: str = "graded"
    """What earlier rounds show each agent: ``"graded"`` (the graded answer and its feedback) or
    ``"all"`` (every agent's output and the feedback)."""

    def parents(self, agent: str) -> tuple[str, ...]:
        """Agents whose output ``agent`` sees this round, in turn order."""
        return tuple(a for a in self.active if (a, agent) in self.edges)

    def adjacency(self) -> np.ndarray:
        """``[N, N]`` int8 matrix, ``D[i, j] = 1`` iff agent j is conditioned on agent i."""
        index = {a: k for k, a in enumerate(self.agents)}
        matrix = np.zeros((len(self.agents), len(self.agents)), dtype=np.int8)  # [N, N]
        for parent, child in self.edges:
            matrix[index[parent], index[child]] = 1
        return matrix

    def as_dict(self) -> dict[str, Any]:
        """D_t in the env's one dependency format: a JSON-friendly dict (lists, not arrays), the
        value of both ``infos[agent]["dependency"]`` and ``env.state()["dependency"]``.

        Keys: ``agents`` (all agent ids, profile order: the index space of ``adjacency``),
        ``active`` (who acts, in turn order), ``edges`` (sorted ``[parent, child]`` pairs),
        ``adjacency`` (``[N, N]`` nested lists of 0/1, ``[i][j] == 1`` iff agent j sees agent i)
        and ``history`` (``"graded"`` or ``"all"``). Space: ``marft_envs.core.spaces.DependencySpace``.
        """
        return {
            "agents": list(self.agents),
            "active": list(self.active),
            "edges": sorted([list(e) for e in self.edges]),
            "adjacency": self.adjacency().tolist(),
            "history": self.history,
        }


@dataclass
class RoundRecord:
    """What happened in one finished round; ``history`` passed to dependencies is a list of these."""

    round_index: int
    graph: RoundGraph
    outputs: dict[str, str]
    outcome: Any = None  # a marft_envs.core.task.RoundOutcome
    extras: dict[str, Any] = field(default_factory=dict)


def resolve_name(name: str, agents: Sequence[str]) -> str:
    """Map an agent id or a role name (``"actor"`` -> ``"actor_0"``) to an agent id."""
    if name in agents:
        return name
    matches = [a for a in agents if a.rsplit("_", 1)[0] == name]
    if len(matches) == 1:
        return matches[0]
    if matches:
        raise ValueError(f"role name {name!r} is ambiguous among {matches}; use an agent id")
    raise ValueError(f"unknown agent {name!r}; agents are {list(agents)}")


def build_round_graph(
    agents: Sequence[str],
    edges: Iterable[Sequence[str]],
    active: Sequence[str] | None = None,
    history: str = "graded",
) -> RoundGraph:
    """Validate edges and order ``active`` topologically (ties by profile order)."""
    agents = tuple(agents)
    active_set = list(agents if active is None else (resolve_name(str(a), agents) for a in active))
    resolved: set[Edge] = set()
    for edge in edges:
        if len(edge) != 2:
            raise ValueError(f"edge {edge!r} must be a (parent, child) pair")
        try:
            parent, child = resolve_name(str(edge[0]), agents), resolve_name(str(edge[1]), agents)
        except ValueError as err:
            raise ValueError(f"edge {tuple(edge)!r}: {err}") from None
        if parent == child:
            raise ValueError(f"edge {(parent, child)!r} is a self-loop; an agent cannot see itself")
        for end in (parent, child):
            if end not in active_set:
                raise ValueError(f"edge {(parent, child)!r} names {end!r}, which does not act this round")
        resolved.add((parent, child))
    if history not in ("graded", "all"):
        raise ValueError(f"history must be 'graded' or 'all', got {history!r}")
    order = _topological_order(active_set, resolved, agents)
    return RoundGraph(agents, tuple(order), frozenset(resolved), history)


def _topological_order(active: list[str], edges: set[Edge], agents: tuple[str, ...]) -> list[str]:
    rank = {a: k for k, a in enumerate(agents)}
    indegree = {a: 0 for a in active}
    for _, child in edges:
        indegree[child] += 1
    order: list[str] = []
    ready = sorted((a for a in active if indegree[a] == 0), key=rank.__getitem__)
    while ready:
        node = ready.pop(0)
        order.append(node)
        for parent, child in sorted(edges, key=lambda e: rank[e[1]]):
            if parent == node:
                indegree[child] -= 1
                if indegree[child] == 0:
                    ready.append(child)
                    ready.sort(key=rank.__getitem__)
    if len(order) < len(active):
        raise ValueError(f"dependency has a cycle; edge {_cycle_edge(active, edges)!r} closes it")
    return order


def _cycle_edge(active: list[str], edges: set[Edge]) -> Edge:
    """Find one edge that closes a cycle (depth-first search for a back edge)."""
    children: dict[str, list[str]] = {a: [] for a in active}
    for parent, child in sorted(edges):
        children[parent].append(child)
    state: dict[str, int] = {}  # 1 = on the stack, 2 = done

    def visit(node: str) -> Edge | None:
        state[node] = 1
        for child in children[node]:
            if state.get(child) == 1:
                return (node, child)
            if child not in state and (found := visit(child)):
                return found
        state[node] = 2
        return None

    for start in active:
        if start not in state and (found := visit(start)):
            return found
    raise AssertionError("no cycle found")  # unreachable when called after a failed sort


class Dependency:
    """Base class: a (possibly time-varying) dependency function D_t."""

    name = "custom"

    def plan(self, agents: Sequence[str], round_index: int, history: Sequence[RoundRecord]) -> RoundGraph:
        """The graph for the round about to start."""
        raise NotImplementedError

    def after_action(self, graph: RoundGraph, agent: str, output: str) -> RoundGraph:
        """Update the round's graph after ``agent`` acted (orchestration); default: unchanged."""
        return graph

    def validate(self, agents: Sequence[str]) -> None:
        """Fail early (at env construction) on a malformed dependency."""
        self.plan(agents, 0, [])

    def fixed_turn_order(self, agents: Sequence[str]) -> tuple[str, ...] | None:
        """The turn order every round has, when it is the same for every round and every output
        (static D_t); None when it may vary (the default: unknown), e.g. orchestration or a
        callable D_t. Decides whether PettingZoo's ``aec_to_parallel`` can cycle the env's agents
        (``TextTaskEnv.metadata["is_parallelizable"]``)."""
        return None

    def __repr__(self) -> str:
        return f"Dependency.{self.name}"

    # -- built-ins -----------------------------------------------------------------------------
    @staticmethod
    def chain() -> Dependency:
        return _Static("chain", _chain_edges)

    @staticmethod
    def full() -> Dependency:
        return _Static("full", _chain_edges, "all")

    @staticmethod
    def independent() -> Dependency:
        return _Static("independent", _no_edges)

    @staticmethod
    def dag(edges: Iterable[Sequence[str]]) -> Dependency:
        return _Static("dag", functools.partial(_fixed_edges, [tuple(e) for e in edges]))

    @staticmethod
    def from_callable(fn: Callable[[int, Sequence[RoundRecord]], Any]) -> Dependency:
        return _Callable(fn)

    @staticmethod
    def orchestrated(
        orchestrator: str = "orchestrator",
        parse: Callable[[str, Sequence[str]], list[str]] | None = None,
    ) -> Dependency:
        return Orchestrated(orchestrator, parse or parse_next_agents)

    @staticmethod
    def register(name: str, dependency: Any, replace: bool = False) -> None:
        """Make ``dependency`` usable by ``name`` in specs (YAML, profiles, ``from_spec``).

        ``dependency``: a D_t function ``fn(round_index, history, **kwargs)``, a ``Dependency``
        subclass (built with ``**kwargs``) or a ``Dependency`` instance. Registering a taken name
        with another object raises unless ``replace=True``.
        """
        if not isinstance(name, str) or not name:
            raise ValueError(f"a dependency name must be a non-empty string, got {name!r}")
        if name in BUILTIN_DEPENDENCIES:
            raise ValueError(f"{name!r} is a built-in dependency ({', '.join(BUILTIN_DEPENDENCIES)}); "
                             "register yours under another name")
        if not (isinstance(dependency, Dependency) or callable(dependency)):
            raise TypeError(f"dependency {name!r} must be a function fn(round_index, history), a Dependency "
                            f"subclass or a Dependency instance, got {type(dependency).__name__}")
        if name in _named and _named[name] is not dependency and not replace:
            raise ValueError(f"dependency name {name!r} is already registered to {_named[name]!r}; "
                             "pass replace=True to override it")
        _named[name] = dependency

    @staticmethod
    def registered() -> list[str]:
        """Every name ``from_spec`` accepts: built-ins, registered and entry-point dependencies."""
        names = set(BUILTIN_DEPENDENCIES) | set(_named)
        names.update(ep.name for ep in entry_points(group=DEPENDENCY_ENTRY_POINT_GROUP))
        return sorted(names)

    @staticmethod
    def named(name: str, **kwargs: Any) -> Dependency:
        """Build the dependency registered as ``name`` (run time first, then entry points)."""
        target = _lookup(name)
        if isinstance(target, Dependency):
            if kwargs:
                raise ValueError(f"dependency {name!r} is a ready instance and takes no kwargs, got {sorted(kwargs)}")
            return target
        if isinstance(target, type) and issubclass(target, Dependency):
            built = target(**kwargs)
        else:
            built = _Callable(functools.partial(target, **kwargs) if kwargs else target)
        built.name = name
        return built

    @staticmethod
    def from_spec(spec: Any) -> Dependency:
        """Build a dependency from a name, a ``{"dag": edges}``-style dict, a callable or itself."""
        if spec is None:
            return Dependency.chain()
        if isinstance(spec, Dependency):
            return spec
        if isinstance(spec, str):
            simple = {"chain": Dependency.chain, "full": Dependency.full,
                      "independent": Dependency.independent, "orchestrated": Dependency.orchestrated}
            return simple[spec]() if spec in simple else Dependency.named(spec)
        if isinstance(spec, Mapping) and "named" in spec:
            extra = set(spec) - {"named", "kwargs"}
            if extra:
                raise ValueError(f"a {{'named': ...}} dependency spec takes only 'named' and 'kwargs', got {sorted(extra)}")
            return Dependency.named(spec["named"], **(spec.get("kwargs") or {}))
        if isinstance(spec, Mapping) and len(spec) == 1:
            (kind, arg), = spec.items()
            if kind == "dag":
                return Dependency.dag(arg)
            if kind == "orchestrated":
                return Dependency.orchestrated(**(arg or {}))
        if callable(spec):
            return Dependency.from_callable(spec)
        raise ValueError(
            f"cannot build a dependency from {spec!r}; expected a name ({', '.join(Dependency.registered())}), "
            "{'named': name, 'kwargs': {...}}, {'dag': [[parent, child], ...]}, {'orchestrated': {...}} "
            "or a callable"
        )


def _lookup(name: str) -> Any:
    """The object registered as ``name``, loading it from its entry point the first time."""
    if name in _named:
        return _named[name]
    for ep in entry_points(group=DEPENDENCY_ENTRY_POINT_GROUP):
        if ep.name != name:
            continue
        if name in BUILTIN_DEPENDENCIES:
            warnings.warn(f"ignoring dependency entry point {ep.name!r} = {ep.value!r}: the name is built in",
                          stacklevel=3)
            continue
        Dependency.register(name, ep.load())
        return _named[name]
    raise ValueError(
        f"unknown dependency {name!r}; expected one of {Dependency.registered()}, "
        "{'dag': [[parent, child], ...]}, {'orchestrated': {'orchestrator': name}} or a callable. "
        "Register your own with Dependency.register(name, fn) or the "
        f"{DEPENDENCY_ENTRY_POINT_GROUP!r} entry-point group"
    )


# The edge functions of the static built-ins live at module level (not lambdas) so that a
# dependency, and the env holding it, pickles: vector envs and multiprocessing copy envs that way.
def _chain_edges(agents: Sequence[str]) -> list[Edge]:
    """D(i, j) = 1 for every i < j in profile order."""
    return [(a, b) for i, a in enumerate(agents) for b in agents[i + 1 :]]


def _no_edges(agents: Sequence[str]) -> list[Edge]:
    return []


def _fixed_edges(edges: list[Edge], agents: Sequence[str]) -> list[Edge]:
    return edges


class _Static(Dependency):
    def __init__(self, name: str, edges_for: Callable[[Sequence[str]], list], history: str = "graded"):
        self.name, self._edges_for, self._history = name, edges_for, history

    def plan(self, agents, round_index, history):
        return build_round_graph(agents, self._edges_for(list(agents)), history=self._history)

    def fixed_turn_order(self, agents):
        # The same edges every round, and after_action never changes the graph.
        return self.plan(agents, 0, []).active


class _Callable(Dependency):
    name = "callable"

    def __init__(self, fn):
        self._fn = fn

    def plan(self, agents, round_index, history):
        value = self._fn(round_index, history)
        if isinstance(value, RoundGraph):
            return build_round_graph(agents, value.edges, active=value.active, history=value.history)
        if isinstance(value, Mapping) and "active" in value:
            # Agent ids always end in "_<k>", so the key "active" cannot be a child's name.
            return build_round_graph(agents, value.get("edges", []), active=value["active"],
                                     history=value.get("history", "graded"))
        return build_round_graph(agents, edges_from_adjacency(value, agents))


# -- orchestrated: an orchestrator's output names who acts next ---------------------------------
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


def edges_from_adjacency(value: Any, agents: Sequence[str]) -> list[Edge]:
    """Accept an ``[N, N]`` matrix, a list of ``(parent, child)`` pairs, or ``{child: parents}``."""
    if isinstance(value, Mapping):
        return [(p, c) for c, parents in value.items() for p in parents]
    if isinstance(value, np.ndarray) or (
        isinstance(value, Sequence) and value and isinstance(value[0], Sequence)
        and not isinstance(value[0], str) and len(value) == len(agents)
        and all(len(row) == len(agents) and not isinstance(row[0], str) for row in value)
    ):
        matrix = np.asarray(value)
        if matrix.shape != (len(agents), len(agents)) or not np.isin(matrix, (0, 1)).all():
            raise ValueError(
                f"adjacency must be a {len(agents)}x{len(agents)} matrix of 0/1 over {list(agents)}, "
                f"got shape {matrix.shape}"
            )
        return [(agents[i], agents[j]) for i, j in zip(*np.nonzero(matrix))]
    if value is None:
        return []
    return [tuple(e) for e in value]
