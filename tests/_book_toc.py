"""The book's table of contents, read from _toc.yml: what the website, Colab, instructor and
browser tests iterate over (never a fixed list of chapters)."""
from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
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
    toc = yaml.safe_load((root / "_toc.yml").read_text())
    return [toc["root"]] + _files(toc)


def toc_chapters(root: Path = ROOT) -> list[str]:
    """The chapter notebooks listed in _toc.yml (``book/chNN_*``), in order, without suffix."""
    return [e for e in toc_entries(root) if CHAPTER_NAME.match(Path(e).name)]


def chapter_number(entry: str) -> int:
    return int(CHAPTER_NAME.match(Path(entry).name).group(1))


def page_source(entry: str, root: Path = ROOT) -> Path | None:
    """The file behind a toc entry (.ipynb or .md), or None if there is none yet."""
    for suffix in (".ipynb", ".md"):
        path = root / f"{entry}{suffix}"
        if path.exists():
            return path
    return None
