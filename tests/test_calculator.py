"""The safe calculator: Python's arithmetic on every expression of its grammar, an error text
(never an exception) for anything else, and every bound enforced."""
import operator

import pytest
from hypothesis import given, settings, strategies as st

from course_lib.chat.calculator import (MAX_DEPTH, MAX_LENGTH, MAX_MAGNITUDE, CalculatorError,
                                        calculate, evaluate,
                                   format_number)

OPS = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv}


class Overflow(Exception):
    pass


def numbers():
    whole = st.integers(0, 10**6).map(lambda n: (str(n), n, 0))
    decimal = st.tuples(st.integers(0, 999), st.integers(0, 999)).map(
        lambda ab: (f"{ab[0]}.{ab[1]}", float(f"{ab[0]}.{ab[1]}"), 0))
    return whole | decimal


def expressions():
    """(text, value, depth) built as trees: the value computed with Python's operators, node by
    node, in the grammar's order (no eval anywhere; None: the calculator must refuse), and the
    nesting of parentheses and signs."""
    def combine(children):
        return st.one_of(
            st.tuples(children, st.sampled_from(sorted(OPS)), children).map(binary),
            children.map(lambda c: (f"({c[0]})", c[1], c[2] + 1)),
            children.map(lambda c: (f"- ({c[0]})", None if c[1] is None else -c[1], c[2] + 2)))
    return st.recursive(numbers(), combine, max_leaves=8)


def binary(args):
    (a, va, da), op, (b, vb, db) = args
    text, depth = f"({a}) {op} ({b})", max(da, db) + 1
    if va is None or vb is None or (op == "/" and vb == 0):
        return text, None, depth
    value = OPS[op](va, vb)
    return text, None if abs(value) > MAX_MAGNITUDE else value, depth


@settings(max_examples=400, deadline=None)
@given(expressions())
def test_it_agrees_with_pythons_arithmetic(expr):
    text, value, depth = expr
    if len(text) > MAX_LENGTH:
        assert calculate(text).startswith("error: too long")
        return
    if depth > MAX_DEPTH:
        assert calculate(text).startswith("error:")  # too deep, or an error met on the way down
        return
    if value is None:
        assert calculate(text).startswith("error:")
        return
    got = evaluate(text)
    assert got == value and type(got) is type(value)
    assert calculate(text) == format_number(value)


@settings(max_examples=500, deadline=None)
@given(st.text(max_size=100))
def test_it_never_raises_on_any_text(text):
    answer = calculate(text)
    assert isinstance(answer, str) and answer


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="0123456789.+-*/() ", max_size=80))
def test_it_never_raises_on_texts_made_of_its_own_characters(text):
    answer = calculate(text)
    assert answer.startswith("error:") or float(answer) == float(answer)


@pytest.mark.parametrize("text, answer", [
    ("12+7", "19"), ("2*(3+4)", "14"), ("7/2", "3.5"), ("6/3", "2"), ("10-2-3", "5"),
    ("2+3*4", "14"), ("-3+5", "2"), ("--3", "3"), (" 1 + 2 ", "3"), ("1/3", "0.3333333333"),
    ("0.1+0.2", "0.3"), ("1.5*2", "3"), ("1/3000000", "0.0000003333333333"),
])
def test_examples(text, answer):
    assert calculate(text) == answer


@pytest.mark.parametrize("text, error", [
    ("1/0", "division by zero"), ("5/(2-2)", "division by zero"), ("1" * 65, "too long"),
    ("2**3", "unexpected '*'"), ("__import__('os')", "bad character '_'"),
    ("abs(1)", "bad character 'a'"), ("1e5", "bad character 'e'"), ("", "incomplete expression"),
    ("1+", "incomplete expression"), ("(1+2", "not closed"), ("1+2)", "unexpected ')'"),
    ("3.", "ends in '.'"), (".5", "unexpected '.'"), ("9999999*9999999", "too large"),
    ("1" * 13, "too large"), ("-" * 20 + "1", "too deep"), ("(" * 20 + "1" + ")" * 20, "too deep"),
    ("1 2", "unexpected '2'"), ("\u0661+1", "bad character"),
])
def test_errors_are_answers_that_say_why(text, error):
    answer = calculate(text)
    assert answer.startswith("error: ") and error in answer
    with pytest.raises(CalculatorError):
        evaluate(text)


def test_not_a_text():
    assert calculate(None) == "error: not a text"
