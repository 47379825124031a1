"""Student notebooks, both directions, for every chapter in _toc.yml:

- the chapter (solution) notebook passes its exercise checks ("Correct!");
- the student notebook built by `python -m course_lib.tools assignments build` runs up to each
  exercise, and each check cell then fails with the student-facing "Not done yet" message: never a
  crash of the notebook machinery (NameError, SyntaxError, a stray NotImplementedError, ...).

How. nbval runs every chapter and compares the stored outputs of its check cells ("Correct!");
then, in the same kernel, tests/nbval_students.py runs the student notebook's exercise section
(checks must say "Not done yet"). The student notebook's cells before the exercises are the
chapter's own, unchanged (test_student_notebook_structure), so no chapter runs twice.
COURSE_STUDENT_FULL=1 also runs every chapter's CLI-built student notebook end to end (by default,
only the first chapter's).
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import nbformat
import pytest
import yaml

from course_lib.tools.chapters import ROOT, chapter_number, execute_notebook, toc_chapters
from course_lib.tools import assignments
from course_lib.tools.assignments import has_solution, is_check_cell

CHAPTERS = toc_chapters()
FULL = os.environ.get("COURSE_STUDENT_FULL", "") not in ("", "0")
TIMEOUT = 600
NOT_DONE = "Not done yet"


def source_path(chapter: str) -> Path:
    path = ROOT / f"{chapter}.ipynb"
    if not path.exists():
        pytest.fail(f"{chapter}.ipynb is listed in _toc.yml but does not exist")
    return path


# --- unit tests of the transformation ------------------------------------------------------------

FUNCTION = '''\
def average_past(x):
    """x: (B, T, C) -> (B, T, C)"""
    B, T, C = x.shape
    ### BEGIN SOLUTION
    w = torch.tril(torch.ones(T, T))
    return (w / w.sum(1, keepdim=True)) @ x
    ### END SOLUTION'''


def test_strip_keeps_signature_docstring_and_indentation():
    student, n = assignments.strip_solution_code(FUNCTION)
    assert n == 1
    assert student == ('def average_past(x):\n    """x: (B, T, C) -> (B, T, C)"""\n    B, T, C = '
                       'x.shape\n'
                       "    # YOUR CODE HERE\n    raise NotImplementedError()")
    namespace = {}
    exec(student, namespace)
    with pytest.raises(NotImplementedError):
        namespace["average_past"](SimpleNamespace(shape=(2, 3, 4)))


def test_strip_handles_several_regions_nesting_and_hidden_tests():
    source = ("class A:\n    def f(self):\n        ### BEGIN SOLUTION\n        return 1\n        "
              "### END SOLUTION\n\n    def g(self):\n        ### BEGIN SOLUTION\n        return "
              "2\n        ### END SOLUTION\n### BEGIN HIDDEN TESTS\nassert A().f() == 1\n### END "
              "HIDDEN TESTS\nprint('ok')")
    student, n = assignments.strip_solution_code(source)
    assert (n == 2 and "return" not in student and "assert" not in student
            and student.endswith("print('ok')"))
    compile(student, "cell", "exec")


@pytest.mark.parametrize("source, message", [
    ("def f():\n    ### BEGIN SOLUTION\n    return 1\n", "never closed"),
    ("def f():\n    return 1\n    ### END SOLUTION\n", "without its BEGIN marker"),
    ("### BEGIN SOLUTION\n### BEGIN SOLUTION\n### END SOLUTION\n", "inside an open region"),
])
def test_unbalanced_markers_are_reported(source, message):
    with pytest.raises(assignments.AssignmentError, match=message):
        assignments.strip_solution_code(source)


def test_markdown_solutions_removed_and_exercise_boxes_readable():
    text = (":::{exercise} Average the past\n:label: ch03-ex-avg\n:class: full\nWrite "
            "`average_past(x)`.\n:::\n\nBefore.\n\n::::{solution} ch03-ex-avg\n:class: "
            "dropdown\n```python\nx\n```\n::::\nAfter.")
    student = assignments.exercise_boxes_to_markdown(assignments.strip_solution_markdown(text))
    assert student == ("**Exercise: Average the past**\n\nWrite "
                       "`average_past(x)`.\n\nBefore.\n\nAfter.")
    assert assignments.strip_solution_markdown("A\n### BEGIN SOLUTION\nsecret\n### END "
                                               "SOLUTION\nB") == \
        "A\nYOUR ANSWER HERE\nB"


def test_check_cells_are_recognised():
    cell = nbformat.v4.new_code_cell
    assert is_check_cell(cell("from course_lib.exercises import "
                              "ch03\nch03.check_average_past(average_past)"))
    assert is_check_cell(cell("check_encode(encode)"))
    assert not is_check_cell(cell("def check_shape(x):\n    return x.shape"))
    assert not is_check_cell(cell(FUNCTION))
    assert assignments.checked_names(cell("ch03.check_a(a)\nch03.check_b(b)")) == ["check_a",
                                                                                   "check_b"]


def test_student_notebook_of_a_made_up_chapter(tmp_path):
    """Everything the builder does, on a small chapter: solutions out, skeleton visible, outputs
    cleared."""
    v4 = nbformat.v4
    nb = v4.new_notebook(cells=[
        v4.new_markdown_cell("# 3. Title"),
        v4.new_code_cell("print(1)", execution_count=1,
                         outputs=[v4.new_output("stream", text="1\n")]),
        v4.new_markdown_cell(":::{exercise} Average\n:label: ch03-ex-avg\nWrite it.\n:::"),
        v4.new_code_cell(FUNCTION, metadata={"tags": ["hide-input"]}),
        v4.new_code_cell("ch03.check_average_past(average_past)", execution_count=3,
                         outputs=[v4.new_output("stream", text="Correct! ...\n")]),
        v4.new_markdown_cell(":::{solution} ch03-ex-avg\n:class: dropdown\nThe answer.\n:::",
                             metadata={"tags": ["solution"]}),
    ])
    book = tmp_path / "book"
    book.mkdir()
    nbformat.write(nb, book / "ch03_example.ipynb")
    [path] = assignments.build(tmp_path / "out", chapter=3, book_dir=book)
    student = nbformat.read(path, as_version=4)
    text = "\n".join(c.source for c in student.cells)
    assert "BEGIN SOLUTION" not in text and "tril" not in text and "The answer" not in text
    assert "raise NotImplementedError()" in text and "**Exercise: Average**" in text
    assert all(not c.get("outputs") and c.get("execution_count") is None for c in student.cells
               if c.cell_type == "code")
    assert all("hide-input" not in c.metadata.get("tags", []) for c in student.cells)
    assert nbformat.read(book / "ch03_example.ipynb",
                         as_version=4) == nb, "the chapter notebook must not change"
    with pytest.raises(assignments.AssignmentError,
                       match=r"no notebook for chapter 7 .*chapters found: 3"):
        assignments.build(tmp_path / "out", chapter=7, book_dir=book)
    with pytest.raises(assignments.AssignmentError, match="overwrite the solutions"):
        assignments.build(book, book_dir=book)


def test_nbgrader_source_notebook(tmp_path):
    """--format nbgrader: solutions kept for nbgrader to strip, cells carry nbgrader's metadata."""
    v4 = nbformat.v4
    nb = v4.new_notebook(cells=[
        v4.new_markdown_cell("# 3. Title"),
        v4.new_code_cell(FUNCTION, metadata={"tags": ["hide-input"]}),
        v4.new_code_cell("ch03.check_average_past(average_past)\nch03.check_other(average_past)"),
        v4.new_code_cell(FUNCTION),
        v4.new_code_cell("ch03.check_average_past(average_past)"),
        v4.new_markdown_cell(":::{solution} x\nsecret\n:::", metadata={"tags": ["solution"]}),
    ])
    book = tmp_path / "book"
    book.mkdir()
    nbformat.write(nb, book / "ch03_example.ipynb")
    [path] = assignments.build(tmp_path / "source", book_dir=book, fmt="nbgrader")
    assert path == tmp_path / "source" / "ch03" / "ch03_example.ipynb"
    out = nbformat.read(path, as_version=4)
    meta = [c.metadata.get("nbgrader") for c in out.cells]
    assert meta[1] == {"grade": False, "grade_id": "ch03-average_past", "locked": False,
                       "schema_version": 3, "solution": True, "task": False}
    assert (meta[2]["grade"] and meta[2]["locked"] and meta[2]["points"] == 2
            and not meta[2]["solution"])
    ids = [m["grade_id"] for m in meta if m]
    assert len(ids) == len(set(ids)) == 4, ids
    assert "### BEGIN SOLUTION" in out.cells[1].source and "secret" not in str(out)
    assert "Student version" not in str(out)


