"""The padding layout shared by decoding and training: left-padded prompts, positions that count
real tokens only, and shared prefixes computed once.

Layout: prompts are left padded, so every row's next token is appended in the same column;
position ids count real tokens only (``cumsum(mask) - 1``), as ``generate`` does, which makes a
row's numbers independent of how much padding its batch needed. ``pack`` lays out (prompt,
response) rows the same way for a training forward pass (``PackedBatch``).

Shared prefixes: rows that declare the same leading ``prefix_len`` tokens (in MARFT, an agent's
system turn, most of its prompt tokens) have that prefix computed ONCE, as a batch-1 forward
whose KV cache is repeated for every row (``prefix_cache``); the rest is laid out as usual after
it (``[prefix | pads | suffix | response | pads]``, the pads masked, positions still counting
real tokens only: ``after_prefix``). Mathematically nothing changes; in float32 the results
match the unshared layout to ~3e-5. In bfloat16 the split point moves rounding by up to ~0.5
nats on unlucky tokens, so the split is part of a row's definition: sampling, the log-prob
recompute and the training forward all use the row's own ``prefix_len``
(``effective_prefix_len``), never one inferred from whatever batch it is in.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch


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
