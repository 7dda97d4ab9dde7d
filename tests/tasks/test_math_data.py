"""MATH / GSM8K loaders: local files (shared data and tiny synthetic files), filters, errors."""

import json
from collections import Counter

import pytest

from marft_envs.core.task import Task, TaskSource
from marft_envs.tasks import paths
from marft_envs.tasks.math_data import (
    GSM8KTasks,
    MathTasks,
    gsm8k_final_answer,
    parse_level,
    read_records,
    subject_key,
)


def write_jsonl(path, records):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


MATH_RECORDS = [
    {"unique_id": "test/algebra/1.json", "problem": "What is $1+1$?", "solution": "It is $\\boxed{2}$.",
     "level": "Level 1", "type": "Algebra"},
    {"unique_id": "test/geometry/2.json", "problem": "Area?", "solution": "So $\\boxed{\\frac{\\pi}{4}}$.",
     "level": "Level 3", "type": "Geometry"},
    {"unique_id": "test/counting_and_probability/3.json", "problem": "Count.", "solution": "No box.",
     "level": "Level 2", "type": "Counting & Probability"},
    {"unique_id": "test/counting_and_probability/4.json", "problem": "Count again.", "solution": "x",
     "answer": "10", "level": 5, "subject": "Counting & Probability"},
]


@pytest.fixture
def tiny_root(tmp_path):
    write_jsonl(tmp_path / "math" / "MATH_test.jsonl", MATH_RECORDS)
    write_jsonl(tmp_path / "gsm8k" / "train.jsonl", [
        {"question": "Q1?", "answer": "1+1=2\n#### 2"},
        {"question": "Q2?", "answer": "#### 1,234"},
        {"question": "Q3?", "answer": "no final answer"},
    ])
    return tmp_path


def test_math_from_a_tiny_file(tiny_root):
    tasks = MathTasks(split="test", data_dir=tiny_root)
    assert isinstance(tasks, TaskSource) and len(tasks) == 3 and tasks.skipped == 1
    assert [t.answer for t in tasks.tasks] == ["2", "\\frac{\\pi}{4}", "10"]  # answer field wins
    first = tasks[0]
    assert isinstance(first, Task) and first.task_id == "MATH/test/algebra/1.json"
    assert first.prompt == "What is $1+1$?"
    assert dict(first.metadata) == {"dataset": "MATH", "split": "test", "level": 1, "subject": "Algebra", "index": 0}
    assert tasks[-1].metadata["level"] == 5 and tasks[np_int(1)].answer == "\\frac{\\pi}{4}"
    with pytest.raises(IndexError):
        tasks[3]
    with pytest.raises(TypeError, match="int"):
        tasks["0"]


def np_int(i):
    import numpy as np

    return np.int64(i)


def test_math_filters(tiny_root):
    assert [t.answer for t in MathTasks(data_dir=tiny_root, levels=[3, 5]).tasks] == ["\\frac{\\pi}{4}", "10"]
    assert len(MathTasks(data_dir=tiny_root, subjects="counting_and_probability")) == 1
    assert len(MathTasks(data_dir=tiny_root, subjects=["GEOMETRY", "algebra"])) == 2
    assert len(MathTasks(data_dir=tiny_root, limit=2)) == 2
    with pytest.raises(ValueError, match="unknown MATH subjects"):
        MathTasks(data_dir=tiny_root, subjects=["Calculus"])
    with pytest.raises(ValueError, match="levels must be ints in 1..5"):
        MathTasks(data_dir=tiny_root, levels=[6])
    with pytest.raises(ValueError, match="limit"):
        MathTasks(data_dir=tiny_root, limit=-1)


def test_bad_arguments(tiny_root):
    with pytest.raises(ValueError, match="split must be"):
        MathTasks(split="validation", data_dir=tiny_root)
    with pytest.raises(ValueError, match="math500"):
        MathTasks(split="train", subset="math500", data_dir=tiny_root)
    with pytest.raises(ValueError, match="subset must be"):
        MathTasks(subset="math5000", data_dir=tiny_root)


def test_json_list_and_directory_tree(tmp_path):
    (tmp_path / "list.json").write_text(json.dumps(MATH_RECORDS[:2]), encoding="utf-8")
    assert len(MathTasks(path=tmp_path / "list.json")) == 2
    tree = tmp_path / "tree" / "test" / "algebra"
    tree.mkdir(parents=True)
    for n, record in enumerate(MATH_RECORDS[:2]):
        body = {k: v for k, v in record.items() if k not in ("unique_id", "type")}
        (tree / f"{n}.json").write_text(json.dumps(body), encoding="utf-8")
    tasks = MathTasks(path=tmp_path / "tree")
    assert [t.task_id for t in tasks.tasks] == ["MATH/test/algebra/0.json", "MATH/test/algebra/1.json"]
    assert tasks[0].metadata["subject"] == "Algebra"  # from the folder name


