"""Checks for chapter 23, Smaller models: quantization: ``from course_lib.exercises import
ch23``."""
from __future__ import annotations

import torch

from ..quantize.rtn import code_range, dequantize_codes, quantize_codes
from . import call, expect_sequence, expect_tensor, fail, passed


def _matrix(seed: int, out: int = 6, n: int = 16) -> torch.Tensor:
    """Rows of very different sizes, and one column far larger than the rest (an outlier input)."""
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(out, n, generator=g) * torch.logspace(-2, 1, out)[:, None]
    w[:, 3] *= 6
    return w


def _integers(t: torch.Tensor, what: str, lo: int, hi: int, hint: str) -> torch.Tensor:
    t = t.detach()
    if not torch.equal(t.double(), t.double().round()):
        fail(f"{what} holds numbers that are not integers (e.g. "
             f"{t.flatten()[(t != t.round()).flatten()][0]:.4g}).",
             hint)
    if t.min() < lo or t.max() > hi:
        fail(f"{what} runs from {t.min():g} to {t.max():g}, outside the {hi - lo + 1} codes [{lo}, "
             f"{hi}].", hint)
    return t


def check_symmetric_per_row(fn) -> None:
    """``fn(w, bits) -> (q, scale)``: symmetric round-to-nearest with one scale per row of
    W (out, in): scale (out, 1) = the row's largest |w| / (2**(bits-1) - 1), q = round(w / scale)
    as integers in [-2**(bits-1), 2**(bits-1) - 1]."""
    for seed, bits in ((0, 4), (1, 3), (2, 8)):
        w = _matrix(seed)
        q, scale = expect_sequence(call(fn, w.clone(), bits), 2, f"quantize_rows(w, {bits})",
                                   "return (q, scale)")
        if tuple(scale.shape) in ((1, w.shape[1]), (w.shape[1],)):
            fail(f"your scale has shape {tuple(scale.shape)}: one per column. A row of W is one "
                 "output feature; its weights share a scale.",
                 "take the largest |w| along dim=1 (the row), keepdim=True")
        expect_tensor(scale, (w.shape[0], 1), "scale",
                      "one scale per row: w.abs().amax(dim=1, keepdim=True) / qmax")
        lo, hi = code_range(bits, True)
        expected = w.abs().amax(1, keepdim=True) / hi
        if not torch.allclose(scale.double(), expected.double(), rtol=1e-5, atol=0):
            fail("your scales are not each row's largest |w| divided by 2**(bits-1) - 1.",
                 "with qmax = 2**(bits-1) - 1, the largest weight of a row must land on the code "
                 "+-qmax")
        expect_tensor(q, tuple(w.shape), "q")
        q = _integers(q, "q", lo, hi, "q = torch.round(w / scale), a tensor of integers")
        if not torch.equal(q.long(), quantize_codes(w, expected, torch.zeros_like(expected), bits,
                                                    True).long()):
            fail("q is not round(w / scale): some weights are not on their nearest code.",
                 "torch.round(w / scale)")
    passed("one scale per row, every weight within half a step of scale * q.")


