"""MARFT-T: token-level MAPPO. Every generated token is an action with its own value.

1. Targets. The collector records, per response token, the critic's value of the state before
   that token (prompt + earlier response tokens). Within an episode the utterances of all agents
   are concatenated in turn order and GAE runs over the tokens
   (:func:`marft_agents.ppo_math.gae_token_level`): token j -> j+1 of one utterance has reward 0,
   discount ``gamma_token`` and lambda ``lam_token``; an utterance's last token bridges into
   the next agent's first token with the utterance's credited reward, the strategy's discount
   (``learners/credit.py``) and lambda ``lam``. ``gamma_token`` defaults to 1: discounting per
   token would make the credit reaching an utterance's first token shrink with its length.
   An utterance with no tokens (possible only if a policy returns an empty generation) has no
   action to train: it is folded into the previous non-empty utterance of the episode, whose
   reward gains the empty one's reward *discounted* by the discounts between them and whose
   bridging discount becomes their product (so the return of every kept token is what it would
   be with the empty utterance in the sequence). Empty utterances before the first non-empty
   one give their reward, undiscounted, to that first one.
2. Policy loss. Per-token ratio, clipping, approx-KL, clipfrac (the update loop's units are tokens,
   ``policy_units``), entropy and KL to the reference, all averaged over the response tokens of
   the minibatch (``learners/base.py``).
3. Value loss. Clipped, Huber (two-sided) regression of every token value on its GAE return; a
   token's value is the critic's on its recorded input (``Decision.critic_prompt_ids``) with the
   response up to that token appended.
4. The baseline (``advantage.baseline``): as MARFT-A's step 4 (``learners/mappo_action.py``,
   maths in :mod:`marft_agents.learners.baselines`), per utterance: every token of an utterance
   carries its utterance's group advantage. Under ``group_critic`` the critic's term is the
   utterance's first-token value (the state before the utterance) against the LOO mean of the
   other episodes' at that position, and every token value is regressed on the utterance's
   residual over the anchor.

Single-agent token-level PPO is this learner on a one-role profile.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from marft_agents import ppo_math as pm
from marft_agents.learners.base import BaseLearner, PolicyUnits, Sample, pad_stack, sample_from_decision
from marft_agents.learners.baseline_choice import GroupBaselines
from marft_agents.learners.credit import assign_credit
from marft_agents.learners.registry import declared_by
from marft_agents.episodes import Decision, Rollout
from marft_agents.settings.estimators import estimator_function


def fold_empty_utterances(decisions: Sequence[Decision], rewards: Sequence[float], gammas: Sequence[float]
                          ) -> tuple[list[int], list[float], list[float], list[bool]]:
    """Drop token-less utterances, keeping every kept utterance's return unchanged.

    Returns ``(kept indices, rewards, bridging discounts, dones)`` of the kept utterances: kept
    utterance i followed by empty ones i+1 .. j-1 gets ``r_i + sum_k (prod_{m=i}^{k-1} g_m) r_k``
    and discount ``prod_{m=i}^{j-1} g_m`` into the next kept one.
    """
    keep = [k for k, d in enumerate(decisions) if d.response_ids]
    out_r, out_g, out_d = [], [], []
    for n, i in enumerate(keep):
        end = keep[n + 1] if n + 1 < len(keep) else len(decisions)
        reward, discount, done = 0.0, 1.0, False
        if n == 0:  # empty utterances before the first kept one: nothing earlier to credit
            reward += sum(rewards[k] for k in range(i))
        for k in range(i, end):
            reward += discount * rewards[k]
            discount *= gammas[k]
            done = done or decisions[k].done
        out_r.append(reward)
        out_g.append(discount)
        out_d.append(done or n == len(keep) - 1)
    return keep, out_r, out_g, out_d


@declared_by("mappo_token")  # value_mode "token", the baselines: learners/registry.py
class TokenLevelMAPPO(GroupBaselines, BaseLearner):
    """MAPPO with one action per token (MARFT-T)."""

    unit = "token"

    def build_samples(self, rollout: Rollout) -> list[Sample]:
        """Steps 1 and 4: the registered baseline estimator's per-token form when it has one
        (``critic``: token GAE), else its per-utterance advantage broadcast over the tokens."""
        per_token = estimator_function("baseline", self.baseline, token=True)
        if per_token is not None:
            return self._token_samples(rollout, per_token)
        return self._utterance_samples(rollout)

    def _token_samples(self, rollout: Rollout, per_token: Any) -> list[Sample]:
        """Step 1: ``per_token(inputs, gamma, lam, gamma_token, lam_token)`` over each episode's
        non-empty utterances (``settings.estimators``' token-level convention)."""
        inputs, kept = [], []
        for decisions in rollout.episode_decisions():
            rewards, gammas = assign_credit(decisions, self.ppo.credit, self.ppo.gamma)
            keep, merged_rewards, merged_gammas, dones = fold_empty_utterances(decisions, rewards, gammas)
            if not keep:
                continue
            inputs.append(pm.TokenGAEInput(token_values=[decisions[k].token_values for k in keep],
                                           rewards=merged_rewards, dones=dones, gammas=merged_gammas))
            kept.append([decisions[k] for k in keep])
        results = per_token(inputs, gamma=self.ppo.gamma, lam=self.ppo.lam,
                            gamma_token=self.ppo.gamma_token, lam_token=self.ppo.lam_token)
        return [sample_from_decision(d, self.policy.critic_for(d.agent_id),
                                     torch.tensor(d.token_values, dtype=torch.float32),  # [L]
                                     advantages, returns)  # [L] each
                for decisions, per_utterance in zip(kept, results)
                for d, (advantages, returns) in zip(decisions, per_utterance)]

    def _utterance_samples(self, rollout: Rollout) -> list[Sample]:
        """Step 4's samples (utterances without tokens have nothing to train: skipped)."""
        critic = self.critic_values is not None
        out = []
        for d, advantage, target in self.baseline_targets(
                rollout, (lambda d: d.token_values[0] if d.token_values else 0.0) if critic else None):
            n = len(d.response_ids)
            if not n:
                continue
            values = torch.tensor(d.token_values, dtype=torch.float32) if critic else torch.zeros(n)  # [L]
            out.append(sample_from_decision(d, self.policy.critic_for(d.agent_id) if critic else "", values,
                                            torch.full((n,), float(advantage)),  # [L]
                                            torch.full((n,), float(target)) if critic else torch.zeros(n)))  # [L]
        return out

    def policy_units(self, samples: list[Sample], logprobs: torch.Tensor, mask: torch.Tensor) -> PolicyUnits:
        """One unit per response token."""
        length = logprobs.shape[1]
        return PolicyUnits(
            logprobs=logprobs,  # [B, T]
            old_logprobs=pad_stack([s.old_logprobs for s in samples], length).to(logprobs.device),  # [B, T]
            advantages=pad_stack([s.advantages for s in samples], length).to(logprobs.device),  # [B, T]
            mask=mask,  # [B, T]
        )
