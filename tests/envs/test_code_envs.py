"""Coding envs: extraction, pass@k, grading, loaders, and the three envs (API, seeding, episodes)."""

from __future__ import annotations

import json
import math

import pytest
from pettingzoo.test import api_test, parallel_api_test, seed_test
from pettingzoo.utils.conversions import turn_based_aec_to_parallel

import marft_envs
from marft_envs.code.datasets import (CodeTaskSource, humaneval_tests, load_humaneval, load_mbpp,
                                      load_stdio)
from marft_envs.code.extract import extract_code, syntax_error
from marft_envs.code.grading import (CodeProblem, FunctionTests, GradingConfig,
                                     grade_reply, outputs_match, run_function_tests)
from marft_envs.code.passk import mean_pass_at_k, pass_at_k
from marft_envs.code.sandbox import SandboxLimits
from marft_envs.envs.humaneval import HumanEvalEnv
from marft_envs.envs.mbpp import MBPPEnv
from marft_envs.envs.stdio_code import StdioCodeEnv

HE0_GOOD = """```python
def has_close_elements(numbers, threshold):
    return any(abs(a - b) < threshold for i, a in enumerate(numbers) for b in numbers[i + 1:])
```"""
HE0_HALF = "```python\ndef has_close_elements(numbers, threshold):\n    return True\n```"

MBPP_ROWS = [
    {"task_id": 11, "text": "Write a function to add two numbers.", "code": "def add(a, b):\n    return a + b",
     "test_list": ["assert add(1, 2) == 3", "assert add(0, 0) == 0", "assert add(-1, 1) == 0"],
     "test_setup_code": "", "challenge_test_list": ["assert add(10**20, 1) == 10**20 + 1"]},
    {"task_id": 12, "text": "Write a function to square a number.", "code": "import math\ndef sq(x):\n    return x * x",
     "test_list": ["assert sq(3) == 9", "assert math.isclose(sq(0.5), 0.25)"],
     "test_setup_code": "import math", "challenge_test_list": []},
    {"task_id": 700, "text": "Train split item.", "code": "def f():\n    return 1",
     "test_list": ["assert f() == 1"], "test_setup_code": "", "challenge_test_list": []},
]
STDIO_ROWS = [
    {"task_id": "sum2", "prompt": "Read two integers and print their sum.",
     "tests": [{"input": "1 2\n", "output": "3\n"}, {"input": "5 7\n", "output": "12\n"},
               {"input": "-3 3\n", "output": "0\n"}]},
    {"id": "half", "statement": "Print n/2.", "inputs": ["3\n", "4\n"], "outputs": ["1.5\n", "2\n"]},
    {"name": "apps", "question": "Echo.", "input_output": json.dumps({"inputs": ["x\n"], "outputs": ["x\n"]})},
]
SUM2_GOOD = "```python\na, b = map(int, input().split())\nprint(a + b)\n```"


@pytest.fixture(scope="module")
def mbpp_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("mbpp") / "mbpp.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in MBPP_ROWS), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def stdio_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("stdio") / "problems.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in STDIO_ROWS), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def he():
    return {p.task_id: p for p in load_humaneval()}


# -- extraction ------------------------------------------------------------------------------------
def test_extract_prefers_block_defining_entry_point() -> None:
    text = "Here:\n```python\ndef f(x):\n    return x\n```\nUsage:\n```python\nprint(f(2))\n```"
    assert extract_code(text, "f").code == "def f(x):\n    return x"
    assert extract_code(text).code.startswith("def f")  # no entry point: the longest block
    assert extract_code("```\nprint(1)\n```").code == "print(1)"  # untagged counts
    assert extract_code("```bash\nls\n```\n```py\nprint(2)\n```").code == "print(2)"
    assert extract_code("```text\nprint(3)\n```").code == "print(3)"  # other language: fallback
    cut = extract_code("```python\ndef f():\n    return 1")  # cut by the token limit
    assert cut.found_block and cut.code == "def f():\n    return 1"


def test_extract_raw_fallback_and_approve() -> None:
    raw = extract_code("def f():\n    return 1\n", "f")
    assert raw.code and not raw.found_block
    assert extract_code("APPROVE", "f").code == ""  # valid Python, but not a program
    assert extract_code("APPROVE").code == ""
    assert extract_code("def f():\n    return 1\n", "f", allow_raw=False).code == ""
    assert extract_code("Sorry, I cannot.").code == ""


def test_syntax_error_is_described_not_executed() -> None:
    assert syntax_error("x = 1") is None
    assert "SyntaxError" in syntax_error("def f(:\n")
    assert syntax_error("(" * 10_000) is not None  # absurd nesting: error, no crash


