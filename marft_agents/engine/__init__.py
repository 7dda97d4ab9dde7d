"""How tokens are computed: the sampling engines a policy samples with, and the kernels its training
passes score with.

``MultiAgentPolicy.generate`` hands its requests to a sampling engine (``base``: the
interface, generate / sync after an update / suspend during it / close) that
``SamplingConfig.engine`` names. :class:`GenRequest` and :class:`Generation` are its request and
result types. The in-process engine (``base.LoopEngine``) groups requests by adapter
and shared prefix and calls one function per batch, :func:`sample`: decode a batch of prompts
with the loop ``SamplingConfig.engine`` names.

Why loops of our own instead of ``model.generate``: RL rollouts need

* the log-prob of every sampled token under the *training-time* distribution
  (``sampling.scaled_logprobs``, the very function the training forward pass uses), without
  keeping ``[steps, B, V]`` score tensors;
* a sampling distribution that is exactly temperature (+ optional top-p / top-k) and nothing
  else: ``generate`` silently merges the checkpoint's ``generation_config`` (e.g. a Hub
  ``repetition_penalty`` or ``top_k=20``) into user settings;
* rows that have emitted a stop token dropped from the batch (and from the KV cache), so a
  batch with one long answer does not keep paying for the short ones.

Modules:

* ``base``: the :class:`~marft_agents.engine.base.SamplingEngine` interface,
  its capabilities (``scores_in_learner``, ``devices``, ``mixes_adapters``) and ``LoopEngine``
  (the loops below); ``registry``: each engine name's class (``engine_class``);
* ``vllm_engine``: ``VLLMEngine`` (``sampling.engine: vllm``, the extra ``marft[vllm]``): one
  colocated vLLM engine per process, one LoRA adapter per agent per request, adapters exported
  under a new version after every update, asleep during it; its log-probs are the behaviour
  log-probs, the learner rescores the old ones;
* ``layout``: the padding layout shared by decoding and training, and shared prefixes computed
  once (its docstring says why a row's ``prefix_len`` is part of its definition);
* ``sampling``: the log-prob definition (``scaled_logprobs``) and the token draw;
* ``legacy``, ``fast``, ``direct``: the three loops (``sampling.engine: legacy | fast | direct``),
  same contract and numbers up to float rounding; ``legacy`` is the simple reference loop,
  ``fast`` preallocates the KV cache (``kv_cache``) and draws in two passes over the vocabulary,
  ``direct`` also runs Llama-family decode steps against the weights (``cpu_support`` probes the
  CPU's prepacked kernels it uses);
* ``head_logprobs``, ``attention``, ``compiled_norm``: the kernels of a PPO update's passes (fused
  LM head + log-probs, grouped-matmul attention, compiled RMSNorm), which must compute the same
  numbers as the samplers' ``scaled_logprobs``.

Measure the engines with ``python benchmarks/bench_rollout.py --engine all`` and the update's
kernels with ``python benchmarks/bench_update.py --dtype bfloat16 --paths fast,plain``
(docs/performance.md says which benchmark answers which question).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from marft_agents.engine.fast import fast_sample_batch
from marft_agents.engine.legacy import sample_batch
from marft_agents.engine.sampling import Sampled
from marft_agents.settings.sampling import ENGINES, SamplingConfig

__all__ = ["GenRequest", "Generation", "Sampled", "sample", "sampler_for"]


@dataclass
class GenRequest:
    """One prompt to complete with one agent's adapter."""

    agent_id: str
    """Whose adapter generates (see ``MultiAgentPolicy.adapter_for``)."""
    prompt_ids: list[int]
    """Token ids of the full prompt (e.g. from ``MultiAgentPolicy.chat_prompt_ids``)."""
    prefix_len: int = 0
    """Leading prompt tokens that other requests share (e.g. the system turn, see
    ``MultiAgentPolicy.shared_prefix_len``): requests with identical prefixes have it computed
    once. 0 = no sharing. Training must score the response with the same value."""


@dataclass
class Generation:
    """One sampled response."""

    agent_id: str
    """The requesting agent."""
    prompt_ids: list[int]
    """The prompt it was generated from (unchanged)."""
    response_ids: list[int]
    """Sampled tokens, the stop token included when one was emitted."""
    text: str
    """``response_ids`` decoded without special tokens."""
    logprobs: list[float]
    """Log-prob of each response token under ``log_softmax(logits / temperature)``, one per
    entry of ``response_ids``, as the engine computed it: the behaviour log-probs (an engine
    with ``scores_in_learner`` computes them with other kernels than the learner's)."""
    finished: bool = True
    """True when a stop token ended the response, False when ``max_new_tokens`` cut it."""
    prefix_len: int = 0
    """The request's ``prefix_len`` as actually used (capped to leave one suffix token): the
    split the learner scores the response with. (vLLM caches prefixes its own way and reports the
    capped request value, the split the loops would have used.)"""


def sampler_for(engine: str) -> Callable[..., list[Sampled]]:
    """The decoding function of ``engine`` (see ``SamplingConfig.engine``); all share
    ``legacy.sample_batch``'s signature."""
    if engine == "legacy":
        return sample_batch
    if engine == "fast":
        return fast_sample_batch
    if engine == "direct":
        return functools.partial(fast_sample_batch, direct=True)
    raise ValueError(f"unknown sampling engine {engine!r}; choose one of {list(ENGINES)}")


def sample(model: torch.nn.Module, prompts: Sequence[Sequence[int]], cfg: SamplingConfig,
           stop_ids: Sequence[int], pad_id: int, generator: torch.Generator | None = None,
           prefix_len: int = 0) -> list[Sampled]:
    """Decode ``prompts`` as one batch with ``model`` (a causal LM, adapter already chosen) by the
    engine ``cfg.engine`` names; one :class:`Sampled` per prompt, in order.

    ``prefix_len > 0``: every prompt starts with the same ``prefix_len`` tokens (checked), which
    are computed once; pass a ``layout.effective_prefix_len``. Sampling draws from ``generator``
    if given, else torch's global RNG.
    """
    return sampler_for(cfg.engine)(model, prompts, cfg, stop_ids, pad_id, generator, prefix_len=prefix_len)
