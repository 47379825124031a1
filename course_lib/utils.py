"""Small helpers every chapter's setup cell uses: seeds, devices, the ignore index, a silenced
standard error. The conventions the config classes share live in :mod:`course_lib.config`."""
from __future__ import annotations

import contextlib
import numbers
import os
import random

import numpy as np
import torch

DEFAULT_SEED = 1337  # the seed of every chapter, preset and command-line run
IGNORE_INDEX = -100  # a target equal to this is left out of the loss (PyTorch's default)


def seed_everything(seed: int = DEFAULT_SEED) -> None:
    """Seed Python, NumPy and PyTorch (CPU and GPU) so that a chapter reproduces its outputs."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)  # also seeds CUDA


def device_available(device: str) -> bool:
    if device == "cpu":
        return True
    if device == "cuda":
        return torch.cuda.is_available()
    if device == "mps":
        return getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available()
    return False


def pick_device() -> str:
    """'cuda' when a GPU is available (e.g. on Colab), else 'mps' on Apple silicon, else 'cpu'."""
    return next(d for d in ("cuda", "mps", "cpu") if device_available(d))


def check_device(device: str | None) -> str:
    """``device`` if this machine has it, else a ValueError that says what it does have; with no
    ``device`` (None or ""), the best one this machine has (:func:`pick_device`)."""
    if not device:
        return pick_device()
    if device not in ("cpu", "cuda", "mps"):
        raise ValueError(f"unknown device {device!r}: choose cpu, cuda or mps")
    if not device_available(device):
        have = [d for d in ("cuda", "mps", "cpu") if device_available(d)]
        raise ValueError(f"device {device!r} is not available on this machine (available: {', '.join(have)}); "
                         f"leave --device out to use {pick_device()}")
    return device


MAX_SEED = 2**63 - 1  # torch.manual_seed takes a 64-bit integer


def check_seed(seed) -> int:
    """``seed`` if it is an integer torch can seed with, else a ValueError that gives the range."""
    if not isinstance(seed, numbers.Integral) or isinstance(seed, bool) or not 0 <= seed <= MAX_SEED:
        raise ValueError(f"seed must be an integer in [0, {MAX_SEED}] (2**63 - 1), got {seed!r}")
    return int(seed)


class TooLargeError(ValueError):
    """A model (or other tensor) larger than this machine's memory, refused before allocating."""


def physical_memory() -> int | None:
    """This machine's memory in bytes (None where the OS does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return None


def check_fits_in_memory(n_numbers: int, what: str, fix: str, bytes_per_number: int = 4) -> None:
    """A :class:`TooLargeError` naming ``what`` and ``fix`` when ``n_numbers`` float32 numbers
    need more than this machine's memory: said before allocating, instead of the allocator's
    traceback or the out-of-memory killer."""
    memory = physical_memory()
    needed = n_numbers * bytes_per_number
    if memory is not None and needed > memory:
        raise TooLargeError(f"{what} needs at least {n_numbers:,} numbers ({needed / 2**30:,.1f} GiB in float32), more "
                            f"than this machine's memory ({memory / 2**30:,.1f} GiB): {fix}")


@contextlib.contextmanager
def stderr_silenced():
    """Send whatever is written to the process's standard error (file descriptor 2) to /dev/null
    while the block runs. PyTorch's profiler library writes "profiler_start" and "profiler_stop"
    lines there from C++, where Python's ``sys.stderr`` cannot catch them (chapter 12)."""
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
