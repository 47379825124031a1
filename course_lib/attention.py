"""Self-attention, from "average the past" to the fused multi-head layer (chapters 3-4). Chapter
8's KV cache is :mod:`course_lib.kv_cache`'s (its classes are importable from here too).

Shapes: B batch, T time (context length), C channels (embedding size),
nh number of heads, hs head size (C = nh * hs).
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from .kv_cache import KVCache, LayerKVCache  # noqa: F401 (KVCache: chapters import it here)
from .norms import RMSNorm
from .rope import apply_rope


def causal_mask(T: int, device=None) -> torch.Tensor:
    """(T, T) boolean lower-triangular matrix: entry [t, s] is True when s <= t,
    i.e. position t may look at position s."""
    return torch.tril(torch.ones(T, T, dtype=torch.bool, device=device))


def sliding_window_mask(T: int, n_keys: int, window: int, device=None) -> torch.Tensor:
    """(T, n_keys) boolean mask of sliding-window attention (Mistral): the T queries are the last T
    of the n_keys positions, and query t may look at key s when 0 <= t - s < window, i.e. at
    itself and the window - 1 positions before it. window >= n_keys gives the causal mask."""
    query = torch.arange(n_keys - T, n_keys, device=device)[:, None]  # absolute index of each query
    distance = query - torch.arange(n_keys, device=device)[None, :]
    return (distance >= 0) & (distance < window)


def padding_mask(lengths: torch.Tensor, T: int, side: str = "right") -> torch.Tensor:
    """(B, T) boolean mask: True for real tokens, False for padding. With ``side="right"`` the
    pads follow each sequence's ``lengths[b]`` tokens; with ``side="left"`` they precede them."""
    if side not in ("right", "left"):
        raise ValueError(f"side must be 'right' or 'left', got {side!r}")
    positions = torch.arange(T, device=lengths.device)[None, :]  # (1, T)
    if side == "left":
        return positions >= (T - lengths)[:, None]
    return positions < lengths[:, None]


def check_attention_mask(attention_mask: torch.Tensor, B: int, Tk: int,
                         Tq: int | None = None) -> torch.Tensor:
    """Validate a mask of real tokens and return it as booleans.

    Accepted shapes: (B, Tk), True where key position s holds a real token, or (B, Tq, Tk),
    True where query t may attend to key s (e.g. the block-diagonal mask of packed sequences).
    Tk counts every key the queries can see: with a KV cache, the cached positions too.
    """
    if not isinstance(attention_mask, torch.Tensor):
        raise TypeError(f"attention_mask must be a tensor, got {type(attention_mask).__name__}")
    shapes = [(B, Tk)] + ([(B, Tq, Tk)] if Tq is not None else [])
    if tuple(attention_mask.shape) not in shapes:
        raise ValueError(
            f"attention_mask has shape {tuple(attention_mask.shape)}, expected "
            f"{' or '.join(str(s) for s in shapes)}: (batch, keys) with True on real tokens, where "
            "keys counts the cached positions too"
            + ("" if Tq is None else ", or (batch, queries, keys) for a full mask")
        )
    if attention_mask.dtype != torch.bool:
        if (attention_mask.dtype.is_floating_point
            or not ((attention_mask == 0) | (attention_mask == 1)).all()):
            raise ValueError("attention_mask must hold booleans (or 0/1 integers): True/1 for real "
                             f"tokens, False/0 for padding; got dtype {attention_mask.dtype}")
        attention_mask = attention_mask.bool()
    return attention_mask


def causal_padding_mask(attention_mask: torch.Tensor, T: int | None = None) -> torch.Tensor:
    """The mask attention really uses: causal AND padding, shape (B, 1, Tq, Tk), True = may attend.

    ``attention_mask`` is (B, Tk) with True on real tokens (or (B, Tq, Tk), a full mask per
    sequence). The ``T`` queries (default: all Tk positions) are the *last* T positions, as with
    a KV cache: query i sits at position Tk - T + i and may see keys 0 .. Tk - T + i that are
    real. Broadcasting does the combining: causal (1, 1, Tq, Tk) & keys (B, 1, 1, Tk).

    A pad query would see no key at all, and a softmax over nothing but -inf is nan; so every
    query may always see itself (the diagonal). That changes nothing for real tokens, whose
    outputs never read a pad, and keeps the pads' own (ignored) outputs finite.
    """
    Tk = attention_mask.shape[-1]
    T = Tk if T is None else T
    causal = causal_mask(Tk, attention_mask.device)[Tk - T:]  # (Tq, Tk)
    if attention_mask.dim() == 2:
        allowed = causal[None, None] & attention_mask[:, None, None, :].bool()  # (B, 1, Tq, Tk)
    else:
        allowed = causal[None, None] & attention_mask[:, None, -T:, :].bool()
    diagonal = torch.eye(Tk, dtype=torch.bool, device=attention_mask.device)[Tk - T:]  # (Tq, Tk)
    return allowed | diagonal


