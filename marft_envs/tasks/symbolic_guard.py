r"""Cheap refusal of answers that would stall a symbolic checker, before any symbolic work.

A short answer can cost sympy (inside math-verify) unbounded time: ``9^{9^{9^{9^{9}}}}`` asks
for an integer with more digits than atoms in the universe, ``123456789!`` for a factorial of
similar size. math-verify runs under a hard timeout (:mod:`marft_envs.tasks.verify_backend`),
but the timeout costs seconds per step and a worker restart, so a rollout of such actions
would grade at well under one step per second. :func:`symbolic_risk` reads the LaTeX in one
linear pass (plus a tiny numeric evaluation of each exponent, which is bounded by the answer's
length) and names the risk:

- power towers deeper than ``MAX_POWER_DEPTH`` (``a^{b^{c^{d}}}``, depth 3);
- an exponent that evaluates to more than ``MAX_EXPONENT`` in absolute value (``9^{9^{9}}``:
  the exponent 9^9 = 387,420,489; also sums/products with such bounds, ``\sum_{n=1}^{10^{12}}``);
- a factorial of a number larger than ``MAX_FACTORIAL`` (``123456789!``, ``(10^{100})!``);
- a bracketed sum raised to more than ``MAX_SUM_POWER`` (``(x+1)^{999}``: sympy expands it);
- bracket nesting deeper than ``MAX_NESTING`` (the parsers recurse per level).

Exponents with variables (``e^{i\pi}``, ``x^{n+1}``) are not evaluated; only their depth counts.
Every gold answer of MATH500 and GSM8K passes (checked in ``tests/tasks``).
"""

from __future__ import annotations

import math
import re

MAX_POWER_DEPTH = 2
"""Deepest allowed nesting of powers: ``2^{2^{2}}`` (two carets, one inside the other) is 2."""
MAX_EXPONENT = 100_000
"""Largest allowed absolute value of an exponent that is a plain number expression."""
MAX_FACTORIAL = 10_000
"""Largest number whose factorial may be taken (MATH has ``\\frac{1}{2004!}``)."""
MAX_SUM_POWER = 12
"""Largest numeric exponent of a bracketed sum (``(x+y+1)^{30}`` expands to ~500 terms)."""
MAX_NESTING = 30
"""Deepest allowed nesting of ``{}``, ``()`` and ``[]``."""

_TOKEN = re.compile(r"\s+|\d+(?:\.\d+)?|\\[A-Za-z]+|\\.|.", re.S)
_OPEN, _CLOSE = "{([", "})]"
_IGNORED = {"\\left", "\\right", "\\!", "\\,", "\\;", "\\:", "\\ ", "\\displaystyle"}
_TIMES = {"*", "\\cdot", "\\times"}


def _tokens(text: str) -> list[str]:
    return [t for t in _TOKEN.findall(text) if not t.isspace() and t not in _IGNORED]


class _Unknown(Exception):
    """The expression is not a plain number expression (it has a variable, a function, ...)."""


class _Evaluator:
    """Float value of a number expression: digits, + - * / \\cdot \\times ^ ! \\frac, e, \\pi,
    braces and parentheses. Overflow gives ``inf`` (that is the point: it flags huge values)."""

    def __init__(self, tokens: list[str]):
        self.t, self.i = tokens, 0

    def peek(self) -> str | None:
        return self.t[self.i] if self.i < len(self.t) else None

    def take(self) -> str:
        if self.i >= len(self.t):
            raise _Unknown
        self.i += 1
        return self.t[self.i - 1]

    def value(self) -> float:
        v = self.expr()
        if self.peek() is not None:
            raise _Unknown
        return v

    def expr(self) -> float:
        v = self.term()
        while self.peek() in ("+", "-"):
            v = v + self.term() if self.take() == "+" else v - self.term()
        return v

    def term(self) -> float:
        v = self.unary()
        while True:
            tok = self.peek()
            if tok in _TIMES or tok == "/":
                self.take()
                rhs = self.unary()
                v = v * rhs if tok != "/" else (v / rhs if rhs else math.inf)
            elif tok is not None and (tok[0].isdigit() or tok in ("{", "(", "\\frac", "e", "\\pi")):
                v = v * self.unary()  # implicit product: 2\pi, 3(4)
            else:
                return v

    def unary(self) -> float:
        if self.peek() in ("+", "-"):
            sign = -1.0 if self.take() == "-" else 1.0
            return sign * self.unary()
        base = self.postfix()
        if self.peek() == "^":
            self.take()
            exponent = self.unary() if self.peek() in ("+", "-") else self.postfix()
            return _power(base, exponent)
        return base

    def postfix(self) -> float:
        v = self.atom()
        while self.peek() == "!":
            self.take()
            v = math.inf if v > 170 else float(math.factorial(max(0, int(v))))  # 171! > max float
        return v

    def atom(self) -> float:
        tok = self.take()
        if tok[0].isdigit():
            return float(tok)
        if tok in ("{", "("):
            v = self.expr()
            if self.take() != _CLOSE[_OPEN.index(tok)]:
                raise _Unknown
            return v
        if tok == "\\frac":
            num, den = self.atom(), self.atom()
            return num / den if den else math.inf
        if tok == "e":
            return math.e
        if tok == "\\pi":
            return math.pi
        raise _Unknown


