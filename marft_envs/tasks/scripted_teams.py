r"""Scripted teams for the cooperative envs: oracles (solvability) and reference baselines.

A scripted policy maps ``(agent id, observation text, rng) -> utterance``; it reads only what
the agent observes, never the task object, so an oracle that scores 1.0 proves the task is
solvable *from the observations* (for Relay: only when the holders pass their values on).
:func:`play` runs a team of them on a fixed problem set and reports accuracy and the mean
per-agent rewards. ``benchmarks/coop_oracle.py`` prints every team on every level.

Teams (``TEAMS[env_id][name]``, each a policy for any agent of the env's default profile and of
``solo``):

``marft/Relay-v0``
    ``oracle``: holders state their values ("A = 7"); the answerer reads every "X = n" it sees
    and computes the expression. On level 4 (``two_stage``, e.g. with the profile
    ``relay_reduce``) the reducer boxes the first stage (``\boxed{19}`` for A + B) and the
    answerer puts the number it reads from its teammate in place of ``(A + B)`` and adds its C.
    ``mute``: holders (and the reducer) say nothing useful; the answerer computes with the values
    it sees and guesses each missing one (uniform 2..99): what an answerer alone can do.
    ``random``: every agent answers a random integer in 0..100.

``marft/SolveCheck-v0``
    ``oracle``: the solver computes the answer, the checker recomputes it and says CORRECT, or
    WRONG with the right answer. ``noisy+oracle_checker``: a solver that is off by 1-3 half the
    time, with the oracle checker. ``noisy+rubber_stamp``: the same solver, a checker that
    always says CORRECT. ``random``: random integers and random verdicts.

The oracles also exist as scripted seats (:func:`relay_oracle_seat`,
:func:`solve_check_oracle_seat`): one agent of a training run played by the oracle
(``scripted_seats``), so the other role trains alone against a partner that never errs.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from marft_envs.envs.relay import NO_NUMBER, heard_number
from marft_envs.tasks.arithmetic import _eval_fraction, format_answer
from marft_envs.tasks.math_grading import extract_boxed

Policy = Callable[[str, str, random.Random], str]
"""``(agent id, observation text, rng) -> utterance``."""

_ASSIGNMENT = re.compile(r"\b([A-Z]) = (-?\d+)\b")
_COMPUTE = re.compile(r"(?:Compute|What is) ([-+*/() \dA-Z]+?)[.?]")
_STAGE = re.compile(r"[Cc]ompute ([-+ A-Z]+?) and put it in \\boxed")
"""A Relay reducer's task (level 4): the first stage it must compute."""
_HEARD = re.compile(r" wrote:\n(.*)")
"""A teammate's message as the observer reads it (its first line)."""
_STAGE_IN_QUESTION = re.compile(r"\([-+ A-Z]+\)")
"""The first stage in a Relay answerer's level-4 question ("What is (A + B) + 5?")."""
GUESS_RANGE = (2, 99)
"""Where the ``mute`` answerer guesses a value it does not see."""


def _expression(observation: str) -> str | None:
    match = _COMPUTE.search(observation)
    return match.group(1).strip() if match else None


# -- Relay ----------------------------------------------------------------------------------------
def _relay_answer(observation: str, rng: random.Random, guess_missing: bool) -> str:
    expression = _expression(observation)
    seen = {name: int(value) for name, value in _ASSIGNMENT.findall(observation)}
    stage = _STAGE_IN_QUESTION.search(expression or "")
    heard = [heard_number(message) for message in _HEARD.findall(observation)]
    unseen = stage and any(n not in seen for n in re.findall(r"\b[A-Z]\b", stage.group()))
    if unseen and heard and heard[-1] != NO_NUMBER:
        # Level 4 without the first stage's values: the teammate's number stands for "(A + B)".
        expression = expression.replace(stage.group(), heard[-1], 1)
    names = re.findall(r"\b[A-Z]\b", expression or "")
    if expression is None or (not guess_missing and any(n not in seen for n in names)):
        return "I do not know all the values."
    values = {n: seen[n] if n in seen else rng.randint(*GUESS_RANGE) for n in names}
    value = _eval_fraction(re.sub(r"\b[A-Z]\b", lambda m: str(values[m.group()]), expression))
    return f"\\boxed{{{format_answer(value)}}}"


def relay_oracle(agent: str, observation: str, rng: random.Random) -> str:
    stage = _STAGE.search(observation)
    if stage is not None:  # a reducer (level 4): pass the first stage's value
        seen = {name: int(value) for name, value in _ASSIGNMENT.findall(observation)}
        value = _eval_fraction(re.sub(r"\b[A-Z]\b", lambda m: str(seen[m.group()]), stage.group(1)))
        return f"\\boxed{{{format_answer(value)}}}"
    if _expression(observation) is None:  # a holder: pass every value on
        return ", ".join(f"{n} = {v}" for n, v in _ASSIGNMENT.findall(observation))
    return _relay_answer(observation, rng, guess_missing=False)


def relay_mute(agent: str, observation: str, rng: random.Random) -> str:
    if _expression(observation) is None:
        return "Hello."
    return _relay_answer(observation, rng, guess_missing=True)


