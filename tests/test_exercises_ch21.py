"""The checks of chapter 21's exercises: right answers pass, plausible wrong ones fail with a
hint."""
import pytest
import torch
from exercise_helpers import assert_correct, assert_leaves_rng_alone, assert_not_done, not_done

from course_lib.exercises import ExerciseError, ch21


# --- previous-token score ---


def previous_token_score(patterns):
    T = patterns.shape[-1]
    return patterns.diagonal(offset=-1, dim1=-2, dim2=-1).sum(-1).mean(0) / T


def previous_token_score_by_mask(patterns):  # the same thing, TransformerLens's way
    T = patterns.shape[-1]
    detection = torch.diag(torch.ones(T - 1), -1)
    return ((patterns * detection).sum((-2, -1)) / patterns.sum((-2, -1))).mean(0)


@pytest.mark.parametrize("right", [previous_token_score, previous_token_score_by_mask])
def test_previous_token_score_correct(right, capsys):
    ch21.check_previous_token_score(right)
    assert_correct(capsys)
    assert_leaves_rng_alone(ch21.check_previous_token_score, right)


@pytest.mark.parametrize("wrong, phrase", [
    # the current token
    (lambda p: p.diagonal(0, -2, -1).sum(-1).mean(0) / p.shape[-1], "off by one"),
    (lambda p: p.diagonal(-2, -2, -1).sum(-1).mean(0) / p.shape[-1], "off by one"),  # two back
    # above the diagonal
    (lambda p: p.diagonal(1, -2, -1).sum(-1).mean(0) / p.shape[-1], "off by one"),
    # ARENA's mean over the diagonal
    (lambda p: p.diagonal(-1, -2, -1).mean((0, -1)), "T - 1 entries"),
    (lambda p: p.diagonal(-1, -2, -1).sum(-1).mean(0), "values differ"),  # not divided by T
    # mean over heads
    (lambda p: p.diagonal(-1, -2, -1).sum(-1).mean(1) / p.shape[-1], "expected shape"),
])
def test_previous_token_score_wrong(wrong, phrase):
    with pytest.raises(ExerciseError, match=phrase):
        ch21.check_previous_token_score(wrong)


def test_previous_token_score_not_done():
    assert_not_done(ch21.check_previous_token_score, not_done)


# --- induction score ---


def induction_score(patterns, tokens):
    same = torch.tril((tokens[:, :, None] == tokens[:, None, :]).float(), diagonal=-1)  # (B, T, T)
    detection = torch.zeros_like(same)
    detection[:, :, 1:] = same[:, :, :-1]  # key s + 1
    detection = torch.tril(detection)
    return ((patterns * detection[:, None]).sum((-2, -1)) / patterns.sum((-2, -1))).mean(0)


def induction_score_loops(patterns, tokens):  # the same, written with loops
    B, nh, T, _ = patterns.shape
    total = torch.zeros(nh)
    for b in range(B):
        for t in range(T):
            for s in range(t):
                if tokens[b, s] == tokens[b, t] and s + 1 <= t:
                    total += patterns[b, :, t, s + 1]
    return total / (B * T)


@pytest.mark.parametrize("right", [induction_score, induction_score_loops])
def test_induction_score_correct(right, capsys):
    ch21.check_induction_score(right)
    assert_correct(capsys)


def duplicate_score(patterns, tokens):  # off by one: the earlier occurrence itself
    same = torch.tril((tokens[:, :, None] == tokens[:, None, :]).float(), diagonal=-1)
    return ((patterns * same[:, None]).sum((-2, -1)) / patterns.sum((-2, -1))).mean(0)


def shifted_back(patterns, tokens):  # off by one the other way: key s - 1
    same = torch.tril((tokens[:, :, None] == tokens[:, None, :]).float(), diagonal=-1)
    detection = torch.zeros_like(same)
    detection[:, :, :-1] = same[:, :, 1:]
    return ((patterns * detection[:, None]).sum((-2, -1)) / patterns.sum((-2, -1))).mean(0)


# ARENA's stripe at one offset: right only for one repeat length
def fixed_stripe(patterns, tokens):
    return patterns.diagonal(offset=-3, dim1=-2, dim2=-1).sum(-1).mean(0) / patterns.shape[-1]


@pytest.mark.parametrize("wrong, phrase", [(duplicate_score, "duplicate-token head"),
                                           (shifted_back, "the wrong way"),
                                           (fixed_stripe, "values differ")])
def test_induction_score_wrong(wrong, phrase):
    with pytest.raises(ExerciseError, match=phrase):
        ch21.check_induction_score(wrong)


def test_induction_score_not_done():
    assert_not_done(ch21.check_induction_score, not_done)


# --- mean-ablation ---


def mean_ablate(z, head, mean_z):
    z = z.clone()
    z[:, :, head] = mean_z[:, head]
    return z


def mean_ablate_in_place(z, head, mean_z):  # in place on its input and returned: still right
    z[:, :, head] = mean_z[:, head]
    return z


@pytest.mark.parametrize("right", [mean_ablate, mean_ablate_in_place])
def test_mean_ablation_correct(right, capsys):
    ch21.check_mean_ablation(right)
    assert_correct(capsys)
    assert_leaves_rng_alone(ch21.check_mean_ablation, right)


def wrong_axis_time(z, head, mean_z):  # ablates a position
    z = z.clone()
    z[:, head] = mean_z[head]
    return z


def wrong_axis_channel(z, head, mean_z):  # ablates a channel of every head
    z = z.clone()
    z[..., head] = mean_z[..., head]
    return z


def zeroed(z, head, mean_z):
    z = z.clone()
    z[:, :, head] = 0
    return z


def one_mean(z, head, mean_z):  # the mean over positions too
    z = z.clone()
    z[:, :, head] = mean_z[:, head].mean(0)
    return z


@pytest.mark.parametrize("wrong, phrase",
                         [(wrong_axis_time, "wrong axis"), (wrong_axis_channel, "wrong axis"),
                                           (zeroed, "zero-ablation"), (one_mean, "each position"),
                                           (lambda z, head, mean_z: z, "no head was replaced")])
def test_mean_ablation_wrong(wrong, phrase):
    with pytest.raises(ExerciseError, match=phrase):
        ch21.check_mean_ablation(wrong)


def test_mean_ablation_not_done():
    assert_not_done(ch21.check_mean_ablation, not_done)
