"""A token's log-prob and the draw of the next token: the arithmetic every engine shares.

``scaled_logprobs`` is THE definition of a token's log-prob (``log_softmax(logits.float() /
temperature)``): the decoding loops record it while sampling and the training passes recompute it
(``marft_agents/model/scoring.py``, ``engine/head_logprobs.py``), so PPO ratios start at exactly 1 up to
float rounding. ``pick_tokens`` draws from that distribution (temperature, optional top-k/top-p,
or greedy); ``Sampled`` is what a decoding loop returns per row.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from marft_agents.settings.sampling import SamplingConfig


@dataclass
class Sampled:
    """One row's decoded response, as every engine returns it (``engine.sample``)."""

    response_ids: list[int]
    """Sampled tokens, the stop token included when one was emitted."""
    logprobs: list[float]
    """``scaled_logprobs`` of each token of ``response_ids``."""
    finished: bool
    """True when a stop token ended the response, False when ``max_new_tokens`` cut it."""


def scaled_logprobs(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """``log_softmax(logits / temperature)`` in float32: THE definition of a token's log-prob.

    Generation and training both call this, so old and new log-probs use identical arithmetic.
    """
    return torch.log_softmax(logits.float() / temperature, dim=-1)


def pick_tokens(logp: torch.Tensor, cfg: SamplingConfig, generator: torch.Generator | None,
                ) -> torch.Tensor:
    """Next token per row from scaled log-probs ``[b, V]`` -> ``[b]``."""
    if not cfg.do_sample:
        return logp.argmax(dim=-1)
    probs = logp.exp()  # [b, V]
    if cfg.top_k > 0 and cfg.top_k < probs.shape[-1]:
        kth = probs.topk(cfg.top_k, dim=-1).values[:, -1:]  # [b, 1]
        probs = probs.masked_fill(probs < kth, 0.0)
    if cfg.top_p < 1.0:
        sorted_p, order = probs.sort(dim=-1, descending=True)  # [b, V]
        # drop a token when the mass before it already reaches top_p (the top one always stays)
        drop_sorted = (sorted_p.cumsum(-1) - sorted_p) >= cfg.top_p * sorted_p.sum(-1, True)
        probs = probs.scatter(-1, order, sorted_p.masked_fill(drop_sorted, 0.0))
    # Inverse-CDF sampling with one uniform per row: torch.multinomial draws ~V random numbers
    # per row on CPU, a large share of a decode step. cumsum
    # accumulates in double on CPU, so each token's probability is off by at most one float32
    # rounding of the running sum (~1e-7); zero-probability tokens (filtered by top-k/top-p)
    # own an empty interval and are never hit.
    cdf = probs.cumsum(dim=-1)  # [b, V]
    u = torch.rand(cdf.shape[0], 1, generator=generator, device=cdf.device,
                   dtype=cdf.dtype) * cdf[:, -1:]  # [b, 1] in [0, total)
    return torch.searchsorted(cdf, u, right=True).squeeze(-1).clamp_(max=cdf.shape[-1] - 1)
