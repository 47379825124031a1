"""A chapter as an Otter-Grader assignment: the master notebook that ``otter assign`` reads.

    python -m course_lib.tools assignments build --format otter --chapter 3 --out masters/
    otter assign masters/ch03/ch03_self_attention_trick.ipynb dist/ch03
    otter run -a dist/ch03/autograder/ch03_self_attention_trick-autograder_*.zip -o out/
    submission.ipynb

The master notebook is the chapter in Otter Assign's notebook format (as otter-grader 7 reads it:
raw cells mark the blocks; otter.assign.blocks and otter.assign.notebook_transformer):

- a first raw cell ``# ASSIGNMENT CONFIG`` (YAML): the assignment's name (Otter refuses a
  submission made for another assignment), tests stored as files with exceptions, not doctests
  (``tests: {files: true, ok_format: false}``, which ``runs_on: colab`` requires), no export cell
  (students hand in the ``.ipynb`` itself) and, for Gradescope's autograder, ``course_lib``
  installed from the course repository;
- every exercise becomes a question: ``# BEGIN QUESTION`` (``name``, ``points``), the exercise's
  text, ``# BEGIN SOLUTION`` / the solution cell / ``# END SOLUTION``, ``# BEGIN TESTS`` / one test
  cell per check / ``# END TESTS``, ``# END QUESTION``;
- a test cell calls the chapter's check from :mod:`course_lib.exercises`, so the message Otter
  reports for a failed test is the check's own message and hint, as in the book:

      def test_causal_softmax(causal_softmax):
          from course_lib.exercises import ch03
          ch03.check_causal_softmax(causal_softmax)

      test_causal_softmax(causal_softmax)

  (Otter passes the notebook's variables of those names as the arguments);
- in the solution cell, nbgrader's ``### BEGIN SOLUTION`` / ``### END SOLUTION`` become Otter's
  markers, with a prompt block that gives the student the book's skeleton (``# YOUR CODE HERE`` and
  ``raise NotImplementedError()``, which the checks answer with "Not done yet"), not Otter's
  ``...``;
- what a check cell does besides the check (printing a result on the chapter's data) stays, as an
  ordinary cell after the question; the worked solutions are removed, as in student notebooks.

Every other cell is the chapter's own, so the notebook still installs ``course_lib`` when it is
missing (Colab) and builds what the exercises use.
"""
from __future__ import annotations

import ast
import builtins
import copy
import re

import yaml

from .exercise_cells import BEGIN_SOLUTION, END_SOLUTION

STUB = ["# YOUR CODE HERE", "raise NotImplementedError()"]
NOTE = (
    "> **Otter-Grader assignment.** The bodies of the exercise functions are "
    "`raise NotImplementedError()`. Write your code there, run the cell, then run the "
    "`grader.check(...)` cell below it: it shows what passed, or the check's message saying "
    "what to fix. Hand in this `.ipynb` file."
)
# Otter Assign reads these as its own markup in any cell (otter.assign.utils.is_ignore_cell,
# otter.assign.solutions.remove_ignored_lines and has_seed): a chapter must not contain them.
OTTER_CLASH = re.compile(r"\A#\s*ignore|^\s*#\s*BEGIN\s*IGNORE|# (END )?IGNORE\s*$|# SEED\s*$",
                         re.I | re.M)


def assignment_config(name: str, repository: str | None) -> str:
    """The ``# ASSIGNMENT CONFIG`` cell (see otter.assign.assignment.Assignment for every key)."""
    config = {
        "name": name,
        "runs_on": "colab",  # Otter installs itself in the notebook; works in Jupyter as well
        "tests": {"files": True, "ok_format": False},
        "export_cell": False,  # Otter's export runs neither on Colab nor without a PDF toolchain
        "check_all_cell": False,
        # the chapter already runs its checks: `otter run` on the solutions proves the tests pass
        "run_tests": False,
        "generate": {"pdf": False},
    }
    if repository:
        config["requirements"] = [f"course_lib @ git+{repository}"]
    return "# ASSIGNMENT CONFIG\n" + yaml.safe_dump(config, sort_keys=False).rstrip()


def otter_solution(source: str, where: str) -> str:
    """nbgrader's solution markers -> Otter's: the student version gets the book's skeleton (a
    prompt block, kept in the solution as an inert string) and loses the solution lines."""
    out = []
    for number, line in enumerate(source.split("\n"), start=1):
        indent = line[: len(line) - len(line.lstrip())]
        if line.strip().startswith(BEGIN_SOLUTION):
            out += [indent + '""" # BEGIN PROMPT', *(indent + s for s in STUB),
                    indent + '""" # END PROMPT', indent + "# BEGIN SOLUTION NO PROMPT"]
        elif line.strip().startswith(END_SOLUTION):
            out.append(indent + "# END SOLUTION")
        elif re.search(r"#\s*(BEGIN|END) (SOLUTION|PROMPT)|# SOLUTION", line):
            raise ValueError(f"{where}, line {number}: Otter would read {line.strip()!r} as its "
                             "own solution markup; reword the comment")
        else:
            out.append(line)
    return "\n".join(out)


def _check_calls(tree: ast.Module) -> list[ast.Expr]:
    """The statements of a check cell that are a call to ``check_*`` (or ``chNN.check_*``)."""
    def name(call):
        f = call.func
        return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
    return [s for s in tree.body if isinstance(s, ast.Expr) and isinstance(s.value, ast.Call)
            and name(s.value).startswith("check_")]


