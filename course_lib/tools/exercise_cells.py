"""What the cells of a chapter's exercise section are, and what an executed check cell says.

An exercise is three cells: an ``{exercise}`` box (Markdown), a solution cell (code whose answer
sits between nbgrader's ``### BEGIN SOLUTION`` and ``### END SOLUTION``) and a check cell that
calls ``chNN.check_...(...)`` from :mod:`course_lib.exercises`. The assignment builders
(:mod:`course_lib.tools.assignments`) and the course's tests (the student-notebook plugin
``tests/nbval_students.py``, ``tests/test_colab.py``) recognise them with the functions here.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

BEGIN_SOLUTION = "### BEGIN SOLUTION"
END_SOLUTION = "### END SOLUTION"
EXERCISE_BOX = re.compile(r"^\s*(:{3,}|`{3,})\{exercise\}", re.M)
CHECK_CALL = re.compile(r"(?<![\w.])(?:ch\d+\.)?check_\w+\s*\(")


def marker(line: str, text: str) -> bool:
    """Whether ``line`` is the marker ``text`` (any indentation)."""
    return line.strip().startswith(text)


def has_solution(cell) -> bool:
    return (cell.get("cell_type") == "code"
            and any(marker(l, BEGIN_SOLUTION) for l in cell.source.split("\n")))


def is_check_cell(cell) -> bool:
    """A code cell that calls an exercise check (``ch03.check_x(...)`` or ``check_x(...)``)."""
    if cell.get("cell_type") != "code" or has_solution(cell):
        return False
    calls = re.sub(r"^\s*(async\s+)?def\s.*$", "", cell.source, flags=re.M)  # not a definition
    return CHECK_CALL.search(calls) is not None


def checked_names(cell) -> list[str]:
    """The check functions a check cell calls, e.g. ``["check_encode"]``."""
    return [m.group(0).split(".")[-1].rstrip("( ") for m in CHECK_CALL.finditer(cell.source)] \
        if is_check_cell(cell) else []


def exercise_section_start(nb) -> int:
    """Index of the first cell of a chapter's exercise section: its first ``{exercise}`` box,
    solution or check cell (``len(nb.cells)`` when it has none)."""
    for index, cell in enumerate(nb.cells):
        if has_solution(cell) or is_check_cell(cell) or (
                cell.cell_type == "markdown" and EXERCISE_BOX.search(cell.source)):
            return index
    return len(nb.cells)



# --- reading an executed notebook ---------------------------------------------------------------
# Grading submissions is Otter's or nbgrader's job (see the instructor guide); the course's own
# tests use this to read the check cells of a chapter or student notebook they executed.


@dataclass
class CheckResult:
    cell: int  # index of the check cell in the notebook
    checks: list  # names of the check functions it calls
    # "correct", "not done", "wrong", "error" (the cell crashed outside a check) or "not run"
    status: str
    message: str  # the check's message, or the error


def check_results(nb) -> list[CheckResult]:
    """Classify every check cell of an executed notebook from its outputs."""
    results = []
    for index, cell in enumerate(nb.cells):
        if not is_check_cell(cell):
            continue
        names = checked_names(cell)
        errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
        text = "".join(o.get("text", "") for o in cell.get("outputs", [])
                       if o.get("output_type") == "stream")
        if errors:
            e = errors[0]
            message = f"{e.get('ename')}: {e.get('evalue')}"
            if e.get("ename") == "ExerciseError":
                status = "not done" if "Not done yet" in e.get("evalue", "") else "wrong"
                message = e.get("evalue", "")
            else:
                status = "error"
        elif cell.get("execution_count") is None and not cell.get("outputs"):
            status, message = "not run", ""
        elif "Correct!" in text:
            status, message = "correct", next(l for l in text.splitlines()
                                              if "Correct!" in l).strip()
        else:
            status, message = "wrong", "the check printed no `Correct!`"
        results.append(CheckResult(index, names, status, message))
    return results
