"""The chapter 3 exercise checks: right answers pass, plausible wrong ones fail with a hint."""
import pytest
import torch
import torch.nn.functional as F

from course_lib.exercises import ExerciseError, ch03
from exercise_helpers import assert_correct, assert_leaves_rng_alone, not_done


# --- average_past_matmul -------------------------------------------------------------------------


def matmul_right(x):
    T = x.shape[1]
    wei = torch.tril(torch.ones(T, T, dtype=x.dtype, device=x.device))
    return (wei / wei.sum(dim=1, keepdim=True)) @ x


def matmul_sums(x):
    T = x.shape[1]
    return torch.tril(torch.ones(T, T, dtype=x.dtype)) @ x


def matmul_future(x):
    T = x.shape[1]
    wei = torch.triu(torch.ones(T, T, dtype=x.dtype))
    return (wei / wei.sum(dim=1, keepdim=True)) @ x


def matmul_float32_only(x):
    T = x.shape[1]
    wei = torch.tril(torch.ones(T, T))
    return (wei / wei.sum(dim=1, keepdim=True)) @ x


def matmul_wrong_side(x):
    T = x.shape[1]
    wei = torch.tril(torch.ones(T, T, dtype=x.dtype))
    return x.transpose(1, 2) @ (wei / wei.sum(dim=1, keepdim=True))


def test_average_past_matmul_right(capsys):
    ch03.check_average_past_matmul(matmul_right)
    assert capsys.readouterr().out.startswith("Correct!")


@pytest.mark.parametrize("fn, message", [
    (matmul_sums, "running SUMS"),
    (matmul_future, "AFTER it"),
    (matmul_float32_only, "On a float64 x"),
    (matmul_wrong_side, "expected shape"),
    (not_done, "Not done yet"),
])
def test_average_past_matmul_wrong(fn, message):
    with pytest.raises(ExerciseError, match=message):
        ch03.check_average_past_matmul(fn)


def test_average_past_matmul_dtype_hint():
    with pytest.raises(ExerciseError, match="dtype=x.dtype"):
        ch03.check_average_past_matmul(matmul_float32_only)


# --- causal_softmax -------------------------------------------------------------------------------


def softmax_right(scores):
    T = scores.shape[-1]
    tril = torch.tril(torch.ones(T, T))
    return F.softmax(scores.masked_fill(tril == 0, float("-inf")), dim=-1)


def softmax_fill_zero(scores):
    T = scores.shape[-1]
    tril = torch.tril(torch.ones(T, T))
    return F.softmax(scores.masked_fill(tril == 0, 0.0), dim=-1)


def softmax_result_dropped(scores):
    T = scores.shape[-1]
    tril = torch.tril(torch.ones(T, T))
    scores.masked_fill(tril == 0, float("-inf"))  # result thrown away
    return F.softmax(scores, dim=-1)


def softmax_wrong_dim(scores):
    T = scores.shape[-1]
    tril = torch.tril(torch.ones(T, T))
    return F.softmax(scores.masked_fill(tril == 0, float("-inf")), dim=-2)


def softmax_mask_inverted(scores):
    T = scores.shape[-1]
    tril = torch.tril(torch.ones(T, T))
    return F.softmax(scores.masked_fill(tril == 1, float("-inf")), dim=-1)


def test_causal_softmax_right(capsys):
    ch03.check_causal_softmax(softmax_right)
    assert_correct(capsys)


@pytest.mark.parametrize("fn, message", [
    (softmax_fill_zero, "not -inf"),
    (softmax_result_dropped, "no masking"),
    (softmax_wrong_dim, "wrong dimension"),
    (softmax_mask_inverted, "NaN"),
    (not_done, "Not done yet"),
])
def test_causal_softmax_wrong(fn, message):
    with pytest.raises(ExerciseError, match=message):
        ch03.check_causal_softmax(fn)


# --- score_variance -------------------------------------------------------------------------------


def variance_right(head_size, scaled):
    q = torch.randn(8, 64, head_size)
    k = torch.randn(8, 64, head_size)
    scores = q @ k.transpose(-2, -1)
    if scaled:
        scores = scores * head_size**-0.5
    return scores.var().item()


def variance_divides_by_hs(head_size, scaled):
    q, k = torch.randn(8, 64, head_size), torch.randn(8, 64, head_size)
    scores = q @ k.transpose(-2, -1)
    return (scores / head_size if scaled else scores).var().item()


def variance_std(head_size, scaled):
    q, k = torch.randn(8, 64, head_size), torch.randn(8, 64, head_size)
    scores = q @ k.transpose(-2, -1)
    return (scores * head_size**-0.5 if scaled else scores).std().item()


def variance_always_scaled(head_size, scaled):
    return variance_right(head_size, True)


def test_score_variance_right(capsys):
    ch03.check_score_variance(variance_right)
    assert_correct(capsys)


def test_score_variance_leaves_rng_alone():
    assert_leaves_rng_alone(ch03.check_score_variance, variance_right)


def test_score_variance_library_passes():
    from course_lib.attention import score_variance
    ch03.check_score_variance(lambda hs, scaled: score_variance(hs, scaled))


