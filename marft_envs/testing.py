"""The checks every marft environment must pass, in one call: ``check_env(env_id, **kwargs)``.

Run it in your env package's tests (``examples/marft-example-env/tests`` does)::

    from marft_envs.testing import check_env

    def test_env_contract():
        check_env("mylab/Sorting-v0")            # raises EnvContractError naming each failed check

marft's own suite runs it over every id of :func:`marft_envs.list_envs` (built-ins and installed
plugins), so a registered env is contract-tested without anyone adding it to a list.

The checks (:data:`CHECKS`, run in this order; ``checks=`` selects some, ``skip=`` skips some with
a reason):

1. ``api``: PettingZoo's ``api_test``, unmodified.
2. ``seed``: PettingZoo's ``seed_test``: the same seed gives the same episode.
3. ``parallel``: PettingZoo's ``parallel_api_test`` and ``parallel_seed_test`` on the env's parallel
   view: a marft text env through :class:`~marft_envs.core.parallel.DependencyParallelEnv` (agents
   act in D_t waves), any other env through PettingZoo's ``aec_to_parallel``. Skipped for an
   AEC-only env (``metadata["is_parallelizable"]`` not true: PettingZoo defines no parallel view;
   for a marft text env, its class's metadata, as the D_t-wave view holds for every D_t).
4. ``splits``: an env taking a ``split`` keyword keeps ``"train"`` and ``"test"`` disjoint: no task
   prompt (whitespace-normalised) of one is a prompt of the other. Tasks are read from the env's
   task source (``env.tasks``, the first ``max_split_tasks`` of each), else from the first agent's
   observation after ``reset(seed=k)``. Skipped when the env has no ``split`` keyword or the data
   of a split is absent (``FileNotFoundError``).
5. ``state``: ``state()`` only grows over an episode: the global state is append-only, so each
   step's state text (``state()`` itself, or its ``"text"`` entry) starts with the previous one;
   and the state lies in ``env.state_space`` when the env has one. Episodes are played with sampled
   actions. Skipped when ``state()`` is not implemented or is not text.
6. ``dependency``: D_t is consistent. Every step, ``infos[agent]["dependency"]`` (the format of
   :meth:`~marft_envs.core.dependency.RoundGraph.as_dict`) is well formed (its ``agents`` are the
   env's, ``adjacency`` agrees with ``edges``, edges join active agents in turn order), is the same
   for every live agent and equals ``state()["dependency"]``; the agent selected is the next one of
   ``active`` after those that already acted this round; ``infos[agent]["parents"]`` and
   ``["turn_order"]`` agree with it; and who sees whose messages matches it: each agent acts with
   a unique number (a marker that survives a narrow channel such as Relay's one-number channel),
   and an agent's observation holds the marker of every parent that acted this round (as
   ``env.heard`` passes it, when the env has that hook) and of no other agent of this round.
   Skipped when the env puts no ``"dependency"`` in its infos.

Each check is also a function of its own (``check_api(make_env)`` ...) taking ``make_env(**extra)``,
a callable that builds a fresh env; :func:`check_env` builds that from an env id (or a class or
factory) and its keyword arguments.
"""

from __future__ import annotations

import contextlib
import inspect
import io
import os
import random
import traceback
import warnings
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from pettingzoo import AECEnv

from marft_envs.core.parallel import DependencyParallelEnv
from marft_envs.core.text_env import TextTaskEnv

CHECKS: tuple[str, ...] = ("api", "seed", "parallel", "splits", "state", "dependency")
"""Every check's name, in the order :func:`check_env` runs them."""
SPLITS: tuple[str, str] = ("train", "test")
"""The two splits the ``splits`` check builds and compares."""
PASSED = "passed"
"""An outcome of :func:`check_env`; the other is ``"skipped: <reason>"``."""
MAX_EPISODE_STEPS = 1_000
"""Steps after which the ``state`` and ``dependency`` checks stop playing one episode."""

MakeEnv = Callable[..., AECEnv]
"""``make_env(**extra) -> env``: a fresh env, ``extra`` overriding its keyword arguments."""

# PettingZoo's checks nudge towards Box/Discrete spaces; text envs use Dict(text=Text) by design.
_TEXT_ENV_NUDGES = ("Observation is not a NumPy array", "Observation space for each agent probably should be",
                    "Action space for each agent probably should be", "State space for each environment probably")


