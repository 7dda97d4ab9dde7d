"""Learning-curve plot (PNG) written at the end of a run from ``metrics.jsonl``."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from marft_agents.run.metrics import read_metrics

PANELS = (
    ("rollout/reward_mean", "team reward (train rollouts)", "mean team return per episode"),
    ("eval/accuracy", "greedy eval accuracy", "share of problems solved"),
    ("critic/baseline_gain", "critic's baseline gain over the group mean\n(> 0: the critic is the better baseline)",
     "gain"),
    ("losses/policy_loss", "policy loss", "loss"),
    ("losses/value_loss", "value loss (normalised units)", "loss (normalised)"),
    ("losses/approx_kl", "approx KL", "KL (nats)"),
    ("losses/entropy", "entropy", "nats"),
)
"""The panels, in order: (metric, title, y-axis label); a panel without data is left out. The baseline gain
(``learners/critic_health.py``, step 4) sits beside the accuracy: what the critic buys. The value
loss is taken in the value head's normalised units (PopArt, ``critic.value_norm``), so its scale
is not the returns'."""
BAND_LABEL = "+- 1 standard error (clustered by problem)"
"""The legend entry of the shaded band around the accuracy curve (``eval/stderr``)."""
MAX_COLUMNS = 3
"""Panels per row: a grid stays readable when the PNG is shown scaled down (one long strip of
six panels does not)."""


def run_title(algorithm: str, env_id: str, env_kwargs: dict[str, Any]) -> str:
    """``"mappo_action on marft/Arithmetic-v0 (profile dual, level 1)"``: what a curve shows."""
    shown = ", ".join(f"{key} {value}" for key, value in env_kwargs.items() if not isinstance(value, (dict, list)))
    return f"{algorithm} on {env_id}" + (f" ({shown})" if shown else "")


def plot_learning_curve(metrics_path: str | Path, out_path: str | Path, title: str = "") -> Path | None:
    """Plot the standard panels that have data, as a grid; returns the PNG path (None if nothing to plot)."""
    import matplotlib

    matplotlib.use("Agg")  # headless: no display on training machines
    import matplotlib.pyplot as plt

    fig = learning_curve_figure(read_metrics(metrics_path), title)
    if fig is None:
        return None
    out_path = Path(out_path)
    fig.savefig(out_path, dpi=100)
    plt.close(fig)
    return out_path


def learning_curve_figure(rows: list[dict[str, Any]], title: str = "") -> Any:
    """The figure of :func:`plot_learning_curve` for metric ``rows`` (None if nothing to plot):
    one panel per metric with data, each with its y-axis label; the accuracy's band is labelled."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    panels = [panel for panel in PANELS if any(_number(r.get(panel[0])) for r in rows)]
    if not panels:
        return None
    ncols = min(MAX_COLUMNS, len(panels))
    nrows = math.ceil(len(panels) / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.4 * ncols, 3.3 * nrows + 0.5), squeeze=False)
    for ax, (key, label, ylabel) in zip(axes.flat, panels):
        points = [(r["step"], r[key], r.get("eval/stderr")) for r in rows if _number(r.get(key))]
        xs, ys, errs = zip(*points)
        errs = [e if _number(e) else 0.0 for e in errs]
        if len(xs) == 1:  # one point (e.g. one evaluation at the end): the value, not a line on a made-up axis
            accuracy = key == "eval/accuracy"
            ax.errorbar(xs, ys, yerr=errs if accuracy else None, marker="o", markersize=6, capsize=4,
                        label=f"accuracy, bar: {BAND_LABEL}" if accuracy else None)
            ax.annotate(f"{ys[0]:.3g}" + (f" +- {errs[0]:.2g}" if errs[0] else "") + f" at update {xs[0]}",
                        (xs[0], ys[0]), textcoords="offset points", xytext=(8, 6), fontsize=9)
            ax.set_xticks([xs[0]])
            ax.set_xlim(xs[0] - 1, xs[0] + 1)
        else:
            ax.plot(xs, ys, marker="o" if len(xs) < 30 else None, markersize=4,
                    label="accuracy" if key == "eval/accuracy" else None)
            if key == "eval/accuracy":
                ax.fill_between(xs, [y - e for y, e in zip(ys, errs)], [y + e for y, e in zip(ys, errs)], alpha=0.2,
                                label=BAND_LABEL)
        if key == "critic/baseline_gain":
            ax.axhline(0.0, color="grey", linewidth=1)  # the group mean's level
        ax.set_title(label, fontsize=11)
        ax.set_xlabel("update", fontsize=10)
        ax.set_ylabel(ylabel, fontsize=10)
        if key == "eval/accuracy":
            ax.legend(fontsize=8, loc="best")
        if len(xs) > 1:
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # updates are whole numbers
        ax.tick_params(labelsize=9)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    if title:
        fig.suptitle(title, fontsize=12)
    fig.tight_layout()
    return fig


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
