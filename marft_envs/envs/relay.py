r"""``marft/Relay-v0``: a cooperative partial-observability task; no agent sees the whole problem.

Each problem is a short expression over named values ("Compute A + B." with A = 7, B = 12; see
:mod:`marft_envs.tasks.relay` for the levels). The values are dealt over the agents in profile
order by the level's rule (:func:`~marft_envs.tasks.relay.deal`: round-robin on levels 1-3 and 5; on
level 4, ``two_stage``, the answerer holds the last value and its teammate the others) and only
the *answerer* (the last agent whose role is graded, the last agent of a chain) is shown the
question. So with two or more agents every agent misses at least one value: the holders must pass
theirs on in their utterances, which D_t shows to the answerer through the ``channel``, and only
the answerer's final answer is graded. With a one-agent
profile (``solo``) that agent holds everything: the full-information single-agent comparison; so
does every call of a solo profile (``solo_two_calls``: one solver prompted twice, draft then answer).

Agents
    The profile's roles (default ``relay``: ``holder_0`` -> ``answerer_0``; on level 4
    ``relay_reduce``: ``reducer_0`` -> ``answerer_0``); the team needs a D_t in which the
    answerer sees the holders (the default chain does).

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

    Level 4 (``two_stage``, A + B + C; a two-agent team, e.g. the profile ``relay_reduce``) is
    played in two stages through the number channel:

    * the reducer (the answerer's teammate): ``"You know A = 7, B = 12. Your teammate knows C and
      must compute A + B + C. Only one number of your message reaches your teammate: compute
      A + B and put it in \boxed{}."``;
    * the answerer: ``"You know C = 5. Your teammate knows A and B and tells you the value of
      A + B."``, then the one number of the reducer's utterance, and last ``"What is (A + B) + 5?
      Use the value of A + B from your teammate's number. Put the final answer in \boxed{}."``;
    * a single agent: ``"The values are A = 7, B = 12, C = 5. Compute A + B + C."``.

    Values an agent does not hold never appear in its observation unless a teammate says them.

Actions
    ``str`` utterances (non-``str`` raises ``TypeError``; over-long ones are truncated).

Rewards
    As Arithmetic (:mod:`marft_envs.envs._answer_env`): 1.0 to every agent when the answerer's
    final answer (last ``\boxed{}``, else "the answer is", else the last number) equals the
    value of the expression, else 0.0 with feedback and another round up to ``horizon``
    (default 3). Per-agent format reward and grading details in ``infos``; ``infos[agent]
    ["holds"]`` lists the variables the agent holds. On level 4 a team's reducer also has
    ``infos[reducer]["stage_correct"]``: whether the number its last utterance passes
    (:func:`heard_number`, whatever the channel) equals the first stage's value (A + B); ``None``
    before it has spoken. Averaged over episodes it is the first stage's accuracy. Its per-agent
    reward (``infos[reducer]["agent_reward"]``, once the round is graded) is that stage: 1.0
    when right, else 0.0 (the answerer's stays the format reward).

Stages
    A team on level 4 reports, for every graded round, whether each stage of the problem was
    passed: ``last_outcome["info"]["stages"]`` (in every agent's ``infos``, and in
    ``history[-1].outcome.info``), a dict stage name -> bool in the order the stages are played,
    the names declared once in :data:`STAGES` (the env's ``stages``)::

        {"reduce": True, "answer": False}

    * ``reduce``: the number the reducer's utterance of this round passes, read as the number
      channel reads it (:func:`heard_number`, whatever the ``channel``), equals the first
      stage's value A + B (the ``stage_correct`` of its ``infos``, for this round);
    * ``answer``: the answerer's final answer of this round, graded as the team's answer is,
      equals that passed number combined with the answerer's own value, (passed) + C: right
      *given what it heard*, whether or not the number was A + B. False when no integer was
      passed (:data:`NO_NUMBER`: there is nothing to add C to) or the answerer did not speak.

    So a solved round has both stages passed, and a round with ``reduce`` passed is solved
    exactly when ``answer`` is. Other levels, and a solo profile on level 4 (no number passes
    between agents), report no ``stages`` key. An evaluation
    (:mod:`marft_agents.evaluation.problem_set`) reads it from the episode's last graded round
    and reports each stage's pass rate; any env with staged problems may report its stages the
    same way.

Keyword arguments
    ``level`` (1-5 or a level name; default 1), ``split`` ("train" | "test"; default "train"),
    ``task_seed``, ``message_chars`` (default 40; ignored when a ``template`` is given),
    ``channel`` (what the answerer reads of each teammate's utterance, :data:`CHANNELS`:
    ``"text"``, the utterance cut to ``message_chars``; ``"number"``, only one integer of it, see
    :func:`heard_number`; default ``"number"`` on level 4 and ``"text"`` on the others; a solo
    profile's calls always read text), ``question`` (level 4: ``"symbolic"``, the default, or
    ``"filled"``, the reducer's number written into the answerer's question, :data:`QUESTIONS`),
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
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from marft_envs.core.task import RoundOutcome, Task
from marft_envs.core.template import ObservationTemplate
from marft_envs.envs._answer_env import FinalAnswerEnv
from marft_envs.tasks.math_grading import extract_boxed
from marft_envs.tasks.relay import (TASK_REVISION, TASK_REVISIONS, RelayTasks, deal, evaluate_expression,
                                    format_values, stage_expression)

MESSAGE_CHARS = 40
"""Default cut of a teammate's message as the answerer reads it: enough for the values ("A = 17,
C = 45"), not for the rambling a small model appends, which it otherwise copies instead of
answering (measured with SmolLM2-135M)."""

STAGES: dict[str, str] = {"reduce": "the reducer passed A + B",
                          "answer": "the answerer was right given what it heard"}
"""Level 4's stages (``last_outcome["info"]["stages"]``, module docstring "Stages"), in the order
played: name -> what passing it means (reports print it)."""

NO_NUMBER = "(no number)"
"""What the number channel passes from an utterance without an integer."""
_INTEGER = re.compile(r"[-+]?\d+")


def heard_number(utterance: str) -> str:
    """The one integer the number channel passes of ``utterance``: the last ``\\boxed{}``'s content
    if it is an integer, else the last integer in the utterance, else :data:`NO_NUMBER`
    (``"A = 7, B = 12, so \\boxed{19}"`` -> ``"19"``)."""
    boxed = extract_boxed(utterance)
    if boxed is not None and _INTEGER.fullmatch(boxed.strip()):
        return str(int(boxed))
    numbers = _INTEGER.findall(utterance)
    return str(int(numbers[-1])) if numbers else NO_NUMBER


def heard_text(utterance: str) -> str:
    """The text channel: the utterance as said (the template cuts it to ``message_chars``)."""
    return utterance


@dataclass(frozen=True)
class Channel:
    """What the answerer reads of each teammate's utterance."""

    hear: Callable[[str], str]
    """Utterance -> what the answerer reads of it (the observation template then quotes it)."""
    one_number: bool
    """Only one number passes: the level-4 views say so ("Only one number of your message ...")."""


