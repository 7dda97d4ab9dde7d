"""Does a better fit of the value head predict the next rollout better? Forward validation offline.

``critic.head_refit_window`` refits the value head on the last updates' points by ridge regression
chosen by cross-validation over tasks (``marft_agents/learners/head_refit.py``). Whether another
rule (another ridge strength, no refit, a de-shrunk ridge) would value the *next* rollout better
can be read from the windows that a refit run saves in its checkpoints (``state.pt``: each kept
update's raw hidden states, slots, returns and tasks), without running a model:

1. For a checkpoint whose window holds updates ``u-m+1 .. u``, take an *earlier* checkpoint's value
   head (the prior, which has not seen updates after its own) and express the window in that
   head's units (its feature and target statistics), as the learner does.
2. Fit every rule on updates ``u-m+1 .. u-1`` and predict the first decisions (slot 0) of update
   ``u``, whose hidden states the critic adapter of update ``u`` computed: what the refit would have
   been asked to value next.
3. Print each rule's explained variance on update ``u`` (``1 - MSE / Var(R)``), the update's
   explained-variance ceiling (between-task share of its returns, finite-group corrected,
   ``learners/critic_health.py``) and the mean over the pairs given.

Rules: the prior head unchanged; the window's mean return; the shipped rule (``ridge_refit``);
each ridge strength of ``RELATIVE_LAMBDAS`` fixed; and a "relaxed" ridge at each strength (the
ridge direction, then its scale refit by least squares: ridge shrinks the spread of the values,
the failure the refit was made for).

Usage (pairs ``CHECKPOINT:PRIOR_CHECKPOINT`` of one run whose config set ``head_refit_window``)::

    python benchmarks/refit_forward.py RUN/checkpoints/update_000016:RUN/checkpoints/update_000012 ...
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import defaultdict
from pathlib import Path

import torch

from marft_agents.run.checkpoint import load_checkpoint
from marft_agents.model.critic import ValueHead
from marft_agents.learners.critic_health import split_by_task
from marft_agents.learners.head_refit import RELATIVE_LAMBDAS, Batch, RefitBuffer, _ridge, ridge_refit

HEAD_PREFIX = "value_head/critic/"
SLOT = 0
"""The first decision's slot (the first agent to act)."""


def load_head(adapters: dict) -> ValueHead:
    """The checkpoint's critic value head (``adapters.pt`` entries under :data:`HEAD_PREFIX`)."""
    state = {k[len(HEAD_PREFIX):]: v for k, v in adapters.items() if k.startswith(HEAD_PREFIX)}
    weight = state["linear.weight"]
    slots, hidden = (1, weight.shape[-1]) if weight.dim() == 1 else (weight.shape[0], weight.shape[1])
    head = ValueHead(hidden, slots=slots)
    head.load_state_dict(head.upgrade_state(state), strict=False)
    return head


def window(state: dict) -> list[Batch]:
    """The refit window a checkpoint's learner state kept, oldest update first."""
    learner = state.get("learner", state)
    if "head_refit" not in learner:
        raise SystemExit("this checkpoint kept no refit window: expected a run with critic.head_refit_window > 0")
    buffer = RefitBuffer(10_000)
    buffer.load_state_dict(learner["head_refit"])
    return list(buffer.batches["critic"])


def first_decisions(batch: Batch) -> tuple[torch.Tensor, torch.Tensor, list]:
    """Slot :data:`SLOT`'s ``features [n, H]``, ``returns [n]`` (float64) and tasks."""
    rows = batch.slots == SLOT
    return (batch.features[rows].double(), batch.targets[rows].double(),
            [t for t, keep in zip(batch.tasks, rows.tolist()) if keep])


def ceiling(returns: torch.Tensor, tasks: list) -> float:
    """Between-task share of ``returns`` (``critic_health.split_by_task``); NaN when unmeasurable."""
    split = split_by_task(returns.tolist(), tasks)
    return split.share if split is not None else math.nan


def relaxed(z: torch.Tensor, t: torch.Tensor, w0: torch.Tensor, lambdas: list[float]) -> list[tuple]:
    """Each ridge fit of :func:`_ridge`, its centred values rescaled by least squares (>= 0)."""
    z_mean, t_mean = z.mean(0), t.mean()  # [H], []
    out = []
    for w, _ in _ridge(z, t, w0, lambdas):
        u = (z - z_mean) @ w  # [n]
        spread = float(u @ u)
        a = max(float(u @ (t - t_mean)) / spread, 0.0) if spread > 0 else 1.0
        out.append((w * a, t_mean - z_mean @ (w * a)))
    return out


