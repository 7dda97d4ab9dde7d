"""MARFT-A: action-level MAPPO. An agent's whole utterance is one action.

1. Targets. For each episode, the decisions (all agents, in turn order) form one sequence with
   rewards and discounts from the credit-assignment strategy (``learners/credit.py``). The
   critic's value of decision k is V(prompt_k), recorded at collection time; GAE over the
   sequence bridges each decision into the next agent's one, and an episode's last decision has
   no bootstrap (terminated and truncated alike: the horizon is part of the task, no reward
   comes after it). Because the next value is always a *stored* value of the next decision's
   own prompt, bootstrap and stored values can never disagree about the prompt format.
2. Policy loss. The action log-prob is the sum of the utterance's token log-probs
   (``logprob_reduction: sum``) or their mean (``mean``: a length-normalised log-prob, whose
   ratio is the geometric mean of the token ratios). Ratio, clipping, approx-KL and clipfrac
   are per decision; entropy (bonus) and KL to the reference are token means.
3. Value loss. Clipped, Huber (two-sided) regression of V(prompt_k) on the GAE return.

Single-agent PPO is this learner on a one-role profile (e.g. ``profile: solo``): the decision
sequence is then one agent's sequence of rounds.
"""

from __future__ import annotations

import torch

from marft_agents import ppo_math as pm
from marft_agents.learners.base import BaseLearner, Sample, add_regularisers, pad_stack, response_mask
from marft_agents.learners.credit import assign_credit
from marft_agents.rollout import Rollout


class ActionLevelMAPPO(BaseLearner):
    """MAPPO with one action per utterance (MARFT-A)."""

    value_mode = "state"
    unit = "decision"

    def build_samples(self, rollout: Rollout) -> list[Sample]:
        episodes = rollout.episode_decisions()
        if not episodes:
            return []
        longest = max(len(ep) for ep in episodes)
        rewards = torch.zeros(len(episodes), longest)  # [E, K]
        values = torch.zeros(len(episodes), longest)  # [E, K]
        dones = torch.ones(len(episodes), longest)  # [E, K] padding counts as done
        gammas = torch.ones(len(episodes), longest)  # [E, K]
        for e, decisions in enumerate(episodes):
            r, g = assign_credit(decisions, self.ppo.credit, self.ppo.gamma)
            rewards[e, : len(r)] = torch.tensor(r)
            gammas[e, : len(g)] = torch.tensor(g)
            values[e, : len(r)] = torch.tensor([d.value for d in decisions], dtype=torch.float32)
            dones[e, : len(r)] = torch.tensor([float(d.done) for d in decisions])
            if not decisions[-1].done:
                raise ValueError(f"episode {e} did not finish; the collector returns whole episodes only")
        advantages, returns = pm.gae_action_level(rewards, values, dones, gammas, self.ppo.lam)  # [E, K]
        samples = []
        for e, decisions in enumerate(episodes):
            for k, d in enumerate(decisions):
                samples.append(Sample(
                    agent_id=d.agent_id, adapter=d.adapter, critic=self.policy.critic_for(d.agent_id),
                    prompt_ids=d.prompt_ids, response_ids=d.response_ids, prefix_len=d.prefix_len,
                    old_logprobs=torch.tensor(d.logprobs, dtype=torch.float32),  # [L]
                    old_values=values[e, k].clone(), advantages=advantages[e, k].clone(),
                    returns=returns[e, k].clone(),
                ))
        return samples

    def policy_loss(self, adapter: str, samples: list[Sample]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        stats = self.policy.token_logprobs(
            adapter, [s.prompt_ids for s in samples], [s.response_ids for s in samples], self.temperature,
            prefix_lens=[s.prefix_len for s in samples],
        )
        length = stats.logprobs.shape[1]
        mask = response_mask(samples, length).to(stats.logprobs.device)  # [B, T]
        old = pad_stack([s.old_logprobs for s in samples], length).to(stats.logprobs.device)  # [B, T]
        normalize = self.ppo.logprob_reduction == "mean"
        new_seq = pm.sequence_logprob(stats.logprobs.float(), mask, normalize)  # [B]
        old_seq = pm.sequence_logprob(old, mask, normalize)  # [B]
        advantages = torch.stack([s.advantages for s in samples]).to(new_seq.device)  # [B]
        pg_loss, pg_stats = pm.policy_loss(new_seq, old_seq, advantages, None,
                                           self.ppo.clip_eps, self.ppo.clip_eps_high)
        return add_regularisers(self, pg_loss, pg_stats, stats.logprobs.float(), stats.entropy, mask, samples)

    def critic_loss(self, samples: list[Sample]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        # All samples of a micro-batch share one critic adapter: any of their agent ids selects it.
        values = self.policy.state_values([s.prompt_ids for s in samples], samples[0].agent_id,
                                          prefix_lens=[s.prefix_len for s in samples]).float()  # [B]
        old = torch.stack([s.old_values for s in samples]).to(values.device)  # [B]
        returns = torch.stack([s.returns for s in samples]).to(values.device)  # [B]
        loss, stats = pm.value_loss(values, old, returns, None, self.ppo.value_clip, self.ppo.huber_delta)
        return loss, stats
