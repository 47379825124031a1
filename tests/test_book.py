"""Every chapter listed in _toc.yml follows the book's conventions: it exists, starts with the
shared setup cell, uses course_lib, has exercises with checks in nbgrader markup, and is stored
executed (nbval, run by `make test`, then proves the stored outputs reproduce).
Also: no exact pin of torch or numpy (Colab brings its own)."""
from __future__ import annotations

import importlib
import re
import tomllib

import nbformat
import pytest

from course_lib.tools.chapters import ROOT, chapter_number, page_source, toc_chapters, toc_entries
from course_lib.tools import assignments
from course_lib.tools.book import SETUP_TAG, repository_url, setup_cell_source

CHAPTERS = toc_chapters()
EXERCISE_BOX = assignments.EXERCISE_BOX
SOLUTION_BOX = re.compile(r"^\s*(:{3,}|`{3,})\{solution\}\s*(\S+)", re.M)
EXERCISE_LABEL = re.compile(
    r"^\s*(:{3,}|`{3,})\{exercise\}.*\n(?:\s*:[\w-]+:.*\n)*?\s*:label:\s*(\S+)", re.M
)


def read(chapter: str):
    path = ROOT / f"{chapter}.ipynb"
    if not path.exists():
        pytest.fail(f"{chapter}.ipynb is listed in _toc.yml but does not exist")
    return nbformat.read(path, as_version=4)


def code_cells(nb):
    return [c for c in nb.cells if c.cell_type == "code"]


def tags(cell) -> list[str]:
    return cell.metadata.get("tags", [])


def skipped_by_nbval(cell) -> bool:
    return cell.source.lstrip().startswith("# NBVAL_SKIP") or "nbval-skip" in tags(cell)


