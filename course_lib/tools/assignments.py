"""Assignments for instructors: the chapter notebooks without their solutions, in three formats.

    python -m course_lib.tools assignments build --out student/                  # every chapter
    python -m course_lib.tools assignments build --chapter 3 --out student/      # one chapter
    python -m course_lib.tools assignments build --format otter --out masters/   # Otter-Grader
    python -m course_lib.tools assignments build --format nbgrader --out source/ # nbgrader

``--format student`` (the default) writes the notebooks students work in. The chapters use
nbgrader's markup: the body of every exercise function sits between ``### BEGIN SOLUTION`` and
``### END SOLUTION``. A student notebook is the chapter with the code between the markers replaced
by ``raise NotImplementedError()`` (at the markers' indentation: signature and docstring stay), the
worked solutions (cells tagged ``solution``, ``{solution}`` blocks) removed, the ``hide-input`` tag
taken off the exercise cells, ``{exercise}`` boxes as plain Markdown (Jupyter and Colab do not
render MyST directives) and every output cleared. A check cell run on an unfinished function then
fails with the "Not done yet" message of :mod:`course_lib.exercises`.

``--format nbgrader`` keeps the solutions (``nbgrader generate_assignment`` removes them) and gives
the cells nbgrader's metadata: exercise cells become "autograded answer" cells, check cells
read-only "autograder tests" worth one point per check, in nbgrader's layout ``OUT/chNN/``.
``--format otter`` writes Otter-Grader master notebooks, ``OUT/chNN/``, for ``otter assign``
(:mod:`course_lib.tools.otter_master`).

Grading is the graders' job (``otter run``, ``otter grade`` or Gradescope with Otter's autograder
zip; ``nbgrader autograde``): the instructor guide walks through both. The course's own grading
command is retired; :func:`check_results` stays because the course's tests read executed check
cells with it. ``build`` needs nbformat and PyYAML: ``pip install "course_lib[instructor]"``.
"""
from __future__ import annotations

import argparse
import copy
import os
import re
import sys
from pathlib import Path

from . import otter_master
from .chapters import ROOT, assignment_name, chapter_notebooks
from .exercise_cells import (BEGIN_SOLUTION, END_SOLUTION, EXERCISE_BOX, CheckResult,  # noqa: F401
                             check_results, checked_names, exercise_section_start, has_solution,
                             is_check_cell, marker as _marker)
from .solution_text import (BEGIN_HIDDEN_TESTS, CODE_STUB, END_HIDDEN_TESTS,  # noqa: F401
                            MARKDOWN_STUB, AssignmentError, check_python as _check_python,
                            exercise_boxes_to_markdown, strip_solution_code,
                            strip_solution_markdown)

SOLUTION_TAG = "solution"
HIDE_INPUT_TAG = "hide-input"
STUDENT_NOTE = (
    "> **Student version.** The bodies of the exercise functions have been replaced by "
    "`raise NotImplementedError()`. Write your code there, run the cell, then run the check "
    "cell below it: it says `Correct!` or tells you what to fix."
)

INSTALL_HINT = 'pip install "course_lib[instructor]"  (or: pip install nbformat ipykernel pyyaml)'
FORMATS = ("student", "nbgrader", "otter")


