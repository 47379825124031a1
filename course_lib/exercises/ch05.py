"""Checks for chapter 5, The Transformer block: ``from course_lib.exercises import ch05``."""
from __future__ import annotations

import torch
import torch.nn as nn

from ..attention import CausalSelfAttention
from ..model import Block, FeedForward, GPTConfig
from . import call, expect_close, expect_tensor, fail, passed


def _post_ln_parts(C: int, n_head: int, T: int, bias: bool, seed: int):
    """Fresh sub-layers with random weights (LayerNorm gains and biases too, so that swapping
    the two norms shows), and a course_lib post-LN Block holding copies of the same weights."""
    torch.manual_seed(seed)
    config = GPTConfig(vocab_size=11, block_size=T, n_layer=1, n_head=n_head, n_embd=C, bias=bias,
                       norm_position="post")
    attn = CausalSelfAttention(C, n_head, T, 0.0, bias)
    mlp = FeedForward(config)
    ln_1, ln_2 = nn.LayerNorm(C, bias=bias), nn.LayerNorm(C, bias=bias)
    with torch.no_grad():
        for ln in (ln_1, ln_2):
            ln.weight.uniform_(0.5, 1.5)
            if ln.bias is not None:
                ln.bias.normal_(0.0, 0.3)
    block = Block(config)
    block.attn.load_state_dict(attn.state_dict())
    block.mlp.load_state_dict(mlp.state_dict())
    block.ln_1.load_state_dict(ln_1.state_dict())
    block.ln_2.load_state_dict(ln_2.state_dict())
    for m in (attn, mlp, ln_1, ln_2, block):
        m.eval()
    return attn, mlp, ln_1, ln_2, block


def check_post_ln_block(fn) -> None:
    """``fn(x, attn, mlp, ln_1, ln_2) -> (B, T, C)``: the post-LN block of the 2017 paper,
    h = ln_1(x + attn(x)), out = ln_2(h + mlp(h)), compared with course_lib's
    ``Block(GPTConfig(norm_position="post"))`` holding the same weights."""
    cases = [(16, 2, 8, 3, False, 0), (32, 4, 12, 2, True, 1), (24, 3, 5, 1, False, 2)]
    for C, n_head, T, B, bias, seed in cases:
        attn, mlp, ln_1, ln_2, block = _post_ln_parts(C, n_head, T, bias, seed)
        x = torch.randn(B, T, C, generator=torch.Generator().manual_seed(100 + seed))
        with torch.no_grad():
            expected = block(x)
            got = call(fn, x.clone(), attn, mlp, ln_1, ln_2)
            if not isinstance(got, torch.Tensor):
                fail(f"expected a tensor, got {type(got).__name__}.",
                     "return the block's output, shape (B, T, C).")
            if got.shape != x.shape:
                fail(f"for x of shape {tuple(x.shape)} expected an output of the same shape, got "
                     f"{tuple(got.shape)}.",
                     "a block maps (B, T, C) to (B, T, C): both sub-layers keep the shape.")
            expect_tensor(got, x.shape, "the block's output", dtype=x.dtype,
                          dtype_hint="the sub-layers return x's dtype (float32); do not convert "
                                     "the result.")
            close = lambda a: torch.allclose(got, a, atol=1e-5, rtol=1e-4)  # noqa: E731
            h = x + attn(ln_1(x))
            if close(h + mlp(ln_2(h))):
                fail("this is the pre-LN block (GPT-2): the LayerNorms come before each sub-layer.",
                     "post-LN normalises AFTER the residual add: h = ln_1(x + attn(x)), out = "
                     "ln_2(h + mlp(h)).")
            h = ln_1(attn(x))
            if close(ln_2(mlp(h))):
                fail("there is no residual connection: the sub-layers' outputs replace x instead "
                     "of being added to it.",
                     "add the input back before normalising: ln_1(x + attn(x)).")
            h = ln_1(x + attn(x))
            if close(h + mlp(h)) or close(ln_2(x + mlp(h))):
                fail("the second half is not ln_2(h + mlp(h)), where h = ln_1(x + attn(x)).",
                     "the MLP reads h and its output is added to h (not to x); then ln_2 "
                     "normalises the sum.")
            h = ln_2(x + attn(x))
            if close(ln_1(h + mlp(h))):
                fail("the two LayerNorms are swapped: ln_1 belongs to the attention half, ln_2 to "
                     "the MLP half.",
                     "each LayerNorm has its own learned gain and bias; use ln_1 first, then ln_2.")
            worst = (got.double() - expected.double()).abs().max().item()
            if not close(expected) and worst < 5e-2:
                fail(f"post-LN block output for x of shape {tuple(x.shape)}: values differ from "
                     f"the expected ones by at most {worst:.3g}: close, but more than float32 "
                     "rounding.",
                     "that is the size of a lower precision's rounding: if part of your block runs "
                     "in bfloat16 or float16 (.half(), .bfloat16(), autocast), keep everything in "
                     "float32. Otherwise compare with h = ln_1(x + attn(x)); return ln_2(h + "
                     "mlp(h)).")
            expect_close(got, expected, f"post-LN block output for x of shape {tuple(x.shape)}",
                         "h = ln_1(x + attn(x)); return ln_2(h + mlp(h)).")
    passed("your post-LN block equals course_lib's Block(norm_position='post') with the same "
           "weights.")


