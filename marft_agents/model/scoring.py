"""Training-time forward passes of ``MultiAgentPolicy``: per-token log-probs, entropies and
critic values of given (prompt, response) rows, with grad when grad mode is on.

Kept apart from ``policy`` (sampling, adapters, state) because this is the arithmetic PPO
compares against the sampled tokens: a :class:`Scorer`, the policy's collaborator
(``policy.scoring``), whose public methods the policy's own delegate to. Rows may declare a shared prefix (``prefix_lens``, see
"shared prefixes" in ``engine/layout.py``): rows with the same prefix are run as one group whose
prefix is computed once, and the groups' results are merged back in row order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from marft_agents.engine.head_logprobs import head_logprobs, plain_head
from marft_agents.engine.layout import (
    PackedBatch,
    after_prefix,
    effective_prefix_len,
    left_pad,
    pack,
    prefix_cache,
)
from marft_agents.engine.sampling import scaled_logprobs
from marft_agents.ppo_math import entropy_from_logprobs


@dataclass
class TokenStats:
    """Per-token statistics of responses under one adapter (or the reference model)."""

    logprobs: torch.Tensor
    """``[B, T]`` float32 log-prob of each response token (0 where ``mask`` is False)."""
    entropy: torch.Tensor | None
    """``[B, T]`` float32 entropy of the scaled next-token distribution (0 where ``mask`` is
    False); None when the caller asked for ``with_entropy=False``."""
    mask: torch.Tensor
    """``[B, T]`` bool, True on real response tokens (responses are left-aligned)."""


def _merge_rows(parts: list[tuple[list[int], torch.Tensor]]) -> torch.Tensor:
    """Per-group results ``[b_g]`` or ``[b_g, T_g]`` -> ``[B]`` or ``[B, max T_g]`` in the
    original row order (right-padded with 0 / False); keeps the autograd graph. (Per-row vectors
    ``[b_g, H]`` of one common ``H`` merge to ``[B, H]`` the same way.)"""
    if len(parts) == 1:
        return parts[0][1]
    tensors = [t for _, t in parts]
    if tensors[0].dim() > 1:
        width = max(t.shape[1] for t in tensors)
        tensors = [torch.cat([t, t.new_zeros(t.shape[0], width - t.shape[1])], dim=1)
                   for t in tensors]
    order = torch.tensor([row for rows, _ in parts for row in rows], device=tensors[0].device)
    return torch.cat(tensors)[torch.argsort(order)]


@dataclass
class HeadReads:
    """What the value head read in one ``state_values`` / ``token_values`` pass (returned by the
    pass itself, so no flag on the head or the policy decides whether it is kept)."""

    inputs: list[tuple[torch.Tensor, torch.Tensor]]
    """Per call of the head, in call order: the hidden states it read ``[..., H]`` (detached) and
    their slots ``[...]``. Token values include the padded positions the head also ran on."""
    rows: torch.Tensor | None = None
    """``[B, H]`` float32: each row's valued state, in row order (state values only)."""


@dataclass(frozen=True)
class ScoringPaths:
    """Which arithmetic a :class:`Scorer` runs; the defaults are the fast paths every run uses.
    The other settings are the reference definitions they are checked against (tests) and timed
    against (``benchmarks/bench_update.py --paths``, ``benchmarks/bench_rollout.py``): a scorer
    built with them, ``Scorer(policy, ScoringPaths(fused_head=False))``, scores the same policy."""

    fused_head: bool = True
    """Score responses through ``head_logprobs`` (chunked, real positions only) where the model
    allows it; False: the model's own forward and full logits."""
    merge_prefix_rows: bool = True
    """``state_values`` runs one row per chain of critic inputs that extend one another (an
    episode's global-state log); False: one row per input."""


