"""Batched sampling with per-token log-probs, and the padding layout shared with training.

A small decoding loop instead of ``model.generate`` because RL rollouts need three things that
``generate`` makes awkward or slow:

* the log-prob of every sampled token under the *training-time* distribution
  (``log_softmax(logits.float() / temperature)``, computed by ``scaled_logprobs``, the very
  function the training forward pass uses), without keeping ``[steps, B, V]`` score tensors;
* a sampling distribution that is exactly temperature (+ optional top-p / top-k) and nothing
  else: ``generate`` silently merges the checkpoint's ``generation_config`` (e.g. a Hub
  ``repetition_penalty`` or ``top_k=20``) into user settings;
* rows that have emitted a stop token are dropped from the batch (and from the KV cache), so a
  batch with one long answer does not keep paying for the short ones.

Layout: prompts are left padded, so every row's next token is appended in the same column;
position ids count real tokens only (``cumsum(mask) - 1``), as ``generate`` does, which makes a
row's numbers independent of how much padding its batch needed.

Shared prefixes: rows that declare the same leading ``prefix_len`` tokens (in MARFT, an agent's
system turn, ~45 of its ~60-110 prompt tokens on Arithmetic) have that prefix computed ONCE, as a
batch-1 forward whose KV cache is repeated for every row; the rest is laid out as usual after it
(``[prefix | pads | suffix | response | pads]``, the pads masked, positions still counting real
tokens only). Mathematically nothing changes; in float32 the results match the unshared layout
to ~3e-5. In bfloat16 the split point moves rounding by up to ~0.5 nats on unlucky tokens, so
the split is part of a row's definition: sampling, the log-prob recompute and the training
forward all use the row's own ``prefix_len``, never one inferred from whatever batch it is in.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from marft_agents.settings.sampling import ENGINES, SamplingConfig


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
    entry of ``response_ids``."""
    finished: bool = True
    """True when a stop token ended the response, False when ``max_new_tokens`` cut it."""
    prefix_len: int = 0
    """The request's ``prefix_len`` as actually used (capped to leave one suffix token)."""


