r"""MATH and GSM8K task sources, from local JSON/JSONL files or a Hugging Face dataset id.

Local files (default; see :func:`marft_envs.tasks.paths.data_root` for where they are looked for)::

    MathTasks(split="test")                      # <root>/math/MATH_test.jsonl (5,000 problems)
    MathTasks(split="test", subset="math500")    # <root>/math/math500_test.jsonl (500)
    MathTasks(split="train", levels=[1, 2], subjects=["Algebra"], limit=100)
    GSM8KTasks(split="train")                    # <root>/gsm8k/train.jsonl (7,473)
    MathTasks(path="my_math.jsonl")              # any file in the same format

A path may be a ``.jsonl`` file (one record per line), a ``.json`` file (a list of records, or a
mapping whose values are records) or, for MATH, a directory tree of one-record ``.json`` files
(the original Hendrycks layout ``<split>/<subject>/<n>.json``), read in sorted path order.

Hugging Face (only when asked, never at import; needs network or a local ``datasets`` cache)::

    MathTasks(dataset_id="HuggingFaceH4/MATH-500", split="test")
    GSM8KTasks(dataset_id="openai/gsm8k", dataset_config="main", split="test")

Records: MATH needs ``problem`` and ``solution`` (final answer in ``\boxed{}``; an ``answer``
field, as in MATH500, takes precedence), optional ``level`` (``3`` or ``"Level 3"``),
``type``/``subject`` and ``unique_id``. GSM8K needs ``question`` and ``answer`` (final answer after
``####``). Records without a final answer are skipped (``skipped`` counts them).

Tasks keep file order (filters and ``limit`` apply in that order); the env shuffles with its own
seed. ``Task.metadata`` holds dataset, split, level, subject and the source index; the reference
solution is not included (metadata travels in ``infos``).
"""

from __future__ import annotations

import json
import operator
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from marft_envs.core.task import Task
from marft_envs.tasks.math_grading import extract_boxed
from marft_envs.tasks.paths import DATA_ENV_VAR, data_root

MATH_SUBJECTS = (
    "Algebra", "Counting & Probability", "Geometry", "Intermediate Algebra",
    "Number Theory", "Prealgebra", "Precalculus",
)
"""Subject names of MATH (``subjects=`` also accepts ``counting_and_probability`` etc.)."""
MATH_FORMAT = (
    "MATH records with 'problem' and 'solution' (final answer in \\boxed{}), optional 'answer', "
    "'level', 'type'/'subject', 'unique_id'"
)
GSM8K_FORMAT = "GSM8K records with 'question' and 'answer' (final answer after '####')"

_cache: dict[tuple[str, int, int], list[dict[str, Any]]] = {}


def subject_key(name: str) -> str:
    """``"Counting & Probability"`` and ``"counting_and_probability"`` -> ``"counting_and_probability"``."""
    return re.sub(r"[^a-z0-9]+", "_", name.lower().replace("&", " and ")).strip("_")


_SUBJECT_BY_KEY = {subject_key(s): s for s in MATH_SUBJECTS}


def parse_level(value: Any) -> int | None:
    """``3`` / ``"3"`` / ``"Level 3"`` -> 3; anything else (``"Level ?"``) -> None."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    m = re.fullmatch(r"\s*(?:level\s*)?(\d+)\s*", str(value), re.I) if value is not None else None
    return int(m.group(1)) if m else None


def gsm8k_final_answer(solution: str) -> str | None:
    """The text after the last ``####`` of a GSM8K solution, commas stripped (``"1,000"`` -> ``"1000"``)."""
    if "####" not in solution:
        return None
    answer = solution.rsplit("####", 1)[1].strip().replace(",", "")
    return answer or None


def _missing(path: Path, what: str, fmt: str) -> FileNotFoundError:
    return FileNotFoundError(
        f"{what} not found at {path}. Expected {fmt}. Point {DATA_ENV_VAR}=<data dir> or data_dir= "
        "at a folder with the standard layout (math/MATH_test.jsonl, gsm8k/train.jsonl, ...), pass "
        "path= to a file, or dataset_id= to load from Hugging Face."
    )


def resolve_path(path: str | Path | None, data_dir: str | Path | None, relative: str, what: str, fmt: str) -> Path:
    """An explicit ``path``, else ``data_dir/relative``, else ``data_root()/relative``; must exist."""
    if path is not None:
        resolved = Path(path).expanduser()
    else:
        root = Path(data_dir).expanduser() if data_dir is not None else data_root()
        if root is None:
            raise FileNotFoundError(
                f"{what}: no data folder. Set {DATA_ENV_VAR}=<data dir> (containing {relative}), pass "
                f"data_dir=, path= to a file ({fmt}), or dataset_id= to load from Hugging Face."
            )
        resolved = root / relative
    if not resolved.exists():
        raise _missing(resolved, what, fmt)
    return resolved