# -- pass@k ----------------------------------------------------------------------------------------
def test_pass_at_k_matches_combinatorial_formula() -> None:
    for n, c, k in [(10, 3, 1), (10, 3, 5), (20, 1, 10), (5, 0, 2), (5, 5, 3), (200, 17, 100)]:
        exact = 1 - math.comb(n - c, k) / math.comb(n, k)
        assert pass_at_k(n, c, k) == pytest.approx(exact, abs=1e-12)
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3)
    assert mean_pass_at_k([[True, False], [False, False]], 1) == pytest.approx(0.25)
    with pytest.raises(ValueError, match="at least 5 samples"):
        pass_at_k(3, 1, 5)
    with pytest.raises(ValueError):
        pass_at_k(3, 4, 1)


# -- grading ---------------------------------------------------------------------------------------
def test_humaneval_grading_partial_and_feedback(he) -> None:
    p = he["HumanEval/0"]
    good = grade_reply(p, HE0_GOOD)
    assert good.status == "passed" and good.reward("all_pass") == 1.0 and good.format == "ok"
    half = grade_reply(p, HE0_HALF)
    assert half.status == "failed" and 0 < half.fraction < 1 and half.reward("all_pass") == 0.0
    fb = half.feedback(p.tests)
    assert "tests passed" in fb and "assert candidate(" in fb and "got True" in fb
    body_only = grade_reply(p, "    return False\n")  # HumanEval completion format, raw
    assert body_only.total == 7 and body_only.format in ("ok", "no_code_block")


def test_humaneval_vacuous_asserts_are_not_tests(he) -> None:
    p = he["HumanEval/64"]
    assert all("candidate" in c for c in p.tests.cases)
    wrong = f"```python\ndef {p.entry_point}(*a):\n    raise RuntimeError\n```"
    assert grade_reply(p, wrong).passed == 0


def test_format_statuses(he) -> None:
    p = he["HumanEval/0"]
    res = grade_reply(p, "I don't know.")
    assert (res.status, res.format, res.reward()) == ("no_code", "no_code", 0.0)
    res = grade_reply(p, "```python\ndef has_close_elements(:\n```")
    assert (res.status, res.format) == ("syntax_error", "syntax_error") and res.sandbox is None
    res = grade_reply(p, "```python\nraise SystemExit(0)\n```")
    assert res.passed == 0


def _problem(cases, **kw) -> CodeProblem:
    return CodeProblem("t", "p", FunctionTests(cases=tuple(cases), entry_point="f"), entry_point="f", **kw)


def test_slow_case_does_not_hide_others() -> None:
    prog = "def f(x):\n    while x == 2:\n        pass\n    return x\n"
    cfg = GradingConfig(per_case_s=0.3)
    res = run_function_tests(prog, _problem(["assert f(1) == 1", "assert f(2) == 2", "assert f(3) == 3"]).tests, cfg)
    assert [c.passed for c in res.cases] == [True, False, True]
    assert "time limit" in res.cases[1].detail


def test_catch_all_except_cannot_swallow_case_timeout() -> None:
    prog = "def f():\n    try:\n        while True:\n            pass\n    except Exception:\n        return 1\n"
    res = run_function_tests(prog, _problem(["assert f() == 1"]).tests, GradingConfig(per_case_s=0.3))
    assert res.passed == 0


def test_printed_fake_results_do_not_count() -> None:
    prog = ("import sys\ndef f():\n    return 0\n"
            "for i in range(3):\n    sys.__stdout__.write('\\n@@marft-0@@{\"ev\": \"case\", \"i\": %d, \"ok\": true}\\n' % i)\n")
    res = run_function_tests(prog, _problem(["assert f() == 1"] * 3).tests)
    assert res.passed == 0
    res = run_function_tests("import os\nos._exit(0)\ndef f():\n    return 1\n", _problem(["assert f() == 1"]).tests)
    assert res.passed == 0


def test_load_error_fails_every_case() -> None:
    res = run_function_tests("def f():\n    return 1\nraise ImportError('nope')\n", _problem(["assert f() == 1"] * 2).tests)
    assert res.status == "crash" and res.passed == 0 and "nope" in res.detail


