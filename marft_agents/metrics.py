"""Metric sinks for training runs: JSONL + CSV files and TensorBoard, behind one ``log`` call.

Every update's metrics (a flat ``{name: number}`` dict with names such as ``losses/policy_loss``
or ``agent/actor_0/reward``) go to ``metrics.jsonl`` (one JSON object per line, the source of
truth for plots and leaderboards), ``metrics.csv`` (one column per key ever logged: when a row brings a
new key, e.g. the first training update after a step-0 evaluation row, the CSV is rebuilt from the
JSONL with the wider header, atomically) and, when TensorBoard is installed, ``tb/`` event files.
"""

from __future__ import annotations

import csv
import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any


class MetricsLogger:
    """Append-only metric writer; safe to re-open on resume (it appends)."""

    def __init__(self, out_dir: str | Path, tensorboard: bool = True):
        self.out_dir = Path(out_dir)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.jsonl_path = self.out_dir / "metrics.jsonl"
        self.csv_path = self.out_dir / "metrics.csv"
        self._csv_fields: list[str] | None = None
        if self.csv_path.exists() and self.csv_path.stat().st_size > 0:
            with self.csv_path.open(newline="") as handle:
                self._csv_fields = next(csv.reader(handle), None)
        self._tb = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:  # tensorboard is optional: files still get written
                SummaryWriter = None
            if SummaryWriter is not None:
                self._tb = SummaryWriter(log_dir=str(self.out_dir / "tb"))

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        row = {"step": step, **{k: _plain(v) for k, v in metrics.items()}}
        with self.jsonl_path.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(row) + "\n")
        if self._csv_fields is None or any(k not in self._csv_fields for k in row):
            self._rebuild_csv()
        else:
            with self.csv_path.open("a", newline="") as handle:
                csv.writer(handle).writerow([row.get(k, "") for k in self._csv_fields])
        if self._tb is not None:
            for key, value in row.items():
                if key != "step" and isinstance(value, (int, float)) and math.isfinite(value):
                    self._tb.add_scalar(key, value, step)
            self._tb.flush()

    def _rebuild_csv(self) -> None:
        """Rewrite the CSV from the JSONL with every key seen so far, in first-seen order."""
        rows = read_metrics(self.jsonl_path)
        fields = list(dict.fromkeys(key for row in rows for key in row))
        fd, tmp = tempfile.mkstemp(dir=self.out_dir, suffix=".csv.tmp")
        with os.fdopen(fd, "w", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(fields)
            writer.writerows([row.get(k, "") for k in fields] for row in rows)
        os.replace(tmp, self.csv_path)
        self._csv_fields = fields

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()


def _plain(value: Any) -> Any:
    """Tensors / numpy scalars -> Python numbers so that JSON and CSV accept them."""
    if hasattr(value, "item") and callable(value.item):
        try:
            return value.item()
        except (ValueError, RuntimeError):
            return str(value)
    return value


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """Rows of a ``metrics.jsonl`` file (skips a torn last line left by a crash)."""
    rows = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows
