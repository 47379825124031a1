"""Student notebooks for instructors: the chapter notebooks without their solutions.

    python -m course_lib.tools assignments build --out student/              # every chapter
    python -m course_lib.tools assignments build --chapter 3 --out student/  # one chapter
    python -m course_lib.tools assignments build --nbgrader --out source/    # nbgrader's source/chNN/ folders
    python -m course_lib.tools assignments grade submissions/*.ipynb         # run them, report each check

The chapter notebooks use nbgrader's markup: the body of every exercise function sits between
``### BEGIN SOLUTION`` and ``### END SOLUTION``. A student notebook is the chapter with

- the code between the markers replaced by ``raise NotImplementedError()`` (at the markers'
  indentation, so the cell stays valid Python and the function's signature and docstring stay);
- every cell tagged ``solution`` (the worked explanations) and every ``{solution}`` block removed;
- the ``hide-input`` tag taken off the exercise cells, so the skeleton is in plain sight;
- ``{exercise}`` boxes turned into plain Markdown (Jupyter and Colab do not render MyST directives);
- all outputs and execution counts cleared.

Running a check cell on an unfinished function then fails with the student-facing
"Not done yet" message of :mod:`course_lib.exercises`.

With ``--nbgrader`` the solutions stay (nbgrader's ``generate_assignment`` removes them) and the
cells get nbgrader's metadata: exercise cells become "autograded answer" cells, check cells
read-only "autograder tests" worth one point per check.

``build`` and ``grade`` need nbformat (and ``grade`` nbclient and a Jupyter kernel):
``pip install "course_lib[instructor]"``. See the instructor guide in the book.
"""
from __future__ import annotations

import argparse
import copy
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from .chapters import CHAPTER_NAME, chapter_notebooks, execute_notebook

BEGIN_SOLUTION = "### BEGIN SOLUTION"
END_SOLUTION = "### END SOLUTION"
BEGIN_HIDDEN_TESTS = "### BEGIN HIDDEN TESTS"
END_HIDDEN_TESTS = "### END HIDDEN TESTS"
CODE_STUB = "raise NotImplementedError()"
MARKDOWN_STUB = "YOUR ANSWER HERE"
SOLUTION_TAG = "solution"
HIDE_INPUT_TAG = "hide-input"
STUDENT_NOTE = (
    "> **Student version.** The bodies of the exercise functions have been replaced by "
    "`raise NotImplementedError()`. Write your code there, run the cell, then run the check "
    "cell below it: it says `Correct!` or tells you what to fix."
)
EXERCISE_BOX = re.compile(r"^\s*(:{3,}|`{3,})\{exercise\}", re.M)
CHECK_CALL = re.compile(r"(?<![\w.])(?:ch\d+\.)?check_\w+\s*\(")

INSTALL_HINT = 'pip install "course_lib[instructor]"  (or: pip install nbformat nbclient ipykernel)'


class AssignmentError(ValueError):
    """A notebook or a request the builder cannot handle; the message says why."""


