"""The CUDA lane (``make gpu-test``): the course run the way a reader with a GPU runs it (Colab's
GPU runtime), where ``pick_device`` chooses ``cuda``.

1. The unit tests (``pytest tests -m "not slow or gpu"``) with CUDA visible, so that every command
   that leaves ``--device`` out runs on the GPU, plus the tests marked ``gpu``
   (``tests/test_gpu.py``): bf16, fp16 with loss scaling, ``torch.compile``, the GPU speedrun
   preset, sampling from every kind of checkpoint, the KV cache of grouped-query attention, TF32
   scoped to the training run.
2. Every chapter executed top to bottom on the GPU without comparing its outputs (a GPU computes
   other last bits than the reference CPU environment the stored outputs come from, so the pinned
   CPU environment does not apply here), one chapter at a time, timed.

The summary is a few lines; ``--json FILE`` keeps the details (device, torch version, pass counts,
time and first error per chapter) for CONTRIBUTING.md's GPU lane section. On a machine without CUDA
the lane prints one line and exits 0: there is nothing it could check.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

from ..utils import check_output_file, write_text_atomic
from .chapters import ROOT, chapter_notebooks

SKIP_LINE = ("gpu-test: skipped: no CUDA GPU here (torch.cuda.is_available() is False); run it on "
             "a GPU machine")


def cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def _pytest_counts(output: str) -> dict[str, int]:
    """pytest's last summary line ("3 failed, 970 passed, 5 skipped in 12.3s") as counts."""
    lines = [line for line in output.strip().splitlines()
             if re.search(r"\d+ (passed|failed|error)", line)]
    counts = {}
    for number, word in re.findall(
        r"(\d+) (passed|failed|errors?|skipped|xfailed|xpassed|deselected)",
        lines[-1] if lines else "",
    ):
        counts[word.rstrip("s") if word.startswith("error") else word] = int(number)
    return counts


def run_unit_tests(workers: int) -> dict:
    """The unit tests with CUDA visible: the CLI's default device is the GPU."""
    command = [sys.executable, "-m", "pytest", str(ROOT / "tests"), "-m", "not slow or gpu", "-q",
               "-p", "no:cacheprovider", "-rfE"]
    if workers > 1:
        command += ["-n", str(workers), "--dist", "loadfile"]
    start = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    failures = [line for line in done.stdout.splitlines() if line.startswith(("FAILED", "ERROR"))]
    return {"exit": done.returncode, "seconds": round(time.perf_counter() - start, 1),
            "counts": _pytest_counts(done.stdout), "failures": failures}


def _first_error(error: Exception) -> str:
    text = str(error).strip().splitlines()
    named = [line for line in text if re.match(r"^\w*(Error|Exception|Interrupt)\b", line)]
    return (named[-1] if named else (text[-1] if text else type(error).__name__))[:200]


def run_chapters(numbers: list[int] | None, timeout: int) -> list[dict]:
    """Every chapter (or those of ``numbers``) executed on the GPU, outputs not compared."""
    from .chapters import execute_notebook

    env = dict(os.environ)  # the host's own settings, not the reference CPU environment
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    results = []
    for number, path in chapter_notebooks(ROOT / "book").items():
        if numbers and number not in numbers:
            continue
        start = time.perf_counter()
        try:
            execute_notebook(path, timeout=timeout, env=env)
            error = None
        except Exception as e:  # a failing cell: CellExecutionError, a timeout, a dead kernel
            error = _first_error(e)
        results.append({"chapter": number, "name": path.stem,
                        "seconds": round(time.perf_counter() - start, 1), "error": error})
    return results


def summary(device: str, unit: dict | None, chapters: list[dict] | None) -> list[str]:
    """The few lines printed at the end."""
    lines = [f"gpu-test on {device}"]
    if unit is not None:
        counts = (", ".join(f"{n} {word}" for word, n in unit["counts"].items())
                  or f"pytest exit {unit['exit']}")
        lines.append(f"unit tests (default device cuda, tests marked gpu included): {counts} in "
                     f"{unit['seconds']:.0f} s")
        lines += [f"  {line}" for line in unit["failures"][:10]]
    if chapters is not None:
        ran = [c for c in chapters if c["error"] is None]
        times = ", ".join(f"ch{c['chapter']:02d} {c['seconds']:.0f} s" for c in chapters)
        lines.append(f"chapters executed on the GPU: {len(ran)} of {len(chapters)} ran to the end "
                     f"({times})")
        lines += [f"  ch{c['chapter']:02d} stopped: {c['error']}" for c in chapters
                  if c["error"] is not None]
    return lines


def chapter_numbers(text: str) -> list[int] | None:
    """``--chapters 8,14`` as [8, 14]; empty: every chapter (None)."""
    if not text:
        return None
    try:
        return [int(n) for n in text.split(",")]
    except ValueError:
        raise ValueError("--chapters must be comma-separated chapter numbers, e.g. 8,14; got "
                         f"{text!r}") from None


def _cmd_lane(args) -> int:
    numbers = chapter_numbers(args.chapters)  # bad input is refused on any machine, before any work
    if args.json:
        # not a folder, a device or a read-only file (- : standard output)
        check_output_file(args.json)
    if not cuda_available():
        print(SKIP_LINE)
        return 0
    import torch

    device = (f"{torch.cuda.get_device_name(0)} (torch {torch.__version__}, CUDA "
              f"{torch.version.cuda})")
    unit = None if args.skip_unit else run_unit_tests(args.workers)
    chapters = None if args.skip_chapters else run_chapters(numbers, args.timeout)
    lines = summary(device, unit, chapters)
    # stdout stays pure JSON
    print("\n".join(lines), file=sys.stderr if args.json == "-" else sys.stdout)
    if args.json:  # atomically: a reader never sees half a file
        write_text_atomic(args.json,
                          json.dumps({"device": device, "torch": torch.__version__, "unit": unit,
                                                 "chapters": chapters}, indent=1) + "\n")
    failed = (unit is not None and unit["exit"] != 0) or any(c["error"] for c in chapters or [])
    return 1 if failed else 0


def add_parser(subparsers):
    """``gpu-lane``: the unit tests and every chapter on a CUDA GPU (``make gpu-test``)."""
    p = subparsers.add_parser("gpu-lane",
                              help="the unit tests and every chapter on a CUDA GPU (make gpu-test)")
    p.add_argument("--chapters", default="",
                   help="comma-separated chapter numbers (default: every chapter)")
    p.add_argument("--skip-unit", action="store_true", help="do not run the unit tests")
    p.add_argument("--skip-chapters", action="store_true", help="do not execute the chapters")
    p.add_argument("--workers", type=int, default=min(4, os.cpu_count() or 1),
                   help="pytest processes (default 4)")
    p.add_argument("--timeout", type=int, default=1200,
                   help="seconds per notebook cell (default 1200)")
    p.add_argument("--json", default="", metavar="FILE",
                   help="also write the details (device, counts, chapter "
                   "times) as JSON to FILE (-: standard output); never over a device or a folder")
    p.set_defaults(func=_cmd_lane)
    return p
