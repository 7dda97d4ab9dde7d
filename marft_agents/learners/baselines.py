"""The MAPPO learners' baselines (``advantage.baseline``) and how much variance each removes.

Pure functions on per-episode lists, so every number can be checked by hand
(``tests/agents/test_baselines.py``). Vocabulary: the collector plays each task k times
(``schedule.group_size``; a *group*). Episode e's decisions are numbered by their *position*
p = 0, 1, ... in the episode (all agents interleaved in the order D_t scheduled them);
``G[e][p]`` is the Monte Carlo return from decision p under the learner's credit assignment
(``learners/credit.py``) and ``V[e][p]`` the critic's value of the state decision p was taken
in, recorded at collection.

1. ``critic``: GAE with the critic's values (MAPPO). Decision p's baseline is ``V[e][p]``,
   whatever the other episodes did.
2. ``group``: the leave-one-out (LOO) mean at the same position,
   ``b[e][p] = mean_{e' in group, e' != e, e' reached p} G[e'][p]``, and ``A = G - b``. It uses
   only the other episodes, so it does not depend on this episode's actions and the gradient
   stays unbiased; ``E[(G - b)^2] = k/(k-1) sigma_w^2`` at position 0 (sigma_w^2: the
   within-task variance), as RLOO. At position 0 every episode of the group is in the same state
   (the task), so this is the exact state value up to its k - 1 samples: what a critic can
   only approach. At later positions the states differ (a teammate's message, a feedback round)
   and the LOO mean is a task-level baseline that cannot see them. A decision whose position no
   other episode of its group reached gets advantage 0 (nothing to compare with, as in
   ``group_math``). No critic runs: no values at collection, no value loss.
3. ``group_critic``: the LOO anchor plus the critic as a *control variate* of what the anchor
   cannot see::

       b[e][0] = LOO_e(G[., 0])                                  (the anchor)
       b[e][p] = LOO_e(G[., p]) + V[e][p] - LOO_e(V[., p])       (p >= 1; the same other episodes)
       critic target: y[e][p] = G[e][p] - LOO_e(G[., p])         (the return's residual over the anchor)

   Both LOO terms use other episodes only and ``V[e][p]`` only the state before the decision,
   so the baseline is valid. At position 0 the group shares its state, so the critic's term
   would be 0 up to float rounding (the same input, padded differently); it is left out: the
   first decision is the LOO anchor exactly, whatever the critic outputs. A constant critic
   gives ``group`` exactly. The
   critic's target is centred on its task by the anchor, so it has to learn only how a state
   moves the return away from its task's mean (did the teammate's message carry the right
   number), not each task's difficulty, which a critic meeting every task about once learns
   slowly and the group mean gives for free. The returns are Monte Carlo (``ppo.lam`` unused).
4. How this relates to step-level group methods. GiGPO (Feng et al., 2025; verl-agent's
   ``build_step_group``) adds to the episode-level group advantage a step-level one over
   *anchor states*: steps of the same task group whose observations are identical form a group
   and are compared by their discounted returns (GRPO's ``learner.grouping: step``,
   :mod:`marft_agents.group_math`). It needs states that repeat exactly; a
   teammate's free-text message almost never does, so its step groups here would be the first
   position's only. AT-GRPO (agent- and turn-wise GRPO) makes same-state groups by sampling K
   candidates of one agent at one turn from one shared state (tree sampling) and continues the
   episode from one of them; that needs an env that can branch and K times the generations per
   turn. ``group_critic`` keeps the flat k-episode sampling: the exact same-state group where
   it exists (position 0, GiGPO's episode-level anchor) and, where states diverge, the critic
   standing in for the missing same-state group, fitted on the residual only. ``group`` is
   GRPO's ``agent_turn`` grouping with positions as turns, under MAPPO's clipped per-agent
   update, not normalised by the group's spread.
5. Variance each choice leaves (:func:`residual_variances`), per position, on the decisions
   that have a LOO mean (the same decisions for every column): the returns' variance (no
   baseline but the batch mean, which whitening removes), ``mean (G - LOO)^2`` (LOO residuals
   of a group sum to 0), the critic's ``Var(G - V)`` and the anchored baseline's
   ``mean (G - b)^2`` (also 0 per group). The returns' and the critic's variances are
   centred (whitening removes a constant offset) and estimated as the population variance of
   a random task's random episode: the one-way random-effects total ``sigma_b^2 + sigma_w^2``
   (:func:`random_effects_total`), since the k episodes of a task are correlated and the plain
   sample variance undercounts their shared part by ``(N - k) / (N - 1)``; so a constant critic
   leaves exactly the returns' variance and one with ``V = p_task`` leaves ``sigma_w^2`` in
   expectation (the unbiased ``n - 1`` sample variance where the groups are uneven).
   ``baseline gain = 1 - critic residual / LOO residual``: > 0 when the critic as used is the
   better baseline (at most ``1/k`` at position 0, where the LOO mean is already the task's
   value up to its k - 1 samples).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

Table = Sequence[Sequence[float]]
"""Per episode, per position: a value (episodes may have different lengths)."""


def loo_baseline(returns: Table, groups: Sequence[Sequence[int]], values: Table | None = None
                 ) -> list[list[float | None]]:
    """Step 2 (``values`` None) or step 3's baseline of every decision; None where no other
    episode of its group reached its position."""
    out: list[list[float | None]] = [[None] * len(r) for r in returns]
    for members in groups:
        for e in members:
            for p in range(len(returns[e])):
                others = [o for o in members if o != e and len(returns[o]) > p]
                if not others:
                    continue
                anchor = sum(returns[o][p] for o in others) / len(others)
                if values is not None and p > 0:  # position 0: the anchor alone (step 3)
                    anchor += values[e][p] - sum(values[o][p] for o in others) / len(others)
                out[e][p] = anchor
    return out


def group_advantages(returns: Table, groups: Sequence[Sequence[int]], values: Table | None = None
                     ) -> list[list[float]]:
    """``G - b`` with the baseline of :func:`loo_baseline` (0 where it is None): ``group``'s
    advantages, or ``group_critic``'s with ``values``. Also ``group_critic``'s critic targets
    (``values`` None: the residual over the anchor)."""
    base = loo_baseline(returns, groups, values)
    return [[0.0 if b is None else g - b for g, b in zip(row, brow)] for row, brow in zip(returns, base)]


@dataclass(frozen=True)
class PositionResiduals:
    """What each baseline leaves of the returns at one decision position (module docstring, step 5)."""

    position: int
    n: int
    """Decisions counted (those with a LOO mean)."""
    return_var: float
    """Variance of the returns (no baseline), on the population footing."""
    loo: float
    """``mean (G - LOO)^2``."""
    critic: float
    """``Var(G - V)`` on the population footing; NaN without values."""
    anchored: float
    """``mean (G - (LOO(G) + V - LOO(V)))^2``; NaN without values."""

    def gain(self, residual: float) -> float:
        """``1 - residual / loo`` (NaN when the LOO residual is 0 or undefined)."""
        return 1.0 - residual / self.loo if self.loo > 0 and math.isfinite(residual) else float("nan")


def random_effects_total(groups: Sequence[Sequence[float]]) -> float | None:
    """``sigma_b^2 + sigma_w^2`` of ``groups`` (>= 2 groups of one size k >= 2, else None) from
    the one-way ANOVA mean squares: ``MSW + (MSB - MSW) / k``, unbiased for the variance of one
    draw of a random group's random member."""
    sizes = {len(g) for g in groups}
    if len(groups) < 2 or len(sizes) != 1 or min(sizes) < 2:
        return None
    k, n_groups = len(groups[0]), len(groups)
    means = [sum(g) / k for g in groups]
    grand = sum(means) / n_groups
    msb = k * sum((m - grand) ** 2 for m in means) / (n_groups - 1)
    msw = sum((x - m) ** 2 for g, m in zip(groups, means) for x in g) / (n_groups * (k - 1))
    return msw + (msb - msw) / k


