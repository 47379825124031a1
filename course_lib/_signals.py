"""Ctrl-C: on the command line, one line and exit status 130 at any moment; in training, a stop
at the next step boundary (:class:`StopAtStepBoundary`); and the test hook that lets a test send
the signal at a chosen moment whatever the machine's speed.

Stdlib only: ``course_lib/__init__.py`` installs :func:`exit_quietly_on_ctrl_c` before it imports
torch, when the package is being started as ``python -m course_lib``.
"""
from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

INTERRUPTED = 128 + signal.SIGINT  # 130: the exit status of a program stopped by Ctrl-C
PAUSE_ENV = "COURSE_LIB_TEST_PAUSE_AT"  # tests only: see CONTRIBUTING.md ("Testing Ctrl-C")
_reached: dict[str, int] = {}


def started_as_cli() -> bool:
    """True while Python locates the package for ``python -m course_lib`` (it then sets
    ``sys.argv[0]`` to "-m" until the module runs); not for ``course_lib.tools``, which keeps
    Python's own Ctrl-C."""
    command = getattr(sys, "orig_argv", [])
    return (sys.argv[:1] == ["-m"]
            and any(a == "-m" and b == "course_lib" for a, b in zip(command, command[1:])))


def exit_quietly_on_ctrl_c() -> None:
    """Until the CLI's ``main`` takes over: Ctrl-C prints one line and exits with status 130
    instead of a traceback from the middle of ``import torch``. A Ctrl-C that this process
    was told to ignore (a background job of a non-interactive shell) stays ignored."""
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _exit_at_start_up)


def _exit_at_start_up(signum, frame) -> None:
    print("interrupted (Ctrl-C) while starting: nothing was written", file=sys.stderr, flush=True)
    raise SystemExit(INTERRUPTED)


def exit_quietly_on_ctrl_c_while_exiting(what: str) -> None:
    """Once the command has returned: a Ctrl-C while Python shuts down (torch's exit hooks, the
    finalizers) prints one line saying ``what`` (e.g. that the run is saved) and exits with
    status 130 at once, instead of a traceback from the middle of an exit hook. Only for a real
    ``python -m course_lib`` process: it ends the process."""
    if (signal.getsignal(signal.SIGINT) is signal.SIG_IGN
        or threading.current_thread() is not threading.main_thread()):
        return

    def stop(signum, frame):
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError, RuntimeError):  # a closed stream, or one being written
                pass
        os.write(2, f"interrupted (Ctrl-C) while exiting: {what}\n".encode())
        os._exit(INTERRUPTED)

    signal.signal(signal.SIGINT, stop)


def pause_point(name: str) -> None:
    """A test hook, inert unless ``COURSE_LIB_TEST_PAUSE_AT`` names this point ("step", or
    "step:25" for its 25th visit): then print ``paused at NAME`` and wait (up to a minute) for
    a signal, which goes to the handler in force here, exactly as if it had arrived during the
    work that follows. So a test interrupts a chosen phase on a fast machine and a slow one
    alike."""
    wanted = os.environ.get(PAUSE_ENV)
    if not wanted or wanted.partition(":")[0] != name:
        return
    _reached[name] = _reached.get(name, 0) + 1
    if _reached[name] != int(wanted.partition(":")[2] or 1):
        return
    previous, got = signal.getsignal(signal.SIGINT), []

    def forward(signum, frame):
        got.append(signum)
        signal.signal(signal.SIGINT, previous)
        if callable(previous):
            previous(signum, frame)

    signal.signal(signal.SIGINT, forward)
    print(f"paused at {wanted}", flush=True)
    deadline = time.monotonic() + 60
    try:
        while not got and time.monotonic() < deadline:
            time.sleep(0.005)
    finally:
        if not got:
            signal.signal(signal.SIGINT, previous)


class TrainingInterrupted(KeyboardInterrupt):
    """Raised by :meth:`Trainer.train` after Ctrl-C (or SIGTERM) stopped it at a step boundary.
    ``signum`` is the signal; ``saved`` the checkpoint written, if any."""

    def __init__(self, message: str, signum: int, saved: Path | None):
        super().__init__(message)
        self.signum, self.saved = signum, saved


class StopAtStepBoundary:
    """While active (in the main thread), the first Ctrl-C or SIGTERM only sets ``requested``:
    the training loop finishes the step under way and stops cleanly (the Trainer then saves and
    raises :class:`TrainingInterrupted`). A second Ctrl-C interrupts at once, as usual.

    Why: a KeyboardInterrupt lands wherever the program is, nearly always inside forward,
    backward or ``optimizer.step()``, after the step drew its batch and maybe after it
    updated half of the weights. Nothing consistent can be saved from there.
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __enter__(self) -> "StopAtStepBoundary":
        self.requested: int | None = None
        self._previous = {}
        if threading.current_thread() is threading.main_thread():
            for sig in self.SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum, frame) -> None:
        self.requested = signum
        signal.signal(signum, self._previous[signum])  # a second press acts at once

    def __exit__(self, *exc) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
