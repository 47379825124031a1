"""The checks of chapter 22's exercises: right answers pass, plausible wrong ones fail, with a
hint."""

import pytest
import torch
from exercise_helpers import assert_correct, assert_leaves_rng_alone, assert_not_done, not_done

from course_lib.exercises import ExerciseError, ch22


# --- the acceptance probability ---


def accept(p_x, q_x):
    return torch.clamp(p_x / q_x, max=1.0)


def accept_python(p_x, q_x):
    return min(1.0, float(p_x) / float(q_x))


@pytest.mark.parametrize("right", [accept, accept_python])
def test_accept_correct(right, capsys):
    ch22.check_accept_probability(right)
    assert_correct(capsys)
    assert_leaves_rng_alone(ch22.check_accept_probability, right)


@pytest.mark.parametrize(
    "wrong, phrase",
    [
        (
            lambda p, q: torch.tensor(1.0, dtype=torch.float64),
            "above min",
        ),  # keep every draft token
        (lambda p, q: p, "below min"),  # p(x), not p/q
        (lambda p, q: p / q, "not a probability"),  # no min(1, .)
        (lambda p, q: torch.clamp(q / p, max=1.0), "below min"),  # upside down
        # review: weaker or looser than min(1, p/q) only where the enumeration's random tables never
        # go
        (
            lambda p, q: (
                torch.clamp(p / q, max=0.9) if p < q else torch.tensor(1.0, dtype=torch.float64)
            ),
            "below min",
        ),  # capped below 1: weaker
        (
            lambda p, q: (
                torch.tensor(0.5, dtype=torch.float64) if p == q else torch.clamp(p / q, max=1.0)
            ),
            "below min",
        ),  # p = q kept half the time
        (
            lambda p, q: (
                torch.tensor(1.0, dtype=torch.float64) if p == 0 else torch.clamp(p / q, max=1.0)
            ),
            "never emits",
        ),  # a filtered token kept
    ],
)
def test_accept_wrong(wrong, phrase):
    with pytest.raises(ExerciseError, match=phrase):
        ch22.check_accept_probability(wrong)


def test_accept_not_done():
    assert_not_done(ch22.check_accept_probability, not_done)


# --- the residual distribution ---


def residual(p, q):
    r = (p - q).clamp_min(0)
    return r / r.sum()


@pytest.mark.parametrize(
    "right", [residual, lambda p, q: torch.relu(p - q) / torch.relu(p - q).sum()]
)
def test_residual_correct(right, capsys):
    ch22.check_residual(right)
    assert_correct(capsys)
    assert_leaves_rng_alone(ch22.check_residual, right)


@pytest.mark.parametrize(
    "wrong, phrase",
    [
        (lambda p, q: (p - q).clamp_min(0), "sums to"),  # not normalised
        (lambda p, q: p, "is p itself"),  # forgetting the residual: resample from p
        (lambda p, q: p - q, "negative"),  # no max(0, .)
        (
            lambda p, q: (q - p).clamp_min(0) / (q - p).clamp_min(0).sum(),
            "not the target's",
        ),  # the other side
        (lambda p, q: q, "not the target's"),  # the draft again
    ],
)
def test_residual_wrong(wrong, phrase):
    with pytest.raises(ExerciseError, match=phrase):
        ch22.check_residual(wrong)


def test_residual_not_done():
    assert_not_done(ch22.check_residual, not_done)


# --- the cost model ---


def expected_tokens(alpha, k):
    return k + 1 if alpha == 1 else (1 - alpha ** (k + 1)) / (1 - alpha)


@pytest.mark.parametrize("right", [expected_tokens, lambda a, k: sum(a**i for i in range(k + 1))])
def test_expected_tokens_correct(right, capsys):
    ch22.check_expected_tokens(right)
    assert_correct(capsys)


@pytest.mark.parametrize(
    "wrong, phrase",
    [
        (lambda a, k: (1 - a**k) / (1 - a) if a < 1 else k, "left out the token"),
        (lambda a, k: 1 + a * k, "stops at the first rejection"),
        (lambda a, k: (1 - a ** (k + 1)) / (1 - a), "ZeroDivisionError"),  # alpha = 1 forgotten
        (lambda a, k: a * k, "expected"),
    ],
)
def test_expected_tokens_wrong(wrong, phrase):
    with pytest.raises(ExerciseError, match=phrase):
        ch22.check_expected_tokens(wrong)


def test_expected_tokens_not_done():
    assert_not_done(ch22.check_expected_tokens, not_done)