def check_asymmetric(fn) -> None:
    """``fn(w, bits) -> (q, scale, zero)``: asymmetric round-to-nearest of a whole tensor w with a
    zero point: lo = min(w.min(), 0), hi = max(w.max(), 0), scale = (hi - lo) / (2**bits - 1),
    zero = round(-lo / scale), an integer code, and q = clamp(round(w / scale) + zero, 0, 2**bits -
    1); then w is read back as scale * (q - zero), with 0 exactly."""
    for seed, bits in ((3, 4), (4, 3), (5, 2), (6, 8), (None, 2)):
        # scale 1 and zero 2 (round(1.5), half to even): 1.5 lands on code 4 of 0..3
        if seed is None:
            w = torch.tensor([-1.5, 1.5, 0.0, 0.25])
        else:
            # seed 4: mostly positive
            w = _matrix(seed).flatten()[:40] + (0.7 if seed == 4 else 0.0)
        got = expect_sequence(call(fn, w.clone(), bits), 3, f"quantize_asymmetric(w, {bits})",
                              "return (q, scale, zero)")
        q, scale, zero = (torch.as_tensor(t) for t in got)
        hi_code = 2 ** bits - 1
        zero = _integers(zero, "zero", 0, hi_code,
                         "the zero point is a code: round it to an integer (torch.round) and keep "
                         "it in [0, 2**bits - 1]")
        lo_w, hi_w = min(w.min().item(), 0.0), max(w.max().item(), 0.0)
        exp_scale = (hi_w - lo_w) / hi_code
        if abs(float(scale) - exp_scale) > 1e-6 * exp_scale:
            fail(f"your scale is {float(scale):.6g}, expected (hi - lo) / (2**bits - 1) = "
                 f"{exp_scale:.6g}.",
                 "stretch the range to hold 0: lo = min(w.min(), 0), hi = max(w.max(), 0)")
        exp_zero = round(-lo_w / exp_scale)
        if int(zero) != exp_zero:
            fail(f"your zero point is {int(zero)}, expected round(-lo / scale) = {exp_zero}: the "
                 "code that stands for the weight 0.",
                 "zero = torch.round(-lo / scale); not floor, not round(lo / scale)")
        expect_tensor(q, tuple(w.shape), "q")
        q = _integers(q, "q", 0, hi_code,
                      "clamp the codes: q = (torch.round(w / scale) + zero).clamp(0, 2**bits - 1)")
        s, z = torch.tensor(exp_scale), torch.tensor(float(exp_zero))
        if not torch.equal(q.long(), quantize_codes(w, s, z, bits, False).long()):
            fail("q is not clamp(round(w / scale) + zero, 0, 2**bits - 1).",
                 "round first, then add the zero point")
        if dequantize_codes(torch.tensor(exp_zero), s, z) != 0:
            fail("the weight 0 is not read back as exactly 0.")
    passed("integer zero points, codes in range, and 0 stored exactly.")


def check_quantize_with_grid(fn) -> None:
    """``fn(w, scale, bits) -> q``: symmetric codes for a column w (out,) on a grid fixed in advance
    (scale (out,)), as GPTQ does after earlier columns moved w: q = clamp(round(w / scale),
    -2**(bits-1), 2**(bits-1) - 1). The moved weights may lie beyond the grid: they must be
    clamped."""
    g = torch.Generator().manual_seed(7)
    for bits in (3, 4):
        lo, hi = code_range(bits, True)
        w = torch.randn(20, generator=g)
        # rows whose grid is too small
        scale = (w.abs().max() / hi).repeat(20) * torch.linspace(0.3, 1.0, 20)
        q = call(fn, w.clone(), scale.clone(), bits)
        expect_tensor(q, (20,), "q",
                      "one code per weight: torch.round(w / scale).clamp(lo, hi), a tensor "
                      "shaped like w")
        q = torch.as_tensor(q).detach()
        if q.min() >= 0 and torch.equal(q.long(), torch.round(w / scale).clamp(
                0, 2 ** bits - 1).long()):
            fail(f"you clamp to [0, {2 ** bits - 1}], the asymmetric range: the negative weights "
                 "lose their sign. A symmetric code is signed.",
                 "torch.round(w / scale).clamp(-2**(bits-1), 2**(bits-1) - 1)")
        if q.min() >= 0 and torch.equal(q.long(), (torch.round(w / scale) - lo).clamp(
                0, 2 ** bits - 1).long()):
            fail(f"these are stored codes, offset by {-lo} into [0, {2 ** bits - 1}]: the "
                 "exercise asks for the signed code.",
                 "leave out the offset: torch.round(w / scale).clamp(-2**(bits-1), "
                 "2**(bits-1) - 1)")
        if q.min() < lo or q.max() > hi:
            fail(f"your codes run from {q.min():g} to {q.max():g}: weights past the grid were not "
                 f"clamped to [{lo}, {hi}], so they do not fit in {bits} bits.",
                 "torch.round(w / scale).clamp(-2**(bits-1), 2**(bits-1) - 1)")
        expected = quantize_codes(w, scale, torch.zeros_like(scale), bits, True)
        if not torch.equal(q.long(), expected.long()):
            if torch.equal(q.long(), torch.clamp(torch.round(w / scale), -hi, hi).long()):
                fail(f"you clamp to [-{hi}, {hi}]: the code {lo} is one of the {2 ** bits} codes "
                     "too.",
                     f"clamp(-2**(bits-1), 2**(bits-1) - 1), i.e. [{lo}, {hi}]")
            fail("q is not clamp(round(w / scale), -2**(bits-1), 2**(bits-1) - 1).",
                 "divide by the scale, round to the nearest integer, then clamp to the code range")
    passed("codes on the fixed grid, clamped at both ends.")
