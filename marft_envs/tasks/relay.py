"""Procedural "relay" problems: an expression over named values whose values are spread over a team.

A problem is a short expression over variables (``A + B``) and the value of each variable
(``A = 7``, ``B = 12``). The env (:mod:`marft_envs.envs.relay`) deals the values out to the agents
so that no agent holds all of them; only the agent that must answer sees the expression. This
module makes the problems and decides who holds what (:func:`deal`, by the level's rule in
:data:`LEVEL_DEALS`).

Levels (``level=`` takes the number or the name)::

    1 sum_small     A + B, values 2..20                      A = 7, B = 12         -> 19
    2 two_digit     A + B or A - B, values 10..99, A > B     A = 85, B = 38        -> 47 (A - B)
    3 three_terms   A + B - C or A - B + C, values 2..50     A = 40, B = 9, C = 3  -> 34 (A - B + C)
    4 two_stage     A + B + C, values 2..20, in two stages   A = 7, B = 12, C = 5  -> 24 (A + B = 19 first)
    5 mixed_sizes   A + B, values 2..20 or 100..999          A = 418, B = 275      -> 693

Level 5 draws each problem's size by a fair coin: a level-1 sum, or a sum of two three-digit values
that the base model rarely gets right. Its problems differ in difficulty, visibly in the problem
text, so the state value of a problem's first decision differs between problems and a critic has
something to learn: the between-problem share of the return variance (``critic/ev_ceiling``), near
zero on level 1 where the problems are alike, is what the critic can explain. It is
the relay counterpart of Arithmetic level 8, ``add_mixed`` (:mod:`marft_envs.tasks.arithmetic`).

Levels 1-3 deal the values round-robin. Level 4 is *staged* (:attr:`RelayTasks.staged`): the
answerer holds the last value (C) and its teammate the others (A, B), so the teammate computes the
first stage, A + B (a level-1 sum), and passes that one number; the answerer computes the second,
(A + B) + C. Its env default is a channel that lets only one number through
(:mod:`marft_envs.envs.relay`), so passing A and B separately does not work.

Answers are integers as strings. ``Task.prompt`` is the *whole* problem (every value and the
expression): what a single agent that sees everything is shown, and the key by which evaluation
clusters repeated problems. ``Task.metadata`` holds ``values`` (variable -> int, in variable
order) and ``expression``, from which the env renders each agent's partial view.

Determinism and splits
    Item ``i`` is a pure function of ``(seed, split, level, i)``, drawn by a ``random.Random``
    seeded with the string ``"marft-relay/<seed>/<split>/<level>/<i>/<k>"`` (no global RNG). A
    problem is in *test* when the SHA-256 of its canonical key is 0 mod 5, else in *train*; item
    ``i`` of a split redraws (``k = 0, 1, ...``) until the problem belongs to that split, so the
    splits are disjoint for every seed.

    The canonical key is the level name and the problem's *signed operand multiset*
    (:func:`operand_key`): the values added and the values subtracted, each sorted, so a problem
    and its commuted twins (``A + B`` with A = 12, B = 7 for A = 7, B = 12; ``A - B + C`` with
    ``A + B - C`` and B, C exchanged), which have the same answer from the same numbers, fall in
    the same split. That is task revision 1 (:data:`TASK_REVISION`). Revision 0 keyed the
    expression and the values in variable order, so a test problem's commuted twin was in
    training with probability 4/5: 58 of the 78 level-1 test problems had it there
    (``tests/envs/test_coop_envs.py`` measures both). ``task_revision=0`` still draws the
    revision-0 problems, to reproduce records made with them.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from marft_envs.core.task import Task
from marft_envs.tasks.procedural import ProceduralTasks

LEVELS: dict[int, str] = {1: "sum_small", 2: "two_digit", 3: "three_terms", 4: "two_stage", 5: "mixed_sizes"}
"""Level number -> name."""

DEALS = ("round_robin", "last_to_answerer")
"""How a level's values are dealt over a team (:func:`deal`)."""
LEVEL_DEALS: dict[str, str] = {"sum_small": "round_robin", "two_digit": "round_robin", "three_terms": "round_robin",
                               "two_stage": "last_to_answerer", "mixed_sizes": "round_robin"}