_DTYPE_HINT = ("keep x's dtype: x * mask / (1 - p) with a boolean mask gives it; do not convert "
               "the result.")


def check_dropout(fn) -> None:
    """``fn(x, p, training) -> tensor`` of x's shape: inverted dropout. In training, each element
    is zeroed with probability p and the survivors are scaled by 1 / (1 - p); outside training
    (or with p = 0) it returns x unchanged."""
    torch.manual_seed(0)
    x = torch.randn(4, 5, 6)
    for p in (0.0, 0.5):
        got = call(fn, x.clone(), p, False)
        if not isinstance(got, torch.Tensor) or got.shape != x.shape:
            fail(f"expected a tensor of shape {tuple(x.shape)}, got "
                 f"{getattr(got, 'shape', type(got).__name__)}.",
                 "return a tensor shaped like x.")
        expect_tensor(got, x.shape, f"dropout with training=False (p={p})", dtype=x.dtype,
                      dtype_hint=_DTYPE_HINT)
        if not torch.equal(got, x):
            fail(f"with training=False (p={p}) the output differs from the input.",
                 "dropout is switched off outside training: return x as it is.")
    got = call(fn, x.clone(), 0.0, True)
    expect_tensor(got, x.shape, "dropout with p=0 in training", "return a tensor shaped like x.",
                  dtype=x.dtype, dtype_hint=_DTYPE_HINT)
    if not torch.allclose(got, x):
        fail("with p=0 nothing should be dropped, but the output differs from the input.",
             "p is the probability of DROPPING an element; with p=0 every element is kept and "
             "1/(1-p) = 1.")

    x = torch.rand(200, 500) + 0.5  # no zeros, so a zero in the output means "dropped"
    original = x.clone()
    for p in (0.1, 0.3, 0.6):
        got = call(fn, x, p, True)
        if not torch.equal(x, original):
            fail("your function changed its input x in place.",
                 "build a new tensor: x * mask / (1 - p).")
        if not isinstance(got, torch.Tensor) or got.shape != x.shape:
            fail(f"expected a tensor of shape {tuple(x.shape)}, got "
                 f"{getattr(got, 'shape', type(got).__name__)}.",
                 "draw one random number per element: torch.rand_like(x).")
        expect_tensor(got, x.shape, f"dropout with p={p}", dtype=x.dtype, dtype_hint=_DTYPE_HINT)
        dropped = got == 0
        kept = ~dropped
        share = dropped.double().mean().item()
        whole_columns = (dropped.all(dim=0) | kept.all(dim=0)).all()
        whole_rows = (dropped.all(dim=1) | kept.all(dim=1)).all()
        if 0 < share < 1 and (whole_columns or whole_rows):
            fail("whole rows or columns are dropped together.",
                 "draw one random number per element (torch.rand_like(x)), not one per row or "
                 "column.")
        if abs(share - (1 - p)) < 0.01 and abs(p - 0.5) > 0.05:
            fail(f"with p={p} you dropped {share:.1%} of the elements: that is 1 - p.",
                 "p is the probability of dropping: keep an element when rand >= p (or rand > p).")
        if abs(share - p) > 0.01:
            fail(f"with p={p} you dropped {share:.1%} of the elements; expected about {p:.0%}.",
                 "zero each element independently with probability p: mask = torch.rand_like(x) >= "
                 "p.")
        if torch.allclose(got[kept], x[kept]):
            fail("the kept elements are not rescaled, so the expected value of the output is (1 - "
                 "p) * x.",
                 "divide the kept elements by (1 - p): x * mask / (1 - p).")
        if torch.allclose(got[kept], x[kept] * (1 - p)):
            fail("the kept elements are multiplied by (1 - p); they should be divided by it.",
                 "inverted dropout scales up at training time, so that eval needs no change: x * "
                 "mask / (1 - p).")
        expect_close(got[kept], x[kept] / (1 - p), f"the kept elements with p={p}",
                     "every kept element should be x / (1 - p).")
    again = call(fn, x, 0.5, True)
    if torch.equal(again == 0, call(fn, x, 0.5, True) == 0):
        fail("two calls dropped exactly the same elements.",
             "draw a fresh random mask on every call.")
    passed("your dropout zeroes about p of the elements, scales the rest by 1/(1-p), "
           "and leaves x alone outside training.")


