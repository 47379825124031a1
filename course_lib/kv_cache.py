"""The KV cache (chapter 8): the keys and values of the positions seen so far, kept so that each
new token feeds only itself through the model instead of the whole context again. One
:class:`LayerKVCache` per attention layer, preallocated; :class:`KVCache` holds one per layer.
:class:`course_lib.attention.CausalSelfAttention` appends to it (and re-exports both names).

Shapes: B batch, T new positions, n_kv key/value heads, hs head size.
"""
from __future__ import annotations

import torch


class LayerKVCache:
    """Keys and values of the positions seen so far, for one attention layer.

    Preallocated to (B, n_kv, capacity, hs) so that appending one token is a copy, not a
    reallocation. n_kv is the number of key/value heads: n_head, or fewer with grouped-query
    attention, which is where its memory saving comes from.

    Sliding-window attention (``keep`` in :meth:`append`) needs only the newest keep = window - 1
    positions: the next query brings its own key, and nothing older is in its window. Such a
    cache keeps those alone (``length`` still counts every position seen), so its memory stops
    growing at the window. ``nbytes``: the memory its keys and values hold now.
    """

    def __init__(self, capacity: int):
        if not isinstance(capacity, int) or isinstance(capacity, bool) or capacity < 0:
            raise ValueError("KV cache capacity must be an integer >= 0 (positions it holds, e.g. "
                             f"block_size), got {capacity!r}")
        self.capacity = capacity
        self.k: torch.Tensor | None = None
        self.v: torch.Tensor | None = None
        self.length = 0

    def append(self, k: torch.Tensor, v: torch.Tensor,
               keep: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Add T new positions (B, n_kv, T, hs); return the keys and values the new queries may
        read: every cached position and the new ones, or with ``keep`` (a sliding window's window -
        1) the kept ones and the new ones, after which only the newest ``keep`` stay."""
        B, nh, T, hs = k.shape
        if (self.k is not None
            and (B, nh, hs) != (self.k.shape[0], self.k.shape[1], self.k.shape[3])):
            raise ValueError(
                f"this KV cache holds batch {self.k.shape[0]}, {self.k.shape[1]} key/value heads "
                f"of size {self.k.shape[3]}, and was given batch {B}, {nh} heads of size {hs}: a "
                "cache serves one model and one batch; make a new KVCache for another")
        if keep is not None:
            return self._append_window(k, v, keep)
        if self.k is None:
            self.k = k.new_empty(B, nh, self.capacity, hs)
            self.v = v.new_empty(B, nh, self.capacity, hs)
        if self.length + T > self.capacity:
            raise ValueError(
                f"KV cache is full ({self.length} + {T} > capacity {self.capacity}); "
                "reset it and re-feed the cropped context"
            )
        self.k[:, :, self.length : self.length + T] = k
        self.v[:, :, self.length : self.length + T] = v
        self.length += T
        return self.k[:, :, : self.length], self.v[:, :, : self.length]

    def _append_window(self, k: torch.Tensor, v: torch.Tensor,
                       keep: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.length + k.shape[2] > self.capacity:
            raise ValueError(f"KV cache is full ({self.length} + {k.shape[2]} > capacity "
                             f"{self.capacity}); reset it and re-feed the cropped context")
        keys = k if self.k is None else torch.cat([self.k, k], dim=2)  # (B, n_kv, kept + T, hs)
        values = v if self.v is None else torch.cat([self.v, v], dim=2)
        self.length += k.shape[2]
        start = max(0, keys.shape[2] - keep)
        # clone: a slice would keep the whole concatenated tensor alive
        self.k, self.v = keys[:, :, start:].clone(), values[:, :, start:].clone()
        return keys, values

    @property
    def nbytes(self) -> int:
        return 0 if self.k is None else self.k.nbytes + self.v.nbytes


class KVCache:
    """One :class:`LayerKVCache` per layer of a model."""

    def __init__(self, n_layer: int, capacity: int):
        if not isinstance(n_layer, int) or isinstance(n_layer, bool) or n_layer < 1:
            raise ValueError("KVCache n_layer must be an integer >= 1 (the model's "
                             f"config.n_layer), got {n_layer!r}")
        self.layers = [LayerKVCache(capacity) for _ in range(n_layer)]

    @property
    def length(self) -> int:
        return self.layers[0].length

    @property
    def nbytes(self) -> int:
        """Bytes the keys and values of every layer hold now."""
        return sum(layer.nbytes for layer in self.layers)
