"""RLOO: REINFORCE with a leave-one-out, per-agent baseline, as an outside marft learner.

Each task is played ``group_size`` times. A decision of agent ``a`` in episode ``e`` is
pushed along ``A = R_a(e) - mean of R_a over the other episodes of e's group``, where ``R_a`` is
the agent's PettingZoo return (the rewards the env gave it). No critic: ``value_mode = None``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from marft_agents.engine.attention import training_passes


@dataclass
class RLOOOptions:
    """The ``learner:`` section of a config that uses ``algorithm: rloo``."""

    group_size: int = 4
    """Episodes per task (>= 2: the baseline of one is the mean of the others)."""
    lr: float = 1e-4
    """AdamW learning rate of every agent adapter."""
    max_grad_norm: float = 1.0
    """Clip of the global gradient norm, per update."""

    def __post_init__(self) -> None:
        if self.group_size < 2:
            raise ValueError(f"group_size must be >= 2, got {self.group_size}")


class RLOO:
    """REINFORCE with a leave-one-out baseline per agent (the module docstring)."""

    value_mode = None  # needs no critic: the Trainer builds none
    options_class = RLOOOptions

    def __init__(self, policy, cfg, agent_ids):
        # Seats played by a script (cfg.scripted_seats) were not sampled: never train them.
        scripted = getattr(cfg, "scripted_seats", None) or {}
        self.policy, self.opts = policy, cfg.learner
        self.agent_ids = [a for a in agent_ids if a not in scripted]
        self.group_size = self.opts.group_size  # the collector plays each task this many times
        self.temperature = cfg.sampling.temperature
        adapters = sorted({policy.adapter_for(a) for a in self.agent_ids})
        params = [p for name in adapters for p in policy.adapter_parameters(name)]
        self.optimizer = torch.optim.AdamW(params, lr=self.opts.lr)

    def trainable_agents(self, update):
        return list(self.agent_ids)

    def advantages(self, rollout):
        """Per decision: its agent's return minus the mean of the other episodes in the group."""
        out, groups = [], rollout.groups()
        for d in rollout.decisions:
            group = groups[d.group]
            mine = rollout.episodes[d.episode].agent_returns[d.agent_id]
            others = [rollout.episodes[e].agent_returns[d.agent_id] for e in group if e != d.episode]
            out.append(mine - sum(others) / len(others))
        return torch.tensor(out)

    def update(self, rollout, update):
        advantages = self.advantages(rollout)  # [N decisions]
        self.policy.set_trainable(set(self.agent_ids), critic=False)
        self.optimizer.zero_grad(set_to_none=True)
        total = 0.0
        with training_passes():  # the attention path of training passes (faster backward in bf16 on a CPU)
            for adapter in sorted({d.adapter for d in rollout.decisions if not d.scripted}):
                rows = [i for i, d in enumerate(rollout.decisions) if d.adapter == adapter and not d.scripted]
                ds = [rollout.decisions[i] for i in rows]
                stats = self.policy.token_logprobs(adapter, [d.prompt_ids for d in ds], [d.response_ids for d in ds],
                                                   self.temperature, prefix_lens=[d.prefix_len for d in ds])
                seq_logprob = stats.logprobs.sum(-1)  # TokenStats.logprobs [B, T] (0 on padding) -> [B]
                loss = -(advantages[rows].to(seq_logprob.device) * seq_logprob).sum() / len(rollout.decisions)
                loss.backward()  # one adapter's graph at a time (what gradient checkpointing requires)
                total += float(loss.detach())
        params = [p for g in self.optimizer.param_groups for p in g["params"]]
        grad_norm = torch.nn.utils.clip_grad_norm_(params, self.opts.max_grad_norm)
        self.optimizer.step()
        return {"losses/policy_loss": total, "grad/policy_norm": float(grad_norm),
                "rloo/advantage_abs_mean": float(advantages.abs().mean())}

    def state_dict(self):
        return {"optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state):
        self.optimizer.load_state_dict(state["optimizer"])
