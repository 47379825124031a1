"""The checks of chapter 8's exercises: right answers pass, plausible wrong ones fail with a hint."""
import pytest
import torch
import torch.nn.functional as F

from course_lib.exercises import ExerciseError, ch08
from course_lib.generate import top_p_filter as library_top_p
from exercise_helpers import assert_correct, assert_not_done, not_done


# --- top-p ---


def top_p(logits, p):
    sorted_logits, order = torch.sort(logits, descending=True, dim=-1)
    probs = F.softmax(sorted_logits, dim=-1)
    before = probs.cumsum(dim=-1) - probs  # probability of the tokens strictly before each one
    drop_sorted = before >= p
    drop = drop_sorted.scatter(-1, order, drop_sorted)
    return logits.masked_fill(drop, float("-inf"))


def test_top_p_correct(capsys):
    ch08.check_top_p_filter(top_p)
    assert_correct(capsys)


def test_top_p_library_passes(capsys):
    ch08.check_top_p_filter(library_top_p)
    assert_correct(capsys)


def test_top_p_not_done():
    assert_not_done(ch08.check_top_p_filter, not_done)


def excludes_the_crossing_token(logits, p):
    sorted_logits, order = torch.sort(logits, descending=True, dim=-1)
    drop_sorted = F.softmax(sorted_logits, dim=-1).cumsum(-1) > p
    return logits.masked_fill(drop_sorted.scatter(-1, order, drop_sorted), float("-inf"))


def forgets_to_unsort(logits, p):
    sorted_logits, order = torch.sort(logits, descending=True, dim=-1)
    probs = F.softmax(sorted_logits, dim=-1)
    drop_sorted = probs.cumsum(-1) - probs >= p
    return logits.masked_fill(drop_sorted, float("-inf"))


def returns_probabilities(logits, p):
    return F.softmax(logits, dim=-1)


def keeps_one_too_many(logits, p):
    sorted_logits, order = torch.sort(logits, descending=True, dim=-1)
    probs = F.softmax(sorted_logits, dim=-1)
    before = probs.cumsum(-1) - probs
    drop_sorted = (before - probs.roll(1, -1)) >= p  # one token later than needed
    drop_sorted[..., :2] = False
    return logits.masked_fill(drop_sorted.scatter(-1, order, drop_sorted), float("-inf"))


def only_first_dimension(logits, p):
    flat = logits.reshape(-1)
    return top_p(flat, p)


@pytest.mark.parametrize("wrong, message", [
    (excludes_the_crossing_token, "every token of a row was dropped|less than p"),
    (forgets_to_unsort, "less likely one was kept"),
    (returns_probabilities, "probabilities"),
    (keeps_one_too_many, "smallest nucleus"),
    (only_first_dimension, "expected shape"),
])
def test_top_p_wrong_answers_fail(wrong, message):
    with pytest.raises(ExerciseError, match=message):
        ch08.check_top_p_filter(wrong)


# --- temperature -> 0 ---


def temperature_probs(logits, temperature):
    if temperature == 0:
        return F.one_hot(logits.argmax(-1), logits.shape[-1]).to(logits.dtype)
    return torch.softmax(logits / temperature, dim=-1)


def test_temperature_correct(capsys):
    ch08.check_temperature_probs(temperature_probs)
    assert_correct(capsys)


def test_temperature_not_done():
    assert_not_done(ch08.check_temperature_probs, not_done)


def naive_exp(logits, temperature):
    if temperature == 0:
        return F.one_hot(logits.argmax(-1), logits.shape[-1]).to(logits.dtype)
    e = torch.exp(logits / temperature)
    return e / e.sum(-1, keepdim=True)


def multiplies(logits, temperature):
    return torch.softmax(logits * temperature, dim=-1)


def no_zero_case(logits, temperature):
    return torch.softmax(logits / temperature, dim=-1)


def softmax_wrong_axis(logits, temperature):
    if temperature == 0:
        return F.one_hot(logits.argmax(-1), logits.shape[-1]).to(logits.dtype)
    return torch.softmax(logits / temperature, dim=0)


@pytest.mark.parametrize("wrong, message", [
    (naive_exp, "overflows"),
    (multiplies, "multiplied the logits"),
    (no_zero_case, "temperature 0"),
    (softmax_wrong_axis, "values differ"),
])
def test_temperature_wrong_answers_fail(wrong, message):
    with pytest.raises(ExerciseError, match=message):
        ch08.check_temperature_probs(wrong)