def read_records(path: str | Path) -> list[dict[str, Any]]:
    """Records from a ``.jsonl``/``.json`` file or a directory of ``.json`` files (cached by mtime)."""
    path = Path(path)
    stat = path.stat()
    key = (str(path.resolve()), stat.st_mtime_ns, stat.st_size)
    if key in _cache:
        return _cache[key]
    if path.is_dir():
        records = []
        for file in sorted(path.rglob("*.json")):
            record = _load_json(file)
            if not isinstance(record, Mapping):
                raise ValueError(f"{file}: expected one JSON object per file, got {type(record).__name__}")
            records.append({"unique_id": file.relative_to(path).as_posix(), **record})
    elif path.suffix == ".jsonl":
        records = []
        with path.open(encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    records.append(json.loads(line))
                except json.JSONDecodeError as err:
                    raise ValueError(f"{path}:{number}: not valid JSON ({err.msg}); expected one JSON object per line") from err
    else:
        data = _load_json(path)
        records = list(data.values()) if isinstance(data, Mapping) else data
        if not isinstance(records, list):
            raise ValueError(f"{path}: expected a JSON list of records (or a mapping of records)")
    bad = next((i for i, r in enumerate(records) if not isinstance(r, Mapping)), None)
    if bad is not None:
        raise ValueError(f"{path}: record #{bad} is a {type(records[bad]).__name__}, expected a JSON object")
    _cache[key] = records
    return records


def _load_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}: not valid JSON ({err.msg} at line {err.lineno})") from err


def load_hf_records(dataset_id: str, config: str | None, split: str) -> list[dict[str, Any]]:
    """Records of a Hugging Face dataset split through ``datasets`` (imported only here)."""
    try:
        import datasets
    except ImportError as err:  # pragma: no cover - datasets is a declared dependency
        raise ImportError("dataset_id= needs the 'datasets' package: pip install datasets") from err
    dataset = datasets.load_dataset(dataset_id, config, split=split)
    return [dict(r) for r in dataset]


def _as_list(value: Any, name: str) -> list[Any] | None:
    if value is None:
        return None
    if isinstance(value, (str, int)):
        return [value]
    if isinstance(value, Iterable):
        return list(value)
    raise TypeError(f"{name} must be a value or a list of values, got {type(value).__name__}")


class _ListSource:
    """A TaskSource over a materialised list of tasks."""

    tasks: list[Task]
    skipped: int

    def __len__(self) -> int:
        return len(self.tasks)

    def __getitem__(self, index: int) -> Task:
        try:
            index = operator.index(index)
        except TypeError:
            raise TypeError(f"task index must be an int, got {type(index).__name__}") from None
        return self.tasks[index]  # IndexError past the end, like any sequence

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.description}, {len(self)} tasks)"

    description = ""


def _check_limit(limit: int | None) -> None:
    if limit is not None and (not isinstance(limit, int) or limit < 0):
        raise ValueError(f"limit must be a non-negative int or None, got {limit!r}")


