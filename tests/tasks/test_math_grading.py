"""Answer extraction, normalisation and bounded equivalence checks."""

import threading
import time
from fractions import Fraction

import pytest

from marft_envs.tasks import _mv_worker, math_grading, verify_backend
from marft_envs.tasks.math_grading import (
    GradeResult,
    MathGrader,
    extract_answer,
    extract_answer_phrase,
    extract_boxed,
    extract_hash_answer,
    extract_last_number,
    grade_answer,
    normalize_answer,
    parse_number,
)

PATHOLOGICAL = "\\boxed{9^{9^{9^{9}}}}"  # sympy keeps evaluating this far past any timeout


@pytest.fixture()
def no_guard(monkeypatch):
    """Let PATHOLOGICAL reach math-verify (the cheap guard would refuse it), to test the timeouts."""
    monkeypatch.setattr(math_grading, "symbolic_risk", lambda answer: None)


# -- extraction steps, one by one --------------------------------------------------------------
@pytest.mark.parametrize("text, expected", [
    ("so \\boxed{42}.", "42"),
    ("first \\boxed{1} then \\boxed{2}", "2"),
    ("\\boxed{\\frac{1}{\\sqrt{2}}}", "\\frac{1}{\\sqrt{2}}"),
    ("\\boxed{\\{1, 2\\}}", "\\{1, 2\\}"),  # escaped braces do not close the box
    ("\\fbox{7}", "7"),
    ("is $\\boxed 2$.", "2"),  # MATH's brace-less form
    ("\\boxed{3} and an unclosed \\boxed{4", "3"),  # truncated last box: use the previous one
    ("Put the answer in \\boxed{}.", None),  # an echoed empty box is not an answer
    ("\\boxedx{5}", None),
    ("no box here", None),
])
def test_extract_boxed(text, expected):
    assert extract_boxed(text) == expected


@pytest.mark.parametrize("text, expected", [
    ("48/2 = 24\n#### 72", "72"),
    ("#### 1,000.\n", "1,000"),
    ("#### 1\n#### 2", "2"),
    ("####", None),
    ("no hashes", None),
])
def test_extract_hash_answer(text, expected):
    assert extract_hash_answer(text) == expected


@pytest.mark.parametrize("text, expected", [
    ("The answer is 42.", "42"),
    ("Final Answer: The final answer is $\\frac{1}{2}$. I hope it is correct.", "\\frac{1}{2}"),
    ("**Answer:** 3.5", "3.5"),
    ("the answer is: x = 5. Done", "x = 5"),
    ("To answer this we add 3.", None),  # "answer" without "is"/":" is not the phrase
    ("The answer is", None),
])
def test_extract_answer_phrase(text, expected):
    assert extract_answer_phrase(text) == expected


@pytest.mark.parametrize("text, expected", [
    ("3 apples and 1,234.5 pears", "1234.5"),
    ("it is -7", "-7"),
    ("x-5", "5"),  # a binary minus is not a sign
    ("ratio 3/4", "3/4"),
    ("value .5", ".5"),
    ("none", None),
])
def test_extract_last_number(text, expected):
    assert extract_last_number(text) == expected


def test_extraction_priority_and_method():
    assert extract_answer("The answer is 5. \\boxed{6} #### 7") == ("6", "boxed")
    assert extract_answer("The answer is 5.\n#### 7") == ("7", "hash")
    assert extract_answer("The answer is 5, not 9") == ("5, not 9", "phrase")
    assert extract_answer("we get 8 then 9") == ("9", "last_number")
    assert extract_answer("nothing") == (None, "none")


# -- normalisation and numbers -------------------------------------------------------------------
@pytest.mark.parametrize("a, b", [
    ("\\left( 3, \\frac{\\pi}{2} \\right)", "(3,\\dfrac{\\pi}{2})"),
    ("$p - q$", "p-q"),
    ("10{,}000", "10000"),
    ("5\\text{ cm}", "5"),
    ("\\text{(C)}", "(C)"),
    ("x = 3", "3"),
    ("90^\\circ", "90"),
    ("50\\%", "50"),
    ("\\$18.", "18"),
])
def test_normalize_equal(a, b):
    assert normalize_answer(a) == normalize_answer(b)


def test_normalize_keeps_meaningful_spaces():
    assert normalize_answer("2 3") != normalize_answer("23")


@pytest.mark.parametrize("text, value", [
    ("12", Fraction(12)), ("-0.5", Fraction(-1, 2)), (".25", Fraction(1, 4)), ("3/4", Fraction(3, 4)),
    ("\\frac{3}{4}", Fraction(3, 4)), ("-\\frac{1}{2}", Fraction(-1, 2)), ("\\frac34", Fraction(3, 4)),
    ("1/0", None), ("\\sqrt{2}", None), ("1" * 5000, None),
])
def test_parse_number(text, value):
    assert parse_number(text) == value


