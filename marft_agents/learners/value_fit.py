"""The critic's side of a PPO update: its diagnostics, its regression and what follows it.

The shared PPO update loop (``learners/base.py``) holds one :class:`ValueFit` when its learner values states
(``value_mode`` not None) and calls it at four points of an update, in this order:

1. ``prepare(rollout, samples, update)`` before any step: the critic's health on the update's
   rollout against its ceiling and the group baseline (``learners/critic_health.py``; the two
   warnings), then PopArt's fold of the update's regression targets
   (:meth:`marft_agents.model.critic.ValueHead.update_normaliser`), so the value loss is taken in the
   statistics that include them.
2. ``minibatches(samples)`` at the start of each critic epoch: whole episodes in a random order
   (``samples.episode_minibatches``: an episode's critic inputs share one forward row), drawn
   from the update loop's generator so a seeded run draws the same order as before the split.
3. ``micro_loss(micro, norm, first_pass)`` for every micro-batch of those minibatches (the update loop
   accumulates, clips and steps): the clipped Huber value error in the head's normalised units.
   In the first epoch's passes (``first_pass``) it also keeps what the heads read, returned by
   the scoring pass itself (``scoring.HeadReads``): the hidden states for the feature statistics
   (``critic.feature_norm``) and, with ``critic.head_refit_window``, each decision's state,
   slot, target and task for the refit.
4. ``finish(data_parallel)`` after the last epoch: fold the kept feature sums into each head
   (summed over ranks), then refit the heads on the kept window (``learners/head_refit.py``),
   in the statistics the heads will value the next rollout with.

Its state (the refit window) travels with the learner's (``state_dict``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from marft_agents import ppo_math as pm
from marft_agents.episodes import Rollout
from marft_agents.learners.critic_health import GAIN_KEY, CriticWatch, GainWatch, critic_health
from marft_agents.learners.head_refit import Batch, RefitBuffer, refit_head
from marft_agents.learners.samples import Sample, episode_minibatches, pad_stack, response_mask
from marft_agents.run_plan import RunConfig


class ValueFit:
    """Fits and diagnoses the critic of one learner (see the module docstring)."""

    def __init__(self, policy: Any, cfg: RunConfig, value_mode: str, rng: np.random.Generator, baseline: str = "critic"):
        """``cfg``: the run's ``TrainConfig`` (``critic``, ``ppo``, ``schedule``); ``rng``: the
        update loop's generator (shared: one stream of draws per update); ``baseline``: the run's
        ``advantage.baseline``, for the gain's residual."""
        self.policy, self.value_mode, self.rng, self.baseline = policy, value_mode, rng, baseline
        self.ppo, self.schedule = cfg.ppo, cfg.schedule
        self.critic_cfg = getattr(cfg, "critic", None)
        self.watch: CriticWatch | None = None
        self.gain_watch: GainWatch | None = None
        self.refit: RefitBuffer | None = None
        self._captured: list[tuple[str, Batch]] = []  # this update's first-pass points (head refit)
        self._task_keys: dict[int, Any] = {}  # episode -> task key of the update being trained
        if self.critic_cfg is not None:
            self.watch = CriticWatch(self.critic_cfg.health_window, self.critic_cfg.health_min_ev)
            self.gain_watch = GainWatch(self.critic_cfg.health_window)
            if self.critic_cfg.head_refit_window > 0 and value_mode == "state":
                self.refit = RefitBuffer(self.critic_cfg.head_refit_window)

    @property
    def gathers_features(self) -> bool:
        return self.critic_cfg is not None and self.critic_cfg.feature_norm

    # -- 1. before the steps ---------------------------------------------------------------------
    def prepare(self, rollout: Rollout, samples: list[Sample], update: int, explained_variance: float
                ) -> dict[str, float]:
        """Step 1: the health figures (and warnings), then the PopArt fold."""
        if self.critic_cfg is None:
            return {}
        out = self.diagnose(rollout, samples, update, explained_variance)
        if self.critic_cfg.value_norm:
            out.update(self._fold_targets(samples))
        if self.refit is not None:  # a task seen in several updates is one task; an unnamed one is its episode
            self._task_keys = {d.episode: d.task_id or (update, d.episode) for d in rollout.decisions}
        return out

    def diagnose(self, rollout: Rollout, samples: list[Sample], update: int, explained_variance: float
                 ) -> dict[str, float]:
        """``critic/*`` health figures of this update (``critic_health``) and the two warnings."""
        advantages = torch.cat([s.advantages.reshape(-1) for s in samples]) if samples else None  # [N units]
        out = critic_health(rollout, first_values(rollout), self.ppo.credit, self.ppo.gamma, advantages, self.baseline)
        if self.watch is not None:
            self.watch.observe(update, explained_variance, out.get("critic/ev_ceiling", float("nan")))
        if self.gain_watch is not None:
            self.gain_watch.observe(update, out.get(GAIN_KEY, float("nan")), self.baseline)
        return out

    def _fold_targets(self, samples: list[Sample]) -> dict[str, float]:
        """Fold this update's targets into each critic's PopArt statistics (every rank holds the
        global rollout, so every rank folds the same numbers)."""
        beta = self.critic_cfg.value_norm_beta
        out = {}
        for name in sorted({s.critic for s in samples}):
            head = self.policy.value_heads[name]
            head.update_normaliser(torch.cat([s.returns.reshape(-1) for s in samples if s.critic == name]), beta)
            out.setdefault("critic/norm_mean", float(head.shift))
            out.setdefault("critic/norm_std", float(head.scale))
        return out

    # -- 2. and 3. the regression ----------------------------------------------------------------
    def minibatches(self, samples: list[Sample]) -> list[list[Sample]]:
        """Step 2: the value loss's minibatches (whole episodes, ``schedule.minibatch_size``)."""
        return episode_minibatches(samples, self.rng, self.schedule.minibatch_size)

    def micro_loss(self, micro: list[Sample], norm: dict[str, float], first_pass: bool
                   ) -> tuple[torch.Tensor, dict[str, float]]:
        """Step 3: this micro-batch's share of the minibatch's value loss and its stat sums."""
        ids = [s.critic_input[0] for s in micro]
        prefix_lens = [s.critic_input[1] for s in micro]
        agent = micro[0].agent_id  # all samples of a micro-batch share one critic adapter
        slots = self.policy.value_slots([s.agent_id for s in micro], agent, len(micro))  # each decision's head slot
        head = self.policy.value_heads[micro[0].critic]
        if self.value_mode == "token":
            values, reads = self.policy.scoring.token_values_with_reads(
                ids, [s.response_ids for s in micro], agent, prefix_lens=prefix_lens, slots=slots)
            values = values.float()  # [B, T]
            length = values.shape[1]
            mask = response_mask(micro, length).to(values.device)  # [B, T]
            old = pad_stack([s.old_values for s in micro], length).to(values.device)  # [B, T]
            returns = pad_stack([s.returns for s in micro], length).to(values.device)  # [B, T]
        else:
            values, reads = self.policy.scoring.state_values_with_reads(ids, agent, prefix_lens=prefix_lens, slots=slots)
            values = values.float()  # [B]
            mask = torch.ones_like(values)  # [B]
            old = torch.stack([s.old_values for s in micro]).to(values.device)  # [B]
            returns = torch.stack([s.returns for s in micro]).to(values.device)  # [B]
            if first_pass and self.refit is not None:
                self._captured.append((micro[0].critic, Batch(
                    reads.rows.cpu(),  # [B, H]
                    torch.tensor(slots, dtype=torch.long),  # [B]
                    returns.detach().float().cpu(),  # [B]
                    [self._task_keys.get(s.episode, ("episode", id(s))) for s in micro])))
        if first_pass and self.gathers_features:  # the first pass's states, once each
            for hidden, slot in reads.inputs:
                head.gather(hidden, slot)
        scale = head.scale.detach()  # [] PopArt's sigma (1 without)
        per_unit, clipped = pm.value_loss_elements(values / scale, old / scale, returns / scale,
                                                   self.ppo.value_clip, self.ppo.huber_delta)
        loss = pm.masked_sum(per_unit, mask) / norm["units"]
        return loss, {"losses/value_clipfrac": float(pm.masked_sum(clipped.to(mask.dtype), mask)) / norm["units"]}

    # -- 4. after the epochs ---------------------------------------------------------------------
    def finish(self, data_parallel: Any) -> dict[str, float]:
        """Step 4: the feature fold, then the head refit."""
        if self.gathers_features:
            self._fold_features(data_parallel)
        return self._refit_heads(data_parallel) if self.refit is not None else {}

    def _fold_features(self, data_parallel: Any) -> None:
        """Fold the hidden states each value head read in this update's first critic pass into
        its feature statistics (summed over ranks: each rank ran its share of the passes)."""
        beta = self.critic_cfg.value_norm_beta
        for name in sorted(set(self.policy.value_heads.keys())):
            head = self.policy.value_heads[name]
            parts = data_parallel.gather((head.pending.cpu(), head.pending_count.cpu()))
            head.fold_features(beta, sum(p for p, _ in parts), sum(c for _, c in parts))

    def _refit_heads(self, data_parallel: Any) -> dict[str, float]:
        """Keep this update's first-pass points (every rank's) and refit each value head on the
        kept window (``learners/head_refit.py``)."""
        parts = [item for rank in data_parallel.gather(self._captured) for item in rank]
        self._captured = []
        out: dict[str, float] = {}
        for name in sorted({critic for critic, _ in parts}):
            self.refit.add(name, Batch.concat([b for critic, b in parts if critic == name]))
            for key, value in refit_head(self.policy.value_heads[name], self.refit.points(name)).items():
                out.setdefault(key, value)  # the first critic's figures (one critic unless per_agent)
        return out

    # -- checkpointing ---------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {"head_refit": self.refit.state_dict()} if self.refit is not None else {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self.refit is not None:  # a checkpoint from before the refit was turned on: an empty window
            self.refit.load_state_dict(state.get("head_refit", {}))


def first_values(rollout: Rollout) -> Sequence[float | None]:
    """Per decision of ``rollout``, the value recorded at collection of its state (its first
    token value at token level; None where none was recorded)."""
    return [d.value if d.value is not None else (d.token_values[0] if d.token_values else None)
            for d in rollout.decisions]