def _require(module: str):
    """Import an optional dependency, or fail with how to install it."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise ImportError(f"building student notebooks needs the `{module}` package: "
                          f"{INSTALL_HINT}") from e


# --- cells -------------------------------------------------------------------------------------


def _tags(cell) -> list[str]:
    return list(cell.get("metadata", {}).get("tags", []))


def make_student_notebook(nb, name: str = "notebook", fmt: str = "student",
                          repository: str | None = None):
    """Return a student copy of a (nbformat v4) chapter notebook; ``nb`` itself is unchanged.

    ``fmt="nbgrader"`` returns instead the notebook to put in nbgrader's ``source/`` folder: the
    solutions stay between their markers (``nbgrader generate_assignment`` removes them), the
    exercise cells are marked as nbgrader "autograded answer" cells and the check cells as
    "autograder tests" worth one point per check. ``fmt="otter"`` returns the Otter-Grader master
    notebook (:mod:`course_lib.tools.otter_master`; ``repository``: where Gradescope's autograder
    installs course_lib from). Worked solutions are removed in every format."""
    if fmt not in FORMATS:
        raise AssignmentError(f"unknown format {fmt!r}: choose one of {', '.join(FORMATS)}")
    student = copy.deepcopy(nb)
    prefix = assignment_name(name)
    grade_ids: set = set()
    cells, kinds = [], []
    for index, cell in enumerate(student.cells):
        tags = _tags(cell)
        if SOLUTION_TAG in tags:
            continue
        kind = ""
        if cell.cell_type == "markdown":
            kind = "exercise" if EXERCISE_BOX.search(cell.source) else ""
            source = exercise_boxes_to_markdown(strip_solution_markdown(cell.source))
            if not source.strip():
                continue
            cell.source = source
        elif cell.cell_type == "code":
            kind = "check" if is_check_cell(cell) else ""
            source, n = strip_solution_code(cell.source, where=f"{name}, cell {index}")
            if n:
                kind = "solution"
                _check_python(source, f"{name}, cell {index}")
                if fmt == "student":
                    cell.source = source
                if HIDE_INPUT_TAG in tags:
                    tags.remove(HIDE_INPUT_TAG)
                    cell.metadata["tags"] = tags
                    if not tags:
                        del cell.metadata["tags"]
            if fmt == "nbgrader" and kind:
                cell.metadata["nbgrader"] = _nbgrader_metadata(cell, prefix, grade_ids,
                                                               answer=bool(n))
            cell.outputs = []
            cell.execution_count = None
            for key in ("execution", "collapsed", "scrolled"):
                cell.metadata.pop(key, None)
        cells.append(cell)
        kinds.append(kind)
    if fmt == "otter":
        try:
            return otter_master.make_master_notebook(cells, student, Path(name).stem, repository,
                                                     kinds, where=name)
        except (ValueError, SyntaxError) as e:
            raise AssignmentError(str(e)) from None
    first_markdown = next((i for i, c in enumerate(cells) if c.cell_type == "markdown"), -1)
    student.cells = cells
    if fmt == "student":
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


# --- chapters ----------------------------------------------------------------------------------


def _repository(book_dir: Path) -> str | None:
    """The course repository (``_config.yml`` beside the book, else this checkout's), or None."""
    from .book import repository_url

    for config in (book_dir.resolve().parent / "_config.yml", ROOT / "_config.yml"):
        if config.exists():
            return repository_url(config)
    return None


def _refuse_book_folder(out_dir: Path, book: Path) -> None:
    if out_dir.resolve() == book.resolve():
        raise AssignmentError(f"--out {out_dir} is the folder of the chapter notebooks: "
                              "the student notebooks would overwrite the solutions; choose another "
                              "folder")


def student_target(source: Path, out_dir: Path, fmt: str) -> Path:
    """Where the notebook built from ``source`` goes: ``out_dir/<name>``, or, for nbgrader and
    Otter (one folder per assignment), ``out_dir/chNN/<name>``."""
    if fmt == "student":
        return out_dir / source.name
    return out_dir / assignment_name(source) / source.name


def build_student_notebook(source: str | Path, out_dir: str | Path, fmt: str = "student",
                           repository: str | None = None) -> Path:
    """Write the ``fmt`` version of one chapter notebook at :func:`student_target`."""
    nbformat = _require("nbformat")
    source, out_dir = Path(source), Path(out_dir)
    _refuse_book_folder(out_dir, source.parent)
    try:
        nb = nbformat.read(source, as_version=4)
    except Exception as e:  # JSON, schema or encoding errors all mean the same to the user
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise AssignmentError(f"{source}: not a readable notebook ({first[:200]}); restore it "
                              f"(e.g. git checkout -- {source.name}) or fix its JSON") from None
    student = make_student_notebook(nb, name=source.name, fmt=fmt, repository=repository)
    if not any(has_solution(c) for c in nb.cells):
        print(f"warning: {source.name} has no `{BEGIN_SOLUTION}` region: its student version has "
              "nothing to write", file=sys.stderr)
    target = student_target(source, out_dir, fmt)
    target.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(student, target)
    return target


def check_out_dir(out_dir: Path, targets: list[Path], force: bool = False) -> None:
    """Before building: ``out_dir`` must be a folder (or not exist yet, below a folder) that this
    process can write, and none of ``targets`` (the files the build writes) may exist there unless
    ``force``: an instructor's edited notebook must not be replaced silently. Other files stay."""
    import tempfile

    if out_dir.exists() and not out_dir.is_dir():
        raise AssignmentError(f"--out {out_dir} is a file, not a folder: give a folder to write "
                              "the notebooks into (it is created if missing)")
    existing = next((p for p in [out_dir, *out_dir.parents] if p.exists()), Path("."))
    if not existing.is_dir():
        raise AssignmentError(f"--out {out_dir} lies below {existing}, which is a file, not a "
                              "folder: choose another --out")
    # the folder the notebooks land in (or the first existing parent of a new one) must be writable
    try:
        fd, probe = tempfile.mkstemp(prefix=".write-probe-", dir=existing)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise AssignmentError(f"cannot write to {out_dir} ({e.strerror} in {existing}): choose an "
                              "--out folder you can write") from None
    replaced = [str(t.relative_to(out_dir)) for t in targets if t.exists()]
    if replaced and not force:
        shown = (", ".join(replaced[:3]) + (f" and {len(replaced) - 3} more" if len(replaced) > 3
                                            else ""))
        raise AssignmentError(f"--out {out_dir} already holds {shown}, which this build would "
                              "replace (edits there would be lost): pass --force to replace them, "
                              "or choose an empty or new folder")


def build(out_dir: str | Path, chapter: int | None = None, book_dir: str | Path | None = None,
          fmt: str = "student", force: bool = False) -> list[Path]:
    """Build the ``fmt`` notebooks of every chapter (or of one) into ``out_dir``; see
    :func:`student_target` for the layout. Notebooks already in ``out_dir`` under the names the
    build writes are not replaced unless ``force`` (other files there are left alone).

    All or nothing: every notebook is built into a temporary folder beside ``out_dir`` first, and
    only when all succeeded are they moved into place, so a broken chapter leaves no other
    chapter's notebook (and no new ``out_dir``) behind."""
    import shutil
    import tempfile

    if fmt not in FORMATS:
        raise AssignmentError(f"unknown format {fmt!r}: choose one of {', '.join(FORMATS)}")
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
    out_dir, book = Path(out_dir), next(iter(chapters.values())).parent
    _refuse_book_folder(out_dir, book)
    check_out_dir(out_dir, [student_target(path, out_dir, fmt) for path in chapters.values()],
                  force)
    repository = _repository(book) if fmt == "otter" else None
    existing = next(p for p in out_dir.resolve().parents if p.is_dir())  # creates nothing yet
    try:
        staging = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}-", dir=existing))
    except OSError as e:  # the staging folder beside --out: a parent that is not writable
        raise AssignmentError(f"cannot write to {out_dir} ({e.strerror} in {existing}): choose an "
                              "--out folder you can write") from None
    try:
        built = [build_student_notebook(path, staging, fmt=fmt, repository=repository)
                 for path in chapters.values()]
        written = []
        for path in built:
            target = out_dir / path.relative_to(staging)
            try:
                target.parent.mkdir(parents=True, exist_ok=True)
                path.replace(target)  # same file system: atomic per file
            except OSError as e:
                raise AssignmentError(f"cannot write {target} ({e.strerror}): choose an --out "
                                      "folder you can write"
                                      + (f"; {len(written)} notebook(s) were written before it"
                                         if written else "")
                                      ) from None
            written.append(target)
        return written
    finally:
        shutil.rmtree(staging, ignore_errors=True)


