"""The checks of chapter 5's exercises: right answers pass, plausible wrong ones fail with a hint."""
import pytest
import torch

from course_lib.exercises import ExerciseError, ch05
from exercise_helpers import assert_correct, assert_not_done, not_done


# --- the post-LN block ---


def post_ln_block(x, attn, mlp, ln_1, ln_2):
    h = ln_1(x + attn(x))
    return ln_2(h + mlp(h))


def test_post_ln_block_correct(capsys):
    ch05.check_post_ln_block(post_ln_block)
    assert_correct(capsys)


def test_post_ln_block_not_done():
    assert_not_done(ch05.check_post_ln_block, not_done)


@pytest.mark.parametrize("wrong, message", [
    (lambda x, attn, mlp, ln_1, ln_2: (lambda h: h + mlp(ln_2(h)))(x + attn(ln_1(x))), "pre-LN"),
    (lambda x, attn, mlp, ln_1, ln_2: ln_2(mlp(ln_1(attn(x)))), "no residual"),
    (lambda x, attn, mlp, ln_1, ln_2: (lambda h: ln_2(x + mlp(h)))(ln_1(x + attn(x))), "second half"),
    (lambda x, attn, mlp, ln_1, ln_2: (lambda h: h + mlp(h))(ln_1(x + attn(x))), "second half"),
    (lambda x, attn, mlp, ln_1, ln_2: (lambda h: ln_1(h + mlp(h)))(ln_2(x + attn(x))), "swapped"),
    (lambda x, attn, mlp, ln_1, ln_2: ln_1(x + attn(x)), "differ"),
    (lambda x, attn, mlp, ln_1, ln_2: x[:, -1], "same shape"),
    (lambda x, attn, mlp, ln_1, ln_2: None, "returned None"),
])
def test_post_ln_block_wrong_answers_fail(wrong, message):
    with pytest.raises(ExerciseError, match=message):
        ch05.check_post_ln_block(wrong)


# --- dropout ---


def dropout(x, p, training):
    if not training or p == 0:
        return x
    mask = (torch.rand_like(x) >= p).to(x.dtype)
    return x * mask / (1 - p)


def test_dropout_correct(capsys):
    ch05.check_dropout(dropout)
    assert_correct(capsys)


def test_dropout_with_torch_passes(capsys):
    ch05.check_dropout(lambda x, p, training: torch.nn.functional.dropout(x, p, training))
    assert_correct(capsys)


def test_dropout_not_done():
    assert_not_done(ch05.check_dropout, not_done)


def always_on(x, p, training):
    return x * (torch.rand_like(x) >= p) / (1 - p)


def unscaled(x, p, training):
    return x * (torch.rand_like(x) >= p) if training else x


def scaled_down(x, p, training):
    return x * (torch.rand_like(x) >= p) * (1 - p) if training else x


def keep_with_p(x, p, training):
    return x * (torch.rand_like(x) < p) / (1 - p) if training and p > 0 else x


def in_place(x, p, training):
    if training:
        x.mul_((torch.rand_like(x) >= p) / (1 - p))
    return x


def per_column(x, p, training):
    return x * (torch.rand(x.shape[-1]) >= p) / (1 - p) if training else x




def fixed_mask(x, p, training):
    g = torch.Generator().manual_seed(0)
    return x * (torch.rand(x.shape, generator=g) >= p) / (1 - p) if training else x


def never_drops(x, p, training):
    return x / (1 - p) if training else x


@pytest.mark.parametrize("wrong, message", [
    (always_on, "training=False"),
    (unscaled, "not rescaled"),
    (scaled_down, "multiplied by"),
    (keep_with_p, "1 - p"),
    (in_place, "in place"),
    (per_column, "columns"),
    (fixed_mask, "same elements"),
    (never_drops, "expected about"),
])
def test_dropout_wrong_answers_fail(wrong, message):
    with pytest.raises(ExerciseError, match=message):
        ch05.check_dropout(wrong)