"""Level name -> its deal (one of :data:`DEALS`). A level dealt ``"last_to_answerer"`` is staged: the
answerer's teammates hold the expression without its last term and pass its value."""

# (expression over variable names, {variable: value})
Problem = tuple[str, dict[str, int]]


def _sum_small(rng: random.Random) -> Problem:
    return "A + B", {"A": rng.randint(2, 20), "B": rng.randint(2, 20)}


def _two_digit(rng: random.Random) -> Problem:
    a, b = rng.randint(11, 99), rng.randint(10, 98)
    a, b = (a, b) if a > b else (b + 1, a)  # A > B keeps A - B positive
    return rng.choice(["A + B", "A - B"]), {"A": a, "B": b}


def _three_terms(rng: random.Random) -> Problem:
    values = {name: rng.randint(2, 50) for name in "ABC"}
    return rng.choice(["A + B - C", "A - B + C"]), values


def _two_stage(rng: random.Random) -> Problem:
    return "A + B + C", {name: rng.randint(2, 20) for name in "ABC"}  # each stage a level-1 sum


MIXED_SIZES = ((2, 20), (100, 999))
"""Level 5's two value ranges (each problem draws one by a fair coin): level 1's, and three digits."""


def _mixed_sizes(rng: random.Random) -> Problem:
    low, high = rng.choice(MIXED_SIZES)
    return "A + B", {"A": rng.randint(low, high), "B": rng.randint(low, high)}


_GENERATORS: dict[str, Callable[[random.Random], Problem]] = {
    "sum_small": _sum_small, "two_digit": _two_digit, "three_terms": _three_terms, "two_stage": _two_stage,
    "mixed_sizes": _mixed_sizes,
}


def evaluate_expression(expression: str, values: dict[str, int]) -> int:
    """Value of ``expression`` (variables joined by ``+`` and ``-``, left to right)."""
    tokens = expression.split()
    total = values[tokens[0]]
    for op, name in zip(tokens[1::2], tokens[2::2]):
        if op not in "+-":
            raise ValueError(f"relay expressions use + and - only, got {op!r} in {expression!r}")
        total = total + values[name] if op == "+" else total - values[name]
    return total


def operand_key(expression: str, values: dict[str, int]) -> str:
    """The signed operand multiset of a problem, e.g. ``"+7,12|-"`` for ``A + B`` with A = 7,
    B = 12 (and with A = 12, B = 7): the values added and those subtracted, each sorted. Problems
    with the same key have the same answer from the same numbers; the split keys on it."""
    tokens = expression.split()
    added, subtracted = [values[tokens[0]]], []
    for op, name in zip(tokens[1::2], tokens[2::2]):
        (added if op == "+" else subtracted).append(values[name])
    return f"+{','.join(map(str, sorted(added)))}|-{','.join(map(str, sorted(subtracted)))}"


def ordered_key(expression: str, values: dict[str, int]) -> str:
    """Revision 0's key: the expression and the values in variable order (a problem's commuted
    twin gets another key, so it may fall in the other split)."""
    return f"{expression}|{format_values(values)}"


@dataclass(frozen=True)
class TaskRevision:
    """One way of making the train/test split; records name the revision they were made with."""

    key: Callable[[str, dict[str, int]], str]
    """The canonical key the split hashes, from (expression, values)."""
    note: str
    """What it is, for reports on records made with it."""


TASK_REVISIONS: dict[int, TaskRevision] = {
    0: TaskRevision(ordered_key, "train/test split keyed by the expression and the values in variable order: a "
                    "test problem's commuted twin (B + A) was in training with probability 4/5 (58 of the "
                    "78 level-1 test problems)"),
    1: TaskRevision(operand_key, "train/test split keyed by the signed operand multiset: commuted twins share "
                    "a split"),
}
"""Revision -> how the split is made."""
TASK_REVISION = max(TASK_REVISIONS)
"""The revision :class:`RelayTasks` draws by default."""