class Scorer:
    """Forward passes over the rows of a ``MultiAgentPolicy`` (held as ``policy.scoring``).

    Reads the policy through its public members only: ``lm``, ``tokenizer``, ``device``,
    ``value_heads``, ``critic_for``, the ``using`` adapter switch. ``paths`` chooses the fast or
    the reference arithmetic (:class:`ScoringPaths`; fixed at construction). Holds no other
    state: what a value head read in a pass is returned by the pass (``*_with_reads``,
    :class:`HeadReads`), for the learner's feature statistics and head refit.
    """

    def __init__(self, policy: Any, paths: ScoringPaths = ScoringPaths()):
        self.policy = policy
        self.paths = paths

    def _pack(self, prompt_ids: Sequence[Sequence[int]], response_ids: Sequence[Sequence[int]],
              prefix_len: int = 0) -> PackedBatch:
        return pack(prompt_ids, response_ids, self.policy.tokenizer.pad_token_id, self.policy.device, prefix_len)

    def prefix_groups(self, prompt_ids: Sequence[Sequence[int]],
                       prefix_lens: Sequence[int] | None,
                       response_ids: Sequence[Sequence[int]] | None = None,
                       ) -> list[tuple[int, list[int]]]:
        """Rows grouped by the prefix they declare: ``[(prefix length, row indices)]``, rows in
        order within a group (a single group holds rows ``0..B-1``)."""
        if response_ids is not None and len(response_ids) != len(prompt_ids):
            raise ValueError(f"got {len(prompt_ids)} prompts but {len(response_ids)} responses; "
                             f"they must pair up one to one")
        if prefix_lens is None:
            return [(0, list(range(len(prompt_ids))))]
        if len(prefix_lens) != len(prompt_ids):
            raise ValueError(f"got {len(prefix_lens)} prefix_lens for {len(prompt_ids)} prompts; "
                             f"pass one per row (0 = no shared prefix) or None")
        groups: dict[tuple[int, ...], list[int]] = {}
        for row, (prompt, declared) in enumerate(zip(prompt_ids, prefix_lens)):
            groups.setdefault(tuple(prompt[:effective_prefix_len(prompt, declared)]), []).append(row)
        return [(len(prefix), rows) for prefix, rows in groups.items()]

    def _prefix_cache(self, forward, prefix: Sequence[int], rows: int) -> object | None:
        """The shared prefix's KV cache for ``rows`` rows, or None when there is no prefix."""
        return prefix_cache(forward, prefix, rows, self.policy.device) if len(prefix) else None

    def _stats(self, batch: PackedBatch, temperature: float, with_entropy: bool) -> TokenStats:
        if not temperature > 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        width = batch.response_ids.shape[1]
        mask = batch.response_mask  # [B, T]
        head = plain_head(self.policy.lm) if self.paths.fused_head else None
        if head is not None:  # decoder, then the fused head over the real response positions only
            start = batch.prompt_width - 1  # column whose hidden state predicts response token 0
            hidden = self._decoder_hidden(batch.input_ids, batch.attention_mask, batch.position_ids,
                                          batch.prefix_ids)  # [B, P+T, H]
            logp_real, entropy_real = head_logprobs(
                hidden[:, start:start + width][mask], head, batch.response_ids[mask], temperature,
                with_entropy)  # [N], [N] for the N real response tokens
            zeros = mask.new_zeros(mask.shape, dtype=torch.float32)  # [B, T]
            entropy = None if entropy_real is None else zeros.masked_scatter(mask, entropy_real)
            return TokenStats(zeros.masked_scatter(mask, logp_real), entropy, mask)
        lm = self.policy.lm
        cache = self._prefix_cache(lm, batch.prefix_ids, batch.input_ids.shape[0])
        out = lm(input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                      position_ids=batch.position_ids, cache=cache,
                      use_cache=cache is not None, logits_to_keep=width + 1)
        # logits of columns P-1 .. P+T-1; the last one predicts past the end: drop it
        logp_all = scaled_logprobs(out.logits[:, :width], temperature)  # [B, T, V]
        logp = logp_all.gather(-1, batch.response_ids[..., None]).squeeze(-1)  # [B, T]
        logp = logp.masked_fill(~mask, 0.0)
        entropy = None
        if with_entropy:
            entropy = entropy_from_logprobs(logp_all).masked_fill(~mask, 0.0)  # [B, T]
        return TokenStats(logp, entropy, mask)

    def batch_stats(self, prompt_ids: Sequence[Sequence[int]], response_ids: Sequence[Sequence[int]],
                    prefix_len: int, temperature: float, with_entropy: bool) -> TokenStats:
        """``token_logprobs`` of rows that all share the first ``prefix_len`` prompt tokens, under
        whichever adapter is active (the policy's ``generate`` scoring its own samples)."""
        return self._stats(self._pack(prompt_ids, response_ids, prefix_len), temperature, with_entropy)

    def _grouped_stats(self, prompt_ids: Sequence[Sequence[int]],
                       response_ids: Sequence[Sequence[int]], prefix_lens: Sequence[int] | None,
                       temperature: float, with_entropy: bool) -> TokenStats:
        parts = [(rows, self._stats(self._pack([prompt_ids[r] for r in rows],
                                               [response_ids[r] for r in rows], prefix_len),
                                    temperature, with_entropy))
                 for prefix_len, rows in self.prefix_groups(prompt_ids, prefix_lens, response_ids)]
        if len(parts) == 1:
            return parts[0][1]
        entropy = None
        if with_entropy:
            entropy = _merge_rows([(rows, st.entropy) for rows, st in parts])
        return TokenStats(_merge_rows([(rows, st.logprobs) for rows, st in parts]), entropy,
                          _merge_rows([(rows, st.mask) for rows, st in parts]))

    def token_logprobs(self, adapter: str, prompt_ids: Sequence[Sequence[int]],
                       response_ids: Sequence[Sequence[int]], temperature: float = 1.0,
                       with_entropy: bool = True,
                       prefix_lens: Sequence[int] | None = None) -> TokenStats:
        """Log-probs (and entropies) of the response tokens under ``adapter``, with grad when
        grad mode is on. Uses the module's mode: call ``.eval()`` for dropout-free numbers.
        ``prefix_lens``: each row's shared prefix, as it was sampled (None = no sharing)."""
        with self.policy.using(adapter):
            return self._grouped_stats(prompt_ids, response_ids, prefix_lens, temperature,
                                       with_entropy)

    def reference_logprobs(self, prompt_ids: Sequence[Sequence[int]],
                           response_ids: Sequence[Sequence[int]], temperature: float = 1.0,
                           with_entropy: bool = False,
                           prefix_lens: Sequence[int] | None = None) -> TokenStats:
        """``token_logprobs`` of the base model (all adapters disabled), without grad."""
        with torch.no_grad(), self.policy.using(None):
            return self._grouped_stats(prompt_ids, response_ids, prefix_lens, temperature,
                                       with_entropy)

    def _decoder_hidden(self, ids: torch.Tensor, mask: torch.Tensor, pos: torch.Tensor,
                        prefix: Sequence[int] = ()) -> torch.Tensor:
        """Final hidden states ``[B, L, H]`` (after the last norm) under the active adapter, for
        the ``L`` per-row columns (``mask`` also covers the shared ``prefix``, if any)."""
        decoder = self.policy.lm.get_decoder()
        cache = self._prefix_cache(decoder, prefix, ids.shape[0])
        return decoder(input_ids=ids, attention_mask=mask, position_ids=pos,
                       cache=cache, use_cache=cache is not None).last_hidden_state

    def critic_hidden(self, critic: str, ids: torch.Tensor, mask: torch.Tensor, pos: torch.Tensor,
                prefix: Sequence[int] = ()) -> torch.Tensor:
        """``_decoder_hidden`` under a critic adapter."""
        with self.policy.using(critic):
            return self._decoder_hidden(ids, mask, pos, prefix)

    def token_values(self, prompt_ids: Sequence[Sequence[int]],
                     response_ids: Sequence[Sequence[int]], agent_id: str | None = None,
                     include_final: bool = False,
                     prefix_lens: Sequence[int] | None = None,
                     slots: Sequence[int] | None = None) -> torch.Tensor:
        """Critic value of the state before each response token (:meth:`token_values_with_reads`)."""
        return self.token_values_with_reads(prompt_ids, response_ids, agent_id, include_final, prefix_lens, slots)[0]

    def token_values_with_reads(self, prompt_ids: Sequence[Sequence[int]],
                                response_ids: Sequence[Sequence[int]], agent_id: str | None = None,
                                include_final: bool = False,
                                prefix_lens: Sequence[int] | None = None,
                                slots: Sequence[int] | None = None) -> tuple[torch.Tensor, HeadReads]:
        """Critic value of the state before each response token: ``[B, T]`` float32 (0 past a
        row's end). ``include_final`` adds the state after the whole response: ``[B, T+1]``,
        row b's final value in column ``len(response_b)``.

        Like ``state_values``, a row whose prompt + response is a prefix of another row's (an
        episode's decisions under token-level values, see ``critic.GlobalStateLog``) is valued
        inside that longer row: one forward row per chain. ``slots``: each row's value-head slot
        (``ValueHead``; None = 0)."""
        critic = self.policy.critic_for(agent_id)
        slots = [0] * len(prompt_ids) if slots is None else list(slots)
        extra = int(include_final)
        if not any(len(r) for r in response_ids) and not extra:
            raise ValueError("every response is empty: nothing to value")
        parts, reads = [], []
        for prefix_len, rows in self.prefix_groups(prompt_ids, prefix_lens, response_ids):
            seqs = [list(prompt_ids[r][prefix_len:]) + list(response_ids[r]) for r in rows]
            heads, where, hidden = self._chain_hidden(critic, seqs, prompt_ids[rows[0]][:prefix_len])  # [h, L, H]
            lengths = torch.tensor([len(response_ids[r]) for r in rows], device=hidden.device)  # [b]
            width = int(lengths.max()) + extra
            # the state before response token t of row b: its last prompt token's column + t
            prompt_lengths = [len(prompt_ids[r]) - prefix_len for r in rows]
            head_of, last_prompt = token_index([len(seq) for seq in seqs], heads, where, prompt_lengths,
                                               hidden.shape[1], hidden.device)  # [b], [b]
            steps = torch.arange(width, device=hidden.device)  # [width]
            valid = steps[None] < (lengths + extra)[:, None]  # [b, width]
            column = (last_prompt[:, None] + steps[None]).clamp(max=hidden.shape[1] - 1)  # [b, width]
            slot = torch.tensor([slots[r] for r in rows], device=hidden.device)[:, None]  # [b, 1]
            state = hidden[head_of[:, None], column]  # [b, width, H]
            values = self.policy.value_heads[critic](state, slot)  # [b, width]
            reads.append((state.detach(), slot))
            parts.append((rows, values.masked_fill(~valid, 0.0)))
        return _merge_rows(parts), HeadReads(reads)

    def state_values(self, prompt_ids: Sequence[Sequence[int]], agent_id: str | None = None,
                     prefix_lens: Sequence[int] | None = None,
                     slots: Sequence[int] | None = None) -> torch.Tensor:
        """Critic value at the last prompt token: ``[B]`` (:meth:`state_values_with_reads`)."""
        return self.state_values_with_reads(prompt_ids, agent_id, prefix_lens, slots)[0]

    def state_values_with_reads(self, prompt_ids: Sequence[Sequence[int]], agent_id: str | None = None,
                                prefix_lens: Sequence[int] | None = None,
                                slots: Sequence[int] | None = None) -> tuple[torch.Tensor, HeadReads]:
        """Critic value at the last prompt token: ``[B]`` float32.

        Rows that are a prefix of another row (an episode's critic inputs, see
        ``critic.GlobalStateLog``; or equal rows) are valued inside that longer row at their
        last token's column: one forward row per chain, the same values (causal attention).
        ``slots``: each row's value-head slot (``ValueHead``; None = 0)."""
        critic = self.policy.critic_for(agent_id)
        slots = [0] * len(prompt_ids) if slots is None else list(slots)
        parts, features, reads = [], [], []
        for prefix_len, rows in self.prefix_groups(prompt_ids, prefix_lens):
            suffixes = [list(prompt_ids[r][prefix_len:]) for r in rows]
            heads, where, hidden = self._chain_hidden(critic, suffixes, prompt_ids[rows[0]][:prefix_len])  # [h, P, H]
            head_of, column = last_token_index(suffixes, heads, where, hidden.shape[1], hidden.device)  # [b], [b]
            slot = torch.tensor([slots[r] for r in rows], device=hidden.device)  # [b]
            state = hidden[head_of, column]  # [b, H]
            parts.append((rows, self.policy.value_heads[critic](state, slot)))  # [b]
            reads.append((state.detach(), slot))
            features.append((rows, state.detach().float()))
        return _merge_rows(parts), HeadReads(reads, _merge_rows(features))  # [B], [B, H]

    def _chain_hidden(self, critic: str, seqs: Sequence[Sequence[int]], prefix: Sequence[int]
                      ) -> tuple[list[int], list[tuple[int, int]], torch.Tensor]:
        """The critic's final hidden states over ``seqs`` (each after the shared ``prefix``): one
        left-padded row per chain of prefixes (``value_rows``); ``(heads, where, hidden [h, L, H])``."""
        heads, where = self.value_rows(seqs)
        ids, mask = left_pad([seqs[h] for h in heads], self.policy.tokenizer.pad_token_id, self.policy.device)  # [h, L]
        mask, pos = after_prefix(mask, len(prefix))  # [h, s + L], [h, L]
        return heads, where, self.critic_hidden(critic, ids, mask, pos, list(prefix))  # [h, L, H]

    def value_rows(self, seqs: Sequence[Sequence[int]]) -> tuple[list[int], list[tuple[int, int]]]:
        """The forward rows a ``state_values`` pass runs for ``seqs``: one per chain of prefixes
        (:func:`prefix_chains`), or one per sequence when ``paths.merge_prefix_rows`` is off."""
        return prefix_chains(seqs) if self.paths.merge_prefix_rows else one_row_each(seqs)