def segment_mask(segment_ids: torch.Tensor) -> torch.Tensor:
    """(B, T) segment ids of packed sequences -> (B, T, T) block-diagonal mask: query t may attend
    to key s when both belong to the same sequence (same id). Id 0 marks padding, which no
    query sees. Combine with the causal mask, e.g. through :func:`causal_padding_mask`."""
    same = segment_ids[:, :, None] == segment_ids[:, None, :]  # (B, T, T)
    return same & (segment_ids != 0)[:, None, :]


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

    def __init__(self, n_embd: int, head_size: int, block_size: int, dropout: float = 0.0,
                 bias: bool = False):
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

    def __init__(self, n_embd: int, n_head: int, block_size: int, dropout: float = 0.0,
                 bias: bool = False):
        super().__init__()
        _check_heads(n_embd, n_head)
        head_size = n_embd // n_head
        self.heads = nn.ModuleList(Head(n_embd, head_size, block_size, dropout, bias)
                                   for _ in range(n_head))
        self.proj = nn.Linear(n_embd, n_embd, bias=bias)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.cat([h(x) for h in self.heads], dim=-1)  # (B, T, nh * hs) = (B, T, C)
        return self.dropout(self.proj(out))


def _check_heads(n_embd: int, n_head: int) -> None:
    if n_head < 1 or n_embd % n_head != 0:
        raise ValueError(
            f"n_embd ({n_embd}) must be divisible by n_head ({n_head}) so that every head gets "
            "the same head size; try n_head in "
            f"{[h for h in range(1, n_embd + 1) if n_embd % h == 0][:12]}"
        )


