"""Checks for chapter 11, The original Transformer: ``from course_lib.exercises import ch11``."""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ..model import sinusoidal_position_encoding
from ..seq2seq import Attention, Seq2SeqConfig
from . import as_number, call, describe, expect_close, expect_sequence, expect_tensor, fail, passed


def _padded_source(g: torch.Generator, lengths: list[int], S: int, V: int = 20,
                   pad_id: int = 0) -> torch.Tensor:
    src = torch.randint(3, V, (len(lengths), S), generator=g)
    for b, n in enumerate(lengths):
        src[b, n:] = pad_id
    return src


# --- 1. the source padding mask ----------------------------------------------------------------


def check_source_padding_mask(fn) -> None:
    """``fn(src, pad_id) -> mask``: src (B, S) token ids padded on the right with ``pad_id``;
    mask (B, 1, 1, S), boolean, True on real tokens (where attention is allowed)."""
    g = torch.Generator().manual_seed(110)
    for lengths, S, pad_id in [([3, 1, 5], 5, 0), ([2, 7], 9, 0), ([4, 4, 1, 2], 6, 7),
                               ([1], 1, 0)]:
        src = _padded_source(g, lengths, S, pad_id=pad_id)
        src[src == pad_id] = pad_id
        # real tokens never equal pad_id
        src[:, 0] = torch.where(src[:, 0] == pad_id, pad_id + 1, src[:, 0])
        expected = (src != pad_id)[:, None, None, :]
        got = call(fn, src.clone(), pad_id)
        what = f"source_padding_mask for a batch of shape {tuple(src.shape)} (pad_id {pad_id})"
        if not isinstance(got, torch.Tensor):
            fail(f"{what}: expected a tensor, got {describe(got)}.", "return a boolean tensor")
        if got.dtype != torch.bool:
            fail(f"{what}: expected a boolean mask, got dtype {got.dtype}.",
                 "compare with pad_id (src != pad_id): comparisons give booleans, which "
                 "masked_fill and F.scaled_dot_product_attention read as 'allowed' (True) or not.")
        if got.shape == src.shape:
            fail(f"{what}: your mask has shape {tuple(got.shape)}; attention scores are (B, nh, T, "
                 "S).",
                 "add two axes so that it broadcasts over heads and query positions: mask[:, None, "
                 "None, :].")
        if got.shape != expected.shape:
            fail(f"{what}: expected shape {tuple(expected.shape)}, got {tuple(got.shape)}.",
                 "the mask depends on the batch element and the KEY position only: (B, 1, 1, S).")
        if torch.equal(got, ~expected):
            fail(f"{what}: your mask is inverted: True on padding.",
                 "our convention (and F.scaled_dot_product_attention's) is True = may attend. "
                 "PyTorch's nn.Transformer key_padding_mask uses the opposite, True = padding.")
        if not torch.equal(got, expected):
            fail(f"{what}: the mask is True/False in the wrong places.",
                 "True exactly where src != pad_id.")
    passed("your mask hides every padded source position from attention.")


# --- 2. cross-attention ---------------------------------------------------------------------


