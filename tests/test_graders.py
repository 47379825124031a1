"""The two graders of the instructor guide, end to end, with the guide's own commands, on one chapter:

- Otter-Grader: `assignments build --format otter`, `otter assign`, then `otter run` with the
  autograder zip on the solution notebook (full marks), the untouched student notebook (zero, no
  crash) and a notebook with one classic mistake (every other question's points, and the check's
  own hint in the results);
- nbgrader: `assignments build --format nbgrader`, `nbgrader generate_assignment`, `nbgrader
  autograde` of the same three submissions, `nbgrader export` (scores in grades.csv).

Chapter 3 is the graded chapter: it runs in about 10 s, and its causal_softmax exercise has a classic
mistake that its check names (the future filled with 0 instead of -inf). Each grader runs the
chapter once per submission, so each test costs three chapter runs (about 30 s of CPU for Otter and
25 s for nbgrader, measured on the course's 2-core machine): both are marked slow.
"""
from __future__ import annotations

import copy
import csv
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
import yaml

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
    assert done.returncode == 0, f"{' '.join(map(str, command))} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


def tool(name: str) -> str:
    path = shutil.which(name, path=os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]))
    if path is None:
        pytest.fail(f"the `{name}` command is missing: pip install -r requirements.txt")
    return path


def build(fmt: str, out: Path) -> Path:
    """`python -m course_lib.tools assignments build --format FMT --chapter 3 --out OUT`."""
    run(sys.executable, "-m", "course_lib.tools", "assignments", "build", "--format", fmt,
        "--chapter", str(CHAPTER), "--out", str(out), cwd=ROOT)
    return out / f"ch{CHAPTER:02d}" / NOTEBOOK


def make_mistake(source: str) -> str:
    assert source.count(MISTAKE_FIXED) == 1, f"the solution of {MISTAKE_IN} changed: update MISTAKE_*"
    return source.replace(MISTAKE_FIXED, MISTAKE_WRITTEN)


def mistake_message(source: str) -> list[str]:
    """What the chapter's check says about the mistaken function: the lines the graders must show."""
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


@pytest.mark.slow
def test_otter_round_trip(tmp_path):
    otter = tool("otter")
    master = build("otter", tmp_path / "masters")
    questions = {}  # name -> points, read from the master's "# BEGIN QUESTION" cells
    for cell in nbformat.read(master, as_version=4).cells:
        if cell.cell_type == "raw" and cell.source.startswith("# BEGIN QUESTION"):
            config = yaml.safe_load(cell.source.split("\n", 1)[1])
            questions[config["name"]] = config["points"]
    assert MISTAKE_IN in questions and len(questions) >= 3, questions

    dist = tmp_path / "dist"
    run(otter, "assign", str(master), str(dist), cwd=tmp_path)
    [autograder_zip] = (dist / "autograder").glob("*-autograder_*.zip")
    solution = dist / "autograder" / NOTEBOOK  # Otter's autograder notebook holds the solutions
    student = dist / "student" / NOTEBOOK
    assert sorted(p.stem for p in (dist / "student" / "tests").glob("*.py")) == sorted(questions)

    nb = nbformat.read(solution, as_version=4)
    [cell] = [c for c in nb.cells if c.cell_type == "code" and f"def {MISTAKE_IN}(" in c.source]
    cell.source = make_mistake(cell.source)
    expected_hint = mistake_message(cell.source)
    (tmp_path / "mistake").mkdir()
    nbformat.write(nb, tmp_path / "mistake" / NOTEBOOK)

    def grade(submission: Path, name: str) -> dict:
        """`otter run -a AUTOGRADER_ZIP -o OUT SUBMISSION` -> {question: (score, output)}."""
        out = tmp_path / "results" / name
        out.mkdir(parents=True)
        run(otter, "run", "-a", str(autograder_zip), "-o", str(out), str(submission), cwd=tmp_path)
        tests = json.loads((out / "results.json").read_text())["tests"]
        return {t["name"]: (t["score"], t["output"]) for t in tests if t["name"] in questions}

    full = grade(solution, "solution")
    assert {q: s for q, (s, _) in full.items()} == questions

    untouched = grade(student, "student")
    assert {q: s for q, (s, _) in untouched.items()} == dict.fromkeys(questions, 0)
    for q, (_, output) in untouched.items():
        assert "ExerciseError: Not done yet" in output, f"{q}: {output}"

    mistaken = grade(tmp_path / "mistake" / NOTEBOOK, "mistake")
    assert {q: s for q, (s, _) in mistaken.items()} == {**questions, MISTAKE_IN: 0}
    output = mistaken[MISTAKE_IN][1]
    for line in expected_hint:
        assert line in output, f"{line!r} is missing from Otter's results:\n{output}"


@pytest.mark.slow
def test_nbgrader_round_trip(tmp_path):
    nbgrader = tool("nbgrader")
    course = tmp_path / "course"
    source = build("nbgrader", course / "source")
    assignment = source.parent.name
    (course / "nbgrader_config.py").write_text('c = get_config()\nc.CourseDirectory.course_id = "gpt-course"\n')
    run(nbgrader, "generate_assignment", assignment, cwd=course)
    release = nbformat.read(course / "release" / assignment / NOTEBOOK, as_version=4)
    solved = {c.metadata["nbgrader"]["grade_id"]: c.source for c in nbformat.read(source, as_version=4).cells
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
        scores = {row["student_id"]: (float(row["score"]), float(row["max_score"])) for row in csv.DictReader(f)}
    # one point per check (nbgrader source metadata); the mistake loses exactly its check's point
    mistake_points = sum(1 for c in release.cells if c.metadata.get("nbgrader", {}).get("grade")
                         and f"check_{MISTAKE_IN}(" in c.source)
    assert mistake_points == 1
    assert scores == {"solution": (points, points), "untouched": (0, points),
                      "mistake": (points - mistake_points, points)}

    graded = nbformat.read(course / "autograded" / "mistake" / assignment / NOTEBOOK, as_version=4)
    [check] = [c for c in graded.cells if f"check_{MISTAKE_IN}(" in c.source]
    [error] = [o for o in check.outputs if o.output_type == "error"]
    mistaken_solution = make_mistake(solved[next(k for k, v in solved.items() if f"def {MISTAKE_IN}(" in v)])
    assert error.ename == "ExerciseError"
    for line in mistake_message(mistaken_solution):
        assert line in error.evalue, f"{line!r} is missing from nbgrader's feedback: {error.evalue}"
