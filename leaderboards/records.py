"""The leaderboards' records: marft's own, in ``leaderboards/records/``, read with what reports add.

The record schema and its file format belong to the library (:mod:`marft_agents.evaluation.records`:
:class:`Record`, :func:`write_record`, reading and checking a record); this module re-exports
them with this folder (:data:`RECORDS_DIR`) as the default, and adds what a report must say about
a record made under an older protocol: :func:`load_records` gives each record ``caveats`` (a
wall-clock budget axis, an older task revision of its env), derived from the record, never typed
into it. ``python -m leaderboards.build`` turns the records into ``leaderboards/README.md``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from marft_agents.evaluation import records as _schema
from marft_agents.evaluation.records import (
    CODE_PACKAGES,
    CODE_SUFFIXES,
    DIAGNOSTIC_DIGITS,
    DIAGNOSTIC_PREFIXES,
    GENERATED_PATHS,
    RECORD_MAX_BYTES,
    REQUIRED,
    TRANSCRIPT_CHARS,
    TRANSCRIPT_PROBLEMS,
    Record,
    code_digest,
    dumps,
    env_task_revision,
    eval_outcomes,
    fit_to_budget,
    git_commit,
    read_record,
    training_diagnostics,
    transcript_sample,
)

__all__ = ["CODE_PACKAGES", "CODE_SUFFIXES", "DIAGNOSTIC_DIGITS", "DIAGNOSTIC_PREFIXES", "GENERATED_PATHS",
           "RECORDS_DIR", "RECORD_MAX_BYTES", "REQUIRED", "TRANSCRIPT_CHARS", "TRANSCRIPT_PROBLEMS", "WALL_CLOCK",
           "Record", "code_digest", "dumps", "env_task_revision", "eval_outcomes", "fit_to_budget", "git_commit",
           "grid_budget", "load_records", "read_record", "record_caveats", "training_diagnostics",
           "transcript_sample", "write_record"]

RECORDS_DIR = Path(__file__).resolve().parent / "records"
"""marft's own records (``baselines/run.py`` writes here by default)."""


def write_record(record: Record, records_dir: str | os.PathLike = RECORDS_DIR) -> Path:
    """:func:`marft_agents.evaluation.records.write_record`, into :data:`RECORDS_DIR` by default."""
    return _schema.write_record(record, records_dir)


def load_records(records_dir: str | os.PathLike = RECORDS_DIR) -> list[dict[str, Any]]:
    """All records, checked (:func:`marft_agents.evaluation.records.read_records`: a record missing a required
    field raises naming the file). A grid record gets ``grid["budget"]`` (:func:`grid_budget`) when
    it was made before grids recorded it, and every record ``caveats`` (:func:`record_caveats`)."""
    records = _schema.read_records(records_dir)
    for data in records:
        if data.get("grid") and grid_budget(data) is not None:
            data["grid"].setdefault("budget", grid_budget(data))
        data["caveats"] = record_caveats(data)
    return records


# -- what a report must say about older records --------------------------------------------------
WALL_CLOCK = "wall_clock"
"""``grid.budget.axis`` of grid records made at equal training seconds (``time_budget_s``), the
protocol before equal samples: a cell's samples then depended on its cost per episode."""


def grid_budget(record: dict[str, Any]) -> dict[str, Any] | None:
    """The budget axis a grid record was made under: ``grid["budget"]`` as recorded (``{"axis":
    "episodes" | "sampled_tokens", <axis>: N, "eval_every_episodes": M}``), else, for a record made
    before grids recorded it, ``{"axis": "wall_clock", "time_budget_s": S}`` read from its config;
    None for a run that had no budget (an untrained evaluation)."""
    grid = record.get("grid") or {}
    if "budget" in grid:
        return grid["budget"]
    if grid.get("kind") == "untrained":
        return None
    seconds = ((record.get("config") or {}).get("schedule") or {}).get("time_budget_s")
    return {"axis": WALL_CLOCK, "time_budget_s": seconds} if seconds is not None else None


def record_caveats(record: dict[str, Any]) -> list[str]:
    """One line per way ``record`` was made under an older protocol, for reports to print: a grid
    cell budgeted by wall-clock, or problems drawn with an older task revision of its env (the
    env class's ``task_revisions``; a record without ``task_revision`` predates them: revision 0)."""
    notes = []
    budget = grid_budget(record) if record.get("grid") else None
    if budget and budget.get("axis") == WALL_CLOCK:
        notes.append(f"budget: equal wall-clock ({budget['time_budget_s']} s of training per run), not equal "
                     "samples: a cheaper cell got more episodes")
    revisions = _task_revisions(record.get("env_id", ""))
    if revisions:
        revision = record.get("task_revision") or 0
        if revision < max(revisions):
            notes.append(f"{record['env_id']} task revision {revision} (current {max(revisions)}): "
                         f"{revisions.get(revision, 'unknown revision')}")
    return notes


def _task_revisions(env_id: str) -> dict[int, str]:
    """The env class's ``task_revisions`` (revision -> note), {} when it declares none or is unknown here."""
    try:
        from marft_envs.registry import env_class

        return dict(getattr(env_class(env_id), "task_revisions", None) or {})
    except Exception:  # noqa: BLE001 - an env not installed here (a plugin) has no caveat to add
        return {}
