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
   action to train; its reward moves to the previous utterance of the episode.
2. Policy loss. Per-token ratio, clipping, approx-KL, clipfrac, entropy and KL to the reference,
   averaged over all response tokens of the minibatch.
3. Value loss. Clipped, Huber (two-sided) regression of every token value on its GAE return.

Single-agent token-level PPO is this learner on a one-role profile.
"""

from __future__ import annotations

import torch

from marft_agents import ppo_math as pm
from marft_agents.learners.base import BaseLearner, Sample, add_regularisers, pad_stack, response_mask
from marft_agents.learners.credit import assign_credit
from marft_agents.rollout import Rollout


class TokenLevelMAPPO(BaseLearner):
    """MAPPO with one action per token (MARFT-T)."""

    value_mode = "token"
    unit = "token"

    def build_samples(self, rollout: Rollout) -> list[Sample]:
        inputs, kept = [], []
        for e, decisions in enumerate(rollout.episode_decisions()):
            rewards, gammas = assign_credit(decisions, self.ppo.credit, self.ppo.gamma)
            keep = [k for k, d in enumerate(decisions) if d.response_ids]
            if not keep:
                continue
            merged_rewards = [0.0] * len(decisions)
            for k in range(len(decisions)):
                # Reward of an empty utterance goes to the last non-empty one before it.
                target = max([j for j in keep if j <= k], default=keep[0])
                merged_rewards[target] += rewards[k]
            inputs.append(pm.TokenGAEInput(
                token_values=[decisions[k].token_values for k in keep],
                rewards=[merged_rewards[k] for k in keep],
                dones=[decisions[k].done or k == keep[-1] for k in keep],
                gammas=[gammas[k] for k in keep],
            ))
            kept.append([decisions[k] for k in keep])
        results = pm.gae_token_level(inputs, gamma=self.ppo.gamma, lam=self.ppo.lam,
                                     gamma_token=self.ppo.gamma_token, lam_token=self.ppo.lam_token)
        samples = []
        for decisions, per_utterance in zip(kept, results):
            for d, (advantages, returns) in zip(decisions, per_utterance):
                samples.append(Sample(
                    agent_id=d.agent_id, adapter=d.adapter, critic=self.policy.critic_for(d.agent_id),
                    prompt_ids=d.prompt_ids, response_ids=d.response_ids, prefix_len=d.prefix_len,
                    old_logprobs=torch.tensor(d.logprobs, dtype=torch.float32),  # [L]
                    old_values=torch.tensor(d.token_values, dtype=torch.float32),  # [L]
                    advantages=advantages, returns=returns,  # [L] each
                ))
        return samples

    def policy_loss(self, adapter: str, samples: list[Sample]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        stats = self.policy.token_logprobs(
            adapter, [s.prompt_ids for s in samples], [s.response_ids for s in samples], self.temperature,
            prefix_lens=[s.prefix_len for s in samples],
        )
        logprobs = stats.logprobs.float()  # [B, T]
        length = logprobs.shape[1]
        mask = response_mask(samples, length).to(logprobs.device)  # [B, T]
        old = pad_stack([s.old_logprobs for s in samples], length).to(logprobs.device)  # [B, T]
        advantages = pad_stack([s.advantages for s in samples], length).to(logprobs.device)  # [B, T]
        pg_loss, pg_stats = pm.policy_loss(logprobs, old, advantages, mask, self.ppo.clip_eps, self.ppo.clip_eps_high)
        return add_regularisers(self, pg_loss, pg_stats, logprobs, stats.entropy, mask, samples)

    def critic_loss(self, samples: list[Sample]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        values = self.policy.token_values(
            [s.prompt_ids for s in samples], [s.response_ids for s in samples], samples[0].agent_id,
            prefix_lens=[s.prefix_len for s in samples],
        ).float()  # [B, T]
        length = values.shape[1]
        mask = response_mask(samples, length).to(values.device)  # [B, T]
        old = pad_stack([s.old_values for s in samples], length).to(values.device)  # [B, T]
        returns = pad_stack([s.returns for s in samples], length).to(values.device)  # [B, T]
        return pm.value_loss(values, old, returns, mask, self.ppo.value_clip, self.ppo.huber_delta)
