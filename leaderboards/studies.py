"""Sections of ``docs/results.md`` rendered from study records (``leaderboards/studies/*.json``).

A study is a measurement that is not a training run: its script writes one JSON record with its
figures and the command that made it, and ``python -m leaderboards.build`` renders the record
here, every figure linked to it. A study whose record is absent adds nothing to the page.

Studies (record file, renderer):

* ``task_predictability.json`` (``benchmarks/task_predictability.py``): how reliable the problems'
  success rates are and how much of them the size class, the critic's features, its value and
  the policy's log-probability of the gold answer predict out of fold (:func:`predictability_section`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

STUDIES_DIR = Path(__file__).resolve().parent / "studies"
"""Where study scripts write their records (the default ``--out`` of each)."""
TRAINING_DOC = Path(__file__).resolve().parents[1] / "docs" / "training.md"
"""The page that explains how to read the critic's studies."""
PREDICTABILITY = "task_predictability.json"
PREDICTABILITY_TITLE = "Why the critic lags: task predictability"


def _number(value: Any, digits: int = 2) -> str:
    """``value`` with ``digits`` decimals; "-" for a missing figure (None: nan in the study)."""
    return "-" if value is None else f"{value:.{digits}f}"


def predictability_table(record: dict[str, Any], link: str | None = None) -> list[str]:
    """The study's table and its summary line (markdown); with ``link`` every figure links to it."""

    def cell(value: float | None, digits: int = 2) -> str:
        """A figure, linked when ``link`` is given (a missing one, "-", is no link)."""
        text = _number(value, digits)
        return f"[{text}]({link})" if link and text != "-" else text

    labels = dict(record.get("predictor_labels") or {})
    lines = ["| predictor | out-of-fold R^2 | share of the reliability (R^2 / rho) |", "|---|---|---|"]
    for key, row in record["predictors"].items():
        lines.append(f"| {labels.get(key, key.replace('_', ' '))} | {cell(row['r2_oof'])} "
                     f"| {cell(row['share_of_rho'])} |")
    classes = ", ".join(f"{name} {cell(c['mean_success'])} (n = {c['n']})"
                        for name, c in record["classes"].items())
    lines += ["", f"{record['n_problems']} problems x {record['samples']} samples; mean success "
                  f"{cell(record['mean_success'])} ({classes}); between-problem variance of the success "
                  f"rate {cell(record['between_var'], 4)}; split-half reliability rho "
                  f"{cell(record['rho'])} +- {cell(record['rho_se'])} (halves correlate "
                  f"{cell(record['split_half_r'])}; binomial estimate {cell(record['rho_binomial'])})."]
    return lines


def _relative(path: Path, target: Path) -> str:
    """``path`` relative to the folder of the page ``target``."""
    return Path(os.path.relpath(path.resolve(), target.resolve().parent)).as_posix()


def predictability_section(studies_dir: Path, target: Path) -> list[str]:
    """The task-predictability section of the page ``target`` (links relative to it); nothing
    when ``studies_dir`` holds no record of the study."""
    path = studies_dir / PREDICTABILITY
    if not path.is_file():
        return []
    lines = [f"## {PREDICTABILITY_TITLE}", ""]
    link = _relative(path, target)
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
        table = predictability_table(record, link)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return lines + [f"Its record [{path.name}]({link}) is unreadable ({exc.__class__.__name__}): make it again "
                        "with `python benchmarks/task_predictability.py`.", ""]
    seconds = sum((record.get("seconds") or {}).values())
    adapters = f"the adapters of `{record['adapters']}`" if record.get("adapters") else "no adapters loaded"
    lines += ["How much of the between-problem spread of success rates is real (the reliability rho, the ceiling of "
              "any predictor's R^2) and how much of it each predictor recovers out of fold, with "
              f"`{record.get('model', '?')}` ({adapters}). How to read it: "
              f"[training.md]({_relative(TRAINING_DOC, target)}#what-the-critics-figures-mean).", "",
              *table, "",
              f"Made by `{record['command']}` at commit `{record.get('commit', '')}` on "
              f"`{(record.get('machine') or {}).get('cpu', '?')}` in {_linked_minutes(seconds, link)}.", ""]
    return lines


def _linked_minutes(seconds: float, link: str) -> str:
    return f"[{seconds / 60:.1f}]({link}) minutes"


def study_sections(studies_dir: Path, target: Path) -> list[str]:
    """Every study's section for the page ``target`` (only those whose record exists)."""
    return predictability_section(studies_dir, target)
