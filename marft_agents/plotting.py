"""Learning-curve plot (PNG) written at the end of a run from ``metrics.jsonl``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from marft_agents.metrics import read_metrics

PANELS = (
    ("rollout/reward_mean", "team reward (train rollouts)"),
    ("eval/accuracy", "greedy eval accuracy"),
    ("losses/policy_loss", "policy loss"),
    ("losses/value_loss", "value loss"),
    ("losses/approx_kl", "approx KL"),
    ("losses/entropy", "entropy"),
)


def plot_learning_curve(metrics_path: str | Path, out_path: str | Path, title: str = "") -> Path | None:
    """Plot the standard panels that have data; returns the PNG path (None if nothing to plot)."""
    import matplotlib

    matplotlib.use("Agg")  # headless: no display on training machines
    import matplotlib.pyplot as plt

    rows = read_metrics(metrics_path)
    panels = [(key, label) for key, label in PANELS if any(key in r for r in rows)]
    if not panels:
        return None
    fig, axes = plt.subplots(1, len(panels), figsize=(3.6 * len(panels), 3.2), squeeze=False)
    for ax, (key, label) in zip(axes[0], panels):
        points = [(r["step"], r[key]) for r in rows if isinstance(r.get(key), (int, float))]
        xs, ys = zip(*points)
        ax.plot(xs, ys, marker="o" if len(xs) < 30 else None, markersize=3)
        if key == "eval/accuracy":
            errs = [r.get("eval/stderr", 0.0) for r in rows if isinstance(r.get(key), (int, float))]
            ax.fill_between(xs, [y - e for y, e in zip(ys, errs)], [y + e for y, e in zip(ys, errs)], alpha=0.2)
        ax.set_title(label, fontsize=9)
        ax.set_xlabel("update")
        ax.grid(alpha=0.3)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    out_path = Path(out_path)
    fig.savefig(out_path, dpi=110)
    plt.close(fig)
    return out_path


def summarize(rows: list[dict[str, Any]], key: str) -> tuple[float, float] | None:
    """(first, last) value of a metric, for console summaries."""
    values = [r[key] for r in rows if isinstance(r.get(key), (int, float))]
    return (values[0], values[-1]) if values else None
