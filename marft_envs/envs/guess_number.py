r"""``marft/GuessNumber-v0``: find a hidden integer over several rounds, from "too high / too low" feedback.

A multi-turn cooperative task where later decisions carry information the first cannot see: the
task states a range (``"Find the hidden integer from 11 to 17."``, see
:mod:`marft_envs.tasks.guess_number` for the levels) and hides one integer in it. Every round
one guess is graded; a wrong one is answered "too high" or "too low" and the next round starts,
up to ``horizon`` rounds (default: the level's, the guesses binary search needs: 3 on level 1).
So the right guess at round t > 0 depends on the feedback of rounds < t, which differs between
the episodes of one task: a baseline of the task's mean return (what round 0 sees) cannot tell
a good second guess from a bad one, a value per round (a critic, GAE over rounds) or step groups
of identical observations (GiGPO) can.

Agents
    Default profile ``prober_answerer``: ``prober_0`` guesses in every round but the last, where
    ``answerer_0`` gives the final answer from the feedback its teammate's guesses earned (the
    env's D_t, :class:`ProbeThenAnswer`: one agent per round, no edges). With another
    ``dependency=`` the profile's agents follow it every round (e.g. ``chain``: the prober
    suggests, the answerer reads the suggestion's number and makes the round's guess). A one-agent
    profile (``solo``) guesses every round alone.

Observations
    ``{"text": str}``, canonical so that equal histories give equal observations (GiGPO's step
    groups need identical observations to recur): the range, then one line per earlier guess as
    the environment read it, then this round's parents' suggestions (the one integer each
    utterance gives, :func:`~marft_envs.tasks.guess_number.parse_guess`), then the request::

        Find the hidden integer from 11 to 17.
        Guess 1: 14 is too high.
        Guess 2: 12 is too low.
        Guess 3 of 3: give one integer in \boxed{}.

    With ``feedback="interval"`` each feedback line also says what is still possible (``"Guess
    1: 14 is too high, so it is from 11 to 13."``): a curriculum start that leaves the agent
    only "take the middle". Round 0's observation is the same for every task of a range, so
    it is identical across a task's episode group; later ones recur where guesses coincide.

Actions
    ``str`` utterances; the guess is the last ``\boxed{}`` integer, else the last integer.

Rewards
    Team reward 1.0 to every agent in the round whose guess is the hidden integer (the episode
    terminates), else 0.0; an episode's return is 1.0 when the team found the number within the
    horizon. Per-round signal (off by default; only ``credit: per_step`` and GRPO's
    ``agent_rewards`` read ``infos[agent]["agent_reward"]``): the acting agent's
    ``agent_rewards`` entry is the round's *narrowing*, the share of the still-possible numbers
    that its guess's feedback ruled out (1.0 for a hit, 0.0 for a guess outside them or none).

Feedback and grading details
    ``"14 is too high."``, ``"14 is too low."`` or ``"No guess found: give one integer in
    \boxed{}."``; never the number. ``last_outcome["info"]``: ``guess``, ``verdict`` (one of
    :data:`~marft_envs.tasks.guess_number.VERDICTS`), ``guessed_by``, ``possible_before`` and
    ``possible_after`` (how many numbers the feedback so far allows), ``consistent`` (the guess
    was one of them: the team used the feedback), ``narrowing`` and ``correct``.

Keyword arguments
    ``level`` (1-3 or a level name; default 1), ``split`` ("train" | "test"; disjoint ranges),
    ``task_seed``, ``feedback`` (:data:`FEEDBACK`; default ``"direction"``), ``horizon``
    (default the level's :func:`~marft_envs.tasks.guess_number.rounds_needed`), plus every
    :class:`TextTaskEnv` keyword.

Version history
    v0: first release.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from marft_envs.core.dependency import Dependency, RoundGraph, RoundRecord, build_round_graph
from marft_envs.core.task import RoundOutcome, Task
from marft_envs.core.text_env import TextTaskEnv
from marft_envs.tasks.guess_number import GuessTasks, narrow, parse_guess, rounds_needed, verdict

FEEDBACK: dict[str, str] = {"direction": "\"14 is too high.\"",
                            "interval": "\"14 is too high, so it is from 11 to 13.\" (a curriculum start)"}
"""The ``feedback`` keyword's values -> what a wrong guess is answered."""
REQUEST = "Guess {number} of {horizon}: give one integer in \\boxed{{}}."
"""The last line of every observation."""