class EnvContractError(AssertionError):
    """An env failed one or more checks; ``failures`` maps each failed check to what went wrong."""

    def __init__(self, env: str, failures: Mapping[str, str]):
        self.env, self.failures = env, dict(failures)
        lines = [f"{env} fails the marft env contract (marft_envs.testing) in {len(self.failures)} of its checks:"]
        lines += [f"  [{check}] {message}" for check, message in self.failures.items()]
        super().__init__("\n".join(lines))


class CheckSkipped(Exception):
    """Raised inside a check that does not apply to the env; the message is the reason."""


# -- the checks -------------------------------------------------------------------------------------
@contextlib.contextmanager
def _quiet():
    """PettingZoo's tests print progress lines and warn about non-array text spaces: keep both out."""
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        for nudge in _TEXT_ENV_NUDGES:
            warnings.filterwarnings("ignore", message=nudge)
        yield


def describe(err: BaseException) -> str:
    """One line for a failure: the message, with the exception type unless it is a bare assertion,
    and the failing line when there is no message (PettingZoo has a few bare ``assert`` lines)."""
    text = str(err).strip()
    if isinstance(err, AssertionError) and text:
        return text
    if text:
        return f"{type(err).__name__}: {text}"
    frame = traceback.extract_tb(err.__traceback__)[-1] if err.__traceback__ else None
    where = f" at {frame.filename.rsplit('site-packages/', 1)[-1]}:{frame.lineno} ({frame.line})" if frame else ""
    return f"{type(err).__name__}{where}"


@contextlib.contextmanager
def _named(test: str):
    """Prefix a failure inside one of PettingZoo's tests with the test's name."""
    try:
        yield
    except CheckSkipped:
        raise
    except Exception as err:  # noqa: BLE001 - re-raised with the test's name, the original chained
        raise AssertionError(f"{test} failed: {describe(err)}") from err


def check_api(make_env: MakeEnv, num_cycles: int = 20) -> None:
    """PettingZoo's ``api_test`` on a fresh env."""
    from pettingzoo.test import api_test

    env = make_env()
    with _quiet(), _named("pettingzoo.test.api_test"):
        api_test(env, num_cycles=num_cycles)


def check_seed(make_env: MakeEnv, num_cycles: int = 10) -> None:
    """PettingZoo's ``seed_test``: two envs reset with the same seed play the same episode."""
    from pettingzoo.test import seed_test

    with _quiet(), _named("pettingzoo.test.seed_test"):
        seed_test(lambda: make_env(), num_cycles=num_cycles)


def parallel_view(env: AECEnv) -> Any:
    """The env's parallel view: D_t waves for a marft text env, ``aec_to_parallel`` for any other
    env whose metadata says it is parallelizable; :class:`CheckSkipped` for an AEC-only env.

    A marft text env counts as parallelizable when its *class* declares it: the D_t-wave view
    works for every D_t, while the instance's ``metadata["is_parallelizable"]`` is true only where
    PettingZoo's own ``aec_to_parallel`` also holds (every agent acts every round)."""
    base = env if isinstance(env, TextTaskEnv) else getattr(env, "unwrapped", None)
    declared = type(base).metadata if isinstance(base, TextTaskEnv) else getattr(env, "metadata", {})
    if not declared.get("is_parallelizable", False):
        raise CheckSkipped("AEC-only env: metadata['is_parallelizable'] is not true, so PettingZoo defines "
                           "no parallel view of it")
    if isinstance(base, TextTaskEnv):
        return DependencyParallelEnv(base)
    from pettingzoo.utils.conversions import aec_to_parallel

    return aec_to_parallel(env)


def check_parallel(make_env: MakeEnv, num_cycles: int = 10) -> None:
    """PettingZoo's ``parallel_api_test`` and ``parallel_seed_test`` on :func:`parallel_view`."""
    from pettingzoo.test import parallel_api_test, parallel_seed_test

    view = parallel_view(make_env())
    with _quiet(), _named(f"pettingzoo.test.parallel_api_test on {type(view).__name__}"):
        parallel_api_test(view, num_cycles=num_cycles)
    with _quiet(), _named(f"pettingzoo.test.parallel_seed_test on {type(view).__name__}"):
        parallel_seed_test(lambda: parallel_view(make_env()), num_cycles=num_cycles)


def takes_split(creator: Any) -> bool:
    """Whether the env class (or factory) has a ``split`` keyword."""
    try:
        return "split" in inspect.signature(creator).parameters
    except (TypeError, ValueError):  # a builtin or C callable: no signature to read
        return False


