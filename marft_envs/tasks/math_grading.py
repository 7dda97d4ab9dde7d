r"""Grading math answers: extract the final answer from a model's text, then check equivalence.

Extraction (:func:`extract_answer`) tries these steps in order; the first that finds something
wins. Each step is a public function, testable on its own:

1. :func:`extract_boxed` - the content of the *last* well-formed ``\boxed{...}`` or ``\fbox{...}``
   (nested braces and escaped ``\{ \}`` handled; the brace-less ``\boxed 5`` form too; empty
   boxes such as an echoed "put the answer in \boxed{}" are skipped).
2. :func:`extract_hash_answer` - GSM8K's ``#### 42`` (the last one; rest of that line).
3. :func:`extract_answer_phrase` - "The answer is X", "Final answer: X", "**Answer:** $X$" (the
   last one; X is the inline math right after it, or the line up to the end of the sentence).
4. :func:`extract_last_number` - the last number in the text (``-1,234.5``, ``3/4``).

Equivalence (:class:`MathGrader`) of the extracted answer with the reference, cheapest first:

a. normalised strings are equal (:func:`normalize_answer`: delimiters, ``\left``/``\right``,
   spacing macros, ``\dfrac``, degrees, percent, dollar signs, trailing text units, ``x =``
   prefixes and thousands separators removed);
b. both are plain numbers (integer, decimal, ``a/b``, ``\frac{a}{b}``; :func:`parse_number`):
   exact rational comparison, decisive either way; numbers with a base subscript (``52_8``) are
   compared here too (:func:`parse_base_number`), because math-verify ignores the subscript;
c. otherwise HF ``math-verify`` (``parse`` + ``verify``) under a hard timeout, in a worker process
   by default - see :mod:`marft_envs.tasks.verify_backend` for why and for the other modes. A
   timeout or a parse failure counts as incorrect and says so in ``reason``.

Hostile input never crashes grading: lone surrogates become U+FFFD, only the last
``MAX_SCAN_CHARS`` characters of a huge output are searched (every scan is linear), answers
longer than ``MAX_SYMBOLIC_CHARS`` skip the symbolic check, and so do answers that would stall
it (power towers, huge exponents and factorials: :mod:`marft_envs.tasks.symbolic_guard`), so
a stream of such answers grades in microseconds per step instead of a timeout each. Non-``str`` input is a programming
error and raises ``TypeError``.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction

from marft_envs.tasks.symbolic_guard import symbolic_risk
from marft_envs.tasks.verify_backend import MODES, bounded_equivalent

MAX_SCAN_CHARS = 200_000
"""Only this many trailing characters of a model output are searched for the answer."""
MAX_SYMBOLIC_CHARS = 1_000
"""Extracted answers (or references) longer than this are compared as strings only."""
MAX_PHRASE_CHARS = 1_000
"""At most this much text after "the answer is" is considered."""

_SURROGATES = re.compile("[\ud800-\udfff]")


@dataclass(frozen=True)
class GradeResult:
    """Outcome of grading one answer."""

    correct: bool
    """Whether the extracted answer is equivalent to the reference."""
    extracted: str | None
    """The final answer found in the output (None: nothing found)."""
    reason: str
    """Why, in a few words (shown as feedback and kept in logs)."""
    method: str = ""
    """Extraction step that found ``extracted``: boxed, hash, phrase, last_number or none."""


def _check_str(value: object, name: str) -> None:
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, got {type(value).__name__}")


def sanitize(text: str) -> str:
    """Replace lone surrogates with U+FFFD and keep only the last ``MAX_SCAN_CHARS`` characters."""
    _check_str(text, "text")
    if len(text) > MAX_SCAN_CHARS:
        text = text[-MAX_SCAN_CHARS:]  # the final answer is at the end
    return _SURROGATES.sub("\ufffd", text)


# -- extraction -----------------------------------------------------------------------------------
_BOX_CMD = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")
_BRACE_TOKEN = re.compile(r"\\.|[{}]", re.S)


def _matching_braces(text: str) -> dict[int, int]:
    """Map each ``{`` position to its matching ``}`` (one linear pass; escapes skipped)."""
    stack: list[int] = []
    match: dict[int, int] = {}
    for m in _BRACE_TOKEN.finditer(text):
        token = m.group()
        if token == "{":
            stack.append(m.start())
        elif token == "}" and stack:
            match[stack.pop()] = m.start()
    return match


def extract_boxed(text: str) -> str | None:
    r"""Content of the last non-empty, well-formed ``\boxed{...}``/``\fbox{...}`` (or ``\boxed 5``)."""
    starts = [m.end() for m in _BOX_CMD.finditer(text)]
    if not starts:
        return None
    match = _matching_braces(text)
    for pos in reversed(starts):
        i = pos
        while i < len(text) and text[i] in " \t":
            i += 1
        if i < len(text) and text[i] == "{":
            end = match.get(i)
            content = text[i + 1 : end].strip() if end is not None else ""
        else:
            # MATH's brace-less form "\boxed 2$": one token up to whitespace or a math delimiter.
            token = re.match(r"[^\s${}]+", text[i : i + 100]) if i > pos else None
            content = token.group() if token else ""
        if content:
            return content
    return None


_HASH = re.compile(r"####[ \t]*([^\n]*)")


def extract_hash_answer(text: str) -> str | None:
    """GSM8K style: the rest of the line after the last ``####`` (trailing period removed)."""
    last = None
    for m in _HASH.finditer(text):
        last = m
    if last is None:
        return None
    answer = last.group(1).strip().strip("$").strip().rstrip(".").strip()
    return answer or None