def _require(module: str):
    """Import an optional dependency, or fail with how to install it."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise ImportError(f"building and grading student notebooks needs the `{module}` package: "
                          f"{INSTALL_HINT}") from e


# --- source transformations --------------------------------------------------------------------


def _marker(line: str, marker: str) -> bool:
    return line.strip().startswith(marker)


def strip_solution_code(source: str, where: str = "cell") -> tuple[str, int]:
    """Replace each ``### BEGIN SOLUTION`` ... ``### END SOLUTION`` region (markers included) by
    ``raise NotImplementedError()`` at the BEGIN marker's indentation, and drop hidden-test
    regions. Returns the new source and the number of solution regions replaced."""
    out: list[str] = []
    regions = 0
    state = None  # None, "solution" or "hidden"
    for number, line in enumerate(source.split("\n"), start=1):
        if _marker(line, BEGIN_SOLUTION) or _marker(line, BEGIN_HIDDEN_TESTS):
            if state is not None:
                raise AssignmentError(f"{where}, line {number}: a BEGIN marker inside an open region "
                                      f"(missing {END_SOLUTION if state == 'solution' else END_HIDDEN_TESTS}?)")
            if _marker(line, BEGIN_SOLUTION):
                indent = line[: len(line) - len(line.lstrip())]
                out.append(indent + "# YOUR CODE HERE")
                out.append(indent + CODE_STUB)
                regions += 1
                state = "solution"
            else:
                state = "hidden"
        elif _marker(line, END_SOLUTION) or _marker(line, END_HIDDEN_TESTS):
            expected = "solution" if _marker(line, END_SOLUTION) else "hidden"
            if state != expected:
                raise AssignmentError(f"{where}, line {number}: {line.strip()!r} without its BEGIN marker")
            state = None
        elif state is None:
            out.append(line)
    if state is not None:
        raise AssignmentError(f"{where}: {BEGIN_SOLUTION if state == 'solution' else BEGIN_HIDDEN_TESTS} "
                              "is never closed")
    return "\n".join(out), regions


def strip_solution_markdown(source: str) -> str:
    """Markdown: replace nbgrader solution regions by "YOUR ANSWER HERE" and remove every
    ``{solution}`` directive block (colon or backtick fence)."""
    lines = source.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        fence = re.match(r"^\s*(:{3,}|`{3,})\{solution(?:-start|-end)?\}", line)
        if fence:
            if "{solution-end}" in line:
                i += 1
                continue
            closing = re.compile(r"^\s*" + re.escape(fence.group(1)) + r"\s*$")
            j = i + 1
            while j < len(lines) and not closing.match(lines[j]):
                j += 1
            i = j + 1
            continue
        if _marker(line, BEGIN_SOLUTION):
            j = i + 1
            while j < len(lines) and not _marker(lines[j], END_SOLUTION):
                j += 1
            out.append(MARKDOWN_STUB)
            i = j + 1
            continue
        out.append(line)
        i += 1
    return "\n".join(out).strip("\n")


def exercise_boxes_to_markdown(source: str) -> str:
    """Turn a MyST ``{exercise}`` box into plain Markdown a notebook front end can render:
    a bold "Exercise: title" line and the body, without the directive's options."""
    lines = source.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        m = re.match(r"^\s*(:{3,}|`{3,})\{exercise(?:-start)?\}\s*(.*)$", lines[i])
        if not m:
            out.append(lines[i])
            i += 1
            continue
        closing = re.compile(r"^\s*" + re.escape(m.group(1)) + r"\s*$")
        title = m.group(2).strip()
        out.append(f"**Exercise: {title}**" if title else "**Exercise**")
        out.append("")
        j = i + 1
        while j < len(lines) and re.match(r"^\s*:[\w-]+:", lines[j]):  # directive options
            j += 1
        while j < len(lines) and not closing.match(lines[j]):
            out.append(lines[j])
            j += 1
        i = j + 1
    return "\n".join(out)


# --- cells -------------------------------------------------------------------------------------


def has_solution(cell) -> bool:
    return cell.get("cell_type") == "code" and any(_marker(l, BEGIN_SOLUTION) for l in cell.source.split("\n"))


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


def _tags(cell) -> list[str]:
    return list(cell.get("metadata", {}).get("tags", []))


def make_student_notebook(nb, name: str = "notebook", nbgrader: bool = False):
    """Return a student copy of a (nbformat v4) chapter notebook; ``nb`` itself is unchanged.

    With ``nbgrader=True``, return instead the notebook to put in nbgrader's ``source/`` folder:
    the solutions stay between their markers (``nbgrader generate_assignment`` removes them), the
    exercise cells are marked as nbgrader "autograded answer" cells and the check cells as
    "autograder tests" worth one point per check; worked solutions are removed as above."""
    student = copy.deepcopy(nb)
    chapter = re.match(r"ch(\d+)_", Path(name).name)
    prefix = f"ch{int(chapter.group(1)):02d}" if chapter else Path(name).stem
    grade_ids: set = set()
    cells = []
    for index, cell in enumerate(student.cells):
        tags = _tags(cell)
        if SOLUTION_TAG in tags:
            continue
        if cell.cell_type == "markdown":
            source = exercise_boxes_to_markdown(strip_solution_markdown(cell.source))
            if not source.strip():
                continue
            cell.source = source
        elif cell.cell_type == "code":
            source, n = strip_solution_code(cell.source, where=f"{name}, cell {index}")
            if n:
                _check_python(source, f"{name}, cell {index}")
                if not nbgrader:
                    cell.source = source
                if HIDE_INPUT_TAG in tags:
                    tags.remove(HIDE_INPUT_TAG)
                    cell.metadata["tags"] = tags
                    if not tags:
                        del cell.metadata["tags"]
            if nbgrader and (n or is_check_cell(cell)):
                cell.metadata["nbgrader"] = _nbgrader_metadata(cell, prefix, grade_ids, answer=bool(n))
            cell.outputs = []
            cell.execution_count = None
            for key in ("execution", "collapsed", "scrolled"):
                cell.metadata.pop(key, None)
        cells.append(cell)
    first_markdown = next((i for i, c in enumerate(cells) if c.cell_type == "markdown"), -1)
    student.cells = cells
    if not nbgrader:
        _insert_markdown(student, first_markdown + 1, STUDENT_NOTE)
        student.metadata.setdefault("course_lib", {})["student"] = True
    return student