def format_values(values: dict[str, int]) -> str:
    """``{"A": 7, "B": 12}`` -> ``"A = 7, B = 12"``."""
    return ", ".join(f"{name} = {value}" for name, value in values.items())


def full_prompt(expression: str, values: dict[str, int]) -> str:
    """The whole problem, as one agent that sees everything reads it."""
    return f"The values are {format_values(values)}. Compute {expression}."


def stage_expression(expression: str) -> str:
    """The first stage of a staged problem: ``expression`` without its last term (``"A + B"`` of
    ``"A + B + C"``)."""
    return " ".join(expression.split()[:-2])


def deal(variables: Sequence[str], num_agents: int, rule: str = "round_robin", answerer: int = -1) -> list[list[str]]:
    """Which variables each of ``num_agents`` agents holds, by ``rule`` (one of :data:`DEALS`):

    * ``"round_robin"``: dealt round-robin from the first agent;
    * ``"last_to_answerer"``: agent ``answerer`` (an index; default the last agent) holds the last
      variable, the other agents share the rest round-robin (one agent holds everything).

    With two or more agents and two or more variables, every agent misses at least one value,
    so no agent can answer alone.
    """
    if num_agents < 1:
        raise ValueError(f"num_agents must be >= 1, got {num_agents}")
    if rule not in DEALS:
        raise ValueError(f"rule must be one of {list(DEALS)}, got {rule!r}")
    if not -num_agents <= answerer < num_agents:
        raise ValueError(f"answerer must index one of the {num_agents} agents, got {answerer}")
    hands: list[list[str]] = [[] for _ in range(num_agents)]
    if rule == "round_robin":
        for k, name in enumerate(variables):
            hands[k % num_agents].append(name)
        return hands
    answerer = range(num_agents)[answerer]
    others = [k for k in range(num_agents) if k != answerer] or [answerer]
    for k, name in enumerate(variables[:-1]):
        hands[others[k % len(others)]].append(name)
    hands[answerer] += list(variables[-1:])
    return hands


class RelayTasks(ProceduralTasks):
    """A :class:`~marft_envs.core.task.TaskSource` of relay problems.

    Args:
        level: difficulty, 1..5 or its name (see the module docstring).
        split: ``"train"`` or ``"test"`` (disjoint sets of problems).
        seed: selects the sequence of problems; item ``i`` depends only on (seed, split, level, i).
        task_revision: how the split is keyed (:data:`TASK_REVISIONS`); the default is the
            current one, 0 reproduces the problems of records made before it.
    """

    dataset = "relay"
    LEVELS = LEVELS

    def __init__(self, level: int | str = 1, split: str = "train", seed: int = 0,
                 task_revision: int = TASK_REVISION):
        super().__init__(level=level, split=split, seed=seed)
        if task_revision not in TASK_REVISIONS:
            raise ValueError(f"task_revision must be one of {sorted(TASK_REVISIONS)}, got {task_revision!r}")
        self.task_revision = task_revision
        self.deal_rule = LEVEL_DEALS[self.level]
        """How the env deals this level's values (:func:`deal`)."""
        self.staged = self.deal_rule == "last_to_answerer"
        """Whether the answerer's teammates compute a first stage (:func:`stage_expression`) and
        pass its value: the answerer holds only the last term."""

    def draw(self, rng: random.Random):
        expression, values = _GENERATORS[self.level](rng)

        def build(common: dict) -> Task:
            return Task(task_id=common["task_id"], prompt=full_prompt(expression, values),
                        answer=str(evaluate_expression(expression, values)),
                        metadata={**common["metadata"], "expression": expression, "values": dict(values)})
        return TASK_REVISIONS[self.task_revision].key(expression, values), build