def test_stdio_grading(stdio_file) -> None:
    probs = {p.task_id: p for p in load_stdio(stdio_file)}
    assert grade_reply(probs["sum2"], SUM2_GOOD).status == "passed"
    wrong = grade_reply(probs["sum2"], "```python\na, b = map(int, input().split())\nprint(abs(a) + b)\n```")
    assert wrong.passed == 2 and wrong.cases[2].error == "wrong_answer"
    assert "expected '0\\n', got '6\\n'" in wrong.cases[2].detail
    crash = grade_reply(probs["sum2"], "```python\nprint(1 / 0)\n```")
    assert crash.status == "crash" and crash.passed == 0 and "ZeroDivisionError" in crash.feedback(probs["sum2"].tests)
    half = grade_reply(probs["half"], "```python\nprint(int(input()) / 2)\n```")
    assert half.status == "passed"  # "2.0" == "2" numerically
    assert not outputs_match("2.0", "2", float_tol=0)
    slow = "```python\nimport time\nn = input()\nif n.startswith('5'):\n    time.sleep(30)\nprint(sum(map(int, n.split())))\n```"
    res = grade_reply(probs["sum2"], slow, GradingConfig(limits=SandboxLimits(wall_s=2.0)))
    assert [c.passed for c in res.cases] == [True, False, True] and res.cases[1].error == "timeout"


# -- loaders ---------------------------------------------------------------------------------------
def test_humaneval_bundled_loader(he) -> None:
    assert len(he) == 164
    p = he["HumanEval/32"]
    assert len(p.tests.cases) == 1 and "_marft_case(find_zero)" in p.tests.cases[0]
    assert sum(len(x.tests.cases) for x in he.values()) > 164 * 5  # split into single asserts
    whole = humaneval_tests("not python (", "f")
    assert whole.cases == ("check(f)",)


def test_mbpp_loader_local_file(mbpp_file) -> None:
    test = load_mbpp(mbpp_file, split="test")
    assert [p.task_id for p in test] == ["mbpp/11", "mbpp/12"]
    assert test[0].entry_point == "add" and "assert add(1, 2) == 3" in test[0].prompt
    assert len(load_mbpp(mbpp_file, split="test", include_challenge_tests=True)[0].tests.cases) == 4
    assert [p.task_id for p in load_mbpp(mbpp_file, split="train")] == ["mbpp/700"]
    for p in test:
        assert grade_reply(p, p.reference).status == "passed"  # test_setup_code ran
    with pytest.raises(ValueError, match="split"):
        load_mbpp(mbpp_file, split="dev")


def test_mbpp_shared_data_counts(data_dir) -> None:
    assert len(load_mbpp(variant="full", split="all")) == 974
    assert len(load_mbpp(variant="full", split="test")) == 500
    assert len(load_mbpp(variant="sanitized", split="all")) == 427


def test_stdio_loader_errors(tmp_path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"task_id": "x", "prompt": "p"}) + "\n")
    with pytest.raises(ValueError, match="needs 'tests'"):
        load_stdio(bad)
    bad.write_text(json.dumps({"task_id": "x", "tests": [{"input": "", "output": ""}]}) + "\n")
    with pytest.raises(ValueError, match="needs a 'prompt'"):
        load_stdio(bad)
    bad.write_text("{not json\n")
    with pytest.raises(ValueError, match="not valid JSON"):
        load_stdio(bad)


# -- envs ------------------------------------------------------------------------------------------
ENV_FACTORIES = {
    "humaneval": lambda mbpp, stdio, **kw: HumanEvalEnv(limit=3, **kw),
    "mbpp": lambda mbpp, stdio, **kw: MBPPEnv(path=mbpp, **kw),
    "stdio": lambda mbpp, stdio, **kw: StdioCodeEnv(path=stdio, **kw),
}


@pytest.mark.parametrize("profile", ["coder", "coder_reviewer", "planner_coder_tester"])
@pytest.mark.parametrize("name", sorted(ENV_FACTORIES))
def test_pettingzoo_api(name, profile, mbpp_file, stdio_file) -> None:
    make = lambda: ENV_FACTORIES[name](mbpp_file, stdio_file, profile=profile)  # noqa: E731
    api_test(make(), num_cycles=10)
    seed_test(make, num_cycles=10)
    parallel_api_test(turn_based_aec_to_parallel(make()), num_cycles=10)


def play(env, replies: dict[str, list[str]], seed=0, options=None):
    """Run one episode; returns (per-agent final rewards, last infos, observations per agent)."""
    env.reset(seed=seed, options=options)
    queues = {a: list(v) for a, v in replies.items()}
    seen: dict[str, list[str]] = {}
    final_rewards, final_infos = {}, {}
    for agent in env.agent_iter():
        obs, reward, term, trunc, info = env.last()
        if term or trunc:
            final_rewards[agent], final_infos[agent] = reward, info
            env.step(None)
            continue
        seen.setdefault(agent, []).append(obs["text"])
        env.step(queues[agent].pop(0))
    return final_rewards, final_infos, seen


