"""The checks of chapter 10's exercises: right answers pass, plausible wrong ones fail with a
hint."""
import pytest
import torch
import torch.nn.functional as F

from course_lib.data import pad_batch
from course_lib.exercises import ExerciseError, ch10
from course_lib.utils import IGNORE_INDEX


def not_done(*args):
    raise NotImplementedError()


def pad_and_mask(seqs, pad_id, side):
    T = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), T), pad_id, dtype=torch.long)
    mask = torch.zeros(len(seqs), T, dtype=torch.bool)
    for i, s in enumerate(seqs):
        start = 0 if side == "right" else T - len(s)
        ids[i, start:start + len(s)] = torch.tensor(s)
        mask[i, start:start + len(s)] = True
    return ids, mask


def masked_mean_loss(logits, targets, mask):
    losses = F.cross_entropy(logits.flatten(0, 1), targets.flatten(),
                             reduction="none").view(targets.shape)
    return (losses * mask).sum() / mask.sum()


def masked_accuracy(logits, targets, mask):
    return (((logits.argmax(-1) == targets) & mask).sum() / mask.sum()).item()


def combine_masks(real):
    T = real.shape[1]
    return torch.tril(torch.ones(T, T, dtype=torch.bool))[None] & real[:, None, :]


def accuracy_fixed(logits, targets):
    keep = targets != IGNORE_INDEX
    return (((logits.argmax(-1) == targets) & keep).sum() / keep.sum()).item()


RIGHT = [
    (ch10.check_pad_batch, pad_and_mask),
    (ch10.check_pad_batch, lambda s, p, side: pad_batch(s, p, side=side)),
    (ch10.check_masked_mean_loss, masked_mean_loss),
    (ch10.check_masked_accuracy, masked_accuracy),
    (ch10.check_combine_masks, combine_masks),
    (ch10.check_combine_masks, lambda r: combine_masks(r)[:, None]),
    (ch10.check_accuracy_fixed, accuracy_fixed),
]


@pytest.mark.parametrize("check, fn", RIGHT)
def test_right_answers_pass(check, fn, capsys):
    check(fn)
    assert "Correct!" in capsys.readouterr().out


@pytest.mark.parametrize("check", sorted({c for c, _ in RIGHT}, key=lambda c: c.__name__))
def test_not_done(check):
    with pytest.raises(ExerciseError, match="Not done yet"):
        check(not_done)


@pytest.mark.parametrize("check, wrong, message", [
    (ch10.check_pad_batch, lambda s, p, side: (lambda i, m: (i, ~m))(*pad_and_mask(s, p, side)),
     "inverted"),
    (ch10.check_pad_batch, lambda s, p, side: pad_and_mask(s, p, "right"), "padded on the right"),
    (ch10.check_pad_batch, lambda s, p, side: pad_and_mask(s, p, "left"), "padded on the left"),
    (ch10.check_pad_batch, lambda s, p,
     side: (lambda i, m: (i, m.long()))(*pad_and_mask(s, p, side)), "dtype"),
    (ch10.check_pad_batch, lambda s, p, side: pad_and_mask(s, p, side)[0], "pair"),
    (ch10.check_masked_mean_loss, lambda l, t, m: F.cross_entropy(l.flatten(0, 1), t.flatten()),
     "every position"),
    (ch10.check_masked_mean_loss, lambda l, t,
     m: (F.cross_entropy(l.flatten(0, 1), t.flatten(), reduction="none")
                                                   .view(t.shape) * m).sum(1).div(m.sum(1)).mean(),
     "mean of each row"),
    (ch10.check_masked_mean_loss, lambda l, t,
     m: (F.cross_entropy(l.flatten(0, 1), t.flatten(), reduction="none")
                                                   .view(t.shape) * m).sum(), "sum"),
    (ch10.check_masked_accuracy, lambda l, t, m: (l.argmax(-1) == t).float().mean().item(),
     "pads included"),
    (ch10.check_masked_accuracy, lambda l, t,
     m: (((l.argmax(-1) == t) & m).sum(1) / m.sum(1)).mean().item(), "accuracy of each row"),
    (ch10.check_combine_masks,
     lambda r: torch.tril(torch.ones(r.shape[1], r.shape[1], dtype=torch.bool))[None]
     & r[:, :, None], "queries"),
    (ch10.check_combine_masks, lambda r: r[:, None, :].expand(-1, r.shape[1], -1),
     "causal part is missing"),
    (ch10.check_combine_masks,
     lambda r: torch.triu(torch.ones(r.shape[1], r.shape[1], dtype=torch.bool))[None]
     & r[:, None, :], "upper triangular"),
    (ch10.check_combine_masks,
     lambda r: torch.tril(torch.ones(r.shape[1], r.shape[1], dtype=torch.bool)), "shape"),
    (ch10.check_accuracy_fixed, lambda l, t: (l.argmax(-1) == t).float().mean().item(),
     "buggy number"),
])
def test_wrong_answers_fail_with_a_hint(check, wrong, message):
    with pytest.raises(ExerciseError, match=message):
        check(wrong)


