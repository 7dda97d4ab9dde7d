"""Find the program in a model's reply (fenced code blocks) and check that it parses.

Rules, in order:
1. Fenced blocks (```` ``` ```` or ``~~~``; an unterminated last block, e.g. cut by the token
   limit, counts) tagged ``python``/``py``/``python3`` or untagged are candidates; blocks tagged
   with another language (``text``, ``bash``, ...) are used only when there is nothing else.
2. With an ``entry_point`` (function tasks): the last candidate that defines it
   (``def entry_point(``), else the longest candidate. Without one (stdin/stdout tasks): the
   longest candidate, since replies often add a short usage example after the solution.
3. No fenced block: when ``allow_raw`` and the whole reply parses as Python *and* looks like a
   program (defines ``entry_point``; without one, prints or writes to stdout), the reply itself
   (``found_block=False``, reported as format ``no_code_block``), else no code. The second
   condition keeps one-word replies such as ``APPROVE`` (valid Python!) from counting as code.

Parsing uses ``ast.parse`` only (no execution) and is guarded against pathological input.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

_FENCE = re.compile(
    r"(?P<fence>```+|~~~+)[ \t]*(?P<lang>[A-Za-z0-9_+.#-]*)[^\n]*\n(?P<body>.*?)"
    r"(?:\n[ \t]*(?P=fence)|\Z)",
    re.S,
)
_PY_TAGS = {"", "python", "py", "python3", "py3", "pycon", "ipython"}


@dataclass(frozen=True)
class Extraction:
    """The program found in a reply."""

    code: str
    """The extracted source ("" when none was found)."""
    found_block: bool
    """True when it came from a fenced code block."""
    n_blocks: int
    """Number of fenced blocks in the reply (any language)."""


def code_blocks(text: str) -> list[tuple[str, str]]:
    """All fenced blocks as ``(language tag lower-cased, body)`` in order of appearance."""
    return [(m.group("lang").lower(), m.group("body")) for m in _FENCE.finditer(text)]


def _defines(code: str, name: str) -> bool:
    return re.search(rf"^\s*(async\s+)?def\s+{re.escape(name)}\s*\(", code, re.M) is not None


def extract_code(text: str, entry_point: str | None = None, allow_raw: bool = True) -> Extraction:
    """Extract the program from ``text`` following the module's rules."""
    blocks = code_blocks(text)
    py = [body for lang, body in blocks if lang in _PY_TAGS]
    candidates = py or [body for _, body in blocks]
    candidates = [c for c in candidates if c.strip()]
    if candidates:
        if entry_point:
            defining = [c for c in candidates if _defines(c, entry_point)]
            if defining:
                return Extraction(defining[-1], True, len(blocks))
        return Extraction(max(candidates, key=len), True, len(blocks))
    if allow_raw and _looks_like_program(text, entry_point):
        return Extraction(text, False, len(blocks))
    return Extraction("", False, len(blocks))


def _looks_like_program(text: str, entry_point: str | None) -> bool:
    if not text.strip() or syntax_error(text) is not None:
        return False
    if entry_point:
        return _defines(text, entry_point)
    return "print(" in text or "sys.stdout" in text


def syntax_error(code: str) -> str | None:
    """None when ``code`` parses as Python 3, else a one-line description of the error."""
    try:
        ast.parse(code)
    except SyntaxError as e:
        return f"SyntaxError: {e.msg} (line {e.lineno})"
    except (ValueError, MemoryError, RecursionError) as e:  # null bytes, absurd nesting
        return f"{type(e).__name__}: {e}"
    return None


def defines_function(code: str, name: str) -> bool:
    """True when ``code`` defines a function ``name`` (at any level: a class method counts
    only by name, which is what a HumanEval/MBPP harness needs)."""
    return _defines(code, name)


__all__ = ["Extraction", "code_blocks", "extract_code", "syntax_error", "defines_function"]
