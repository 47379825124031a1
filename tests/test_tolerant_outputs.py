"""course_lib.tools.tolerant_outputs: on a host that cannot reproduce the stored outputs bitwise,
a correct chapter's printed numbers agree within their tolerance and a wrong chapter's do not."""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from course_lib.tools.tolerant_outputs import DEFAULT, Tolerance, declared, disagreement


def test_a_loss_that_moved_in_its_fourth_decimal_agrees():
    # chapter 4, step 250: the reference (AMD EPYC) and an Intel Xeon under the same pin
    stored = "step 250: loss 2.0679, val loss 2.1151\n"
    assert disagreement(stored, "step 250: loss 2.0689, val loss 2.1168\n", DEFAULT) is None


def test_a_wrong_loss_curve_another_line_or_another_shape_disagrees():
    stored = "step 250: loss 2.0679, val loss 2.1151\ntorch.Size([12, 64, 65])\n"
    assert "not within" in disagreement(stored, stored.replace("2.1151", "2.4151"), DEFAULT)
    assert disagreement(stored, stored.replace("val loss", "train loss"), DEFAULT) == "the text differs beyond its numbers"
    assert "whole number 64" in disagreement(stored, stored.replace("65]", "64]"), DEFAULT)  # sizes: exact
    assert disagreement(stored, stored + "step 500: loss 1.9\n", DEFAULT) is not None  # a missing or extra line


def test_a_shape_glued_to_letters_is_text_and_must_match_exactly():
    # "12x64", "ch04" and a weights hash are words: a host does not change them
    assert disagreement("a 12x64 batch", "a 12x65 batch", DEFAULT) == "the text differs beyond its numbers"
    assert disagreement("hash b7bff3f7450f", "hash b7bff3f7450e", DEFAULT) is not None


def test_white_space_that_widens_a_column_agrees():
    assert disagreement("loss  9.99 |\n", "loss 10.01 |\n", DEFAULT) is None
    assert disagreement("12,345 tokens", "12,351 tokens", Tolerance(rtol=0.01, counts=True)) is None  # one number


def test_a_host_dependent_cell_is_not_compared_but_a_tolerance_is_needed_for_the_rest():
    sampled = Tolerance(host_dependent="text sampled after training")
    assert disagreement("ROMEO: the king", "JULIET: a queen", sampled) is None
    assert disagreement("0.070 of the sums right", "0.090 of the sums right", DEFAULT) is not None
    assert disagreement("0.070 of the sums right", "0.090 of the sums right", Tolerance(atol=0.03)) is None
    assert disagreement("14 of 200 right", "18 of 200 right", Tolerance(atol=5)) is not None  # counts: exact ...
    assert disagreement("14 of 200 right", "18 of 200 right", Tolerance(atol=5, counts=True)) is None  # ... unless


def test_the_cell_declares_over_the_chapter_over_the_default():
    assert declared({}, {}) == DEFAULT
    chapter = {"numerics": {"rtol": 0.05}}
    assert declared(chapter, {}) == Tolerance(rtol=0.05, atol=DEFAULT.atol)
    assert declared(chapter, {"numerics": {"atol": 0.1, "rtol": 0}}) == Tolerance(rtol=0, atol=0.1)
    assert declared(chapter, {"numerics": {"host_dependent": "sampled"}}).host_dependent == "sampled"
    with pytest.raises(ValueError, match="unknown numerics metadata.*rtol, atol, counts or host_dependent"):
        declared({}, {"numerics": {"tolerance": 0.1}})
    with pytest.raises(ValueError, match="not negative"):
        Tolerance(rtol=-1)


numbers = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False).filter(lambda x: abs(x) >= 1)


@given(st.lists(numbers, min_size=1, max_size=6), st.sampled_from(["{:.4f}", "{:.2e}", "{:.1f}%"]))
def test_every_output_agrees_with_itself_and_with_a_small_move_but_not_a_large_one(values, fmt):
    text = lambda xs: " | ".join(f"loss {fmt.format(x)}" for x in xs)  # noqa: E731
    stored = text(values)
    assert disagreement(stored, stored, Tolerance()) is None
    assert disagreement(stored, text([x * (1 + DEFAULT.rtol / 4) for x in values]), DEFAULT) is None
    moved = [x * (1 + 4 * DEFAULT.rtol) + 4 * DEFAULT.atol for x in values]
    assert disagreement(stored, text(moved), DEFAULT) is not None