_PHRASE = re.compile(r"\banswer\b(?:\*\*)?(?:[ \t]+is\b|[ \t]*[:=])[ \t:*]*", re.I)
_SENTENCE_END = re.compile(r"\.(?:\s|$)")
_MATH_SPANS = (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]"))


def extract_answer_phrase(text: str) -> str | None:
    """X in the last "the answer is X" / "answer: X" (inline math, else up to the sentence end)."""
    if "answer" not in text.lower():  # cheap pre-check: the case-insensitive regex scan is slow
        return None
    last = None
    for m in _PHRASE.finditer(text):
        last = m
    if last is None:
        return None
    rest = text[last.end() : last.end() + MAX_PHRASE_CHARS].split("\n", 1)[0].strip()
    for opening, closing in _MATH_SPANS:
        if rest.startswith(opening):
            close = rest.find(closing, len(opening))
            if close > 0:
                rest = rest[len(opening) : close]
                break
    else:
        end = _SENTENCE_END.search(rest)
        if end:
            rest = rest[: end.start()]
    answer = rest.strip().strip("*").strip().rstrip(".,;:!").strip()
    return answer or None


# A minus sign counts only when it cannot be a binary operator ("x-5" gives 5, not -5).
_NUMBER = re.compile(r"(?:(?<![\w)\]}])-)?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:/\d+)?|(?<![\w.])\.\d+")


def extract_last_number(text: str) -> str | None:
    """The last number in the text, thousands separators removed (``-1,234.5`` -> ``-1234.5``)."""
    # Search growing suffixes (numbers sit near the end, and scanning all of a long text costs
    # time in proportion to its length). The last match of a suffix is the last match of the
    # text unless the character before it could continue the number; then look further back.
    size = 512
    while True:
        start = max(0, len(text) - size)
        last = None
        for m in _NUMBER.finditer(text, start):
            last = m
        if last is not None and (last.start() == 0 or last.start() > start):
            before = text[last.start() - 1] if last.start() > 0 else " "
            if last.start() == 0 or not (before.isdigit() or before in ",./-"):
                return last.group().replace(",", "")
        if start == 0:
            return last.group().replace(",", "") if last else None
        size *= 8


EXTRACTORS: tuple[tuple[str, Callable[[str], str | None]], ...] = (
    ("boxed", extract_boxed),
    ("hash", extract_hash_answer),
    ("phrase", extract_answer_phrase),
    ("last_number", extract_last_number),
)
"""The extraction steps in priority order (name, function)."""


def extract_answer(text: str) -> tuple[str | None, str]:
    """``(answer, method)`` from the first extraction step that finds something; ``(None, "none")``."""
    text = sanitize(text)
    for name, extractor in EXTRACTORS:
        answer = extractor(text)
        if answer is not None:
            return answer, name
    return None, "none"


# -- normalisation and numbers --------------------------------------------------------------------
_TEXT_CMD = r"\\(?:text|textrm|textbf|mathrm|mbox)"
_TRAILING_UNIT = re.compile(_TEXT_CMD + r"\{\s*[A-Za-z][A-Za-z ]*\}(?:\^\{?\d\}?)?$")
_TEXT_WRAPPER = re.compile(_TEXT_CMD + r"\{([^{}]*)\}")
_SPACING = re.compile(r"\\[,;:! ]|~|\\q?quad(?![A-Za-z])")
_LEFT_RIGHT = re.compile(r"\\(?:left|right)(?![A-Za-z])")
_DEGREES = re.compile(r"\^\s*\{?\s*\\circ\s*\}?|°")
_VAR_PREFIX = re.compile(r"^[A-Za-z](?:_\{?\w+\}?)?=")
_THOUSANDS = re.compile(r"-?\d{1,3}(?:,\d{3})+(?:\.\d+)?")


