"""Maintainer tools for the book: the shared setup cell, executing a chapter so that its stored
outputs are the ones nbval checks, and the strict build of the website.

    python -m course_lib.tools book sync      # rewrite every chapter's setup cell from _config.yml
    python -m course_lib.tools book execute book/ch01_text_and_tokens.ipynb
                                              # in the pinned environment
    python -m course_lib.tools book build     # the website into _build/html (make book)

Needs the book tooling (``pip install -r requirements.txt``).
"""
from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from ..utils import DEFAULT_SEED
from . import op_fingerprints
from .chapters import ROOT, chapter_notebooks, execute_notebook
from .numerics import DESCRIPTION, unsupported_host

SETUP_TAG = "setup"


def repository_url(config_path: Path = ROOT / "_config.yml") -> str:
    """The course repository's URL: set once, in _config.yml (repository.url)."""
    import yaml

    config = yaml.safe_load(config_path.read_text())
    return config["repository"]["url"].rstrip("/")


def setup_cell_source(url: str, seed: int = DEFAULT_SEED) -> str:
    return f'''\
# Setup (the same in every chapter): install course_lib if it is missing
# (e.g. on Colab), import it, pick a device and seed every random number generator.
import importlib.util, os
if importlib.util.find_spec("course_lib") is None:
    course_lib_source = os.environ.get(
        "COURSE_LIB_SOURCE", "git+{url}")
    %pip install -q {{course_lib_source}}
import course_lib
device = course_lib.pick_device()
course_lib.seed_everything({seed})
print("course_lib is ready; device:", device)'''


def sync_setup_cells(paths=None, url: str | None = None) -> list[Path]:
    """Make the first code cell of every chapter the setup cell; returns the notebooks changed."""
    import nbformat

    url = url or repository_url()
    changed = []
    for path in paths or chapter_notebooks(ROOT / "book").values():
        nb = nbformat.read(path, as_version=4)
        source = setup_cell_source(url)
        first = next((c for c in nb.cells if c.cell_type == "code"), None)
        if first is None or SETUP_TAG not in first.metadata.get("tags", []):
            raise ValueError(f"{path}: the first code cell must be the setup cell, tagged "
                             f"{SETUP_TAG!r}")
        if first.source != source:
            first.source = source
            nbformat.write(nb, path)
            changed.append(Path(path))
    return changed


def _cmd_sync(args) -> int:
    for path in sync_setup_cells():
        print(f"updated {path}")
    return 0


def _cmd_execute(args) -> int:
    missing = [str(p) for p in args.paths if not Path(p).is_file() or Path(p).suffix != ".ipynb"]
    if missing:  # checked before executing anything
        raise ValueError(f"not a notebook file: {', '.join(missing)}; give chapter notebooks such "
                         "as book/ch01_text_and_tokens.ipynb (or none: every chapter)")
    reason = unsupported_host()
    if reason is not None:
        raise ValueError(f"{reason}: outputs stored here would not be the reference "
                         f"({DESCRIPTION}) that nbval checks on every host. Store chapters on an "
                         "x86-64 machine with AVX2.")
    new_reference = getattr(args, "new_reference", False)
    if new_reference and args.paths:
        raise ValueError("--new-reference re-executes every chapter on this host and records it as "
                         "the reference: give no notebook paths with it")
    if not new_reference:
        # a chapter stored on another host than the reference would fail bitwise there (make test's
        # mode)
        ref = op_fingerprints.reference()
        differ = op_fingerprints.differences(op_fingerprints.host_fingerprints(), ref)
        if differ:
            raise ValueError(
                f"this host computes {len(differ)} kernel fingerprints otherwise than "
                f"the reference host ({ref['cpu']}; python -m course_lib.tools "
                "fingerprints names them), so chapters stored here would not "
                "reproduce there: store them on a host like it, or re-execute every chapter here "
                "with `python -m course_lib.tools book execute --new-reference`"
            )
    for path in args.paths or chapter_notebooks(ROOT / "book").values():
        print(f"executing {path} ...", flush=True)
        execute_notebook(path, store=True)
    if new_reference:
        recorded = op_fingerprints.record_reference()
        print(f"recorded this host ({recorded['cpu']}) as the reference: "
              f"{op_fingerprints.REFERENCE_RECORD}")
    return 0


def build_command(root: Path = ROOT) -> list[str]:
    """The website's build, as `make book` and tests/test_website.py run it: jupyter-book 1.x with
    every Sphinx warning an error (-W), all of them reported before it fails (--keep-going)."""
    return [sys.executable, "-c", "from jupyter_book.cli.main import main; main()",
            "build", "-W", "--keep-going", str(root)]


def _cmd_build(args) -> int:
    code = subprocess.call(build_command(), cwd=ROOT)
    if code == 0:
        print(f"The website is in {ROOT / '_build' / 'html' / 'index.html'}")
    return code


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Add ``book sync`` / ``book execute`` / ``book build`` to the tools' command line."""
    p = subparsers.add_parser(
        "book",
        help="maintain the book: setup cells, stored outputs, the website's build",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = p.add_subparsers(dest="book_command", required=True)
    sub.add_parser("sync", help="rewrite every chapter's setup cell from "
                                "_config.yml").set_defaults(func=_cmd_sync)
    e = sub.add_parser("execute", help="execute notebooks and store their outputs")
    e.add_argument("paths", nargs="*", type=Path, help="default: every chapter of _toc.yml")
    e.add_argument("--new-reference", action="store_true",
                   help="on a host other than the reference: re-execute every chapter, then record "
                        "this host as the reference (course_lib/records/numerics_reference.json)")
    e.set_defaults(func=_cmd_execute)
    sub.add_parser("build", help="build the website into _build/html, every warning an error") \
        .set_defaults(func=_cmd_build)
    return p
