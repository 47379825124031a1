"""The checks of chapter 2's exercises: right answers pass, plausible wrong ones fail with a hint."""
import math

import pytest
import torch
import torch.nn.functional as F

from course_lib.exercises import ExerciseError, ch02
from exercise_helpers import assert_correct, assert_not_done, not_done


# --- initial loss ---


def test_initial_loss_correct(capsys):
    ch02.check_initial_loss(lambda V: math.log(V))
    assert_correct(capsys)


def test_initial_loss_tensor_answer_passes(capsys):
    ch02.check_initial_loss(lambda V: -torch.log(torch.tensor(1.0 / V)))
    assert_correct(capsys)


def test_initial_loss_not_done():
    assert_not_done(ch02.check_initial_loss, not_done)


@pytest.mark.parametrize("wrong, message", [
    (lambda V: math.log2(V), "log base 2"),
    (lambda V: 1 / V, "probability of the target"),
    (lambda V: math.log(1 / V), "negative"),
    (lambda V: math.log(V - 1), "not the expected value"),
])
def test_initial_loss_wrong_answers_fail(wrong, message):
    with pytest.raises(ExerciseError, match=message):
        ch02.check_initial_loss(wrong)


# --- cross-entropy from scratch ---


def cross_entropy(logits, targets):
    logprobs = logits - torch.logsumexp(logits, dim=-1, keepdim=True)
    return -logprobs[torch.arange(len(targets)), targets].mean()


def test_cross_entropy_correct(capsys):
    ch02.check_cross_entropy(cross_entropy)
    assert_correct(capsys)


def test_cross_entropy_not_done():
    assert_not_done(ch02.check_cross_entropy, not_done)


def test_cross_entropy_naive_softmax_overflows():
    def naive(logits, targets):
        probs = logits.exp() / logits.exp().sum(-1, keepdim=True)
        return -probs[torch.arange(len(targets)), targets].log().mean()

    with pytest.raises(ExerciseError, match="overflows"):
        ch02.check_cross_entropy(naive)


def test_cross_entropy_wrong_axis_fails():
    def wrong_axis(logits, targets):
        return -F.log_softmax(logits, dim=0)[torch.arange(len(targets)), targets].mean()

    with pytest.raises(ExerciseError, match="wrong axis"):
        ch02.check_cross_entropy(wrong_axis)


def test_cross_entropy_missing_minus_fails():
    with pytest.raises(ExerciseError, match="negative"):
        ch02.check_cross_entropy(lambda logits, targets: -cross_entropy(logits, targets))


def test_cross_entropy_sum_instead_of_mean_fails():
    def summed(logits, targets):
        return cross_entropy(logits, targets) * len(targets)

    with pytest.raises(ExerciseError, match="values differ|not the expected"):
        ch02.check_cross_entropy(summed)


def test_cross_entropy_unreduced_fails():
    def per_row(logits, targets):
        return -F.log_softmax(logits, -1)[torch.arange(len(targets)), targets]

    with pytest.raises(ExerciseError, match="single number"):
        ch02.check_cross_entropy(per_row)


# --- counting bigram model ---


def bigram_probs(data, vocab_size, smoothing=1.0):
    N = torch.zeros(vocab_size, vocab_size)
    for a, b in zip(data[:-1].tolist(), data[1:].tolist()):
        N[a, b] += 1
    N = N + smoothing
    return N / N.sum(1, keepdim=True)


def test_bigram_probs_correct(capsys):
    ch02.check_bigram_probs(bigram_probs)
    assert_correct(capsys)


def test_bigram_probs_not_done():
    assert_not_done(ch02.check_bigram_probs, not_done)


def test_bigram_probs_counts_only_fails():
    def counts(data, V, smoothing=1.0):
        N = torch.zeros(V, V)
        for a, b in zip(data[:-1].tolist(), data[1:].tolist()):
            N[a, b] += 1
        return N + smoothing

    with pytest.raises(ExerciseError, match="counts, not probabilities"):
        ch02.check_bigram_probs(counts)


def test_bigram_probs_column_normalised_fails():
    def columns(data, V, smoothing=1.0):
        N = bigram_probs(data, V, 0.0) * 0
        for a, b in zip(data[:-1].tolist(), data[1:].tolist()):
            N[a, b] += 1
        N = N + smoothing
        return N / N.sum(0, keepdim=True)

    with pytest.raises(ExerciseError, match="columns sum to 1"):
        ch02.check_bigram_probs(columns)


def test_bigram_probs_transposed_fails():
    with pytest.raises(ExerciseError, match="transposed"):
        ch02.check_bigram_probs(lambda data, V, smoothing=1.0: bigram_probs(data.flip(0), V, smoothing))


def test_bigram_probs_ignoring_smoothing_fails():
    with pytest.raises(ExerciseError, match="some probabilities are 0|not the expected|values differ"):
        ch02.check_bigram_probs(lambda data, V, smoothing=1.0: bigram_probs(data, V, 0.0))