def _size(span: tuple[int, int]) -> int:
    """How many integers the inclusive ``(low, high)`` holds."""
    return max(0, span[1] - span[0] + 1)


class ProbeThenAnswer(Dependency):
    """The first agent acts alone in every round but the last, the last agent alone in the last
    (a one-agent team: that agent every round). No edges: both read the shared feedback."""

    name = "probe_then_answer"

    def __init__(self, horizon: int):
        self.horizon = horizon

    def __repr__(self) -> str:
        return f"Dependency.probe_then_answer(horizon={self.horizon})"

    def plan(self, agents: Sequence[str], round_index: int, history: Sequence[RoundRecord]) -> RoundGraph:
        actor = agents[-1] if round_index >= self.horizon - 1 else agents[0]
        return build_round_graph(agents, [], active=[actor])


class GuessNumberEnv(TextTaskEnv):
    """Guess a hidden integer from "too high / too low" feedback; see the module docstring."""

    metadata = {"name": "marft_guess_number_v0", "render_modes": ["ansi", "human"], "is_parallelizable": True}
    default_profile = "prober_answerer"

    def __init__(self, level: int | str = 1, split: str = "train", task_seed: int = 0,
                 feedback: str = "direction", horizon: int | None = None, dependency: Any = None, **kwargs: Any):
        if feedback not in FEEDBACK:
            raise ValueError(f"feedback must be one of {list(FEEDBACK)} (what a wrong guess is answered), got {feedback!r}")
        tasks = GuessTasks(level=level, split=split, seed=task_seed)
        horizon = rounds_needed(tasks.width) if horizon is None else horizon
        super().__init__(tasks, horizon=horizon, dependency=dependency, **kwargs)
        self.feedback_form = feedback
        if dependency is None and len(self.possible_agents) > 1:
            self.dependency = ProbeThenAnswer(self.horizon)
            self.dependency.validate(self.possible_agents)
        self.possible: tuple[int, int] = (0, -1)
        """The numbers the feedback so far allows, inclusive ``(low, high)``."""

    def start_episode(self, task: Task) -> None:
        self.possible = (task.metadata["low"], task.metadata["high"])

    def heard(self, listener: str, speaker: str, utterance: str) -> str:
        """A teammate's suggestion is the one integer it gives (or ``"no number"``)."""
        guess = parse_guess(utterance)
        return "no number" if guess is None else str(guess)

    def feedback_line(self, guess: int | None, said: str, after: tuple[int, int]) -> str:
        """What a wrong guess is answered (module docstring, "Feedback")."""
        if said == "no guess":
            return "No guess found: give one integer in \\boxed{}."
        line = f"{guess} is {said}"
        if self.feedback_form == "interval" and after[0] <= after[1]:
            line += f", so it is from {after[0]} to {after[1]}"
        return line + "."

    def compose_observation(self, agent: str) -> str:
        lines = [self.agent_view(self.task, agent).prompt]
        for record in self.history:
            lines.append(f"Guess {record.round_index + 1}: {record.outcome.feedback}")
        lines += [f"Your teammate suggests {self.heard(agent, p, self.round_outputs[p])}."
                  for p in self.graph.parents(agent) if p in self.round_outputs]
        number = min(len(self.history) + 1, self.horizon)
        lines.append(REQUEST.format(number=number, horizon=self.horizon))
        return "\n".join(lines)

    def grade_round(self, task: Task, outputs: dict[str, str], round_index: int) -> RoundOutcome:
        guesser = list(outputs)[-1]  # the round's last speaker makes the guess
        guess = parse_guess(outputs[guesser])
        said = verdict(guess, task.metadata["hidden"])
        before = self.possible
        after = narrow(before, guess, said)
        consistent = guess is not None and before[0] <= guess <= before[1]
        narrowing = 1.0 if said == "correct" else (1.0 - _size(after) / _size(before) if _size(before) else 0.0)
        self.possible = after
        solved = said == "correct"
        return RoundOutcome(
            team_reward=1.0 if solved else 0.0,
            solved=solved,
            feedback=f"{guess} is correct." if solved else self.feedback_line(guess, said, after),
            agent_rewards={guesser: narrowing},
            info={"guess": guess, "verdict": said, "guessed_by": guesser, "possible_before": _size(before),
                  "possible_after": _size(after), "consistent": consistent, "narrowing": narrowing,
                  "correct": solved},
        )
