"""The checks of chapter 5's exercises: right answers pass, plausible wrong ones fail with a
hint."""
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
    (lambda x, attn, mlp, ln_1, ln_2: (lambda h: ln_2(x + mlp(h)))(ln_1(x + attn(x))),
     "second half"),
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


# --- LayerNorm by hand ---


def layer_norm(x, weight, bias, eps):
    # written differently from the chapter's solution: the variance as a mean of squares, rsqrt
    centred = x - x.mean(dim=-1, keepdim=True)
    return centred * torch.rsqrt(centred.pow(2).mean(dim=-1, keepdim=True) + eps) * weight + bias


def test_layer_norm_correct(capsys):
    ch05.check_layer_norm(layer_norm)
    assert_correct(capsys)


def test_layer_norm_with_torch_passes(capsys):
    ch05.check_layer_norm(lambda x, w, b,
                          eps: torch.nn.functional.layer_norm(x, x.shape[-1:], w, b, eps))
    assert_correct(capsys)


def test_layer_norm_not_done():
    assert_not_done(ch05.check_layer_norm, not_done)


def _ln(x, w, b, eps, dim=-1, unbiased=False, inside=True, affine=True):
    mean, var = x.mean(dim=dim, keepdim=True), x.var(dim=dim, keepdim=True, unbiased=unbiased)
    x_hat = (x - mean) / (torch.sqrt(var + eps) if inside else torch.sqrt(var) + eps)
    return w * x_hat + b if affine else x_hat


@pytest.mark.parametrize("wrong, message", [
    (lambda x, w, b, eps: _ln(x, w, b, eps, dim=0), "batch axis"),  # BatchNorm's statistics
    (lambda x, w, b, eps: _ln(x, w, b, eps, dim=tuple(range(1, x.dim()))), "all the dimensions"),
    # torch.var's default
    (lambda x, w, b, eps: _ln(x, w, b, eps, unbiased=True), "unbiased variance"),
    (lambda x, w, b, eps: _ln(x, w, b, 0.0), "nan or inf"),  # no eps: the constant row, 0 / 0
    (lambda x, w, b, eps: _ln(x, w, b, eps, inside=False), "standard deviation"),
    (lambda x, w, b, eps: _ln(x, w, b, eps, affine=False), "gain and bias are missing"),
    (lambda x, w, b, eps: _ln(x, b, w, eps), "swapped"),
    (lambda x, w, b, eps: _ln(x, w, b, 1e-5), "ignores the eps"),  # the 4-D case passes eps=1e-3
    (lambda x, w, b, eps: _ln(x, w, b, eps)[..., :-1], "expected shape"),
    (lambda x, w, b, eps: None, "returned None"),
])
def test_layer_norm_wrong_answers_fail(wrong, message):
    with pytest.raises(ExerciseError, match=message):
        ch05.check_layer_norm(wrong)


def test_layer_norm_missing_eps_on_tiny_variance_gets_its_hint():
    """Without eps but guarded against 0 / 0, the constant row passes; the cases with eps = 1e-3,
    and with a standard deviation of about 1e-3, where var + 1e-5 differs from var, catch it."""
    def no_eps_guarded(x, w, b, eps):
        centred = x - x.mean(dim=-1, keepdim=True)
        std = centred.pow(2).mean(dim=-1, keepdim=True).sqrt()
        return w * centred / torch.where(std > 0, std, torch.ones_like(std)) + b
    with pytest.raises(ExerciseError, match="ignores the eps"):
        ch05.check_layer_norm(no_eps_guarded)


def post_ln_block_bf16(x, attn, mlp, ln_1, ln_2):  # the right block, its sub-layers run in bfloat16
    with torch.autocast("cpu", dtype=torch.bfloat16):
        a = attn(x)
    h = ln_1(x + a.float())
    with torch.autocast("cpu", dtype=torch.bfloat16):
        m = mlp(h)
    return ln_2(h + m.float())


def test_post_ln_block_in_bfloat16_gets_a_precision_hint():
    # 05-n1 (review 2026-11-28): it got the generic "values differ (0.00352)"
    with pytest.raises(ExerciseError,
                       match="(?s)close, but more than float32 rounding.*Hint: .*bfloat16"):
        ch05.check_post_ln_block(post_ln_block_bf16)


def test_post_ln_block_far_off_keeps_the_formula_hint():
    with pytest.raises(ExerciseError, match="(?s)values differ.*Hint: h = ln_1") as error:
        ch05.check_post_ln_block(lambda x, attn, mlp, ln_1, ln_2: ln_1(x + attn(x)))
    assert "float32 rounding" not in str(error.value)
