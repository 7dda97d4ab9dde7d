r"""``marft/SolveCheck-v0``: solve and check. A solver answers, a checker judges, over several rounds.

Problems are generated arithmetic (:class:`marft_envs.tasks.arithmetic.ArithmeticTasks`, the same
levels as ``marft/Arithmetic-v0``). Every round the solver answers and the checker, who sees the
solver's answer this round, states a verdict; the verdict decides what the team submits, the
environment grades the submission, and a wrong or missing submission earns feedback and another
round, up to ``horizon`` (default 3). The checker's verdict is itself checkable: the env knows
whether the solver was right, and rewards the checker for judging it correctly.

Agents
    Default profile ``solver_checker``: ``solver_0`` -> ``checker_0``. By position, the first
    agent is the solver and the last one the checker (so role-less profiles such as
    ``solver_checker_anonymous`` work); a one-agent profile (``solo``) has no checker and its
    answer is submitted as is, and so has a two-agent solo profile (``solo_two_calls``: one
    solver prompted twice, whose second call, shown its draft, is the solver graded). Profiles
    of three or more agents are refused.

Observations
    ``{"text": str}``: the problem, earlier rounds' attempts (the solver's answers) with
    feedback, and, for the checker, the solver's answer this round. The checker's view of the
    problem ends with the protocol: ``"Reply CORRECT if the solver's answer is right, or WRONG
    and the right answer in \boxed{}."`` (the env states what a valid verdict is, whatever the
    profile's system prompts say).

Actions
    ``str`` utterances. The checker's verdict is the first of the words CORRECT, WRONG or
    INCORRECT (= WRONG) in its utterance, any case; none of them is no verdict.

What is submitted each round
    1. the checker's last ``\boxed{}`` answer, if it gives one (a correction, or a restatement);
    2. else nothing when its verdict is WRONG (the solver tries again next round);
    3. else (CORRECT, or no verdict) the solver's answer.

    With one agent, its answer. Answers are read and compared as in Arithmetic
    (:class:`~marft_envs.tasks.math_grading.MathGrader`).

Rewards
    Team reward 1.0 to every agent when the submission is correct (the episode terminates),
    else 0.0. ``infos[agent]["agent_reward"]``: the solver gets 1.0 when its own answer is
    correct; the checker 1.0 when it stated a verdict and the verdict is right (CORRECT for a
    correct answer, WRONG for a wrong or missing one), else 0.0.

Feedback
    ``"The checker said WRONG and gave no answer: nothing was submitted. Solve it again."``,
    ``"The submitted answer '<x>' is not correct. Try again."`` or ``"No answer was
    submitted ..."``; never the reference. ``last_outcome["info"]``: ``solver_answer``,
    ``solver_correct``, ``verdict``, ``verdict_correct``, ``submitted``, ``submitted_by``,
    ``correct``.

Keyword arguments
    ``level`` (arithmetic level 1-7 or name; default 1), ``split`` ("train" | "test"),
    ``task_seed``, ``grading_timeout_s``, ``grading_mode``, plus every :class:`TextTaskEnv`
    keyword.

Version history
    v0: first release.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from marft_envs.core.task import RoundOutcome, Task
from marft_envs.core.text_env import TextTaskEnv
from marft_envs.tasks.arithmetic import ArithmeticTasks
from marft_envs.tasks.math_grading import MathGrader, extract_boxed

VERDICTS = ("CORRECT", "WRONG")
"""The checker's possible verdicts."""
_VERDICT = re.compile(r"\b(INCORRECT|CORRECT|WRONG)\b", re.IGNORECASE)
CHECKER_PROTOCOL = "Reply CORRECT if the solver's answer is right, or WRONG and the right answer in \\boxed{}."
"""Appended to the checker's view of the problem."""
QUOTE_CHARS = 100


