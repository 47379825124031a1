"""Round-to-nearest quantization (course_lib/quantize/rtn.py): the error bound, clamping, integer
zero points, exact zeros, bit packing and the bytes written."""
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from course_lib.quantize.rtn import (QuantConfig, as_groups, code_range, fake_quantize, find_params,
                                     pack_bits, quantize, quantize_codes, unpack_bits)

CONFIGS = [QuantConfig(bits=b, granularity=g, group_size=4, symmetric=s)
           for b in (2, 3, 4, 6, 8) for g in ("tensor", "row", "group") for s in (True, False)]


@st.composite
def matrices(draw):
    out, groups = draw(st.integers(1, 5)), draw(st.integers(1, 4))
    seed = draw(st.integers(0, 2**31 - 1))
    scale = draw(st.sampled_from([1e-3, 1.0, 30.0]))
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(out, 4 * groups, generator=g) * scale
    if draw(st.booleans()):  # an outlier
        w[0, 0] = 20 * scale
    if draw(st.booleans()):  # all of one sign: the asymmetric range must still hold 0
        w = w.abs()
    return w


def steps_of(w, config):
    """The step (scale) of each weight, w's shape."""
    groups = as_groups(w, config)
    scale, _ = find_params(groups, config.bits, config.symmetric)
    return scale.expand_as(groups).reshape(w.shape)


@settings(max_examples=60, deadline=None)
@given(matrices(), st.sampled_from(CONFIGS))
def test_dequantize_of_quantize_is_within_half_a_step(w, config):
    qt = quantize(w, config)
    w_hat = qt.dequantize()
    step = steps_of(w, config)
    assert w_hat.shape == w.shape
    assert ((w - w_hat).abs() <= step * 0.5 * (1 + 1e-5) + 1e-12).all()
    assert torch.equal(w_hat, fake_quantize(w, config))  # the packed and unpacked paths agree


@settings(max_examples=40, deadline=None)
@given(matrices(), st.sampled_from([c for c in CONFIGS if not c.symmetric]))
def test_zero_points_are_integers_in_range_and_zero_is_exact(w, config):
    groups = as_groups(w, config)
    _, zero = find_params(groups, config.bits, config.symmetric)
    assert torch.equal(zero, zero.round()) and zero.min() >= 0 and zero.max() <= 2**config.bits - 1
    w = w.clone()
    w[:, 1] = 0.0
    assert (quantize(w, config).dequantize()[:, 1] == 0).all()


@settings(max_examples=40, deadline=None)
@given(matrices(), st.sampled_from(CONFIGS))
def test_codes_stay_in_range_even_beyond_the_grid(w, config):
    """A weight past the grid (here 3 times the largest) is clamped to the last code."""
    groups = as_groups(w, config)
    scale, zero = find_params(groups, config.bits, config.symmetric)
    q = quantize_codes(groups * 3, scale, zero, config.bits, config.symmetric)
    lo, hi = code_range(config.bits, config.symmetric)
    assert q.min() >= lo and q.max() <= hi


@settings(max_examples=50, deadline=None)
@given(st.integers(1, 8), st.integers(0, 200), st.integers(0, 2**31 - 1))
def test_pack_then_unpack_is_the_identity_and_takes_ceil_bits_over_8_bytes(bits, n, seed):
    codes = torch.randint(0, 2**bits, (n,), generator=torch.Generator().manual_seed(seed))
    packed = pack_bits(codes, bits)
    assert packed.dtype == torch.uint8 and packed.numel() == math.ceil(n * bits / 8)
    assert torch.equal(unpack_bits(packed, bits, n), codes)


def test_pack_refuses_codes_out_of_range():
    with pytest.raises(ValueError, match=r"\[0, 7\]"):
        pack_bits(torch.tensor([8]), 3)


@pytest.mark.parametrize("config, expected", [
    (QuantConfig(bits=4, granularity="row"), 64 * 128 // 2 + 64 * 2),
    (QuantConfig(bits=4, granularity="group", group_size=32), 64 * 128 // 2 + 64 * 4 * 2),
    (QuantConfig(bits=3, granularity="group", group_size=32, symmetric=False),
     64 * 128 * 3 // 8 + 64 * 4 * 2 + 64 * 4 * 3 // 8),
    (QuantConfig(bits=8, granularity="tensor"), 64 * 128 + 2),
])
def test_stored_bytes_count_codes_scales_and_zero_points(config, expected):
    w = torch.randn(64, 128, generator=torch.Generator().manual_seed(0))
    assert quantize(w, config).nbytes() == expected


def test_per_row_scales_follow_each_row_not_each_column():
    w = torch.ones(3, 8) * torch.tensor([[1.0], [10.0], [100.0]])
    qt = quantize(w, QuantConfig(bits=4, granularity="row"))
    assert qt.scales.shape == (3, 1)
    torch.testing.assert_close(qt.scales.float().flatten(),
                               torch.tensor([1.0, 10.0, 100.0]) / 7, rtol=1e-3, atol=0)
    torch.testing.assert_close(qt.dequantize(), w, rtol=1e-3, atol=0)


def test_smaller_groups_and_more_bits_make_smaller_errors():
    w = torch.randn(64, 128, generator=torch.Generator().manual_seed(1))
    w[3, 5] = 12.0  # one outlier spoils its tensor, its row, its group
    err = lambda c: (quantize(w, c).dequantize() - w).pow(2).mean().item()
    tensor, row, group = (err(QuantConfig(bits=4, granularity=g, group_size=16))
                          for g in ("tensor", "row", "group"))
    assert tensor > row > group
    assert err(QuantConfig(bits=3)) > err(QuantConfig(bits=4)) > err(QuantConfig(bits=8))


@pytest.mark.parametrize("kwargs, phrase", [
    (dict(bits=1), "bits"), (dict(bits=9), "bits"), (dict(granularity="column"), "granularity"),
    (dict(group_size=0), "group_size")])
def test_bad_settings_are_refused_in_one_line(kwargs, phrase):
    with pytest.raises(ValueError, match=phrase):
        QuantConfig(**kwargs)


def test_a_group_size_that_does_not_divide_the_columns_is_refused():
    with pytest.raises(ValueError, match="does not divide the 10 columns"):
        quantize(torch.randn(2, 10), QuantConfig(granularity="group", group_size=4))
