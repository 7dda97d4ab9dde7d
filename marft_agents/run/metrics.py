"""Metric sinks for training runs: JSONL + CSV files and TensorBoard, behind one ``log`` call.

Every update's metrics (a flat ``{name: number}`` dict with names such as ``losses/policy_loss``
or ``agent/actor_0/reward``) go to ``metrics.jsonl`` (one JSON object per line, the source of
truth for plots and leaderboards), ``metrics.csv`` (one column per key ever logged: when a row brings a
new key, e.g. the first training update after a step-0 evaluation row, the CSV is rebuilt from the
JSONL with the wider header, atomically) and, when TensorBoard is installed, ``tb/`` event files.
The TensorBoard writer is opened by the first ``log`` call, not before: a run interrupted before it
logged anything (during the evaluation before training, say) leaves no empty event file behind.

The JSONL is strict JSON: a value that is not a finite number (NaN, e.g. the mean length of an
agent that did not act this update) is written as ``null``, which :func:`read_metrics` returns as
None; the CSV leaves such a cell empty and TensorBoard skips it.

Resuming: ``MetricsLogger(out, keep_until=k)`` first drops every logged row with a step after
``k`` (the resumed checkpoint's update) from the JSONL and CSV, and makes TensorBoard purge its
events from step ``k + 1`` on, so the updates that are re-run after a crash appear once.
"""

from __future__ import annotations

import csv
import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any

from marft_agents.files import make_ordinary


class MetricsLogger:
    """Metric writer that appends to the files of ``out_dir``.

    Args:
        out_dir: the run folder.
        tensorboard: also write TensorBoard events to ``out_dir/tb`` (when installed).
        keep_until: None appends to whatever is logged; a step ``k`` first removes the rows
            logged after step ``k`` (-1 removes all: a fresh run in a used folder).
    """

    def __init__(self, out_dir: str | Path, tensorboard: bool = True, keep_until: int | None = None):
        self.out_dir = Path(out_dir)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.jsonl_path = self.out_dir / "metrics.jsonl"
        self.csv_path = self.out_dir / "metrics.csv"
        self._csv_fields: list[str] | None = None
        if keep_until is not None:
            self._truncate(keep_until)
        if self.csv_path.exists() and self.csv_path.stat().st_size > 0:
            with self.csv_path.open(newline="") as handle:
                self._csv_fields = next(csv.reader(handle), None)
        self._tb: Any = None
        self._tensorboard = tensorboard
        # purge_step: TensorBoard hides the events of earlier sessions at or after it.
        self._purge_step = None if keep_until is None else max(keep_until + 1, 0)

    def _tensorboard_writer(self) -> Any:
        """The TensorBoard writer, opened on first use (None: off, or tensorboard not installed)."""
        if self._tb is None and self._tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:  # tensorboard is optional: files still get written
                self._tensorboard = False
                return None
            self._tb = SummaryWriter(log_dir=str(self.out_dir / "tb"), purge_step=self._purge_step)
        return self._tb

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        row = {"step": step, **{k: _plain(v) for k, v in metrics.items()}}
        with self.jsonl_path.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(row, allow_nan=False) + "\n")
        if self._csv_fields is None or any(k not in self._csv_fields for k in row):
            self._rebuild_csv()
        else:
            with self.csv_path.open("a", newline="") as handle:
                csv.writer(handle).writerow([_cell(row.get(k)) for k in self._csv_fields])
        tb = self._tensorboard_writer()
        if tb is not None:
            for key, value in row.items():
                if key != "step" and isinstance(value, (int, float)) and math.isfinite(value):
                    tb.add_scalar(key, value, step)
            tb.flush()

    def _truncate(self, keep_until: int) -> None:
        """Drop the rows logged after step ``keep_until`` from the JSONL and the CSV."""
        if not self.jsonl_path.exists():
            if self.csv_path.exists():
                self.csv_path.unlink()  # a CSV without its JSONL source cannot be trusted
            return
        rows = read_metrics(self.jsonl_path)
        kept = [row for row in rows if row.get("step", 0) <= keep_until]
        _write_atomically(self.jsonl_path, "".join(json.dumps(row, allow_nan=False) + "\n" for row in kept))
        if kept:
            self._rebuild_csv()
        elif self.csv_path.exists():
            self.csv_path.unlink()

    def _rebuild_csv(self) -> None:
        """Rewrite the CSV from the JSONL with every key seen so far, in first-seen order."""
        rows = read_metrics(self.jsonl_path)
        fields = list(dict.fromkeys(key for row in rows for key in row))
        fd, tmp = tempfile.mkstemp(dir=self.out_dir, suffix=".csv.tmp")
        with os.fdopen(fd, "w", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(fields)
            writer.writerows([_cell(row.get(k)) for k in fields] for row in rows)
        make_ordinary(tmp)  # mkstemp's file is private (0600)
        os.replace(tmp, self.csv_path)
        self._csv_fields = fields

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()
        self._tensorboard = False  # a log after close writes the files only


def _write_atomically(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=f"{path.suffix}.tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
    make_ordinary(tmp)
    os.replace(tmp, path)


def _plain(value: Any) -> Any:
    """Tensors / numpy scalars -> Python numbers; NaN and infinities -> None (JSON null)."""
    if hasattr(value, "item") and callable(value.item):
        try:
            value = value.item()
        except (ValueError, RuntimeError):
            return str(value)
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _cell(value: Any) -> Any:
    return "" if value is None else value


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """Rows of a ``metrics.jsonl`` file (skips a torn last line left by a crash).

    Missing values are None (``null``; files written before that change may hold a bare
    ``NaN``, which Python's parser also reads: it comes back as None too).
    """
    rows = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        rows.append({k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in row.items()})
    return rows