def test_toc_lists_chapters_and_every_page_exists():
    assert CHAPTERS, "_toc.yml lists no chapter (book/chNN_*)"
    entries = toc_entries()
    assert len(entries) == len(set(entries)), "a page is listed twice in _toc.yml"
    missing = [e for e in entries if page_source(e) is None]
    assert not missing, f"listed in _toc.yml but missing: {missing}"
    numbers = [chapter_number(c) for c in CHAPTERS]
    assert numbers == sorted(numbers) and len(set(numbers)) == len(numbers), \
        f"chapters must appear once each, in order, in _toc.yml: {numbers}"


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_title_and_kernel(chapter):
    nb = read(chapter)
    nbformat.validate(nb)
    first = nb.cells[0]
    n = chapter_number(chapter)
    assert first.cell_type == "markdown" and first.source.startswith(f"# {n}. "), \
        f"{chapter}: the first cell must be a markdown title '# {n}. Title'"
    assert nb.metadata.get("kernelspec",
                           {}).get("name") == "python3", f"{chapter}: kernelspec must be python3"
    assert nb.metadata.get("language_info", {}).get("pygments_lexer") == "ipython3", (
        f"{chapter}: no language_info.pygments_lexer 'ipython3' in its metadata (written when a "
        f"kernel executes it): run `python -m course_lib.tools book execute {chapter}.ipynb`; "
        "without it `!` and `%` lines break the -W build"
    )


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_first_code_cell_is_the_shared_setup_cell(chapter):
    first = code_cells(read(chapter))[0]
    assert SETUP_TAG in tags(first), f"{chapter}: the first code cell must be tagged {SETUP_TAG!r}"
    assert first.source == setup_cell_source(repository_url(ROOT / "_config.yml")), (
        f"{chapter}: the setup cell differs from course_lib.book.setup_cell_source: run `python -m "
        "course_lib.tools book sync`"
    )
    others = [i for i, c in enumerate(code_cells(read(chapter))) if SETUP_TAG in tags(c)]
    assert others == [0], f"{chapter}: only the first code cell may be tagged {SETUP_TAG!r}"


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_uses_course_lib(chapter):
    cells = code_cells(read(chapter))[1:]
    assert any(
        re.search(r"^\s*(from course_lib[\w.]* import|import course_lib)", c.source, re.M)
        for c in cells
    ), (
        f"{chapter}: no cell after the setup cell imports from course_lib (the chapter should "
        "switch to the library)"
    )


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_exercises_have_solutions_in_nbgrader_markup_and_checks(chapter):
    nb = read(chapter)
    n = chapter_number(chapter)
    boxes = [c for c in nb.cells if c.cell_type == "markdown" and EXERCISE_BOX.search(c.source)]
    solutions = [c for c in nb.cells if assignments.has_solution(c)]
    checks = [c for c in nb.cells if assignments.is_check_cell(c)]
    assert boxes, f"{chapter}: no {{exercise}} box"
    assert solutions, f"{chapter}: no code cell with {assignments.BEGIN_SOLUTION}"
    assert checks, f"{chapter}: no check cell (chNN.check_...(...))"

    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        has_begin = assignments.BEGIN_SOLUTION in cell.source
        has_end = assignments.END_SOLUTION in cell.source
        assert has_begin == has_end, (f"{chapter}, cell {index}: BEGIN SOLUTION and END SOLUTION "
                                      "must come in pairs")
        if has_begin:
            # balanced, nested correctly, and still valid Python once the solution is removed
            assignments.strip_solution_code(cell.source, where=f"{chapter}, cell {index}")
            assignments._check_python(assignments.strip_solution_code(cell.source)[0],
                                      f"{chapter}, cell {index}")
            assert "hide-input" in tags(cell), (f"{chapter}, cell {index}: a solution cell must be "
                                                "tagged hide-input")

    # every solution cell is checked before the next exercise's solution
    order = ["S" if assignments.has_solution(c) else "C" for c in nb.cells
             if assignments.has_solution(c) or assignments.is_check_cell(c)]
    assert re.fullmatch(r"(S+C+)+", "".join(order)), (
        f"{chapter}: each exercise's solution cell(s) must be followed by a check cell (order "
        f"found: {''.join(order)})"
    )

    # the checks exist in course_lib.exercises.chNN
    module = importlib.import_module(f"course_lib.exercises.ch{n:02d}")
    for cell in checks:
        for name in assignments.checked_names(cell):
            assert hasattr(module,
                           name), f"{chapter}: course_lib.exercises.ch{n:02d} has no {name}()"

    # worked solutions are tagged (removed from student notebooks) and refer to an exercise of the
    # chapter
    labels = [m.group(2) for c in boxes for m in EXERCISE_LABEL.finditer(c.source)]
    assert len(labels) == len(boxes), f"{chapter}: every {{exercise}} box needs a :label:"
    for cell in nb.cells:
        for m in SOLUTION_BOX.finditer(cell.source) if cell.cell_type == "markdown" else []:
            assert "solution" in tags(cell), (f"{chapter}: a {{solution}} cell must be tagged "
                                              "'solution'")
            assert m.group(2) in labels, (f"{chapter}: {{solution}} {m.group(2)} refers to no "
                                          "exercise of the chapter")


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_stored_executed_with_outputs(chapter):
    nb = read(chapter)
    counts = []
    for index, cell in enumerate(code_cells(nb)):
        if not cell.source.strip() or skipped_by_nbval(cell):
            continue
        assert cell.execution_count is not None, (
            f"{chapter}: code cell {index} was never executed: run `python -m course_lib.tools "
            f"book execute {chapter}.ipynb`"
        )
        counts.append(cell.execution_count)
        for out in cell.outputs:
            if out.output_type == "error" and "raises-exception" not in tags(cell):
                pytest.fail(f"{chapter}: code cell {index} stores an error: {out.ename}: "
                            f"{out.evalue}")
    assert counts == sorted(counts) and len(set(counts)) == len(counts), \
        f"{chapter}: execution counts are not increasing: execute the chapter top to bottom"
    assert any(c.outputs for c in code_cells(nb)), f"{chapter}: no stored outputs"
    assert "course_lib is ready" in "".join(o.get("text", "") for o in code_cells(nb)[0].outputs), \
        f"{chapter}: the setup cell's output is missing"
    for index, cell in enumerate(nb.cells):
        if assignments.is_check_cell(cell):
            text = "".join(o.get("text", "") for o in cell.outputs)
            assert "Correct!" in text, (f"{chapter}, cell {index}: the stored check output has no "
                                        "'Correct!'")