def check_cross_attention(fn) -> None:
    """``fn(x, memory, mask, layer) -> out``: multi-head cross-attention written out with the
    weights of ``layer`` (a :class:`course_lib.seq2seq.Attention`: ``q_proj``, ``kv_proj``,
    ``c_proj``, ``n_head``). x (B, T, C) decoder states, memory (B, S, C) encoder output,
    mask (B, 1, 1, S) True on real source tokens; out (B, T, C)."""
    g = torch.Generator().manual_seed(111)
    for B, T, S, C, nh, lengths in [(2, 3, 5, 8, 2, [5, 2]), (3, 4, 6, 12, 3, [1, 6, 3]),
                                    (1, 1, 2, 4, 1, [2]), (2, 5, 7, 16, 4, [7, 4])]:
        torch.manual_seed(int(torch.randint(10**6, (1,), generator=g)))
        layer = Attention(Seq2SeqConfig(vocab_size=8, n_embd=C, n_head=nh, dropout=0.0)).eval()
        x, memory = torch.randn(B, T, C, generator=g), torch.randn(B, S, C, generator=g)
        mask = (torch.arange(S)[None, :] < torch.tensor(lengths)[:, None])[:, None, None, :]
        with torch.no_grad():
            expected = layer(x, memory, mask)
            got = call(fn, x.clone(), memory.clone(), mask.clone(), layer)
        what = f"cross_attention with B={B}, T={T}, S={S}, C={C}, n_head={nh}"
        if not isinstance(got, torch.Tensor):
            fail(f"{what}: expected a tensor, got {describe(got)}.", "return the (B, T, C) output")
        if got.shape != expected.shape:
            hint = ("queries come from x (T positions), keys and values from memory (S positions): "
                    "the output has one row per QUERY, (B, T, C).")
            fail(f"{what}: expected shape {tuple(expected.shape)}, got {tuple(got.shape)}.", hint)
        with torch.no_grad():
            q = layer.split_heads(layer.q_proj(x))
            k, v = (layer.split_heads(t) for t in layer.kv_proj(memory).split(C, dim=2))
            scores = q @ k.transpose(-2, -1) / math.sqrt(C // nh)  # (B, nh, T, S)
            mistakes = {
                "the softmax runs over the queries (dim=-2), not over the keys":
                    F.softmax(scores.masked_fill(~mask, float("-inf")), -2) @ v,
                "the masked scores were filled with 0, which is not masking":
                    F.softmax(scores.masked_fill(~mask, 0.0), -1) @ v,
            }
        hints = {"the softmax runs over the queries (dim=-2), not over the keys":
                 "each query's weights over the KEYS must sum to 1: softmax over the last axis, "
                 "dim=-1.",
                 "the masked scores were filled with 0, which is not masking":
                 "exp(0) = 1, so a key filled with 0 still gets weight: fill masked scores with "
                 "float('-inf'), whose exp is exactly 0."}
        if (isinstance(got, torch.Tensor) and got.shape == expected.shape
            and got.is_floating_point()):
            for mistake, y in mistakes.items():
                wrong = layer.c_proj(y.transpose(1, 2).reshape(B, T, C)).detach()
                if not torch.allclose(wrong, expected, atol=1e-5, equal_nan=True) and \
                        torch.allclose(got.detach().to(wrong.dtype), wrong, atol=1e-5,
                                       equal_nan=True):
                    fail(f"{what}: {mistake}.", hints[mistake])
        expect_tensor(got, expected.shape, what, dtype=expected.dtype,
                      dtype_hint="the layer's weights and x are float32, and so is its output: "
                                 "build no tensor of another dtype (e.g. scale with math.sqrt, not "
                                 "a float64 tensor).")
        if torch.allclose(got, expected, atol=1e-5):
            continue
        with torch.no_grad():
            no_mask = layer(x, memory, None)
            q = layer.split_heads(layer.q_proj(x))
            k, v = (layer.split_heads(t) for t in layer.kv_proj(memory).split(C, dim=2))
            scores = q @ k.transpose(-2, -1) / math.sqrt(C)  # scaled by C, not the head size
            y = F.softmax(scores.masked_fill(~mask, float("-inf")), -1) @ v
            by_c = layer.c_proj(y.transpose(1, 2).reshape(B, T, C))
        if min(lengths) < S and torch.allclose(got, no_mask, atol=1e-5):
            fail(f"{what}: the padded source positions were attended to.",
                 "fill the scores of masked keys with -inf before the softmax: "
                 "scores.masked_fill(~mask, -inf).")
        if nh > 1 and torch.allclose(got, by_c, atol=1e-5):
            fail(f"{what}: the scores are scaled by 1/sqrt(C).",
                 "scale by 1/sqrt(head size) = 1/sqrt(C / n_head).")
        expect_close(got, expected, what, "queries from layer.q_proj(x); keys and values from "
                     "layer.kv_proj(memory).split(C, dim=-1); split heads, softmax over the LAST "
                     "axis (the keys), join heads, then layer.c_proj.")
    passed("your cross-attention equals course_lib.seq2seq.Attention, masks included.")


# --- 3. label smoothing ---------------------------------------------------------------------------


def check_label_smoothed_loss(fn) -> None:
    """``fn(logits, targets, epsilon) -> loss``: logits (N, V), targets (N,), the mean over N
    of the cross-entropy against the smoothed target: 1 - epsilon on the right token plus
    epsilon / V on every token (the right one included), as ``F.cross_entropy(...,
    label_smoothing=epsilon)``."""
    g = torch.Generator().manual_seed(112)
    for N, V, eps in [(4, 5, 0.1), (10, 3, 0.3), (1, 7, 0.0), (6, 50, 0.1), (8, 2, 0.5)]:
        logits = torch.randn(N, V, generator=g) * 2
        targets = torch.randint(V, (N,), generator=g)
        expected = F.cross_entropy(logits, targets, label_smoothing=eps)
        got = call(fn, logits.clone(), targets.clone(), eps)
        what = f"label_smoothed_loss(N={N}, V={V}, epsilon={eps})"
        if isinstance(got, torch.Tensor) and got.numel() == N and N > 1:
            fail(f"{what}: you returned one loss per position.",
                 "return their mean, a single number.")
        if isinstance(got, torch.Tensor) and got.numel() == N * V and N * V > 1:
            fail(f"{what}: you returned a tensor of shape {tuple(got.shape)}, one loss per "
                 "position and token.",
                 "sum over the vocabulary (the smoothed target times -log p), then average over "
                 "the N positions.")
        got = as_number(got, what, "return the mean loss as a single number (a 0-d tensor).")
        logp = F.log_softmax(logits, -1)
        nll = -logp.gather(1, targets[:, None]).squeeze(1)
        others = (-logp.sum(-1) - nll) / (V - 1)
        variants = {
            "spread epsilon over the V - 1 WRONG tokens": ((1 - eps) * nll + eps * others).mean(),
            "left out the (1 - epsilon) weight of the right "
            "token": (nll + eps * -logp.mean(-1)).mean(),
        }
        if eps > 0:
            for mistake, value in variants.items():
                if abs(got - float(value)) < 1e-5 < abs(float(value) - float(expected)):
                    fail(f"{what}: you {mistake}.",
                         "the smoothed target is (1 - eps) * one_hot + eps / V everywhere (the "
                         "right token too): loss = (1 - eps) * nll + eps * mean over all V of -log "
                         "p.")
        expect_close(torch.tensor(got), expected, what,
                     "loss = (1 - eps) * (-log p[target]) + eps * mean_v(-log p[v]), "
                     "with log p from F.log_softmax, averaged over the N positions.")
    passed("your label-smoothed loss equals F.cross_entropy(..., label_smoothing=epsilon).")


# --- 4. one beam-search step ---------------------------------------------------------------------


_BEAM_NAMES = ("new_scores", "beams", "tokens")


def _as_tensor(value, name: str, what: str) -> torch.Tensor:
    """One of the beam step's three answers as a tensor (a list of numbers is accepted)."""
    try:
        return torch.as_tensor(value)
    except (TypeError, ValueError, RuntimeError):
        fail(f"{what}: {name} should be a tensor, got {describe(value)}.",
             "return the tensors topk gives you: new_scores, flat // V, flat % V.")


def check_beam_step(fn) -> None:
    """``fn(scores, logp, beam_size) -> (new_scores, beams, tokens)``: scores (K,) the summed
    log-probabilities of the K live hypotheses, logp (K, V) the log-probabilities of their next
    token. Returns the ``beam_size`` best extensions over all K * V candidates, best first:
    their scores (beam_size,), which hypothesis each extends (beam_size,) and the token added
    (beam_size,)."""
    g = torch.Generator().manual_seed(113)
    for K, V, size in [(1, 6, 3), (3, 5, 3), (4, 9, 4), (2, 4, 2), (3, 7, 5)]:
        scores = -torch.rand(K, generator=g).sort(descending=True).values * 3
        logp = F.log_softmax(torch.randn(K, V, generator=g) * 2, -1)
        cand = (scores[:, None] + logp).flatten()
        expected_scores, idx = cand.topk(size)
        expected_beams, expected_tokens = idx // V, idx % V
        got = call(fn, scores.clone(), logp.clone(), size)
        what = f"beam_step with K={K} hypotheses, V={V}, beam_size={size}"
        got = expect_sequence(got, 3, f"{what}: expected a tuple (new_scores, beams, tokens)",
                              "return new_scores, beams, tokens: three tensors of beam_size "
                              "entries each.")
        new_scores, beams, tokens = (_as_tensor(t, name, what) for t, name in zip(got, _BEAM_NAMES))
        for t, name in zip((new_scores, beams, tokens), _BEAM_NAMES):
            if t.shape != (size,):
                fail(f"{what}: {name} has shape {tuple(t.shape)}, expected ({size},).",
                     "rank all K * V candidates together (flatten them) and keep beam_size of "
                     "them.")
        for t, name in zip((beams, tokens), _BEAM_NAMES[1:]):
            if t.is_floating_point() or t.is_complex() or t.dtype == torch.bool:
                fail(f"{what}: {name} has dtype {t.dtype}; hypothesis and token indices are whole "
                     f"numbers (got {t.tolist()}).",
                     "idx / V divides into fractions: use floor division, idx // V, and idx % V "
                     "for the token; both stay torch.long like the indices topk returns.")
        own = logp.flatten().topk(size).values
        if torch.allclose(new_scores.float(), own, atol=1e-5):
            fail(f"{what}: the scores ignore the hypotheses' own scores.",
                 "a candidate's score is its hypothesis' score PLUS the new token's "
                 "log-probability: scores[:, None] + logp.")
        expect_close(new_scores.float(), expected_scores, what + ": new_scores",
                     "flatten scores[:, None] + logp to (K * V,) and take topk(beam_size).")
        if not (torch.equal(beams, expected_beams) and torch.equal(tokens, expected_tokens)):
            fail(f"{what}: the scores are right, but beams/tokens are not.",
                 "flat index i of a (K, V) table is hypothesis i // V and token i % V.")
    passed("your beam step keeps the best extensions over all hypotheses.")


# --- 5. spot the bug: positions that stop at max_len ----------------------------------------------


def add_positions_buggy(x: torch.Tensor, max_len: int = 4) -> torch.Tensor:
    """The buggy version the chapter shows: a sinusoidal table of ``max_len`` rows, indexed with
    positions clamped so that no IndexError ever shows."""
    B, T, C = x.shape
    pe = sinusoidal_position_encoding(max_len, C)  # (max_len, C)
    pos = torch.arange(T).clamp(max=max_len - 1)  # "safe": never out of range
    return x + pe[pos]


def check_add_positions(fn) -> None:
    """``fn(x) -> x + PE``: x (B, T, C); adds the sinusoidal position encoding of every position
    0..T-1 (``course_lib.model.sinusoidal_position_encoding``), for any T."""
    g = torch.Generator().manual_seed(114)
    for B, T, C in [(2, 3, 8), (1, 4, 6), (2, 9, 8), (3, 32, 16), (1, 100, 4)]:
        x = torch.randn(B, T, C, generator=g)
        expected = x + sinusoidal_position_encoding(T, C)
        got = call(fn, x.clone())
        what = f"add_positions for x of shape {(B, T, C)}"
        if isinstance(got, torch.Tensor) and got.shape == x.shape and got.dtype != x.dtype:
            fail(f"{what}: x is {x.dtype}, but your sum is {got.dtype}.",
                 "add a table of x's dtype: sinusoidal_position_encoding gives float32; a NumPy "
                 "table is float64, so convert it with torch.from_numpy(pe).to(x.dtype). A float64 "
                 "sum would make every layer after it fail on mixed dtypes, and float16 loses "
                 "precision.")
        if isinstance(got, torch.Tensor) and got.shape == x.shape and T > 4 \
                and torch.allclose(got, add_positions_buggy(x), atol=1e-6):
            fail(f"{what}: every position from 3 on gets the same encoding, so the model cannot "
                 "tell them apart.",
                 "the table has only max_len = 4 rows and the clamp hides it: build it for T rows "
                 "(or a max_len at least as long as any input) and drop the clamp.")
        expect_close(got, expected, what,
                     "x + sinusoidal_position_encoding(T, C), with T = x.shape[1].")
    passed("your positions are right for every length tried, up to 100.")
