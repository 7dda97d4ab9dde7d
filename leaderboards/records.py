"""Leaderboard records: one JSON file per finished run, written by tools, never edited by hand.

A record says what was run (env id and kwargs, profile, algorithm, model, budget), on what
(machine, commit), and what it scored (greedy eval accuracy with its standard error, before and
after training). ``python -m leaderboards.build`` turns the records into ``leaderboards/README.md``.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import tempfile
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

RECORDS_DIR = Path(__file__).resolve().parent / "records"
REQUIRED = ("name", "env_id", "algorithm", "model", "eval_after")


@dataclass
class Record:
    """One leaderboard row."""

    name: str
    """Baseline or run name (e.g. ``marft_a_arithmetic_l1``)."""
    env_id: str
    """Registered env id."""
    env_kwargs: dict[str, Any]
    """Keyword arguments the env was made with (profile, level, split, ...)."""
    algorithm: str
    """``marft_a``, ``marft_t``, ``ppo`` or ``none`` (evaluation only)."""
    model: str
    """Model name or path."""
    eval_after: dict[str, Any]
    """``{"accuracy", "stderr", "n", "greedy"}`` after training."""
    eval_before: dict[str, Any] | None = None
    """The same evaluation of the untrained model, when measured."""
    eval_best: dict[str, Any] | None = None
    """``{"update", "accuracy", "stderr"}``: the best evaluation during training (its adapters are
    the run's ``best/``). Chosen on the evaluation problems, so it is optimistic when those are
    the test split; ``eval_after`` is the result."""
    eval_curve: list[dict[str, Any]] = field(default_factory=list)
    """Every evaluation of the run, ``{"update", "accuracy", "stderr", "train_seconds"}``, update 0 =
    untrained; ``train_seconds`` is the rollout + update time spent before it (the budget's clock)."""
    budget: dict[str, Any] = field(default_factory=dict)
    """Updates, episodes, wall-clock seconds, tokens."""
    config: dict[str, Any] = field(default_factory=dict)
    """The full training config as run."""
    machine: dict[str, Any] = field(default_factory=dict)
    """Filled in automatically: platform, CPU count, torch device."""
    commit: str = ""
    """Git commit of the code that trained it (``baselines/run.py`` takes it when training starts;
    ``-dirty``: with uncommitted changes)."""
    marft_version: str = ""
    """The installed marft version (``marft bench`` fills it: outside a git checkout ``commit`` is empty)."""
    env_package: dict[str, Any] = field(default_factory=dict)
    """Who provides the env: ``{"distribution", "version", "entry_point", "origin"}`` (``marft bench``
    fills it; for a plugin env this is the plugin's distribution, not marft)."""
    date: str = ""
    """UTC timestamp (filled in automatically)."""
    grid: dict[str, Any] | None = None
    """For a run of a declared grid (``baselines/grid.py``): ``{"grid", "cell", "seed", "kind"}``
    (kind ``train``, ``untrained`` or ``swapped``; a swapped run adds ``source``, the cell whose
    trained adapters it evaluated, and ``assignment``, agent -> the agent whose adapter it got)
    and ``wall_s``, the run's whole machine time (training, evaluations, loading)."""


GENERATED_PATHS = tuple(f":(exclude,top,glob){pattern}" for pattern in (
    "leaderboards/records/**", "leaderboards/grids/**", "leaderboards/README.md", "leaderboards/*.png"))
"""Git pathspecs of what the leaderboards write (records, tables, plots): not code, so not "dirty"."""


def git_commit(root: Path | None = None) -> str:
    """Short HEAD commit of the checkout holding ``root`` (default: this package), with ``-dirty``
    when tracked code has uncommitted changes ("" outside git)."""

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], capture_output=True, text=True, cwd=root or Path(__file__).parent,
                              timeout=10).stdout.strip()

    try:
        commit = git("rev-parse", "--short", "HEAD")
        # Generated outputs (records, tables, plots under leaderboards/) do not make the code
        # dirty: a grid rewrites its report after every run, and the next run's code is unchanged.
        changed = git("status", "--porcelain", "--untracked-files=no", "--", ":/", *GENERATED_PATHS)
        return commit + ("-dirty" if commit and changed else "")
    except (OSError, subprocess.SubprocessError):
        return ""


def write_record(record: Record, records_dir: Path = RECORDS_DIR) -> Path:
    """Write ``<name>.json`` atomically (temp file + rename), filling machine/commit/date."""
    record.machine = record.machine or {"platform": platform.platform(), "cpus": os.cpu_count(),
                                        "python": platform.python_version()}
    record.commit = record.commit or git_commit()
    record.date = record.date or datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    records_dir.mkdir(parents=True, exist_ok=True)
    path = records_dir / f"{record.name}.json"
    fd, tmp = tempfile.mkstemp(dir=records_dir, suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump(asdict(record), handle, indent=2, sort_keys=True)
        handle.write("\n")
    os.replace(tmp, path)
    return path


def load_records(records_dir: Path = RECORDS_DIR) -> list[dict[str, Any]]:
    """All records, validated: a record missing a required field raises naming the file."""
    records = []
    for path in sorted(records_dir.glob("*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        missing = [k for k in REQUIRED if k not in data]
        if missing:
            raise ValueError(f"leaderboard record {path} lacks {missing}; regenerate it with baselines/run.py")
        records.append(data)
    return records