CODE_WIDTH = 85  # characters the theme shows in a code cell before a scroll bar cuts the line
FENCE = re.compile(r"^\s*(`{3,}|~{3,}|:{3,})(.*)$")


def code_lines(cell):
    """The lines a page shows as code: a code cell's, or a Markdown cell's fenced code blocks
    (not the prose inside a ```{note} or :::{exercise} directive)."""
    if cell.cell_type == "code":
        return cell.source.splitlines()
    lines, open_fences = [], []  # [(marker, is_code)], innermost last
    for line in cell.source.splitlines():
        m = FENCE.match(line)
        if m and open_fences and m.group(1) == open_fences[-1][0] and not m.group(2).strip():
            open_fences.pop()
        elif m:  # an opening fence: ```python is code, ```{note} and :::{exercise} are not
            open_fences.append((m.group(1),
                                not m.group(2).strip().startswith("{") and m.group(1)[0] != ":"))
        elif open_fences and open_fences[-1][1]:
            lines.append(line)
    return lines


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_code_fits_the_page(chapter):
    """At the theme's width a longer line is cut behind a scroll bar: wrap it."""
    long = [f"cell {i}: {len(line)} characters: {line.strip()[:50]}..."
            for i, cell in enumerate(read(chapter).cells) for line in code_lines(cell)
            if len(line) > CODE_WIDTH]
    assert not long, f"{chapter}: wrap these lines to {CODE_WIDTH} characters:\n" + "\n".join(long)


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_outputs_leak_no_local_paths(chapter):
    """The website shows the stored outputs: no absolute path of the machine that ran them."""
    leaks = re.compile(r"(/work/|/root/|/home/\w+|site-packages|/tmp/)")
    for index, cell in enumerate(code_cells(read(chapter))):
        for out in cell.outputs:
            text = out.get("text", "") + str(out.get("data", {}).get("text/plain", "")) + \
                "\n".join(out.get("traceback", []))
            m = leaks.search(text)
            assert m is None, (f"{chapter}: code cell {index} output shows a local path "
                               f"({m.group(0)}...)")


def _requirement_lines() -> dict[str, list[str]]:
    found = {"requirements.txt": [], "pyproject.toml": []}
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line and not line.startswith("-"):
            found["requirements.txt"].append(line)
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    found["pyproject.toml"] += project.get("dependencies", [])
    for extra in project.get("optional-dependencies", {}).values():
        found["pyproject.toml"] += extra
    return found


def test_torch_and_numpy_are_never_pinned_exactly():
    for where, lines in _requirement_lines().items():
        for req in lines:
            name = re.match(r"^\s*([A-Za-z0-9_.\-]+)", req).group(1).lower()
            if name in ("torch", "numpy"):
                assert not re.search(r"(===?|~=)", req), \
                    f"{where}: {req!r} pins {name}; use an open range (Colab brings its own {name})"
                assert not re.search(r"<", req), (
                    f"{where}: {req!r} caps {name}; Colab may have a newer one"
                )
    assert any(r.startswith("torch")
               for r in _requirement_lines()["pyproject.toml"]), "torch must be a dependency"


