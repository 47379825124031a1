"""The one list of chapters and the one notebook executor, shared by the maintainer tools
(``book``), the instructor tools (``assignments``) and the tests.

The chapters are the ``chNN_*`` entries of ``_toc.yml``, in reading order. A folder of
notebooks handed out without the book (no ``_toc.yml`` beside it) is listed by file name.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

# the repository (when course_lib is used from a checkout)
ROOT = Path(__file__).resolve().parents[2]
CHAPTER_NAME = re.compile(r"^ch(\d+)_")


def _files(node) -> list[str]:
    """Every ``file:`` entry below a _toc.yml node, in reading order."""
    found = []
    if isinstance(node, dict):
        if "file" in node:
            found.append(node["file"])
        for key in ("parts", "chapters", "sections"):
            for child in node.get(key) or []:
                found.extend(_files(child))
    elif isinstance(node, list):
        for child in node:
            found.extend(_files(child))
    return found


def toc_entries(root: Path = ROOT) -> list[str]:
    """Every page of the book (without suffix, relative to the repository root), root first."""
    import yaml

    toc = yaml.safe_load((Path(root) / "_toc.yml").read_text())
    return [toc["root"]] + _files(toc)


def toc_chapters(root: Path = ROOT) -> list[str]:
    """The chapter notebooks listed in _toc.yml (``book/chNN_*``), in order, without suffix."""
    return [e for e in toc_entries(root) if CHAPTER_NAME.match(Path(e).name)]


def chapter_number(entry: str | Path) -> int:
    return int(CHAPTER_NAME.match(Path(entry).name).group(1))


def assignment_name(entry: str | Path) -> str:
    """``chNN`` (two digits) for a chapter notebook, else the file's stem: what the graders call
    its assignment (its folder, the prefix of its grade ids)."""
    found = CHAPTER_NAME.match(Path(entry).name)
    return f"ch{int(found.group(1)):02d}" if found else Path(entry).stem


def page_source(entry: str, root: Path = ROOT) -> Path | None:
    """The file behind a toc entry (.ipynb or .md), or None if there is none yet."""
    for suffix in (".ipynb", ".md"):
        path = Path(root) / f"{entry}{suffix}"
        if path.exists():
            return path
    return None


def chapter_notebooks(book_dir: str | Path | None = None) -> dict[int, Path]:
    """Chapter number -> notebook: from ``_toc.yml`` beside ``book_dir`` (default: the book of
    the current folder, else the repository's), else every ``chNN_*.ipynb`` in the folder."""
    if book_dir is None:
        book_dir = Path("book") if Path("book").is_dir() else ROOT / "book"
    book_dir = Path(book_dir)
    if not book_dir.is_dir():
        raise FileNotFoundError(f"no book folder at {book_dir}: pass --book DIR (the folder of the "
                                "chapter notebooks)")
    root = book_dir.resolve().parent
    if (root / "_toc.yml").exists():
        paths = [root / f"{entry}.ipynb" for entry in toc_chapters(root)]
        paths = [p for p in paths if p.parent == book_dir.resolve() and p.exists()]
    else:
        paths = sorted(p for p in book_dir.iterdir() if CHAPTER_NAME.match(p.name)
                       and p.suffix == ".ipynb")
    found: dict[int, Path] = {}
    for path in paths:
        number = chapter_number(path)
        if number in found:
            raise ValueError(f"two notebooks for chapter {number}: {found[number].name} and "
                             f"{path.name}")
        found[number] = path
    return dict(sorted(found.items()))


_SKIP_TAG = "course-lib-skip-execution"  # set while executing, never stored


def _kernel_environment() -> dict[str, str]:
    """The reference numeric environment, with this checkout first on the kernel's import path: what
    is stored is what this course_lib prints, whichever copy `pip install -e` last pointed at."""
    from .numerics import reference_environment

    env = reference_environment()
    root = str(ROOT)  # the checkout holding this course_lib
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    return env


def execute_notebook(path: str | Path, timeout: int = 600, kernel_name: str = "python3",
                     allow_errors: bool = False, store: bool = False,
                     env: dict[str, str] | None = None):
    """Run a notebook top to bottom in its own folder (as Jupyter Book and nbval do) and return
    it executed; with ``store``, write its outputs back into the file. The kernel runs in the
    reference numeric environment (:mod:`course_lib.tools.numerics`), as nbval's kernels do, so
    that what is stored is what every host checks. Streams are coalesced, which also folds
    progress-bar carriage returns: the page shows the final bar only. Cells that start with
    ``# NBVAL_SKIP`` (they need the network or a GPU) are not run, as nbval does not run them: they
    are stored without outputs rather than with this machine's download errors. ``env``, when
    given, replaces the kernel's environment (the GPU lane runs chapters in the host's own)."""
    import nbformat
    from nbclient import NotebookClient

    path = Path(path)
    nb = nbformat.read(path, as_version=4)
    skipped = [c for c in nb.cells if c.cell_type == "code"
               and c.source.lstrip().startswith("# NBVAL_SKIP")]
    for cell in skipped:
        cell.outputs, cell.execution_count = [], None
        cell.metadata.setdefault("tags", []).append(_SKIP_TAG)
    NotebookClient(
        nb,
        timeout=timeout,
        kernel_name=kernel_name,
        allow_errors=allow_errors,
        coalesce_streams=True,
        skip_cells_with_tag=_SKIP_TAG,
        resources={"metadata": {"path": str(path.parent.resolve())}},
    ).execute(env=_kernel_environment() if env is None else env)
    for cell in skipped:
        cell.metadata["tags"].remove(_SKIP_TAG)
        if not cell.metadata["tags"]:
            del cell.metadata["tags"]
    if store:
        nb.metadata["kernelspec"] = {"display_name": "Python 3", "language": "python",
                                     "name": "python3"}
        nbformat.write(nb, path)
    return nb
