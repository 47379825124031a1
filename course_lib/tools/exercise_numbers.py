"""A Sphinx extension for the book: exercises are numbered per chapter ("Exercise 3.1").

sphinx-exercise numbers its boxes with Sphinx's figure counter, which, in a book whose table of
contents is not numbered, runs on across the whole book (chapter 3 started at "Exercise 7").
After Sphinx has assigned those numbers, this renumbers every page's exercises from 1, prefixed
with the chapter's number taken from its file name (``ch03_...`` -> 3.1, 3.2, ...); other pages
get 1, 2, .... Titles, solutions ("Solution to Exercise 3.1") and ``{numref}`` references all read
the same table, so they agree. Loaded from _config.yml (``sphinx: extra_extensions``).
"""
from __future__ import annotations

from pathlib import PurePosixPath

from .chapters import CHAPTER_NAME

FIGTYPE = "exercise"


def number_per_chapter(numbers: dict[str, tuple[int, ...]],
                       docname: str) -> dict[str, tuple[int, ...]]:
    """``{node id: book-wide number}`` of one page -> ``{node id: (chapter, k)}``, k = 1, 2, ...
    in the page's order (the book-wide numbers grow down the page)."""
    chapter = CHAPTER_NAME.match(PurePosixPath(docname).name)
    prefix = (int(chapter.group(1)),) if chapter else ()
    ordered = sorted(numbers, key=lambda node_id: numbers[node_id])
    return {node_id: prefix + (k,) for k, node_id in enumerate(ordered, start=1)}


def renumber(app, env) -> list[str]:
    changed = []
    for docname, by_type in env.toc_fignumbers.items():
        if by_type.get(FIGTYPE):
            new = number_per_chapter(by_type[FIGTYPE], docname)
            if new != by_type[FIGTYPE]:
                by_type[FIGTYPE] = new
                changed.append(docname)
    return changed


def setup(app):
    # after Sphinx's own collector (priority 500) has assigned the book-wide numbers
    app.connect("env-get-updated", renumber, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
