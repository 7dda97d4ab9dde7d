r"""Acceptance check of the math envs' grading with gold and deliberately wrong answers.

For every MATH500 problem and the first 1,000 GSM8K train problems, the *env* (default ``dual``
profile: the reasoner speaks first, then the graded actor) receives

* **gold**: the reference inside an otherwise plausible final utterance - a line of working with
  distracting numbers, then ``Therefore, the final answer is $\boxed{<reference>}$.`` - and must
  give reward 1 for >= 99 % of the problems;
* **solution**: the dataset's own worked solution as the utterance (MATH: ``\boxed{}`` at the end,
  sometimes several boxes or Asymptote code before it; GSM8K: ``<<48/2=24>>`` calculator notes and
  ``#### 72``) - exercises extraction on real text; must give reward 1 for >= 99 %;
* **wrong**: the same utterance around a *perturbed* reference, which must give reward 0 for
  >= 99 %. The perturbation (:func:`perturb`) is a plausible near miss, not garbage:
  plain numbers (integer, decimal, fraction) -> value + 1 in the same notation; otherwise the
  last integer literal in the expression is incremented (``\frac{\pi}{2}`` -> ``\frac{\pi}{3}``,
  ``(6,31,-1)`` -> ``(6,31,-2)``, ``x^2+7x+10`` -> ``x^2+7x+11``); a multiple-choice letter
  moves to the next letter (``(C)`` -> ``(D)``); any other text gets ``+ 1`` appended
  (``p - q`` -> ``p - q + 1``), and ``\text{...}`` words get a letter appended.

``--symbolic`` also grades both sets with the fast path off (math-verify alone, outside the env)
to show how the symbolic checker does on its own. Misses are printed. Exit status 1 when a rate
misses its 99 % bar.

Usage: ``python benchmarks/gold_math.py [--data-dir DIR] [--symbolic]``
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections import Counter
from fractions import Fraction
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from marft_envs.envs.answer_env import FinalAnswerEnv  # noqa: E402
from marft_envs.envs.gsm8k import GSM8KEnv  # noqa: E402
from marft_envs.envs.math import MathEnv  # noqa: E402
from marft_envs.tasks.math_data import read_records  # noqa: E402
from marft_envs.tasks.math_grading import MathGrader, normalize_answer, parse_number  # noqa: E402

BAR = 0.99
REASONER = "Let me set up the problem. We have 2 cases and 12 sub-cases; checking 3 of them gives 17."


def utterance(answer: str) -> str:
    return (
        "We combine the two partial results, 4 and 9, and simplify carefully.\n"
        f"Therefore, the final answer is $\\boxed{{{answer}}}$."
    )


def _number_like(value: Fraction, template: str) -> str:
    """``value`` written the way ``template`` was (integer, decimal, a/b, \\frac{a}{b})."""
    if value.denominator == 1:
        return str(value.numerator)
    if "\\frac" in template:
        sign = "-" if value < 0 else ""
        return f"{sign}\\frac{{{abs(value.numerator)}}}{{{value.denominator}}}"
    if "/" in template:
        return f"{value.numerator}/{value.denominator}"
    return f"{float(value):.10g}"


def perturb(reference: str) -> str:
    """A plausible wrong answer close to ``reference`` (see the module docstring)."""
    number = parse_number(normalize_answer(reference))
    if number is not None:
        return _number_like(number + 1, reference)
    literals = list(re.finditer(r"\d+", reference))
    if literals:
        last = literals[-1]
        return reference[: last.start()] + str(int(last.group()) + 1) + reference[last.end() :]
    choice = re.fullmatch(r"(\\text\{)?\(?([A-E])\)?(\})?", reference.strip())
    if choice:
        letter = choice.group(2)
        return reference.replace(letter, "ABCDEA"["ABCDE".index(letter) + 1])
    if "\\text{" in reference:
        return reference.replace("\\text{", "\\text{z", 1)
    return f"{reference} + 1"


def run_env(env: FinalAnswerEnv, make_utterance, solutions: list[str]) -> tuple[list[float], list[tuple[str, str, str, dict]]]:
    """Play every task once through the env; returns rewards and (task id, reference, utterance, info)."""
    rewards, records = [], []
    for index in range(len(env.tasks)):
        env.reset(seed=0, options={"task_index": index})
        reference = str(env.task.answer)
        answer = make_utterance(reference, solutions[env.task.metadata["index"]])
        outcome = None
        for agent in env.agent_iter():
            _, reward, term, trunc, info = env.last()
            if term or trunc:
                outcome = (reward, info["last_outcome"]["info"])
                env.step(None)
                continue
            graded = env.profile.role_of(agent).graded
            env.step(answer if graded else REASONER)
        rewards.append(outcome[0])
        records.append((env.task.task_id, reference, answer, outcome[1]))
    return rewards, records


def decided_by(reason: str) -> str:
    """Which grading stage settled a case, from its reason text."""
    for key, label in (("timed out", "timeout"), ("math-verify", "math-verify"), ("numeric", "numeric"),
                       ("normalised", "text"), ("no final answer", "no answer")):
        if key in reason:
            return label
    return reason


KINDS = (
    ("gold", lambda reference, solution: utterance(reference), 1.0),
    ("solution", lambda reference, solution: solution, 1.0),
    ("wrong", lambda reference, solution: utterance(perturb(reference)), 0.0),
)


def report(name: str, env: FinalAnswerEnv, solutions: list[str], symbolic: bool) -> bool:
    ok = True
    for kind, make_utterance, want in KINDS:
        start = time.perf_counter()
        rewards, records = run_env(env, make_utterance, solutions)
        seconds = time.perf_counter() - start
        hits = sum(r == want for r in rewards)
        rate = hits / len(rewards)
        ok &= rate >= BAR
        paths = Counter(decided_by(info["reason"]) for *_, info in records)
        print(f"{name:8s} {kind:8s} reward=={want:g}: {hits}/{len(rewards)} = {rate:.2%} "
              f"({'PASS' if rate >= BAR else 'FAIL'} at {BAR:.0%}); {seconds:.1f} s; decided by {dict(paths)}")
        for (task_id, reference, answer, info), reward in zip(records, rewards):
            if reward != want:
                print(f"    miss {task_id}: reference={reference!r} utterance={answer[-120:]!r} "
                      f"extracted={info['extracted']!r} ({info['reason']})")
        if symbolic and kind != "solution":
            grader = MathGrader(fast_path=False)
            start = time.perf_counter()
            results = [grader.grade(answer, reference) for _, reference, answer, _ in records]
            same = sum(r.correct == (want == 1.0) for r in results)
            print(f"{'':8s} {kind:8s} math-verify alone: {same}/{len(results)} = {same / len(results):.2%} "
                  f"as expected; {time.perf_counter() - start:.1f} s")
            for (task_id, reference, answer, _), result in zip(records, results):
                if result.correct != (want == 1.0):
                    print(f"    math-verify-only miss {task_id}: reference={reference!r} "
                          f"utterance={answer[-120:]!r} ({result.reason})")
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", default=None, help="data folder (default: $MARFT_DATA or ../shared/data)")
    parser.add_argument("--gsm8k-limit", type=int, default=1000)
    parser.add_argument("--symbolic", action="store_true", help="also grade with math-verify alone")
    args = parser.parse_args()
    math = MathEnv(subset="math500", data_dir=args.data_dir, horizon=1)
    math_solutions = [r["solution"] for r in read_records(math.tasks.source)]
    ok = report("MATH500", math, math_solutions, args.symbolic)
    gsm8k = GSM8KEnv(split="train", limit=args.gsm8k_limit, data_dir=args.data_dir, horizon=1)
    gsm8k_solutions = [r["answer"] for r in read_records(gsm8k.tasks.source)]
    ok &= report("GSM8K", gsm8k, gsm8k_solutions, args.symbolic)
    print("ALL PASS" if ok else "SOME RATE BELOW THE BAR")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
