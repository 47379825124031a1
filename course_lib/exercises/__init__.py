"""Checks for the exercises of every chapter: ``from course_lib.exercises import ch01``.

Each exercise asks the reader to write a function; its check calls that function on
fresh inputs and compares with the library. A wrong answer raises
:class:`ExerciseError` (an ``AssertionError``) whose message says what is wrong and
gives a hint; a right one prints a short confirmation. A function whose body is still
``raise NotImplementedError()`` (the student notebooks) gets a "not done yet" message.
"""
from __future__ import annotations

import math
import numbers
from typing import Any, Callable

import torch


_RETURN_HINT = ("did you forget the `return` statement? A function that ends without one returns "
                "None.")
_NAN_HINT = ("NaN comes from 0/0, inf - inf or log of a negative number; print the intermediate "
             "values of your function on a small input to see where it first appears.")


class ExerciseError(AssertionError):
    """A check failed: the message is for the student."""


def fail(problem: str, hint: str | None = None):
    raise ExerciseError(problem + (f"\nHint: {hint}" if hint else ""))


def passed(message: str) -> None:
    print(f"Correct! {message}")


def call(fn: Callable, *args, none_ok: bool = False, **kwargs) -> Any:
    """Run the student's function, turning the unfinished-exercise and crash cases into
    clear messages; a None result (a forgotten ``return``) fails too, unless ``none_ok``."""
    name = getattr(fn, "__name__", "your function")
    expect_callable(fn)
    try:
        result = fn(*args, **kwargs)
    except NotImplementedError:
        fail(f"Not done yet: {name}() still raises NotImplementedError.",
             "replace `raise NotImplementedError()` with your code, run that cell, then run this "
             "check again.")
    except ExerciseError:
        raise
    except Exception as e:
        fail(f"{name}() raised {type(e).__name__}: {e}",
             "read the error above; test your function on a small input by hand first.")
    if result is None and not none_ok:
        fail(f"{name}() returned None.", _RETURN_HINT)
    return result


def expect_callable(fn) -> None:
    """Fail unless the check was given a function (not, say, the result of calling it)."""
    if not callable(fn):
        fail(f"expected your function, got {describe(fn)}.",
             "pass the function itself, without calling it: check(my_function), not "
             "check(my_function()).")


def call_with_hints(fn: Callable, hint_if: dict[str, str], *args, context: str = "") -> Any:
    """Like :func:`call`, but when the function crashes with a message containing a key of
    ``hint_if``, give that key's more specific hint (with ``context`` before the message)."""
    try:
        return call(fn, *args)
    except ExerciseError as e:
        message = str(e)
        for needle, hint in hint_if.items():
            if needle.lower() in message.lower():
                fail(context + message.split("\nHint:")[0], hint)
        raise


# --- reading the student's answer: one clear message for a wrong type, shape, dtype or NaN --------


def describe(value) -> str:
    """A short description of any answer, for messages: 'None', "the str 'abc'", 'a float64 tensor
    of shape (2, 3)'."""
    if value is None:
        return "None"
    if isinstance(value, torch.Tensor):
        return f"a {str(value.dtype).replace('torch.', '')} tensor of shape {tuple(value.shape)}"
    text = repr(value)
    return f"the {type(value).__name__} {text if len(text) <= 60 else text[:57] + '...'}"


def expect_returned(value, what: str) -> None:
    """Fail when the student's function returned None (almost always a forgotten ``return``)."""
    if value is None:
        fail(f"{what}: your function returned None.", _RETURN_HINT)


def expect_sequence(value, length: int, what: str, hint: str | None = None):
    """The answer as a tuple of ``length`` items (a tuple or a list), or fail naming what came
    back."""
    expect_returned(value, what)
    if not isinstance(value, (tuple, list)) or len(value) != length:
        got = describe(value) if not isinstance(value, (tuple, list)) else \
            f"a {type(value).__name__} of {len(value)} items"
        fail(f"{what}: expected {length} values (a tuple), got {got}.", hint)
    return tuple(value)


def as_number(value, what: str,
              hint: str | None = "return a number (a Python float or a 0-d tensor).") -> float:
    """The student's answer as a float (a one-element tensor counts), or fail naming what was
    returned; NaN fails too."""
    expect_returned(value, what)
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            fail(f"{what}: expected a single number, got {describe(value)}.",
                 hint or "reduce to one number, e.g. with .mean() or .sum().")
        value = value.item()
    if isinstance(value, (str, bytes)):
        fail(f"{what}: expected a number, got {describe(value)}.", hint)
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        fail(f"{what}: expected a number, got {describe(value)}.", hint)
    if math.isnan(number):
        fail(f"{what}: got NaN (not a number).", _NAN_HINT)
    return number


