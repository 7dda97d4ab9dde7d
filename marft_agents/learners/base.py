"""The update scaffolding every PPO-style learner shares.

A learner turns a :class:`~marft_agents.rollout.Rollout` into :class:`Sample` targets (its
advantage estimator: action level or token level), then runs ``ppo_epochs`` passes of
minibatch updates: one pass for the critic (all decisions), one for the policy (decisions of the
agents that train this update). Subclasses only implement three methods:

* ``build_samples(rollout)``: per decision, old log-probs/values, advantages and returns;
* ``policy_loss(adapter, samples)``: mean policy loss of one micro-batch of one adapter;
* ``critic_loss(samples)``: mean value loss of one micro-batch.

What this class guarantees:

* **Who trains.** ``agent_iteration_interval = 0``: every agent's adapter trains each update.
  ``k > 0``: agent-by-agent training, one agent's adapter trains for ``k`` updates while the
  others are frozen (no gradients, no optimizer step), then the next agent, rotating. The critic
  trains every update; the policy waits for ``critic_warmup_updates`` updates.
* **Loss scale.** A minibatch is split into micro-batches (per adapter, ``micro_batch_size``
  decisions) whose losses are weighted by their share of the minibatch's units (decisions or
  tokens), so accumulating gradients gives exactly the minibatch mean.
* **No silent skips.** Gradients are clipped per adapter; a non-finite loss or gradient norm
  skips that optimizer step, zeroes the gradients, logs a warning and counts it in
  ``guard/skipped_steps``. With ``target_kl`` set, the epochs stop early once an epoch's mean
  approx-KL exceeds it (reported as ``ppo/early_stopped``); no step is ever thrown away after its
  backward pass because of a KL value.
* Dropout-free forward passes: the model stays in eval mode, because PPO ratios must compare the
  same function that sampled the actions. (In half precision, set
  ``ppo.recompute_old_logprobs``: cached decoding and a full forward pass disagree there by far
  more than the clip range, and so do two full passes that pad a row differently; the learner
  then scores the old log-probs on its own micro-batches. The trainer warns when neither it nor
  ``sampling.recompute_logprobs`` is on.)
"""

from __future__ import annotations

import logging
import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from marft_agents import ppo_math as pm
from marft_agents.rollout import Rollout

log = logging.getLogger(__name__)

@dataclass
class Sample:
    """Training targets of one decision."""

    agent_id: str
    adapter: str
    """The policy adapter that acted."""
    critic: str
    """The critic adapter that values this decision's states (``policy.critic_for(agent_id)``)."""
    prompt_ids: list[int]
    response_ids: list[int]
    old_logprobs: torch.Tensor
    """``[L]`` sampling-time log-probs of the response tokens."""
    old_values: torch.Tensor
    """``[]`` (action level) or ``[L]`` (token level) critic values at collection time."""
    advantages: torch.Tensor
    """Same shape as ``old_values``."""
    returns: torch.Tensor
    """Same shape as ``old_values``; the critic's regression target."""
    ref_logprobs: torch.Tensor | None = None
    """``[L]`` log-probs under the reference model (adapters disabled), when a KL term is used."""
    prefix_len: int = 0
    """Leading prompt tokens shared with other rows, as sampled (``Decision.prefix_len``)."""


def pad_stack(rows: Sequence[torch.Tensor], length: int, value: float = 0.0) -> torch.Tensor:
    """Right-pad 1-D tensors to ``length`` and stack them -> ``[B, length]``."""
    out = torch.full((len(rows), length), value, dtype=torch.float32)
    for b, row in enumerate(rows):
        out[b, : row.numel()] = row.float()
    return out


def response_mask(samples: Sequence[Sample], length: int) -> torch.Tensor:
    """``[B, length]`` 1 on the response tokens of each sample."""
    mask = torch.zeros((len(samples), length), dtype=torch.float32)
    for b, s in enumerate(samples):
        mask[b, : len(s.response_ids)] = 1.0
    return mask


