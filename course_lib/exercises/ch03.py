"""Checks for the exercises of chapter 3, "The mathematical trick of self-attention".

    from course_lib.exercises import ch03
    ch03.check_average_past_matmul(average_past_matmul)
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ..attention import average_past_loops, causal_mask, scaled_dot_product_attention
from . import as_bool, as_number, call, call_with_hints, expect_close, expect_tensor, fail, passed


def _close(a, b, atol: float = 1e-5) -> bool:
    return (isinstance(a, torch.Tensor) and a.shape == b.shape
            and torch.allclose(a.double(), b.double(), atol=atol, rtol=1e-4))


# --- v2: the matmul version -------------------------------------------------------------------


def check_average_past_matmul(fn) -> None:
    """``fn(x)``: (B, T, C) -> (B, T, C), each position the mean of itself and everything before
    it, computed with one matrix multiply. Compared with the loop version on several shapes and
    in float32 and float64."""
    generator = torch.Generator().manual_seed(3)
    shapes = [(4, 8, 2), (1, 1, 3), (2, 5, 7), (3, 16, 4), (1, 9, 1)]
    for shape in shapes:
        x = torch.randn(*shape, generator=generator)
        expected = average_past_loops(x)
        out = call(fn, x.clone())
        what = f"average_past_matmul on x of shape {shape}"
        expect_tensor(out, expected.shape, what, "return wei @ x.",
                      "the (T, T) weights go on the LEFT: wei @ x multiplies (T, T) @ (B, T, C) -> "
                      "(B, T, C). x @ wei would mix channels, not time steps.")
        T = shape[1]
        ones = torch.tril(torch.ones(T, T))
        if T > 1 and _close(out, ones @ x):
            fail(f"{what}: you return running SUMS, not running means.",
                 "normalise each row of the tril so it sums to 1: wei = wei / wei.sum(dim=1, "
                 "keepdim=True).")
        upper = torch.triu(torch.ones(T, T))
        if T > 1 and _close(out, (upper / upper.sum(dim=1, keepdim=True)) @ x):
            fail(f"{what}: each position averages itself and the positions AFTER it (the future).",
                 "use the lower triangle, torch.tril: row t must have weight on columns 0..t only.")
        if T > 1 and _close(out, x.mean(dim=1, keepdim=True).expand_as(x)):
            fail(f"{what}: every position gets the mean of the WHOLE sequence.",
                 "mask the future with torch.tril before normalising the rows.")
        expect_close(out, expected, what,
                     "out[b, t] must equal x[b, :t+1].mean(dim=0); print your weight matrix for T "
                     "= 3.")
    # float64: the weights must follow the input's dtype (and device)
    x = torch.randn(2, 6, 3, dtype=torch.float64, generator=generator)
    dtype_hint = ("create the weights with the input's dtype and device, e.g. "
                  "torch.tril(torch.ones(T, T, dtype=x.dtype, device=x.device)).")
    out = call_with_hints(fn, {"dtype": dtype_hint, "Double": dtype_hint, "Float": dtype_hint},
                          x.clone(), context="On a float64 x, ")
    if not isinstance(out, torch.Tensor) or out.dtype != torch.float64:
        fail("average_past_matmul on a float64 x returned "
             f"{getattr(out, 'dtype', type(out).__name__)}, expected float64.", dtype_hint)
    expect_close(out, average_past_loops(x), "average_past_matmul on a float64 x", dtype_hint)
    passed(f"average_past_matmul agrees with the loop version on {len(shapes)} shapes, in float32 "
           "and float64.")


# --- v3: masking ---------------------------------------------------------------------------------


def check_causal_softmax(fn) -> None:
    """``fn(scores)``: (..., T, T) -> (..., T, T) attention weights: -inf on the future, then a
    softmax along the last dimension."""
    generator = torch.Generator().manual_seed(4)
    shapes = [(8, 8), (4, 8, 8), (2, 3, 6, 6), (1, 1, 1), (5, 5)]
    for shape in shapes:
        T = shape[-1]
        scores = 3 * torch.randn(*shape, generator=generator)
        mask = causal_mask(T)
        expected = F.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
        out = call(fn, scores.clone())
        what = f"causal_softmax on scores of shape {shape}"
        expect_tensor(out, expected.shape, what, "return the softmax weights.",
                      "masked_fill and softmax keep the shape; slice the tril to [:T, :T] if you "
                      "made a bigger one.",
                      allow_nan=True)  # NaN has its own hint below
        if torch.isnan(out).any():
            fail(f"{what}: the weights contain NaN.",
                 "a row that is -inf everywhere gives NaN: the diagonal (s = t) must stay allowed. "
                 "Mask where tril == 0, i.e. only s > t.")
        if T > 1 and _close(out, F.softmax(scores.masked_fill(~mask, 0.0), dim=-1)):
            fail(f"{what}: the future still gets weight: you filled it with 0, not -inf.",
                 "a score of 0 is not 'forbidden': softmax turns it into exp(0) = 1 before "
                 "normalising. Use float('-inf'), so that exp(-inf) = 0.")
        if T > 1 and _close(out, F.softmax(scores, dim=-1)):
            fail(f"{what}: no masking happened; the weights are a plain softmax of the scores.",
                 "scores.masked_fill(tril == 0, float('-inf')) returns a NEW tensor: use its "
                 "result.")
        if T > 1 and _close(out, F.softmax(scores.masked_fill(~mask, float("-inf")), dim=-2)):
            fail(f"{what}: the softmax runs along the wrong dimension (columns sum to 1, not "
                 "rows).",
                 "use F.softmax(scores, dim=-1): row t (one query) is a distribution over the "
                 "positions s.")
        future = out.masked_select(~mask.expand(out.shape)) if T > 1 else torch.zeros(0)
        if future.numel() and future.abs().max() > 1e-6:
            fail(f"{what}: some weight falls on the future (above the diagonal).",
                 "mask where tril == 0 (s > t), not where it is 1.")
        expect_close(out, expected, what,
                     "weights = F.softmax(scores.masked_fill(tril == 0, float('-inf')), dim=-1).")
    passed(f"causal_softmax matches masked softmax on {len(shapes)} shapes, including (B, nh, T, "
           "T).")


# --- measuring the variance of the scores ---------------------------------------------------------


def check_score_variance(fn, head_sizes=(8, 32, 128), tolerance: float = 0.15) -> None:
    """``fn(head_size, scaled)`` -> float: the variance of q @ k^T (times 1/sqrt(head_size) when
    ``scaled``) for q, k with independent unit-variance entries. Expected: about head_size, and
    about 1 scaled (within ``tolerance``, relative)."""
    results = []
    with torch.random.fork_rng(devices=[]):  # reproducible, and the notebook's RNG is left alone
        torch.manual_seed(1234)
        for hs in head_sizes:
            number_hint = "return the variance as a number, e.g. scores.var().item()."
            raw = as_number(call(fn, hs, False), f"score_variance({hs}, scaled=False)", number_hint)
            scaled = as_number(call(fn, hs, True), f"score_variance({hs}, scaled=True)",
                               number_hint)
            results.append((hs, raw, scaled))
            unscaled_what = f"score_variance({hs}, scaled=False)"
            if not math.isclose(raw, hs, rel_tol=tolerance):
                if math.isclose(raw, math.sqrt(hs), rel_tol=tolerance):
                    fail(f"{unscaled_what} = {raw:.4g}, about sqrt({hs}) = {math.sqrt(hs):.4g}: "
                         "that is the standard deviation.", "use .var(), not .std().")
                if math.isclose(raw, 1.0, rel_tol=tolerance):
                    fail(f"{unscaled_what} = {raw:.4g}, about 1: the unscaled scores should have "
                         f"variance about the head size ({hs}).",
                         "only multiply by head_size**-0.5 when scaled is True.")
                fail(f"{unscaled_what} = {raw:.4g}, expected about {hs} (within {tolerance:.0%}).",
                     "draw q and k with torch.randn(B, T, head_size) (e.g. B = 8, T = 64, so the "
                     "estimate is precise), form q @ k.transpose(-2, -1) and return its .var().")
            scaled_what = f"score_variance({hs}, scaled=True)"
            if not math.isclose(scaled, 1.0, rel_tol=tolerance):
                if math.isclose(scaled, 1.0 / hs, rel_tol=tolerance):
                    fail(f"{scaled_what} = {scaled:.4g}, about 1/{hs}: you divided the scores by "
                         "the head size.",
                         "divide by its SQUARE ROOT: dividing a score by a divides its variance by "
                         "a**2.")
                if math.isclose(scaled, hs, rel_tol=tolerance):
                    fail(f"{scaled_what} = {scaled:.4g}, about {hs}: the scaling is missing.",
                         "multiply the scores by head_size**-0.5 when scaled is True.")
                fail(f"{scaled_what} = {scaled:.4g}, expected about 1 (within {tolerance:.0%}).",
                     "scale the scores (not q and k separately by 1/sqrt(hs) each, which divides "
                     "by hs).")
    table = ", ".join(f"hs={hs}: {raw:.4g} -> {scaled:.3f}" for hs, raw, scaled in results)
    passed(f"var(q k^T) is about the head size, and about 1 after scaling ({table}).")


# --- rows sum to 1, nothing on the future ---------------------------------------------------------


def _valid_cases(generator):
    T = 8
    avg = torch.tril(torch.ones(T, T))
    avg = avg / avg.sum(dim=1, keepdim=True)
    scores = 2 * torch.randn(4, T, T, generator=generator)
    soft = F.softmax(scores.masked_fill(~causal_mask(T), float("-inf")), dim=-1)
    heads = F.softmax(
        (2 * torch.randn(2, 3, 6, 6, generator=generator)).masked_fill(
            ~causal_mask(6), float("-inf")
        ),
        -1,
    )
    # the cases that catch a specific mistake come first, so that its hint is the one shown
    return [
        ("the identity (each token attends only to itself)", torch.eye(5),
         "the diagonal is allowed (a token may attend to itself): only entries with s > t are the "
         "future, e.g. torch.triu(w, diagonal=1)."),
        ("weights whose rows sum to 1 + 1e-6 (float rounding)", avg * (1 + 1e-6),
         "floating-point sums are rarely exactly 1: compare with a tolerance, e.g. "
         "torch.allclose(rows, torch.ones_like(rows), atol=1e-5)."),
        ("the uniform average of the past (T = 8)", avg, None),
        ("a masked softmax of random scores, shape (4, 8, 8)", soft, None),
        ("multi-head weights, shape (2, 3, 6, 6)", heads, None),
    ]


def _invalid_cases(generator):
    T = 6
    scores = 2 * torch.randn(3, T, T, generator=generator)
    no_mask = F.softmax(scores, dim=-1)
    negative = torch.tril(torch.ones(T, T))
    negative = negative / negative.sum(dim=1, keepdim=True)
    negative[3, 0], negative[3, 1] = 0.75, -0.25  # row 3 still sums to 1
    leak = torch.tril(torch.ones(T, T)) / torch.arange(1, T + 1)[:, None]
    leak[2, 2] -= 1e-3
    leak[2, 4] += 1e-3  # a little weight on the future; rows still sum to 1
    return [
        ("a plain softmax with no mask (weight on the future)", no_mask,
         "check the entries above the diagonal: torch.triu(w, diagonal=1) must be all zeros."),
        ("a tril of ones (rows sum to 1, 2, 3, ...)", torch.tril(torch.ones(T, T)),
         "check that every row sums to 1: w.sum(dim=-1)."),
        ("rows summing to 1 but with a negative weight", negative,
         "weights are probabilities: check that every entry is >= 0 too."),
        ("a weight of 0.001 on the future", leak,
         "even a small weight above the diagonal is a leak; allow only rounding errors (say "
         "1e-6)."),
        ("weights at half strength (rows sum to 0.5)", 0.5 * _soft_like(T, generator),
         "check that every row sums to 1: w.sum(dim=-1)."),
    ]


def _soft_like(T, generator):
    scores = torch.randn(T, T, generator=generator)
    return F.softmax(scores.masked_fill(~causal_mask(T), float("-inf")), dim=-1)


_BOOL_HINT = ("return one True/False for the whole tensor, e.g. bool(a and b and c) or (a & b & "
              "c).item().")


def check_is_causal_weights(fn) -> None:
    """``fn(weights)`` -> bool for weights of shape (..., T, T): True exactly when every entry is
    >= 0, every row sums to 1 (up to rounding) and no weight falls above the diagonal."""
    generator = torch.Generator().manual_seed(5)
    for name, w, hint in _valid_cases(generator):
        answer = as_bool(call(fn, w.clone()), f"is_causal_weights for {name}", _BOOL_HINT)
        if not answer:
            fail(f"is_causal_weights said False for {name}, which is a valid causal weight matrix.",
                 hint
                 or "rows sum to 1 (up to rounding), nothing negative, nothing above the diagonal.")
    for name, w, hint in _invalid_cases(generator):
        answer = as_bool(call(fn, w.clone()), f"is_causal_weights for {name}", _BOOL_HINT)
        if answer:
            fail(f"is_causal_weights said True for {name}.", hint)
    passed("is_causal_weights accepts 5 valid weight matrices and rejects 5 invalid ones.")


# --- spot the bug: softmax over the wrong axis ----------------------------------------------------


def _weights(q, k, scale, mask=True, dim=-1, fill=float("-inf")):
    T = q.shape[-2]
    scores = q @ k.transpose(-2, -1) * scale  # (B, T, T)
    if mask:
        scores = scores.masked_fill(~causal_mask(T), fill)
    return F.softmax(scores, dim=dim)


def check_attention_weights(fn) -> None:
    """Spot the bug: ``fn(q, k)``, q and k (B, T, hs) -> causal attention weights (B, T, T):
    scores q k^T / sqrt(hs), the future set to -inf, softmax over the keys (the last axis), so
    that every ROW sums to 1. Compared with course_lib.attention.scaled_dot_product_attention."""
    generator = torch.Generator().manual_seed(6)
    cases = [(2, 6, 8), (1, 10, 16), (3, 5, 4), (4, 8, 32)]
    for B, T, hs in cases:
        q = torch.randn(B, T, hs, generator=generator)
        k = torch.randn(B, T, hs, generator=generator)
        _, expected = scaled_dot_product_attention(q, k, k, causal_mask(T))
        out = call(fn, q.clone(), k.clone())
        what = f"attention_weights on q, k of shape {(B, T, hs)}"
        expect_tensor(out, expected.shape, what, "return the (B, T, T) weights.",
                      "the scores are q @ k.transpose(-2, -1): (B, T, hs) @ (B, hs, T) -> (B, T, "
                      "T).",
                      allow_nan=True)  # NaN has its own hint below
        if torch.isnan(out).any():
            fail(f"{what}: the weights contain NaN.",
                 "a row that is -inf everywhere gives NaN: mask only the future (tril == 0), never "
                 "the diagonal.")
        scale = hs**-0.5
        if _close(out, _weights(q, k, scale, dim=-2)):
            rows = ", ".join(f"{r:.2f}" for r in out[0].sum(dim=-1).tolist())
            fail(f"{what}: each COLUMN of your weights sums to 1, not each row (the rows of "
                 f"sequence 0 sum to {rows}): the softmax normalises over the queries, dim=1, "
                 "instead of over the keys.",
                 "row t holds query t's weights over the keys s <= t and must sum to 1: softmax "
                 "over the last axis, F.softmax(wei, dim=-1). With dim=1 (= dim=-2 on (B, T, T)) "
                 "each key's column sums to 1 over the queries: key 0, which every query sees, "
                 "shares its weight among all T queries, and query 0's row is just its share "
                 "(about 1/T when the scores are alike). And that sum runs over later queries, so "
                 "the future leaks into the weights of the past despite the mask.")
        if _close(out, _weights(q, k, scale, mask=False)):
            fail(f"{what}: no masking: every position attends to the future.",
                 "set the scores of the future (s > t) to -inf before the softmax: "
                 "wei.masked_fill(tril == 0, float('-inf')).")
        if _close(out, _weights(q, k, scale, fill=0.0)):
            fail(f"{what}: the future still gets weight: you filled it with 0, not -inf.",
                 "exp(0) = 1 is a weight like any other; only float('-inf') becomes exactly 0.")
        if _close(out, _weights(q, k, 1.0)):
            fail(f"{what}: the scores are not scaled.",
                 f"multiply q @ k^T by hs ** -0.5 = 1/sqrt({hs}).")
        if _close(out, _weights(q, k, 1.0 / hs)):
            fail(f"{what}: you divided the scores by hs, not by sqrt(hs).",
                 "multiply by hs ** -0.5.")
        expect_close(out, expected, what,
                     "wei = q @ k.transpose(-2, -1) * hs**-0.5, masked_fill(tril == 0, "
                     "float('-inf')), then F.softmax(wei, dim=-1).")
    passed(f"every row of your weights sums to 1 over the keys, and they match "
           f"scaled_dot_product_attention on {len(cases)} shapes.")
