"""The shared PPO update loop every PPO-style learner runs (not a sampling engine of ``engine/``).

A learner is two things: an **advantage estimator** (``build_samples``) and the **level at which
the PPO ratio is formed** (``policy_units``). Everything else (minibatches, micro-batches, the
clipped surrogate, the entropy bonus, the KL-to-reference term, the value loss, gradient
clipping, the NaN guard, the agent schedule) is this update loop, identical for MARFT-A (action
level), MARFT-T (token level) and single-agent PPO.

Hooks a subclass implements
---------------------------
``build_samples(rollout) -> list[Sample]``
    The advantage estimator: per decision, old log-probs, old values, advantages and returns
    (``[]`` tensors at action level, ``[L]`` at token level). A critic-free learner declares
    ``value_mode = None``, and a baseline without a critic leaves ``critic_values`` None; either
    fills ``old_values``/``returns`` with zeros and the update loop runs no critic pass.
``policy_units(samples, logprobs, mask) -> PolicyUnits``
    Given the micro-batch's per-token log-probs ``[B, T]`` under the current adapter (with grad)
    and their response mask, return the units at which the ratio is formed: per decision
    (``[B]``: e.g. the utterance log-prob) or per token (``[B, T]``), with their old log-probs,
    advantages and a 0/1 mask. Optional ``weights`` scale units inside the sum (e.g. a
    per-sequence ``1 / length`` for a sequence-mean-then-batch-mean loss).
``units(sample) -> float``
    How much one sample contributes to the minibatch's normaliser: 1 per decision
    (``unit = "decision"``) or its token count (``unit = "token"``); override together with
    ``PolicyUnits.weights`` for other weightings. The normaliser must equal the sum of the weights
    of the sample's units, so that the reduced loss is a weighted *mean*.

How the update loop reduces (once per minibatch, so micro-batching never changes the gradient)
---------------------------------------------------------------------------------------------
Each micro-batch returns *sums* of per-unit terms, each divided by a normaliser of the whole
minibatch (computed before the first micro-batch), so accumulating the micro-batches' gradients
gives exactly the minibatch's loss, whatever ``micro_batch_size`` is::

    loss = sum(w * surrogate) / sum_units                      # PPO clipped surrogate
         - entropy_coef * sum(token entropy) / minibatch tokens
         + kl_coef * sum(token k2 KL to reference) / minibatch tokens
    value loss = sum(clipped Huber value error) / minibatch value units

The entropy bonus and the KL term are token means over the minibatch for every learner;
the surrogate is a mean over the learner's units. The KL term is the k2 form
(:func:`marft_agents.ppo_math.kl_to_reference`), whose gradient is that of KL(pi || ref).

What else the update loop guarantees
------------------------------------
* **Who trains** (the run plan's schedule, :func:`marft_agents.run_plan.decide_schedule`).
  ``agent_iteration_interval = 0``: every agent's adapter trains each update.
  ``k > 0``: agent-by-agent training, one agent's adapter trains for ``k`` updates while the
  others are frozen (no gradients, no optimizer step), then the next agent, rotating. The critic
  trains every update; the policy waits for ``critic_warmup_updates`` updates (value-only
  updates on the first rollouts: the actors' adapters stay bit-identical).
  ``agent/<id>/trained`` is 1 only for an agent whose adapter took policy steps this update.
* **The critic** is a collaborator, :class:`marft_agents.learners.value_fit.ValueFit`
  (``self.value_fit``; None without a critic): its health figures against the ceiling and the
  group baseline, PopArt, its whole-episode minibatches and value loss, the feature fold and
  the head refit. The update loop only schedules it: ``schedule.critic_epochs`` passes (default:
  the policy's ``ppo_epochs``, early stop included), stepped by the same guarded optimizer step.
* **Groups.** ``group_size`` (the episodes per task the collector plays) is the run plan's
  (``cfg.plan()``, :func:`marft_agents.run_plan.decide_group_size`); the
  estimator decides what groups mean for it (``advantage.baseline``, declared by a learner's
  ``baselines``).
* **No silent skips.** Gradients are clipped per adapter; a non-finite loss or gradient norm
  skips that optimizer step, zeroes the gradients, logs a warning and counts it in
  ``guard/skipped_steps``. With ``target_kl`` set, the epochs stop early once an epoch's mean
  approx-KL exceeds it (reported as ``ppo/early_stopped``); no step is ever thrown away after its
  backward pass because of a KL value.
* **The critic's input** is the one recorded at collection (``Sample.critic_prompt_ids``: the
  global state under ``critic.mode: centralised`` / ``per_agent``, the acting agent's prompt
  under ``local``), scored with the same shared-prefix split, so stored and trained values are of
  the same text.
* Dropout-free forward passes: the model stays in eval mode, because PPO ratios must compare the
  same function that sampled the actions (``lora.dropout > 0`` is rejected for training by
  ``TrainConfig.validate``). In half precision, set ``ppo.recompute_old_logprobs``: cached
  decoding and a full forward pass disagree there by far more than the clip range, and so do two
  full passes that pad a row differently; the learner then scores the old log-probs on its own
  micro-batches. The trainer warns when neither it nor ``sampling.recompute_logprobs`` is on.
  A sampler that is not this learner's own code (``sampling.engine: vllm``) requires it; the
  sampler's log-probs are then kept as behaviour log-probs, and ``ppo.behaviour_is_cap`` weights
  each unit by the truncated ratio of the learner's to the sampler's probability.
"""