def _strip_delimiters(s: str) -> str:
    changed = True
    while changed and s:
        changed = False
        for opening, closing in _MATH_SPANS:
            if len(s) >= len(opening) + len(closing) and s.startswith(opening) and s.endswith(closing):
                s, changed = s[len(opening) : len(s) - len(closing)].strip(), True
                break
    return s


def normalize_answer(answer: str) -> str:
    """A canonical string form used for the cheap equality check (not a full LaTeX normaliser)."""
    s = _strip_delimiters(sanitize(answer).strip())
    s = s.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac").replace("\\displaystyle", "")
    s = s.replace("{,}", ",").replace("\\%", "").replace("%", "").replace("\\$", "").replace("$", "")
    s = _DEGREES.sub("", _LEFT_RIGHT.sub("", _SPACING.sub("", s))).strip()
    unit = _TRAILING_UNIT.search(s)
    if unit and s[: unit.start()].strip():
        s = s[: unit.start()]  # "5 \text{ cm}" -> "5"; a lone "\text{Navin}" stays
    s = _TEXT_WRAPPER.sub(r"\1", s)
    # Whitespace only matters between two word characters ("2 3" is not "23").
    s = re.sub(r"\s+", " ", s).strip()
    s = re.sub(r" (?=\W)|(?<=\W) ", "", s)
    s = re.sub(r"(\\[A-Za-z]+) (?=\d)", r"\1", s)  # "\frac 34" is "\frac34"
    s = s.rstrip(".")
    if s.count("=") == 1 and _VAR_PREFIX.match(s):
        s = s.split("=", 1)[1]
    if _THOUSANDS.fullmatch(s):
        s = s.replace(",", "")
    return s


_PLAIN_NUMBER = re.compile(r"-?(?:\d+(?:\.\d*)?|\.\d+)")
_SLASH_FRACTION = re.compile(r"(-?\d+)/(-?\d+)")
_LATEX_FRACTION = re.compile(r"(-?)\\frac(?:\{(-?\d+)\}\{(-?\d+)\}|(\d)(\d))")


def parse_number(answer: str) -> Fraction | None:
    r"""Exact value of a normalised plain number (``12``, ``-0.5``, ``3/4``, ``\frac{3}{4}``), else None."""
    if len(answer) > 80:  # also keeps int() far from Python's 4,300-digit limit
        return None
    try:
        if _PLAIN_NUMBER.fullmatch(answer):
            return Fraction(answer)
        m = _SLASH_FRACTION.fullmatch(answer)
        if m:
            return Fraction(int(m.group(1)), int(m.group(2)))
        m = _LATEX_FRACTION.fullmatch(answer)
        if m:
            num, den = (m.group(2), m.group(3)) if m.group(2) is not None else (m.group(4), m.group(5))
            value = Fraction(int(num), int(den))
            return -value if m.group(1) else value
    except (ValueError, ZeroDivisionError):
        return None
    return None


_BASE_NUMBER = re.compile(r"([0-9A-Za-z]+)_\{?(\d{1,2})\}?")


def parse_base_number(answer: str) -> tuple[str, int, int | None] | None:
    """``"52_8"`` / ``"4210_{5}"`` -> ``(digits, base, value)`` (value None if the digits are not
    valid in that base); anything else -> None. math-verify drops such subscripts (it finds
    ``52_8`` equivalent to ``52_9``), so base-subscripted answers are settled here."""
    m = _BASE_NUMBER.fullmatch(answer)
    if not m or not 2 <= int(m.group(2)) <= 36 or not any(c.isdigit() for c in m.group(1)):
        return None  # "x_1", "a_{0}": subscripted variables, not numbers
    digits, base = m.group(1).upper(), int(m.group(2))
    try:
        value = int(digits, base)
    except ValueError:
        value = None
    return digits, base, value


def _compare_based(a: str, b: str) -> bool | None:
    """Equality of two normalised answers when at least one has a base subscript, else None."""
    based_a, based_b = parse_base_number(a), parse_base_number(b)
    if based_a is None and based_b is None:
        return None
    if based_a is not None and based_b is not None:
        if based_a[2] is not None and based_b[2] is not None:
            return based_a[2] == based_b[2]
        return based_a[:2] == based_b[:2]
    # One side has no base. A bare answer to a based reference follows MATH's convention that the
    # question names the base: same digits. A based answer to a bare (decimal) reference: same value.
    if based_b is not None:
        return a.upper() == based_b[0]
    value = parse_number(b)
    return based_a[2] is not None and value is not None and value == based_a[2]


