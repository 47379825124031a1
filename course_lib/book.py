"""Maintainer tools for the book's notebooks: the shared setup cell, and executing a
chapter so that its stored outputs are the ones nbval checks.

    python -m course_lib.book sync      # rewrite every chapter's setup cell from _config.yml
    python -m course_lib.book execute book/ch01_text_and_tokens.ipynb

Needs the book tooling (``pip install -r requirements.txt``).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SETUP_TAG = "setup"
SEED = 1337


def repository_url(config_path: Path = ROOT / "_config.yml") -> str:
    """The course repository's URL: set once, in _config.yml (repository.url)."""
    import yaml

    config = yaml.safe_load(config_path.read_text())
    return config["repository"]["url"].rstrip("/")


def setup_cell_source(url: str, seed: int = SEED) -> str:
    return f'''\
# Setup (the same in every chapter): install course_lib if it is missing (e.g. on Colab),
# import it, pick a device and seed every random number generator.
import importlib.util, os
if importlib.util.find_spec("course_lib") is None:
    course_lib_source = os.environ.get("COURSE_LIB_SOURCE", "git+{url}")
    %pip install -q {{course_lib_source}}
import course_lib
device = course_lib.pick_device()
course_lib.seed_everything({seed})
print("course_lib is ready; device:", device)'''


def chapters(book_dir: Path = ROOT / "book") -> list[Path]:
    return sorted(book_dir.glob("*.ipynb"))


def sync_setup_cells(paths=None, url: str | None = None) -> list[Path]:
    """Make the first code cell of every chapter the setup cell; returns the notebooks changed."""
    import nbformat

    url = url or repository_url()
    changed = []
    for path in paths or chapters():
        nb = nbformat.read(path, as_version=4)
        source = setup_cell_source(url)
        first = next((c for c in nb.cells if c.cell_type == "code"), None)
        if first is None or SETUP_TAG not in first.metadata.get("tags", []):
            raise ValueError(f"{path}: the first code cell must be the setup cell, tagged {SETUP_TAG!r}")
        if first.source != source:
            first.source = source
            nbformat.write(nb, path)
            changed.append(Path(path))
    return changed


def execute(path: Path, timeout: int = 600) -> None:
    """Run a notebook top to bottom in book/ (as Jupyter Book and nbval do) and store its outputs.
    Streams are coalesced, which also folds progress-bar carriage returns: the page shows the
    final bar only."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=timeout, kernel_name="python3", coalesce_streams=True,
                   resources={"metadata": {"path": str(Path(path).parent)}}).execute()
    nb.metadata["kernelspec"] = {"display_name": "Python 3", "language": "python", "name": "python3"}
    nbformat.write(nb, path)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m course_lib.book", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("sync", help="rewrite every chapter's setup cell from _config.yml")
    p = sub.add_parser("execute", help="execute notebooks and store their outputs")
    p.add_argument("paths", nargs="*", type=Path, help="default: every chapter in book/")
    args = parser.parse_args(argv)
    if args.command == "sync":
        for path in sync_setup_cells():
            print(f"updated {path}")
        return 0
    for path in args.paths or chapters():
        print(f"executing {path} ...", flush=True)
        execute(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
