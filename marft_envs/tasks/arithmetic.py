"""Procedural arithmetic tasks: seeded, platform-stable, with disjoint train and test splits.

Levels (``level=`` takes the number or the name)::

    1 add_small      two addends 2..20              "Compute 7 + 12."                      -> 19
    2 add_two_digit  two addends 10..99             "Compute 47 + 38."                     -> 85
    3 add_sub_three  three terms 2..99, + and -     "Compute 45 - 17 + 23."                -> 51
    4 mul_add        a * b + c, a, b 2..12, c 2..99 "Compute 7 * 8 + 15."                  -> 71
    5 parentheses    three or four numbers 2..20 in a bracketed multi-step expression
                                                    "Compute (12 + 7) * 3 - 4."            -> 53
    6 fractions      division; exact answers, reduced "p/q" strings
                                                    "Compute (3 + 5) / 6. ..."             -> 4/3
    7 word_problems  short stories over +, -, *, /  "Mia has 12 shells. She finds 5 more
                                                     and gives away 3. How many shells
                                                     does Mia have now?"                  -> 14
    8 add_mixed      half level-1 sums, half sums of "Compute 7 + 12." / "Compute 482 + 739."
                     two addends 100..999

Level 8 exists for the critic: its tasks differ in difficulty by design, so the state value (a
task's success probability under the policy) varies between tasks and the between-task share of
the return variance, the ceiling of a critic's explained variance, is large enough to measure a
critic against (``marft_agents/learners/critic_health.py``). On level 1 nearly every task is
equally hard for a small model and that ceiling is close to 0.

Answers are exact: integers as ``"19"``/``"-4"``, non-integers (level 6) as reduced ``"p/q"``.
``Task.metadata["expression"]`` is the Python-evaluable arithmetic behind the problem.

Determinism
    Item ``i`` is a pure function of ``(seed, split, level, i)``: it is drawn by a
    ``random.Random`` seeded with the *string* ``"marft-arithmetic/<seed>/<split>/<level>/<i>/<k>"``
    (string seeds go through SHA-512, stable across platforms and Python versions since 3.2; no
    global RNG is touched).

Train/test split
    A problem belongs to *test* when the SHA-256 of its canonical key (level name + expression,
    with the two addends of levels 1-2 and the two factors of level 4 sorted, so ``7 + 12`` and
    ``12 + 7`` land together; word problems are keyed by their arithmetic only, so a story with
    the same numbers but another name or item stays in the same split) is 0 mod 5, otherwise to *train* (about 20 % / 80 %). Item ``i`` of a
    split redraws (``k = 0, 1, ...``) until the drawn problem belongs to that split, so the splits
    are disjoint by construction, for every seed. Level 1 has few distinct problems (~190
    unordered pairs; ~40 in test), so its items repeat.

``len()`` is the index space (``10**9``), not the number of distinct problems.
"""

from __future__ import annotations

import operator
import random
from collections.abc import Callable
from fractions import Fraction

from marft_envs.core.task import Task
from marft_envs.tasks.procedural import INDEX_SPACE, SPLITS, ProceduralTasks, split_of  # noqa: F401

LEVELS: dict[int, str] = {
    1: "add_small", 2: "add_two_digit", 3: "add_sub_three", 4: "mul_add",
    5: "parentheses", 6: "fractions", 7: "word_problems", 8: "add_mixed",
}
"""Level number -> name."""

# (expression, value, canonical key, prompt)
Problem = tuple[str, Fraction, str, str]


def format_answer(value: Fraction) -> str:
    """``Fraction(19)`` -> ``"19"``, ``Fraction(-4, 6)`` -> ``"-2/3"`` (always reduced)."""
    value = Fraction(value)
    return str(value.numerator) if value.denominator == 1 else f"{value.numerator}/{value.denominator}"


def _compute(expr: str) -> Problem:
    # Our own generated expressions only (digits, + - * / and parentheses): evaluated over
    # Fractions so division is exact. The tests check values with an independent evaluator.
    value = _eval_fraction(expr)
    return expr, value, expr, f"Compute {expr}."


def _eval_fraction(expr: str) -> Fraction:
    """Evaluate +, -, *, / and parentheses over integers exactly (a tiny recursive-descent parser)."""
    tokens = expr.replace("(", " ( ").replace(")", " ) ").split()
    pos = 0
    ops: dict[str, Callable[[Fraction, Fraction], Fraction]] = {
        "+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv,
    }

    def atom() -> Fraction:
        nonlocal pos
        token = tokens[pos]
        pos += 1
        if token == "(":
            value = expression()
            pos += 1  # ")"
            return value
        return Fraction(int(token))

    def term() -> Fraction:
        nonlocal pos
        value = atom()
        while pos < len(tokens) and tokens[pos] in "*/":
            op = tokens[pos]
            pos += 1
            value = ops[op](value, atom())
        return value

    def expression() -> Fraction:
        nonlocal pos
        value = term()
        while pos < len(tokens) and tokens[pos] in "+-":
            op = tokens[pos]
            pos += 1
            value = ops[op](value, term())
        return value

    return expression()


def _add_small(rng: random.Random) -> Problem:
    a, b = rng.randint(2, 20), rng.randint(2, 20)
    expr, value, _, prompt = _compute(f"{a} + {b}")
    return expr, value, f"{min(a, b)} + {max(a, b)}", prompt