def _unbiased_var(xs: Sequence[float]) -> float:
    if len(xs) < 2:
        return float("nan")
    mean = sum(xs) / len(xs)
    return sum((x - mean) ** 2 for x in xs) / (len(xs) - 1)


def residual_variances(returns: Table, groups: Sequence[Sequence[int]], values: Table | None = None
                       ) -> list[PositionResiduals]:
    """Step 5 per position (positions with fewer than two counted decisions are left out)."""
    loo = loo_baseline(returns, groups)
    anchored = loo_baseline(returns, groups, values) if values is not None else None
    out = []
    for p in range(max((len(r) for r in returns), default=0)):
        rows = [e for e in range(len(returns)) if len(returns[e]) > p and loo[e][p] is not None]
        if len(rows) < 2:
            continue
        members = [[e for e in group if e in rows] for group in groups]
        members = [m for m in members if m]

        def variance(x: dict[int, float]) -> float:  # the population footing (step 5)
            total = random_effects_total([[x[e] for e in m] for m in members])
            return _unbiased_var(list(x.values())) if total is None else total

        critic = anchor = float("nan")
        if values is not None:
            critic = variance({e: returns[e][p] - values[e][p] for e in rows})
            anchor = sum((returns[e][p] - anchored[e][p]) ** 2 for e in rows) / len(rows)
        out.append(PositionResiduals(p, len(rows), variance({e: returns[e][p] for e in rows}),
                                     sum((returns[e][p] - loo[e][p]) ** 2 for e in rows) / len(rows), critic, anchor))
    return out


def pooled_gain(positions: Sequence[PositionResiduals], anchored: bool) -> float:
    """``1 - sum n_p critic_p / sum n_p loo_p`` over the positions (``anchored``: the
    ``group_critic`` baseline's residual instead of the critic's own)."""
    pairs = [(r.n * (r.anchored if anchored else r.critic), r.n * r.loo) for r in positions]
    pairs = [(c, loo) for c, loo in pairs if math.isfinite(c) and math.isfinite(loo)]
    total = sum(loo for _, loo in pairs)
    return 1.0 - sum(c for c, _ in pairs) / total if total > 0 else float("nan")