def _norm(text: str) -> str:
    return " ".join(text.split())


def split_tasks(env: AECEnv, limit: int) -> dict[str, str]:
    """Normalised task text -> a task id, for the first ``limit`` tasks of ``env``.

    From the env's task source (``env.tasks``: ``len`` and ``__getitem__`` giving tasks with a
    ``prompt``) when it has one, else from the first agent's observation after ``reset(seed=k)``.
    """
    source = getattr(getattr(env, "unwrapped", env), "tasks", None)
    found: dict[str, str] = {}
    if source is not None and hasattr(source, "__len__") and hasattr(source, "__getitem__"):
        for index in range(min(len(source), limit)):
            task = source[index]
            found.setdefault(_norm(str(getattr(task, "prompt", task))), str(getattr(task, "task_id", index)))
        return found
    for seed in range(min(limit, 200)):
        env.reset(seed=seed)
        found.setdefault(_norm(_text_of(env.observe(env.agent_selection)) or ""), f"reset(seed={seed})")
    return found


def check_splits(make_env: MakeEnv, creator: Any = None, max_split_tasks: int = 10_000) -> None:
    """The ``"train"`` and ``"test"`` splits share no task (see the module docstring)."""
    if creator is not None and not takes_split(creator):
        raise CheckSkipped("the env takes no split keyword")
    tasks = {}
    for split in SPLITS:
        try:
            env = make_env(split=split)
        except FileNotFoundError as err:
            raise CheckSkipped(f"split {split!r} could not be made, its data is absent: {err}") from None
        tasks[split] = split_tasks(env, max_split_tasks)
        env.close()
    train, test = (tasks[s] for s in SPLITS)
    shared = [text for text in train if text in test]
    if shared:
        examples = "; ".join(f"train {train[t]!r} = test {test[t]!r}: {_cut(t, 80)!r}" for t in shared[:3])
        raise AssertionError(
            f"splits 'train' and 'test' share {len(shared)} task(s) (compared the first {len(train)} and "
            f"{len(test)} distinct tasks), e.g. {examples}. A held-out split must be disjoint from training")


def _text_of(value: Any) -> str | None:
    """The text of an observation or a state: itself when a str, else its ``"text"`` entry."""
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping) and isinstance(value.get("text"), str):
        return value["text"]
    return None


def _cut(text: str, n: int = 60) -> str:
    return text if len(text) <= n else text[:n] + "..."


def _episodes(env: AECEnv, episodes: int) -> Iterable[tuple[int, int]]:
    """Reset ``env`` for each seed and yield ``(seed, step)`` before every step, up to the cap."""
    for seed in range(episodes):
        env.reset(seed=seed)
        for space_seed, agent in enumerate(env.possible_agents):
            env.action_space(agent).seed(seed * 1000 + space_seed)
        for step, _agent in enumerate(env.agent_iter(MAX_EPISODE_STEPS)):
            yield seed, step


def check_state(make_env: MakeEnv, episodes: int = 3) -> None:
    """``state()`` only grows within an episode and lies in ``state_space`` (module docstring)."""
    env = make_env()
    env.reset(seed=0)
    try:
        first = env.state()
    except NotImplementedError:
        raise CheckSkipped("the env does not implement state()") from None
    if _text_of(first) is None:
        raise CheckSkipped(f"state() is neither text nor a dict with a 'text' entry "
                           f"(got {type(first).__name__}): growth is defined for text")
    space = getattr(env, "state_space", None)
    previous: str | None = None
    for seed, step in _episodes(env, episodes):
        state = env.state()
        text = _text_of(state)
        where = f"episode seed={seed}, before step {step}"
        if text is None:
            raise AssertionError(f"state() stopped being text at {where}: got {type(state).__name__}")
        if space is not None and not space.contains(state):
            raise AssertionError(f"state() is not in env.state_space at {where}: {_cut(repr(state), 200)}")
        if step > 0 and not text.startswith(previous):
            same = len(os.path.commonprefix([previous, text]))
            raise AssertionError(
                f"state() shrank or changed at {where}: the global state is append-only within an episode, "
                f"but from character {same} it held {_cut(previous[same:])!r} and now holds {_cut(text[same:])!r}")
        previous = text
        agent = env.agent_selection
        _, _, terminated, truncated, _ = env.last()
        env.step(None if terminated or truncated else env.action_space(agent).sample())
    env.close()


