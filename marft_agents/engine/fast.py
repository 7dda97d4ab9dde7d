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
    where it supports the model (the ``direct`` engine), else the model's own forward."""
    device = next(model.parameters()).device
    shared = list(prompts[0][:prefix_len])
    if prefix_len and any(list(p[:prefix_len]) != shared or len(p) <= prefix_len for p in prompts):
        raise ValueError(f"prefix_len={prefix_len}: every prompt must start with the same "
                         f"{prefix_len} tokens and have at least one token after them")
    prompts = [p[prefix_len:] for p in prompts]
    ids, mask = left_pad(prompts, pad_id, device)  # [B, P]
    cache = reserved_cache(model, shared, ids.shape[0],
                           prefix_len + ids.shape[1] + cfg.max_new_tokens, device)
    mask, pos = after_prefix(mask, prefix_len)  # [B, s + P], [B, P]
    batch, steps = ids.shape[0], cfg.max_new_tokens
    width = mask.shape[1]
    # the whole run's attention mask at once: step t attends to the first width + t columns
    full_mask = torch.cat([mask, mask.new_ones(batch, steps)], dim=1)  # [B, s + P + steps]
    stop = torch.as_tensor(sorted(set(stop_ids)), dtype=torch.long, device=device)
    out_tokens = torch.full((batch, steps), pad_id, dtype=torch.long, device=device)
    out_logp = torch.zeros((batch, steps), dtype=torch.float32, device=device)
    lengths = torch.zeros(batch, dtype=torch.long, device=device)
    finished = torch.zeros(batch, dtype=torch.bool, device=device)
    rows = torch.arange(batch, device=device)  # original index of each row still in the batch
    done = torch.zeros(batch, dtype=torch.bool, device=device)  # per row still in the batch

    out = model(input_ids=ids, attention_mask=mask, position_ids=pos, cache=cache,
                use_cache=True, logits_to_keep=1)
    cache = out.cache
    logits = out.logits[:, -1]  # [b, V]
    decoder = DirectDecoder.build(model, cache) if direct else None
    attend = full_mask.bool() if decoder is not None else None  # [B, s + P + steps]
    blocked = cfg.do_sample and cfg.top_k == 0 and cfg.top_p >= 1.0
    scratch = torch.empty(batch * logits.shape[-1], dtype=torch.float32, device=device)
    work = (torch.empty_like(scratch) if blocked and logits.dtype != torch.float32 else None)
    pos = pos[:, -1:]  # [b, 1]
    for step in range(steps):
        if blocked:
            token, token_logp = draw_and_score(logits, cfg.temperature, generator, scratch, work)
        else:
            logp = scaled_logprobs(logits, cfg.temperature)  # [b, V]
            token = pick_tokens(logp, cfg, generator)  # [b]
            token_logp = logp.gather(-1, token[:, None]).squeeze(-1)  # [b]
        live = ~done
        live_rows = rows[live]
        out_tokens[live_rows, step] = token[live]
        out_logp[live_rows, step] = token_logp[live]
        lengths[live_rows] += 1
        now_stopped = live & torch.isin(token, stop)
        finished[rows[now_stopped]] = True
        done |= now_stopped
        n_done = int(done.sum())
        if n_done == done.numel() or step == steps - 1:
            break
        if n_done > 0 and n_done >= prune_fraction * done.numel():
            keep = (~done).nonzero().squeeze(-1)  # [b']
            try:
                if decoder is not None:
                    decoder.select(keep)
                    attend = attend[keep]
                else:
                    cache.batch_select_indices(keep)
            except (AttributeError, NotImplementedError):
                prune_fraction = float("inf")  # an exotic cache type: keep decoding finished rows
            else:
                rows, done, token, full_mask, pos = (rows[keep], done[keep], token[keep],
                                                     full_mask[keep], pos[keep])
        pos = pos + 1  # [b, 1]
        if decoder is not None:
            logits = decoder.step(token, pos, width + step, attend[:, :width + step + 1])
        else:
            out = model(input_ids=token[:, None], attention_mask=full_mask[:, :width + step + 1],
                        position_ids=pos, cache=cache, use_cache=True, logits_to_keep=1)
            logits = out.logits[:, -1]  # [b, V]

    tokens_cpu, logp_cpu = out_tokens.cpu(), out_logp.cpu()
    lengths_cpu, finished_cpu = lengths.cpu().tolist(), finished.cpu().tolist()
    return [
        Sampled(tokens_cpu[row, :n].tolist(), logp_cpu[row, :n].tolist(), bool(fin))
        for row, (n, fin) in enumerate(zip(lengths_cpu, finished_cpu))
    ]