# -- grading ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("output, reference, correct", [
    ("So the answer is \\boxed{\\frac{1}{2}}.", "0.5", True),
    ("\\boxed{(3,\\tfrac{\\pi}{2})}", "\\left( 3, \\frac{\\pi}{2} \\right)", True),
    ("Natalia sold 72 clips.\n#### 72", "72", True),
    ("#### 1,000", "1000", True),
    ("\\boxed{73}", "72", False),
    ("\\boxed{3/4}", "\\frac{3}{4}", True),
    ("\\boxed{8/6}", "4/3", True),
    ("\\boxed{2 3}", "23", False),
    ("The solution is \\boxed{x=5}", "\\boxed{5}", True),  # a boxed reference is unwrapped
])
def test_grade_fast_path(output, reference, correct):
    result = grade_answer(output, reference)
    assert isinstance(result, GradeResult)
    assert result.correct is correct, result


def test_grade_symbolic_equivalence_via_math_verify():
    result = grade_answer("The answer is $x^2+2x+1$.", "(x+1)^2")
    assert result.correct and "math-verify" in result.reason and result.method == "phrase"
    assert not grade_answer("\\boxed{x^2+1}", "(x+1)^2").correct
    assert grade_answer("\\boxed{\\sqrt{2}/2}", "\\frac{\\sqrt{2}}{2}").correct


@pytest.mark.parametrize("output", [
    "", " ", "x" * 100_000, "\\boxed{" * 20_000, "\ud800\udfff\\boxed{\ud800}", "1" * 100_000,
    "{" * 50_000 + "}" * 50_000, "\\boxed{" + "1" * 5000 + "}", "#### \ud83d", "\x00\\boxed{\x00}",
])
def test_hostile_outputs_never_crash(output):
    grade_answer("\\boxed{1}", "x^2")  # a live worker: its one-off start is not what we time
    start = time.perf_counter()
    result = grade_answer(output, "7")
    assert result.correct is False
    assert time.perf_counter() - start < 2.0


def test_lone_surrogate_around_a_correct_answer():
    result = grade_answer("\ud800 so \\boxed{7} \udfff", "7")
    assert result.correct and result.extracted == "7"


def test_type_errors_name_the_expected_type():
    with pytest.raises(TypeError, match="model_output must be a str"):
        grade_answer(None, "7")
    with pytest.raises(TypeError, match="reference must be a str"):
        grade_answer("7", 7)
    with pytest.raises(ValueError, match="reference is empty"):
        grade_answer("7", " ")


def test_bad_grader_settings():
    with pytest.raises(ValueError, match="mode must be one of"):
        MathGrader(mode="threads")
    with pytest.raises(ValueError, match="timeout_s"):
        MathGrader(timeout_s=0)


# -- time bounds ---------------------------------------------------------------------------------
def test_pathological_answer_is_cut_off_by_the_worker_guard(no_guard):
    MathGrader(mode="process").grade("\\boxed{1}", "x^2")  # a live worker before the timed part
    start = time.perf_counter()
    result = MathGrader(timeout_s=0.5, mode="process").grade(PATHOLOGICAL, "5")
    assert not result.correct and "timed out" in result.reason
    assert time.perf_counter() - start < 3.0  # unbounded, this runs for minutes


def test_stuck_worker_is_killed_and_replaced(monkeypatch, no_guard):
    # Disable the child's own guard so only the parent's hard kill can end the call, as for a
    # C-level loop that signals cannot interrupt.
    monkeypatch.setattr(verify_backend, "SOFT_FRACTION", 50.0)
    MathGrader(mode="process").grade("\\boxed{1}", "x^2")  # a live worker before the timed part
    start = time.perf_counter()
    assert "timed out" in MathGrader(timeout_s=0.4, mode="process").grade(PATHOLOGICAL, "5").reason
    assert time.perf_counter() - start < 3.0
    monkeypatch.setattr(verify_backend, "SOFT_FRACTION", 0.8)
    assert MathGrader().grade("\\boxed{x^2+2x+1}", "(x+1)^2").correct  # a fresh worker answers


def test_grading_from_a_thread_is_bounded(no_guard):
    results = []

    def work():
        results.append(MathGrader().grade("\\boxed{x^2+2x+1}", "(x+1)^2"))
        results.append(MathGrader(timeout_s=0.5).grade(PATHOLOGICAL, "5"))

    thread = threading.Thread(target=work)
    thread.start()
    thread.join(timeout=30)
    assert not thread.is_alive()
    assert results[0].correct and "timed out" in results[1].reason


def test_inline_guard_in_the_main_thread(no_guard):
    if not _mv_worker.can_guard_inline():
        pytest.skip("another interval timer is armed (e.g. pytest-timeout's signal method)")
    assert MathGrader(mode="inline").grade("\\boxed{x^2+2x+1}", "(x+1)^2").correct
    start = time.perf_counter()
    assert "timed out" in MathGrader(timeout_s=0.5, mode="inline").grade(PATHOLOGICAL, "5").reason
    assert time.perf_counter() - start < 3.0
