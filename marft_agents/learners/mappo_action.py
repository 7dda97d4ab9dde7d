"""MARFT-A: action-level MAPPO. An agent's whole utterance is one action.

1. Targets. For each episode, the decisions (all agents, in turn order) form one sequence with
   rewards and discounts from the credit-assignment strategy (``learners/credit.py``). The
   critic's value of decision k is V_k, recorded at collection time; GAE over the
   sequence bridges each decision into the next agent's one, and an episode's last decision has
   no bootstrap (terminated and truncated alike: the horizon is part of the task, no reward
   comes after it). V is the critic's value of the decision's recorded critic input
   (``Decision.critic_prompt_ids``: the global state before the agent acts, under the default
   centralised critic). Because the next value is always a *stored* value of the next
   decision's own critic input, bootstrap and stored values never disagree about the format.
   Episodes without decisions (possible only with a dependency that schedules nobody) are
   skipped.
2. Policy loss. The action log-prob is the sum of the utterance's token log-probs
   (``logprob_reduction: sum``) or their mean (``mean``: a length-normalised log-prob, whose
   ratio is the geometric mean of the token ratios). Ratio, clipping, approx-KL and clipfrac
   are per decision (the update loop's units, ``policy_units``); entropy (bonus) and KL to the
   reference are token means over the minibatch (``learners/base.py``).
3. Value loss. Clipped, Huber (two-sided) regression of V(critic input_k) on the GAE return.
4. The baseline (``advantage.baseline``; :mod:`marft_agents.learners.baselines` has the maths
   and its relation to GiGPO's anchor states and AT-GRPO's per-turn groups). ``critic``: steps
   1-3. ``group``: decision k's advantage is its Monte Carlo return minus the leave-one-out mean
   of the returns at position k in the other episodes of its task group (``schedule.group_size``
   episodes per task); no critic is valued or trained (step 3 does not run). ``group_critic``:
   the same LOO anchor, plus, from the second decision on, ``V(s_k)`` minus the LOO mean of the
   other episodes' ``V`` at position k: the first decision (whose state the group shares) is the
   anchor exactly, and the critic, regressed on the return's residual over the anchor, values
   only what the group mean cannot see (a teammate's message, a feedback round). Both group
   baselines use Monte Carlo returns (``ppo.lam`` unused) and reduce to each other when the
   critic outputs a constant.

Single-agent PPO is this learner on a one-role profile (e.g. ``profile: solo``): the decision
sequence is then one agent's sequence of rounds.
"""

from __future__ import annotations

import torch

from marft_agents import ppo_math as pm
from marft_agents.learners.base import BaseLearner, PolicyUnits, Sample, pad_stack, sample_from_decision
from marft_agents.learners.baseline_choice import GroupBaselines
from marft_agents.learners.registry import declared_by
from marft_agents.episodes import Rollout


@declared_by("mappo_action")  # value_mode "state", the baselines: learners/registry.py
class ActionLevelMAPPO(GroupBaselines, BaseLearner):
    """MAPPO with one action per utterance (MARFT-A)."""

    unit = "decision"

    def build_samples(self, rollout: Rollout) -> list[Sample]:
        """Steps 1 and 4: the registered baseline estimator's advantages and critic targets
        (``advantage.baseline``: :mod:`marft_agents.learners.estimators`), one sample per decision."""
        critic = self.critic_values is not None
        targets = self.baseline_targets(rollout, (lambda d: d.value) if critic else None)
        zero = torch.zeros(())
        return [sample_from_decision(d, self.policy.critic_for(d.agent_id) if critic else "",
                                     torch.tensor(float(d.value)) if critic else zero,
                                     torch.tensor(advantage), torch.tensor(target) if critic else zero)
                for d, advantage, target in targets]

    def policy_units(self, samples: list[Sample], logprobs: torch.Tensor, mask: torch.Tensor) -> PolicyUnits:
        """One unit per decision: the utterance's (sum or mean) log-prob."""
        old = pad_stack([s.old_logprobs for s in samples], logprobs.shape[1]).to(logprobs.device)  # [B, T]
        normalize = self.ppo.logprob_reduction == "mean"
        return PolicyUnits(
            logprobs=pm.sequence_logprob(logprobs, mask, normalize),  # [B]
            old_logprobs=pm.sequence_logprob(old, mask, normalize),  # [B]
            advantages=torch.stack([s.advantages for s in samples]).to(logprobs.device),  # [B]
        )
