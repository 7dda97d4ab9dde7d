"""``marft/MBPP-v0``: Mostly Basic Python Problems (Austin et al. 2021), graded by running tests.

Data: ``<data root>/code/mbpp.jsonl`` (full, 974) or ``sanitized-mbpp.json`` (427), with the
data root from ``$MARFT_DATA`` or ``../shared/data``; or any local file via ``path=``; or a
Hugging Face id via ``dataset_id=`` (e.g. ``google-research-datasets/mbpp``; needs network).
Programs run in the sandbox of :mod:`marft_envs.code.sandbox`.

Agents
    The profile's roles; default ``coder``. Also ``coder_reviewer`` and
    ``planner_coder_tester`` (see :mod:`marft_envs.envs.humaneval`).

Observations
    ``{"text": str}``: the task text and its test asserts (the standard MBPP prompt, which
    fixes the function name), earlier rounds' graded code with test feedback, this round's
    parents' outputs.

Actions
    ``str`` replies; the code is the fenced block defining the tested function (else the
    longest block). See :mod:`marft_envs.code.extract`.

Rewards
    Fraction of ``test_list`` asserts passed (plus ``challenge_test_list`` with
    ``include_challenge_tests=True``) or 1/0 with ``reward="all_pass"``; all passing ends the
    episode, otherwise feedback and another round up to ``horizon`` (default 3). Details:
    :mod:`marft_envs.code.env`.

Keyword arguments
    ``variant`` ("full" | "sanitized"), ``split`` ("test" 11-510 | "train" 601-974 |
    "validation" 511-600 | "prompt" 1-10 | "all"), ``path``, ``data_dir``, ``dataset_id``, ``limit``,
    ``include_challenge_tests``, ``reward``, ``feedback``, ``limits``, ``per_case_s``,
    ``grading``, plus every :class:`TextTaskEnv` keyword.

Version history
    v0: first release.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

from marft_envs.code.datasets import CodeTaskSource, load_mbpp
from marft_envs.code.env import CodeEnv


@lru_cache(maxsize=16)
def _problems(source: str | None, variant: str, split: str, challenge: bool, data_dir: str | None) -> tuple:
    return tuple(load_mbpp(source, variant=variant, split=split, include_challenge_tests=challenge,
                           data_dir=data_dir))


class MBPPEnv(CodeEnv):
    """MBPP problems; see the module docstring."""

    metadata = {"name": "marft_mbpp_v0", "render_modes": ["ansi", "human"], "is_parallelizable": True}

    def __init__(self, variant: str = "full", split: str = "test", path: str | Path | None = None,
                 dataset_id: str | None = None, limit: int | None = None,
                 include_challenge_tests: bool = False, data_dir: str | Path | None = None,
                 **kwargs: Any):
        if path is not None and dataset_id is not None:
            raise ValueError("give either path= (a local file) or dataset_id= (Hugging Face), not both")
        source = str(path) if path is not None else dataset_id
        problems = list(_problems(source, variant, split, include_challenge_tests,
                                  None if data_dir is None else str(data_dir)))
        super().__init__(CodeTaskSource(problems[:limit] if limit else problems), **kwargs)