@pytest.mark.parametrize("fn, message", [
    (variance_divides_by_hs, "divided the scores by the head size"),
    (variance_std, "standard deviation"),
    (variance_always_scaled, "about 1"),
    (not_done, "Not done yet"),
])
def test_score_variance_wrong(fn, message):
    with pytest.raises(ExerciseError, match=message):
        ch03.check_score_variance(fn)


# --- is_causal_weights ----------------------------------------------------------------------------


def valid_right(w):
    rows_ok = torch.allclose(w.sum(dim=-1), torch.ones(w.shape[:-1]), atol=1e-5)
    future_ok = bool((torch.triu(w, diagonal=1).abs() <= 1e-6).all())
    return rows_ok and future_ok and bool((w >= 0).all())


def valid_no_future_check(w):
    return (torch.allclose(w.sum(dim=-1), torch.ones(w.shape[:-1]), atol=1e-5)
            and bool((w >= 0).all()))


def valid_exact_sum(w):
    return (bool((w.sum(dim=-1) == 1).all()) and bool((torch.triu(w, 1) == 0).all())
            and bool((w >= 0).all()))


def valid_diagonal_forbidden(w):
    return valid_right(w) and bool((torch.triu(w) == 0).all())


def valid_no_sign_check(w):
    rows_ok = torch.allclose(w.sum(dim=-1), torch.ones(w.shape[:-1]), atol=1e-5)
    return rows_ok and bool((torch.triu(w, diagonal=1).abs() <= 1e-6).all())


def valid_returns_tensor(w):
    return torch.tensor(valid_right(w))


def test_is_causal_weights_right(capsys):
    ch03.check_is_causal_weights(valid_right)
    ch03.check_is_causal_weights(valid_returns_tensor)
    assert capsys.readouterr().out.count("Correct!") == 2


@pytest.mark.parametrize("fn, message", [
    (valid_no_future_check, "plain softmax with no mask"),
    (valid_exact_sum, "rarely exactly 1"),
    (valid_diagonal_forbidden, "diagonal is allowed"),
    (valid_no_sign_check, "negative weight"),
    (lambda w: "yes", "expected True or False"),
    # Issue 22: a forgotten `return` used to read as False and got a hint about the diagonal.
    (lambda w: None, "returned None"),
    (not_done, "Not done yet"),
])
def test_is_causal_weights_wrong(fn, message):
    with pytest.raises(ExerciseError, match=message):
        ch03.check_is_causal_weights(fn)


# --- spot the bug: softmax over the wrong axis ----------------------------------------------------


def weights_right(q, k):
    T, hs = q.shape[-2], q.shape[-1]
    wei = q @ k.transpose(-2, -1) * hs**-0.5  # (B, T, T)
    wei = wei.masked_fill(torch.tril(torch.ones(T, T)) == 0, float("-inf"))
    return F.softmax(wei, dim=-1)


def weights_softmax_dim1(q, k):  # the tutorial's nn.Softmax(dim=1)
    T, hs = q.shape[-2], q.shape[-1]
    wei = q @ k.transpose(-2, -1) * hs**-0.5
    wei = wei.masked_fill(torch.tril(torch.ones(T, T)) == 0, float("-inf"))
    return torch.nn.Softmax(dim=1)(wei)


def weights_unscaled(q, k):
    return weights_right(q * q.shape[-1] ** 0.5, k)


def weights_by_hs(q, k):
    return weights_right(q * q.shape[-1] ** -0.5, k)


def weights_no_mask(q, k):
    return F.softmax(q @ k.transpose(-2, -1) * q.shape[-1] ** -0.5, dim=-1)


def weights_fill_zero(q, k):
    T = q.shape[-2]
    wei = q @ k.transpose(-2, -1) * q.shape[-1] ** -0.5
    return F.softmax(wei.masked_fill(torch.tril(torch.ones(T, T)) == 0, 0.0), dim=-1)


def weights_mask_inverted(q, k):
    T = q.shape[-2]
    wei = q @ k.transpose(-2, -1) * q.shape[-1] ** -0.5
    return F.softmax(wei.masked_fill(torch.tril(torch.ones(T, T)) == 1, float("-inf")), dim=-1)


def test_attention_weights_right(capsys):
    ch03.check_attention_weights(weights_right)
    assert_correct(capsys)


def test_attention_weights_library_passes():
    from course_lib.attention import causal_mask, scaled_dot_product_attention
    ch03.check_attention_weights(
        lambda q, k: scaled_dot_product_attention(q, k, k, causal_mask(q.shape[1]))[1])


def test_attention_weights_dim1_names_the_axis():
    with pytest.raises(ExerciseError, match="COLUMN") as e:
        ch03.check_attention_weights(weights_softmax_dim1)
    message = str(e.value)
    assert ("dim=1" in message and "dim=-1" in message and "1/T" in message
            and "future leaks" in message)


@pytest.mark.parametrize("fn, message", [
    (weights_unscaled, "not scaled"),
    (weights_by_hs, "not by sqrt"),
    (weights_no_mask, "no masking"),
    (weights_fill_zero, "not -inf"),
    (weights_mask_inverted, "NaN"),
    (lambda q, k: weights_right(q, k)[0], "expected shape"),
    (not_done, "Not done yet"),
])
def test_attention_weights_wrong(fn, message):
    with pytest.raises(ExerciseError, match=message):
        ch03.check_attention_weights(fn)
