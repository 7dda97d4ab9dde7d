"""Loaders accept the common record variants and say what to do with the others."""

from __future__ import annotations

import json

import pytest

from marft_envs.code.datasets import load_humaneval, load_mbpp, load_stdio
from marft_envs.code.grading import grade_reply

EVALPLUS = {  # an MBPP+ (evalplus) record, as in MbppPlus.jsonl
    "task_id": "Mbpp/2",
    "prompt": '"""\nWrite a function to find the shared elements from the given two lists.\n'
              'assert set(similar_elements((3, 4, 5, 6),(5, 7, 4, 10))) == set((4, 5))\n"""\n',
    "entry_point": "similar_elements",
    "canonical_solution": "\ndef similar_elements(test_tup1, test_tup2):\n"
                          "    return tuple(set(test_tup1) & set(test_tup2))\n",
    "base_input": [[[3, 4, 5, 6], [5, 7, 4, 10]]], "plus_input": [], "atol": 0,
    "assertion": "\nassert set(similar_elements((3, 4, 5, 6),(5, 7, 4, 10))) == set((4, 5))\n"
                 "assert set(similar_elements((1, 2, 3, 4),(5, 4, 3, 7))) == set((3, 4))\n",
}
HUMANEVAL_STYLE = {"task_id": "X/0", "prompt": "def f(x):\n", "entry_point": "f",
                   "canonical_solution": "    return x\n",
                   "test": "def check(candidate):\n    assert candidate(1) == 1\n"}


def _write(tmp_path, name, records):
    path = tmp_path / name
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def test_mbpp_plus_record_loads_and_grades(tmp_path) -> None:
    path = _write(tmp_path, "MbppPlus.jsonl", [EVALPLUS])
    (problem,) = load_mbpp(path, split="all")
    assert problem.task_id == "mbpp/2" and problem.entry_point == "similar_elements"
    assert len(problem.tests.cases) == 2 and problem.metadata["source"] == "mbpp-plus"
    assert problem.prompt.startswith("Write a function to find the shared elements")
    assert '"""' not in problem.prompt and problem.prompt.count("assert ") == 2  # shown tests only
    assert grade_reply(problem, problem.reference).status == "passed"
    assert load_mbpp(path, split="test") == []  # id 2 is in MBPP's prompt split (1-10)


def test_mbpp_string_ids_in_split_filter(tmp_path) -> None:
    rec = dict(EVALPLUS, task_id="Mbpp/11")
    assert [p.task_id for p in load_mbpp(_write(tmp_path, "m.jsonl", [rec]))] == ["mbpp/11"]
    rec = dict(EVALPLUS, task_id="11")
    assert [p.task_id for p in load_mbpp(_write(tmp_path, "m.jsonl", [rec]))] == ["mbpp/11"]


def test_mbpp_bad_id_names_file_record_and_format(tmp_path) -> None:
    path = _write(tmp_path, "odd.jsonl", [dict(EVALPLUS, task_id="Mbpp/11"),
                                          dict(EVALPLUS, task_id="HumanEval/3")])
    with pytest.raises(ValueError) as err:
        load_mbpp(path, split="all")
    msg = str(err.value)
    assert str(path) in msg and "record 2" in msg and "'HumanEval/3'" in msg
    assert "Mbpp/<n>" in msg and "test_list" in msg


def test_mbpp_loader_points_humaneval_records_elsewhere(tmp_path) -> None:
    path = _write(tmp_path, "he.jsonl", [dict(HUMANEVAL_STYLE, task_id=5)])
    with pytest.raises(ValueError, match="load_humaneval"):
        load_mbpp(path, split="all")


def test_humaneval_loader_errors_name_file_and_point_mbpp_elsewhere(tmp_path) -> None:
    path = _write(tmp_path, "mbpp.jsonl", [EVALPLUS])
    with pytest.raises(ValueError) as err:
        load_humaneval(path)
    assert str(path) in str(err.value) and "record 1" in str(err.value)
    assert "load_mbpp" in str(err.value) and "lacks fields ['test']" in str(err.value)
    (p,) = load_humaneval(_write(tmp_path, "ok.jsonl", [HUMANEVAL_STYLE]))
    assert grade_reply(p, p.reference).status == "passed"


def test_stdio_errors_name_the_file(tmp_path) -> None:
    path = _write(tmp_path, "s.jsonl", [{"task_id": "a", "prompt": "p",
                                         "tests": [{"input": "", "output": ""}]},
                                        {"task_id": "b", "prompt": "p"}])
    with pytest.raises(ValueError) as err:
        load_stdio(path)
    assert str(path) in str(err.value) and "record 2" in str(err.value) and "'b'" in str(err.value)


def test_stdio_problem_data_file_is_in_the_work_dir(tmp_path) -> None:
    rec = {"task_id": "lookup", "prompt": "Print the value of the key read from stdin in table.txt.",
           "files": {"table.txt": "a=1\nb=2\n"},
           "tests": [{"input": "b\n", "output": "2\n"}, {"input": "a\n", "output": "1\n"}]}
    (problem,) = load_stdio(_write(tmp_path, "f.jsonl", [rec]))
    reply = ("```python\nkey = input().strip()\nfor line in open('table.txt'):\n"
             "    k, v = line.strip().split('=')\n    if k == key:\n        print(v)\n```")
    assert grade_reply(problem, reply).status == "passed"
    bad = dict(rec, files={"table.txt": 3})
    with pytest.raises(ValueError, match="'files' must map"):
        load_stdio(_write(tmp_path, "g.jsonl", [bad]))