# --- command line ------------------------------------------------------------------------------


def _cmd_build(args) -> int:
    written = build(args.out, chapter=args.chapter, book_dir=args.book, fmt=args.format,
                    force=args.force)
    for path in written:
        print(f"wrote {path}")
    return 0


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Add ``assignments build`` to the tools' command line."""
    p = subparsers.add_parser(
        "assignments",
        help="build student notebooks, Otter or nbgrader assignments",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = p.add_subparsers(dest="assignments_command", required=True)
    b = sub.add_parser("build",
                       help="write student notebooks (solutions removed), Otter-Grader master "
                                     "notebooks or nbgrader source notebooks")
    b.add_argument("--chapter", type=int, help="only this chapter (default: every chapter)")
    b.add_argument("--out", required=True, help="folder to write the notebooks into")
    b.add_argument("--book",
                   help="folder of the chapter notebooks (default: ./book, else the repository's)")
    b.add_argument("--force", action="store_true",
                   help="replace notebooks of the same name already in --out")
    b.add_argument("--format", choices=FORMATS, default="student",
                   help="student (default): notebooks to hand out, solutions replaced by "
                        "raise NotImplementedError(); otter: Otter-Grader master notebooks for "
                        "`otter assign`, OUT/chNN/; nbgrader: nbgrader source notebooks (solutions "
                        "kept, cells marked as answer cells and autograded tests), OUT/chNN/")
    b.set_defaults(func=_cmd_build)
    return p