def parse_verdict(text: str) -> str | None:
    """``"CORRECT"``, ``"WRONG"`` (also for INCORRECT) or None: the first verdict word in ``text``."""
    match = _VERDICT.search(text)
    if match is None:
        return None
    return "CORRECT" if match.group(1).upper() == "CORRECT" else "WRONG"


def _quote(answer: str) -> str:
    return answer if len(answer) <= QUOTE_CHARS else answer[:QUOTE_CHARS] + "..."


class SolveCheckEnv(TextTaskEnv):
    """Solver + checker on generated arithmetic; see the module docstring."""

    metadata = {"name": "marft_solve_check_v0", "render_modes": ["ansi", "human"], "is_parallelizable": True}
    default_profile = "solver_checker"

    def __init__(self, level: int | str = 1, split: str = "train", task_seed: int = 0,
                 grading_timeout_s: float = 5.0, grading_mode: str = "auto", **kwargs: Any):
        self.grader = MathGrader(timeout_s=grading_timeout_s, mode=grading_mode)
        super().__init__(ArithmeticTasks(level=level, split=split, seed=task_seed), **kwargs)
        if len(self.possible_agents) > 2:
            raise ValueError(f"marft/SolveCheck-v0 plays a solver and a checker (two agents) or one agent "
                             f"alone; profile {self.profile.name!r} has {len(self.possible_agents)} agents "
                             f"{list(self.possible_agents)}: use solver_checker, solver_checker_anonymous or solo")
        if self.profile.solo:  # one solver prompted twice: its last (graded) call's answer is submitted
            self.solver, self.checker = self.possible_agents[-1], None
        else:
            self.solver = self.possible_agents[0]
            self.checker = self.possible_agents[-1] if len(self.possible_agents) == 2 else None

    def agent_view(self, task: Task, agent: str) -> Task:
        if agent == self.checker:
            return dataclasses.replace(task, prompt=f"{task.prompt} {CHECKER_PROTOCOL}")
        return task

    def quoted_output_agent(self, outputs: dict[str, str]) -> str | None:
        # The history quotes the solver's attempt, not the checker's verdict.
        return self.solver if self.solver in outputs else None

    def grade_round(self, task: Task, outputs: dict[str, str], round_index: int) -> RoundOutcome:
        reference = str(task.answer)
        solver_text = outputs.get(self.solver, "")
        solver = self.grader.grade(solver_text, reference)
        verdict = checker_box = None
        if self.checker is not None and self.checker in outputs:
            checker_text = outputs[self.checker]
            verdict = parse_verdict(checker_text)
            checker_box = extract_boxed(checker_text)
        if checker_box is not None:
            submitted, submitted_by = checker_box, self.checker
            correct, _ = self.grader.equivalent(checker_box, reference)
        elif verdict == "WRONG":
            submitted, submitted_by, correct = None, None, False
        else:
            submitted, submitted_by, correct = solver.extracted, self.solver, solver.correct
        verdict_correct = verdict is not None and (verdict == "CORRECT") == solver.correct
        rewards = {self.solver: 1.0 if solver.correct else 0.0}
        if self.checker is not None:
            rewards[self.checker] = 1.0 if verdict_correct else 0.0
        if correct:
            feedback = ""
        elif submitted is not None:
            feedback = f"The submitted answer '{_quote(submitted)}' is not correct. Try again."
        elif verdict == "WRONG":
            feedback = "The checker said WRONG and gave no answer: nothing was submitted. Solve it again."
        else:
            feedback = "No answer was submitted: give the final answer in \\boxed{}."
        return RoundOutcome(
            team_reward=1.0 if correct else 0.0,
            solved=bool(correct),
            feedback=feedback,
            agent_rewards=rewards,
            info={"solver_answer": solver.extracted, "solver_correct": solver.correct, "verdict": verdict,
                  "verdict_correct": verdict_correct, "submitted": submitted, "submitted_by": submitted_by,
                  "correct": bool(correct)},
        )
