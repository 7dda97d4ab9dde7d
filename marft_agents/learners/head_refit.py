"""Refitting the value head by cross-validated ridge regression (``critic.head_refit_window``).

Why. On real rollouts the gradient-trained head can rank the tasks (its values correlate with
the returns) yet spread its values far less than the returns, so its explained variance stays
far below what its own correlation allows (``EV <= corr^2``: a *shrunk* critic, docs/training.md,
"The critic"). The head is one linear map on features that the
critic adapter changes slowly, and AdamW moves each of its weights about one learning rate per
step. A linear map on given features has a closed-form best fit, so after each update's critic
steps the head is also solved for, the way "shallow updates" refit a deep Q-network's last layer
by least squares regularised towards its gradient-trained weights (LS-DQN: Levine et al., 2017).

The algorithm, after each update's critic epochs and feature fold, per critic head and slot:

1. Keep what the update's first critic pass read: each decision's final hidden state ``x [H]``
   (raw), its value-head slot, its regression target ``R`` (``Sample.returns``) and its task;
   for the last ``window`` updates (:class:`RefitBuffer`).
2. Express them in the head's units: ``z = (x - feat_shift) / feat_scale`` (the slot's current
   feature statistics) and ``t = (R - shift) / scale`` (PopArt's; 0 and 1 without), so the head
   computes ``t_hat = w . z + b``.
3. Calibrate the current weights: ``a`` = the least-squares slope of ``t`` on the head's own
   ``u = z . w0`` (at least 0; 1 when ``u`` is constant), the prior ``w1 = a w0``. A head that
   ranks the tasks but spreads its values too little (the failure above) is fixed by ``a`` alone.
4. For each ``lambda`` of a grid (relative to the mean eigenvalue of the centred Gram matrix),
   ridge towards ``w1`` with an unpenalised bias, and ``lambda = inf`` (the calibration alone)::

       w = w1 + Zc^T (Zc Zc^T + lambda I)^-1 (tc - Zc w1),   b = mean(t) - mean(z) . w

   each scored by K-fold cross-validation holding out whole tasks (steps 3-4 on the training
   folds only; the episodes of one task share their first decision's state: holding out single
   episodes would leak the answer). The current head ``(w0, b0)`` is scored on the same folds;
   it has trained on those points, so its error is in-sample and the comparison leans towards
   keeping it (a refit must beat it clearly).
5. Keep whatever has the lowest cross-validated error: that fit on every kept point, or the
   current head when nothing beats it. The refit changes values only from the next rollout on:
   the advantages of the rollout just trained on were formed at collection.

Only state values (one value per decision: MARFT-A, single-agent PPO) are refit; a token-level
critic's values are not (``TrainConfig.validate`` says so).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

RELATIVE_LAMBDAS: tuple[float, ...] = (1e-3, 1e-2, 1e-1, 1.0, 1e1, 1e2, 1e3, math.inf)
"""The ridge strengths tried, as multiples of the centred Gram matrix's mean eigenvalue
(``inf``: the calibrated current weights alone, step 3)."""
MAX_FOLDS = 5
"""Cross-validation folds (fewer when fewer tasks were kept)."""
MIN_TASKS = 3
"""Fewest distinct tasks a slot needs before it is refit (two folds of one task each say little)."""


@dataclass
class Batch:
    """One update's points of one critic head: ``features [n, H]`` (raw hidden states, float32),
    ``slots [n]`` (long), ``targets [n]`` (float32, raw returns) and each point's task key."""

    features: torch.Tensor
    slots: torch.Tensor
    targets: torch.Tensor
    tasks: list[Hashable]

    @staticmethod
    def concat(batches: Sequence[Batch]) -> Batch:
        """The points of ``batches``, in order, as one batch."""
        return Batch(torch.cat([b.features for b in batches]), torch.cat([b.slots for b in batches]),
                     torch.cat([b.targets for b in batches]), [t for b in batches for t in b.tasks])


@dataclass(frozen=True)
class RefitResult:
    """What :func:`ridge_refit` chose: ``weight [H]`` and ``bias`` (the current ones when kept),
    the cross-validated mean squared errors of the current head and of the choice, and the
    relative ``lambda`` chosen (None: the current head was kept; ``inf``: calibrated only)."""

    weight: torch.Tensor
    bias: float
    cv_current: float
    cv_chosen: float
    relative_lambda: float | None
    points: int


def _folds(tasks: Sequence[Hashable]) -> list[torch.Tensor]:
    """Boolean held-out masks ``[n]``: whole tasks per fold, tasks dealt round-robin in order of
    first appearance (deterministic, no RNG drawn)."""
    order: dict[Hashable, int] = {}
    for task in tasks:
        order.setdefault(task, len(order))
    k = min(MAX_FOLDS, len(order))
    fold_of = torch.tensor([order[t] % k for t in tasks])  # [n]
    return [fold_of == f for f in range(k)]