# -- grading --------------------------------------------------------------------------------------
class MathGrader:
    """Extract-then-compare grader with a bounded math-verify fallback and a small result cache.

    Args:
        timeout_s: hard wall-clock bound for one math-verify comparison (the worker's one-off
            start is not counted).
        mode: ``"auto"`` | ``"process"`` | ``"inline"`` (see :mod:`marft_envs.tasks.verify_backend`).
        fast_path: try normalised-string and numeric equality before math-verify (turn off only
            to measure math-verify alone).
        cache_size: math-verify results remembered per (reference, answer) pair (timeouts are
            never cached: they may be caused by a busy machine).
    """

    def __init__(self, timeout_s: float = 5.0, mode: str = "auto", fast_path: bool = True, cache_size: int = 4096):
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        if not (isinstance(timeout_s, (int, float)) and timeout_s > 0):
            raise ValueError(f"timeout_s must be a positive number of seconds, got {timeout_s!r}")
        self.timeout_s = float(timeout_s)
        self.mode = mode
        self.fast_path = fast_path
        self.cache_size = cache_size
        self._cache: OrderedDict[tuple[str, str], bool] = OrderedDict()
        self._cache_lock = threading.Lock()

    # A lock cannot be pickled or deep-copied: a copy (pickle, copy.deepcopy, a vector env's
    # worker) gets the settings and the cached results, and a lock of its own.
    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        del state["_cache_lock"]
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._cache_lock = threading.Lock()

    def equivalent(self, answer: str, reference: str) -> tuple[bool, str]:
        """``(equal, reason)`` for two already-extracted answers."""
        if self.fast_path:
            a, b = normalize_answer(answer), normalize_answer(reference)
            if a and a == b:
                return True, "matches the reference (normalised text)"
            na, nb = parse_number(a), parse_number(b)
            if na is not None and nb is not None:
                return (True, "equal to the reference (numeric)") if na == nb else (False, "differs from the reference (numeric)")
            based = _compare_based(a, b)
            if based is not None:
                return (True, "equal to the reference (numeric, base subscript)") if based else (
                    False, "differs from the reference (numeric, base subscript)")
        if len(answer) > MAX_SYMBOLIC_CHARS or len(reference) > MAX_SYMBOLIC_CHARS:
            return False, f"answer or reference longer than {MAX_SYMBOLIC_CHARS} characters; no symbolic check"
        risk = symbolic_risk(answer)  # microseconds, where math-verify would run into its timeout
        if risk is not None:
            return False, f"answer not checked symbolically: {risk} (counted as incorrect)"
        key = (reference, answer)
        with self._cache_lock:  # graders may be shared by threads
            equal = self._cache.get(key)
            if equal is not None:
                self._cache.move_to_end(key)
        if equal is None:
            status, equal = bounded_equivalent(reference, answer, self.timeout_s, self.mode)
            if status == "timeout":
                return False, f"math-verify timed out after {self.timeout_s:g} s (counted as incorrect)"
            if status != "ok":
                return False, "math-verify could not parse or compare the answer (counted as incorrect)"
            with self._cache_lock:
                self._cache[key] = equal
                while len(self._cache) > self.cache_size:
                    self._cache.popitem(last=False)
        return (True, "equivalent to the reference (math-verify)") if equal else (False, "not equivalent to the reference (math-verify)")

    def grade(self, model_output: str, reference: str) -> GradeResult:
        r"""Grade a model output against a reference final answer.

        ``reference`` is the final answer (``"\frac{1}{2}"``, ``"72"``); if it contains a
        ``\boxed{}`` (a whole worked solution), the last boxed content is used instead.
        """
        _check_str(model_output, "model_output")
        _check_str(reference, "reference")
        ref = sanitize(reference)
        ref = (extract_boxed(ref) if "\\boxed" in ref or "\\fbox" in ref else None) or ref.strip()
        if not ref:
            raise ValueError("reference is empty; pass the reference final answer (e.g. '72')")
        answer, method = extract_answer(model_output)
        if answer is None:
            return GradeResult(False, None, "no final answer found (expected \\boxed{...})", method)
        correct, reason = self.equivalent(answer, ref)
        return GradeResult(correct, answer, reason, method)


_default_grader: MathGrader | None = None


def default_grader() -> MathGrader:
    """The shared grader used by :func:`grade_answer` (5 s timeout, mode "auto")."""
    global _default_grader
    if _default_grader is None:
        _default_grader = MathGrader()
    return _default_grader


def grade_answer(model_output: str, reference: str) -> GradeResult:
    """Grade ``model_output`` against the ``reference`` final answer with the default grader."""
    return default_grader().grade(model_output, reference)