def random_number(agent: str, observation: str, rng: random.Random) -> str:
    return f"\\boxed{{{rng.randint(0, 100)}}}"


# -- SolveCheck -----------------------------------------------------------------------------------
def _is_checker(observation: str) -> bool:
    from marft_envs.envs.solve_check import CHECKER_PROTOCOL

    return CHECKER_PROTOCOL in observation


def _true_answer(observation: str) -> str:
    expression = _expression(observation)
    if expression is None:
        raise ValueError("scripted SolveCheck teams need 'Compute <expression>.' problems (arithmetic levels 1-6)")
    return format_answer(_eval_fraction(expression))


def _oracle_checker(observation: str) -> str:
    truth = _true_answer(observation)
    proposed = extract_boxed(observation)  # the last box: this round's solver answer (parents come last)
    return "CORRECT" if proposed == truth else f"WRONG \\boxed{{{truth}}}"


def solve_check_oracle(agent: str, observation: str, rng: random.Random) -> str:
    if _is_checker(observation):
        return _oracle_checker(observation)
    return f"\\boxed{{{_true_answer(observation)}}}"


def _noisy_solver(observation: str, rng: random.Random) -> str:
    truth = _true_answer(observation)
    if "/" in truth or rng.random() < 0.5:
        return f"\\boxed{{{truth}}}"
    return f"\\boxed{{{int(truth) + rng.choice([-3, -2, -1, 1, 2, 3])}}}"


def noisy_with_oracle_checker(agent: str, observation: str, rng: random.Random) -> str:
    return _oracle_checker(observation) if _is_checker(observation) else _noisy_solver(observation, rng)


def noisy_with_rubber_stamp(agent: str, observation: str, rng: random.Random) -> str:
    return "CORRECT" if _is_checker(observation) else _noisy_solver(observation, rng)


def solve_check_random(agent: str, observation: str, rng: random.Random) -> str:
    if _is_checker(observation):
        return rng.choice(["CORRECT", "WRONG"])
    return random_number(agent, observation, rng)


# -- as scripted seats ------------------------------------------------------------------------------
def _seat(policy: Policy, observation: dict, info: dict, agent: str) -> str:
    """``policy`` with the seat signature of ``scripted_seats`` and ``marft score``
    (``fn(agent, observation, info)``), its rng seeded by the task and the round so a seat plays
    the same on the same input."""
    rng = random.Random(f"seat/{agent}/{info.get('task_id', '')}/{info.get('round', 0)}")
    return policy(agent, observation["text"], rng)


def relay_oracle_seat(agent: str, observation: dict, info: dict) -> str:
    """The Relay oracle as a scripted seat (``scripted_seats: {answerer_0: "marft_envs.tasks.
    scripted_teams:relay_oracle_seat"}``): a partner that never errs, so a role trained against it
    is measured alone (level 4: a reducer's team reward is then its first stage's accuracy, an
    answerer's its second stage's)."""
    return _seat(relay_oracle, observation, info, agent)


def solve_check_oracle_seat(agent: str, observation: dict, info: dict) -> str:
    """The SolveCheck oracle (solver or checker) as a scripted seat."""
    return _seat(solve_check_oracle, observation, info, agent)


TEAMS: dict[str, dict[str, Policy]] = {
    "marft/Relay-v0": {"oracle": relay_oracle, "mute": relay_mute, "random": random_number},
    "marft/SolveCheck-v0": {"oracle": solve_check_oracle, "noisy+oracle_checker": noisy_with_oracle_checker,
                            "noisy+rubber_stamp": noisy_with_rubber_stamp, "random": solve_check_random},
}
"""Scripted teams by env id, then name."""


@dataclass
class PlayResult:
    """What a scripted team scored on a fixed problem set."""

    accuracy: float
    """Share of problems solved (the episode terminated) within the horizon."""
    n: int
    """Problems played."""
    agent_rewards: dict[str, float] = field(default_factory=dict)
    """Mean env-reported per-agent reward (``infos["agent_reward"]``) per agent, over rounds."""
    rounds: float = 0.0
    """Mean rounds per episode."""


def play(env_id: str, policy: Policy, n: int = 200, seed: int = 0, **env_kwargs) -> PlayResult:
    """Play problems ``0..n-1`` of ``env_id`` (made with ``env_kwargs``) with ``policy`` for every agent."""
    import marft_envs

    env = marft_envs.make(env_id, **env_kwargs)
    rng = random.Random(f"scripted/{seed}")
    solved = rounds = 0
    reward_sums: dict[str, float] = {a: 0.0 for a in env.possible_agents}
    for index in range(n):
        env.reset(seed=seed, options={"task_index": index})
        for agent in env.agent_iter():
            _, _, terminated, truncated, _ = env.last()
            if terminated or truncated:
                env.step(None)
                continue
            env.step(policy(agent, env.observe(agent)["text"], rng))
        history = env.unwrapped.history
        rounds += len(history)
        solved += bool(history and history[-1].outcome.solved)
        for record in history:
            for agent, reward in record.outcome.agent_rewards.items():
                reward_sums[agent] += reward
    total_rounds = max(rounds, 1)
    return PlayResult(accuracy=solved / n, n=n, rounds=rounds / n,
                      agent_rewards={a: s / total_rounds for a, s in reward_sums.items()})
