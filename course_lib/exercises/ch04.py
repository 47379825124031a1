"""Checks for the exercises of chapter 4, "Attention heads".

    from course_lib.exercises import ch04
    ch04.check_split_heads(split_heads, merge_heads)
"""
from __future__ import annotations

import torch
import torch.nn as nn

from ..attention import (CausalSelfAttention, Head, average_past_softmax, causal_mask,
                         scaled_dot_product_attention)
from ..model import sinusoidal_position_encoding
from . import as_bool, call, call_with_hints, describe, expect_close, expect_tensor, fail, passed


def _close(a, b, atol: float = 1e-5) -> bool:
    return (isinstance(a, torch.Tensor) and a.shape == b.shape
            and torch.allclose(a.double(), b.double(), atol=atol, rtol=1e-4))


# --- splitting and merging heads ------------------------------------------------------------------

_VIEW_HINT = ("a transposed tensor is not contiguous in memory, so .view() refuses it: call "
              ".contiguous() first (y.transpose(1, 2).contiguous().view(B, T, C)) or use "
              ".reshape().")


def check_split_heads(split_heads, merge_heads) -> None:
    """``split_heads(x, n_head)``: (B, T, C) -> (B, nh, T, hs), head h getting channels
    h*hs:(h+1)*hs; ``merge_heads(y)``: (B, nh, T, hs) -> (B, T, nh*hs), its inverse."""
    generator = torch.Generator().manual_seed(6)
    cases = [(2, 5, 12, 3), (1, 7, 8, 1), (3, 4, 16, 4), (2, 3, 6, 6)]
    for B, T, C, nh in cases:
        hs = C // nh
        x = torch.randn(B, T, C, generator=generator)
        # the library's split: (B, nh, T, hs)
        expected = CausalSelfAttention(C, nh, T).split_heads(x)
        out = call_with_hints(split_heads, {"view size": _VIEW_HINT}, x.clone(), nh)
        what = f"split_heads(x of shape {(B, T, C)}, n_head={nh})"
        if not isinstance(out, torch.Tensor):
            fail(f"{what}: expected a tensor, got {describe(out)}.",
                 "return the (B, nh, T, hs) tensor.")
        if out.shape != expected.shape:
            hint = ("view(B, T, n_head, hs) splits the channels, then transpose(1, 2) moves the "
                    "head dimension forward.")
            if out.shape == (B, T, nh, hs):
                hint = ("almost: now transpose(1, 2) so that the heads come before time: (B, nh, "
                        "T, hs).")
            fail(f"{what}: expected shape {tuple(expected.shape)}, got {tuple(out.shape)}.", hint)
        if nh > 1 and T > 1 and _close(out, x.reshape(B, nh, T, hs)):
            fail(f"{what}: the shape is right but the numbers are in the wrong places.",
                 "view(B, nh, T, hs) cuts the memory in the wrong order: head 0 would get the "
                 "whole first positions instead of channels 0..hs-1 of every position. Use view(B, "
                 "T, nh, hs).transpose(1, 2).")
        if nh > 1 and hs > 1 and _close(out, x.view(B, T, hs, nh).transpose(1, 3).transpose(2, 3)):
            fail(f"{what}: each head gets every nh-th channel instead of a block of hs "
                 "neighbouring channels.",
                 "view(B, T, n_head, hs): the LAST dimension must be the head size.")
        expect_close(out, expected, what,
                     "out[:, h] must equal x[:, :, h*hs:(h+1)*hs]; use x.view(B, T, n_head, "
                     "hs).transpose(1, 2).")
        y = torch.randn(B, nh, T, hs, generator=generator)
        merged = call_with_hints(merge_heads, {"view size": _VIEW_HINT, "contiguous": _VIEW_HINT},
                                 y.clone())
        what = f"merge_heads(y of shape {(B, nh, T, hs)})"
        want = y.transpose(1, 2).reshape(B, T, C)
        expect_tensor(merged, want.shape, what, "return the (B, T, C) tensor.",
                      "transpose(1, 2) back to (B, T, nh, hs), then merge the last two dimensions "
                      "into C = nh * hs.")
        if nh > 1 and T > 1 and _close(merged, y.reshape(B, T, C)):
            fail(f"{what}: the shape is right but the heads are scrambled.",
                 "transpose(1, 2) back BEFORE merging, so that head h lands in channels "
                 "h*hs:(h+1)*hs.")
        expect_close(merged, want, what, "merged[:, :, h*hs:(h+1)*hs] must equal y[:, h].")
        round_trip = call(merge_heads, call(split_heads, x.clone(), nh))
        expect_close(round_trip, x, f"merge_heads(split_heads(x, {nh}))",
                     "merging must undo splitting exactly.")
    passed("split_heads matches CausalSelfAttention.split_heads and merge_heads undoes it "
           f"({len(cases)} shapes).")


# --- permutation equivariance ---------------------------------------------------------------------


class _Bidirectional(nn.Module):
    """One head of attention with NO mask: every position sees every other."""

    def __init__(self, C: int, hs: int):
        super().__init__()
        self.query, self.key, self.value = (nn.Linear(C, hs, bias=False) for _ in range(3))

    def forward(self, x):
        return scaled_dot_product_attention(self.query(x), self.key(x), self.value(x))[0]


class _WithPositions(nn.Module):
    """The same head, after adding sinusoidal position encodings to the input."""

    def __init__(self, C: int, hs: int):
        super().__init__()
        self.attn = _Bidirectional(C, hs)

    def forward(self, x):
        return self.attn(x + sinusoidal_position_encoding(x.shape[1], x.shape[2]).to(x.dtype))


