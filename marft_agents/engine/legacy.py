"""The ``legacy`` decoding loop (``sampling.engine: legacy``): the first and simplest of the three.

Kept as the reference the faster engines are checked and measured against
(``tests/agents/test_fast_decode.py``: greedy tokens equal to the ``fast`` loop's, pruning and
shared prefixes included; ``benchmarks/bench_rollout.py --engine all``): every step runs the
model's own forward over transformers' ``DynamicCache`` and scores the full distribution with
``scaled_logprobs``, with no optimisation that could be wrong.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from marft_agents.engine.layout import after_prefix, left_pad, prefix_cache
from marft_agents.engine.sampling import Sampled, pick_tokens, scaled_logprobs
from marft_agents.settings.sampling import SamplingConfig


def sample_batch(
    model: torch.nn.Module,
    prompts: Sequence[Sequence[int]],
    cfg: SamplingConfig,
    stop_ids: Sequence[int],
    pad_id: int,
    generator: torch.Generator | None = None,
    prune_fraction: float = 0.25,
    prefix_len: int = 0,
) -> list[Sampled]:
    """Decode ``prompts`` as one batch with ``model`` (a causal LM, adapters already chosen).

    ``prefix_len > 0``: every prompt starts with the same ``prefix_len`` tokens (checked), which
    are computed once (see ``engine/layout.py``); pass an ``effective_prefix_len``.

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
        token = pick_tokens(logp, cfg, generator)  # [b]
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
        Sampled(tokens_cpu[row, :n].tolist(), logp_cpu[row, :n].tolist(), bool(fin))
        for row, (n, fin) in enumerate(zip(lengths_cpu, finished_cpu))
    ]
