"""``CodeEnv``: the shared base of the coding environments (HumanEval, MBPP, stdin/stdout).

Which code is graded
    The graded role's reply (``Role.graded``, e.g. the coder alone, or the reviewer / tester at
    the end of a chain). When that reply holds no code (a reviewer that answers ``APPROVE``),
    the latest earlier reply of the round that does hold code is graded instead: a reviewer or
    tester approves by not rewriting. ``infos[...]["last_outcome"]["info"]["code_from"]`` names
    the agent whose code ran, and later rounds' observations quote that code as the attempt.

Rewards
    Team reward after every round: the fraction of tests passed (``reward="fraction"``,
    default) or 1/0 for all tests passing (``reward="all_pass"``). All tests passing ends the
    episode; otherwise the next round starts, up to ``horizon`` rounds. Per-agent format reward
    (``agent_rewards``): 1.0 for the agent whose code ran when it came in a fenced block and
    parsed, else 0.0.

Feedback (shown to every agent in the next round, through the D_t observation template)
    ``feedback="full"`` (default): which tests failed and how (the assert, the exception, the
    value the program returned) and the last line of stderr; ``"summary"``: counts and the
    failure kind only (no test content, for hidden-test protocols); ``"none"``.

Infos (``last_outcome["info"]``)
    ``status`` (passed / failed / no_code / syntax_error / timeout / crash / memory /
    output_limit / file_limit / sandbox_error), ``format`` (ok / no_code_block / no_code /
    syntax_error), ``tests_passed``, ``tests_total``, ``pass_fraction``, ``all_passed``,
    ``failed_tests`` (indices), ``detail``, ``isolation`` (the sandbox's isolation steps:
    ``fsroot`` means the program saw no host file; see :mod:`marft_envs.code.sandbox`),
    ``graded_agent``, ``code_from``.
    Nothing timing-dependent, so a seeded episode replays identically.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from marft_envs.code.grading import CodeProblem, GradeResult, GradingConfig, find_code, grade_reply
from marft_envs.code.sandbox import SandboxLimits
from marft_envs.core.task import RoundOutcome, Task, TaskSource
from marft_envs.core.text_env import TextTaskEnv

FEEDBACK_LEVELS = ("full", "summary", "none")


class CodeEnv(TextTaskEnv):
    """A :class:`TextTaskEnv` whose tasks are :class:`CodeProblem` s graded in the sandbox.

    Args:
        tasks: a task source whose ``Task.answer`` is a :class:`CodeProblem`.
        reward: ``"fraction"`` or ``"all_pass"``.
        feedback: ``"full"``, ``"summary"`` or ``"none"``.
        limits: sandbox limits (a :class:`SandboxLimits` or a dict of its fields).
        per_case_s: time limit per function-test case.
        grading: a full :class:`GradingConfig` (``reward``/``limits``/``per_case_s`` given
            explicitly override its fields).
        **env_kwargs: :class:`TextTaskEnv` keywords (``profile``, ``dependency``, ``horizon``...).
    """

    default_profile = "coder"

    def __init__(self, tasks: TaskSource, reward: str | None = None, feedback: str = "full",
                 limits: SandboxLimits | dict | None = None, per_case_s: float | None = None,
                 grading: GradingConfig | None = None, **env_kwargs: Any):
        if feedback not in FEEDBACK_LEVELS:
            raise ValueError(f"feedback must be one of {FEEDBACK_LEVELS}, got {feedback!r}")
        cfg = grading or GradingConfig()
        changes: dict[str, Any] = {}
        if reward is not None:
            changes["reward"] = reward
        if per_case_s is not None:
            changes["per_case_s"] = per_case_s
        if limits is not None:
            if isinstance(limits, dict):
                unknown = set(limits) - {f.name for f in dataclasses.fields(SandboxLimits)}
                if unknown:
                    raise ValueError(f"unknown sandbox limits {sorted(unknown)}; valid: "
                                     f"{[f.name for f in dataclasses.fields(SandboxLimits)]}")
                limits = SandboxLimits(**limits)
            changes["limits"] = limits
        self.grading = dataclasses.replace(cfg, **changes)
        self.feedback_level = feedback
        super().__init__(tasks, **env_kwargs)

    def _code_source(self, outputs: dict[str, str], problem: CodeProblem) -> tuple[str | None, str]:
        """(agent whose code runs, its reply): the graded reply, else the latest one with code."""
        graded = self.graded_output_agent(outputs)
        if graded is None:
            return None, ""
        order = list(outputs)
        for agent in reversed(order[: order.index(graded) + 1]):
            if find_code(problem, outputs[agent], self.grading.allow_raw)[0].strip():
                return agent, outputs[agent]
        return graded, outputs[graded]

    def quoted_output_agent(self, outputs: dict[str, str]) -> str | None:
        # Earlier attempts quote the code that ran (the coder's when the reviewer approved),
        # not the approving "APPROVE".
        return self._code_source(outputs, self.task.answer)[0]

    def grade_round(self, task: Task, outputs: dict[str, str], round_index: int) -> RoundOutcome:
        problem = task.answer
        if not isinstance(problem, CodeProblem):
            raise TypeError(f"{type(self).__name__} needs tasks whose answer is a CodeProblem, "
                            f"got {type(problem).__name__} for task {task.task_id!r}")
        graded = self.graded_output_agent(outputs)
        code_from, reply = self._code_source(outputs, problem)
        result = grade_reply(problem, reply, self.grading)
        info = result.to_info()
        info.update(graded_agent=graded, code_from=code_from)
        solved = result.all_passed
        return RoundOutcome(
            team_reward=result.reward(self.grading.reward),
            solved=solved,
            feedback="" if solved else self._feedback(result, problem, graded, code_from),
            agent_rewards={code_from: float(result.format == "ok")} if code_from else {},
            info=info,
        )

    def _feedback(self, result: GradeResult, problem: CodeProblem, graded: str | None,
                  code_from: str | None) -> str:
        if self.feedback_level == "none":
            return ""
        if self.feedback_level == "summary":
            text = f"{result.passed}/{result.total} tests passed ({result.status})."
        else:
            text = result.feedback(problem.tests, self.grading.feedback_cases)
        if code_from is not None and graded is not None and code_from != graded:
            text = f"(Graded {code_from}'s code, approved by {graded}.)\n" + text
        return text


__all__ = ["CodeEnv", "FEEDBACK_LEVELS"]