class BaseLearner:
    """Optimizers, the epoch/minibatch loop, gradient clipping and the NaN guard."""

    value_mode: str | None = "state"
    """What the rollout collector records: ``"state"`` or ``"token"`` values, or None."""
    unit = "decision"
    """What a loss averages over: ``"decision"`` or ``"token"`` (sets micro-batch weights)."""

    def __init__(self, policy: Any, cfg: Any, agent_ids: Sequence[str]):
        self.policy, self.cfg = policy, cfg
        self.ppo, self.schedule = cfg.ppo, cfg.schedule
        self.agent_ids = list(agent_ids)
        self.temperature = float(cfg.sampling.temperature)
        self.rng = np.random.default_rng(np.random.SeedSequence([cfg.seed, 0x1EA2]))
        self.skipped_steps = 0
        self.optimizers: dict[str, torch.optim.Optimizer] = {}
        for name in sorted({policy.adapter_for(a) for a in self.agent_ids}):
            self.optimizers[name] = self._make_optimizer(name, self.schedule.actor_lr)
        critics = {policy.critic_for(a) for a in self.agent_ids} if self.value_mode is not None else set()
        for name in sorted(critics):  # a learner without values has no critic to train
            self.optimizers[name] = self._make_optimizer(name, self.schedule.critic_lr)

    def _make_optimizer(self, adapter: str, lr: float) -> torch.optim.Optimizer:
        params = list(self.policy.adapter_parameters(adapter))
        if not params:
            raise ValueError(f"adapter {adapter!r} has no parameters to train")
        return torch.optim.AdamW(params, lr=lr, weight_decay=self.schedule.weight_decay, eps=1e-8)

    # -- subclass hooks ------------------------------------------------------------------------
    def build_samples(self, rollout: Rollout) -> list[Sample]:
        raise NotImplementedError

    def policy_loss(self, adapter: str, samples: list[Sample]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        raise NotImplementedError

    def critic_loss(self, samples: list[Sample]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Mean value loss of one micro-batch (all samples share ``critic``)."""
        raise NotImplementedError

    def units(self, sample: Sample) -> int:
        return len(sample.response_ids) if self.unit == "token" else 1

    # -- schedule ------------------------------------------------------------------------------
    def trainable_agents(self, update: int) -> list[str]:
        """Agents whose adapters train at ``update`` (0-based)."""
        k = self.ppo.agent_iteration_interval
        if k <= 0:
            return list(self.agent_ids)
        return [self.agent_ids[(update // k) % len(self.agent_ids)]]

    # -- the update ----------------------------------------------------------------------------
    def update(self, rollout: Rollout, update: int) -> dict[str, float]:
        """One PPO update on ``rollout``; returns flat metrics."""
        trainable = self.trainable_agents(update)
        train_policy = update >= self.ppo.critic_warmup_updates
        has_critic = self.value_mode is not None
        self.policy.set_trainable(set(trainable) if train_policy else set(), critic=has_critic)
        samples = self.build_samples(rollout)
        metrics: dict[str, float] = {"losses/explained_variance": self.explained_variance(samples)}
        policy_samples = [s for s in samples if s.agent_id in trainable] if train_policy else []
        if self.ppo.normalize_advantages and policy_samples:
            self._whiten_advantages(policy_samples)
        if self.ppo.kl_coef > 0 and policy_samples:
            self._attach_reference_logprobs(policy_samples)
        sums: dict[str, float] = defaultdict(float)
        counts: dict[str, int] = defaultdict(int)
        skipped_before = self.skipped_steps
        epochs_run, early_stopped = 0, 0.0
        for epoch in range(self.schedule.ppo_epochs):
            epochs_run += 1
            for batch in self._minibatches(samples) if has_critic else []:
                stats = self._step(sorted({s.critic for s in batch}), batch, critic=True)
                for key, value in stats.items():
                    sums[key] += value
                    counts[key] += 1
            epoch_kl, epoch_n = 0.0, 0
            policy_batches = self._minibatches(policy_samples)
            if epoch == 0 and self.ppo.recompute_old_logprobs:
                self._rescore_old_logprobs(policy_batches)
            for batch in policy_batches:
                adapters = sorted({s.adapter for s in batch})
                stats = self._step(adapters, batch, critic=False)
                for key, value in stats.items():
                    sums[key] += value
                    counts[key] += 1
                if math.isfinite(stats.get("losses/approx_kl", float("nan"))):
                    epoch_kl += stats["losses/approx_kl"]
                    epoch_n += 1
            target = self.ppo.target_kl
            if target is not None and epoch_n and epoch_kl / epoch_n > target and epoch + 1 < self.schedule.ppo_epochs:
                log.warning("update %d: approx-KL %.4f > target_kl %.4f after epoch %d; stopping epochs early",
                            update, epoch_kl / epoch_n, target, epoch + 1)
                early_stopped = 1.0
                break
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
        for agent in self.agent_ids:
            metrics[f"agent/{agent}/trained"] = float(train_policy and agent in trainable)
        return metrics

    def explained_variance(self, samples: list[Sample]) -> float:
        if not samples:
            return float("nan")
        values = torch.cat([s.old_values.reshape(-1) for s in samples])
        returns = torch.cat([s.returns.reshape(-1) for s in samples])
        return float(pm.explained_variance(values, returns))

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

    @torch.no_grad()
    def _attach_reference_logprobs(self, samples: list[Sample]) -> None:
        for chunk in self._micro_batches(samples):
            stats = self.policy.reference_logprobs(
                [s.prompt_ids for s in chunk], [s.response_ids for s in chunk], self.temperature,
                prefix_lens=[s.prefix_len for s in chunk],
            )
            for b, s in enumerate(chunk):
                s.ref_logprobs = stats.logprobs[b, : len(s.response_ids)].detach().float().cpu()

    @torch.no_grad()
    def _rescore_old_logprobs(self, batches: list[list[Sample]]) -> None:
        """Old log-probs from the learner's own forward pass, micro-batch by micro-batch exactly
        as ``_step`` will run them (``ppo.recompute_old_logprobs``)."""
        for batch in batches:
            for micro in self._micro_batches(batch, by="adapter"):
                stats = self.policy.token_logprobs(
                    micro[0].adapter, [s.prompt_ids for s in micro], [s.response_ids for s in micro],
                    self.temperature, with_entropy=False, prefix_lens=[s.prefix_len for s in micro],
                )
                for b, s in enumerate(micro):
                    s.old_logprobs = stats.logprobs[b, : len(s.response_ids)].float().cpu()

    def _minibatches(self, samples: list[Sample]) -> list[list[Sample]]:
        if not samples:
            return []
        order = self.rng.permutation(len(samples))
        size = self.schedule.minibatch_size
        return [[samples[i] for i in order[start: start + size]] for start in range(0, len(order), size)]

    def _micro_batches(self, samples: list[Sample], by: str = "adapter") -> list[list[Sample]]:
        """Split by adapter (``by="critic"``: by critic adapter), then into chunks of at most
        ``micro_batch_size`` decisions."""
        size = self.schedule.micro_batch_size or len(samples)
        groups: dict[str, list[Sample]] = defaultdict(list)
        for s in samples:
            groups[getattr(s, by)].append(s)
        return [group[i: i + size] for name in sorted(groups) for group in [groups[name]]
                for i in range(0, len(group), size)]

    def _step(self, adapters: list[str], batch: list[Sample], critic: bool) -> dict[str, float]:
        """Accumulate gradients over the micro-batches of ``batch``, then one guarded step."""
        optimizers = [self.optimizers[a] for a in adapters]
        for opt in optimizers:
            opt.zero_grad(set_to_none=True)
        total_units = sum(self.units(s) for s in batch)
        if total_units == 0:
            return {}
        sums: dict[str, float] = defaultdict(float)
        loss_total = 0.0
        for micro in self._micro_batches(batch, by="critic" if critic else "adapter"):
            weight = sum(self.units(s) for s in micro) / total_units
            if critic:
                loss, stats = self.critic_loss(micro)
            else:
                loss, stats = self.policy_loss(micro[0].adapter, micro)
            (loss * weight).backward()
            loss_total += float(loss.detach()) * weight
            for key, value in stats.items():
                sums[key] += float(value) * weight
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
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for name, opt_state in state["optimizers"].items():
            if name not in self.optimizers:
                raise KeyError(f"checkpoint has an optimizer for {name!r}, but this run's adapters are "
                               f"{sorted(self.optimizers)}; was it written with a different profile?")
            self.optimizers[name].load_state_dict(opt_state)
        self.rng.bit_generator.state = state["rng"]
        self.skipped_steps = int(state.get("skipped_steps", 0))


def add_regularisers(learner: "BaseLearner", pg_loss: torch.Tensor, pg_stats: dict[str, torch.Tensor],
                     logprobs: torch.Tensor, entropy: torch.Tensor, mask: torch.Tensor,
                     samples: list[Sample]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Policy loss + entropy bonus + optional KL to the reference, with the standard metrics.

    Shared by the action- and token-level learners: ``logprobs``/``entropy``/``mask`` are the
    per-token ``[B, T]`` tensors of the update's forward pass.
    """
    ppo = learner.ppo
    mean_entropy = pm.masked_mean(entropy.float(), mask)
    loss = pg_loss - ppo.entropy_coef * mean_entropy
    out = {"losses/policy_loss": pg_loss.detach(), "losses/entropy": mean_entropy.detach(),
           "losses/approx_kl": pg_stats["approx_kl"], "losses/clipfrac": pg_stats["clipfrac"]}
    if ppo.kl_coef > 0:
        ref = pad_stack([s.ref_logprobs for s in samples], logprobs.shape[1]).to(mask.device)  # [B, T]
        kl = pm.masked_mean(pm.kl_to_reference(logprobs.float(), ref), mask)
        loss = loss + ppo.kl_coef * kl
        out["losses/kl_ref"] = kl.detach()
    return loss, out