def _tiny_book(tmp_path, check="ch03.check_average_past(average_past)\nprint(average_past(x))"):
    v4 = nbformat.v4
    nb = v4.new_notebook(cells=[
        v4.new_markdown_cell("# 3. Title"),
        v4.new_code_cell("x = torch.ones(1, 2, 3)", execution_count=1),
        v4.new_markdown_cell(":::{exercise} Average\n:label: ch03-ex-avg\nWrite it.\n:::"),
        v4.new_code_cell(FUNCTION, metadata={"tags": ["hide-input"]}),
        v4.new_code_cell(check),
        v4.new_markdown_cell(":::{solution} ch03-ex-avg\nThe answer.\n:::",
                             metadata={"tags": ["solution"]}),
        v4.new_markdown_cell("## Summary"),
    ])
    book = tmp_path / "book"
    book.mkdir()
    nbformat.write(nb, book / "ch03_example.ipynb")
    return book


def test_otter_master_notebook(tmp_path):
    """--format otter: Otter Assign's format, tests that call the chapter's check, and a solution
    cell that Otter's own solution stripping turns into the student notebook's skeleton."""
    from otter.assign.solutions import replace_solutions

    from course_lib.tools.book import repository_url

    [path] = assignments.build(tmp_path / "masters", book_dir=_tiny_book(tmp_path), fmt="otter")
    assert path == tmp_path / "masters" / "ch03" / "ch03_example.ipynb"
    cells = nbformat.read(path, as_version=4).cells
    config = yaml.safe_load(cells[0].source)
    assert cells[0].cell_type == "raw" and cells[0].source.startswith("# ASSIGNMENT CONFIG")
    assert (config["name"] == "ch03_example"
            and config["tests"] == {"files": True, "ok_format": False})
    # no _config.yml beside this book
    assert config["requirements"] == [f"course_lib @ git+{repository_url()}"]
    markers = [c.source.split("\n")[0] for c in cells[1:] if c.cell_type == "raw"]
    assert markers == ["# BEGIN QUESTION", "# BEGIN SOLUTION", "# END SOLUTION", "# BEGIN TESTS",
                       "# END TESTS",
                       "# END QUESTION"]
    start = next(i for i, c in enumerate(cells) if c.source.startswith("# BEGIN QUESTION"))
    assert yaml.safe_load(cells[start].source.split("\n",
                                                    1)[1]) == {"name": "average_past", "points": 1}
    text, _, solution, _, _, test, _, _, after = cells[start + 1:start + 10]
    assert text.source.startswith("**Exercise: Average**")
    assert test.source == (
        "def test_average_past(average_past):\n    from course_lib.exercises "
        "import ch03\n    ch03.check_average_past(average_past)\n\ntest_average_past(average_past)"
    )
    assert after.source == "print(average_past(x))", ("what the check cell does besides the check "
                                                      "stays")
    student = "\n".join(replace_solutions(solution.source.split("\n"), "python"))
    assert student == assignments.strip_solution_code(FUNCTION)[0]
    namespace = {"torch": __import__("torch")}
    # the solution version still runs: the prompt is an inert string
    exec(solution.source, namespace)
    assert namespace["average_past"](__import__("torch").ones(1, 2, 3)).shape == (1, 2, 3)
    assert "The answer" not in str(cells) and "{exercise}" not in str(cells)


