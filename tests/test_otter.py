"""Otter-Grader end to end, with the instructor guide's commands, on chapter 3:
`python -m course_lib.tools assignments build --format otter`, `otter assign`, then `otter run` with
the autograder zip on the solution notebook (full marks), the untouched student notebook (zero, no
crash, "Not done yet" for every question) and a notebook with one classic mistake (every other
question's points, and the check's own message and hint in the results).

Cost: three runs of chapter 3 plus `otter assign`, about 55 s of CPU time (47 s user + 6 s system,
measured with /usr/bin/time on the course's shared 2-core machine); marked slow.
"""
from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest
import yaml

from grader_helpers import MISTAKE_IN, NOTEBOOK, build, make_mistake, mistake_message, run, tool


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
