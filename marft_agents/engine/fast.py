"""The ``fast`` decoding loop (``sampling.engine: fast``): the legacy loop with less work per step.

Same contract, layout and numbers as ``engine/legacy.py``'s ``sample_batch`` (prompts left padded,
shared prefix computed once, finished rows pruned, log-probs those of ``scaled_logprobs``), with
three changes that the rollout profile (``python benchmarks/profile_rollout.py --engine legacy``)
pointed at:

* **preallocated KV cache** (``engine/kv_cache.py``): every layer's cache is written in place
  into a buffer sized for prefix + prompt + response instead of growing by ``torch.cat``;
* **one pass over the vocabulary to score, one to draw**: the temperature is applied in place,
  the log-normaliser comes from one max pass and one exp pass (``exp`` written into a reused
  buffer), and the draw is a two-level inverse CDF: per-block sums of those probabilities pick
  a block, and a cumulative sum over that block only (``BLOCK`` entries per row) picks the
  token. The sampled token's log-prob is ``(x - max) - log(sum(exp(x - max)))`` on ``x =
  logits.float() / temperature``: the formula ``log_softmax`` evaluates, with the sum
  accumulated in a different order (a difference of float rounding, ~1e-7 relative);
* **fewer tensor operations per step** in the bookkeeping (one preallocated attention mask
  that each step views a longer slice of; token and log-prob columns written per step).

Filtered sampling (``top_k``/``top_p``) and greedy decoding use ``engine.sampling.pick_tokens``
on the full log-probs, exactly as the legacy loop does; only plain temperature sampling (the
training setting) takes the blocked draw. With ``direct=True`` (the ``direct`` engine) the decode
steps run through ``engine/direct.py``'s ``DirectDecoder`` where it supports the model.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from marft_agents.engine.direct import DirectDecoder
from marft_agents.engine.kv_cache import reserved_cache
from marft_agents.engine.layout import after_prefix, left_pad
from marft_agents.engine.sampling import Sampled, pick_tokens, scaled_logprobs
from marft_agents.settings.sampling import SamplingConfig

BLOCK = 512
"""Vocabulary entries per block of the two-level draw (the last block may be shorter)."""


def draw_and_score(logits: torch.Tensor, temperature: float, generator: torch.Generator | None,
                   probs: torch.Tensor, work: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample one token per row from ``softmax(logits / T)`` and return it with its log-prob.

    ``logits [b, V]`` is overwritten when it is float32 (it is the step's own output); ``probs``
    and ``work`` are float32 scratch buffers of at least ``b * V`` entries (``work`` receives
    the float32 copy of lower-precision logits: a fresh tensor per step costs more in page
    faults than the conversion itself). Returns
    ``(token [b], logp [b])``.
    """
    rows, vocab = logits.shape
    if logits.dtype == torch.float32:
        x = logits  # [b, V]
    elif work is not None:
        x = work[:rows * vocab].view(rows, vocab).copy_(logits)
    else:
        x = logits.float()
    x.div_(temperature)  # x = logits / T, as scaled_logprobs computes it
    top = x.amax(dim=-1, keepdim=True)  # [b, 1]
    x.sub_(top)  # x - max
    p = probs[:rows * vocab].view(rows, vocab)
    torch.exp(x, out=p)  # [b, V] unnormalised probabilities
    blocks = -(-vocab // BLOCK)
    if vocab % BLOCK:  # the last block is short: sum it apart
        full = (vocab // BLOCK) * BLOCK
        block_sums = torch.cat([p[:, :full].view(rows, -1, BLOCK).sum(-1),
                                p[:, full:].sum(-1, keepdim=True)], dim=1)  # [b, nb]
    else:
        block_sums = p.view(rows, blocks, BLOCK).sum(-1)  # [b, nb]
    block_cdf = block_sums.cumsum(-1)  # [b, nb]
    total = block_cdf[:, -1:]  # [b, 1]
    u = torch.rand(rows, 1, generator=generator, device=x.device, dtype=torch.float32) * total
    u = torch.minimum(u, torch.nextafter(total, torch.zeros_like(total)))  # [b, 1] in [0, total)
    block = torch.searchsorted(block_cdf, u, right=True).clamp_(max=blocks - 1)  # [b, 1]
    before = torch.where(block > 0, block_cdf.gather(-1, (block - 1).clamp_(min=0)), 0.0)  # [b, 1]
    # cumulative sum inside the chosen block only: [b, BLOCK] (padded with 0 past the vocab)
    cols = block * BLOCK + torch.arange(BLOCK, device=x.device)  # [b, BLOCK]
    inside = p.gather(-1, cols.clamp(max=vocab - 1)).masked_fill_(cols >= vocab, 0.0).cumsum(-1)
    chosen = block_sums.gather(-1, block)  # [b, 1]
    # u's offset into the block, rescaled to the in-block sum (they differ by rounding) and
    # kept below it, so the pick is always a token with a non-empty interval
    offset = ((u - before).clamp_(min=0) * (inside[:, -1:] / chosen))
    offset = torch.minimum(offset, torch.nextafter(inside[:, -1:], torch.zeros_like(chosen)))
    within = torch.searchsorted(inside, offset, right=True).clamp_(max=BLOCK - 1)  # [b, 1]
    token = (block * BLOCK + within).squeeze(-1).clamp_(max=vocab - 1)  # [b]
    logp = x.gather(-1, token[:, None]).squeeze(-1) - total.squeeze(-1).log()  # [b]
    return token, logp


def fast_sample_batch(
    model: torch.nn.Module,
    prompts: Sequence[Sequence[int]],
    cfg: SamplingConfig,
    stop_ids: Sequence[int],
    pad_id: int,
    generator: torch.Generator | None = None,
    prune_fraction: float = 0.25,
    prefix_len: int = 0,
    direct: bool = False,
) -> list[Sampled]:
    """``engine.legacy.sample_batch`` (same arguments and results) with the changes listed in
    the module docstring. ``direct``: run the decode steps with ``engine.direct.DirectDecoder``
    where it supports the model (the ``direct`` engine), else the model's own forward.

    1. Prefill: the shared prefix into a cache reserved for the whole run, then the left-padded
       prompts after it (``_prefill``).
    2. Per step: draw a token per row still in the batch (``_draw``), write it into the row's
       output (``_Outputs.record``), stop when every row has ended or the step budget is spent.
    3. Prune: once ``prune_fraction`` of the rows have ended, drop them from the cache and the
       per-row state (``_drop_rows``); then run the decode step (``_decode_step``).
    """
    device = next(model.parameters()).device
    shared, prompts = _split_prefix(prompts, prefix_len)
    ids, mask = left_pad(prompts, pad_id, device)  # [B, P]
    batch, steps = ids.shape[0], cfg.max_new_tokens
    mask, pos, cache, logits = _prefill(model, shared, ids, mask, steps, device)
    width = mask.shape[1]
    # the whole run's attention mask at once: step t attends to the first width + t columns
    full_mask = torch.cat([mask, mask.new_ones(batch, steps)], dim=1)  # [B, s + P + steps]
    stop = torch.as_tensor(sorted(set(stop_ids)), dtype=torch.long, device=device)
    outputs = _Outputs.empty(batch, steps, pad_id, device)
    rows = torch.arange(batch, device=device)  # original index of each row still in the batch
    done = torch.zeros(batch, dtype=torch.bool, device=device)  # per row still in the batch
    decoder = DirectDecoder.build(model, cache) if direct else None
    attend = full_mask.bool() if decoder is not None else None  # [B, s + P + steps]
    blocked = cfg.do_sample and cfg.top_k == 0 and cfg.top_p >= 1.0
    scratch = torch.empty(batch * logits.shape[-1], dtype=torch.float32, device=device)
    work = (torch.empty_like(scratch) if blocked and logits.dtype != torch.float32 else None)
    pos = pos[:, -1:]  # [b, 1]
    for step in range(steps):
        token, token_logp = _draw(logits, cfg, generator, blocked, scratch, work)
        outputs.record(step, rows, done, token, token_logp, stop)
        n_done = int(done.sum())
        if n_done == done.numel() or step == steps - 1:
            break
        if n_done > 0 and n_done >= prune_fraction * done.numel():
            keep = (~done).nonzero().squeeze(-1)  # [b']
            pruned, attend = _drop_rows(keep, decoder, cache, attend)
            if not pruned:
                prune_fraction = float("inf")  # an exotic cache type: keep decoding finished rows
            else:
                rows, done, token, full_mask, pos = (rows[keep], done[keep], token[keep],
                                                     full_mask[keep], pos[keep])
        pos = pos + 1  # [b, 1]
        logits = _decode_step(model, decoder, cache, token, pos, full_mask, attend, width + step)
    return outputs.samples()


def _split_prefix(prompts: Sequence[Sequence[int]], prefix_len: int
                  ) -> tuple[list[int], list[Sequence[int]]]:
    """``(the shared prefix, each prompt after it)``; refuses prompts that do not all start with
    the same ``prefix_len`` tokens or have nothing after them (the prefix is computed once)."""
    shared = list(prompts[0][:prefix_len])
    if prefix_len and any(list(p[:prefix_len]) != shared or len(p) <= prefix_len for p in prompts):
        raise ValueError(f"prefix_len={prefix_len}: every prompt must start with the same "
                         f"{prefix_len} tokens and have at least one token after them")
    return shared, [p[prefix_len:] for p in prompts]


def _prefill(model: torch.nn.Module, shared: list[int], ids: torch.Tensor, mask: torch.Tensor, steps: int,
             device: torch.device) -> tuple[torch.Tensor, torch.Tensor, object, torch.Tensor]:
    """The prompts' forward pass after the ``shared`` prefix, into a KV cache reserved for
    prefix + prompt + ``steps`` tokens (written in place, never grown). Returns ``(mask [B, s +
    P], positions [B, P], cache, last logits [B, V])``."""
    prefix_len = len(shared)
    cache = reserved_cache(model, shared, ids.shape[0], prefix_len + ids.shape[1] + steps, device)
    mask, pos = after_prefix(mask, prefix_len)  # [B, s + P], [B, P]
    out = model(input_ids=ids, attention_mask=mask, position_ids=pos, cache=cache,
                use_cache=True, logits_to_keep=1)
    return mask, pos, out.cache, out.logits[:, -1]  # [b, V]


def _draw(logits: torch.Tensor, cfg: SamplingConfig, generator: torch.Generator | None, blocked: bool,
          scratch: torch.Tensor, work: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """One token per row and its log-prob, ``(token [b], logp [b])``: the blocked draw for plain
    temperature sampling, ``pick_tokens`` on the full log-probs otherwise (filters, greedy)."""
    if blocked:
        return draw_and_score(logits, cfg.temperature, generator, scratch, work)
    logp = scaled_logprobs(logits, cfg.temperature)  # [b, V]
    token = pick_tokens(logp, cfg, generator)  # [b]
    return token, logp.gather(-1, token[:, None]).squeeze(-1)  # [b], [b]


def _drop_rows(keep: torch.Tensor, decoder: DirectDecoder | None, cache: object,
               attend: torch.Tensor | None) -> tuple[bool, torch.Tensor | None]:
    """Keep only rows ``keep`` in the decoder's (or the model's) KV cache and in ``attend``.
    Returns ``(whether the cache could be pruned, attend)``: an exotic cache type cannot."""
    try:
        if decoder is not None:
            decoder.select(keep)
            attend = attend[keep]
        else:
            cache.batch_select_indices(keep)
    except (AttributeError, NotImplementedError):
        return False, attend
    return True, attend


def _decode_step(model: torch.nn.Module, decoder: DirectDecoder | None, cache: object, token: torch.Tensor,
                 pos: torch.Tensor, full_mask: torch.Tensor, attend: torch.Tensor | None, seen: int
                 ) -> torch.Tensor:
    """The next logits ``[b, V]`` after feeding ``token [b]`` at ``pos [b, 1]``, ``seen`` columns
    already in the cache: through the direct decoder where there is one, else the model."""
    if decoder is not None:
        return decoder.step(token, pos, seen, attend[:, :seen + 1])
    out = model(input_ids=token[:, None], attention_mask=full_mask[:, :seen + 1],
                position_ids=pos, cache=cache, use_cache=True, logits_to_keep=1)
    return out.logits[:, -1]  # [b, V]


@dataclass
class _Outputs:
    """What the loop writes per original row: its tokens and log-probs (``[B, steps]``), its
    length and whether it ended on a stop token (``[B]``)."""

    tokens: torch.Tensor
    logp: torch.Tensor
    lengths: torch.Tensor
    finished: torch.Tensor

    @classmethod
    def empty(cls, batch: int, steps: int, pad_id: int, device: torch.device) -> _Outputs:
        return cls(torch.full((batch, steps), pad_id, dtype=torch.long, device=device),
                   torch.zeros((batch, steps), dtype=torch.float32, device=device),
                   torch.zeros(batch, dtype=torch.long, device=device),
                   torch.zeros(batch, dtype=torch.bool, device=device))

    def record(self, step: int, rows: torch.Tensor, done: torch.Tensor, token: torch.Tensor,
               token_logp: torch.Tensor, stop: torch.Tensor) -> None:
        """Write step ``step``'s ``token``/``token_logp`` ``[b]`` of the rows not yet ``done``
        (``rows [b]``: their original indices) and mark, in ``done`` itself, those that stopped."""
        live = ~done
        live_rows = rows[live]
        self.tokens[live_rows, step] = token[live]
        self.logp[live_rows, step] = token_logp[live]
        self.lengths[live_rows] += 1
        now_stopped = live & torch.isin(token, stop)
        self.finished[rows[now_stopped]] = True
        done |= now_stopped

    def samples(self) -> list[Sampled]:
        """Each row's response up to its length, in the original row order."""
        tokens_cpu, logp_cpu = self.tokens.cpu(), self.logp.cpu()
        lengths_cpu, finished_cpu = self.lengths.cpu().tolist(), self.finished.cpu().tolist()
        return [
            Sampled(tokens_cpu[row, :n].tolist(), logp_cpu[row, :n].tolist(), bool(fin))
            for row, (n, fin) in enumerate(zip(lengths_cpu, finished_cpu))
        ]