def last_token_index(seqs: Sequence[Sequence[int]], heads: list[int], where: list[tuple[int, int]], width: int,
                     device: torch.device | str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """Where each sequence's last token sits in the left-padded ``[len(heads), width]`` batch of
    its chains' rows: ``(row [B], column [B])``, to index hidden states with."""
    return token_index([len(seq) for seq in seqs], heads, where, [length for _, length in where], width, device)


def token_index(seq_lengths: Sequence[int], heads: list[int], where: list[tuple[int, int]], ends: Sequence[int],
                width: int, device: torch.device | str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """Where token ``ends[b] - 1`` of sequence b sits in the left-padded ``[len(heads), width]``
    batch of its chain's row (``prefix_chains`` over sequences of ``seq_lengths``): ``(row [B],
    column [B])``. A sequence is a prefix of its chain's head, so its tokens keep their places."""
    row = torch.tensor([chain for chain, _ in where], device=device)  # [B]
    column = torch.tensor([width - seq_lengths[heads[chain]] + end - 1 for (chain, _), end in zip(where, ends)],
                          device=device)  # [B]
    return row, column


def one_row_each(seqs: Sequence[Sequence[int]]) -> tuple[list[int], list[tuple[int, int]]]:
    """``prefix_chains``'s output without merging: every sequence its own row."""
    return list(range(len(seqs))), [(i, len(seq)) for i, seq in enumerate(seqs)]


def prefix_chains(seqs: Sequence[Sequence[int]]) -> tuple[list[int], list[tuple[int, int]]]:
    """Sequences grouped under the longest ones they are a prefix of.

    Returns ``heads`` (indices of the sequences that get a forward row, longest first) and, per
    sequence, ``(index into heads, its length)``: its last token is at position ``length - 1``
    of that head. A sequence equal to another shares its row."""
    order = sorted(range(len(seqs)), key=lambda i: -len(seqs[i]))
    heads: list[int] = []
    where: list[tuple[int, int]] = [(0, 0)] * len(seqs)
    for i in order:
        seq = list(seqs[i])
        for chain, head in enumerate(heads):
            if list(seqs[head][:len(seq)]) == seq:  # heads are at least as long (sorted)
                where[i] = (chain, len(seq))
                break
        else:
            where[i] = (len(heads), len(seq))
            heads.append(i)
    return heads, where
