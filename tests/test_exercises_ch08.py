"""The checks of chapter 8's exercises: right answers pass, plausible wrong ones fail with a
hint."""
import pytest
import torch
import torch.nn.functional as F

from course_lib.exercises import ExerciseError, ch08
from course_lib.generate import top_k_filter as library_top_k, top_p_filter as library_top_p
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


# --- the distribution that sample_next draws from ---


def sampling_probs(logits, temperature, top_k, top_p):
    # written differently from the chapter's solution: probabilities filtered and renormalised by
    # hand instead of -inf logits
    probs = F.softmax(logits / temperature, dim=-1)
    if top_k is not None:
        kth = probs.topk(min(top_k, probs.shape[-1]), dim=-1).values[..., -1:]
        probs = torch.where(probs >= kth, probs, torch.zeros_like(probs))
        probs = probs / probs.sum(-1, keepdim=True)
    if top_p is not None and top_p < 1.0:
        sorted_probs, order = probs.sort(dim=-1, descending=True)
        keep_sorted = sorted_probs.cumsum(-1) - sorted_probs < top_p
        keep = keep_sorted.scatter(-1, order, keep_sorted)
        probs = torch.where(keep, probs, torch.zeros_like(probs))
        probs = probs / probs.sum(-1, keepdim=True)
    return probs


def test_sampling_probs_correct(capsys):
    ch08.check_sampling_probs(sampling_probs)
    assert_correct(capsys)


def test_sampling_probs_not_done():
    assert_not_done(ch08.check_sampling_probs, not_done)


def _filters(logits, top_k, top_p, order="kp"):
    for name in order:
        if name == "k" and top_k is not None:
            logits = library_top_k(logits, top_k)
        if name == "p" and top_p is not None and top_p < 1.0:
            logits = library_top_p(logits, top_p)
    return logits


def temperature_last(logits, temperature, top_k, top_p):
    return F.softmax(_filters(logits, top_k, top_p) / temperature, dim=-1)


def top_p_first(logits, temperature, top_k, top_p):
    return F.softmax(_filters(logits / temperature, top_k, top_p, order="pk"), dim=-1)


def no_filters(logits, temperature, top_k, top_p):
    return F.softmax(logits / temperature, dim=-1)


def returns_logits(logits, temperature, top_k, top_p):
    return _filters(logits / temperature, top_k, top_p)


def no_temperature(logits, temperature, top_k, top_p):
    return F.softmax(_filters(logits, top_k, top_p), dim=-1)


@pytest.mark.parametrize("wrong, message", [
    (temperature_last, "after the filters"),
    (top_p_first, "top-p before top-k"),
    (no_filters, "nothing was filtered"),
    (returns_logits, "not probability distributions"),
    (no_temperature, "values differ"),  # the case with only a temperature
    # top_p=None not handled
    (lambda logits, t, k, p: library_top_p(logits / t, p), "raised TypeError"),
    (lambda logits, t, k, p: None, "returned None"),
])
def test_sampling_probs_wrong_answers_fail(wrong, message):
    with pytest.raises(ExerciseError, match=message):
        ch08.check_sampling_probs(wrong)
