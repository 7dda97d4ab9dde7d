r"""``marft/Relay-v0``: a cooperative partial-observability task; no agent sees the whole problem.

Each problem is a short expression over named values ("Compute A + B." with A = 7, B = 12; see
:mod:`marft_envs.tasks.relay` for the levels). The values are dealt round-robin over the agents in
profile order (:func:`~marft_envs.tasks.relay.deal`) and only the *answerer* (the last agent whose
role is graded, the last agent of a chain) is shown the question. So with two or more agents
every agent misses at least one value: the holders must pass theirs on in their utterances, which
D_t shows to the answerer, and only the answerer's final answer is graded. With a one-agent
profile (``solo``) that agent holds everything: the full-information single-agent comparison; so
does every call of a solo profile (``solo_two_calls``: one solver prompted twice, draft then answer).

Agents
    The profile's roles (default ``relay``: ``holder_0`` -> ``answerer_0``); the team needs a
    D_t in which the answerer sees the holders (the default chain does).

Observations
    ``{"text": str}``, built from the agent's own view of the task (not ``task.prompt``):

    * a holder: ``"You know A = 7. Your teammate must compute an answer with it and does not
      know it. Tell your teammate your values."``;
    * the answerer: ``"You know B = 12. Your teammate knows A and tells you."``, then, as in
      every env, earlier attempts with feedback and this round's parents' utterances (each cut
      to ``message_chars`` characters, default 40: a narrow channel), and last the question
      with its own values filled in: ``"What is A + 12? Use the value of A from your
      teammate's message. Put the final answer in \boxed{}."`` (last, because a small model
      answers what it read last);
    * a single agent: ``task.prompt`` ("The values are A = 7, B = 12. Compute A + B.").

    Values an agent does not hold never appear in its observation unless a teammate says them.

Actions
    ``str`` utterances (non-``str`` raises ``TypeError``; over-long ones are truncated).

Rewards
    As Arithmetic (:mod:`marft_envs.envs._answer_env`): 1.0 to every agent when the answerer's
    final answer (last ``\boxed{}``, else "the answer is", else the last number) equals the
    value of the expression, else 0.0 with feedback and another round up to ``horizon``
    (default 3). Per-agent format reward and grading details in ``infos``; ``infos[agent]
    ["holds"]`` lists the variables the agent holds.

Keyword arguments
    ``level`` (1-3 or a level name; default 1), ``split`` ("train" | "test"; default "train"),
    ``task_seed``, ``message_chars`` (default 40; ignored when a ``template`` is given),
    ``task_revision`` (how the train/test split is made; default the current one, see below),
    ``grading_timeout_s``, ``grading_mode``, plus every :class:`TextTaskEnv` keyword.

Version history
    v0: first release. Task revisions within v0 (``task_revision``, recorded in leaderboard
    records; :data:`~marft_envs.tasks.relay.TASK_REVISIONS`):

    * 0: the split hashed the expression and the values in variable order, so a test problem's
      commuted twin (B + A) could be in training: 58 of the 78 level-1 test problems had it there;
    * 1 (default): the split hashes the signed operand multiset, so twins share a split (0 of 78).

    The id stayed ``-v0`` (the README's generated env table and every config name it); records
    made before revision 1 carry no ``task_revision`` and reports flag them.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from marft_envs.core.task import Task
from marft_envs.core.template import ObservationTemplate
from marft_envs.envs._answer_env import FinalAnswerEnv
from marft_envs.tasks.relay import TASK_REVISION, TASK_REVISIONS, RelayTasks, deal, format_values

MESSAGE_CHARS = 40
"""Default cut of a teammate's message as the answerer reads it: enough for the values ("A = 17,
C = 45"), not for the rambling a small model appends, which it otherwise copies instead of
answering (measured with SmolLM2-135M, docs/cooperative_tasks.md)."""


class RelayEnv(FinalAnswerEnv):
    """Relay problems with values dealt over the agents; see the module docstring."""

    metadata = {"name": "marft_relay_v0", "render_modes": ["ansi", "human"], "is_parallelizable": True}
    default_profile = "relay"
    task_revisions: dict[int, str] = {revision: r.note for revision, r in TASK_REVISIONS.items()}
    """Task revision -> how its train/test split was made (the highest is current); a record made
    with an older one is flagged by ``leaderboards.records.record_caveats``."""

    def __init__(self, level: int | str = 1, split: str = "train", task_seed: int = 0,
                 message_chars: int = MESSAGE_CHARS, task_revision: int = TASK_REVISION, **kwargs: Any):
        if not isinstance(message_chars, int) or message_chars < 1:
            raise ValueError(f"message_chars must be a positive int (characters of a teammate's message "
                             f"shown), got {message_chars!r}")
        kwargs.setdefault("template", ObservationTemplate(max_quoted_chars=message_chars))
        super().__init__(RelayTasks(level=level, split=split, seed=task_seed, task_revision=task_revision), **kwargs)
        self.task_revision = task_revision  # the revision these problems were drawn with (records keep it)
        graded = [a for a in self.possible_agents if self.profile.role_of(a).graded]
        self.answerer = graded[-1]

    def sees_everything(self) -> bool:
        """Whether every agent holds every value: one agent, or a solo profile (one solver
        prompted several times, ``Profile.solo``, e.g. ``solo_two_calls``)."""
        return len(self.possible_agents) == 1 or self.profile.solo

    def hands(self, task: Task) -> dict[str, list[str]]:
        """Agent id -> the variables it holds in ``task``."""
        if self.sees_everything():
            return {agent: list(task.metadata["values"]) for agent in self.possible_agents}
        dealt = deal(list(task.metadata["values"]), len(self.possible_agents))
        return dict(zip(self.possible_agents, dealt))

    def agent_view(self, task: Task, agent: str) -> Task:
        if self.sees_everything():
            return task
        values: dict[str, int] = task.metadata["values"]
        held = self.hands(task)[agent]
        mine = format_values({name: values[name] for name in held})
        if agent != self.answerer:
            text = (f"You know {mine}. Your teammate must compute an answer with it and does not know it. "
                    "Tell your teammate your values.")
        else:
            missing = ", ".join(name for name in values if name not in held)
            own = f"You know {mine}. " if held else ""
            text = f"{own}Your teammate knows {missing} and tells you."
        return dataclasses.replace(task, prompt=text)

    def question(self, task: Task) -> str:
        """The answerer's question, its own values filled in: ``"What is A + 12? Use the value of A
        from your teammate's message. ..."``."""
        values: dict[str, int] = task.metadata["values"]
        held = set(self.hands(task)[self.answerer])
        expression = " ".join(str(values[t]) if t in held else t for t in task.metadata["expression"].split())
        missing = ", ".join(name for name in values if name not in held)
        return (f"What is {expression}? Use the value of {missing} from your teammate's message. "
                "Put the final answer in \\boxed{}.")

    def compose_observation(self, agent: str) -> str:
        text = super().compose_observation(agent)
        if agent == self.answerer and not self.sees_everything():
            # The question comes last, after the teammates' messages: a small model answers
            # what it read last.
            text = f"{text}\n\n{self.question(self.task)}"
        return text

    def extra_info(self, agent: str) -> dict[str, Any]:
        return {"holds": list(self.hands(self.task)[agent])}
