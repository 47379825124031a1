"""What the scripts of benchmarks/ share when they read their arguments and write their records, so
that they keep the command line's promise: a bad input is one line naming the problem and the fix,
and a non-zero exit (argparse's ``error``: status 2), before any work.

- Argument types: ``count`` (an integer >= 1), ``at_least(n)``, ``seed_number`` (what torch can seed
with),
  ``threads``, ``preset`` (a name of course_lib.presets), ``device`` (one this machine has).
- Records: a benchmark writes its JSON only when asked: ``--json PATH`` (or the script's ``--out`` /
  ``--record``), or ``--update-record`` for the shipped record in course_lib/records/ that the book
  reads. :func:`record_file` checks the path before any work (not a checkpoint, a device, a folder,
  an input: course_lib.utils.check_output_file); :class:`RecordFile` writes atomically, and writes a
  long run's progress only where it replaces no whole record (a new file, or one the run continues).

Not a script: the benchmarks import it (``sys.path`` holds ``benchmarks/`` once they run; the tests
load them with tests/benchmark_loader.py, which adds it).
"""
from __future__ import annotations

import argparse
import functools
import json
import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RECORDS = ROOT / "course_lib" / "records"
MAX_SEED = 2**63 - 1  # torch.manual_seed takes a 64-bit integer (course_lib.utils.MAX_SEED)


# --- argument types: argparse turns an ArgumentTypeError into "error: argument --X: <message>" ---


def at_least(low: int):
    """An argparse type: an integer >= ``low``."""
    def check(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be at least {low}, got {value}")
        return value

    check.__name__ = f"integer >= {low}"
    return check


count = at_least(1)  # repeats, steps, items, turns...
threads = at_least(1)  # torch.set_num_threads refuses 0 with a traceback


def seed_number(text: str) -> int:
    """An argparse type: a seed torch accepts, 0 to 2**63 - 1."""
    value = at_least(0)(text)
    if value > MAX_SEED:
        raise argparse.ArgumentTypeError(f"must be at most 2**63 - 1, got {value}")
    return value


def preset(text: str) -> str:
    """An argparse type: the name of a preset of course_lib.presets."""
    from course_lib.presets import PRESETS
    if text not in PRESETS:
        raise argparse.ArgumentTypeError(f"unknown preset {text!r}: choose one of "
                                         f"{', '.join(PRESETS)}")
    return text


def device(text: str) -> str:
    """An argparse type: cpu, cuda or mps, and one this machine has
    (course_lib.utils.check_device)."""
    from course_lib.utils import check_device
    try:
        return check_device(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def seed_list(text: str) -> list[int]:
    """An argparse type: comma-separated seeds, e.g. 0,1,2."""
    try:
        return [seed_number(s) for s in text.split(",")]
    except argparse.ArgumentTypeError as e:
        raise argparse.ArgumentTypeError(f"{text!r}: write seeds as 0,1,2 ({e})") from None


def named_checkpoint(what: str):
    """An argparse type: NAME=CKPT, a name and an existing checkpoint file; ``what`` says what
    NAME must be, in the one-line error."""
    def parse(text: str) -> tuple[str, Path]:
        name, sep, path = text.partition("=")
        if not sep or not name or not Path(path).is_file():
            raise argparse.ArgumentTypeError(f"expected NAME=CKPT with CKPT a file, got {text!r}: "
                                             f"give {what} and its chat-sft checkpoint")
        return name, Path(path)
    return parse


# --- records: written only when asked, checked before the work, never partial over whole ----------


def add_record_options(p: argparse.ArgumentParser, shipped: Path | None, option: str = "--json",
                       **kwargs) -> None:
    """``option`` FILE (where the record goes; none: the results are printed only) and, when the
    benchmark has a ``shipped`` record, ``--update-record`` to rewrite it."""
    p.add_argument(option, metavar="FILE",
                   help="write the record (JSON) to FILE; without it nothing is written", **kwargs)
    if shipped is not None:
        p.add_argument("--update-record", action="store_true",
                       help=f"write the shipped record {shipped.relative_to(ROOT)}, which the book "
                            "reads")


def record_file(p: argparse.ArgumentParser, args, shipped: Path | None, option: str = "--json",
                continues: bool = False, inputs=()) -> "RecordFile":
    """Where ``args`` ask the record to go (``option``'s FILE, or ``shipped`` with --update-record),
    checked now, before any work: a bad path is ``p.error``'s one line. ``continues``: the run
    extends the record already there (a resume, a store of keyed runs), so its progress may go
    there; else a partial record never replaces a whole one."""
    from course_lib.utils import check_output_file
    given = getattr(args, option.lstrip("-").replace("-", "_"))
    if getattr(args, "update_record", False):
        if given is not None:
            p.error(f"{option} {given} and --update-record name two files: give one")
        given = shipped
    if given is None:
        return RecordFile(None, option)
    if str(given) == "-":
        p.error(f"{option} -: a benchmark writes its record to a file; name one (the results are "
                "printed anyway)")
    try:
        check_output_file(given, inputs, option)
    except ValueError as e:
        p.error(str(e))
    return RecordFile(Path(given), option, continues)


class RecordFile:
    """A benchmark's record file (``path`` None: nowhere). :meth:`progress` after each finished
    piece of a long run, so a stopped run keeps what it finished, but only to a new file or one the
    run continues; :meth:`finish` at the end, always. Both write atomically."""

    def __init__(self, path: Path | None, option: str = "--json", continues: bool = False):
        self.path, self.option, self.continues = path, option, continues
        self.had_record = path is not None and os.path.exists(path)

    def __bool__(self) -> bool:
        return self.path is not None

    def read(self, default=None):
        """The record the file holds (``default`` when there is none)."""
        return json.loads(self.path.read_text()) if self and self.path.exists() else default

    def progress(self, record: dict) -> None:
        if self and (self.continues or not self.had_record):
            self._write(record)

    def finish(self, record: dict, say: bool = False) -> None:
        if self:
            self._write(record)
            if say:
                print(f"wrote {self.path}")

    def _write(self, record: dict) -> None:
        from course_lib.utils import write_text_atomic
        write_text_atomic(self.path, json.dumps(record, indent=1) + "\n", option=self.option)


@functools.cache
def code_commit() -> str | None:
    """The git commit the benchmark ran from, with "+changes" when its code (course_lib, benchmarks;
    the records it writes aside) differs from that commit; None outside a git checkout."""
    def git(*args):
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
    try:
        head = git("rev-parse", "--short", "HEAD")
        # a new file counts (a script not yet committed is a change), ignored ones do not
        changed = git("status", "--porcelain", "--untracked-files=normal", "--", "course_lib",
                      "benchmarks", ":!course_lib/records")
    except (OSError, subprocess.CalledProcessError):
        return None
    return head + ("+changes" if changed else "")