def scaled_logprobs(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """``log_softmax(logits / temperature)`` in float32: THE definition of a token's log-prob.

    Generation and training both call this, so old and new log-probs use identical arithmetic.
    """
    return torch.log_softmax(logits.float() / temperature, dim=-1)


def left_pad(seqs: Sequence[Sequence[int]], pad_id: int, device: torch.device | str = "cpu",
             ) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-pad token lists: ``ids [B, P]`` and ``mask [B, P]`` (1 = real token)."""
    if not seqs:
        raise ValueError("need at least one sequence")
    width = max(len(s) for s in seqs)
    if width == 0 or any(len(s) == 0 for s in seqs):
        raise ValueError("every prompt needs at least one token")
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for row, seq in enumerate(seqs):
        ids[row, width - len(seq):] = torch.as_tensor(list(seq), dtype=torch.long)
        mask[row, width - len(seq):] = 1
    return ids.to(device), mask.to(device)


def position_ids(mask: torch.Tensor) -> torch.Tensor:
    """Positions counting real tokens only (pads get 0): ``[B, L]`` from a ``[B, L]`` mask."""
    return (mask.long().cumsum(-1) - 1).clamp(min=0)


def effective_prefix_len(prompt: Sequence[int], prefix_len: int) -> int:
    """``prefix_len`` capped so that at least one prompt token follows the prefix (the logits
    that predict the first response token come from the last prompt token, which must be in the
    per-row part of the forward pass)."""
    if prefix_len < 0:
        raise ValueError(f"prefix_len must be >= 0, got {prefix_len}")
    return max(0, min(int(prefix_len), len(prompt) - 1))


def prefix_cache(forward, prefix: Sequence[int], batch: int, device: torch.device | str) -> object:
    """KV cache of ``prefix`` computed once (a ``[1, s]`` forward through ``forward``, the LM or
    its decoder) and repeated for ``batch`` rows. Differentiable: with grad on, the gradient of
    every row flows back into the one prefix pass."""
    ids = torch.as_tensor([list(prefix)], dtype=torch.long, device=device)  # [1, s]
    pos = torch.arange(ids.shape[1], device=device)[None]  # [1, s]
    kwargs = {"logits_to_keep": 1} if hasattr(forward, "get_output_embeddings") else {}
    cache = forward(input_ids=ids, position_ids=pos, use_cache=True, **kwargs).cache
    cache.batch_repeat_interleave(batch)
    return cache


def after_prefix(mask: torch.Tensor, prefix_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """For per-row tokens laid out with ``mask [B, L]`` after a shared prefix of ``prefix_len``
    tokens: the full attention mask ``[B, prefix_len + L]`` and the positions ``[B, L]``."""
    full = torch.cat([mask.new_ones(mask.shape[0], prefix_len), mask], dim=1)
    return full, position_ids(mask) + prefix_len


def _pick(logp: torch.Tensor, cfg: SamplingConfig, generator: torch.Generator | None,
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
    # Inverse-CDF sampling with one uniform per row. torch.multinomial draws ~V random numbers
    # per row on CPU (~60 ms per step at batch 32 with a 49k vocabulary, a third of a decode
    # step); this costs ~1.5 ms. cumsum accumulates in double on CPU, so each token's
    # probability is off by at most one float32 rounding of the running sum (~1e-7);
    # zero-probability tokens (filtered by top-k/top-p) own an empty interval and are never hit.
    cdf = probs.cumsum(dim=-1)  # [b, V]
    u = torch.rand(cdf.shape[0], 1, generator=generator, device=cdf.device,
                   dtype=cdf.dtype) * cdf[:, -1:]  # [b, 1] in [0, total)
    return torch.searchsorted(cdf, u, right=True).squeeze(-1).clamp_(max=cdf.shape[-1] - 1)


@dataclass
class _Sampled:
    response_ids: list[int]
    logprobs: list[float]
    finished: bool


def sample_batch(
    model: torch.nn.Module,
    prompts: Sequence[Sequence[int]],
    cfg: SamplingConfig,
    stop_ids: Sequence[int],
    pad_id: int,
    generator: torch.Generator | None = None,
    prune_fraction: float = 0.25,
    prefix_len: int = 0,
) -> list[_Sampled]:
    """Decode ``prompts`` as one batch with ``model`` (a causal LM, adapters already chosen).

    ``prefix_len > 0``: every prompt starts with the same ``prefix_len`` tokens (checked), which
    are computed once (see the module docstring); pass an ``effective_prefix_len``.

    Rows that emitted a stop token are dropped from the batch once they make up at least
    ``prune_fraction`` of it (dropping copies the KV cache, so doing it on every finish would
    cost more than it saves on big batches).
    """
    device = next(model.parameters()).device
    cache = None
    if prefix_len:
        shared = list(prompts[0][:prefix_len])
        if any(list(p[:prefix_len]) != shared or len(p) <= prefix_len for p in prompts):
            raise ValueError(f"prefix_len={prefix_len}: every prompt must start with the same "
                             f"{prefix_len} tokens and have at least one token after them")
        cache = prefix_cache(model, shared, len(prompts), device)
        prompts = [p[prefix_len:] for p in prompts]
    ids, mask = left_pad(prompts, pad_id, device)  # [B, P] (P: tokens after the prefix)
    mask, pos = after_prefix(mask, prefix_len)  # [B, s + P], [B, P]
    batch = ids.shape[0]
    stop = torch.as_tensor(sorted(set(stop_ids)), dtype=torch.long, device=device)
    out_tokens = torch.full((batch, cfg.max_new_tokens), pad_id, dtype=torch.long, device=device)
    out_logp = torch.zeros((batch, cfg.max_new_tokens), dtype=torch.float32, device=device)
    lengths = torch.zeros(batch, dtype=torch.long, device=device)
    finished = torch.zeros(batch, dtype=torch.bool, device=device)

    rows = torch.arange(batch, device=device)  # original index of each row still in the batch
    done = torch.zeros(batch, dtype=torch.bool, device=device)  # per row still in the batch
    out = model(input_ids=ids, attention_mask=mask, position_ids=pos, cache=cache,
                use_cache=True, logits_to_keep=1)
    cache = out.cache
    can_prune = True
    for step in range(cfg.max_new_tokens):
        logp = scaled_logprobs(out.logits[:, -1], cfg.temperature)  # [b, V]
        token = _pick(logp, cfg, generator)  # [b]
        token_logp = logp.gather(-1, token[:, None]).squeeze(-1)  # [b]
        live = ~done
        out_tokens[rows[live], step] = token[live]
        out_logp[rows[live], step] = token_logp[live]
        lengths[rows[live]] += 1
        now_stopped = live & torch.isin(token, stop)
        finished[rows[now_stopped]] = True
        done = done | now_stopped
        n_done = int(done.sum())
        if n_done == done.numel() or step == cfg.max_new_tokens - 1:
            break
        if can_prune and n_done > 0 and n_done >= prune_fraction * done.numel():
            keep = (~done).nonzero().squeeze(-1)  # [b']
            try:
                cache.batch_select_indices(keep)
            except (AttributeError, NotImplementedError):
                can_prune = False  # an exotic cache type: keep decoding finished rows
            else:
                rows, done, token, mask, pos = (rows[keep], done[keep], token[keep],
                                                mask[keep], pos[keep])
        mask = torch.cat([mask, mask.new_ones(mask.shape[0], 1)], dim=1)  # [b, L+1]
        pos = pos[:, -1:] + 1  # [b, 1]
        out = model(input_ids=token[:, None], attention_mask=mask, position_ids=pos,
                    cache=cache, use_cache=True, logits_to_keep=1)

    tokens_cpu, logp_cpu = out_tokens.cpu(), out_logp.cpu()
    lengths_cpu, finished_cpu = lengths.cpu().tolist(), finished.cpu().tolist()
    return [
        _Sampled(tokens_cpu[row, :n].tolist(), logp_cpu[row, :n].tolist(), bool(fin))
        for row, (n, fin) in enumerate(zip(lengths_cpu, finished_cpu))
    ]


@dataclass
class PackedBatch:
    """Prompts + responses laid out for one training forward pass.

    Row b is ``[pads | prompt_b | response_b | pads]``: prompts are left padded to a common
    width ``P`` so that response token j of every row sits in column ``P + j``, and the logits
    that predict it are those of column ``P - 1 + j``. With a shared prefix of ``s`` tokens,
    "prompt" means the tokens after it: ``input_ids`` holds only those columns, and the prefix
    enters as a KV cache (``prefix_cache(prefix_ids)``) that the attention mask covers first.
    """

    input_ids: torch.Tensor
    """``[B, P + T]`` token ids (pad where ``attention_mask`` is 0)."""
    attention_mask: torch.Tensor
    """``[B, s + P + T]`` 1 for real tokens (the ``s`` prefix columns first)."""
    position_ids: torch.Tensor
    """``[B, P + T]`` positions counting real tokens only (prefix included), as during
    generation."""
    response_ids: torch.Tensor
    """``[B, T]`` response tokens, right padded."""
    response_mask: torch.Tensor
    """``[B, T]`` bool, True on real response tokens."""
    prompt_width: int
    """``P``."""
    prefix_ids: list[int] = field(default_factory=list)
    """The ``s`` prefix tokens every row shares (empty: no shared prefix)."""


def pack(prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]], pad_id: int,
         device: torch.device | str = "cpu", prefix_len: int = 0) -> PackedBatch:
    """Lay out (prompt, response) pairs as described in ``PackedBatch``; with ``prefix_len``,
    every prompt must start with the same ``prefix_len`` tokens and have one more after them."""
    if len(prompts) != len(responses):
        raise ValueError(f"got {len(prompts)} prompts but {len(responses)} responses; "
                         f"they must pair up one to one")
    prefix: list[int] = []
    if prefix_len:
        prefix = list(prompts[0][:prefix_len])
        if any(list(p[:prefix_len]) != prefix or len(p) <= prefix_len for p in prompts):
            raise ValueError(f"prefix_len={prefix_len}: every prompt must start with the same "
                             f"{prefix_len} tokens and have at least one token after them")
        prompts = [p[prefix_len:] for p in prompts]
    ids, mask = left_pad(prompts, pad_id)  # [B, P]
    width = max((len(r) for r in responses), default=0)
    if width == 0:
        raise ValueError("every response is empty: nothing to score")
    resp = torch.full((len(responses), width), pad_id, dtype=torch.long)
    resp_mask = torch.zeros((len(responses), width), dtype=torch.bool)
    for row, seq in enumerate(responses):
        resp[row, :len(seq)] = torch.as_tensor(list(seq), dtype=torch.long)
        resp_mask[row, :len(seq)] = True
    full_ids = torch.cat([ids, resp], dim=1)  # [B, P + T]
    full_mask = torch.cat([mask, resp_mask.long()], dim=1)  # [B, P + T]
    attention, positions = after_prefix(full_mask, len(prefix))  # [B, s + P + T], [B, P + T]
    return PackedBatch(
        input_ids=full_ids.to(device), attention_mask=attention.to(device),
        position_ids=positions.to(device), response_ids=resp.to(device),
        response_mask=resp_mask.to(device), prompt_width=ids.shape[1], prefix_ids=prefix,
    )


def sampler_for(engine: str):
    """The decoding function of ``engine`` (see ``SamplingConfig.engine``); all share
    ``sample_batch``'s signature."""
    if engine == "legacy":
        return sample_batch
    if engine in ("fast", "direct"):
        from marft_agents.fast_decode import fast_sample_batch  # imports this module

        return functools.partial(fast_sample_batch, direct=True) if engine == "direct" else fast_sample_batch
    raise ValueError(f"unknown sampling engine {engine!r}; choose one of {list(ENGINES)}")
