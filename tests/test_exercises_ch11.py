"""The checks of chapter 11's exercises: right answers pass, plausible wrong ones fail with a
hint."""
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


# --- padding mask ---


def test_mask_right(capsys):
    expect_pass(ch11.check_source_padding_mask, lambda src, pad: (src != pad)[:, None, None, :],
                capsys)


# --- cross-attention ---


def cross_attention(x, memory, mask, layer, scale_by_c=False, use_mask=True, fill=float("-inf"),
                    softmax_dim=-1):
    """The right answer with its defaults; each keyword turns on one classic mistake."""
    B, T, C = x.shape
    hs = C // layer.n_head
    q = layer.q_proj(x).view(B, T, layer.n_head, hs).transpose(1, 2)
    k, v = layer.kv_proj(memory).split(C, dim=-1)
    k = k.view(B, -1, layer.n_head, hs).transpose(1, 2)
    v = v.view(B, -1, layer.n_head, hs).transpose(1, 2)
    scores = q @ k.transpose(-2, -1) / math.sqrt(C if scale_by_c else hs)
    if use_mask:
        scores = scores.masked_fill(~mask, fill)
    y = F.softmax(scores, dim=softmax_dim) @ v
    return layer.c_proj(y.transpose(1, 2).reshape(B, T, C))


def test_cross_attention_right(capsys):
    expect_pass(ch11.check_cross_attention, cross_attention, capsys)


# --- label smoothing ---


def smoothed(logits, targets, eps):
    logp = F.log_softmax(logits, -1)
    nll = -logp.gather(1, targets[:, None]).squeeze(1)
    return ((1 - eps) * nll - eps * logp.mean(-1)).mean()


def test_label_smoothing_right(capsys):
    expect_pass(ch11.check_label_smoothed_loss, smoothed, capsys)
    expect_pass(ch11.check_label_smoothed_loss, lambda l, t,
                e: F.cross_entropy(l, t, label_smoothing=e), capsys)


def over_wrong_tokens(logits, targets, eps):
    logp = F.log_softmax(logits, -1)
    V = logits.shape[-1]
    target = torch.full_like(logp, eps / (V - 1)).scatter(1, targets[:, None], 1 - eps)
    return -(target * logp).sum(-1).mean()


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


def beam_step_true_division(scores, logp, beam_size):
    # idx / V gives fractional beams; the check used to compare .long() and pass them (issue 22).
    V = logp.shape[-1]
    new_scores, flat = (scores[:, None] + logp).flatten().topk(beam_size)
    return new_scores, flat / V, flat % V


# --- positions ---


def add_positions(x):
    return x + sinusoidal_position_encoding(x.shape[1], x.shape[2])


def test_positions_right(capsys):
    expect_pass(ch11.check_add_positions, add_positions, capsys)


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


# --- every wrong answer, one table: (check, wrong answer, what its message must match, and a hint
# the message must contain, or None). Issue 22's rows used to pass the check or crash it. ---

WRONG_ANSWERS = [
    *[(check, not_done, "Not done yet", None) for check in (
        ch11.check_source_padding_mask, ch11.check_cross_attention, ch11.check_label_smoothed_loss,
        ch11.check_beam_step, ch11.check_add_positions)],
    (ch11.check_source_padding_mask, lambda src, pad: (src == pad)[:, None, None, :], "inverted",
     None),
    (ch11.check_source_padding_mask, lambda src, pad: src != pad, "attention scores are", None),
    (ch11.check_source_padding_mask, lambda src, pad: (src != pad)[:, None, None, :].float(),
     "boolean", None),
    (ch11.check_source_padding_mask, lambda src, pad: (src != 0)[:, None, None, :], "wrong places",
     None),
    (ch11.check_cross_attention, lambda *a: cross_attention(*a, use_mask=False),
     "padded source positions", None),
    (ch11.check_cross_attention, lambda *a: cross_attention(*a, scale_by_c=True), "sqrt\\(C\\)",
     None),
    (ch11.check_cross_attention, lambda *a: cross_attention(*a)[:, :, None], "expected shape",
     None),
    (ch11.check_cross_attention, lambda x, memory, mask, layer: x, "differ", None),
    (ch11.check_cross_attention, lambda *a: cross_attention(*a, softmax_dim=-2), "over the queries",
     "softmax over the last axis"),
    (ch11.check_cross_attention, lambda *a: cross_attention(*a, fill=0.0), "filled with 0",
     "float('-inf')"),
    # issue 22: a float64 output used to crash the check (torch.allclose of float64 and float32)
    (ch11.check_cross_attention, lambda *a: cross_attention(*a).double(),
     "(?s)expected torch.float32, got dtype torch.float64.*Hint: ", None),
    (ch11.check_label_smoothed_loss, over_wrong_tokens, "V - 1 WRONG", None),
    (ch11.check_label_smoothed_loss, lambda l, t, e: F.cross_entropy(l, t), "differ", None),
    (ch11.check_label_smoothed_loss, lambda l, t,
     e: F.cross_entropy(l, t, label_smoothing=e, reduction="none"), "one loss per position", None),
    # issue 22: a forgotten `return` used to die with TypeError in float(got), an unreduced loss
    # with ValueError
    (ch11.check_label_smoothed_loss, lambda logits, targets, eps: None,
     "(?s)returned None.*Hint: did you forget the `return`", None),
    (ch11.check_label_smoothed_loss, lambda logits, targets, eps: -(F.log_softmax(logits, -1)),
     "(?s)one loss per position and token.*Hint: ", None),
    (ch11.check_label_smoothed_loss, lambda logits, targets, eps: "loss",
     "(?s)expected a number, got the str 'loss'.*Hint: ", None),
    (ch11.check_beam_step, ignores_scores, "ignore the hypotheses' own scores", None),
    (ch11.check_beam_step, swaps_beam_and_token, "beams/tokens", None),
    (ch11.check_beam_step, lambda s, l, k: l.max(-1).values[:k], "shape|expected a tuple", None),
    (ch11.check_beam_step, beam_step_true_division,
     "(?s)beams has dtype torch.float32.*Hint: idx / V divides", None),
    (ch11.check_add_positions, ch11.add_positions_buggy, "same encoding", None),
    (ch11.check_add_positions,
     lambda x: x + sinusoidal_position_encoding(x.shape[1], x.shape[2]).flip(0), "differ", None),
    # right values in another dtype (e.g. a table built with NumPy): no traceback, a hint on the
    # dtype
    *[(ch11.check_add_positions, lambda x, dtype=dtype: add_positions(x).to(dtype),
       "but your sum is", "torch.from_numpy(pe).to(x.dtype)")
      for dtype in (torch.float64, torch.float16)],
]


@pytest.mark.parametrize("check, wrong, message, hint", WRONG_ANSWERS,
                         ids=[f"{check.__name__}-{i}" for i,
                              (check, *_) in enumerate(WRONG_ANSWERS)])
def test_wrong_answers_fail_with_their_hint(check, wrong, message, hint):
    with pytest.raises(ExerciseError, match=message) as error:
        check(wrong)
    if hint is not None:
        assert hint in str(error.value)
