"""A model that keeps a KV cache in step with a growing, sometimes rewound, list of tokens.

Speculative decoding feeds the target k + 1 tokens at once and then throws away the positions of
rejected drafts: rewinding the course's :class:`~course_lib.attention.KVCache` is setting each
layer's ``length`` back (its tensors are preallocated; the stale keys beyond ``length`` are never
read and are overwritten by the next append). Past ``block_size`` the learned positions shift with
every token, so, as :func:`course_lib.generate.generate` does there, no cache is used: each scored
position gets its own cropped window, the windows run as one batch.

Shapes: B batch, T time, V vocabulary size.
"""
from __future__ import annotations

import torch

from ..attention import KVCache


class CachedLM:
    """``logits(tokens, m)``: the model's (m, V) logits after each of the last m prefixes of
    ``tokens`` (the prediction for positions len - m + 1 .. len), reusing the cache for the longest
    prefix it already holds. ``calls`` counts forwards, ``fed`` the tokens they processed."""

    def __init__(self, model):
        self.model = model
        self.block_size = model.config.block_size
        if getattr(model.config, "sliding_window", None):
            raise ValueError("speculative decoding rewinds the KV cache, which a sliding-window "
                             "cache cannot (it drops old keys): use a model without sliding_window")
        self.device = next(model.parameters()).device
        self.reset()

    def reset(self) -> None:
        self.cache: KVCache | None = None
        self.tokens: list[int] = []  # the tokens whose keys and values the cache holds
        self.calls = 0
        self.fed = 0

    def rewind(self, n: int) -> None:
        """Keep the first n cached positions only."""
        for layer in self.cache.layers:
            layer.length = n
        del self.tokens[n:]

    @torch.no_grad()
    def logits(self, tokens: list[int], m: int = 1) -> torch.Tensor:
        n = len(tokens)
        if not 1 <= m <= n:
            raise ValueError(f"m must be in [1, {n}] (logits of the last m positions), got {m}")
        self.calls += 1
        if n > self.block_size:
            return self._windows(tokens, m)
        if self.cache is None:
            self.cache = KVCache(self.model.config.n_layer, self.block_size)
        common = 0
        limit = min(len(self.tokens), n - m)  # the last m positions must be fed to get their logits
        while common < limit and self.tokens[common] == tokens[common]:
            common += 1
        self.rewind(common)
        new = torch.tensor([tokens[common:]], dtype=torch.long, device=self.device)  # (1, T)
        out, _ = self.model(new, cache=self.cache)  # (1, T, V)
        self.tokens.extend(tokens[common:])
        self.fed += n - common
        return out[0, -m:]

    def _windows(self, tokens: list[int], m: int) -> torch.Tensor:
        self.cache, self.tokens = None, []
        B = self.block_size
        ends = list(range(len(tokens) - m + 1, len(tokens) + 1))
        rows = []
        # the round that crosses block_size: shorter contexts alone
        short = [e for e in ends if e < B]
        for e in short:
            out, _ = self.model(torch.tensor([tokens[:e]], dtype=torch.long, device=self.device))
            rows.append(out[0, -1:])
        full = [e for e in ends if e >= B]
        batch = torch.tensor([tokens[e - B : e] for e in full], dtype=torch.long,
                             device=self.device)  # (m, B)
        out, _ = self.model(batch)  # (m, B, V)
        rows.append(out[:, -1])
        self.fed += sum(min(e, B) for e in ends)
        return torch.cat(rows)
