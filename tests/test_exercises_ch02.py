"""The checks of chapter 2's exercises: right answers pass, plausible wrong ones fail with a
hint."""
import math

import pytest
import torch
import torch.nn.functional as F

from course_lib.exercises import ExerciseError, ch02
from exercise_helpers import assert_correct, assert_leaves_rng_alone, assert_not_done, not_done


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
        ch02.check_bigram_probs(lambda data, V,
                                smoothing=1.0: bigram_probs(data.flip(0), V, smoothing))


def test_bigram_probs_ignoring_smoothing_fails():
    with pytest.raises(ExerciseError,
                       match="some probabilities are 0|not the expected|values differ"):
        ch02.check_bigram_probs(lambda data, V, smoothing=1.0: bigram_probs(data, V, 0.0))


# --- spot the bug: a ReLU on the logits ---


def logits_and_loss(table, idx, targets):
    logits = table[idx]  # (B, T, V)
    B, T, V = logits.shape
    return logits, F.cross_entropy(logits.view(B * T, V), targets.view(B * T))


def logits_and_loss_relu(table, idx, targets):  # the tutorial's bug
    logits = F.relu(table[idx])
    B, T, V = logits.shape
    return logits, F.cross_entropy(logits.view(B * T, V), targets.view(B * T))


def test_logits_and_loss_correct(capsys):
    ch02.check_bigram_logits_and_loss(logits_and_loss)
    assert_correct(capsys)


def test_logits_and_loss_leaves_rng_alone():
    assert_leaves_rng_alone(ch02.check_bigram_logits_and_loss, logits_and_loss)


def test_logits_and_loss_not_done():
    assert_not_done(ch02.check_bigram_logits_and_loss, not_done)


def test_logits_and_loss_relu_names_the_bug():
    with pytest.raises(ExerciseError, match=r"F\.relu\(table\[idx\]\)") as e:
        ch02.check_bigram_logits_and_loss(logits_and_loss_relu)
    assert "no gradient" in str(e.value) and "raising all the others" in str(e.value)


@pytest.mark.parametrize("wrong, message", [
    (lambda table, idx,
     targets: (F.softmax(table[idx], -1), logits_and_loss(table, idx, targets)[1]),
     "probabilities"),
    (lambda table, idx, targets: (table[idx].abs(), logits_and_loss(table, idx, targets)[1]),
     "never negative"),
    (lambda table, idx, targets: (table[idx], logits_and_loss(table, idx, targets)[1].item()),
     "0-d tensor"),
    (lambda table, idx, targets: logits_and_loss(table, idx, targets)[0], "pair"),
    (lambda table, idx, targets: logits_and_loss(table.detach(), idx, targets), "no gradient"),
    (lambda table, idx,
     targets: (table[idx], logits_and_loss(table, idx, targets)[1] * idx.numel()), "the loss"),
])
def test_logits_and_loss_wrong_answers_fail(wrong, message):
    with pytest.raises(ExerciseError, match=message):
        ch02.check_bigram_logits_and_loss(wrong)


# --- spot the bug: `if targets != None` ---


def bigram_forward(table, idx, targets=None):
    logits = table[idx]  # (B, T, V)
    loss = None
    if targets is not None:
        B, T, V = logits.shape
        loss = F.cross_entropy(logits.view(B * T, V), targets.view(B * T))
    return logits, loss


def bigram_forward_ne_none(table, idx, targets=None):  # the tutorial's bug
    logits = table[idx]
    if targets != None:  # noqa: E711
        B, T, V = logits.shape
        loss = F.cross_entropy(logits.view(B * T, V), targets.view(B * T))
    else:
        loss = None
    return logits, loss


def bigram_forward_eq_none_on_the_left(table, idx, targets=None):
    logits = table[idx]
    if None == targets:  # noqa: E711
        return logits, None
    return logits, F.cross_entropy(logits.flatten(0, 1), targets.flatten())


def bigram_forward_truthiness(table, idx, targets=None):
    logits = table[idx]
    loss = None
    if targets:
        loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten())
    return logits, loss


def bigram_forward_always_loss(table, idx, targets=None):
    logits = table[idx]
    if targets is None:
        targets = idx
    return logits, F.cross_entropy(logits.flatten(0, 1), targets.flatten())


def test_bigram_forward_correct(capsys):
    ch02.check_bigram_forward(bigram_forward)
    out = assert_correct(capsys)
    assert "`is`, not `!=`" in out


def test_bigram_forward_not_done():
    assert_not_done(ch02.check_bigram_forward, not_done)


def test_ne_none_passes_on_tensors_but_fails_the_source_check():
    import numpy as np

    table, idx = torch.randn(5, 5), torch.tensor([[1, 2]])
    assert bigram_forward_ne_none(table, idx)[1] is None  # the bug is invisible on tensors...
    with pytest.raises(ValueError, match="ambiguous"):  # ...but not on NumPy arrays
        if np.array([1, 2]) != None:  # noqa: E711
            pass
    with pytest.raises(ExerciseError, match=r"`targets != None`") as e:
        ch02.check_bigram_forward(bigram_forward_ne_none)
    assert "is not None" in str(e.value) and "PEP 8" in str(e.value)


def test_eq_none_on_the_left_is_found():
    with pytest.raises(ExerciseError, match=r"`None == targets`"):
        ch02.check_bigram_forward(bigram_forward_eq_none_on_the_left)


@pytest.mark.parametrize("wrong, message", [
    (bigram_forward_truthiness, "ambiguous"),
    (bigram_forward_always_loss, "should be None"),
    (lambda table, idx, targets=None: table[idx], "pair"),
])
def test_bigram_forward_wrong_answers_fail(wrong, message):
    with pytest.raises(ExerciseError, match=message):
        ch02.check_bigram_forward(wrong)


def test_bigram_forward_single_zero_target_is_not_skipped():
    def numel_test(table, idx, targets=None):  # `if targets:` on one target 0 is False
        logits = table[idx]
        if targets is not None and targets.numel() == 1 and not targets:
            return logits, None
        return bigram_forward(table, idx, targets)

    with pytest.raises(ExerciseError, match="None although targets were given"):
        ch02.check_bigram_forward(numel_test)


def test_bigram_forward_without_source_skips_the_static_check(capsys):
    namespace = {"F": F}
    exec("def forward(table, idx, targets=None):\n"
         "    logits = table[idx]\n"
         "    if targets != None:\n"
         "        return logits, F.cross_entropy(logits.flatten(0, 1), targets.flatten())\n"
         "    return logits, None\n", namespace)
    ch02.check_bigram_forward(namespace["forward"])
    assert "could not be read" in assert_correct(capsys)