def _power(base: float, exponent: float) -> float:
    try:
        return math.pow(abs(base), exponent) * (1 if base >= 0 else -1)
    except (OverflowError, ValueError):
        return math.inf


def numeric_value(latex: str) -> float | None:
    """Value of a plain number expression (``inf`` if huge); None when it is not one."""
    return _value(_tokens(latex))


def _value(tokens: list[str]) -> float | None:
    try:
        return _Evaluator(tokens).value()
    except (_Unknown, OverflowError, ValueError, RecursionError):
        return None


def _group_after(tokens: list[str], i: int) -> tuple[list[str], int]:
    """The operand starting at ``tokens[i]``: a bracket group (without its brackets) or one token."""
    if i >= len(tokens):
        return [], i
    if tokens[i] not in _OPEN:
        return [tokens[i]], i + 1
    depth, j = 0, i
    while j < len(tokens):
        if tokens[j] in _OPEN:
            depth += 1
        elif tokens[j] in _CLOSE:
            depth -= 1
            if depth == 0:
                return tokens[i + 1 : j], j + 1
        j += 1
    return tokens[i + 1 :], len(tokens)


def _operand_before(tokens: list[str], i: int) -> list[str]:
    """The operand ending just before ``tokens[i]`` (a number or a bracket group)."""
    j = i - 1
    if j < 0:
        return []
    if tokens[j] not in _CLOSE:
        return [tokens[j]]
    depth = 0
    while j >= 0:
        if tokens[j] in _CLOSE:
            depth += 1
        elif tokens[j] in _OPEN:
            depth -= 1
            if depth == 0:
                return tokens[j + 1 : i - 1]
        j -= 1
    return []


def symbolic_risk(latex: str) -> str | None:
    """Why a symbolic comparison of ``latex`` could stall, or None when it looks safe."""
    tokens = _tokens(latex)
    depth = 0
    for tok in tokens:
        depth += tok in _OPEN
        depth -= tok in _CLOSE
        if depth > MAX_NESTING:
            return f"brackets nested deeper than {MAX_NESTING}"
    ends: list[int] = []  # end index of each exponent we are inside
    for i, tok in enumerate(tokens):
        while ends and i >= ends[-1]:
            ends.pop()
        if tok == "^":
            exponent, end = _group_after(tokens, i + 1)
            ends.append(end)
            if len(ends) > MAX_POWER_DEPTH:
                return f"powers nested deeper than {MAX_POWER_DEPTH}"
            value = _value(exponent)
            if value is not None and not abs(value) <= MAX_EXPONENT:
                return f"an exponent larger than {MAX_EXPONENT:,}"
            base = _operand_before(tokens, i)
            if (value is not None and len(base) > 1 and ("+" in base or "-" in base)
                    and not abs(value) <= MAX_SUM_POWER):
                return f"a sum raised to a power larger than {MAX_SUM_POWER}"
        elif tok == "!":
            operand = _operand_before(tokens, i)
            value = _value(operand) if operand else None
            if value is not None and not value <= MAX_FACTORIAL:
                return f"a factorial of a number larger than {MAX_FACTORIAL:,}"
    return None


__all__ = ["MAX_POWER_DEPTH", "MAX_EXPONENT", "MAX_FACTORIAL", "MAX_SUM_POWER", "MAX_NESTING",
           "numeric_value",
           "symbolic_risk"]