def test_coder_retries_with_feedback_and_solves() -> None:
    env = HumanEvalEnv(limit=1, horizon=3)
    rewards, infos, seen = play(env, {"coder_0": [HE0_HALF, HE0_GOOD]}, options={"task_index": 0})
    assert rewards["coder_0"] == 1.0
    out = infos["coder_0"]["last_outcome"]
    assert out["solved"] and out["info"]["status"] == "passed" and out["info"]["code_from"] == "coder_0"
    assert len(seen["coder_0"]) == 2
    assert "tests passed" in seen["coder_0"][1] and "assert candidate(" in seen["coder_0"][1]


def test_reviewer_approval_grades_coder_code_and_rewards_fraction() -> None:
    env = HumanEvalEnv(limit=1, horizon=2, profile="coder_reviewer")
    rewards, infos, seen = play(env, {"coder_0": [HE0_HALF, HE0_HALF], "reviewer_0": ["APPROVE", "APPROVE"]},
                                options={"task_index": 0})
    out = infos["reviewer_0"]["last_outcome"]
    assert out["info"]["code_from"] == "coder_0" and out["info"]["graded_agent"] == "reviewer_0"
    assert 0 < rewards["reviewer_0"] == rewards["coder_0"] < 1
    assert not out["solved"] and infos["reviewer_0"]["round"] == 1  # ran to the horizon
    # The reviewer sees this round's code and, in round 2, the earlier attempt's code + feedback.
    assert "return True" in seen["reviewer_0"][0]
    assert "[Attempt 1]" in seen["reviewer_0"][1] and "return True" in seen["reviewer_0"][1].split("Feedback")[0]
    assert "approved by reviewer_0" in seen["reviewer_0"][1]


def test_tester_fix_replaces_code_and_all_pass_reward() -> None:
    env = HumanEvalEnv(limit=1, profile="planner_coder_tester", reward="all_pass", feedback="summary")
    rewards, infos, _ = play(env, {"planner_0": ["1. compare pairs"], "coder_0": [HE0_HALF],
                                   "tester_0": ["Bug in the pair check. " + HE0_GOOD]},
                             options={"task_index": 0})
    out = infos["tester_0"]["last_outcome"]
    assert out["info"]["code_from"] == "tester_0" and rewards["tester_0"] == 1.0
    assert infos["tester_0"]["agent_reward"] == 1.0  # format reward to the agent whose code ran


def test_summary_feedback_hides_tests() -> None:
    env = HumanEvalEnv(limit=1, horizon=2, feedback="summary")
    _, infos, seen = play(env, {"coder_0": [HE0_HALF, HE0_HALF]}, options={"task_index": 0})
    assert "tests passed (failed)" in seen["coder_0"][1] and "assert" not in seen["coder_0"][1].split("Feedback")[1]


def test_no_code_and_format_infos(mbpp_file) -> None:
    env = MBPPEnv(path=mbpp_file, horizon=1)
    rewards, infos, _ = play(env, {"coder_0": ["no idea"]}, options={"task_index": 0})
    info = infos["coder_0"]["last_outcome"]["info"]
    assert rewards["coder_0"] == 0.0 and info["status"] == "no_code" and info["format"] == "no_code"
    assert infos["coder_0"]["agent_reward"] == 0.0
    rewards, infos, _ = play(env, {"coder_0": ["def add(a, b):\n    return a + b\n"]}, options={"task_index": 0})
    info = infos["coder_0"]["last_outcome"]["info"]
    assert rewards["coder_0"] == 1.0 and info["format"] == "no_code_block"


def test_stdio_env_and_registry(stdio_file) -> None:
    env = marft_envs.make("marft/StdioCode-v0", path=stdio_file, horizon=1)
    rewards, infos, seen = play(env, {"coder_0": [SUM2_GOOD]}, options={"task_index": 0})
    assert rewards["coder_0"] == 1.0 and "standard input" in seen["coder_0"][0]
    with pytest.raises(ValueError, match="needs path="):
        StdioCodeEnv()
    assert {"marft/HumanEval-v0", "marft/MBPP-v0", "marft/StdioCode-v0"} <= set(marft_envs.list_envs())
    with pytest.raises(ValueError, match="unknown sandbox limits"):
        HumanEvalEnv(limit=1, limits={"wall": 1})


def test_task_source_is_deterministic(mbpp_file) -> None:
    src = CodeTaskSource(load_mbpp(mbpp_file, split="all"))
    assert src[1].task_id == src[1].task_id == "mbpp/12" and src[1].metadata["n_tests"] == 2
