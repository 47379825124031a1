"""The chapter 4 exercise checks: right answers pass, plausible wrong ones fail with a hint."""
import pytest
import torch
import torch.nn.functional as F

from course_lib.exercises import ExerciseError, ch04
from exercise_helpers import assert_correct, not_done


# --- split_heads / merge_heads --------------------------------------------------------------------


def split_right(x, n_head):
    B, T, C = x.shape
    return x.view(B, T, n_head, C // n_head).transpose(1, 2)


def merge_right(y):
    B, nh, T, hs = y.shape
    return y.transpose(1, 2).contiguous().view(B, T, nh * hs)


def split_no_transpose(x, n_head):
    B, T, C = x.shape
    return x.view(B, T, n_head, C // n_head)


def split_wrong_view(x, n_head):
    B, T, C = x.shape
    return x.view(B, n_head, T, C // n_head)


def split_strided(x, n_head):
    B, T, C = x.shape
    return x.view(B, T, C // n_head, n_head).permute(0, 3, 1, 2)


def merge_no_contiguous(y):
    B, nh, T, hs = y.shape
    return y.transpose(1, 2).view(B, T, nh * hs)


def merge_no_transpose(y):
    B, nh, T, hs = y.shape
    return y.reshape(B, T, nh * hs)


def test_split_heads_right(capsys):
    ch04.check_split_heads(split_right, merge_right)
    ch04.check_split_heads(split_right, lambda y: y.transpose(1, 2).flatten(2))
    assert capsys.readouterr().out.count("Correct!") == 2


@pytest.mark.parametrize("split, merge, message", [
    (split_no_transpose, merge_right, "transpose\\(1, 2\\) so that the heads come before time"),
    (split_wrong_view, merge_right, "wrong places"),
    (split_strided, merge_right, "every nh-th channel"),
    (split_right, merge_no_contiguous, "contiguous"),
    (split_right, merge_no_transpose, "scrambled"),
    (not_done, merge_right, "Not done yet"),
    (split_right, not_done, "Not done yet"),
])
def test_split_heads_wrong(split, merge, message):
    with pytest.raises(ExerciseError, match=message):
        ch04.check_split_heads(split, merge)


# --- is_permutation_equivariant -------------------------------------------------------------------


def equivariant_right(layer, x, perm):
    return torch.allclose(layer(x[:, perm]), layer(x)[:, perm], atol=1e-6)


def equivariant_no_unpermute(layer, x, perm):
    return torch.allclose(layer(x[:, perm]), layer(x), atol=1e-6)


def equivariant_batch_dim(layer, x, perm):
    perm = perm[perm < x.shape[0]]  # a "permutation" of the batch
    return torch.allclose(layer(x[perm]), layer(x)[perm], atol=1e-6)


def equivariant_exact(layer, x, perm):
    return torch.equal(layer(x[:, perm]), layer(x)[:, perm])


def test_is_permutation_equivariant_right(capsys):
    ch04.check_is_permutation_equivariant(equivariant_right)
    assert_correct(capsys)


@pytest.mark.parametrize("fn, message", [
    (equivariant_no_unpermute, "permute the ORIGINAL output"),
    (equivariant_batch_dim, "not the batch"),
    (lambda layer, x, perm: True, "NOT permutation-equivariant"),
    # Issue 22: a forgotten `return` used to read as False, with a hint about comparing outputs.
    (lambda layer, x, perm: None, "(?s)returned None.*Hint: did you forget the `return`"),
    (lambda layer, x, perm: "yes", "expected True or False"),
    (not_done, "Not done yet"),
])
def test_is_permutation_equivariant_wrong(fn, message):
    with pytest.raises(ExerciseError, match=message):
        ch04.check_is_permutation_equivariant(fn)


def test_is_permutation_equivariant_exact_compare_is_fragile_but_not_wrong():
    # torch.equal may or may not survive rounding; either way the check must not crash.
    try:
        ch04.check_is_permutation_equivariant(equivariant_exact)
    except ExerciseError as e:
        assert "tolerance" in str(e)


# --- spot the bug: head_attention -----------------------------------------------------------------


def head_right(x, w_query, w_key, w_value):
    B, T, C = x.shape
    q, k, v = x @ w_query, x @ w_key, x @ w_value
    wei = q @ k.transpose(-2, -1) * k.shape[-1] ** -0.5
    wei = wei.masked_fill(torch.tril(torch.ones(T, T)) == 0, float("-inf"))
    return F.softmax(wei, dim=-1) @ v


def head_buggy(x, w_query, w_key, w_value):
    B, T, C = x.shape
    q, k, v = x @ w_query, x @ w_key, x @ w_value
    wei = q @ k.transpose(-2, -1) * C**-0.5  # the bug
    wei = wei.masked_fill(torch.tril(torch.ones(T, T)) == 0, float("-inf"))
    return F.softmax(wei, dim=-1) @ v


def head_unscaled(x, w_query, w_key, w_value):
    B, T, C = x.shape
    q, k, v = x @ w_query, x @ w_key, x @ w_value
    wei = (q @ k.transpose(-2, -1)).masked_fill(torch.tril(torch.ones(T, T)) == 0, float("-inf"))
    return F.softmax(wei, dim=-1) @ v


def head_no_mask(x, w_query, w_key, w_value):
    q, k, v = x @ w_query, x @ w_key, x @ w_value
    return F.softmax(q @ k.transpose(-2, -1) * k.shape[-1] ** -0.5, dim=-1) @ v


def test_head_attention_right(capsys):
    ch04.check_head_attention(head_right)
    assert_correct(capsys)


@pytest.mark.parametrize("fn, message", [
    (head_buggy, "C\\*\\*-0.5"),
    (head_unscaled, "not scaled at all"),
    (head_no_mask, "sees the future"),
    (not_done, "Not done yet"),
])
def test_head_attention_wrong(fn, message):
    with pytest.raises(ExerciseError, match=message):
        ch04.check_head_attention(fn)


def test_head_attention_bug_hint_names_head_size():
    with pytest.raises(ExerciseError, match="scale by the head size"):
        ch04.check_head_attention(head_buggy)