# --- issue 22: pad answers that used to pass ---


def test_pad_batch_padding_with_zeros_whatever_pad_id_fails():
    # The check only ever used pad_id=0, so an answer that ignores pad_id passed.
    def pad_with_zeros(seqs, pad_id, side):
        return pad_and_mask(seqs, 0, side)

    with pytest.raises(ExerciseError, match="(?s)padded with 0, not with pad_id=99.*Hint: fill"):
        ch10.check_pad_batch(pad_with_zeros)


def test_pad_batch_float_ids_fail():
    # The exercise asks for long ids (nn.Embedding takes no others); floats used to pass.
    def pad_float(seqs, pad_id, side):
        ids, mask = pad_and_mask(seqs, pad_id, side)
        return ids.float(), mask

    with pytest.raises(ExerciseError,
                       match="(?s)expected torch.int64, got dtype torch.float32.*Hint: token ids"):
        ch10.check_pad_batch(pad_float)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_combine_masks_as_zeros_and_ones_fails_with_the_additive_mask_hint(dtype):
    # right values, wrong dtype: scaled_dot_product_attention would add a float 0/1 mask to the
    # scores
    def zeros_and_ones(real):
        T = real.shape[1]
        return torch.tril(torch.ones(T, T, dtype=dtype))[None] * real[:, None, :].to(dtype)
    with pytest.raises(ExerciseError, match="expected a boolean mask") as error:
        ch10.check_combine_masks(zeros_and_ones)
    assert "ADDS a float attn_mask" in str(error.value)


# 10-m2 (review 2026-11-28): an integer mask got the float-mask hint, but SDPA refuses an integer
# mask outright; and a mask of both axes was called "the queries, not the keys".


@pytest.mark.parametrize("dtype", [torch.int32, torch.long, torch.uint8])
def test_combine_masks_integer_mask_gets_the_integer_hint(dtype):
    def integer_mask(real):
        return combine_masks(real).to(dtype)
    with pytest.raises(ExerciseError,
                       match="(?s)expected a boolean mask, got dtype.*Hint: .*integer mask it "
                                            "refuses") as error:
        ch10.check_combine_masks(integer_mask)
    assert "ADDS a float attn_mask" not in str(error.value)


def test_combine_masks_both_axes_is_named():
    def both_axes(real):
        return combine_masks(real) & real[:, :, None]
    with pytest.raises(ExerciseError,
                       match="(?s)pad queries \\(rows\\) as well as the pad keys.*NaN.*Hint: mask "
                                            "the keys only") as error:
        ch10.check_combine_masks(both_axes)
    assert "not the keys" not in str(error.value)


def test_combine_masks_queries_only_keeps_its_hint():
    def queries_only(real):
        T = real.shape[1]
        return torch.tril(torch.ones(T, T, dtype=torch.bool))[None] & real[:, :, None]
    with pytest.raises(ExerciseError, match="you masked the queries \\(rows\\), not the keys"):
        ch10.check_combine_masks(queries_only)


# 10-n1 (review 2026-11-28): int32 ids were told "token ids are integers", which they are


def test_pad_batch_int32_ids_get_the_long_hint():
    def pad_int32(seqs, pad_id, side):
        ids, mask = pad_and_mask(seqs, pad_id, side)
        return ids.int(), mask
    with pytest.raises(ExerciseError, match="(?s)expected torch.int64, got dtype "
                                            "torch.int32.*Hint: the exercise asks for a \\(B, T\\) "
                                            "long tensor.*cross_entropy refuses int32") as error:
        ch10.check_pad_batch(pad_int32)
    assert "ids are integers" not in str(error.value)