def _nbgrader_metadata(cell, prefix: str, used: set, answer: bool) -> dict:
    """nbgrader's cell metadata (schema 3) for an answer cell or a test (check) cell."""
    if answer:
        m = re.search(r"^\s*def\s+(\w+)", cell.source, re.M)
        base = f"{prefix}-{m.group(1) if m else 'answer'}"
    else:
        names = checked_names(cell)
        base = f"{prefix}-{names[0] if names else 'check'}"
    grade_id, k = re.sub(r"[^A-Za-z0-9_-]", "_", base), 2
    while grade_id in used:
        grade_id, k = f"{base}-{k}", k + 1
    used.add(grade_id)
    meta = {"grade": not answer, "grade_id": grade_id, "locked": not answer, "schema_version": 3,
            "solution": answer, "task": False}
    if not answer:
        meta["points"] = max(1, len(checked_names(cell)))
    return meta


def _insert_markdown(nb, position: int, text: str) -> None:
    nbformat = _require("nbformat")
    cell = nbformat.v4.new_markdown_cell(text)
    if nb.get("nbformat", 4) == 4 and nb.get("nbformat_minor", 0) >= 5:
        cell["id"] = "student-note"  # stable, so rebuilding gives the same file
    else:
        cell.pop("id", None)  # cell ids only exist from nbformat 4.5 on
    nb.cells.insert(position, cell)


def _check_python(source: str, where: str) -> None:
    """After stripping, an exercise cell must still be valid Python (IPython magics allowed)."""
    try:
        from IPython.core.inputtransformer2 import TransformerManager

        code = TransformerManager().transform_cell(source)
    except ImportError:  # no IPython: check the plain-Python cells only
        if any(l.lstrip().startswith(("%", "!")) for l in source.split("\n")):
            return
        code = source
    try:
        compile(code, where, "exec")
    except SyntaxError as e:
        raise AssignmentError(f"{where}: the student version is not valid Python ({e.msg}, line {e.lineno}); "
                              f"put {BEGIN_SOLUTION} / {END_SOLUTION} inside a function body, "
                              "indented like the body") from None


# --- chapters ----------------------------------------------------------------------------------


def build_student_notebook(source: str | Path, out_dir: str | Path, nbgrader: bool = False) -> Path:
    """Write the student version of one chapter notebook into ``out_dir`` (same file name); with
    ``nbgrader=True``, its nbgrader source version into ``out_dir/chNN/`` (nbgrader's layout:
    ``source/<assignment>/<notebook>``)."""
    nbformat = _require("nbformat")
    source = Path(source)
    out_dir = Path(out_dir)
    if out_dir.resolve() == source.parent.resolve():
        raise AssignmentError(f"--out {out_dir} is the folder of the chapter notebooks: "
                              "the student notebooks would overwrite the solutions; choose another folder")
    nb = nbformat.read(source, as_version=4)
    student = make_student_notebook(nb, name=source.name, nbgrader=nbgrader)
    if not any(has_solution(c) for c in nb.cells):
        print(f"warning: {source.name} has no `{BEGIN_SOLUTION}` region: its student version has nothing "
              "to write", file=sys.stderr)
    if nbgrader:
        m = CHAPTER_NAME.match(source.name)
        out_dir = out_dir / (f"ch{int(m.group(1)):02d}" if m else source.stem)
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / source.name
    nbformat.write(student, target)
    return target


