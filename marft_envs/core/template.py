"""How an agent's observation text is composed from the task, feedback and its parents' outputs.

Default layout (sections appear only when non-empty)::

    <task prompt>

    Earlier attempts:
    [Attempt 1] <graded answer, or every agent's output when D_t's history is "all">
    Feedback: <grader feedback>

    <parent id> (<parent role>) wrote:
    <parent output this round>

Quoted outputs longer than ``max_quoted_chars`` are cut (head kept), so a runaway utterance
cannot crowd the task out of a small model's context.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from marft_envs.core.dependency import RoundRecord
from marft_envs.core.task import Task


@dataclass(frozen=True)
class ObservationTemplate:
    """Format strings for the observation sections."""

    history_header: str = "Earlier attempts:"
    """Heading above the earlier rounds' section."""
    attempt: str = "[Attempt {number}] {text}"
    """One earlier round's quoted output; ``{number}`` counts from 1."""
    agent_attempt: str = "[Attempt {number}] {agent}: {text}"
    """Used instead of ``attempt`` when every agent's earlier output is shown (history "all")."""
    feedback: str = "Feedback: {feedback}"
    """The grader's feedback for an earlier round."""
    parent: str = "{agent} ({role}) wrote:\n{text}"
    """A parent's output in the current round."""
    max_quoted_chars: int = 4_000
    """Quoted outputs are cut to this many characters."""

    def _quote(self, text: str) -> str:
        return text if len(text) <= self.max_quoted_chars else text[: self.max_quoted_chars] + " [...]"

    def render(
        self,
        task: Task,
        history: Sequence[RoundRecord],
        parents: Sequence[tuple[str, str, str]],
        graded_agent: Callable[[dict[str, str]], str | None],
    ) -> str:
        sections = [task.prompt]
        attempts = []
        for record in history:
            number = record.round_index + 1
            if record.graph.history == "all":
                attempts += [self.agent_attempt.format(number=number, agent=a, text=self._quote(t))
                             for a, t in record.outputs.items()]
            else:
                agent = graded_agent(record.outputs)
                attempts.append(self.attempt.format(number=number, text=self._quote(record.outputs.get(agent, "") if agent else "")))
            if record.outcome is not None and record.outcome.feedback:
                attempts.append(self.feedback.format(feedback=record.outcome.feedback))
        if attempts:
            sections.append("\n".join([self.history_header, *attempts]))
        sections += [self.parent.format(agent=a, role=r, text=self._quote(t)) for a, r, t in parents]
        return "\n\n".join(sections)