def _free_names(node: ast.AST, skip: set[str]) -> list[str]:
    """The variables a check call reads from the notebook, in order of appearance."""
    seen = []
    for n in ast.walk(node):
        if isinstance(n, ast.Name) and n.id not in skip and n.id not in seen \
                and not hasattr(builtins, n.id):
            seen.append(n.id)
    return seen


def split_check_cell(source: str, where: str) -> tuple[list[tuple[str, str]], str]:
    """Split a check cell into Otter test cells (one per check call: ``(check name, source)``)
    and the rest of the cell (imports and prints), which stays as an ordinary cell."""
    tree = ast.parse(source)
    calls = _check_calls(tree)
    if not calls:
        raise ValueError(f"{where}: a check cell whose check call is not a statement of its own "
                         "(write `chNN.check_x(...)` on its own line)")
    modules = {a.asname or a.name: a.name for s in tree.body if isinstance(s, ast.ImportFrom)
               and s.module == "course_lib.exercises" for a in s.names}  # alias -> chNN
    tests = []
    for call in calls:
        func = call.value.func
        check = func.attr if isinstance(func, ast.Attribute) else func.id
        module = (func.value.id if isinstance(func, ast.Attribute)
                  and isinstance(func.value, ast.Name) else None)
        if module and module not in modules and not re.fullmatch(r"ch\d+", module):
            raise ValueError(f"{where}: cannot tell where {module}.{check} comes from")
        real = modules.get(module, module)
        imports = ["from course_lib.exercises import "
                   f"{real}" + (f" as {module}" if real != module else "")
                   ] if module else []
        args = _free_names(call, {module} if module else set())
        test = f"test_{check.removeprefix('check_')}"
        body = "\n".join("    " + line for line in imports + [ast.unparse(call)])
        tests.append((check,
                      f"def {test}({', '.join(args)}):\n{body}\n\n{test}({', '.join(args)})"))
    lines = source.split("\n")
    drop = {n for c in calls for n in range(c.lineno - 1, c.end_lineno)}
    rest = "\n".join(l for i, l in enumerate(lines) if i not in drop).strip("\n")
    has_code = any(not isinstance(s, (ast.Import, ast.ImportFrom)) for s in ast.parse(rest).body)
    return tests, rest if has_code else ""


def make_master_notebook(student_cells: list, nb, name: str, repository: str | None,
                         kinds: list[str], where: str):
    """The Otter master notebook of a chapter.

    ``student_cells`` are the chapter's cells as the student notebook has them (worked solutions
    removed, exercise boxes as plain Markdown, outputs cleared) but with the solutions kept, and
    ``kinds`` says what each is: "exercise" (an exercise's text), "solution", "check" or "" (any
    other cell)."""
    import nbformat

    v4 = nbformat.v4
    master = copy.deepcopy(nb)
    master.metadata.pop("otter", None)
    cells = [v4.new_raw_cell(assignment_config(name, repository))]
    question: dict | None = None
    used: set[str] = set()

    def raw(text):
        return v4.new_raw_cell(text)

    def flush():
        nonlocal question
        q, question = question, None
        if q is None:
            return
        if not q["tests"]:  # nothing to grade: the cells stay as they are
            cells.extend(c for c, _ in q["body"])
            cells.extend(q["after"])
            return
        first = q["tests"][0][0].removeprefix("check_")
        qname, k = first, 2
        while qname in used:
            qname, k = f"{first}_{k}", k + 1
        used.add(qname)
        header = yaml.safe_dump({"name": qname, "points": len(q["tests"])}, sort_keys=False)
        cells.append(raw("# BEGIN QUESTION\n" + header.rstrip()))
        for cell, is_solution in q["body"]:
            cells.extend([raw("# BEGIN SOLUTION"), cell, raw("# END SOLUTION")] if is_solution
                         else [cell])
        cells.append(raw("# BEGIN TESTS"))
        cells.extend(v4.new_code_cell(source) for _, source in q["tests"])
        cells.extend([raw("# END TESTS"), raw("# END QUESTION")])
        cells.extend(q["after"])

    def new_question():
        return {"body": [], "tests": [], "after": []}

    for index, (cell, kind) in enumerate(zip(student_cells, kinds)):
        here = f"{where}, cell {index}"
        if cell.cell_type != "raw" and OTTER_CLASH.search(cell.source):
            raise ValueError(f"{here}: Otter Assign would drop a line or cell marked "
                             f"{OTTER_CLASH.search(cell.source).group(0).strip()!r}; reword it")
        if kind == "exercise":
            flush()
            question = new_question()
            question["body"].append((cell, False))
        elif kind == "solution":
            if question is None or question["tests"]:
                flush()
                question = new_question()
            cell.source = otter_solution(cell.source, here)
            question["body"].append((cell, True))
        elif kind == "check":
            question = question or new_question()
            tests, rest = split_check_cell(cell.source, here)
            question["tests"] += tests
            if rest:
                cell.source = rest
                question["after"].append(cell)
        elif question is not None and not question["tests"]:
            question["body"].append((cell, False))  # e.g. data the exercise needs
        else:
            flush()
            cells.append(cell)
    flush()
    master.cells = cells
    for cell in master.cells:
        cell.pop("id", None)  # Otter writes its own cells without ids; keep the file consistent
    master.nbformat_minor = min(master.get("nbformat_minor", 4), 4)
    first_markdown = next(i for i, c in enumerate(master.cells) if c.cell_type == "markdown")
    master.cells.insert(first_markdown + 1, v4.new_markdown_cell(NOTE))
    master.cells[first_markdown + 1].pop("id", None)
    return master