def _ridge(z: torch.Tensor, t: torch.Tensor, w0: torch.Tensor, lambdas: Sequence[float]
           ) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Steps 3-4 on ``z [n, H]``, ``t [n]`` (float64): ``(w [H], b [])`` for each absolute ``lambda``
    (``math.inf``: the calibrated ``w1`` itself). Kernel form: one eigendecomposition of the
    ``[n, n]`` Gram matrix serves every ``lambda`` (``n`` is a few hundred points, ``H`` up to
    thousands)."""
    z_mean, t_mean = z.mean(0), t.mean()  # [H], []
    zc, tc = z - z_mean, t - t_mean  # [n, H], [n]
    u = zc @ w0  # [n] the current head's centred outputs
    spread = float(u @ u)
    w1 = w0 * max(float(u @ tc) / spread, 0.0) if spread > 0 else w0  # [H] calibrated prior
    residual = tc - zc @ w1  # [n] what w1 leaves unexplained
    evals, evecs = torch.linalg.eigh(zc @ zc.T)  # [n], [n, n]
    projected = evecs.T @ residual  # [n]
    out = []
    for lam in lambdas:
        w = w1 if math.isinf(lam) else w1 + zc.T @ (evecs @ (projected / (evals.clamp(min=0.0) + lam)))  # [H]
        out.append((w, t_mean - z_mean @ w))
    return out


def ridge_refit(z: torch.Tensor, t: torch.Tensor, tasks: Sequence[Hashable], w0: torch.Tensor,
                b0: float) -> RefitResult | None:
    """Steps 3-5 of the module docstring for one slot: ``z [n, H]`` standardised features, ``t [n]``
    targets in the head's units, ``tasks`` each point's task, ``(w0 [H], b0)`` the current head.
    None when fewer than :data:`MIN_TASKS` tasks were kept."""
    z, t, w0 = z.double(), t.double(), w0.detach().double()
    folds = _folds(tasks)
    if len(folds) < MIN_TASKS:
        return None
    zc = z - z.mean(0)
    scale = float((zc * zc).sum()) / max(z.shape[0], 1)  # trace(Zc Zc^T) / n: the mean eigenvalue
    if not scale > 0:
        return None  # every point has the same features: nothing a weight could tell apart
    lambdas = [r * scale for r in RELATIVE_LAMBDAS]  # inf stays inf: the calibration alone
    current = float(((z @ w0 + b0 - t) ** 2).mean())
    errors = [0.0] * len(lambdas)
    for held in folds:
        train = ~held
        for i, (w, b) in enumerate(_ridge(z[train], t[train], w0, lambdas)):
            errors[i] += float(((z[held] @ w + b - t[held]) ** 2).sum())
    errors = [e / z.shape[0] for e in errors]
    best = min(range(len(lambdas)), key=lambda i: errors[i])
    if not errors[best] < current:
        return RefitResult(w0.float(), float(b0), current, current, None, z.shape[0])
    w, b = _ridge(z, t, w0, [lambdas[best]])[0]
    return RefitResult(w.float(), float(b), current, errors[best], RELATIVE_LAMBDAS[best], z.shape[0])


class RefitBuffer:
    """The last ``window`` updates' :class:`Batch` of each critic head (step 1); travels with the
    learner's state so that a resumed run refits from the same points."""

    def __init__(self, window: int):
        if window < 1:
            raise ValueError(f"a refit window must be >= 1 update, got {window}")
        self.window = window
        self.batches: dict[str, deque[Batch]] = {}

    def add(self, critic: str, batch: Batch) -> None:
        self.batches.setdefault(critic, deque(maxlen=self.window)).append(batch)

    def points(self, critic: str) -> Batch | None:
        """Every kept point of ``critic``'s head, concatenated (None: none kept)."""
        kept = list(self.batches.get(critic, ()))
        return Batch.concat(kept) if kept else None

    def state_dict(self) -> dict[str, Any]:
        return {critic: [{"features": b.features, "slots": b.slots, "targets": b.targets, "tasks": list(b.tasks)}
                         for b in batches] for critic, batches in self.batches.items()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.batches = {}
        for critic, batches in state.items():
            for b in batches:
                self.add(critic, Batch(b["features"], b["slots"], b["targets"],
                                       [tuple(t) if isinstance(t, list) else t for t in b["tasks"]]))


@torch.no_grad()
def refit_head(head: Any, points: Batch) -> dict[str, float]:
    """Refit every slot of ``head`` (a :class:`marft_agents.model.critic.ValueHead`) on ``points``
    (steps 2-5); returns ``critic/refit_*`` figures: the points used, the slots refit, and the
    cross-validated gain ``1 - cv_chosen / cv_current`` averaged over the slots that had enough
    tasks (0 where the current head was kept)."""
    refit, gains, used = 0, [], 0
    for k in range(head.slots):
        rows = points.slots == k  # [n]
        if not bool(rows.any()):
            continue
        x = points.features[rows].to(head.feat_shift)  # [n_k, H]
        z = (x - head.feat_shift[k]) / head.feat_scale[k]  # [n_k, H]
        t = (points.targets[rows].to(head.shift) - head.shift) / head.scale  # [n_k]
        tasks = [task for task, keep in zip(points.tasks, rows.tolist()) if keep]
        result = ridge_refit(z, t, tasks, head.linear.weight[k], float(head.linear.bias[k]))
        if result is None:
            continue
        used += result.points
        gains.append(1.0 - result.cv_chosen / result.cv_current if result.cv_current > 0 else 0.0)
        if result.relative_lambda is not None:
            head.linear.weight[k] = result.weight.to(head.linear.weight)
            head.linear.bias[k] = result.bias
            refit += 1
    return {"critic/refit_points": float(used), "critic/refit_slots": float(refit),
            "critic/refit_cv_gain": sum(gains) / len(gains) if gains else math.nan}
