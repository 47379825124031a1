"""The checks of chapter 14's exercises: right answers pass, plausible wrong ones fail with a
hint."""
import pytest
import torch
import torch.nn.functional as F

from course_lib.exercises import ExerciseError, ch14
from exercise_helpers import assert_correct, assert_leaves_rng_alone, assert_not_done, not_done


# --- RoPE ---


def rope(x, positions, theta=10000.0):
    hs = x.shape[-1]
    freqs = theta ** (-torch.arange(0, hs, 2).float() / hs)  # (hs/2,)
    angles = positions.float()[:, None] * freqs  # (T, hs/2)
    a, b = x[..., : hs // 2], x[..., hs // 2:]
    return torch.cat([a * angles.cos() - b * angles.sin(), a * angles.sin() + b * angles.cos()],
                     dim=-1)


def rope_interleaved(x, positions, theta=10000.0):
    hs = x.shape[-1]
    angles = positions.float()[:, None] * theta ** (-torch.arange(0, hs, 2).float() / hs)
    a, b = x[..., 0::2], x[..., 1::2]
    out = torch.empty_like(x)
    out[..., 0::2], out[..., 1::2] = (a * angles.cos() - b * angles.sin(),
                                      a * angles.sin() + b * angles.cos())
    return out


def rope_backwards(x, positions, theta=10000.0):
    return rope(x, -positions, theta)


def rope_wrong_exponent(x, positions, theta=10000.0):
    hs = x.shape[-1]
    angles = positions.float()[:, None] * theta ** (-torch.arange(0, hs // 2).float() / hs)
    a, b = x[..., : hs // 2], x[..., hs // 2:]
    return torch.cat([a * angles.cos() - b * angles.sin(), a * angles.sin() + b * angles.cos()],
                     dim=-1)


def rope_from_zero(x, positions, theta=10000.0):
    return rope(x, torch.arange(x.shape[-2]), theta)


# --- RMSNorm ---


def rms_norm(x, weight, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


# --- repeating the key/value heads ---


def repeat_kv(kv, n_rep):
    B, n_kv, T, hs = kv.shape
    return kv[:, :, None].expand(B, n_kv, n_rep, T, hs).reshape(B, n_kv * n_rep, T, hs)


# --- spot the bug: RoPE on the values ---


def attend(q, k, v, positions, theta=10000.0):
    q, k = rope(q, positions, theta), rope(k, positions, theta)
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def attend_buggy(q, k, v, positions, theta=10000.0):  # the chapter's buggy version
    q, k, v = rope(q, positions, theta), rope(k, positions, theta), rope(v, positions, theta)
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def test_rope_attention_names_an_unfinished_rope_of_exercise_1():
    """A correct attend whose rope (exercise 1) still raises: the message names rope, not attend."""
    namespace = {"F": F}
    exec("def rope(x, positions, theta=10000.0):\n    raise NotImplementedError()\n"
         "def attend(q, k, v, positions, theta=10000.0):\n"
         "    q, k = rope(q, positions, theta), rope(k, positions, theta)\n"
         "    return F.scaled_dot_product_attention(q, k, v, is_causal=True)\n", namespace)
    with pytest.raises(ExerciseError, match=r"attend\(\) calls rope\(\), which still raises") as e:
        ch14.check_rope_attention(namespace["attend"])
    assert "check_rope" in str(e.value)


def test_rope_attention_names_a_wrong_rope_of_exercise_1():
    namespace = {"F": F, "rope_interleaved": rope_interleaved}
    exec("rope = rope_interleaved\n"
         "def attend(q, k, v, positions, theta=10000.0):\n"
         "    q, k = rope(q, positions, theta), rope(k, positions, theta)\n"
         "    return F.scaled_dot_product_attention(q, k, v, is_causal=True)\n", namespace)
    with pytest.raises(ExerciseError,
                       match=r"so does your rope\(\) of exercise 1.*neighbouring channels"):
        ch14.check_rope_attention(namespace["attend"])


# --- the sliding window's mask ---


def window_mask(T, window):
    t, s = torch.arange(T)[:, None], torch.arange(T)[None, :]
    return (s <= t) & (t - s < window)


# --- every right answer passes (and, where marked, leaves torch's global random state alone); every
# unfinished one is "Not done yet" ---

RIGHT_ANSWERS = [
    (ch14.check_rope, rope, True),
    (ch14.check_rms_norm, rms_norm, True),
    (ch14.check_repeat_kv, repeat_kv, False),
    (ch14.check_rope_attention, attend, True),
    (ch14.check_window_mask, window_mask, True),
]


@pytest.mark.parametrize("check, right, leaves_rng_alone", RIGHT_ANSWERS,
                         ids=[r[0].__name__ for r in RIGHT_ANSWERS])
def test_right_answers_pass(check, right, leaves_rng_alone, capsys):
    check(right)
    assert_correct(capsys)
    if leaves_rng_alone:
        assert_leaves_rng_alone(check, right)


@pytest.mark.parametrize("check", [r[0] for r in RIGHT_ANSWERS],
                         ids=[r[0].__name__ for r in RIGHT_ANSWERS])
def test_unfinished_answers_are_not_done(check):
    assert_not_done(check, not_done)


# --- every classic wrong answer, one table: (check, wrong answer, what its message must match) ---

WRONG_ANSWERS = [
    (ch14.check_rope, rope_interleaved, "j \\+ hs/2"),
    (ch14.check_rope, rope_backwards, "wrong way"),
    (ch14.check_rope, rope_wrong_exponent, "2j/hs"),
    (ch14.check_rope, rope_from_zero, "KV cache"),
    (ch14.check_rope, lambda x, p, t: x, "differ"),
    (ch14.check_rms_norm, lambda x, w, eps: F.layer_norm(x, x.shape[-1:], w, None, eps),
     "LayerNorm"),
    (ch14.check_rms_norm, lambda x, w, eps: x / (x.pow(2).mean(-1, keepdim=True).sqrt() + eps) * w,
     "outside the square root"),
    (ch14.check_rms_norm, lambda x, w, eps: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps),
     "gain"),
    (ch14.check_rms_norm, lambda x, w, eps: x / x.std(-1, keepdim=True) * w, "standard deviation"),
    (ch14.check_rms_norm, lambda x, w,
     eps: x * torch.rsqrt(x.pow(2).sum(-1, keepdim=True) + eps) * w, "differ"),
    (ch14.check_rms_norm, lambda x, w, eps: x * torch.rsqrt(x.pow(2).mean(-1) + eps) * w,
     "keepdim=True"),
    (ch14.check_repeat_kv, lambda kv, n: kv.repeat(1, n, 1, 1), "tiled"),
    (ch14.check_repeat_kv, lambda kv, n: kv, "expected shape"),
    (ch14.check_repeat_kv, lambda kv, n: kv.flip(1).repeat_interleave(n, dim=1), "not those"),
    (ch14.check_rope_attention, attend_buggy, "values are rotated"),
    (ch14.check_rope_attention, lambda q, k, v, p,
     t: F.scaled_dot_product_attention(q, k, v, is_causal=True), "differs"),
    (ch14.check_rope_attention,
     lambda q, k, v, p, t: F.scaled_dot_product_attention(rope(q, p, t), rope(k, p, t), v),
     "differs"),
    (ch14.check_window_mask, lambda T, w: window_mask(T, w + 1), "window \\+ 1 positions"),
    (ch14.check_window_mask, lambda T, w: window_mask(T, w - 1), "window - 1 positions"),
    (ch14.check_window_mask, lambda T,
     w: (torch.arange(T)[:, None] - torch.arange(T)[None, :]).abs() < w, "never looks ahead"),
    (ch14.check_window_mask, lambda T, w: window_mask(T, w).T, "transposed"),
    (ch14.check_window_mask, lambda T, w: window_mask(T, w).float(), "dtype"),
    # 14-m6 (review 2026-11-28): the causal mask alone and the inverted mask got only "differs"
    (ch14.check_window_mask, lambda T, w: torch.tril(torch.ones(T, T, dtype=torch.bool)),
     "(?s)causal mask alone.*Hint: add the window"),
    (ch14.check_window_mask, lambda T, w: ~window_mask(T, w),
     "(?s)inverted: True where a key is blocked.*Hint: here "
                                                             "True means MAY attend"),
    (ch14.check_window_mask, lambda T, w: window_mask(T, w) & (torch.arange(T)[None, :] > 0),
     "differs"),
]


@pytest.mark.parametrize("check, wrong, message", WRONG_ANSWERS,
                         ids=[f"{check.__name__}-{i}" for i,
                              (check, _, _) in enumerate(WRONG_ANSWERS)])
def test_wrong_answers_fail_with_their_hint(check, wrong, message):
    with pytest.raises(ExerciseError, match=message):
        check(wrong)
