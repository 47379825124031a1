"""Small helpers every chapter's setup cell uses: seeds, devices, the ignore index, a silenced
standard error; and the one safe way to write a file the user names (checked before any work,
written atomically). The conventions the config classes share live in :mod:`course_lib.config`."""
from __future__ import annotations

import contextlib
import numbers
import os
import random
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

try:
    import resource  # Unix only: the address-space limit (ulimit -v)
except ImportError:  # Windows
    resource = None

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
        return (getattr(torch.backends, "mps", None) is not None
                and torch.backends.mps.is_available())
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
        raise ValueError(f"device {device!r} is not available on this machine (available: "
                         f"{', '.join(have)}); leave --device out to use {pick_device()}")
    return device


MAX_SEED = 2**63 - 1  # torch.manual_seed takes a 64-bit integer


def check_seed(seed) -> int:
    """``seed`` if it is an integer torch can seed with, else a ValueError that gives the range."""
    if (not isinstance(seed, numbers.Integral) or isinstance(seed, bool)
        or not 0 <= seed <= MAX_SEED):
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


def _read_int(path: str, field: str | None = None) -> int | None:
    """An integer from a file of /proc or /sys (``field``: the value of ``field:`` in it, in kB), or
    None where the file, the field or a number is missing ("max": no limit)."""
    try:
        text = Path(path).read_text()
    except OSError:
        return None
    if field is not None:
        found = [line.split()[1:2] for line in text.splitlines() if line.startswith(field + ":")]
        return int(found[0][0]) * 1024 if found and found[0] and found[0][0].isdigit() else None
    return int(text.strip()) if text.strip().isdigit() else None