def _add_two_digit(rng: random.Random) -> Problem:
    a, b = rng.randint(10, 99), rng.randint(10, 99)
    expr, value, _, prompt = _compute(f"{a} + {b}")
    return expr, value, f"{min(a, b)} + {max(a, b)}", prompt


def _add_mixed(rng: random.Random) -> Problem:
    if rng.random() < 0.5:
        return _add_small(rng)
    a, b = rng.randint(100, 999), rng.randint(100, 999)
    expr, value, _, prompt = _compute(f"{a} + {b}")
    return expr, value, f"{min(a, b)} + {max(a, b)}", prompt


def _add_sub_three(rng: random.Random) -> Problem:
    a, b, c = (rng.randint(2, 99) for _ in range(3))
    return _compute(f"{a} {rng.choice('+-')} {b} {rng.choice('+-')} {c}")


def _mul_add(rng: random.Random) -> Problem:
    a, b, c = rng.randint(2, 12), rng.randint(2, 12), rng.randint(2, 99)
    expr, value, _, prompt = _compute(f"{a} * {b} + {c}")
    return expr, value, f"{min(a, b)} * {max(a, b)} + {c}", prompt


_PAREN_TEMPLATES = (
    "({a} + {b}) * {c}", "({a} + {b}) * {c} - {d}", "{a} * ({b} - {c}) + {d}",
    "({a} - {b}) * ({c} + {d})", "({a} + {b} - {c}) * {d}", "{a} + {b} * ({c} - {d})",
)
_FRACTION_TEMPLATES = (
    "({a} + {b}) / {c}", "{a} / {b} + {c} / {d}", "{a} / {b} - {c} / {d}",
    "({a} * {b}) / ({c} + {d})", "{a} - {b} / {c}",
)


def _numbers(rng: random.Random, lo: int, hi: int) -> dict[str, int]:
    return {k: rng.randint(lo, hi) for k in "abcd"}


def _parentheses(rng: random.Random) -> Problem:
    return _compute(rng.choice(_PAREN_TEMPLATES).format(**_numbers(rng, 2, 20)))


def _fractions(rng: random.Random) -> Problem:
    expr, value, canonical, prompt = _compute(rng.choice(_FRACTION_TEMPLATES).format(**_numbers(rng, 2, 12)))
    prompt += " Give the exact answer: an integer, or a fraction in lowest terms."
    return expr, value, canonical, prompt


_NAMES = ("Mia", "Leo", "Ava", "Noah", "Zoe", "Omar", "Lena", "Ravi", "Yuki", "Sam")
_ITEMS = ("apples", "shells", "stickers", "marbles", "pencils", "cards", "stamps", "cookies")


def _word_problems(rng: random.Random) -> Problem:
    name, item = rng.choice(_NAMES), rng.choice(_ITEMS)
    kind = rng.randrange(4)
    if kind == 0:
        a, b = rng.randint(5, 40), rng.randint(2, 20)
        c = rng.randint(1, a + b - 1)
        expr = f"{a} + {b} - {c}"
        prompt = (f"{name} has {a} {item}. {name} finds {b} more and gives away {c}. "
                  f"How many {item} does {name} have now?")
    elif kind == 1:
        a, b = rng.randint(2, 12), rng.randint(2, 12)
        expr = f"{a} * {b}"
        prompt = f"{name} buys {a} packs of {item} with {b} {item} in each pack. How many {item} is that in total?"
    elif kind == 2:
        each, friends = rng.randint(2, 15), rng.randint(2, 9)
        expr = f"{each * friends} / {friends}"
        prompt = (f"{name} shares {each * friends} {item} equally among {friends} friends. "
                  f"How many {item} does each friend get?")
    else:
        price, count = rng.randint(2, 9), rng.randint(2, 6)
        bill = rng.choice([bill for bill in (20, 50, 100) if bill > price * count])
        expr = f"{bill} - {price} * {count}"
        prompt = (f"{item.capitalize()} cost {price} dollars each. {name} buys {count} of them and pays "
                  f"with a {bill}-dollar bill. How many dollars of change does {name} get?")
    value = _eval_fraction(expr)
    # The key is the arithmetic alone (each kind has its own expression shape): the same numbers
    # with another name or item are the same problem and stay in the same split.
    return expr, value, expr, prompt


_GENERATORS: dict[str, Callable[[random.Random], Problem]] = {
    "add_small": _add_small, "add_two_digit": _add_two_digit, "add_sub_three": _add_sub_three,
    "mul_add": _mul_add, "parentheses": _parentheses, "fractions": _fractions, "word_problems": _word_problems,
    "add_mixed": _add_mixed,
}



class ArithmeticTasks(ProceduralTasks):
    """A :class:`~marft_envs.core.task.TaskSource` of generated arithmetic problems.

    Args:
        level: difficulty, 1..7 or its name (see the module docstring).
        split: ``"train"`` or ``"test"`` (disjoint sets of problems).
        seed: selects the sequence of problems; item ``i`` depends only on (seed, split, level, i).
    """

    dataset = "arithmetic"
    LEVELS = LEVELS

    def draw(self, rng: random.Random):
        expr, value, canonical, prompt = _GENERATORS[self.level](rng)

        def build(common: dict) -> Task:
            return Task(task_id=common["task_id"], prompt=prompt, answer=format_answer(value),
                        metadata={**common["metadata"], "expression": expr})
        return canonical, build
