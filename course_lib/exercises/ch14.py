"""Checks for chapter 14, Today's decoders: ``from course_lib.exercises import ch14``.

Each check draws its inputs from its own generator (the global random state is left alone)
and compares with the library: :mod:`course_lib.rope`, :class:`course_lib.norms.RMSNorm`,
:func:`course_lib.attention.repeat_kv`, :func:`course_lib.attention.sliding_window_mask`.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ..attention import repeat_kv, sliding_window_mask
from ..rope import apply_rope, rope_cos_sin
from . import ExerciseError, call, call_with_hints, expect_tensor, fail, passed


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _rope(x: torch.Tensor, positions: torch.Tensor, theta: float) -> torch.Tensor:
    return apply_rope(x, *rope_cos_sin(positions, x.shape[-1], theta))


def _rope_interleaved(x, positions, theta):
    """The other convention: neighbours (2i, 2i+1) form a pair."""
    cos, sin = rope_cos_sin(positions, x.shape[-1], theta)
    a, b = x[..., 0::2], x[..., 1::2]
    out = torch.empty_like(x)
    out[..., 0::2], out[..., 1::2] = a * cos - b * sin, a * sin + b * cos
    return out


def _rms_norm(x, weight, eps):  # torch.nn.functional.rms_norm exists from torch 2.4 on only
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def _close(a, b, atol=1e-5) -> bool:
    return (isinstance(a, torch.Tensor) and a.shape == b.shape
            and torch.allclose(a.double(), b.double(), atol=atol))


def check_rope(fn, quiet: bool = False) -> None:
    """``fn(x, positions, theta)``: x (..., T, hs) rotated by RoPE, pair j being channels
    (j, j + hs/2) turned by the angle ``positions[t] * theta**(-2j/hs)``; returns x's shape."""
    cases = [((5, 8), 10000.0), ((2, 3, 7, 16), 10000.0), ((4, 32), 500.0)]
    for i, (shape, theta) in enumerate(cases):
        x = torch.randn(*shape, generator=_gen(40 + i))
        T = shape[-2]
        positions = torch.arange(T) + 3 * i  # not always from 0
        got = call(fn, x.clone(), positions.clone(), theta)
        expected = _rope(x, positions, theta)
        what = (f"rope(x of shape {tuple(shape)}, positions {positions.tolist()[:3]}..., "
                f"theta={theta})")
        expect_tensor(got, expected.shape, what,
                      "return a tensor of x's shape: a rotation keeps every channel.")
        if _close(got, expected):
            continue
        if _close(got, _rope_interleaved(x, positions, theta)):
            fail(f"{what}: you rotate neighbouring channels (2j, 2j+1), the RoFormer convention.",
                 "the library (and Hugging Face's Llama) pairs channel j with channel j + hs/2: "
                 "a = x[..., :hs//2], b = x[..., hs//2:].")
        if _close(got, _rope(x, -positions, theta)):
            fail(f"{what}: every pair turns the wrong way (by minus the angle).",
                 "(a, b) -> (a cos - b sin, a sin + b cos): the minus sign belongs to the first "
                 "coordinate.")
        if _close(got, _rope(x, positions, theta**0.5)):
            fail(f"{what}: the frequencies are off: pair j should turn by theta**(-2j/hs) per "
                 "position.",
                 "the exponent is 2j/hs for j = 0 .. hs/2 - 1 (torch.arange(0, hs, 2) / hs), not "
                 "j/hs.")
        if _close(got, _rope(x, torch.arange(T), theta)):
            fail(f"{what}: the positions start at 0 whatever `positions` says.",
                 "use the positions you are given: with a KV cache the new tokens do not start at "
                 "0.")
        fail(f"{what}: the values differ from RoPE's.",
             "angles = positions[:, None] * theta ** (-torch.arange(0, hs, 2) / hs); rotate (a, b) "
             "by them.")
    if not quiet:
        passed("your RoPE rotates every pair like course_lib.rope.apply_rope, for 3 shapes and two "
               "bases.")