def available_memory() -> tuple[int, str] | None:
    """The memory this process can still allocate, in bytes, and what bounds it: the least of the
    machine's available memory (Linux's MemAvailable, else its physical memory), what is left
    under its cgroup's memory limit (a container, a CI runner) and what is left of its address
    space under ``ulimit -v``. None where the OS says none of these. The total memory is no
    bound: a check against it passed a batch that then failed to allocate (review 2026-11-28)."""
    room = []
    free = _read_int("/proc/meminfo", "MemAvailable")
    if free is not None:
        room.append((free, "available on this machine"))
    elif physical_memory() is not None:
        room.append((physical_memory(), "of this machine"))
    # cgroup v2, then v1
    for limit, used in (("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
                        ("/sys/fs/cgroup/memory/memory.limit_in_bytes",
                         "/sys/fs/cgroup/memory/memory.usage_in_bytes")):
        cap, current = _read_int(limit), _read_int(used)
        if cap is not None and cap < 2**60:  # v1 writes "no limit" as a huge number
            room.append((max(cap - (current or 0), 0),
                         "left under this process's memory limit (its cgroup)"))
            break
    soft = resource.getrlimit(resource.RLIMIT_AS)[0] if resource is not None else None
    if soft is not None and soft != resource.RLIM_INFINITY:
        room.append((max(soft - (_read_int("/proc/self/status", "VmSize") or 0), 0),
                     "left under its address-space limit (ulimit -v)"))
    return min(room) if room else None


def check_fits_in_memory(n_numbers: int, what: str, fix: str, bytes_per_number: int = 4) -> None:
    """A :class:`TooLargeError` naming ``what`` and ``fix`` when ``n_numbers`` float32 numbers
    need more than the memory this process can still allocate (:func:`available_memory`): said
    before allocating, instead of the allocator's traceback or the out-of-memory killer."""
    room = available_memory()
    needed = n_numbers * bytes_per_number
    if room is not None and needed > room[0]:
        raise TooLargeError(f"{what} needs at least {n_numbers:,} numbers ({needed / 2**30:,.1f} "
                            f"GiB in float32), more than the {room[0] / 2**30:,.1f} GiB of memory "
                            f"{room[1]}: {fix}")


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


# --- writing a file the user names (eval --json, the benchmarks' records) -------------------------

class OutputPathError(ValueError):
    """An output file the user named that cannot be written safely: refused before any work."""


# The first bytes of what torch.save writes: its zip format, and the legacy pickle format.
TORCH_FILE_STARTS = (b"PK\x03\x04", b"\x80\x02")


def _why_not_a_file_to_replace(target: str, inputs) -> str | None:
    """Why the existing ``target`` must not be replaced (one phrase), or None."""
    for given in inputs:
        if given is not None and os.path.exists(given) and os.path.samefile(given, target):
            return f"is this command's input {given}: writing there would destroy it"
    if os.path.isdir(target):
        return "is a folder"
    if not os.path.isfile(target):  # checked before opening it: a FIFO would block the read below
        return "is not a regular file (a device, a pipe or a socket): writing would replace it"
    with open(target, "rb") as f:
        if f.read(4).startswith(TORCH_FILE_STARTS):
            return "holds a checkpoint (a torch.save file): writing there would destroy it"
    if not os.access(target, os.W_OK):
        return "is read-only"
    return None


def _why_it_cannot_be_made(folder: str, name: str) -> str | None:
    """Why a file ``name`` cannot be created in ``folder`` (made first if missing), or None."""
    existing = folder
    while not os.path.lexists(existing):  # the nearest part of the path that is there
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        return f"cannot be made: {existing} is a file, not a folder"
    try:
        name_max = os.pathconf(existing, "PC_NAME_MAX")
    except (OSError, ValueError):
        name_max = 255
    for part in [*os.path.relpath(folder, existing).split(os.sep), name]:
        if len(os.fsencode(part)) > name_max:
            return (f"cannot be made: the name {part[:20]}... is {len(os.fsencode(part))} bytes, "
                    f"more than this file system's {name_max}")
    if existing != folder:  # folders still to make: their parent must let us
        return (None if os.access(existing, os.W_OK | os.X_OK)
                else f"cannot be made: {existing} is not writable")
    try:  # a real try, which also catches read-only file systems and immutable folders
        fd, probe = tempfile.mkstemp(prefix=".write-check-", dir=folder)
    except OSError as e:
        return f"cannot be made: the folder {folder} is not writable ({e.strerror})"
    os.close(fd)
    os.unlink(probe)
    return None


def check_output_file(path, inputs=(), option: str = "--json") -> str | None:
    """Where ``option``'s file ``path`` will be written, checked BEFORE any work so that a bad path
    costs nothing: None for ``-`` (standard output); else the file itself, or a symlink's target
    (the link is written through, and kept). One :class:`OutputPathError` line naming the problem
    and the fix when the path is one of ``inputs``, a checkpoint, a device, a folder, or read-only,
    or its folder cannot be made or written, or a name in it is too long."""
    if str(path) == "-":
        return None
    if not str(path):
        raise OutputPathError(f"{option} needs a file name (or - for standard output)")
    target = os.path.realpath(path)
    why = _why_not_a_file_to_replace(target, inputs) if os.path.lexists(target) else None
    why = why or _why_it_cannot_be_made(os.path.dirname(target), os.path.basename(target))
    if why == "is a folder":
        raise OutputPathError(f"{option} {path} is a folder: name a file in it, e.g. "
                              f"{option} {os.path.join(str(path), 'out.json')}")
    if why:
        raise OutputPathError(f"{option} {path} {why}; choose another file")
    return target


def write_text_atomic(path, text: str, inputs=(), option: str = "--json") -> str | None:
    """Write ``text`` to the file ``path`` names (checked again by :func:`check_output_file`; ``-``
    is standard output) atomically: it goes to a temporary file beside it, flushed to disk, then
    renamed over it, so a reader or a crash never sees half a file, and a failure leaves no
    temporary file. The file keeps the mode of the one it replaces (a new one: 0666 less the umask).
    Returns the path written (None for standard output)."""
    target = check_output_file(path, inputs, option)
    if target is None:
        sys.stdout.write(text)
        sys.stdout.flush()
        return None
    folder = os.path.dirname(target)
    os.makedirs(folder, exist_ok=True)
    if os.path.exists(target):
        mode = os.stat(target).st_mode & 0o7777
    else:
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o666 & ~umask
    fd, tmp = tempfile.mkstemp(prefix=".", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return target
