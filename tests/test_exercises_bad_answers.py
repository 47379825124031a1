"""Every check of every chapter answers a malformed answer with an ExerciseError and a hint, never a
traceback: a function that forgets `return` (None), returns a string, a wrong-shaped tensor,
a tensor of the wrong dtype or NaN, and an argument that is not a function at all.

The checks are found automatically (every public ``check_*`` of course_lib.exercises.chNN), so a
new check is covered the day it is written. A check's required parameters are the student's
answers (all of them are functions); each is replaced in turn by a bad one while the others get
a correct answer from the chapter's own test module.
"""
import importlib
import inspect
import pkgutil

import pytest
import torch

import course_lib.exercises as exercises
from course_lib.exercises import ExerciseError


def _checks():
    found = []
    for info in sorted(pkgutil.iter_modules(exercises.__path__), key=lambda m: m.name):
        if not info.name.startswith("ch"):
            continue
        module = importlib.import_module(f"course_lib.exercises.{info.name}")
        for name, fn in inspect.getmembers(module, inspect.isfunction):
            if name.startswith("check_") and fn.__module__ == module.__name__:
                found.append(pytest.param(fn, id=f"{info.name}.{name}"))
    return found


def _correct_partners():
    """Right answers for the checks that take several functions, so that the bad one is reached."""
    from test_exercises_ch01 import decode, encode
    from test_exercises_ch04 import merge_right, split_right
    return {"check_encode_decode": {"encode": encode, "decode": decode},
            "check_split_heads": {"split_heads": split_right, "merge_heads": merge_right}}


def _nan_like_input(*args, **kwargs):
    """NaN in the shape of the first tensor the check passed in: for the many exercises whose answer
    has its input's shape, a right-shaped NaN answer."""
    first = next((a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)), None)
    return torch.tensor(float("nan")) if first is None else torch.full(first.shape, float("nan"))


def _input_in_another_dtype(*args, **kwargs):
    """The first tensor the check passed in, as float64 (float32 when it already was): right shape
    for many exercises, wrong dtype."""
    first = next((a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)),
                 torch.zeros(()))
    return first.to(torch.float32 if first.dtype == torch.float64 else torch.float64)


BAD_FUNCTIONS = {
    "returns None (forgot return)": lambda *a, **k: None,
    "returns a string": lambda *a, **k: "not an answer",
    "returns a wrong-shaped tensor": lambda *a, **k: torch.zeros(2, 3, 5, 7),
    "returns a float NaN": lambda *a, **k: float("nan"),
    "returns NaN shaped like its input": _nan_like_input,
    "returns its input in another dtype": _input_in_another_dtype,
}
BAD_VALUES = {"None instead of a function": None, "a string instead of a function": "def f(x): ...",
              "a tensor instead of a function": torch.zeros(2, 3),
              "NaN instead of a function": float("nan")}

# Checks whose exercise legitimately returns nothing (it works in place): a None answer is not a
# mistake there, so its message need not mention None.
RETURNS_NOTHING = {"check_training_loop"}


@pytest.mark.parametrize("check", _checks())
def test_every_check_turns_malformed_answers_into_exercise_errors(check):
    required = [p.name for p in inspect.signature(check).parameters.values()
                if p.default is inspect.Parameter.empty]
    partners = _correct_partners().get(check.__name__, {})
    assert len(required) == 1 or set(required) <= set(partners), \
        f"{check.__name__} takes {required}: add correct answers for them to _correct_partners"
    bad_answers = {**BAD_FUNCTIONS, **BAD_VALUES}
    problems = []  # all of them at once: one run shows everything a check still gets wrong
    for student_arg in required:
        for label, bad in bad_answers.items():
            kwargs = {name: partners.get(name) for name in required}
            kwargs[student_arg] = bad
            where = f"{check.__name__} with {student_arg} = {label}"
            try:
                with torch.random.fork_rng(devices=[]):
                    check(**kwargs)
            except ExerciseError as e:
                message = str(e)
                if "\nHint: " not in message:
                    problems.append(f"{where}: no hint in {message!r}")
                elif label.startswith("returns None") and check.__name__ not in RETURNS_NOTHING \
                        and "returned None" not in message:
                    problems.append(f"{where}: the message does not say so: {message!r}")
            except Exception as e:  # noqa: BLE001 - the point: any other exception is a traceback
                problems.append(f"{where}: raised {type(e).__name__}: {e}")
            else:
                problems.append(f"{where}: accepted")
    assert not problems, "\n".join(problems)


def test_the_discovery_finds_every_chapters_checks():
    # So that the test above cannot pass by finding nothing: 13 chapters, 45 checks when written
    # (issue 22 counted them); more is fine.
    chapters = {param.id.split(".")[0] for param in _checks()}
    assert chapters >= {f"ch{n:02d}" for n in range(1, 15)} and len(_checks()) >= 45
