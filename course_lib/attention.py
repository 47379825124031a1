"""Self-attention, from "average the past" to the fused multi-head layer (chapters 3-4).

Shapes: B batch, T time (context length), C channels (embedding size),
nh number of heads, hs head size (C = nh * hs).
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def causal_mask(T: int, device=None) -> torch.Tensor:
    """(T, T) boolean lower-triangular matrix: entry [t, s] is True when s <= t,
    i.e. position t may look at position s."""
    return torch.tril(torch.ones(T, T, dtype=torch.bool, device=device))


def padding_mask(lengths: torch.Tensor, T: int) -> torch.Tensor:
    """(B, T) boolean mask: True for real tokens, False for padding after each sequence's length."""
    return torch.arange(T, device=lengths.device)[None, :] < lengths[:, None]


# --- the mathematical trick: three ways to average the past -------------------------------


def average_past_loops(x: torch.Tensor) -> torch.Tensor:
    """(B, T, C) -> (B, T, C): out[b, t] = mean of x[b, 0..t]. Explicit loops (slow, obvious)."""
    B, T, C = x.shape
    out = torch.zeros_like(x)
    for b in range(B):
        for t in range(T):
            out[b, t] = x[b, : t + 1].mean(dim=0)
    return out


def average_past_matmul(x: torch.Tensor) -> torch.Tensor:
    """Same as :func:`average_past_loops` with one matmul: a row-normalised tril (T, T)
    broadcast against (B, T, C)."""
    T = x.shape[1]
    weights = causal_mask(T, x.device).to(x.dtype)
    weights = weights / weights.sum(dim=1, keepdim=True)  # each row sums to 1
    return weights @ x  # (T, T) @ (B, T, C) -> (B, T, C)


def average_past_softmax(x: torch.Tensor) -> torch.Tensor:
    """Same again, the way attention does it: scores of zero, -inf on the future, softmax."""
    T = x.shape[1]
    scores = torch.zeros(T, T, dtype=x.dtype, device=x.device)
    scores = scores.masked_fill(~causal_mask(T, x.device), float("-inf"))
    weights = F.softmax(scores, dim=-1)  # exp(0)=1 on the past, exp(-inf)=0 on the future
    return weights @ x


# --- scaled dot-product attention -----------------------------------------------------------


def scaled_dot_product_attention(q, k, v, mask=None, dropout: nn.Module | None = None):
    """Attention written out: softmax(q k^T / sqrt(hs)) v.

    q: (..., Tq, hs), k and v: (..., Tk, hs); mask: boolean, broadcastable to
    (..., Tq, Tk), True where attending is allowed. Returns (out, weights) with
    out (..., Tq, hs) and weights (..., Tq, Tk).
    """
    scores = q @ k.transpose(-2, -1) / math.sqrt(k.shape[-1])  # scale by head size, not C
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = F.softmax(scores, dim=-1)
    if dropout is not None:
        weights = dropout(weights)
    return weights @ v, weights


def score_variance(head_size: int, scaled: bool = False, batch: int = 8, T: int = 64,
                   generator: torch.Generator | None = None) -> float:
    """Measure var(q k^T) for queries and keys with independent N(0, 1) entries.

    Draws q and k of shape (batch, T, head_size) (q first, then k, from ``generator``),
    forms the (batch, T, T) scores q @ k^T, optionally scaled by 1/sqrt(head_size),
    and returns the variance of all the scores: about ``head_size`` unscaled, about 1 scaled.
    """
    if head_size < 1:
        raise ValueError(f"head_size must be a positive integer, got {head_size}")
    q = torch.randn(batch, T, head_size, generator=generator)
    k = torch.randn(batch, T, head_size, generator=generator)
    scores = q @ k.transpose(-2, -1)  # (batch, T, T)
    if scaled:
        scores = scores * head_size**-0.5
    return scores.var().item()


class Head(nn.Module):
    """One causal self-attention head: (B, T, C) -> (B, T, hs)."""

    def __init__(self, n_embd: int, head_size: int, block_size: int, dropout: float = 0.0, bias: bool = False):
        super().__init__()
        self.key = nn.Linear(n_embd, head_size, bias=bias)
        self.query = nn.Linear(n_embd, head_size, bias=bias)
        self.value = nn.Linear(n_embd, head_size, bias=bias)
        # A buffer, not a parameter: it moves with .to(device) but is never trained.
        self.register_buffer("tril", causal_mask(block_size), persistent=False)
        self.dropout = nn.Dropout(dropout)
        self.last_weights: torch.Tensor | None = None  # (B, T, T), kept for plotting

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        T = x.shape[1]
        q, k, v = self.query(x), self.key(x), self.value(x)  # each (B, T, hs)
        out, weights = scaled_dot_product_attention(q, k, v, self.tril[:T, :T], self.dropout)
        self.last_weights = weights.detach()
        return out


