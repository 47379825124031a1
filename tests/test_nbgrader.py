"""nbgrader end to end, with the instructor guide's commands, on chapter 3:
`python -m course_lib.tools assignments build --format nbgrader --out course/source`, then in the
course folder `nbgrader generate_assignment`, `nbgrader autograde` of three submissions (every
answer written, untouched, one classic mistake) and `nbgrader export`: full marks, zero, and every
point but the mistaken check's, whose feedback is the check's own message and hint.

Cost: three runs of chapter 3 plus nbgrader's commands, about 34 s of CPU time (32 s user + 2 s
system, measured with /usr/bin/time on the course's shared 2-core machine); marked slow.
"""
from __future__ import annotations

import copy
import csv

import nbformat
import pytest

from grader_helpers import MISTAKE_IN, NOTEBOOK, build, make_mistake, mistake_message, run, tool


@pytest.mark.slow
def test_nbgrader_round_trip(tmp_path):
    nbgrader = tool("nbgrader")
    course = tmp_path / "course"
    source = build("nbgrader", course / "source")
    assignment = source.parent.name
    (course / "nbgrader_config.py").write_text('c = get_config()\nc.CourseDirectory.course_id = '
                                               '"gpt-course"\n')
    run(nbgrader, "generate_assignment", assignment, cwd=course)
    release = nbformat.read(course / "release" / assignment / NOTEBOOK, as_version=4)
    solved = {c.metadata["nbgrader"]["grade_id"]: c.source
              for c in nbformat.read(source, as_version=4).cells
              if c.metadata.get("nbgrader", {}).get("solution")}
    points = sum(c.metadata["nbgrader"].get("points", 0) for c in release.cells
                 if c.metadata.get("nbgrader", {}).get("grade"))

    def submit(student: str, mistake: bool | None) -> None:
        """The released notebook as a student hands it in: untouched (None), or every answer cell
        written as the solution, with the classic mistake if ``mistake``."""
        nb = copy.deepcopy(release)
        for cell in nb.cells:
            meta = cell.metadata.get("nbgrader", {})
            if meta.get("solution") and mistake is not None:
                cell.source = solved[meta["grade_id"]]
                if mistake and f"def {MISTAKE_IN}(" in cell.source:
                    cell.source = make_mistake(cell.source)
        folder = course / "submitted" / student / assignment
        folder.mkdir(parents=True)
        nbformat.write(nb, folder / NOTEBOOK)

    submit("solution", False)
    submit("untouched", None)
    submit("mistake", True)
    run(nbgrader, "autograde", assignment, cwd=course)
    run(nbgrader, "export", cwd=course)
    with open(course / "grades.csv", newline="") as f:
        scores = {row["student_id"]: (float(row["score"]), float(row["max_score"]))
                  for row in csv.DictReader(f)}
    # one point per check (nbgrader source metadata); the mistake loses exactly its check's point
    mistake_points = sum(1 for c in release.cells if c.metadata.get("nbgrader", {}).get("grade")
                         and f"check_{MISTAKE_IN}(" in c.source)
    assert mistake_points == 1
    assert scores == {"solution": (points, points), "untouched": (0, points),
                      "mistake": (points - mistake_points, points)}

    graded = nbformat.read(course / "autograded" / "mistake" / assignment / NOTEBOOK, as_version=4)
    [check] = [c for c in graded.cells if f"check_{MISTAKE_IN}(" in c.source]
    [error] = [o for o in check.outputs if o.output_type == "error"]
    mistaken_solution = make_mistake(solved[next(k for k,
                                                 v in solved.items() if f"def {MISTAKE_IN}(" in v)])
    assert error.ename == "ExerciseError"
    for line in mistake_message(mistaken_solution):
        assert line in error.evalue, f"{line!r} is missing from nbgrader's feedback: {error.evalue}"