def _dependency_errors(graph: Any, agents: list[str]) -> list[str]:
    """What is malformed in one D_t dict (``RoundGraph.as_dict`` format); empty when well formed."""
    if not isinstance(graph, Mapping) or not {"agents", "active", "edges", "adjacency"} <= set(graph):
        return [f"D_t must be a dict with agents, active, edges and adjacency, got {_cut(repr(graph), 120)}"]
    errors = []
    if list(graph["agents"]) != agents:
        errors.append(f"D_t's agents {list(graph['agents'])} are not the env's possible_agents {agents}")
    active = list(graph["active"])
    if not active or len(set(active)) != len(active) or not set(active) <= set(agents):
        errors.append(f"D_t's active {active} must be distinct agents of {agents}, at least one")
    edges = {tuple(e) for e in graph["edges"]}
    for parent, child in sorted(edges):
        if parent == child:
            errors.append(f"D_t has the self-loop {[parent, child]}")
        elif parent not in active or child not in active:
            errors.append(f"D_t's edge {[parent, child]} joins an agent that does not act this round ({active})")
        elif active.index(parent) > active.index(child):
            errors.append(f"D_t's edge {[parent, child]} points back in the turn order {active}")
    matrix = graph["adjacency"]
    from_matrix = {(agents[i], agents[j]) for i, row in enumerate(matrix) for j, v in enumerate(row) if v}
    if len(matrix) != len(agents) or any(len(row) != len(agents) for row in matrix):
        errors.append(f"D_t's adjacency must be {len(agents)}x{len(agents)} over {agents}")
    elif from_matrix != edges:
        errors.append(f"D_t's adjacency {matrix} disagrees with its edges {sorted(map(list, edges))}")
    return errors


def check_dependency(make_env: MakeEnv, episodes: int = 3) -> None:
    """D_t is well formed, agrees everywhere it is shown, orders the turns and says who sees whom."""
    env = make_env()
    env.reset(seed=0)
    if "dependency" not in env.infos.get(env.agent_selection, {}):
        raise CheckSkipped("the env exposes no D_t (no infos[agent]['dependency'])")
    heard = getattr(getattr(env, "unwrapped", env), "heard", None)
    agents = list(env.possible_agents)
    rng = random.Random("marft_envs.testing/dependency")
    episode, round_index, acted, said, last_active = None, None, [], {}, []
    for seed, step in _episodes(env, episodes):
        agent = env.agent_selection
        _, _, terminated, truncated, info = env.last()
        if terminated or truncated:
            env.step(None)
            continue
        where = f"episode seed={seed}, step {step}, {agent} to act"
        graph = info.get("dependency")
        # A new episode or round: nobody has acted yet (an env without infos["round"]: the round
        # ends when every active agent has acted).
        if seed != episode or ("round" in info and info["round"] != round_index) \
                or ("round" not in info and len(acted) >= len(last_active)):
            episode, round_index, acted, said = seed, info.get("round"), [], {}
        errors = _dependency_errors(graph, agents)
        if errors:
            raise AssertionError(f"{where}: " + "; ".join(errors))
        for other in env.agents:
            if env.infos[other].get("dependency") != graph:
                raise AssertionError(f"{where}: infos[{other!r}]['dependency'] differs from infos[{agent!r}]"
                                     "['dependency']; every agent must be shown the same D_t")
        state = _state_or_none(env)
        if isinstance(state, Mapping) and "dependency" in state and state["dependency"] != graph:
            raise AssertionError(f"{where}: state()['dependency'] {state['dependency']} differs from "
                                 f"infos[{agent!r}]['dependency'] {graph}")
        active = last_active = list(graph["active"])
        if active[: len(acted)] != acted or len(active) <= len(acted) or active[len(acted)] != agent:
            raise AssertionError(f"{where}: D_t's turn order is {active} and {acted} already acted this round, "
                                 f"so {active[len(acted)] if len(active) > len(acted) else 'nobody'!r} should act, "
                                 f"not {agent!r}")
        parents = [p for p in active if [p, agent] in graph["edges"]]
        for key, expected in (("parents", parents), ("turn_order", active)):
            if key in info and list(info[key]) != expected:
                raise AssertionError(f"{where}: infos[{agent!r}][{key!r}] is {info[key]} but D_t gives {expected}")
        text = _text_of(env.observe(agent))
        for speaker in acted if text is not None else ():
            marker = said[speaker]
            if speaker in parents:
                shown = heard(agent, speaker, marker) if callable(heard) else marker
                if not str(shown).strip():
                    raise AssertionError(f"{where}: D_t has the edge {[speaker, agent]} but env.heard passes "
                                         f"nothing of {speaker}'s utterance {marker!r} to {agent}")
                if shown not in text:
                    raise AssertionError(
                        f"{where}: D_t has the edge {[speaker, agent]} but {agent}'s observation does not hold "
                        f"{speaker}'s utterance of this round (it said {marker!r}; expected {shown!r} in the text)")
            elif marker in text:
                raise AssertionError(
                    f"{where}: {agent}'s observation holds {speaker}'s utterance of this round ({marker!r}) "
                    f"but D_t has no edge {[speaker, agent]}")
        said[agent] = str(rng.randrange(10**8, 10**9))  # a bare number survives a one-number channel
        acted.append(agent)
        env.step(said[agent])
    env.close()