class _RunningMean(nn.Module):
    def forward(self, x):
        return average_past_softmax(x)


def _layers(C: int, hs: int):
    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(C, 4 * C), nn.GELU(), nn.Linear(4 * C, C))
    return [
        ("self-attention without a mask", _Bidirectional(C, hs), True),
        ("a position-wise MLP (each position on its own)", mlp, True),
        ("a causal attention head (course_lib.attention.Head)", Head(C, hs, block_size=16), False),
        ("self-attention after adding position encodings", _WithPositions(C, hs), False),
        ("the running mean of the past (average_past_softmax)", _RunningMean(), False),
    ]


def check_is_permutation_equivariant(fn) -> None:
    """``fn(layer, x, perm)`` -> bool: True when permuting the positions of the input permutes the
    output the same way, i.e. layer(x[:, perm]) equals layer(x)[:, perm] (up to rounding)."""
    B, T, C, hs = 2, 6, 8, 4
    generator = torch.Generator().manual_seed(7)
    x = torch.randn(B, T, C, generator=generator, dtype=torch.float64)
    perms = [torch.arange(T - 1, -1, -1)]  # reversed
    while len(perms) < 3:
        p = torch.randperm(T, generator=generator)
        if not torch.equal(p, torch.arange(T)):
            perms.append(p)
    with torch.random.fork_rng(devices=[]):
        layers = _layers(C, hs)
    for name, layer, expected in layers:
        layer = layer.double().eval()
        for perm in perms:
            with torch.no_grad():
                answer = as_bool(call(fn, layer, x.clone(), perm.clone()),
                                 f"is_permutation_equivariant for {name}",
                                 "return one True/False, e.g. torch.allclose(a, b, atol=1e-6).")
            if answer != expected:
                if expected:
                    fail(f"is_permutation_equivariant said False for {name} (permutation "
                         f"{perm.tolist()}), which IS permutation-equivariant.",
                         "compare layer(x[:, perm]) with layer(x)[:, perm]: the outputs move with "
                         "the inputs, so permute the ORIGINAL output before comparing; compare "
                         "with a tolerance (torch.allclose(..., atol=1e-6)), since sums in another "
                         "order round differently.")
                fail(f"is_permutation_equivariant said True for {name} (permutation "
                     f"{perm.tolist()}), which is NOT permutation-equivariant.",
                     "permute the positions, i.e. dimension 1 (x[:, perm]), not the batch "
                     "(dimension 0); and apply the layer to the permuted input.")
    passed(f"is_permutation_equivariant tells equivariant layers from the others ({len(layers)} "
           f"layers, {len(perms)} permutations each).")


# --- spot the bug: the scale of the scores --------------------------------------------------------


def _head(x, wq, wk, wv, scale, causal=True):
    q, k, v = x @ wq, x @ wk, x @ wv  # (B, T, hs)
    scores = q @ k.transpose(-2, -1) * scale
    if causal:
        T = x.shape[1]
        scores = scores.masked_fill(~causal_mask(T), float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def check_head_attention(fn) -> None:
    """``fn(x, w_query, w_key, w_value)``: one causal head, x (B, T, C), each w (C, hs) ->
    (B, T, hs), with the scores scaled by 1/sqrt(hs)."""
    generator = torch.Generator().manual_seed(8)
    cases = [(2, 6, 32, 8), (1, 10, 48, 16), (3, 5, 64, 4), (2, 4, 16, 16)]
    for B, T, C, hs in cases:
        x = torch.randn(B, T, C, generator=generator)
        # q, k, v with unit variance
        w = [torch.randn(C, hs, generator=generator) / C**0.5 for _ in range(3)]
        expected, _ = scaled_dot_product_attention(x @ w[0], x @ w[1], x @ w[2], causal_mask(T))
        out = call(fn, x.clone(), *(t.clone() for t in w))
        what = f"head_attention with C = {C}, hs = {hs}"
        expect_tensor(out, expected.shape, what, "return wei @ v, shape (B, T, hs).",
                      "the output has one hs-vector per position: (B, T, T) @ (B, T, hs) -> (B, T, "
                      "hs).")
        if C != hs and _close(out, _head(x, *w, C**-0.5)):
            fail(f"{what}: your head still scales the scores by C**-0.5 = 1/sqrt({C}), C being the "
                 f"embedding size. A score q . k is a sum of hs = {hs} products, so its variance "
                 f"is about hs: dividing by sqrt(C) leaves it at hs/C = {hs / C:.3g} instead of 1, "
                 "and the softmax comes out too flat.",
                 "scale by the head size: k.shape[-1] ** -0.5. In the snippet, C comes from "
                 "x.shape, which is the embedding size, not the head size.")
        if _close(out, _head(x, *w, 1.0)):
            fail(f"{what}: the scores are not scaled at all.",
                 "multiply q @ k^T by k.shape[-1] ** -0.5.")
        if _close(out, _head(x, *w, hs**-1.0)):
            fail(f"{what}: you divided the scores by hs, not by sqrt(hs).",
                 "multiply by hs ** -0.5.")
        if T > 1 and _close(out, _head(x, *w, hs**-0.5, causal=False)):
            fail(f"{what}: the head sees the future.",
                 "keep the causal mask: masked_fill(tril == 0, float('-inf')).")
        expect_close(out, expected, what,
                     "softmax(q k^T / sqrt(hs)) with the future masked, then @ v.")
    passed(f"head_attention scales by the head size and matches the library on {len(cases)} "
           "shapes.")
