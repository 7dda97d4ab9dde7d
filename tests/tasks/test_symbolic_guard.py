"""The cheap guard in front of math-verify: hostile answers cost microseconds, gold answers pass."""

import json
import time
from pathlib import Path

import pytest

from marft_envs.tasks.math_data import gsm8k_final_answer
from marft_envs.tasks.math_grading import MathGrader, extract_boxed
from marft_envs.tasks.paths import data_root
from marft_envs.tasks.symbolic_guard import numeric_value, symbolic_risk

HOSTILE = [
    r"9^{9^{9^{9^{9}}}}", r"10^{10^{10^{10}}}", r"2^{2^{2^{2^{2^{2}}}}}", r"(10^{100})!",
    r"\frac{9^{9^{9^{9}}}}{7}", r"9^{9^{9}} - 9^{9^{9}} + 1", r"x^{99999999999} + 1",
    r"\sum_{n=1}^{10^{12}} n^{2}", r"e^{e^{e^{e^{100}}}}", r"123456789!", r"(x+1)^{999}",
    r"x^{y^{z^{w}}}", "{" * 40 + "1" + "}" * 40, r"\left(2^{3}\right)^{10^{9}}",
]
ORDINARY = [
    r"2^{2^{2}}", r"e^{i\pi}", r"(n+1)!", r"\sum_{k=1}^{n} k", "10!", r"2^{2009}", r"\frac{1}{2}",
    r"x^2+7x+10", r"3^{-2}", r"\left(2^{3}\right)^{4}", "5!!", r"2^{10}\cdot 3", r"\frac{1}{2004!}",
    r"(x-1)^3(x+1)^3", r"\sqrt[3]{2}", r"(r+5)^2", "-\\frac{\\pi}{2}", r"10^{-6}",
]


@pytest.mark.parametrize("answer", HOSTILE)
def test_hostile_answers_are_named(answer):
    assert symbolic_risk(answer) is not None


@pytest.mark.parametrize("answer", ORDINARY)
def test_ordinary_answers_pass(answer):
    assert symbolic_risk(answer) is None


def test_numeric_value():
    assert numeric_value(r"\frac{9}{3}+2^{3}\cdot 2") == pytest.approx(19.0)
    assert numeric_value(r"2\pi") == pytest.approx(6.2831853)
    assert numeric_value("9^{9^{9}}") == float("inf")
    assert numeric_value("x+1") is None and numeric_value("") is None


def test_a_stream_of_hostile_answers_grades_in_milliseconds():
    grader = MathGrader(mode="process")
    start = time.perf_counter()
    for answer in HOSTILE:
        for reference in ("72", r"\frac{\pi}{2}"):
            result = grader.grade(f"So the answer is $\\boxed{{{answer}}}$.", reference)
            assert not result.correct and "not checked symbolically" in result.reason, result
    per_step = (time.perf_counter() - start) / (2 * len(HOSTILE))
    assert per_step < 0.01  # without the guard: seconds each (math-verify's timeout)


def test_ordinary_tower_still_graded_symbolically():
    result = MathGrader().grade(r"\boxed{2^{2^{2}}}", "16")
    assert result.correct and "math-verify" in result.reason


def _gold_answers(root: Path) -> list[str]:
    answers = []
    for name in ("math500_test.jsonl", "MATH_test.jsonl", "MATH_train.jsonl"):
        path = root / "math" / name
        if path.is_file():
            for line in path.read_text(encoding="utf-8").splitlines():
                record = json.loads(line)
                answers.append(record.get("answer") or extract_boxed(record["solution"]) or "")
    path = root / "gsm8k" / "train.jsonl"
    if path.is_file():
        for line in path.read_text(encoding="utf-8").splitlines():
            answers.append(gsm8k_final_answer(json.loads(line)["answer"]) or "")
    return [a for a in answers if a]


def test_every_gold_answer_passes_the_guard():
    root = data_root()
    if root is None or not (root / "math").is_dir():
        pytest.skip("no data root ($MARFT_DATA or ../shared/data) with math/ and gsm8k/")
    answers = _gold_answers(root)
    assert len(answers) > 500
    flagged = [(a, symbolic_risk(a)) for a in answers if symbolic_risk(a) is not None]
    assert flagged == []
