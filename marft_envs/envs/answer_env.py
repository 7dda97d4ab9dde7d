r"""A public base class for envs graded on a final answer: subclass it, give it tasks, done.

MATH, GSM8K and Arithmetic are built on it, and so can your env: when every task has one
reference answer (a number, an expression, a short string), :class:`FinalAnswerEnv` grades the
graded agent's utterance and writes the feedback; you only supply the task source::

    from marft_envs import FinalAnswerEnv, Task

    class CapitalsEnv(FinalAnswerEnv):
        default_profile = "dual"

        def __init__(self, split="train", **kwargs):
            super().__init__(CapitalTasks(split), **kwargs)   # Task(answer="Paris") ...

Every round, the graded agent's utterance is graded with :class:`~marft_envs.tasks.math_grading.
MathGrader` against ``task.answer``: the answer is read from the last ``\boxed{...}`` (else a
``#### X`` line, an "the answer is X" phrase, the last number) and counts as correct when it
equals the reference after normalisation, as an exact rational, or symbolically (math-verify):

* team reward 1.0 when the extracted final answer is equivalent to the reference, else 0.0; a
  correct answer ends the episode (terminated), otherwise the next round starts with feedback
  until ``horizon`` rounds have run (truncated);
* feedback on failure says what was read as the answer, never the reference:
  ``"No final answer found. Put the final answer in \boxed{}."`` or
  ``"The answer '<extracted>' is not correct. Check the work and try again."``;
* ``agent_rewards`` (in ``infos["agent_reward"]``): a format reward for the graded agent, 1.0 when
  its answer was given in ``\boxed{}`` (0.0 otherwise); learners may use or ignore it;
* ``last_outcome["info"]``: ``correct``, ``extracted``, ``method`` (extraction step), ``reason``
  and ``graded_agent``. The reference answer is not put in ``infos`` (it is ``env.task.answer``).

Override :meth:`FinalAnswerEnv.grade_round` (calling ``super()``) to add env-specific rewards.
"""

from __future__ import annotations

from typing import Any

from marft_envs.core.task import RoundOutcome, Task, TaskSource
from marft_envs.core.text_env import TextTaskEnv
from marft_envs.tasks.math_grading import MathGrader

FEEDBACK_QUOTE_CHARS = 200


class FinalAnswerEnv(TextTaskEnv):
    """A :class:`TextTaskEnv` whose graded agent must state a final answer equal to ``task.answer``.

    Args:
        tasks: the task source (answers are reference final-answer strings).
        grading_timeout_s: hard time bound of one symbolic (math-verify) comparison.
        grading_mode: ``"auto"`` | ``"process"`` | ``"inline"``
            (see :mod:`marft_envs.tasks.verify_backend`).
        **env_kwargs: :class:`TextTaskEnv` keywords (``profile``, ``dependency``, ``horizon``, ...).
    """

    def __init__(self, tasks: TaskSource, grading_timeout_s: float = 5.0, grading_mode: str = "auto", **env_kwargs: Any):
        self.grader = MathGrader(timeout_s=grading_timeout_s, mode=grading_mode)
        super().__init__(tasks, **env_kwargs)

    def grade_round(self, task: Task, outputs: dict[str, str], round_index: int) -> RoundOutcome:
        agent = self.graded_output_agent(outputs)
        text = outputs[agent] if agent is not None else ""
        result = self.grader.grade(text, str(task.answer))
        if result.correct:
            feedback = ""
        elif result.extracted is None:
            feedback = "No final answer found. Put the final answer in \\boxed{}."
        else:
            quoted = result.extracted
            if len(quoted) > FEEDBACK_QUOTE_CHARS:
                quoted = quoted[:FEEDBACK_QUOTE_CHARS] + "..."
            feedback = f"The answer '{quoted}' is not correct. Check the work and try again."
        return RoundOutcome(
            team_reward=1.0 if result.correct else 0.0,
            solved=result.correct,
            feedback=feedback,
            agent_rewards={agent: 1.0 if result.method == "boxed" else 0.0} if agent is not None else {},
            info={
                "correct": result.correct,
                "extracted": result.extracted,
                "method": result.method,
                "reason": result.reason,
                "graded_agent": agent,
            },
        )