def check_rms_norm(fn) -> None:
    """``fn(x, weight, eps)``: x (..., C) divided by the root mean square of its C channels
    (sqrt(mean(x^2) + eps)), times the gain ``weight`` (C,)."""
    for i, (shape, eps) in enumerate([((4, 6), 1e-5), ((2, 3, 16), 1e-6), ((3, 8), 0.5)]):
        # a mean away from 0 tells RMS from LayerNorm
        x = torch.randn(*shape, generator=_gen(50 + i)) * 2 + 0.7
        weight = torch.randn(shape[-1], generator=_gen(60 + i))
        got = call_with_hints(fn, {"must match the size": "the mean over the last dimension has "
                                                          "shape (...,) and "
                                   "does not broadcast against x (..., C): keep the dimension, "
                                   "x.pow(2).mean(dim=-1, keepdim=True)."}, x.clone(),
                              weight.clone(), eps)
        expected = _rms_norm(x, weight, eps)
        what = f"rms_norm(x of shape {tuple(shape)}, weight, eps={eps})"
        expect_tensor(got, expected.shape, what,
                      "normalise over the last dimension and keep x's shape.")
        if _close(got, expected):
            continue
        if _close(got, F.layer_norm(x, (shape[-1],), weight, None, eps)):
            fail(f"{what}: you subtract the mean first; that is LayerNorm.",
                 "RMSNorm divides by sqrt(mean(x**2) + eps) and never centres x.")
        rms = x.pow(2).mean(-1, keepdim=True).sqrt()
        if _close(got, x / (rms + eps) * weight):
            fail(f"{what}: eps is added outside the square root.",
                 "x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight.")
        if _close(got, expected / weight):
            fail(f"{what}: the gain is missing.", "multiply the normalised x by weight.")
        if _close(got, x / x.std(-1, keepdim=True) * weight, atol=1e-3) or _close(
                got, x / (x.var(-1, keepdim=True) + eps).sqrt() * weight):
            fail(f"{what}: you divide by the standard deviation (around the mean).",
                 "the root mean square is sqrt(mean(x**2)), about 0, not about the mean.")
        fail(f"{what}: the values differ from RMSNorm's.",
             "mean of the squares over the last dim (keepdim=True), plus eps, square root, divide, "
             "times weight.")
    passed("your RMSNorm equals x * rsqrt(mean(x**2) + eps) * weight, as course_lib.norms.RMSNorm "
           "and torch.nn.RMSNorm compute it, for 3 shapes and eps values.")


def check_repeat_kv(fn) -> None:
    """``fn(kv, n_rep)``: (B, n_kv, T, hs) -> (B, n_kv * n_rep, T, hs), query heads
    j * n_rep .. (j + 1) * n_rep - 1 reading key/value head j."""
    for i, (shape, n_rep) in enumerate([((2, 2, 5, 4), 3), ((1, 4, 3, 8), 2), ((2, 1, 6, 4), 4),
                                        ((1, 3, 2, 2), 1)]):
        kv = torch.randn(*shape, generator=_gen(70 + i))
        got = call(fn, kv.clone(), n_rep)
        expected = repeat_kv(kv, n_rep)
        what = f"repeat_kv(kv of shape {tuple(shape)}, n_rep={n_rep})"
        expect_tensor(got, expected.shape, what,
                      f"return shape (B, n_kv * n_rep, T, hs) = {tuple(expected.shape)}.")
        if torch.equal(got, expected):
            continue
        if torch.equal(got, kv.repeat(1, n_rep, 1, 1)):
            fail(f"{what}: the heads come out in the order 0, 1, ..., 0, 1, ... (tiled).",
                 "each key/value head serves n_rep neighbouring query heads: 0, 0, 1, 1, ...; "
                 "use kv.repeat_interleave(n_rep, dim=1).")
        fail(f"{what}: the heads are not those of kv.",
             "repeat each head n_rep times along dim 1, in order.")
    passed("your repeat_kv gives each group of query heads its key/value head, in the library's "
           "order.")


def _attend_reference(q, k, v, positions, theta):
    cos, sin = rope_cos_sin(positions, q.shape[-1], theta)
    return F.scaled_dot_product_attention(apply_rope(q, cos, sin), apply_rope(k, cos, sin), v,
                                          is_causal=True)


def _call_attend(fn, *args):
    """Run the student's ``attend``; when it raises NotImplementedError from a function it calls
    (exercise 1's ``rope``), say so instead of "attend() still raises"."""
    try:
        return call(fn, *args)
    except ExerciseError as e:
        if "still raises NotImplementedError" not in str(e):
            raise
    try:  # run it again to see where NotImplementedError came from
        fn(*args)
    except NotImplementedError as e:
        tb = e.__traceback__
        while tb.tb_next is not None:
            tb = tb.tb_next
        where = tb.tb_frame.f_code
        if where is not getattr(fn, "__code__", None):
            fail(f"Not done yet: attend() calls {where.co_name}(), which still raises "
                 "NotImplementedError.",
                 f"finish {where.co_name}() first (exercise 1, checked by ch14.check_rope), run "
                 "its cell, then run this check again.")
    fail("Not done yet: attend() still raises NotImplementedError.",
         "replace `raise NotImplementedError()` with your code, run that cell, then run this check "
         "again.")


def _students_rope_is_wrong(fn) -> str | None:
    """The problem check_rope finds with the ``rope`` that ``fn`` reads from its notebook, or
    None."""
    rope = getattr(fn, "__globals__", {}).get("rope")
    if not callable(rope):
        return None
    try:
        check_rope(rope, quiet=True)
    except ExerciseError as e:
        return str(e).split("\n")[0]
    return None