def as_integer(value, what: str, hint: str | None = "return the count as a Python int.") -> int:
    """The student's answer as an exact int: an int, a one-element integer tensor, or a float with
    no fractional part; anything else (1.5, NaN, True, a string) fails."""
    expect_returned(value, what)
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        value = value.item()
    if isinstance(value, bool):
        fail(f"{what}: expected an int, got {describe(value)}.", hint)
    if isinstance(value, numbers.Integral):
        return int(value)
    if not isinstance(value, numbers.Real):
        fail(f"{what}: expected an int, got {describe(value)}.", hint)
    number = float(value)
    if math.isnan(number):
        fail(f"{what}: got NaN (not a number).", _NAN_HINT)
    if math.isinf(number):
        fail(f"{what}: got {number}, not a count.",
             "infinity comes from a division by zero or a number too large for its dtype (float16 "
             "stops at 65,504): compute the count with Python ints.")
    if not number.is_integer():
        fail(f"{what}: got {number!r}, which is not a whole number.",
             "a count is an integer: divide with // (not /) and do not add fractions.")
    return int(number)


def as_bool(value, what: str,
            hint: str | None = "return one True or False for the whole question.") -> bool:
    """The student's yes/no answer: a bool, a NumPy bool or a one-element bool tensor. None (a
    forgotten ``return``) is not read as False."""
    expect_returned(value, what)
    if isinstance(value, torch.Tensor) and value.numel() == 1 and value.dtype == torch.bool:
        return bool(value)
    if isinstance(value, bool) or type(value).__name__ == "bool_":  # NumPy's bool
        return bool(value)
    fail(f"{what}: expected True or False, got {describe(value)}.", hint)


def expect_tensor(value, shape, what: str, hint: str | None = None, shape_hint: str | None = None,
                  dtype=None, dtype_hint: str | None = None, allow_nan: bool = False) -> None:
    """Fail unless ``value`` is a tensor of ``shape`` (``shape_hint``, default ``hint``, explains a
    wrong shape), of ``dtype`` when given (a torch.dtype, a tuple of them, or "float" for any
    floating dtype; ``dtype_hint`` explains it), and without NaN unless ``allow_nan``."""
    expect_returned(value, what)
    if not isinstance(value, torch.Tensor):
        fail(f"{what}: expected a tensor, got {describe(value)}.", hint)
    if value.shape != shape:
        fail(f"{what}: expected shape {tuple(shape)}, got {tuple(value.shape)}.",
             shape_hint or hint)
    if dtype is not None:
        ok = value.is_floating_point() if dtype == "float" else value.dtype in (
            dtype if isinstance(dtype, tuple) else (dtype,))
        if not ok:
            wanted = "a floating-point dtype" if dtype == "float" else " or ".join(
                str(d) for d in (dtype if isinstance(dtype, tuple) else (dtype,)))
            fail(f"{what}: expected {wanted}, got dtype {value.dtype}.", dtype_hint or hint)
    if (not allow_nan and (value.is_floating_point() or value.is_complex())
        and torch.isnan(value).any()):
        fail(f"{what}: the tensor contains NaN.", _NAN_HINT)


def expect_close(actual, expected, what: str, hint: str | None = None, atol: float = 1e-5,
                 rtol: float = 1e-4):
    """Fail unless ``actual`` equals ``expected`` numerically (tensors or numbers)."""
    if isinstance(expected, torch.Tensor):
        expect_tensor(actual, expected.shape, what, hint)
        if not torch.allclose(actual.double(), expected.double(), atol=atol, rtol=rtol):
            worst = (actual.double() - expected.double()).abs().max().item()
            fail(f"{what}: values differ from the expected ones (largest difference {worst:.3g}).",
                 hint)
        return
    a = as_number(actual, what, hint)
    if not math.isclose(a, float(expected), abs_tol=atol, rel_tol=rtol):
        fail(f"{what}: got {a:.6g}, which is not the expected value.", hint)


def expect_equal(actual, expected, what: str, hint: str | None = None):
    if actual != expected:
        fail(f"{what}: got {actual!r}, expected {expected!r}.", hint)