def _layer_norm_cases():
    """(x, weight, bias, eps): a (B, T, C) batch, a 2-D (N, C) batch (where normalising over the
    batch axis is a different computation), a 4-D input, rows of tiny variance (where eps
    matters) and one constant row (variance 0: only eps keeps the output finite). In float64, so
    that a difference of eps is never lost in rounding."""
    g = torch.Generator().manual_seed(5)
    f64 = dict(generator=g, dtype=torch.float64)
    constant = torch.randn(3, 10, **f64)
    constant[1] = 2.0  # a position whose C values are all equal
    cases = [(constant, torch.rand(10, **f64) + 0.5, torch.randn(10, **f64) * 0.3, 1e-5)]
    for shape, scale, eps in [((2, 5, 8), 3.0, 1e-5), ((6, 4), 1.0, 1e-5),
                              ((2, 3, 2, 12), 0.5, 1e-3), ((3, 7, 6), 1e-3, 1e-5)]:
        C = shape[-1]
        # an offset per position, which LayerNorm removes
        x = torch.randn(*shape, **f64) * scale + 2 * torch.randn(*shape[:-1], 1, **f64)
        weight = torch.rand(C, **f64) + 0.5  # gamma in [0.5, 1.5)
        bias = torch.randn(C, **f64) * 0.3  # beta
        cases.append((x, weight, bias, eps))
    return cases