@pytest.mark.parametrize("check, message", [
    ("result = ch03.check_average_past(average_past)", "not a statement of its own"),
    ("ch03.check_average_past(average_past)  # IGNORE", "Otter Assign would drop"),
])
def test_otter_refuses_what_it_cannot_grade(tmp_path, check, message):
    with pytest.raises(assignments.AssignmentError, match=message):
        assignments.build(tmp_path / "masters", book_dir=_tiny_book(tmp_path, check), fmt="otter")
    assert not (tmp_path / "masters").exists()


def test_build_is_all_or_nothing_and_names_the_broken_notebook(tmp_path):
    """A broken chapter 2 leaves no chapter 1 behind, whether the folder existed or not (issue
    21)."""
    book = _tiny_book(tmp_path)
    (book / "ch03_example.ipynb").rename(book / "ch01_good.ipynb")
    (book / "ch02_broken.ipynb").write_text('{"cells": [')  # cut short, as by a failed copy
    for fmt in assignments.FORMATS:
        with pytest.raises(assignments.AssignmentError,
                           match=r"ch02_broken\.ipynb: not a readable notebook"):
            assignments.build(tmp_path / "new" / "out", book_dir=book, fmt=fmt)
        assert sorted(p.name for p in tmp_path.iterdir()) == ["book"], "something was left behind"
    existing = tmp_path / "existing"
    existing.mkdir()
    (existing / "mine.txt").write_text("keep")
    with pytest.raises(assignments.AssignmentError):
        assignments.build(existing, book_dir=book)
    assert [p.name for p in existing.iterdir()] == ["mine.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["book", "existing"]
    done = subprocess.run([sys.executable, "-m", "course_lib.tools", "assignments", "build",
                           "--book", str(book), "--out", str(existing)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert (done.returncode == 2 and done.stderr.count("\n") == 1
            and "ch02_broken.ipynb" in done.stderr), done.stderr
    (book / "ch02_broken.ipynb").unlink()
    assignments.build(existing, book_dir=book)
    assert sorted(p.name for p in existing.iterdir()) == ["ch01_good.ipynb", "mine.txt"]


def test_check_results_classify_every_outcome():
    v4 = nbformat.v4
    def check(outputs, count=1):
        return v4.new_code_cell("ch02.check_x(x)", execution_count=count, outputs=outputs)
    error = lambda ename, evalue: v4.new_output("error", ename=ename, evalue=evalue,  # noqa: E731
                                                traceback=[])
    nb = v4.new_notebook(cells=[
        v4.new_code_cell("x = 1", execution_count=1),
        check([v4.new_output("stream", text="some output\nCorrect! well done.\nmore\n")]),
        check([error("ExerciseError", "Not done yet: x() still raises NotImplementedError.")]),
        check([error("ExerciseError", "x(2) is wrong.\nHint: look again.")]),
        check([error("NameError", "name 'x' is not defined")]),
        check([], count=None),
        check([v4.new_output("stream", text="nothing\n")]),
    ])
    results = assignments.check_results(nb)
    assert [r.status for r in results] == ["correct", "not done", "wrong", "error", "not run",
                                           "wrong"]
    assert [r.cell for r in results] == [1, 2, 3, 4, 5, 6]
    assert results[0].message == "Correct! well done." and results[0].checks == ["check_x"]
    assert results[3].message == "NameError: name 'x' is not defined"


def test_missing_nbformat_gives_an_install_hint(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "nbformat", None)  # import nbformat now raises ImportError
    with pytest.raises(ImportError, match=r"course_lib\[instructor\]"):
        assignments.build_student_notebook(source_path(CHAPTERS[0]), tmp_path)


@pytest.mark.slow  # starts subprocesses (kernels, the CLI): over 10 s
def test_command_line(tmp_path):
    run = lambda *a: subprocess.run([sys.executable, "-m", "course_lib.tools",  # noqa: E731
                                     "assignments", *a],
                                    cwd=ROOT, capture_output=True, text=True, timeout=120)
    first = chapter_number(CHAPTERS[0])
    done = run("build", "--chapter", str(first), "--out", str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert (tmp_path / Path(CHAPTERS[0]).name).with_suffix(".ipynb").exists()
    missing = run("build", "--chapter", "97", "--out", str(tmp_path))
    assert missing.returncode == 2 and "no notebook for chapter 97" in missing.stderr


# --- every chapter -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def student_dir(tmp_path_factory):
    """The student notebooks of every chapter that exists, built once."""
    out = tmp_path_factory.mktemp("student")
    for chapter in CHAPTERS:
        if (ROOT / f"{chapter}.ipynb").exists():
            assignments.build_student_notebook(ROOT / f"{chapter}.ipynb", out)
    return out


def student_notebook(chapter, student_dir):
    path = student_dir / f"{Path(chapter).name}.ipynb"
    if not path.exists():  # the chapter appeared after the fixture ran
        assignments.build_student_notebook(source_path(chapter), student_dir)
    return nbformat.read(path, as_version=4)


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_student_notebook_structure(chapter, student_dir):
    """The student notebook is the chapter with only the solutions changed, so everything before
    the exercises runs exactly as in the chapter (which is why the prefix runs only once, from the
    chapter)."""
    source = nbformat.read(source_path(chapter), as_version=4)
    student = student_notebook(chapter, student_dir)
    src_code = [c for c in source.cells if c.cell_type == "code"]
    stu_code = [c for c in student.cells if c.cell_type == "code"]
    assert len(src_code) == len(stu_code), (f"{chapter}: the student notebook lost or gained code "
                                            "cells")
    for i, (a, b) in enumerate(zip(src_code, stu_code)):
        if has_solution(a):
            assert "raise NotImplementedError()" in b.source and "BEGIN SOLUTION" not in b.source
            assert "hide-input" not in b.metadata.get("tags", []), (
                f"{chapter}: code cell {i} is still hidden"
            )
        else:
            assert a.source == b.source, f"{chapter}: code cell {i} changed in the student notebook"
        assert (not b.outputs
                and b.execution_count is None), f"{chapter}: code cell {i} keeps its outputs"
    text = "\n".join(c.source for c in student.cells)
    for leftover in ("BEGIN SOLUTION", "END SOLUTION", "{solution}", "{exercise}"):
        assert leftover not in text, f"{chapter}: the student notebook still contains {leftover!r}"
    assert not any("solution" in c.metadata.get("tags", []) for c in student.cells)
    assert any(is_check_cell(c)
               for c in student.cells), f"{chapter}: the student notebook has no check cell"


# --- executing chapters and student notebooks --------------------------------------------------
# The student notebook's exercise section runs in nbval's kernel right after the chapter
# (tests/nbval_students.py). Here: that plugin can fail, and nbval's comparison of the stored
# outputs covers the other direction (every check says "Correct!" on the solutions).

NBVAL_OFF = ("nbval-ignore-output", "nbval-skip", "raises-exception")


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_nbval_compares_every_check_cell(chapter):
    """nbval re-runs every check cell and compares its output with the stored "Correct!"
    (test_book.py::test_stored_executed_with_outputs), so every check passes on the chapter's
    solution in CI, unless a check cell is exempt from the comparison."""
    nb = nbformat.read(source_path(chapter), as_version=4)
    for i, cell in enumerate(nb.cells):
        if is_check_cell(cell):
            assert (
                not set(cell.metadata.get("tags", [])) & set(NBVAL_OFF)
                and "NBVAL_" not in cell.source
            ), f"{chapter}, cell {i}: nbval must compare the output of a check cell"


def _made_up_chapter(path: Path, check_body: str, after: str = "") -> None:
    v4 = nbformat.v4
    nb = v4.new_notebook(cells=[
        v4.new_code_cell("from course_lib.exercises import call, passed\n"
                         f"def check_double(fn):\n{check_body}"),
        v4.new_markdown_cell(":::{exercise} Double\n:label: ex-double\nWrite `double(x)`.\n:::"),
        v4.new_code_cell("def double(x):\n    ### BEGIN SOLUTION\n    return 2 * x\n    ### END "
                         "SOLUTION\nanswer = double(21)"),
        v4.new_code_cell("check_double(double)"),
        v4.new_code_cell(after or "print('after the exercises')"),
    ])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    nbformat.write(nb, path)


@pytest.mark.slow  # starts subprocesses (kernels, the CLI): over 10 s
def test_nbval_plugin_runs_the_student_exercises_in_the_chapters_kernel(tmp_path):
    good = "    assert call(fn, 2) == 4\n    passed('doubles')"
    _made_up_chapter(tmp_path / "ch01_good.ipynb", good)
    # passes unfinished work
    _made_up_chapter(tmp_path / "ch02_lenient.ipynb", "    passed('always')")
    # no call()
    _made_up_chapter(tmp_path / "ch03_bare.ipynb", "    assert fn(2) == 4\n    passed('doubles')")
    # answer: solution only
    _made_up_chapter(tmp_path / "ch04_crash.ipynb", good, after="print(answer)\ndel answer")
    done = subprocess.run([sys.executable, "-m", "pytest", str(tmp_path), "--nbval-lax", "-p",
                           "tests.nbval_students", "-p", "no:cacheprovider", "-q", "-rf"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    out = done.stdout
    summary = out.split("short test summary")[-1]
    assert "3 failed" in out and summary.count("::student exercises") == 3, out
    assert "ch01_good" not in summary, out
    assert "the check passed on an unfinished exercise" in out, out
    assert "expected ExerciseError('Not done yet' ...), got NotImplementedError" in out, out
    assert "NameError: name 'answer' is not defined (only check cells may fail)" in out, out


END_TO_END = CHAPTERS if FULL else CHAPTERS[:1]


@pytest.mark.slow
@pytest.mark.parametrize("chapter", END_TO_END)
def test_student_notebook_from_the_command_line_runs_in_full(chapter, tmp_path):
    """As a student gets it: built by the CLI, executed top to bottom by nbclient in its own folder
    (with the chapter's data files, if any, beside it, as on the website's download)."""
    n = chapter_number(chapter)
    subprocess.run([sys.executable, "-m", "course_lib.tools", "assignments", "build", "--chapter",
                    str(n), "--out", str(tmp_path)], cwd=ROOT, check=True, timeout=120)
    path = tmp_path / f"{Path(chapter).name}.ipynb"
    executed = execute_notebook(path, timeout=TIMEOUT, allow_errors=True)
    results = assignments.check_results(executed)
    assert results, f"{chapter}: no check cell"
    wrong = [r for r in results if r.status != "not done"]
    assert not wrong, f"{chapter}: every check should say '{NOT_DONE}': {wrong}"
    for index, cell in enumerate(executed.cells):
        e = (next((o for o in cell.outputs if o.output_type == "error"), None)
             if cell.cell_type == "code" and not is_check_cell(cell) else None)
        assert (
            e is None
            or e.ename == "NotImplementedError"
            or "raises-exception" in cell.metadata.get("tags", [])
        ), (
            f"{chapter}: student notebook cell {index} crashed with {e.ename}: {e.evalue} (only "
            "check cells may fail)"
        )
