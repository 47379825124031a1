"""A pytest plugin for nbval: each chapter's student notebook, checked in the chapter's own kernel.

`make test` and `make notebooks` load it (``python -m pytest ... --nbval -p tests.nbval_students``).
After nbval has run and compared every cell of a chapter, one more test item,
``book/chNN_....ipynb::student exercises``, runs the exercise section of that chapter's student
notebook (built by :func:`course_lib.tools.assignments.make_student_notebook`) in the same,
still running, kernel. Every check cell must then fail with the student-facing "Not done yet"
message, and no other cell may crash.

Why in nbval's kernel: the exercises use what the chapter built before them (a trained model,
a batch, ...), so checking the student version needs the chapter's state; a separate run would
execute every chapter a second time. The other direction (a check says "Correct!" on the
solution) is nbval's own comparison of the check cells' stored outputs (tests/test_assignments.py
makes sure they say "Correct!" and that nbval compares them).
"""
from __future__ import annotations

from pathlib import Path
from queue import Empty

import pytest

from course_lib.tools.assignments import (exercise_section_start, is_check_cell,
                                          make_student_notebook)
from course_lib.tools.chapters import CHAPTER_NAME

NOT_DONE = "Not done yet"
ITEM_NAME = "student exercises"


def student_exercise_cells(nb, name: str) -> list:
    """The student notebook's code cells from the exercise section on. Code cells correspond one
    to one between chapter and student notebook, so the section starts at the same code cell."""
    student = make_student_notebook(nb, name=name)
    start = exercise_section_start(nb)
    before = sum(1 for c in nb.cells[:start] if c.cell_type == "code")
    return [c for c in student.cells if c.cell_type == "code"][before:]


def run_in_kernel(kernel, source: str, timeout: float):
    """Execute ``source`` in nbval's kernel; return its error output (ename, evalue) or None."""
    msg_id = kernel.execute_cell_input(source, allow_stdin=False)
    kernel.await_reply(msg_id, timeout=timeout)
    error = None
    while True:
        msg = kernel.get_message(stream="iopub", timeout=timeout)
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        if msg["msg_type"] == "error":
            error = (msg["content"]["ename"], msg["content"]["evalue"])
        elif msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            return error


def problem_of(cell, error) -> str | None:
    """What is wrong with a student cell's outcome, or None."""
    if is_check_cell(cell):
        if error is None:
            return "the check passed on an unfinished exercise"
        if error[0] != "ExerciseError" or NOT_DONE not in error[1]:
            return f"expected ExerciseError({NOT_DONE!r} ...), got {error[0]}: {error[1]}"
        return None
    if error is None or error[0] == "NotImplementedError" or \
            "raises-exception" in cell.metadata.get("tags", []):
        return None  # using an unfinished exercise outside a check raises, as the exercise does
    return f"{error[0]}: {error[1]} (only check cells may fail)"


class StudentExercises(pytest.Item):
    def runtest(self):
        nbfile = self.parent
        kernel = nbfile.kernel
        if kernel is None or not kernel.is_alive():
            pytest.fail("the chapter's kernel is not running (a cell before failed or timed out)",
                        pytrace=False)
        timeout = self.config.option.nbval_cell_timeout
        cells = student_exercise_cells(nbfile.nb, Path(nbfile.path).name)
        problems, checks = [], 0
        for cell in cells:
            try:
                error = run_in_kernel(kernel, cell.source, timeout)
            except Empty:
                kernel.interrupt()
                pytest.fail(f"a student cell ran past {timeout} s:\n{cell.source}", pytrace=False)
            checks += is_check_cell(cell)
            problem = problem_of(cell, error)
            if problem:
                first_line = next((l for l in cell.source.splitlines() if l.strip()), "")
                problems.append(f"{problem}\n    {first_line}")
        if not checks:
            pytest.fail("the student notebook's exercise section has no check cell", pytrace=False)
        if problems:
            pytest.fail("in the student notebook:\n" + "\n".join(problems), pytrace=False)

    def reportinfo(self):
        return self.path, None, f"{self.path.name}::{ITEM_NAME}"


def pytest_collection_modifyitems(session, config, items):
    """Put a StudentExercises item right after the last nbval cell of every chapter."""
    try:
        from nbval.plugin import IPyNbCell
    except ImportError:
        return
    out = []
    for index, item in enumerate(items):
        out.append(item)
        following = items[index + 1] if index + 1 < len(items) else None
        if isinstance(item,
                      IPyNbCell) and (following is None or following.parent is not item.parent) \
                and CHAPTER_NAME.match(Path(item.parent.path).name):
            out.append(StudentExercises.from_parent(item.parent, name=ITEM_NAME))
    items[:] = out