def check_rope_attention(fn) -> None:
    """Spot the bug. ``fn(q, k, v, positions, theta)``: causal attention of (B, nh, T, hs) queries,
    keys and values with RoPE at ``positions`` (T,); returns (B, nh, T, hs). A correct version
    depends on relative positions only: shifting every position by the same amount changes
    nothing."""
    B, nh, T, hs = 2, 3, 6, 8
    q, k, v = (torch.randn(B, nh, T, hs, generator=_gen(80 + i)) for i in range(3))
    for shift, theta in [(0, 10000.0), (5, 10000.0), (2, 100.0)]:
        positions = torch.arange(T) + shift
        got = _call_attend(fn, q.clone(), k.clone(), v.clone(), positions, theta)
        expected = _attend_reference(q, k, v, positions, theta)
        what = f"attend(q, k, v, positions {shift}..{shift + T - 1}, theta={theta})"
        expect_tensor(got, expected.shape, what, "return (B, nh, T, hs), the attention output.")
        if _close(got, expected):
            continue
        rotated_v = apply_rope(v, *rope_cos_sin(positions, hs, theta))
        if _close(got, _attend_reference(q, k, rotated_v, positions, theta)):
            fail(f"{what}: the values are rotated too, so the output depends on absolute positions "
                 "(shift every position by the same amount and it changes).",
                 "RoPE rotates queries and keys only, so that their scores see m - n; values carry "
                 "content.")
        rope_problem = _students_rope_is_wrong(fn)
        if rope_problem:
            fail(f"{what}: the output differs, and so does your rope() of exercise 1: "
                 f"{rope_problem}",
                 "make ch14.check_rope(rope) pass first; attend() uses it.")
        fail(f"{what}: the output differs from causal attention with RoPE on q and k.",
             "rotate q and k with the same positions, leave v alone, then softmax(q k^T / "
             "sqrt(hs)) v, causally.")
    passed("only queries and keys are rotated: the output is the same whatever the positions start "
           "from.")


def check_window_mask(fn) -> None:
    """``fn(T, window)``: the (T, T) boolean mask of sliding-window attention, True where query t
    (row) may attend to key s (column): s <= t and t - s < window, i.e. itself and the window - 1
    positions before it."""
    for T, window in [(6, 3), (5, 1), (4, 10), (8, 8), (7, 2)]:
        got = call(fn, T, window)
        expected = sliding_window_mask(T, T, window)
        what = f"window_mask(T={T}, window={window})"
        expect_tensor(got, expected.shape, what,
                      "return a (T, T) tensor: one row per query, one column per key.")
        if got.dtype != torch.bool:
            fail(f"{what}: the mask has dtype {got.dtype}.",
                 "return booleans (True: may attend), e.g. a comparison.")
        if torch.equal(got, expected):
            continue
        t, s = torch.meshgrid(torch.arange(T), torch.arange(T), indexing="ij")
        if torch.equal(got, (s <= t) & (t - s <= window)):
            fail(f"{what}: each query sees window + 1 positions.",
                 "a window of W holds the query itself and the W - 1 positions before it: t - s < "
                 "window.")
        if torch.equal(got, (s <= t) & (t - s < window - 1)):
            fail(f"{what}: each query sees window - 1 positions.",
                 "the window counts the query itself: t - s runs from 0 to window - 1, so t - s < "
                 "window.")
        if torch.equal(got, (t - s).abs() < window):
            fail(f"{what}: queries see keys after them.",
                 "a decoder never looks ahead: also require s <= t.")
        if torch.equal(got, expected.T):
            fail(f"{what}: the mask is transposed.", "rows are queries (t), columns are keys (s).")
        if torch.equal(got, ~expected):
            fail(f"{what}: your mask is inverted: True where a key is blocked.",
                 "here True means MAY attend, as in F.scaled_dot_product_attention's boolean "
                 "attn_mask (the opposite of nn.MultiheadAttention's boolean attn_mask, where True "
                 "blocks): return (s <= t) & (t - s < window) without the ~.")
        if torch.equal(got, s <= t):
            fail(f"{what}: that is the causal mask alone: each query sees every key before it, not "
                 f"only the last {window}.",
                 "add the window to the causal condition: (s <= t) & (t - s < window).")
        fail(f"{what}: the mask differs from the sliding window's.",
             "True exactly where 0 <= t - s < window.")
    passed("your mask equals course_lib.attention.sliding_window_mask for 5 lengths and windows.")


__all__ = ["check_rope", "check_rms_norm", "check_repeat_kv", "check_rope_attention",
           "check_window_mask"]