def build(out_dir: str | Path, chapter: int | None = None, book_dir: str | Path | None = None,
          nbgrader: bool = False) -> list[Path]:
    """Build the student notebooks of every chapter (or of one) into ``out_dir`` (with
    ``nbgrader=True``: nbgrader source notebooks, ``out_dir/chNN/chNN_*.ipynb``)."""
    try:
        chapters = chapter_notebooks(book_dir)
    except ValueError as e:
        raise AssignmentError(str(e)) from None
    if chapter is not None:
        if chapter not in chapters:
            have = ", ".join(map(str, chapters)) or "none"
            where = Path(book_dir).resolve() if book_dir is not None else "the book"
            raise AssignmentError(f"no notebook for chapter {chapter} (ch{chapter:02d}_*.ipynb) in "
                                  f"{where}; chapters found: {have}")
        chapters = {chapter: chapters[chapter]}
    if not chapters:
        raise AssignmentError("no chapter notebooks (chNN_*.ipynb) found")
    return [build_student_notebook(path, out_dir, nbgrader=nbgrader) for path in chapters.values()]


# --- grading -----------------------------------------------------------------------------------


@dataclass
class CheckResult:
    cell: int  # index of the check cell in the notebook
    checks: list  # names of the check functions it calls
    status: str  # "correct", "not done", "wrong", "error" (the cell crashed outside a check) or "not run"
    message: str  # the check's message, or the error


def check_results(nb) -> list[CheckResult]:
    """Classify every check cell of an executed notebook from its outputs."""
    results = []
    for index, cell in enumerate(nb.cells):
        if not is_check_cell(cell):
            continue
        names = checked_names(cell)
        errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
        text = "".join(o.get("text", "") for o in cell.get("outputs", []) if o.get("output_type") == "stream")
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
            status, message = "correct", next(l for l in text.splitlines() if "Correct!" in l).strip()
        else:
            status, message = "wrong", "the check printed no `Correct!`"
        results.append(CheckResult(index, names, status, message))
    return results


def grade(paths, timeout: int = 600, kernel_name: str = "python3") -> dict[str, list[CheckResult]]:
    """Execute each submitted notebook and classify its check cells."""
    _require("nbclient")
    return {str(p): check_results(execute_notebook(p, timeout, kernel_name, allow_errors=True)) for p in paths}


# --- command line ------------------------------------------------------------------------------


def _cmd_build(args) -> int:
    written = build(args.out, chapter=args.chapter, book_dir=args.book, nbgrader=args.nbgrader)
    for path in written:
        print(f"wrote {path}")
    return 0


def _cmd_grade(args) -> int:
    rows = []
    for path, results in grade(args.notebooks, timeout=args.timeout, kernel_name=args.kernel).items():
        correct = sum(r.status == "correct" for r in results)
        print(f"{path}: {correct}/{len(results)} checks correct")
        width = max((len(", ".join(r.checks)) for r in results), default=0)
        for r in results:
            first_line = r.message.splitlines()[0] if r.message else ""
            print(f"  cell {r.cell:>3}  {', '.join(r.checks):<{width}}  {r.status:<9} {first_line}")
            rows.append((path, r.cell, " ".join(r.checks), r.status, r.message))
    if args.csv:
        import csv

        with open(args.csv, "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["notebook", "cell", "checks", "status", "message"])
            writer.writerows(rows)
        print(f"wrote {args.csv}")
    return 0


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Add ``assignments build`` / ``assignments grade`` to the tools' command line."""
    p = subparsers.add_parser("assignments", help="build student notebooks (solutions removed) or grade them",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="assignments_command", required=True)
    b = sub.add_parser("build", help="write student notebooks: solutions removed, outputs cleared")
    b.add_argument("--chapter", type=int, help="only this chapter (default: every chapter)")
    b.add_argument("--out", required=True, help="folder to write the student notebooks into")
    b.add_argument("--book", help="folder of the chapter notebooks (default: ./book, else the repository's)")
    b.add_argument("--nbgrader", action="store_true",
                   help="write nbgrader source notebooks instead (solutions kept, cells marked for "
                        "nbgrader: answer cells and autograded checks) into OUT/chNN/")
    b.set_defaults(func=_cmd_build)
    g = sub.add_parser("grade", help="execute notebooks and report every exercise check")
    g.add_argument("notebooks", nargs="+", help="the submitted notebooks")
    g.add_argument("--csv", help="also write the results to this CSV file")
    g.add_argument("--timeout", type=int, default=600, help="seconds per cell (default 600)")
    g.add_argument("--kernel", default="python3", help="Jupyter kernel name (default python3)")
    g.set_defaults(func=_cmd_grade)
    return p
