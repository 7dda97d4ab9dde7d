"""The log-prob targets a PPO update compares against, prepared before its steps: the
reference model's (KL term) and, under ``ppo.recompute_old_logprobs``, the old log-probs from the
learner's own forward passes. A mixin of :class:`marft_agents.learners.base.BaseLearner`, which
provides ``policy``, ``temperature``, ``data_parallel``, ``_local`` and ``_micro_batches``.
"""

from __future__ import annotations

import torch

from marft_agents.learners.samples import Sample


class LogprobTargets:
    """Reference and recomputed old log-probs of the samples of one update."""

    reuse_first_forward = True
    """Under ``ppo.recompute_old_logprobs``, take the first minibatch's old log-probs from its
    own policy pass instead of a rescoring pass (the same numbers: see
    ``_rescore_old_logprobs``). False rescores every minibatch: the reference the tests compare."""

    _old_from_forward: frozenset[int] | set[int] = frozenset()
    """Samples (by ``id``) whose old log-probs the next policy pass sets."""

    @torch.no_grad()
    def _attach_reference_logprobs(self, samples: list[Sample]) -> None:
        local = self._local(samples)
        for chunk in self._micro_batches([samples[i] for i in local]):
            stats = self.policy.reference_logprobs(
                [s.prompt_ids for s in chunk], [s.response_ids for s in chunk], self.temperature,
                prefix_lens=[s.prefix_len for s in chunk], adapters=[s.adapter for s in chunk],
            )
            for b, s in enumerate(chunk):
                s.ref_logprobs = stats.logprobs[b, : len(s.response_ids)].detach().float().cpu()
        self.data_parallel.share_attribute(samples, local, "ref_logprobs")

    @torch.no_grad()
    def _rescore_old_logprobs(self, batches: list[list[Sample]]) -> None:
        """Old log-probs from the learner's own forward pass, micro-batch by micro-batch exactly
        as ``_step`` will run them (``ppo.recompute_old_logprobs``).

        The first minibatch is not rescored here: no policy optimizer step comes before its own
        forward pass (the critic's steps change only critic adapters), so that pass computes the
        very numbers a rescoring pass would, and ``_policy_micro`` takes them from it (a quarter
        of the rescoring at four minibatches). With several ranks every batch is rescored, as the
        ranks share the results."""
        self._old_from_forward = set()
        if batches and self.data_parallel.world.world_size == 1 and self.reuse_first_forward:
            self._old_from_forward = {id(s) for s in batches[0]}
            batches = batches[1:]
        for batch in batches:
            local = self._local(batch)
            for micro in self._micro_batches([batch[i] for i in local], by="adapter"):
                stats = self.policy.token_logprobs(
                    micro[0].adapter, [s.prompt_ids for s in micro], [s.response_ids for s in micro],
                    self.temperature, with_entropy=False, prefix_lens=[s.prefix_len for s in micro],
                )
                for b, s in enumerate(micro):
                    s.old_logprobs = stats.logprobs[b, : len(s.response_ids)].float().cpu()
            self.data_parallel.share_attribute(batch, local, "old_logprobs")

    def _take_old_logprobs(self, micro: list[Sample], logprobs: torch.Tensor) -> None:
        """Set the old log-probs of the samples ``_rescore_old_logprobs`` left to this pass from
        its own ``logprobs [B, T]`` (no optimizer step came between)."""
        if not self._old_from_forward:
            return
        for b, s in enumerate(micro):
            if id(s) in self._old_from_forward:
                s.old_logprobs = logprobs[b, : len(s.response_ids)].detach().cpu().clone()
                self._old_from_forward.discard(id(s))