CHANNELS: dict[str, Channel] = {"text": Channel(heard_text, one_number=False),
                                "number": Channel(heard_number, one_number=True)}
"""Channel name (the ``channel`` keyword) -> the channel."""

QUESTIONS: dict[str, str] = {
    "symbolic": "the first stage by name: \"What is (A + B) + 5? Use the value of A + B from your teammate's number.\"",
    "filled": "the number heard written in: \"Your teammate's number 19 is A + B. What is 19 + 5?\"",
}
"""Level 4: how the answerer's question names the first stage (the ``question`` keyword) -> what it
reads. ``"filled"`` leaves the answerer a level-1 sum to finish (the symbolic question starts the
base model near 0 % on its stage, so an answerer trained from it learns only after a lucky first
success: ``baselines/grids/relay_curriculum.yaml``); where the reducer passed no number it asks the
symbolic question."""


class RelayEnv(FinalAnswerEnv):
    """Relay problems with values dealt over the agents; see the module docstring."""

    metadata = {"name": "marft_relay_v0", "render_modes": ["ansi", "human"], "is_parallelizable": True}
    default_profile = "relay"
    stages: dict[str, str] = STAGES
    """Stage name -> what passing it means, of the stages a staged level reports (module
    docstring, "Stages"); reports read it from the class to label the figures."""
    staged_profile = "relay_reduce"
    """The default profile of a staged level (4): reducer -> answerer, prompted for the stages."""
    task_revisions: dict[int, str] = {revision: r.note for revision, r in TASK_REVISIONS.items()}
    """Task revision -> how its train/test split was made (the highest is current); a record made
    with an older one is flagged by ``leaderboards.records.record_caveats``."""

    def __init__(self, level: int | str = 1, split: str = "train", task_seed: int = 0,
                 message_chars: int = MESSAGE_CHARS, task_revision: int = TASK_REVISION,
                 channel: str | None = None, question: str = "symbolic", **kwargs: Any):
        if not isinstance(message_chars, int) or message_chars < 1:
            raise ValueError(f"message_chars must be a positive int (characters of a teammate's message "
                             f"shown), got {message_chars!r}")
        if channel is not None and channel not in CHANNELS:
            raise ValueError(f"channel must be one of {list(CHANNELS)} (what the answerer reads of a teammate's "
                             f"message), got {channel!r}")
        if question not in QUESTIONS:
            raise ValueError(f"question must be one of {list(QUESTIONS)} (how the level-4 answerer's question names "
                             f"the first stage), got {question!r}")
        kwargs.setdefault("template", ObservationTemplate(max_quoted_chars=message_chars))
        tasks = RelayTasks(level=level, split=split, seed=task_seed, task_revision=task_revision)
        if tasks.staged and kwargs.get("profile") is None:
            kwargs["profile"] = self.staged_profile
        super().__init__(tasks, **kwargs)
        self.task_revision = task_revision  # the revision these problems were drawn with (records keep it)
        graded = [a for a in self.possible_agents if self.profile.role_of(a).graded]
        self.answerer = graded[-1]
        self.staged: bool = tasks.staged
        """Level 4: the answerer's teammate computes the first stage and passes its value."""
        self.channel = channel if channel is not None else ("number" if self.staged else "text")
        """The ``channel`` keyword's value (a key of :data:`CHANNELS`)."""
        if question != "symbolic" and not self.staged:
            raise ValueError(f"question={question!r} needs a staged level (4, two_stage), got level {tasks.level}")
        self.question_form = question
        """The ``question`` keyword's value (a key of :data:`QUESTIONS`)."""
        if self.staged and not self.sees_everything() and len(self.possible_agents) != 2:
            raise ValueError(f"level {tasks.level} needs a two-agent team (reducer -> answerer, e.g. the profile "
                             f"'relay_reduce') or a solo profile, got {len(self.possible_agents)} agents")

    def sees_everything(self) -> bool:
        """Whether every agent holds every value: one agent, or a solo profile (one solver
        prompted several times, ``Profile.solo``, e.g. ``solo_two_calls``)."""
        return len(self.possible_agents) == 1 or self.profile.solo

    def hands(self, task: Task) -> dict[str, list[str]]:
        """Agent id -> the variables it holds in ``task``."""
        if self.sees_everything():
            return {agent: list(task.metadata["values"]) for agent in self.possible_agents}
        dealt = deal(list(task.metadata["values"]), len(self.possible_agents), rule=self.tasks.deal_rule,
                     answerer=self.possible_agents.index(self.answerer))
        return dict(zip(self.possible_agents, dealt))

    def stage_value(self, task: Task) -> int:
        """Level 4: the value of the first stage (A + B), what the reducer should pass."""
        return evaluate_expression(stage_expression(task.metadata["expression"]), task.metadata["values"])

    def agent_view(self, task: Task, agent: str) -> Task:
        if self.sees_everything():
            return task
        if self.staged:
            return dataclasses.replace(task, prompt=self._staged_view(task, agent))
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

    def _staged_view(self, task: Task, agent: str) -> str:
        """Level 4's views (module docstring): the reducer is asked for the first stage."""
        values: dict[str, int] = task.metadata["values"]
        held = self.hands(task)[agent]
        mine = format_values({name: values[name] for name in held})
        missing = " and ".join(name for name in values if name not in held)
        stage = stage_expression(task.metadata["expression"])
        if agent == self.answerer:
            return f"You know {mine}. Your teammate knows {missing} and tells you the value of {stage}."
        ask = (f"Only one number of your message reaches your teammate: compute {stage}"
               if CHANNELS[self.channel].one_number else f"Compute {stage}")
        return (f"You know {mine}. Your teammate knows {missing} and must compute {task.metadata['expression']}. "
                f"{ask} and put it in \\boxed{{}}.")

    def question(self, task: Task) -> str:
        """The answerer's question, its own values filled in: ``"What is A + 12? Use the value of A
        from your teammate's message. ..."`` (level 4: ``"What is (A + B) + 5? Use the value of
        A + B from your teammate's number. ..."``, or with ``question="filled"`` the number its
        teammate passed written in, ``"Your teammate's number 19 is A + B. What is 19 + 5? ..."``)."""
        values: dict[str, int] = task.metadata["values"]
        held = set(self.hands(task)[self.answerer])
        if self.staged:
            stage, (op, last) = stage_expression(task.metadata["expression"]), task.metadata["expression"].split()[-2:]
            reducer = next(agent for agent in self.possible_agents if agent != self.answerer)
            passed = heard_number(self.last_utterance(reducer) or "")
            if self.question_form == "filled" and passed != NO_NUMBER:
                return (f"Your teammate's number {passed} is {stage}. What is {passed} {op} {values[last]}? "
                        "Put the final answer in \\boxed{}.")
            said = "number" if CHANNELS[self.channel].one_number else "message"
            return (f"What is ({stage}) {op} {values[last]}? Use the value of {stage} from your teammate's {said}. "
                    "Put the final answer in \\boxed{}.")
        expression = " ".join(str(values[t]) if t in held else t for t in task.metadata["expression"].split())
        missing = ", ".join(name for name in values if name not in held)
        return (f"What is {expression}? Use the value of {missing} from your teammate's message. "
                "Put the final answer in \\boxed{}.")

    def heard(self, listener: str, speaker: str, utterance: str) -> str:
        """The answerer reads its teammates through the channel (a solo profile's calls read text)."""
        if listener != self.answerer or self.sees_everything():
            return utterance
        return CHANNELS[self.channel].hear(utterance)

    def compose_observation(self, agent: str) -> str:
        text = super().compose_observation(agent)
        if agent == self.answerer and not self.sees_everything():
            # The question comes last, after the teammates' messages: a small model answers
            # what it read last.
            text = f"{text}\n\n{self.question(self.task)}"
        return text

    def last_utterance(self, agent: str) -> str | None:
        """``agent``'s utterance this round, else in the latest round it spoke; None if it has not."""
        if agent in self.round_outputs:
            return self.round_outputs[agent]
        said = [record.outputs[agent] for record in self.history if agent in record.outputs]
        return said[-1] if said else None

    def grade_round(self, task: Task, outputs: dict[str, str], round_index: int) -> RoundOutcome:
        """The answerer's final answer, graded as Arithmetic; on level 4 the round's stages go in
        ``outcome.info["stages"]`` (:meth:`stage_outcomes`) and the reducer's per-agent reward is
        its own stage: 1.0 when the number it passed is A + B (what per-agent credit and GRPO's
        ``agent`` grouping with ``agent_rewards`` read; the team reward is unchanged)."""
        outcome = super().grade_round(task, outputs, round_index)
        if self.staged and not self.sees_everything():
            stages = self.stage_outcomes(task, outputs, answer_correct=bool(outcome.info.get("correct")))
            outcome.info["stages"] = stages
            for agent in outputs:
                if agent != self.answerer:
                    outcome.agent_rewards[agent] = 1.0 if stages["reduce"] else 0.0
        return outcome

    def stage_outcomes(self, task: Task, outputs: dict[str, str], answer_correct: bool) -> dict[str, bool]:
        """Level 4: whether each of :data:`STAGES` was passed in a round with ``outputs`` (module
        docstring, "Stages"); ``answer_correct``: the answerer's answer was graded right (A + B + C)."""
        reducer = next(agent for agent in self.possible_agents if agent != self.answerer)
        passed = heard_number(outputs.get(reducer, ""))
        reduce = passed == str(self.stage_value(task))
        if reduce or passed == NO_NUMBER or self.answerer not in outputs:
            # A right first stage makes (passed) + C the problem's answer, graded already.
            answer = reduce and answer_correct
        else:
            op, last = task.metadata["expression"].split()[-2:]
            expected = evaluate_expression(f"passed {op} {last}", {"passed": int(passed), last: task.metadata["values"][last]})
            answer = self.grader.grade(outputs[self.answerer], str(expected)).correct
        return dict(zip(STAGES, (reduce, bool(answer))))

    def extra_info(self, agent: str) -> dict[str, Any]:
        info: dict[str, Any] = {"holds": list(self.hands(self.task)[agent])}
        if self.staged and agent != self.answerer and not self.sees_everything():
            said = self.last_utterance(agent)
            info["stage_correct"] = None if said is None else heard_number(said) == str(self.stage_value(self.task))
        return info