def _state_or_none(env: AECEnv) -> Any:
    try:
        return env.state()
    except NotImplementedError:
        return None


# -- one call ----------------------------------------------------------------------------------
def _creator(env: str | Callable[..., AECEnv]) -> tuple[str, Any, MakeEnv]:
    """(label, the class or factory, make) for an env id or a class/factory."""
    if isinstance(env, str):
        import marft_envs

        creator = marft_envs.env_class(env)  # a clear error for an unknown id
        return env, creator, lambda **kw: marft_envs.make(env, **kw)
    if callable(env):
        return getattr(env, "__qualname__", repr(env)), env, env
    raise TypeError(f"check_env takes an env id (str) or a class/factory returning an AEC env, "
                    f"got {type(env).__name__}")


def check_env(
    env: str | Callable[..., AECEnv],
    *,
    checks: Iterable[str] = CHECKS,
    skip: Mapping[str, str] | None = None,
    num_cycles: int = 20,
    episodes: int = 3,
    max_split_tasks: int = 10_000,
    **kwargs: Any,
) -> dict[str, str]:
    """Run the contract's checks on ``env`` built with ``kwargs``; see the module docstring.

    Args:
        env: a registered env id, or an env class / factory ``fn(**kwargs) -> AECEnv``.
        checks: the names (of :data:`CHECKS`) to run; default all.
        skip: check name -> reason, for a check that does not apply to this env.
        num_cycles: PettingZoo's ``num_cycles`` for ``api`` (``seed`` and ``parallel`` use half).
        episodes: episodes played by ``state`` and ``dependency``.
        max_split_tasks: tasks compared per split by ``splits``.
        **kwargs: the env's keyword arguments (a check may override ``split``).

    Returns:
        check name -> ``"passed"`` or ``"skipped: <reason>"``, in :data:`CHECKS` order.

    Raises:
        EnvContractError: some check failed; its message names every failed check and why (the
            first failure's exception is chained).
        ValueError: an unknown check name.
    """
    chosen, skip = list(checks), dict(skip or {})
    for name in [*chosen, *skip]:
        if name not in CHECKS:
            raise ValueError(f"unknown check {name!r}; expected names from {list(CHECKS)}")
    label, creator, make = _creator(env)

    def make_env(**extra: Any) -> AECEnv:
        return make(**{**kwargs, **extra})

    run: dict[str, Callable[[], None]] = {
        "api": lambda: check_api(make_env, num_cycles),
        "seed": lambda: check_seed(make_env, max(1, num_cycles // 2)),
        "parallel": lambda: check_parallel(make_env, max(1, num_cycles // 2)),
        "splits": lambda: check_splits(make_env, creator, max_split_tasks),
        "state": lambda: check_state(make_env, episodes),
        "dependency": lambda: check_dependency(make_env, episodes),
    }
    outcomes: dict[str, str] = {}
    failures: dict[str, str] = {}
    first: BaseException | None = None
    for name in (c for c in CHECKS if c in chosen):
        if name in skip:
            outcomes[name] = f"skipped: {skip[name]}"
            continue
        try:
            run[name]()
        except CheckSkipped as why:
            outcomes[name] = f"skipped: {why}"
        except Exception as err:  # noqa: BLE001 - every failure is reported under its check's name
            failures[name] = describe(err)
            first = first or err
        else:
            outcomes[name] = PASSED
    if failures:
        raise EnvContractError(label, failures) from first
    return outcomes


__all__ = ["CHECKS", "SPLITS", "PASSED", "EnvContractError", "CheckSkipped", "check_env", "check_api",
           "check_seed", "check_parallel", "check_splits", "check_state", "check_dependency", "parallel_view",
           "split_tasks", "takes_split"]
