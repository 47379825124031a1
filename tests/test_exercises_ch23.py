"""The checks of chapter 23's exercises: right answers pass, the classic wrong ones fail with a hint
(scales per column instead of per row, forgetting to clamp, a zero point rounded wrongly)."""
import pytest
import torch
from exercise_helpers import assert_correct, assert_leaves_rng_alone, assert_not_done, not_done

from course_lib.exercises import ExerciseError, ch23


# --- symmetric, per row ---


def quantize_rows(w, bits):
    scale = w.abs().amax(dim=1, keepdim=True) / (2 ** (bits - 1) - 1)
    return torch.round(w / scale), scale


def per_column(w, bits):
    scale = w.abs().amax(dim=0, keepdim=True) / (2 ** (bits - 1) - 1)
    return torch.round(w / scale), scale


def per_tensor(w, bits):
    scale = w.abs().max() / (2 ** (bits - 1) - 1)
    return torch.round(w / scale), scale.expand(w.shape[0], 1)


def off_by_one_qmax(w, bits):  # divides by 2**(bits-1): the largest weight misses its code
    scale = w.abs().amax(dim=1, keepdim=True) / 2 ** (bits - 1)
    return torch.round(w / scale), scale


def truncated(w, bits):
    scale = w.abs().amax(dim=1, keepdim=True) / (2 ** (bits - 1) - 1)
    return torch.trunc(w / scale), scale


def test_symmetric_per_row_correct(capsys):
    ch23.check_symmetric_per_row(quantize_rows)
    assert_correct(capsys)
    assert_leaves_rng_alone(ch23.check_symmetric_per_row, quantize_rows)
    ch23.check_symmetric_per_row(lambda w, b: tuple(t.to(torch.int8) if i == 0 else t
                                                    for i, t in enumerate(quantize_rows(w, b))))


@pytest.mark.parametrize("wrong, message", [
    (per_column, "one per column"), (per_tensor, "largest"),
    (off_by_one_qmax, "2\\*\\*\\(bits-1\\) - 1"), (truncated, "nearest code")])
def test_symmetric_per_row_wrong(wrong, message):
    assert_not_done(ch23.check_symmetric_per_row, not_done)
    with pytest.raises(ExerciseError, match=message):
        ch23.check_symmetric_per_row(wrong)


# --- asymmetric with a zero point ---


def quantize_asymmetric(w, bits):
    lo, hi = w.min().clamp(max=0), w.max().clamp(min=0)
    scale = (hi - lo) / (2 ** bits - 1)
    zero = torch.round(-lo / scale)
    return (torch.round(w / scale) + zero).clamp(0, 2 ** bits - 1), scale, zero


def float_zero(w, bits):  # the zero point left unrounded
    q, scale, zero = quantize_asymmetric(w, bits)
    lo = w.min().clamp(max=0)
    return q, scale, -lo / scale


def floor_zero(w, bits):
    lo, hi = w.min().clamp(max=0), w.max().clamp(min=0)
    scale = (hi - lo) / (2 ** bits - 1)
    zero = torch.floor(-lo / scale)
    return (torch.round(w / scale) + zero).clamp(0, 2 ** bits - 1), scale, zero


def sign_flipped_zero(w, bits):
    lo, hi = w.min().clamp(max=0), w.max().clamp(min=0)
    scale = (hi - lo) / (2 ** bits - 1)
    zero = torch.round(lo / scale).clamp(0, 2 ** bits - 1)
    return (torch.round(w / scale) + zero).clamp(0, 2 ** bits - 1), scale, zero


def unclamped(w, bits):
    lo, hi = w.min().clamp(max=0), w.max().clamp(min=0)
    scale = (hi - lo) / (2 ** bits - 1)
    zero = torch.round(-lo / scale)
    return torch.round(w / scale + zero), scale, zero  # rounds after adding: may leave the range


def range_without_zero(w, bits):  # lo = w.min() even when every weight is positive
    lo, hi = w.min(), w.max()
    scale = (hi - lo) / (2 ** bits - 1)
    zero = torch.round(-lo / scale)
    return (torch.round(w / scale) + zero).clamp(0, 2 ** bits - 1), scale, zero


def test_asymmetric_correct(capsys):
    ch23.check_asymmetric(quantize_asymmetric)
    assert_correct(capsys)
    assert_leaves_rng_alone(ch23.check_asymmetric, quantize_asymmetric)


@pytest.mark.parametrize("wrong, message", [
    (float_zero, "not integers"), (floor_zero, "round\\(-lo / scale\\)"),
    (sign_flipped_zero, "zero point is"), (unclamped, "outside|round first"),
    (range_without_zero, "scale is|outside")])
def test_asymmetric_wrong(wrong, message):
    assert_not_done(ch23.check_asymmetric, not_done)
    with pytest.raises(ExerciseError, match=message):
        ch23.check_asymmetric(wrong)


# --- a fixed grid, clamped ---


def quantize_with_grid(w, scale, bits):
    return torch.round(w / scale).clamp(-2 ** (bits - 1), 2 ** (bits - 1) - 1)


def test_quantize_with_grid_correct(capsys):
    ch23.check_quantize_with_grid(quantize_with_grid)
    assert_correct(capsys)
    assert_leaves_rng_alone(ch23.check_quantize_with_grid, quantize_with_grid)


@pytest.mark.parametrize("wrong, message", [
    (lambda w, scale, bits: torch.round(w / scale), "not clamped"),
    (lambda w, scale,
     bits: torch.round(w / scale).clamp(-(2 ** (bits - 1) - 1), 2 ** (bits - 1) - 1), "the code -"),
    (lambda w, scale, bits: torch.round(w / scale).clamp(0, 2 ** bits - 1), "asymmetric range"),
    (lambda w, scale, bits: (torch.round(w / scale) + 2 ** (bits - 1)).clamp(0, 2 ** bits - 1),
     "stored codes"),
    (lambda w, scale, bits: torch.trunc(w / scale).clamp(-2 ** (bits - 1), 2 ** (bits - 1) - 1),
     "not clamp"),
])
def test_quantize_with_grid_wrong(wrong, message):
    assert_not_done(ch23.check_quantize_with_grid, not_done)
    with pytest.raises(ExerciseError, match=message):
        ch23.check_quantize_with_grid(wrong)