class MultiHeadAttention(nn.Module):
    """n_head heads side by side, concatenated, then projected: (B, T, C) -> (B, T, C)."""

    def __init__(self, n_embd: int, n_head: int, block_size: int, dropout: float = 0.0, bias: bool = False):
        super().__init__()
        _check_heads(n_embd, n_head)
        head_size = n_embd // n_head
        self.heads = nn.ModuleList(Head(n_embd, head_size, block_size, dropout, bias) for _ in range(n_head))
        self.proj = nn.Linear(n_embd, n_embd, bias=bias)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.cat([h(x) for h in self.heads], dim=-1)  # (B, T, nh * hs) = (B, T, C)
        return self.dropout(self.proj(out))


def _check_heads(n_embd: int, n_head: int) -> None:
    if n_head < 1 or n_embd % n_head != 0:
        raise ValueError(
            f"n_embd ({n_embd}) must be divisible by n_head ({n_head}) so that every head gets "
            f"the same head size; try n_head in {[h for h in range(1, n_embd + 1) if n_embd % h == 0][:12]}"
        )


class LayerKVCache:
    """Keys and values of the positions seen so far, for one attention layer.

    Preallocated to (B, nh, capacity, hs) so that appending one token is a copy,
    not a reallocation.
    """

    def __init__(self, capacity: int):
        self.capacity = capacity
        self.k: torch.Tensor | None = None
        self.v: torch.Tensor | None = None
        self.length = 0

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        B, nh, T, hs = k.shape
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


class KVCache:
    """One :class:`LayerKVCache` per layer of a model."""

    def __init__(self, n_layer: int, capacity: int):
        self.layers = [LayerKVCache(capacity) for _ in range(n_layer)]

    @property
    def length(self) -> int:
        return self.layers[0].length


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention, fused: one (C -> 3C) projection for q, k, v,
    heads split with view/transpose, and PyTorch's fused kernel. (B, T, C) -> (B, T, C).

    It computes exactly what :class:`MultiHeadAttention` computes (see
    :meth:`load_from_multihead`), but in a few large matmuls instead of many small ones.
    """

    def __init__(self, n_embd: int, n_head: int, block_size: int, dropout: float = 0.0, bias: bool = False):
        super().__init__()
        _check_heads(n_embd, n_head)
        self.n_head = n_head
        self.n_embd = n_embd
        self.c_attn = nn.Linear(n_embd, 3 * n_embd, bias=bias)
        self.c_proj = nn.Linear(n_embd, n_embd, bias=bias)
        self.dropout = dropout
        self.resid_dropout = nn.Dropout(dropout)
        # Set True to keep the (B, nh, T, T) weights for plotting. That path runs the attention
        # written out, without dropout on the weights: use it in eval mode.
        self.need_weights = False
        self.last_weights: torch.Tensor | None = None

    @classmethod
    def from_config(cls, config) -> "CausalSelfAttention":
        """Built from a model config, as ``Block(config)`` and ``FeedForward(config)`` are.
        (Chapter 4 passes the sizes one by one to show what each is.)"""
        return cls(config.n_embd, config.n_head, config.block_size, config.dropout, config.bias)

    def split_heads(self, t: torch.Tensor) -> torch.Tensor:
        B, T, C = t.shape
        return t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)

    def forward(self, x: torch.Tensor, cache: LayerKVCache | None = None) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)  # each (B, T, C)
        q, k, v = self.split_heads(q), self.split_heads(k), self.split_heads(v)  # each (B, nh, T, hs)
        past = 0
        if cache is not None:
            past = cache.length
            k, v = cache.append(k, v)  # now (B, nh, past + T, hs)
        dropout_p = self.dropout if self.training else 0.0
        if self.need_weights:
            # Query i sits at absolute position past + i and may see keys 0 .. past + i.
            mask = causal_mask(past + T, x.device)[past:]
            y, weights = scaled_dot_product_attention(q, k, v, mask)
            self.last_weights = weights.detach()
        elif past == 0:
            y = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=True)
        elif T == 1:
            y = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p)  # one new query sees everything
        else:
            mask = causal_mask(past + T, x.device)[past:]
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p)
        y = y.transpose(1, 2).contiguous().view(B, T, C)  # re-assemble the heads side by side
        return self.resid_dropout(self.c_proj(y))

    @torch.no_grad()
    def load_from_multihead(self, mha: MultiHeadAttention) -> "CausalSelfAttention":
        """Copy the weights of a list-of-heads :class:`MultiHeadAttention` into this fused layer.

        Head h's query weights become rows h*hs:(h+1)*hs of the q block of c_attn,
        and likewise for keys and values; the output projection is shared as is.
        """
        if len(mha.heads) != self.n_head:
            raise ValueError(f"{len(mha.heads)} heads given, this layer has {self.n_head}")
        for i, name in enumerate(["query", "key", "value"]):
            block = slice(i * self.n_embd, (i + 1) * self.n_embd)
            self.c_attn.weight[block] = torch.cat([getattr(h, name).weight for h in mha.heads], dim=0)
            if self.c_attn.bias is not None:
                self.c_attn.bias[block] = torch.cat([getattr(h, name).bias for h in mha.heads], dim=0)
        self.c_proj.load_state_dict(mha.proj.state_dict())
        return self
