"""Env steps per second and grading calls per second for every registered marft env.

For each env id in ``marft_envs.list_envs()`` (made with its default keywords; an env that cannot
be made here, e.g. for missing data, is listed as skipped with the reason):

* ``steps/s random``: AEC steps (reset included) with random text actions drawn from the env's
  own action space (``UnicodeText.sample``: up to ``max_action_chars`` of mixed Unicode,
  including a lone surrogate), pre-drawn so that sampling is not timed;
* ``steps/s answers``: same, with answer-like actions for final-answer envs (half
  ``\\boxed{<reference>}``, half a wrong answer - the reference number + 1, or
  ``<reference> + 1`` for non-numeric references - in a short sentence);
* ``steps/s hostile``: same, for final-answer envs, with pathological answers that stall a
  symbolic checker (``\\boxed{9^{9^{9^{9^{9}}}}}``, factorials of huge numbers, sums with huge
  bounds: ``HOSTILE_ANSWERS``), cycled so that no two consecutive steps repeat one;
* ``reference steps/s``: the same random actions through the same env whose ``grade_round`` is
  replaced by a constant outcome - the base AEC machinery alone, measured in the same run;
  ``ratio`` = ``steps/s random`` / reference (1.0 means grading costs nothing);
* ``grades/s random`` / ``grades/s answers``: direct ``grade_round`` calls with the same actions.

Usage: ``python benchmarks/bench_envs.py [--seconds 1.5] [--env ID ...]``
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

import marft_envs  # noqa: E402
from marft_envs.core.task import RoundOutcome  # noqa: E402
from marft_envs.envs.answer_env import FinalAnswerEnv  # noqa: E402
from marft_envs.tasks.arithmetic import format_answer  # noqa: E402
from marft_envs.tasks.math_grading import normalize_answer, parse_number  # noqa: E402

POOL = 64
HOSTILE_ANSWERS = (
    r"9^{9^{9^{9^{9}}}}", r"10^{10^{10^{10}}}", r"2^{2^{2^{2^{2^{2}}}}}", r"(10^{100})!",
    r"\frac{9^{9^{9^{9}}}}{7}", r"9^{9^{9}} - 9^{9^{9}} + 1", r"x^{99999999999} + 1",
    r"\sum_{n=1}^{10^{12}} n^{2}", r"e^{e^{e^{e^{100}}}}", r"123456789!",
)
"""Answers that cost a symbolic checker seconds (or unbounded time) per comparison."""


def random_actions(env, seed: int = 0) -> list[str]:
    space = env.action_space(env.possible_agents[0])
    space.seed(seed)
    return [space.sample() for _ in range(POOL)]


def answer_action(env, rng: np.random.Generator) -> str:
    reference = str(env.task.answer)
    number = parse_number(normalize_answer(reference))
    wrong = format_answer(number + 1) if number is not None else f"{reference} + 1"
    guess = reference if rng.random() < 0.5 else wrong
    return f"Adding it all up, the result is $\\boxed{{{guess}}}$."


def hostile_actions():
    """An endless stream of pathological final answers, each in a short sentence."""
    for i in itertools.count():
        yield f"So the answer is $\\boxed{{{HOSTILE_ANSWERS[i % len(HOSTILE_ANSWERS)]}}}$."


def steps_per_second(env, next_action, seconds: float) -> float:
    env.reset(seed=0)
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds or steps == 0:
        if not env.agents:
            env.reset()
            continue
        agent = env.agent_selection
        if env.terminations[agent] or env.truncations[agent]:
            env.step(None)
            continue
        env.step(next_action(env))
        steps += 1
    return steps / (time.perf_counter() - start)


def grades_per_second(env, make_outputs, seconds: float) -> float:
    env.reset(seed=0)
    calls, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds or calls == 0:
        env.grade_round(env.task, make_outputs(env), 0)
        calls += 1
        if calls % 8 == 0:
            env.reset()  # new task now and then
    return calls / (time.perf_counter() - start)


def bench(env_id: str, seconds: float) -> list[str]:
    env = marft_envs.make(env_id)
    reference = marft_envs.make(env_id)
    reference.grade_round = lambda task, outputs, round_index: RoundOutcome(team_reward=0.0, solved=False)
    pool = random_actions(env)
    cycle = itertools.cycle(pool)
    rng = np.random.default_rng(0)
    answers = isinstance(env, FinalAnswerEnv)

    def random_outputs(e):
        return {a: next(cycle) for a in e.possible_agents}

    def answer_outputs(e):
        return {a: answer_action(e, rng) for a in e.possible_agents}

    steps_random = steps_per_second(env, lambda e: next(cycle), seconds)
    steps_reference = steps_per_second(reference, lambda e: next(cycle), seconds)
    steps_answers = steps_per_second(env, lambda e: answer_action(e, rng), seconds) if answers else None
    hostile = hostile_actions()
    steps_hostile = steps_per_second(env, lambda e: next(hostile), seconds) if answers else None
    grades_random = grades_per_second(env, random_outputs, seconds)
    grades_answers = grades_per_second(env, answer_outputs, seconds) if answers else None
    env.close()
    reference.close()

    def fmt(x):
        return "-" if x is None else f"{x:,.0f}"

    def fmt_slow(x):  # the hostile stream may be well under 1 step/s
        return "-" if x is None else (f"{x:,.0f}" if x >= 100 else f"{x:.3g}")

    return [env_id, fmt(steps_random), fmt(steps_answers), fmt_slow(steps_hostile), fmt(steps_reference),
            f"{steps_random / steps_reference:.2f}", fmt(grades_random), fmt(grades_answers)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=1.5, help="time per measurement")
    parser.add_argument("--env", action="append", help="env id (repeatable; default: all registered)")
    args = parser.parse_args()
    header = ["env", "steps/s random", "steps/s answers", "steps/s hostile", "reference steps/s", "ratio",
              "grades/s random", "grades/s answers"]
    rows, skipped = [], []
    for env_id in args.env or marft_envs.list_envs():
        try:
            rows.append(bench(env_id, args.seconds))
        except Exception as err:  # noqa: BLE001 - report and go on with the other envs
            skipped.append(f"skipped {env_id}: {type(err).__name__}: {str(err)[:160]}")
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, ["-" * w for w in widths], *rows]:
        print("  ".join(str(c).rjust(w) if i else str(c).ljust(w) for i, (c, w) in enumerate(zip(row, widths))))
    for line in skipped:
        print(line)
    print(f"(random actions: {POOL} pre-drawn samples of each env's action space; "
          f"{args.seconds:g} s per measurement; 'ratio' = steps/s random / reference steps/s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