from __future__ import annotations

import logging
import math
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from marft_agents import ppo_math as pm
from marft_agents.runtime.distributed import SINGLE_PROCESS, DataParallel, SingleProcess
from marft_agents.engine.attention import training_passes
from marft_agents.learners.logprob_targets import LogprobTargets
from marft_agents.learners.samples import (
    PolicyUnits,
    Sample,
    behaviour_weights,
    episode_key,
    pad_stack,
    response_mask,
    sample_from_decision,
)
from marft_agents.learners.value_fit import ValueFit
from marft_agents.episodes import Rollout
from marft_agents.run_plan import RunConfig, RunPlan

__all__ = ["BaseLearner", "PolicyUnits", "Sample", "pad_stack", "response_mask", "sample_from_decision"]

log = logging.getLogger(__name__)


class BaseLearner(LogprobTargets):
    """The shared PPO update loop: optimizers, epochs, minibatch reduction, clipping and the NaN guard."""

    value_mode: str | None = "state"
    """What the critic values: ``"state"`` (one value per decision), ``"token"`` (one per
    response token) or None (no critic: no critic pass, no critic optimizer)."""
    options_class: type | None = None
    """The dataclass of the config's ``learner:`` section; None: the PPO learners take their
    settings from ``ppo:`` and declare none."""
    trains: bool = True
    """Whether an update changes adapters, so that the training-only config checks apply."""
    group_size: int = 1
    """Episodes per task group the collector plays (1: every episode its own task); set from
    ``schedule.group_size`` at construction."""
    baselines: tuple[str, ...] = ("critic",)
    """The ``advantage.baseline`` choices this learner's estimator implements (the MAPPO learners:
    all of ``settings.advantage.BASELINES``). Under a baseline without a critic (``group``) the
    instance's ``critic_values`` is None (no values at collection, no critic pass); the declared
    ``value_mode`` stays what the critic would value."""
    unit = "decision"
    """What the policy loss averages over: ``"decision"`` or ``"token"`` (see ``units``)."""
    whitens_advantages: bool = True
    """Whether the update loop re-whitens the policy samples' advantages across the batch when
    ``ppo.normalize_advantages`` is on (False: the estimator normalises them itself, e.g. GRPO
    within its groups)."""
    data_parallel: DataParallel | SingleProcess = SINGLE_PROCESS
    """The split and the collectives of an update. One process: the stand-in
    :class:`marft_agents.runtime.distributed.SingleProcess` (this rank runs everything; nothing to sum).
    The Trainer sets a :class:`marft_agents.runtime.distributed.DataParallel` when several ranks train
    together: every rank then holds the global rollout, runs the forward/backward passes of its
    share of each minibatch with the global minibatch's normalisers, and the gradients are
    summed across ranks before clipping."""

    def __init__(self, policy: Any, cfg: RunConfig, agent_ids: Sequence[str]):
        self.policy, self.cfg = policy, cfg
        self.ppo, self.schedule = cfg.ppo, cfg.schedule
        self.kl_coef = float(self.ppo.kl_coef)
        """The weight of the KL(pi || reference) term (``ppo.kl_coef``; a learner with its own
        setting assigns it in its constructor): > 0 attaches reference log-probs."""
        self.agent_ids = list(agent_ids)
        self.temperature = float(cfg.sampling.temperature)
        self.rng = np.random.default_rng(np.random.SeedSequence([cfg.seed, 0x1EA2]))
        self.skipped_steps = 0
        self.optimizers: dict[str, torch.optim.Optimizer] = {}
        lr_of = {policy.adapter_for(a): cfg.actor_lr_of(a) for a in self.agent_ids}  # agents.<id>.actor_lr
        frozen = set(cfg.plan().schedule.frozen)  # frozen teammates: no optimizer, never stepped
        for name in sorted({policy.adapter_for(a) for a in self.agent_ids if a not in frozen}):
            self.optimizers[name] = self._make_optimizer(name, lr_of[name])
        self.critic_cfg = getattr(cfg, "critic", None)
        self.plan: RunPlan = cfg.plan(quiet=False)
        """The run's resolved decisions (:mod:`marft_agents.run_plan`): baseline, critic, groups, rescoring,
        who trains when."""
        self.baseline = self.plan.baseline
        self.critic_values: str | None = self.plan.critic_values
        """What this run's critic values: the declared ``value_mode``, or None when the baseline
        (``advantage.baseline``, e.g. ``group``) runs without a critic (no values at collection,
        no critic pass, no critic optimizer)."""
        self.value_fit: ValueFit | None = None
        if self.critic_values is not None:
            for name in sorted({policy.critic_for(a) for a in self.agent_ids}):
                self.optimizers[name] = self._make_optimizer(name, self.schedule.critic_lr,
                                                             head_lr=self.schedule.value_head_lr)
            self.value_fit = ValueFit(policy, cfg, self.critic_values, self.rng, self.baseline)
        self.group_size = self.plan.group_size

    def _make_optimizer(self, adapter: str, lr: float, head_lr: float | None = None) -> torch.optim.Optimizer:
        """AdamW over ``adapter``'s parameters; a critic's value head gets ``head_lr`` (its own
        parameter group) when that is set and differs from ``lr`` (one group otherwise, so
        optimizer states saved before ``value_head_lr`` existed still load)."""
        params = list(self.policy.adapter_parameters(adapter))
        if not params:
            raise ValueError(f"adapter {adapter!r} has no parameters to train")
        heads = getattr(self.policy, "value_heads", {})
        if head_lr is None or head_lr == lr or adapter not in heads:
            return torch.optim.AdamW(params, lr=lr, weight_decay=self.schedule.weight_decay, eps=1e-8)
        head = {id(p) for p in heads[adapter].parameters()}
        groups = [{"params": [p for p in params if id(p) not in head], "lr": lr},
                  {"params": [p for p in params if id(p) in head], "lr": head_lr}]
        return torch.optim.AdamW(groups, weight_decay=self.schedule.weight_decay, eps=1e-8)

    # -- subclass hooks ------------------------------------------------------------------------
    def build_samples(self, rollout: Rollout) -> list[Sample]:
        """The advantage estimator (see the module docstring)."""
        raise NotImplementedError

    def policy_units(self, samples: list[Sample], logprobs: torch.Tensor, mask: torch.Tensor) -> PolicyUnits:
        """The ratio's units from per-token ``logprobs [B, T]`` and ``mask [B, T]``."""
        raise NotImplementedError

    def units(self, sample: Sample) -> float:
        """This sample's share of the policy loss's normaliser (1 or its token count)."""
        return float(len(sample.response_ids)) if self.unit == "token" else 1.0

    def value_units(self, sample: Sample) -> float:
        """This sample's share of the value loss's normaliser."""
        return float(len(sample.response_ids)) if self.critic_values == "token" else 1.0

    # -- schedule ------------------------------------------------------------------------------
    def trainable_agents(self, update: int) -> list[str]:
        """Agents whose adapters train at ``update`` (0-based): the run plan's schedule
        (:class:`marft_agents.run_plan.AgentSchedule`: ``ppo.train_agents`` but the
        ``scripted_seats``, all at once or one at a time with ``agent_iteration_interval``)."""
        return self.plan.schedule.trainable(self.agent_ids, update)

    # -- the update ----------------------------------------------------------------------------
    def update(self, rollout: Rollout, update: int) -> dict[str, float]:
        """One PPO update on ``rollout``; returns flat metrics."""
        with training_passes():  # the attention path for backward passes, rescoring included
            return self._update(rollout, update)

    def _update(self, rollout: Rollout, update: int) -> dict[str, float]:
        trainable = self.trainable_agents(update)
        train_policy = update >= self.ppo.critic_warmup_updates
        critic = self.critic_values is not None
        self.policy.set_trainable(set(trainable) if train_policy else set(), critic=critic)
        samples = self.build_samples(rollout)
        metrics: dict[str, float] = {"losses/explained_variance": self.explained_variance(samples)}
        fit = self.value_fit if critic else None
        if fit is not None:
            metrics.update(fit.prepare(rollout, samples, update, metrics["losses/explained_variance"]))
        metrics.update(self.diagnostics(rollout))
        policy_samples = [s for s in samples if s.agent_id in trainable] if train_policy else []
        if self.whitens_advantages and self.ppo.normalize_advantages and policy_samples:
            self._whiten_advantages(policy_samples)
        if self.kl_coef > 0 and policy_samples:
            self._attach_reference_logprobs(policy_samples)
        sums: dict[str, float] = defaultdict(float)
        counts: dict[str, int] = defaultdict(int)
        skipped_before = self.skipped_steps
        epochs_run, early_stopped = 0, 0.0
        policy_epochs = self.schedule.ppo_epochs
        # critic_epochs unset: the critic follows the policy's epochs, early stop included
        follow = self.schedule.critic_epochs is None
        critic_epochs = policy_epochs if follow else self.schedule.critic_epochs
        for epoch in range(max(policy_epochs, critic_epochs)):
            critic_batches = fit.minibatches(samples) if fit is not None and epoch < critic_epochs else []
            for batch in critic_batches:
                stats = self._step(sorted({s.critic for s in batch}), batch, critic=True, first_pass=epoch == 0)
                for key, value in stats.items():
                    sums[key] += value
                    counts[key] += 1
            if early_stopped or epoch >= policy_epochs:
                continue
            epochs_run += 1
            epoch_kl, epoch_n = 0.0, 0
            policy_batches = self._minibatches(policy_samples)
            if epoch == 0 and self.plan.rescores_old_logprobs:
                self._rescore_old_logprobs(policy_batches)
            for batch in policy_batches:
                stats = self._step(sorted({s.adapter for s in batch}), batch, critic=False)
                for key, value in stats.items():
                    sums[key] += value
                    counts[key] += 1
                if math.isfinite(stats.get("losses/approx_kl", float("nan"))):
                    epoch_kl += stats["losses/approx_kl"]
                    epoch_n += 1
            target = self.ppo.target_kl
            if target is not None and epoch_n and epoch_kl / epoch_n > target and epoch + 1 < policy_epochs:
                log.warning("update %d: approx-KL %.4f > target_kl %.4f after epoch %d; stopping epochs early",
                            update, epoch_kl / epoch_n, target, epoch + 1)
                early_stopped = 1.0
                if follow:
                    break
        if fit is not None:
            metrics.update(fit.finish(self.data_parallel))
        metrics.update({k: sums[k] / counts[k] for k in sums})
        for key in ("losses/policy_loss", "losses/entropy", "losses/approx_kl", "losses/clipfrac"):
            metrics.setdefault(key, float("nan"))  # nan = no policy step this update (warm-up)
        metrics.setdefault("losses/value_loss", float("nan"))
        metrics.update({
            "ppo/epochs_run": float(epochs_run),
            "ppo/early_stopped": early_stopped,
            "ppo/policy_trained": float(bool(policy_samples)),
            "ppo/policy_samples": float(len(policy_samples)),
            "guard/skipped_steps": float(self.skipped_steps - skipped_before),
        })
        acted = {s.agent_id for s in policy_samples}  # scheduled agents that had decisions to train on
        for agent in self.agent_ids:
            metrics[f"agent/{agent}/trained"] = float(agent in acted)
        return metrics

    def explained_variance(self, samples: list[Sample]) -> float:
        if not samples or self.critic_values is None:
            return float("nan")
        values = torch.cat([s.old_values.reshape(-1) for s in samples])
        returns = torch.cat([s.returns.reshape(-1) for s in samples])
        return float(pm.explained_variance(values, returns))

    def diagnostics(self, rollout: Rollout) -> dict[str, float]:
        """Figures a learner adds to every update's metrics beyond the critic's (none here)."""
        return {}

    def _whiten_advantages(self, samples: list[Sample]) -> None:
        flat = torch.cat([s.advantages.reshape(-1) for s in samples])  # [N units]
        if flat.numel() < 2:
            return
        white = pm.masked_whiten(flat)
        offset = 0
        for s in samples:
            n = s.advantages.numel()
            s.advantages = white[offset: offset + n].reshape(s.advantages.shape)
            offset += n

    def _local(self, samples: list[Sample]) -> list[int]:
        """Indices of ``samples`` whose forward passes this rank runs (all of them in one process)."""
        return self.data_parallel.local_indices(samples)

    def _minibatches(self, samples: list[Sample]) -> list[list[Sample]]:
        if not samples:
            return []
        order = self.rng.permutation(len(samples))
        size = self.schedule.minibatch_size
        return [[samples[i] for i in order[start: start + size]] for start in range(0, len(order), size)]

    def _micro_batches(self, samples: list[Sample], by: str = "adapter") -> list[list[Sample]]:
        """Split by adapter (``by="critic"``: by critic adapter), then into chunks of at most
        ``micro_batch_size`` decisions and, with ``schedule.max_tokens_per_micro_batch``, of at
        most that many tokens as the pass lays them out (``_pass_tokens``); a decision over the
        cap goes alone. The split is a function of ``samples`` alone, so the rescoring of old
        log-probs runs the very micro-batches the gradient passes run.

        Under a token cap the policy's rows go longest first (similar lengths together: less
        padding, fewer passes); the critic's keep their order, in which an episode's inputs are
        adjacent and share one forward row."""
        size = self.schedule.micro_batch_size or len(samples)
        cap = self.schedule.max_tokens_per_micro_batch
        groups: dict[str, list[Sample]] = defaultdict(list)
        for s in samples:
            groups[getattr(s, by)].append(s)
        if cap is None:
            return [group[i: i + size] for name in sorted(groups) for group in [groups[name]]
                    for i in range(0, len(group), size)]
        micros: list[list[Sample]] = []
        for name in sorted(groups):
            group = groups[name]
            if by == "adapter":
                group = sorted(group, key=lambda s: -(len(s.prompt_ids) + len(s.response_ids)))
            micro: list[Sample] = []
            for s in group:
                if micro and (len(micro) >= size or self._pass_tokens(micro + [s], by) > cap):
                    micros.append(micro)
                    micro = []
                micro.append(s)
            micros.append(micro)
        return micros

    def _pass_tokens(self, micro: list[Sample], by: str = "adapter") -> int:
        """Token positions the forward pass of ``micro`` lays out, padding included: rows x
        columns, what its activations (and, squared in the columns, its attention scores) scale
        with, rather than the real tokens.

        Policy passes (``by="adapter"``): ``engine.layout.pack`` left-pads the prompts to the
        longest and right-pads the responses to the longest, so rows x (longest prompt + longest
        response). Critic passes: one left-padded row per chain of inputs that extend one another
        (``policy.value_rows``), as wide as the longest input (the critic's prompt, plus the
        response under token-level values). A shared prefix is counted in every row: an upper
        bound, as its activations are computed once (its keys and values are repeated per row)."""
        if by == "adapter":
            return len(micro) * (max(len(s.prompt_ids) for s in micro) + max(len(s.response_ids) for s in micro))
        token = self.critic_values == "token"
        seqs = [list(s.critic_input[0]) + (list(s.response_ids) if token else []) for s in micro]
        heads, _ = self.policy.value_rows(seqs)
        return len(heads) * max(len(seq) for seq in seqs)

    # -- per micro-batch terms, reduced by minibatch normalisers -------------------------------
    def _policy_micro(self, micro: list[Sample], norm: dict[str, float]) -> tuple[torch.Tensor, dict[str, float]]:
        """This micro-batch's share of the minibatch's policy loss and its stat sums."""
        ppo = self.ppo
        stats = self.policy.token_logprobs(
            micro[0].adapter, [s.prompt_ids for s in micro], [s.response_ids for s in micro], self.temperature,
            prefix_lens=[s.prefix_len for s in micro],
        )
        logprobs = stats.logprobs.float()  # [B, T]
        self._take_old_logprobs(micro, logprobs)  # first minibatch: see _rescore_old_logprobs
        mask = response_mask(micro, logprobs.shape[1]).to(logprobs.device)  # [B, T]
        units = self.policy_units(micro, logprobs, mask)
        surrogate, clipped = pm.clipped_surrogate(units.logprobs, units.old_logprobs, units.advantages,
                                                  ppo.clip_eps, ppo.clip_eps_high)  # [B] or [B, T]
        weight = torch.ones_like(surrogate) if units.mask is None else units.mask.to(surrogate.dtype)
        if units.weights is not None:
            weight = weight * units.weights.to(surrogate.dtype)
        loss_weight, behaviour = self._behaviour_correction(micro, mask, surrogate, weight, norm)
        entropy = pm.masked_sum(stats.entropy.float(), mask)  # [] sum over the micro-batch's tokens
        loss = (surrogate * loss_weight).sum() / norm["units"]
        if ppo.entropy_coef:  # without the term, the backward skips the entropy's gradient
            loss = loss - ppo.entropy_coef * entropy / norm["tokens"]
        with torch.no_grad():
            out = {
                **behaviour,
                "losses/policy_loss": float((surrogate * loss_weight).sum()) / norm["units"],
                "losses/entropy": float(entropy) / norm["tokens"],
                "losses/clipfrac": float((clipped.to(weight.dtype) * weight).sum()) / norm["units"],
                "losses/approx_kl": float((pm.approx_kl(units.logprobs, units.old_logprobs) * weight).sum())
                / norm["units"],
            }
        if self.kl_coef > 0:
            ref = pad_stack([s.ref_logprobs for s in micro], logprobs.shape[1]).to(mask.device)  # [B, T]
            kl = pm.masked_sum(pm.kl_to_reference(logprobs, ref), mask)  # []
            loss = loss + self.kl_coef * kl / norm["tokens"]
            out["losses/kl_ref"] = float(pm.masked_sum(pm.kl_k3_estimate(logprobs.detach(), ref), mask)) / norm["tokens"]
        return loss, out

    def _behaviour_correction(self, micro: list[Sample], mask: torch.Tensor, surrogate: torch.Tensor,
                              weight: torch.Tensor, norm: dict[str, float]) -> tuple[torch.Tensor, dict[str, float]]:
        """The units' loss weights with the truncated importance weight of ``ppo.behaviour_is_cap``
        (``weight`` unchanged when it is off), and the behaviour statistics' shares of the minibatch.

        Only when the learner rescored the old log-probs (``ppo.recompute_old_logprobs``) can they
        differ from the sampler's (``Sample.behaviour_logprobs``): then the mean per-token gap is
        logged and, with a cap, each unit weighted by ``min(exp(old - behaviour), cap)`` (a decision's
        log-ratio reduced over its tokens as ``ppo.logprob_reduction`` reduces its log-prob)."""
        ppo = self.ppo
        if not self.plan.rescores_old_logprobs:
            return weight, {}
        cap = ppo.behaviour_is_cap
        old = pad_stack([s.old_logprobs for s in micro], mask.shape[1]).to(mask.device)  # [B, T]
        is_weight, gap = behaviour_weights(micro, old, mask, per_token=surrogate.dim() == 2,
                                           cap=math.inf if cap is None else cap,
                                           mean=ppo.logprob_reduction == "mean")  # [B] or [B, T]; [B, T]
        out = {"rollout/behaviour_logprob_gap": float(pm.masked_sum(gap, mask)) / norm["tokens"]}
        if cap is None:
            return weight, out
        is_weight = is_weight.to(weight.dtype)
        out["ppo/behaviour_is_weight"] = float((is_weight * weight).sum()) / norm["units"]
        out["ppo/behaviour_is_clipfrac"] = float(((is_weight >= cap).to(weight.dtype) * weight).sum()) / norm["units"]
        return weight * is_weight, out

    def _accumulate(self, batch: list[Sample], critic: bool, first_pass: bool = False) -> tuple[float, dict[str, float]]:
        """Backward every micro-batch of ``batch`` (of this rank's share of it, with several
        ranks); returns the minibatch loss and stats. Critic micro-batches are the
        :class:`ValueFit`'s (``first_pass``: the update's first critic epoch)."""
        if critic:
            norm = {"units": sum(self.value_units(s) for s in batch)}
        else:
            norm = {"units": sum(self.units(s) for s in batch),
                    "tokens": float(sum(len(s.response_ids) for s in batch))}
        norm = {k: max(v, 1.0) for k, v in norm.items()}  # all-empty responses: sums are 0 anyway
        sums: dict[str, float] = defaultdict(float)
        loss_total = 0.0
        dp = self.data_parallel  # an episode's critic inputs share a row: keep them on one rank
        local = dp.share_groups(batch, episode_key) if critic else dp.share(batch)
        for micro in self._micro_batches(local, by="critic" if critic else "adapter"):
            loss, stats = (self.value_fit.micro_loss(micro, norm, first_pass) if critic
                           else self._policy_micro(micro, norm))
            loss.backward()
            loss_total += float(loss.detach())
            for key, value in stats.items():
                sums[key] += value
        return loss_total, dict(sums)

    def _step(self, adapters: list[str], batch: list[Sample], critic: bool, first_pass: bool = False
              ) -> dict[str, float]:
        """Accumulate gradients over the micro-batches of ``batch``, then one guarded step."""
        optimizers = [self.optimizers[a] for a in adapters]
        for opt in optimizers:
            opt.zero_grad(set_to_none=True)
        if not batch:
            return {}
        loss_total, sums = self._accumulate(batch, critic, first_pass)
        # the global minibatch's gradient, loss and statistics (as they are, in one process)
        loss_total, sums = self.data_parallel.reduce_step(optimizers, loss_total, sums)
        norms = {}
        finite = math.isfinite(loss_total)
        for name, opt in zip(adapters, optimizers):
            params = [p for group in opt.param_groups for p in group["params"] if p.grad is not None]
            if not params:
                continue
            norm = torch.nn.utils.clip_grad_norm_(params, self.ppo.max_grad_norm)
            norms[name] = float(norm)
            finite = finite and math.isfinite(norms[name])
        kind = "critic" if critic else "policy"
        if not finite:
            self.skipped_steps += 1
            log.warning("skipping a %s optimizer step: non-finite loss (%s) or gradient norm (%s)",
                        kind, loss_total, norms)
            for opt in optimizers:
                opt.zero_grad(set_to_none=True)
            return {f"guard/{kind}_nonfinite": 1.0}
        for opt in optimizers:
            opt.step()
        out = dict(sums)
        out["losses/value_loss" if critic else "losses/policy_total_loss"] = loss_total
        if norms:
            out[f"grad/{kind}_norm"] = sum(norms.values()) / len(norms)
        return out

    # -- checkpointing -------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {
            "optimizers": {name: opt.state_dict() for name, opt in self.optimizers.items()},
            "rng": self.rng.bit_generator.state,
            "skipped_steps": self.skipped_steps,
            **(self.value_fit.state_dict() if self.value_fit is not None else {}),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for name, opt_state in state["optimizers"].items():
            if name not in self.optimizers:
                raise KeyError(f"checkpoint has an optimizer for {name!r}, but this run's adapters are "
                               f"{sorted(self.optimizers)}; was it written with a different profile?")
            optimizer = self.optimizers[name]
            configured = [group["lr"] for group in optimizer.param_groups]
            optimizer.load_state_dict(opt_state)
            # The moments resume; the learning rates are this run's config (torch would restore the
            # saved ones, so a resume with a new lr would silently keep the old). Unchanged config:
            # the same values, so an exact resume stays exact.
            for group, lr in zip(optimizer.param_groups, configured):
                group["lr"] = lr
        self.rng.bit_generator.state = state["rng"]
        self.skipped_steps = int(state.get("skipped_steps", 0))
        if self.value_fit is not None:
            self.value_fit.load_state_dict(state)
