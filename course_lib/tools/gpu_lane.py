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
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

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


def _progress_counts(output: str) -> dict[str, int]:
    """What pytest's progress lines (".F.s.. [ 12%]") show so far: the counts of a run stopped
    before its summary line."""
    marks = "".join(line.split("[")[0].strip() for line in output.splitlines()
                    if re.fullmatch(r"[.FEsxX]+\s*(\[\s*\d+%\])?", line.strip()))
    names = {".": "passed", "F": "failed", "E": "error", "s": "skipped", "x": "xfailed",
             "X": "xpassed"}
    return {names[m]: marks.count(m) for m in names if marks.count(m)}


def run_unit_tests(workers: int, time_limit: float | None = None) -> dict:
    """The unit tests with CUDA visible: the CLI's default device is the GPU. With ``time_limit``
    (seconds) a run still going then is stopped, and the counts are those its progress showed."""
    command = [sys.executable, "-m", "pytest", str(ROOT / "tests"), "-m", "not slow or gpu", "-q",
               "-p", "no:cacheprovider", "-rfE"]
    if workers > 1:
        command += ["-n", str(workers), "--dist", "loadfile"]
    start = time.perf_counter()
    try:
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True,
                              timeout=time_limit)
        exit_code, output, timed_out = done.returncode, done.stdout, False
    except subprocess.TimeoutExpired as e:
        output = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        exit_code, timed_out = None, True
    failures = [line for line in output.splitlines() if line.startswith(("FAILED", "ERROR"))]
    counts = _progress_counts(output) if timed_out else _pytest_counts(output)
    return {"exit": exit_code, "seconds": round(time.perf_counter() - start, 1),
            "counts": counts, "failures": failures, "timed_out": timed_out}


def _first_error(error: Exception) -> str:
    # without the terminal colours of IPython's tracebacks
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(error)).strip().splitlines()
    named = [line for line in text if re.match(r"^\w*(Error|Exception|Interrupt)\b", line)]
    return (named[-1] if named else (text[-1] if text else type(error).__name__))[:200]


STOPPED = "stopped unfinished by the lane's time limit"

# The child process that executes one chapter: its last line on stderr is the first error.
_EXECUTE = ("import os, sys\n"
            "from course_lib.tools.chapters import execute_notebook\n"
            "from course_lib.tools.gpu_lane import _first_error\n"
            "try:\n"
            "    execute_notebook(sys.argv[1], timeout=int(sys.argv[2]), env=dict(os.environ))\n"
            "except Exception as e:\n"
            "    print('\\n' + _first_error(e), file=sys.stderr)\n"
            "    sys.exit(1)\n")


def execute_chapter(path, timeout: int, env: dict, time_left: float | None) -> str | None:
    """Execute one chapter in a child process of its own session (its kernel goes with it when
    the lane's time runs out); None when it ran to the end, else its first error, one line."""
    process = subprocess.Popen([sys.executable, "-c", _EXECUTE, str(path), str(timeout)],
                               cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        _, err = process.communicate(timeout=time_left)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        return STOPPED
    if process.returncode == 0:
        return None
    lines = err.strip().splitlines()
    return (lines[-1] if lines else f"exit status {process.returncode}")[:200]


def run_chapters(numbers: list[int] | None, timeout: int, jobs: int = 1,
                 time_limit: float | None = None) -> list[dict]:
    """Every chapter (or those of ``numbers``) executed on the GPU, outputs not compared, ``jobs``
    at a time (each kernel then gets ``cpu_count // jobs`` threads). With ``time_limit`` (seconds
    from now) a chapter not started by then is not run, and one still running is stopped."""
    env = dict(os.environ)  # the host's own settings, not the reference CPU environment
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    if jobs > 1:
        env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // jobs))
    end = None if time_limit is None else time.monotonic() + time_limit
    chosen = [(n, p) for n, p in chapter_notebooks(ROOT / "book").items()
              if not numbers or n in numbers]

    def run(number, path):
        result = {"chapter": number, "name": path.stem, "seconds": 0.0}
        left = None if end is None else end - time.monotonic()
        if left is not None and left <= 0:
            return {**result, "error": None, "not_run": "the lane's time limit came first"}
        start = time.perf_counter()
        error = execute_chapter(path, timeout, env, left)
        result["seconds"] = round(time.perf_counter() - start, 1)
        if error == STOPPED:  # not a failure of the chapter: the lane ran out of time
            return {**result, "error": None, "not_run": STOPPED}
        return {**result, "error": error}

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        return list(pool.map(lambda chapter: run(*chapter), chosen))


def summary(device: str, unit: dict | None, chapters: list[dict] | None) -> list[str]:
    """The few lines printed at the end."""
    lines = [f"gpu-test on {device}"]
    if unit is not None:
        counts = (", ".join(f"{n} {word}" for word, n in unit["counts"].items())
                  or f"pytest exit {unit['exit']}")
        if unit.get("timed_out"):
            counts += " when its time limit stopped it (counts from its progress)"
        lines.append(f"unit tests (default device cuda, tests marked gpu included): {counts} in "
                     f"{unit['seconds']:.0f} s")
        lines += [f"  {line}" for line in unit["failures"][:10]]
    if chapters is not None:
        ran = [c for c in chapters if c["error"] is None and not c.get("not_run")]
        skipped = [c for c in chapters if c.get("not_run")]
        times = ", ".join(f"ch{c['chapter']:02d} {c['seconds']:.0f} s" for c in ran)
        late = (f"; {len(skipped)} not run or stopped unfinished by the time limit"
                if skipped else "")
        lines.append(f"chapters executed on the GPU: {len(ran)} of {len(chapters)} ran to the end "
                     f"({times}){late}")
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


def _positive(text: str) -> int:
    import argparse

    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number of at least 1, got {text!r}")
    return value


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
    unit = None if args.skip_unit else run_unit_tests(args.workers, time_limit=args.unit_time)
    chapters = (None if args.skip_chapters else
                run_chapters(numbers, args.timeout, jobs=args.jobs, time_limit=args.chapters_time))
    lines = summary(device, unit, chapters)
    # stdout stays pure JSON
    print("\n".join(lines), file=sys.stderr if args.json == "-" else sys.stdout)
    if args.json:  # atomically: a reader never sees half a file
        write_text_atomic(args.json,
                          json.dumps({"device": device, "torch": torch.__version__, "unit": unit,
                                                 "chapters": chapters}, indent=1) + "\n")
    failed = ((unit is not None and unit["exit"] != 0 and not unit.get("timed_out"))
              or any(c["error"] for c in chapters or []))
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
    p.add_argument("--jobs", type=_positive, default=1,
                   help="chapters executed at a time (default 1)")
    p.add_argument("--unit-time", type=_positive, default=None, metavar="SECONDS",
                   help="stop the unit tests after this long (default: no limit)")
    p.add_argument("--chapters-time", type=_positive, default=None, metavar="SECONDS",
                   help="stop executing chapters after this long; those not started are listed "
                        "as not run (default: no limit)")
    p.add_argument("--timeout", type=int, default=1200,
                   help="seconds per notebook cell (default 1200)")
    p.add_argument("--json", default="", metavar="FILE",
                   help="also write the details (device, counts, chapter "
                   "times) as JSON to FILE (-: standard output); never over a device or a folder")
    p.set_defaults(func=_cmd_lane)
    return p