def check_layer_norm(fn) -> None:
    """``fn(x, weight, bias, eps) -> tensor`` of x's shape: LayerNorm over the last dimension
    (the C channels of one position), with the biased variance (divide by C) and ``eps`` inside
    the square root, then the gain ``weight`` and the ``bias`` (both (C,)). Compared with
    ``nn.LayerNorm(C, eps=eps)`` holding the same gain and bias, on 2-D to 4-D inputs."""
    for x, weight, bias, eps in _layer_norm_cases():
        C = x.shape[-1]
        reference = nn.LayerNorm(C, eps=eps).double()
        with torch.no_grad():
            reference.weight.copy_(weight)
            reference.bias.copy_(bias)
            expected = reference(x)
        what = f"LayerNorm of x with shape {tuple(x.shape)}"
        got = call(fn, x.clone(), weight.clone(), bias.clone(), eps)
        expect_tensor(got, x.shape, what, "return the normalised tensor, shaped like x.",
                      "take the mean and variance over the last dimension with keepdim=True, so "
                      "that they broadcast back over x's shape.", dtype=x.dtype,
                      dtype_hint="compute in x's own dtype (float64 here): no .float() or .to(...)",
                      allow_nan=True)
        got = got.detach()
        if torch.allclose(got, expected, atol=1e-5, rtol=1e-4):
            continue
        if not torch.isfinite(got).all():
            fail(f"{what}: your output has nan or inf where a position's C values are all equal "
                 "(its variance is 0).",
                 "add eps to the variance INSIDE the square root: (x - mean) / torch.sqrt(var + "
                 "eps).")

        def normalised(dim, unbiased=False, eps_inside=True, affine=True):
            mean = x.mean(dim=dim, keepdim=True)
            var = x.var(dim=dim, keepdim=True, unbiased=unbiased)
            x_hat = (x - mean) / (torch.sqrt(var + eps) if eps_inside else torch.sqrt(var) + eps)
            return weight * x_hat + bias if affine else x_hat

        close = lambda a: torch.allclose(got, a, atol=1e-5, rtol=1e-4)  # noqa: E731
        if close(normalised(0)):
            fail(f"{what}: you normalised over the batch axis (dim 0), as BatchNorm does.",
                 "LayerNorm takes the statistics of ONE position over its C channels: mean and var "
                 "over dim=-1, with keepdim=True.")
        if x.dim() > 2 and close(normalised(tuple(range(1, x.dim())))):
            fail(f"{what}: you normalised over all the dimensions of each sequence, not over the "
                 "channels of each position.",
                 "take the mean and variance over the last dimension only: dim=-1.")
        if close(normalised(-1, unbiased=True)):
            fail(f"{what}: you used the unbiased variance (dividing by C - 1).",
                 "LayerNorm divides by C: x.var(dim=-1, keepdim=True, unbiased=False), or "
                 "((x - mean) ** 2).mean(dim=-1, keepdim=True).")
        if close(normalised(-1, affine=False)):
            fail(f"{what}: the output is normalised, but the gain and bias are missing.",
                 "finish with weight * x_hat + bias (each (C,), broadcast over the channels).")
        x_hat = normalised(-1, affine=False)
        if close(bias * x_hat + weight):
            fail(f"{what}: the gain and the bias are swapped.",
                 "multiply by weight (gamma), then add bias (beta): weight * x_hat + bias.")
        if close(normalised(-1, eps_inside=False)):
            fail(f"{what}: eps is added to the standard deviation instead of the variance.",
                 "nn.LayerNorm adds eps inside the square root: (x - mean) / torch.sqrt(var + "
                 "eps).")
        centred = x - x.mean(-1, keepdim=True)
        biased_var = x.var(-1, keepdim=True, unbiased=False)
        if any(close(weight * centred / torch.sqrt(biased_var + e) + bias) for e in (0.0, 1e-5)):
            fail(f"{what}: your output ignores the eps you are given ({eps:g}): it is what eps = 0 "
                 "(or a fixed 1e-5) gives.",
                 "divide by torch.sqrt(var + eps), with the function's eps argument.")
        expect_close(got, expected, what,
                     "x_hat = (x - mean) / sqrt(var + eps) with mean and biased var over dim=-1 "
                     "(keepdim=True); return weight * x_hat + bias.")
    passed("your LayerNorm equals nn.LayerNorm: statistics over the C channels of each position, "
           "variance divided by C, eps inside the square root, then the gain and bias.")