def test_intro_maps_every_course_lib_module():
    """book/intro.md has a map of course_lib: every module it names exists, and every module is in
    it."""
    import pkgutil

    import course_lib

    intro = (ROOT / "book" / "intro.md").read_text()
    named = set(re.findall(r"`course_lib\.(\w+)`", intro))
    modules = {m.name for m in pkgutil.iter_modules(course_lib.__path__)
               if not m.name.startswith("_")}
    assert named - modules == set(), ("intro.md names modules that do not exist: "
                                      f"{sorted(named - modules)}")
    assert modules - named == set(), ("add these modules to the map in book/intro.md: "
                                      f"{sorted(modules - named)}")


def test_instructor_guide_suggests_an_assignment_per_chapter_naming_its_exercises():
    guide = (ROOT / "book" / "instructor_guide.md").read_text()
    suggested = {int(n): " ".join(text.split()) for n, text in
                 re.findall(r"\*\*Chapter (\d+), [^*]+\*\*\s+Exercises:(.*?)\.\s+Written part",
                            guide, re.S)}
    for chapter in CHAPTERS:
        n = chapter_number(chapter)
        assert n in suggested, ("book/instructor_guide.md has no suggested assignment for chapter "
                                f"{n}")
        named = re.findall(r"\*(.+?)\*", suggested[n])
        nb = read(chapter)
        titles = [" ".join(m.group(1).split()) for c in nb.cells if c.cell_type == "markdown"
                  for m in re.finditer(r"^\s*(?::{3,}|`{3,})\{exercise\}\s*(.*)$", c.source, re.M)]
        assert named == titles, (f"instructor_guide.md, chapter {n}: names exercises {named}, the "
                                 f"chapter has {titles}")


def test_references_credit_the_corpora_and_the_papers():
    refs = (ROOT / "book" / "references.md").read_text()
    # corpora, lecture
    for needed in ["karpathy/char-rnn", "karpathy/makemore", "MIT", "nanoGPT", "kCc8FmEb1nY",
                   "1706.03762", "language_models_are_unsupervised_multitask_learners",
                   "2005.14165",  # papers
                   "2001.08361", "1607.06450", "1512.03385", "1711.05101", "1904.09751",
                   "1508.07909"]:
        assert needed in refs, f"book/references.md does not credit {needed!r}"
    assert "book/references" in toc_entries(), "book/references.md is not in _toc.yml"


def test_pages_install_from_the_repository_url_of_config():
    """The repository URL lives in _config.yml; a page that spells out `pip install git+...` must
    use it."""
    url = repository_url(ROOT / "_config.yml")
    for entry in toc_entries():
        source = page_source(entry)
        if source is None or source.suffix != ".md":
            continue
        for found in re.findall(r"git\+(https?://[^\s\"'`)>]+)", source.read_text()):
            assert found.rstrip("/") == url, (f"{source.name} installs from {found}, but "
                                              f"_config.yml says {url}")


def test_exercises_are_numbered_per_chapter():
    """The Sphinx extension of _config.yml renumbers sphinx-exercise's book-wide counter."""
    from course_lib.tools.exercise_numbers import FIGTYPE, number_per_chapter, renumber

    assert number_per_chapter({"b": (8,), "a": (7,), "c": (12,)},
                              "book/ch03_self_attention_trick") == \
        {"a": (3, 1), "b": (3, 2), "c": (3, 3)}
    assert number_per_chapter({"x": (20,)}, "book/instructor_guide") == {"x": (1,)}
    env = type("Env", (), {})()
    env.toc_fignumbers = {"book/ch01_x": {FIGTYPE: {"e1": (1,)}},
                          "book/ch02_y": {FIGTYPE: {"e2": (2,)}},
                          "book/intro": {"figure": {"f": (3,)}}}
    assert renumber(None, env) == ["book/ch01_x", "book/ch02_y"]
    assert env.toc_fignumbers["book/ch02_y"][FIGTYPE] == {"e2": (2, 1)}
    assert env.toc_fignumbers["book/intro"] == {"figure": {"f": (3,)}}, "figures keep their numbers"
    assert "course_lib.tools.exercise_numbers" in (ROOT / "_config.yml").read_text()