def test_gsm8k_from_a_tiny_file(tiny_root):
    tasks = GSM8KTasks(data_dir=tiny_root)
    assert [t.answer for t in tasks.tasks] == ["2", "1234"] and tasks.skipped == 1
    assert tasks[1].task_id == "GSM8K/train/1" and tasks[1].prompt == "Q2?"


def test_missing_data_errors_say_what_and_how(tmp_path, monkeypatch):
    with pytest.raises(FileNotFoundError) as err:
        GSM8KTasks(split="test", data_dir=tmp_path)
    message = str(err.value)
    assert str(tmp_path / "gsm8k" / "test.jsonl") in message
    assert "MARFT_DATA" in message and "data_dir=" in message and "'question'" in message
    monkeypatch.delenv("MARFT_DATA", raising=False)
    monkeypatch.setattr(paths, "repo_root", lambda: tmp_path / "nowhere" / "repo")
    with pytest.raises(FileNotFoundError, match="no data folder. Set MARFT_DATA"):
        MathTasks()


def test_bad_files(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"problem": "x"}\nnot json\n', encoding="utf-8")
    with pytest.raises(ValueError, match="bad.jsonl:2"):
        read_records(bad)
    (tmp_path / "scalar.json").write_text("[1, 2]", encoding="utf-8")
    with pytest.raises(ValueError, match="record #0"):
        read_records(tmp_path / "scalar.json")


def test_data_root(monkeypatch, tmp_path):
    monkeypatch.setenv("MARFT_DATA", str(tmp_path))
    assert paths.data_root() == tmp_path
    monkeypatch.delenv("MARFT_DATA")
    monkeypatch.setattr(paths, "repo_root", lambda: tmp_path / "repo")
    assert paths.data_root() is None
    (tmp_path / "shared" / "data").mkdir(parents=True)
    assert paths.data_root() == tmp_path / "shared" / "data"


def test_helpers():
    assert parse_level("Level 4") == 4 and parse_level(2) == 2 and parse_level("Level ?") is None
    assert subject_key("Counting & Probability") == subject_key("counting_and_probability")
    assert gsm8k_final_answer("a\n#### 1,000") == "1000" and gsm8k_final_answer("none") is None


def test_shared_math_and_gsm8k(data_dir):
    math500 = MathTasks(subset="math500", data_dir=data_dir)
    assert len(math500) == 500 and math500[0].answer == "\\left( 3, \\frac{\\pi}{2} \\right)"
    test = MathTasks(split="test", data_dir=data_dir)
    assert len(test) == 5000
    # MATH500's unique ids are MATH test ids: the task ids agree.
    assert {t.task_id for t in math500.tasks} <= {t.task_id for t in test.tasks}
    train = MathTasks(split="train", data_dir=data_dir)
    assert len(train) + train.skipped == 7500 and train.skipped == 2  # two solutions box nothing
    hard_algebra = MathTasks(split="train", levels=5, subjects="Algebra", data_dir=data_dir)
    assert Counter((t.metadata["level"], t.metadata["subject"]) for t in hard_algebra.tasks).keys() == {(5, "Algebra")}
    gsm8k = GSM8KTasks(limit=1000, data_dir=data_dir)
    assert len(gsm8k) == 1000 and gsm8k[0].answer == "72"
    assert all(t.answer.lstrip("-").isdigit() for t in gsm8k.tasks)


def test_hugging_face_dataset_id_goes_through_datasets(monkeypatch):
    datasets = pytest.importorskip("datasets")
    calls = []

    def fake_load_dataset(path, name=None, split=None):
        calls.append((path, name, split))
        if "gsm8k" in path:
            return [{"question": "Q?", "answer": "#### 5"}]
        return [{"problem": "P?", "solution": "\\boxed{3}", "answer": "3", "subject": "Algebra", "level": 2,
                 "unique_id": "test/algebra/9.json"}]

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    math = MathTasks(dataset_id="HuggingFaceH4/MATH-500", split="test", levels=2)
    gsm8k = GSM8KTasks(dataset_id="openai/gsm8k", dataset_config="main", split="test")
    assert calls == [("HuggingFaceH4/MATH-500", None, "test"), ("openai/gsm8k", "main", "test")]
    assert math[0].answer == "3" and math[0].task_id == "MATH/test/algebra/9.json" and gsm8k[0].answer == "5"


def test_importing_the_loaders_does_not_import_datasets_or_math_verify():
    import subprocess
    import sys

    code = ("import sys, marft_envs.tasks.math_data, marft_envs.tasks.math_grading; "
            "print('datasets' in sys.modules, 'math_verify' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]
