"""A KV cache preallocated for the whole decode: ``ReservedLayer`` buffers (``fast`` and ``direct``).

Why: transformers' ``DynamicLayer`` ``torch.cat``s the full cache with every new token (a copy of
the whole cache per layer per step, the largest single operator of the legacy loop's profile:
``python benchmarks/profile_rollout.py --engine legacy``). A ``ReservedLayer`` writes the new keys/values in place
into a buffer sized for prefix + prompt + response; the shared prefix's batch-1 KV is broadcast
straight into it (no ``repeat_interleave`` copy first). ``engine/direct.py`` writes into the same
buffers directly.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers.cache_utils import DynamicCache, DynamicLayer


class ReservedLayer(DynamicLayer):
    """A ``DynamicLayer`` whose keys/values live in a buffer with room for ``capacity`` tokens:
    ``update`` writes the new states in place and exposes a view of the filled part (the buffer
    is allocated on the first update, or taken from a shared prefix by ``from_prefix``)."""

    def __init__(self, capacity: int) -> None:
        super().__init__()
        self.capacity = capacity
        self._len = 0

    @classmethod
    def from_prefix(cls, keys: torch.Tensor, values: torch.Tensor, rows: int, capacity: int,
                    ) -> ReservedLayer:
        """A layer for ``rows`` rows whose first tokens are the batch-1 ``keys``/``values``
        ``[1, H, s, D]`` (broadcast into the buffer: no repeated copy is made first)."""
        layer = cls(capacity)
        layer._allocate(keys, values, rows)
        length = keys.shape[-2]
        layer._k[:, :, :length] = keys
        layer._v[:, :, :length] = values
        layer._set_len(length)
        return layer

    def _allocate(self, keys: torch.Tensor, values: torch.Tensor, rows: int) -> None:
        _, heads, length, dim = keys.shape  # [B, H, L, D]
        size = max(self.capacity, length)
        self._k = keys.new_empty(rows, heads, size, dim)
        self._v = values.new_empty(rows, heads, size, values.shape[-1])
        self.dtype, self.device = keys.dtype, keys.device
        self.is_initialized = True

    def _set_len(self, length: int) -> None:
        self._len = length
        self.keys, self.values = self._k[:, :, :length], self._v[:, :, :length]

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs,
               ) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self._allocate(key_states, value_states, key_states.shape[0])
        end = self._len + key_states.shape[-2]
        if end > self._k.shape[-2]:  # out of room: grow like a DynamicLayer would
            self._k = torch.cat([self._k[:, :, :self._len], key_states], dim=-2)
            self._v = torch.cat([self._v[:, :, :self._len], value_states], dim=-2)
        else:
            self._k[:, :, self._len:end] = key_states
            self._v[:, :, self._len:end] = value_states
        self._set_len(end)
        return self.keys, self.values

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        self._k, self._v = self._k[indices], self._v[indices]
        self._set_len(self._len)

    def batch_repeat_interleave(self, repeats: int) -> None:
        self._k = self._k.repeat_interleave(repeats, dim=0)
        self._v = self._v.repeat_interleave(repeats, dim=0)
        self._set_len(self._len)


def reserved_cache(model: torch.nn.Module, prefix: Sequence[int], rows: int, capacity: int,
                   device: torch.device | str) -> DynamicCache:
    """A cache of ``ReservedLayer``s with room for ``capacity`` tokens per row, holding the KV
    of the shared ``prefix`` (computed once, as a batch-1 forward) if there is one. Models whose
    cache layers are not plain ``DynamicLayer``s (sliding windows, ...) keep their own layers."""
    cache = DynamicCache(config=model.config)
    plain = bool(cache.layers) and all(type(layer) is DynamicLayer for layer in cache.layers)
    if prefix:
        ids = torch.as_tensor([list(prefix)], dtype=torch.long, device=device)  # [1, s]
        pos = torch.arange(ids.shape[1], device=device)[None]  # [1, s]
        model(input_ids=ids, position_ids=pos, cache=cache, use_cache=True,
              logits_to_keep=1)
        if not plain:
            cache.batch_repeat_interleave(rows)
            return cache
        cache.layers = [ReservedLayer.from_prefix(layer.keys, layer.values, rows, capacity)
                        for layer in cache.layers]
    elif plain:
        cache.layers = [ReservedLayer(capacity) for _ in cache.layers]
    return cache
