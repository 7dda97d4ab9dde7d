"""``marft/StdioCode-v0``: your own stdin/stdout programming problems (competitive-programming style).

Point it at a JSON Lines file (``path=``, required) with one problem per line::

    {"task_id": "sum2", "prompt": "Read two integers and print their sum.",
     "tests": [{"input": "1 2\\n", "output": "3\\n"}, {"input": "5 7\\n", "output": "12\\n"}]}

(aliases: ``statement``/``question``/``description``; ``inputs``+``outputs`` lists or an APPS
style ``input_output`` JSON string; optional ``solution`` and ``metadata``; see
:mod:`marft_envs.code.datasets`). A Hugging Face id with the same fields also works.

Agents
    The profile's roles; default ``coder``. Also ``coder_reviewer`` and
    ``planner_coder_tester``.

Observations
    ``{"text": str}``: the statement plus the instruction to reply with a complete Python 3
    program that reads stdin and writes stdout; earlier rounds' graded code with test feedback;
    this round's parents' outputs.

Actions
    ``str`` replies; the code is the longest ```python block (see
    :mod:`marft_envs.code.extract`).

Rewards
    Every test case is a separate sandboxed run with the case's stdin; it passes when stdout
    equals the expected output up to whitespace (numbers within ``float_tol`` via
    ``grading=GradingConfig(float_tol=...)``). Team reward: fraction of cases passed or, with
    ``reward="all_pass"``, 1/0; all passing ends the episode, otherwise feedback (the input,
    expected and actual output of failing cases) and another round, up to ``horizon``.
    Details: :mod:`marft_envs.code.env`.

Keyword arguments
    ``path`` (required), ``split`` (Hugging Face split; default "train"), ``limit``, ``reward``,
    ``feedback``, ``limits`` (per test-case run), ``grading``, plus every
    :class:`TextTaskEnv` keyword.

Version history
    v0: first release.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from marft_envs.code.datasets import CodeTaskSource, load_stdio
from marft_envs.code.env import CodeEnv


class StdioCodeEnv(CodeEnv):
    """Stdin/stdout problems from a user file; see the module docstring."""

    metadata = {"name": "marft_stdio_code_v0", "render_modes": ["ansi", "human"], "is_parallelizable": True}

    def __init__(self, path: str | Path | None = None, split: str = "train", limit: int | None = None,
                 **kwargs: Any):
        if path is None:
            raise ValueError(
                "marft/StdioCode-v0 needs path= pointing at a JSON Lines file of problems, one per "
                'line: {"task_id": ..., "prompt": ..., "tests": [{"input": ..., "output": ...}]}')
        problems = load_stdio(path, split=split)
        super().__init__(CodeTaskSource(problems[:limit] if limit else problems), **kwargs)