class MathTasks(_ListSource):
    """MATH problems (Hendrycks et al. 2021) as tasks; the answer is the reference final answer.

    Args:
        split: ``"train"`` or ``"test"`` (the Hugging Face split name when ``dataset_id`` is given).
        subset: ``None`` (the full split) or ``"math500"`` (the 500-problem test subset of
            Lightman et al. 2023; test split only).
        levels: keep only these difficulty levels (1-5).
        subjects: keep only these subjects (see :data:`MATH_SUBJECTS`; case and ``&``/``and``
            spelling are ignored).
        limit: keep the first ``limit`` problems after filtering.
        data_dir: data folder (default :func:`~marft_envs.tasks.paths.data_root`).
        path: a file or directory to read instead of the standard layout.
        dataset_id / dataset_config: load from Hugging Face instead of local files.
    """

    def __init__(
        self,
        split: str = "test",
        subset: str | None = None,
        levels: int | Sequence[int] | None = None,
        subjects: str | Sequence[str] | None = None,
        limit: int | None = None,
        data_dir: str | Path | None = None,
        path: str | Path | None = None,
        dataset_id: str | None = None,
        dataset_config: str | None = None,
    ):
        if subset not in (None, "math500"):
            raise ValueError(f"subset must be None or 'math500', got {subset!r}")
        if dataset_id is None and split not in ("train", "test"):
            raise ValueError(f"split must be 'train' or 'test', got {split!r}")
        if subset == "math500" and split != "test" and dataset_id is None:
            raise ValueError("subset='math500' exists only for split='test'")
        _check_limit(limit)
        level_list = _as_list(levels, "levels")
        if level_list is not None and any(not isinstance(v, int) or not 1 <= v <= 5 for v in level_list):
            raise ValueError(f"levels must be ints in 1..5, got {levels!r}")
        subject_list = _as_list(subjects, "subjects")
        wanted_subjects = None
        if subject_list is not None:
            wanted_subjects = {subject_key(str(s)) for s in subject_list}
            unknown = wanted_subjects - set(_SUBJECT_BY_KEY)
            if unknown:
                raise ValueError(f"unknown MATH subjects {sorted(unknown)}; known: {', '.join(MATH_SUBJECTS)}")
        if dataset_id is not None:
            records = load_hf_records(dataset_id, dataset_config, split)
            source = dataset_id
        else:
            relative = "math/math500_test.jsonl" if subset == "math500" else f"math/MATH_{split}.jsonl"
            resolved = resolve_path(path, data_dir, relative, f"MATH {subset or split} data", MATH_FORMAT)
            records = read_records(resolved)
            source = str(resolved)
        self.split, self.subset, self.source = split, subset, source
        self.description = f"split={split!r}, subset={subset!r}, source={source!r}"
        self.tasks, self.skipped = [], 0
        for index, record in enumerate(records):
            task = self._task(index, record)
            if task is None:
                self.skipped += 1
                continue
            meta = task.metadata
            if level_list is not None and meta["level"] not in level_list:
                continue
            if wanted_subjects is not None and subject_key(meta["subject"] or "") not in wanted_subjects:
                continue
            self.tasks.append(task)
            if limit is not None and len(self.tasks) >= limit:
                break

    def _task(self, index: int, record: Mapping[str, Any]) -> Task | None:
        problem = record.get("problem")
        if not isinstance(problem, str) or not problem.strip():
            return None
        answer = record.get("answer")
        if not isinstance(answer, str) or not answer.strip():
            answer = extract_boxed(str(record.get("solution") or ""))
        if not answer:
            return None
        subject = record.get("subject") or record.get("type")
        if subject is None and isinstance(record.get("unique_id"), str):
            # ".../<subject>/<n>.json" in the original tree layout
            parts = record["unique_id"].split("/")
            subject = _SUBJECT_BY_KEY.get(parts[-2]) if len(parts) >= 2 else None
        subject = _SUBJECT_BY_KEY.get(subject_key(subject), subject) if isinstance(subject, str) else None
        unique_id = record.get("unique_id")
        task_id = f"MATH/{unique_id}" if unique_id else f"MATH/{self.subset or self.split}/{index}"
        metadata = {
            "dataset": "MATH500" if self.subset == "math500" else "MATH",
            "split": self.split,
            "level": parse_level(record.get("level")),
            "subject": subject,
            "index": index,
        }
        return Task(task_id=task_id, prompt=problem.strip(), answer=answer.strip(), metadata=metadata)


class GSM8KTasks(_ListSource):
    """GSM8K grade-school word problems (Cobbe et al. 2021); the answer is the integer after ``####``.

    Args:
        split: ``"train"`` or ``"test"`` (the shared data ships ``train`` only; any Hugging Face
            split name when ``dataset_id`` is given).
        limit: keep the first ``limit`` problems.
        data_dir / path / dataset_id / dataset_config: as for :class:`MathTasks`.
    """

    def __init__(
        self,
        split: str = "train",
        limit: int | None = None,
        data_dir: str | Path | None = None,
        path: str | Path | None = None,
        dataset_id: str | None = None,
        dataset_config: str | None = None,
    ):
        if dataset_id is None and split not in ("train", "test"):
            raise ValueError(f"split must be 'train' or 'test', got {split!r}")
        _check_limit(limit)
        if dataset_id is not None:
            records = load_hf_records(dataset_id, dataset_config, split)
            source = dataset_id
        else:
            resolved = resolve_path(path, data_dir, f"gsm8k/{split}.jsonl", f"GSM8K {split} data", GSM8K_FORMAT)
            records = read_records(resolved)
            source = str(resolved)
        self.split, self.source = split, source
        self.description = f"split={split!r}, source={source!r}"
        self.tasks, self.skipped = [], 0
        for index, record in enumerate(records):
            question, solution = record.get("question"), record.get("answer")
            answer = gsm8k_final_answer(solution) if isinstance(solution, str) else None
            if not isinstance(question, str) or not question.strip() or answer is None:
                self.skipped += 1
                continue
            self.tasks.append(Task(
                task_id=f"GSM8K/{split}/{index}",
                prompt=question.strip(),
                answer=answer,
                metadata={"dataset": "GSM8K", "split": split, "index": index},
            ))
            if limit is not None and len(self.tasks) >= limit:
                break
