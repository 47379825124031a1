"""The solution taken out of one cell's text: nbgrader's solution and hidden-test regions of
a code cell replaced by ``raise NotImplementedError()``, the solution regions of a Markdown cell
by "YOUR ANSWER HERE", ``{exercise}`` boxes turned into plain Markdown, and the check that what
is left of a code cell is still valid Python. :mod:`course_lib.tools.assignments` applies these
to every cell of a chapter."""
from __future__ import annotations

import re

from .exercise_cells import BEGIN_SOLUTION, END_SOLUTION, marker as _marker

BEGIN_HIDDEN_TESTS = "### BEGIN HIDDEN TESTS"
END_HIDDEN_TESTS = "### END HIDDEN TESTS"
CODE_STUB = "raise NotImplementedError()"
MARKDOWN_STUB = "YOUR ANSWER HERE"


class AssignmentError(ValueError):
    """A notebook or a request the builder cannot handle; the message says why."""


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
                raise AssignmentError(
                    f"{where}, line {number}: a BEGIN marker inside an open "
                    f"region (missing {END_SOLUTION if state == 'solution' else END_HIDDEN_TESTS}?)"
                )
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
                raise AssignmentError(f"{where}, line {number}: {line.strip()!r} without its BEGIN "
                                      "marker")
            state = None
        elif state is None:
            out.append(line)
    if state is not None:
        raise AssignmentError(f"{where}: "
                              f"{BEGIN_SOLUTION if state == 'solution' else BEGIN_HIDDEN_TESTS} is "
                              "never closed")
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


def check_python(source: str, where: str) -> None:
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
        raise AssignmentError(f"{where}: the student version is not valid Python ({e.msg}, line "
                              f"{e.lineno}); put {BEGIN_SOLUTION} / {END_SOLUTION} inside a "
                              "function body, indented like the body") from None
