"""The checks of chapter 11's exercises: right answers pass, plausible wrong ones fail with a hint."""
import math

import pytest
import torch
import torch.nn.functional as F

from course_lib.exercises import ExerciseError, ch11
from course_lib.model import sinusoidal_position_encoding


def not_done(*args):
    raise NotImplementedError()


def expect_pass(check, fn, capsys):
    check(fn)
    assert "Correct!" in capsys.readouterr().out


@pytest.mark.parametrize("check", [ch11.check_source_padding_mask, ch11.check_cross_attention,
                                   ch11.check_label_smoothed_loss, ch11.check_beam_step, ch11.check_add_positions])
def test_not_done(check):
    with pytest.raises(ExerciseError, match="Not done yet"):
        check(not_done)


# --- padding mask ---


def test_mask_right(capsys):
    expect_pass(ch11.check_source_padding_mask, lambda src, pad: (src != pad)[:, None, None, :], capsys)


@pytest.mark.parametrize("wrong, message", [
    (lambda src, pad: (src == pad)[:, None, None, :], "inverted"),
    (lambda src, pad: src != pad, "attention scores are"),
    (lambda src, pad: (src != pad)[:, None, None, :].float(), "boolean"),
    (lambda src, pad: (src != 0)[:, None, None, :], "wrong places"),
])
def test_mask_wrong(wrong, message):
    with pytest.raises(ExerciseError, match=message):
        ch11.check_source_padding_mask(wrong)


# --- cross-attention ---


def cross_attention(x, memory, mask, layer, scale_by_c=False, use_mask=True):
    B, T, C = x.shape
    hs = C // layer.n_head
    q = layer.q_proj(x).view(B, T, layer.n_head, hs).transpose(1, 2)
    k, v = layer.kv_proj(memory).split(C, dim=-1)
    k = k.view(B, -1, layer.n_head, hs).transpose(1, 2)
    v = v.view(B, -1, layer.n_head, hs).transpose(1, 2)
    scores = q @ k.transpose(-2, -1) / math.sqrt(C if scale_by_c else hs)
    if use_mask:
        scores = scores.masked_fill(~mask, float("-inf"))
    y = F.softmax(scores, dim=-1) @ v
    return layer.c_proj(y.transpose(1, 2).reshape(B, T, C))


def test_cross_attention_right(capsys):
    expect_pass(ch11.check_cross_attention, cross_attention, capsys)


@pytest.mark.parametrize("wrong, message", [
    (lambda *a: cross_attention(*a, use_mask=False), "padded source positions"),
    (lambda *a: cross_attention(*a, scale_by_c=True), "sqrt\\(C\\)"),
    (lambda x, memory, mask, layer: cross_attention(x, memory, mask, layer)[:, :, None], "expected shape"),
    (lambda x, memory, mask, layer: x, "differ"),
])
def test_cross_attention_wrong(wrong, message):
    with pytest.raises(ExerciseError, match=message):
        ch11.check_cross_attention(wrong)


# --- label smoothing ---


def smoothed(logits, targets, eps):
    logp = F.log_softmax(logits, -1)
    nll = -logp.gather(1, targets[:, None]).squeeze(1)
    return ((1 - eps) * nll - eps * logp.mean(-1)).mean()


def test_label_smoothing_right(capsys):
    expect_pass(ch11.check_label_smoothed_loss, smoothed, capsys)
    expect_pass(ch11.check_label_smoothed_loss, lambda l, t, e: F.cross_entropy(l, t, label_smoothing=e), capsys)


def over_wrong_tokens(logits, targets, eps):
    logp = F.log_softmax(logits, -1)
    V = logits.shape[-1]
    target = torch.full_like(logp, eps / (V - 1)).scatter(1, targets[:, None], 1 - eps)
    return -(target * logp).sum(-1).mean()


@pytest.mark.parametrize("wrong, message", [
    (over_wrong_tokens, "V - 1 WRONG"),
    (lambda l, t, e: F.cross_entropy(l, t), "differ"),
    (lambda l, t, e: F.cross_entropy(l, t, label_smoothing=e, reduction="none"), "one loss per position"),
])
def test_label_smoothing_wrong(wrong, message):
    with pytest.raises(ExerciseError, match=message):
        ch11.check_label_smoothed_loss(wrong)


# --- beam step ---


def beam_step(scores, logp, beam_size):
    V = logp.shape[-1]
    new_scores, idx = (scores[:, None] + logp).flatten().topk(beam_size)
    return new_scores, idx // V, idx % V


def test_beam_step_right(capsys):
    expect_pass(ch11.check_beam_step, beam_step, capsys)


def ignores_scores(scores, logp, beam_size):
    V = logp.shape[-1]
    new_scores, idx = logp.flatten().topk(beam_size)
    return new_scores, idx // V, idx % V


def swaps_beam_and_token(scores, logp, beam_size):
    K, V = logp.shape
    new_scores, idx = (scores[:, None] + logp).flatten().topk(beam_size)
    return new_scores, idx % K, idx // K


@pytest.mark.parametrize("wrong, message", [
    (ignores_scores, "ignore the hypotheses' own scores"),
    (swaps_beam_and_token, "beams/tokens"),
    (lambda s, l, k: l.max(-1).values[:k], "shape|expected a tuple"),
])
def test_beam_step_wrong(wrong, message):
    with pytest.raises(ExerciseError, match=message):
        ch11.check_beam_step(wrong)


