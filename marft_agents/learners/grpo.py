"""GRPO and its multi-agent groupings: critic-free, group-relative policy optimisation.

Registered as ``algorithm: grpo``; options in the ``learner:`` section
(:class:`marft_agents.settings.grpo.GRPOOptions`).

1. Sampling. The learner asks for ``learner.group_size`` episodes of every task (its
   ``group_size`` attribute, in place of ``schedule.group_size``): same task, independent
   samples (``marft_agents/collector.py``, grouped sampling).
2. Advantages. Every decision gets one scalar advantage from ``marft_agents.group_math``: its
   unit's score (team return, per agent, or per agent and turn: ``grouping``) against the other
   units with the same key, normalised as ``normalisation`` says (``step``: GiGPO's episode-level
   advantage plus ``step_weight`` times a step-level one over anchor states). No critic is built, no value is
   computed, and advantages are not re-whitened across the batch.
3. Loss. The shared PPO update loop (``learners/base.py``) with per-token ratio units: the clipped ratio
   against the sampling-time (or rescored) log-probs, the decision's advantage broadcast over
   its tokens (:meth:`GRPO.policy_units`), aggregated per token or per sequence, plus the
   update loop's entropy bonus and, with ``learner.kl_coef``, its KL(pi || reference) term (the k2
   form, whose gradient is that of KL(pi || ref); a token mean over the minibatch).
4. Diagnostics (:meth:`GRPO.diagnostics`). The share of decisions without signal, and the
   grouping's baseline gain per decision position against the leave-one-out mean at the
   position, in return units (``baseline/*``, :mod:`marft_agents.learners.baseline_gain`).

From the ``ppo:`` section GRPO uses ``clip_eps`` / ``clip_eps_high`` (asymmetric, DAPO-style
"clip higher"), ``entropy_coef``, ``max_grad_norm``, ``target_kl``, ``recompute_old_logprobs``
and ``agent_iteration_interval`` (agent-by-agent rotation); from ``schedule``: ``ppo_epochs``,
``minibatch_size``, ``micro_batch_size``, ``actor_lr``. Per-agent adapters and a shared adapter
both work (a shared adapter trains on every agent's decisions).
"""

from __future__ import annotations

import torch

from marft_agents import group_math as gm
from marft_agents.learners.base import BaseLearner, PolicyUnits, Sample, pad_stack
from marft_agents.learners.baseline_gain import gain_metrics, position_gains
from marft_agents.episodes import Rollout
from marft_agents.learners.registry import declared_by
from marft_agents.settings.grpo import GRPOOptions


@declared_by("grpo")  # value_mode None, options GRPOOptions: learners/registry.py
class GRPO(BaseLearner):
    """Group-relative policy optimisation for agent teams (see the module docstring)."""

    whitens_advantages = False  # normalised within groups, never re-whitened across the batch

    def __init__(self, policy, cfg, agent_ids):
        opts: GRPOOptions = cfg.learner
        if cfg.ppo.kl_coef > 0:
            raise ValueError("algorithm grpo: set the KL weight with learner.kl_coef (its KL term has the "
                             "gradient of KL(pi || ref)), not ppo.kl_coef")
        if cfg.ppo.critic_warmup_updates > 0:
            raise ValueError("algorithm grpo has no critic to warm up; set ppo.critic_warmup_updates: 0")
        super().__init__(policy, cfg, agent_ids)  # group_size: learner.group_size, by the run plan
        self.options = opts
        self.unit = "token" if opts.aggregation == "token" else "decision"
        self.kl_coef = float(opts.kl_coef)  # learner.kl_coef (ppo.kl_coef is refused above)

    def advantages(self, rollout: Rollout) -> torch.Tensor:
        """Step 2: every decision's group-relative advantage -> ``[len(rollout.decisions)]``."""
        o = self.options
        return gm.decision_advantages(rollout, o.grouping, o.normalisation, options=o)  # [N]

    def build_samples(self, rollout: Rollout) -> list[Sample]:
        advantages = self.advantages(rollout)  # [N]
        zero = torch.zeros(())
        return [Sample(agent_id=d.agent_id, adapter=d.adapter, critic="", prompt_ids=d.prompt_ids,
                       response_ids=d.response_ids, prefix_len=d.prefix_len,
                       old_logprobs=torch.tensor(d.logprobs, dtype=torch.float32),  # [L]
                       old_values=zero, advantages=advantages[i].clone(), returns=zero)
                for i, d in enumerate(rollout.decisions) if d.response_ids]

    def explained_variance(self, samples: list[Sample]) -> float:
        return float("nan")  # no critic

    def diagnostics(self, rollout: Rollout) -> dict[str, float]:
        """``grpo/zero_advantage_share``: the share of the sampled decisions (scripted seats' are
        not sampled) whose group gave no signal (advantage exactly 0: a singleton or an
        all-equal group); ``grpo/groups``: the rollout's task groups; the baseline gain per
        position (:meth:`baseline_gain`)."""
        advantages = self.advantages(rollout)  # [N] (pure: the same as build_samples')
        sampled = torch.tensor([bool(d.response_ids) and not d.scripted for d in rollout.decisions])  # [N]
        zero = advantages[sampled] == 0  # [n sampled]
        return {"grpo/zero_advantage_share": float(zero.float().mean()) if zero.numel() else float("nan"),
                "grpo/groups": float(len(rollout.groups())), **self.baseline_gain(rollout)}

    def baseline_gain(self, rollout: Rollout) -> dict[str, float]:
        """``baseline/*`` (:mod:`marft_agents.learners.baseline_gain`): per decision position, the
        grouping's baseline (its unit's centre, before the std division) against the LOO mean of
        the same scores at that position (under a ``mean`` centre also the same groups' residual
        with the unit left out); {} for a normalisation that declares no centre."""
        o = self.options
        found = gm.decision_baselines(rollout, o.grouping, o.normalisation, o)
        if found is None:
            return {}
        def table(per_decision: list) -> list[list]:  # [N] -> per episode, per position
            return [[per_decision[i] for i in episode.decisions] for episode in rollout.episodes]

        loo = table(found.others) if found.centre == "mean" else None
        return gain_metrics(position_gains(table(found.targets), table(found.baselines),
                                           list(rollout.groups().values()), loo))

    def policy_units(self, samples: list[Sample], logprobs: torch.Tensor, mask: torch.Tensor) -> PolicyUnits:
        """One unit per response token carrying its decision's advantage. ``sequence``
        aggregation weighs each token by 1 / its utterance's length (and ``units`` counts one per
        decision), so the update loop's weighted mean is a mean over utterances of per-utterance means."""
        advantages = torch.stack([s.advantages for s in samples]).to(logprobs)[:, None] * mask  # [B, T]
        old = pad_stack([s.old_logprobs for s in samples], logprobs.shape[1]).to(logprobs.device)  # [B, T]
        weights = None
        if self.options.aggregation == "sequence":
            weights = mask / mask.sum(dim=1, keepdim=True).clamp(min=1.0)  # [B, T]
        return PolicyUnits(logprobs=logprobs, old_logprobs=old, advantages=advantages, mask=mask, weights=weights)
