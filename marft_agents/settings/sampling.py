"""The ``sampling:`` section: how rollouts (and evaluations) decode.

Plain data; the decoding loops are in :mod:`marft_agents.engine` (``engine.sample`` runs the one
``engine`` names; ``engine/layout.py`` explains shared prefixes).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

ENGINES = ("direct", "fast", "legacy")
"""Decoding loops of our own (``marft_agents.engine.sampler_for`` returns each one's function),
run in-process on the policy's own model by ``engine.base.LoopEngine``."""
SAMPLING_ENGINES = (*ENGINES, "vllm")
"""Every sampling engine ``SamplingConfig.engine`` can name: the loops, and ``vllm``
(``engine.vllm_engine.VLLMEngine``, the optional extra ``marft[vllm]``).
``engine.base.ENGINE_CLASSES`` maps each to its class."""
SCORED_ELSEWHERE: frozenset[str] = frozenset({"vllm"})
"""The sampling engines whose log-probs come from other kernels than the learner's forward pass,
declared once, here, so that a config is validated without importing the engines (torch); an
engine class's ``scores_in_learner`` reads it (``engine.vllm_engine.VLLMEngine``)."""


@dataclass(frozen=True)
class SamplingConfig:
    """How to decode one batch of requests."""

    max_new_tokens: int = 256
    """Upper bound on response length (stop token included)."""
    temperature: float = 1.0
    """Softmax temperature (> 0). Also scales the returned log-probs, which is what the training
    forward pass must use for PPO ratios to start at exactly 1."""
    top_p: float = 1.0
    """Nucleus sampling mass (1.0 = off). Log-probs stay those of the untruncated distribution,
    so training configs must keep 1.0 (``TrainConfig.validate`` rejects it, as it does
    ``top_k``): the scored policy would not be the sampled one."""
    do_sample: bool = True
    """False = greedy (argmax), for evaluation."""
    top_k: int = 0
    """Keep only the k most likely tokens when sampling (0 = off; evaluation only, see ``top_p``)."""
    max_batch_size: int = 64
    """Rows per forward pass; larger groups are split (longest prompts first)."""
    stop_token_ids: tuple[int, ...] | None = None
    """Tokens that end a response. None = the tokenizer's eos plus the model's generation-config
    eos ids; () = never stop early (always ``max_new_tokens``)."""
    share_prefix: bool = True
    """Compute each agent's system turn once per batch instead of once per row (see "shared
    prefixes" in ``marft_agents/engine/layout.py``; the collector then records every decision's
    ``prefix_len`` so that training scores it the same way): much less work for prompts
    dominated by the system turn (measure: ``python benchmarks/bench_rollout.py`` with and
    without ``--no-share-prefix``). False = every row runs its whole prompt."""
    recompute_logprobs: bool = False
    """False: log-probs come from the decoding steps themselves (free; in float32 they match the
    training forward pass to ~1e-5, the two paths use different kernels). True: one extra
    no-grad training-style forward pass per batch (its cost: ``python benchmarks/bench_rollout.py
    --recompute-logprobs``), bit-identical to the training forward of a batch with the same
    padding. Caveat in bfloat16 on CPU: a row's numbers also move with its batch's padding width,
    by about as much as the decoding path differs, so a training minibatch padded differently
    from the sampling batch sees most of that noise again; in float32 both are ~1e-5."""

    engine: str = "direct"
    """Sampling engine (one of ``SAMPLING_ENGINES``; ``engine/base.py`` is the interface). A decoding
    loop of our own (in ``marft_agents/engine/``): ``direct`` (the ``fast``
    loop whose decode steps run ``engine.direct.DirectDecoder``: Llama-family layers computed
    against the weights with fused products and prepacked bf16 weights; other models fall back
    to ``fast``), ``fast`` (``engine.fast``: the model's own forward per step, one fused
    log-softmax pass and a blocked inverse-CDF draw, a preallocated KV cache) or ``legacy``
    (``engine.legacy``, the reference loop, kept for tests and same-run comparisons). All sample
    the same distribution and return the same log-probs up to float rounding. Or ``vllm``: one
    colocated vLLM engine serving every agent's adapter (multi-LoRA), exported after every update,
    asleep during it (``engine/vllm_engine.py``; GPU only, options in the ``vllm:`` section). Its
    log-probs come from other kernels than the learner's, so training with it needs
    ``ppo.recompute_old_logprobs`` (and may correct the gap with ``ppo.behaviour_is_cap``)."""

    def __post_init__(self) -> None:
        if self.engine not in SAMPLING_ENGINES:
            raise ValueError(f"sampling.engine must be one of {list(SAMPLING_ENGINES)}, got {self.engine!r}")
        if self.stop_token_ids is not None and not isinstance(self.stop_token_ids, tuple):
            # YAML gives lists; keep the config hashable (frozen dataclass)
            object.__setattr__(self, "stop_token_ids", tuple(int(t) for t in self.stop_token_ids))
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if not (self.temperature > 0 and math.isfinite(self.temperature)):
            raise ValueError(f"temperature must be a finite number > 0 (use do_sample=False "
                             f"for greedy decoding), got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0 (0 = off), got {self.top_k}")
        if self.max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1, got {self.max_batch_size}")
