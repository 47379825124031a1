"""Checks for the exercises of every chapter: ``from course_lib.exercises import ch01``.

Each exercise asks the reader to write a function; its check calls that function on
fresh inputs and compares with the library. A wrong answer raises
:class:`ExerciseError` (an ``AssertionError``) whose message says what is wrong and
gives a hint; a right one prints a short confirmation. A function whose body is still
``raise NotImplementedError()`` (the student notebooks) gets a "not done yet" message.
"""
from __future__ import annotations

import math
from typing import Any, Callable

import torch


class ExerciseError(AssertionError):
    """A check failed: the message is for the student."""


def fail(problem: str, hint: str | None = None):
    raise ExerciseError(problem + (f"\nHint: {hint}" if hint else ""))


def passed(message: str) -> None:
    print(f"Correct! {message}")


def call(fn: Callable, *args, **kwargs) -> Any:
    """Run the student's function, turning the unfinished-exercise and crash cases into
    clear messages."""
    name = getattr(fn, "__name__", "your function")
    try:
        return fn(*args, **kwargs)
    except NotImplementedError:
        fail(f"Not done yet: {name}() still raises NotImplementedError.",
             "replace `raise NotImplementedError()` with your code, run that cell, then run this check again.")
    except ExerciseError:
        raise
    except Exception as e:
        fail(f"{name}() raised {type(e).__name__}: {e}",
             "read the error above; test your function on a small input by hand first.")


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


def as_number(value, what: str, hint: str | None = "return a number (a Python float or a 0-d tensor).") -> float:
    """The student's answer as a float (a 0-d tensor counts), or fail naming what was returned."""
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        value = value.item()
    try:
        return float(value)
    except (TypeError, ValueError):
        fail(f"{what}: expected a number, got {value!r}.", hint)


def expect_tensor(value, shape, what: str, hint: str | None = None, shape_hint: str | None = None) -> None:
    """Fail unless ``value`` is a tensor of ``shape``; ``shape_hint`` (default ``hint``) explains a
    wrong shape."""
    if not isinstance(value, torch.Tensor):
        fail(f"{what}: expected a tensor, got {type(value).__name__}.", hint)
    if value.shape != shape:
        fail(f"{what}: expected shape {tuple(shape)}, got {tuple(value.shape)}.", shape_hint or hint)


def expect_close(actual, expected, what: str, hint: str | None = None, atol: float = 1e-5, rtol: float = 1e-4):
    """Fail unless ``actual`` equals ``expected`` numerically (tensors or numbers)."""
    if isinstance(expected, torch.Tensor):
        expect_tensor(actual, expected.shape, what, hint)
        if not torch.allclose(actual.double(), expected.double(), atol=atol, rtol=rtol):
            worst = (actual.double() - expected.double()).abs().max().item()
            fail(f"{what}: values differ from the expected ones (largest difference {worst:.3g}).", hint)
        return
    a = as_number(actual, what, hint)
    if not math.isclose(a, float(expected), abs_tol=atol, rel_tol=rtol):
        fail(f"{what}: got {a:.6g}, which is not the expected value.", hint)


def expect_equal(actual, expected, what: str, hint: str | None = None):
    if actual != expected:
        fail(f"{what}: got {actual!r}, expected {expected!r}.", hint)
