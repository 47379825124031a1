"""Shared helpers for the tests of the exercise checks (tests/test_exercises_chNN.py): each check
must say "Correct!" for a right answer, fail with a hint for a wrong one, and say "Not done yet"
for a function a student has not written (one that raises NotImplementedError)."""
import pytest
import torch

from course_lib.exercises import ExerciseError


def not_done(*args, **kwargs):
    """What a student's unwritten exercise function does."""
    raise NotImplementedError()


def assert_not_done(check, *args, **kwargs) -> None:
    """``check(*args)`` must fail with the student-facing "Not done yet"."""
    with pytest.raises(ExerciseError, match="Not done yet"):
        check(*args, **kwargs)


def assert_correct(capsys) -> str:
    """The check that just ran printed "Correct!"; returns everything it printed."""
    out = capsys.readouterr().out
    assert "Correct!" in out, out
    return out


def assert_leaves_rng_alone(check, *args) -> None:
    """``check(*args)`` must not move torch's global random state: a check run in a chapter
    would otherwise change every random number the chapter draws after it."""
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    check(*args)
    assert torch.equal(torch.rand(3),
                       expected), f"{check.__name__} changed torch's global random state"