def forward_ev(checkpoint: str, prior: str) -> tuple[dict[str, float], float, int]:
    """Step 1-3 for one pair: ``{rule: EV on the window's last update}``, its ceiling, points."""
    batches = window(load_checkpoint(checkpoint)["state"])
    if len(batches) < 2:
        raise SystemExit(f"{checkpoint}: its window holds {len(batches)} update(s); need >= 2")
    head = load_head(load_checkpoint(prior)["adapters"])
    shift, scale = float(head.shift), float(head.scale)
    train = [first_decisions(b) for b in batches[:-1]]
    x_test, r_test, tasks_test = first_decisions(batches[-1])
    z = torch.cat([x for x, _, _ in train])  # [n, H]
    z = (z - head.feat_shift[SLOT].double()) / head.feat_scale[SLOT].double()
    t = (torch.cat([r for _, r, _ in train]) - shift) / scale  # [n]
    tasks = [task for _, _, ts in train for task in ts]
    z_test = (x_test - head.feat_shift[SLOT].double()) / head.feat_scale[SLOT].double()  # [m, H]
    w0, b0 = head.linear.weight[SLOT].detach().double(), float(head.linear.bias[SLOT].detach())
    var = float(r_test.var(unbiased=False))

    def ev(w: torch.Tensor, b) -> float:
        values = (z_test @ w + float(b)) * scale + shift  # [m] raw units
        return 1.0 - float(((values - r_test) ** 2).mean()) / var

    out = {"prior head, unchanged": ev(w0, b0), "window mean": ev(torch.zeros_like(w0), t.mean())}
    chosen = ridge_refit(z, t, tasks, w0, b0)
    out["shipped rule (ridge_refit)"] = ev(chosen.weight.double(), chosen.bias) if chosen else out["prior head, unchanged"]
    gram = float(((z - z.mean(0)) ** 2).sum()) / len(t)  # the mean eigenvalue, as ridge_refit scales
    lambdas = [r * gram for r in RELATIVE_LAMBDAS]
    for r, (w, b) in zip(RELATIVE_LAMBDAS, _ridge(z, t, w0, lambdas)):
        out[f"ridge lambda {r:g}"] = ev(w, b)
    for r, (w, b) in zip(RELATIVE_LAMBDAS[:-1], relaxed(z, t, w0, lambdas[:-1])):
        out[f"relaxed ridge lambda {r:g}"] = ev(w, b)
    return out, ceiling(r_test, tasks_test), len(t)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("pairs", nargs="+", help="CHECKPOINT:PRIOR_CHECKPOINT (the prior saved earlier in the run)")
    args = parser.parse_args(argv)
    table: dict[str, list[float]] = defaultdict(list)
    ceilings = []
    for pair in args.pairs:
        checkpoint, sep, prior = pair.partition(":")
        if not sep or not Path(checkpoint).is_dir() or not Path(prior).is_dir():
            raise SystemExit(f"expected CHECKPOINT:PRIOR_CHECKPOINT, two checkpoint folders; got {pair!r}")
        evs, ceil, n = forward_ev(checkpoint, prior)
        ceilings.append(ceil)
        print(f"{checkpoint}: fit on {n} first decisions, ceiling of the next update {ceil:.2f}")
        for rule, value in evs.items():
            table[rule].append(value)
    mean_ceiling = sum(ceilings) / len(ceilings)
    print(f"\nforward explained variance over {len(args.pairs)} windows (mean ceiling {mean_ceiling:.2f}):")
    ranked = sorted(table.items(), key=lambda kv: -sum(kv[1]) / len(kv[1]))
    for rule, values in ranked:
        print(f"  {rule:30s} mean {sum(values) / len(values):+.3f}   " + " ".join(f"{v:+.2f}" for v in values))
    result = {"pairs": args.pairs, "ceilings": ceilings, "forward_ev": dict(table)}
    print(json.dumps({"mean_ceiling": round(mean_ceiling, 3),
                      "mean_forward_ev": {k: round(sum(v) / len(v), 3) for k, v in ranked[:6]}}))
    return result


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