# --- positions ---


def test_positions_right(capsys):
    expect_pass(ch11.check_add_positions, lambda x: x + sinusoidal_position_encoding(x.shape[1], x.shape[2]), capsys)


def test_positions_buggy_is_caught():
    with pytest.raises(ExerciseError, match="same encoding"):
        ch11.check_add_positions(ch11.add_positions_buggy)
    with pytest.raises(ExerciseError, match="differ"):
        ch11.check_add_positions(lambda x: x + sinusoidal_position_encoding(x.shape[1], x.shape[2]).flip(0))


# --- issue 22: wrong answers that used to pass or crash the check ---


def test_beam_step_fractional_beam_indices_fail():
    # idx / V gives fractional beams; the check used to compare .long() and pass them.
    def beam_step_true_division(scores, logp, beam_size):
        V = logp.shape[-1]
        new_scores, flat = (scores[:, None] + logp).flatten().topk(beam_size)
        return new_scores, flat / V, flat % V

    with pytest.raises(ExerciseError, match="(?s)beams has dtype torch.float32.*Hint: idx / V divides"):
        ch11.check_beam_step(beam_step_true_division)


@pytest.mark.parametrize("wrong, message", [
    # A forgotten `return` used to die with TypeError in float(got), an unreduced loss with ValueError.
    (lambda logits, targets, eps: None, "(?s)returned None.*Hint: did you forget the `return`"),
    (lambda logits, targets, eps: -(F.log_softmax(logits, -1)), "(?s)one loss per position and token.*Hint: "),
    (lambda logits, targets, eps: "loss", "(?s)expected a number, got the str 'loss'.*Hint: "),
])
def test_label_smoothing_malformed_answers_fail_with_a_hint(wrong, message):
    with pytest.raises(ExerciseError, match=message):
        ch11.check_label_smoothed_loss(wrong)


def test_cross_attention_float64_output_fails_with_a_dtype_hint():
    # It used to crash the check with RuntimeError (torch.allclose of float64 and float32).
    with pytest.raises(ExerciseError, match="(?s)expected torch.float32, got dtype torch.float64.*Hint: "):
        ch11.check_cross_attention(lambda x, memory, mask, layer: cross_attention(x, memory, mask, layer).double())


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16])
def test_positions_right_values_in_another_dtype_fail_with_a_dtype_hint(dtype):
    # e.g. a table built with NumPy (float64): right values, but no traceback and a hint on the dtype
    with pytest.raises(ExerciseError, match="but your sum is") as error:
        ch11.check_add_positions(lambda x: (x + sinusoidal_position_encoding(x.shape[1], x.shape[2])).to(dtype))
    assert "torch.from_numpy(pe).to(x.dtype)" in str(error.value)


def test_positions_from_a_numpy_table_fail_with_a_dtype_hint():
    np = pytest.importorskip("numpy")

    def positions_numpy_table(x):
        B, T, C = x.shape
        pos, i = np.arange(T)[:, None], np.arange(0, C, 2)[None, :]
        angle = pos / 10000 ** (i / C)
        pe = np.zeros((T, C))
        pe[:, 0::2], pe[:, 1::2] = np.sin(angle), np.cos(angle)
        return x + torch.from_numpy(pe)
    with pytest.raises(ExerciseError, match="float64"):
        ch11.check_add_positions(positions_numpy_table)


def cross_attention_softmax_over_queries(x, memory, mask, layer):
    B, T, C = x.shape
    hs = C // layer.n_head
    q = layer.q_proj(x).view(B, T, layer.n_head, hs).transpose(1, 2)
    k, v = layer.kv_proj(memory).split(C, dim=-1)
    k = k.view(B, -1, layer.n_head, hs).transpose(1, 2)
    v = v.view(B, -1, layer.n_head, hs).transpose(1, 2)
    scores = (q @ k.transpose(-2, -1) / math.sqrt(hs)).masked_fill(~mask, float("-inf"))
    return layer.c_proj((F.softmax(scores, dim=-2) @ v).transpose(1, 2).reshape(B, T, C))


def cross_attention_mask_filled_with_zero(x, memory, mask, layer):
    B, T, C = x.shape
    hs = C // layer.n_head
    q = layer.q_proj(x).view(B, T, layer.n_head, hs).transpose(1, 2)
    k, v = layer.kv_proj(memory).split(C, dim=-1)
    k = k.view(B, -1, layer.n_head, hs).transpose(1, 2)
    v = v.view(B, -1, layer.n_head, hs).transpose(1, 2)
    scores = (q @ k.transpose(-2, -1) / math.sqrt(hs)).masked_fill(~mask, 0.0)
    return layer.c_proj((F.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(B, T, C))


@pytest.mark.parametrize("wrong, message, hint", [
    (cross_attention_softmax_over_queries, "over the queries", "softmax over the last axis"),
    (cross_attention_mask_filled_with_zero, "filled with 0", "float('-inf')"),
])
def test_cross_attention_classic_mistakes_get_their_own_hints(wrong, message, hint):
    with pytest.raises(ExerciseError, match=message) as error:
        ch11.check_cross_attention(wrong)
    assert hint in str(error.value)