def repeat_kv(t: torch.Tensor, n_rep: int) -> torch.Tensor:
    """(B, n_kv, T, hs) -> (B, n_kv * n_rep, T, hs): each key/value head repeated for the n_rep
    query heads of its group (heads 0 .. n_rep - 1 share key/value head 0, and so on)."""
    return t if n_rep == 1 else t.repeat_interleave(n_rep, dim=1)


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention, fused: one (C -> 3C) projection for q, k, v,
    heads split with view/transpose, and PyTorch's fused kernel. (B, T, C) -> (B, T, C).

    It computes exactly what :class:`MultiHeadAttention` computes (see
    :meth:`load_from_multihead`), but in a few large matmuls instead of many small ones.

    Chapter 14's options: ``n_kv_head`` < ``n_head`` is grouped-query attention (1: multi-query):
    the projection makes n_head query heads but only n_kv_head key and value heads, each shared
    by n_head / n_kv_head query heads, so c_attn is C -> C + 2 * n_kv_head * hs and a KV cache
    holds n_kv_head heads. ``rope`` in :meth:`forward` rotates queries and keys by their positions.
    The decoders of 2025-26: ``head_size`` of its own (Qwen3: the heads together need not be C
    wide, so q is C -> nh * hs and c_proj nh * hs -> C); ``qk_norm``, an RMSNorm over each head's
    hs channels of q and of k, before RoPE, which keeps the scores' scale in check (Qwen3, OLMo 2);
    ``sliding_window``, each query sees only itself and the window - 1 positions before it
    (Mistral), and the KV cache keeps only those.
    """

    def __init__(self, n_embd: int, n_head: int, block_size: int, dropout: float = 0.0,
                 bias: bool = False, n_kv_head: int | None = None, head_size: int | None = None,
                 qk_norm: bool = False, norm_eps: float = 1e-5, sliding_window: int | None = None):
        super().__init__()
        if head_size is None:
            _check_heads(n_embd, n_head)
        n_kv_head = n_head if n_kv_head is None else n_kv_head
        if n_kv_head < 1 or n_head % n_kv_head:
            raise ValueError(f"n_head ({n_head}) must be a multiple of n_kv_head ({n_kv_head}): "
                             "each key/value head serves the same number of query heads")
        self.n_head = n_head
        self.n_kv_head = n_kv_head
        self.n_embd = n_embd
        self.head_size = n_embd // n_head if head_size is None else head_size
        self.q_size = n_head * self.head_size  # channels of q: C unless head_size is set apart
        # channels of k (and of v): C for multi-head attention
        self.kv_size = n_kv_head * self.head_size
        self.c_attn = nn.Linear(n_embd, self.q_size + 2 * self.kv_size, bias=bias)
        self.c_proj = nn.Linear(self.q_size, n_embd, bias=bias)
        self.q_norm = RMSNorm(self.head_size, norm_eps) if qk_norm else None
        self.k_norm = RMSNorm(self.head_size, norm_eps) if qk_norm else None
        self.window = sliding_window
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
        return cls(config.n_embd, config.n_head, config.block_size, config.dropout, config.bias,
                   getattr(config, "n_kv_head", None), getattr(config, "head_dim", None),
                   getattr(config, "qk_norm", False), getattr(config, "norm_eps", 1e-5),
                   getattr(config, "sliding_window", None))

    def split_heads(self, t: torch.Tensor) -> torch.Tensor:
        B, T, C = t.shape
        # (B, heads, T, hs)
        return t.view(B, T, C // self.head_size, self.head_size).transpose(1, 2)

    def forward(self, x: torch.Tensor, cache: LayerKVCache | None = None,
                mask: torch.Tensor | None = None,
                rope: tuple[torch.Tensor, torch.Tensor] | None = None
                ) -> torch.Tensor:
        """``mask``, when given, is the whole boolean mask, causal part included, broadcastable to
        (B, nh, T, past + T): True where query t may attend to key s (see
        :func:`causal_padding_mask`). Without it the mask is causal only. ``rope``: the cos and sin
        of the new tokens' rotation angles, (T, hs/2) or (B, T, hs/2) (see
        :mod:`course_lib.rope`)."""
        B, T, C = x.shape
        # (B, T, nh*hs), 2x (B, T, kv)
        q, k, v = self.c_attn(x).split([self.q_size, self.kv_size, self.kv_size], dim=2)
        # (B, nh, T, hs), 2x (B, n_kv, T, hs)
        q, k, v = self.split_heads(q), self.split_heads(k), self.split_heads(v)
        # QK-norm: each head's q and k to unit RMS (times a gain), before rotating
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        # positions enter by rotation, before caching: a cached key keeps its angle
        if rope is not None:
            q, k = apply_rope(q, *rope), apply_rope(k, *rope)
        past = 0
        if cache is not None:
            past = cache.length
            # now (B, n_kv, keys, hs): the cache holds n_kv heads only, and with a window its last
            # window - 1
            k, v = cache.append(k, v, keep=None if self.window is None else self.window - 1)
        n_keys = k.shape[2]  # past + T, or fewer when a sliding window's cache dropped the oldest
        n_rep = self.n_head // self.n_kv_head  # query heads per key/value head
        dropout_p = self.dropout if self.training else 0.0
        if mask is not None:
            if mask.shape[-2:] != (T, past + T):
                raise ValueError(f"attention mask ends in shape {tuple(mask.shape[-2:])}, expected "
                                 f"(queries, keys) = ({T}, {past + T})")
            mask = mask[..., past + T - n_keys:]  # the keys the cache still holds
        # some query would see more than its window
        if self.window is not None and n_keys > self.window:
            band = sliding_window_mask(T, n_keys, self.window, x.device)
            mask = band if mask is None else mask & band
        if T == 1 and past > 0 and mask is None and not self.need_weights:
            # One new query per head sees every cached key. The n_rep query heads of a group share
            # one key/value head, so fold them into the query axis, (B, n_kv, n_rep, hs), instead of
            # copying the keys and values n_rep times: generation reads only n_kv heads of cache.
            # reshape, not view: CUDA's kernels may return y non-contiguous (issue 31).
            q = q.reshape(B, self.n_kv_head, n_rep, self.head_size)
            y = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p).reshape(
                B, self.n_head, 1, self.head_size)
        else:
            # (B, nh, keys, hs): head h reads group h // n_rep
            k, v = repeat_kv(k, n_rep), repeat_kv(v, n_rep)
            if mask is None and (self.need_weights or past > 0):
                # Query i sits at absolute position past + i and may see keys 0 .. past + i.
                mask = causal_mask(n_keys, x.device)[n_keys - T:]
            if self.need_weights:
                y, weights = scaled_dot_product_attention(q, k, v, mask)
                self.last_weights = weights.detach()
            elif mask is not None:
                y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p)
            else:
                y = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=True)
        y = y.transpose(1, 2).reshape(B, T, self.q_size)  # re-assemble the heads side by side
        return self.resid_dropout(self.c_proj(y))

    @torch.no_grad()
    def load_from_multihead(self, mha: MultiHeadAttention) -> "CausalSelfAttention":
        """Copy the weights of a list-of-heads :class:`MultiHeadAttention` into this fused layer.

        Head h's query weights become rows h*hs:(h+1)*hs of the q block of c_attn,
        and likewise for keys and values; the output projection is shared as is.
        """
        if self.n_kv_head != self.n_head:
            raise ValueError("load_from_multihead needs one key/value head per query head "
                             "(n_kv_head = n_head)")
        if len(mha.heads) != self.n_head:
            raise ValueError(f"{len(mha.heads)} heads given, this layer has {self.n_head}")
        for i, name in enumerate(["query", "key", "value"]):
            block = slice(i * self.n_embd, (i + 1) * self.n_embd)
            self.c_attn.weight[block] = torch.cat([getattr(h, name).weight for h in mha.heads],
                                                  dim=0)
            if self.c_attn.bias is not None:
                self.c_attn.bias[block] = torch.cat([getattr(h, name).bias for h in mha.heads],
                                                    dim=0)
        self.c_proj.load_state_dict(mha.proj.state_dict())
        return self
