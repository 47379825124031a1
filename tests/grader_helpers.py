"""Shared by the graders' round trips (tests/test_otter.py, tests/test_nbgrader.py): the guide's
commands as subprocesses, the graded chapter and its classic mistake.

Chapter 3 is the graded chapter: it runs in about 10 s, and its causal_softmax exercise has a
classic mistake that its check names (the future filled with 0 instead of -inf). Each grader runs
the chapter once per submission (solution, untouched, mistake), so each test costs three chapter
runs; the two tests are in two files so that `make test` runs them on two workers side by side.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from course_lib.exercises import ExerciseError
from course_lib.tools.chapters import ROOT, chapter_notebooks

CHAPTER = 3
# The classic mistake: mask the future with 0 instead of -inf (exp(0) = 1 still weighs the future).
MISTAKE_IN, MISTAKE_FIXED, MISTAKE_WRITTEN = "causal_softmax", 'float("-inf")', "0.0"
NOTEBOOK = chapter_notebooks(ROOT / "book")[CHAPTER].name
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}


def run(*command, cwd):
    """One command of the guide; its output is in the failure message."""
    done = subprocess.run(command, cwd=cwd, env=ENV, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, (f"{' '.join(map(str, command))} "
                                  f"failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return done


def tool(name: str) -> str:
    path = shutil.which(name, path=os.pathsep.join([str(Path(sys.executable).parent),
                                                    os.environ["PATH"]]))
    if path is None:
        pytest.fail(f"the `{name}` command is missing: pip install -r requirements.txt")
    return path


def build(fmt: str, out: Path) -> Path:
    """`python -m course_lib.tools assignments build --format FMT --chapter 3 --out OUT`."""
    run(sys.executable, "-m", "course_lib.tools", "assignments", "build", "--format", fmt,
        "--chapter", str(CHAPTER), "--out", str(out), cwd=ROOT)
    return out / f"ch{CHAPTER:02d}" / NOTEBOOK


def make_mistake(source: str) -> str:
    assert source.count(MISTAKE_FIXED) == 1, (f"the solution of {MISTAKE_IN} changed: update "
                                              "MISTAKE_*")
    return source.replace(MISTAKE_FIXED, MISTAKE_WRITTEN)


def mistake_message(source: str) -> list[str]:
    """What the chapter's check says about the mistaken function: the lines the graders must
    show."""
    import torch
    import torch.nn.functional as F

    from course_lib.exercises import ch03

    namespace = {"torch": torch, "F": F}
    exec(source, namespace)
    with pytest.raises(ExerciseError) as error:
        ch03.check_causal_softmax(namespace[MISTAKE_IN])
    lines = [line.strip() for line in str(error.value).splitlines() if line.strip()]
    assert any(line.startswith("Hint:") for line in lines), lines
    return lines
