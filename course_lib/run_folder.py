"""A run's output folder: one run at a time holds it (a lock file), and one function opens it for
a new run or for ``--resume``. Every command that trains (``train``, ``train-dates``,
``finetune``) opens its ``--out`` here, so the checks live once::

    with open_run("runs/ft", resume=False, command="finetune") as folder:
        folder.checkpoint        # None: a new run (folder.path / "ckpt.pt" does not exist yet)

- the folder is claimed *before* anything is read, so of two runs started into one folder at
  once exactly one goes on (the other is refused), and none overwrites what the other saved;
- a folder that already holds a checkpoint is refused without ``resume``;
- with ``resume``, the checkpoint is read once, here, and must have been made by the same
  command (a fine-tune is not continued as pretraining, nor the reverse).
"""
from __future__ import annotations

import contextlib
import os
import shlex
import time
from dataclasses import dataclass
from pathlib import Path

from .checkpoint import CHECKPOINT_NAME, load_checkpoint

LOCK_NAME = ".run.lock"  # exists while a run writes into its folder; holds the process id
FRESH_LOCK_S = 60  # a lock file without a process id, younger than this, is a claim being written


class FolderInUse(OSError):
    """Another run is writing into this output folder."""


@dataclass
class RunFolder:
    """An output folder held by this run, and the checkpoint found in it (None: a new run)."""
    path: Path
    checkpoint: dict | None

    @property
    def checkpoint_path(self) -> Path:
        return self.path / CHECKPOINT_NAME


@contextlib.contextmanager
def open_run(out: str | Path, resume: bool, command: str, claim: bool = True):
    """Hold ``out`` for one run of ``command`` ("train", "train-dates", "finetune") and yield a
    :class:`RunFolder`: a checkpoint there without ``resume`` is refused, with ``resume`` it is
    read once and must be ``command``'s. ``claim=False`` (the other processes of a torchrun
    run, whose rank 0 holds the folder) reads without the lock."""
    out = Path(out)
    with claim_folder(out) if claim else contextlib.nullcontext():
        path = out / CHECKPOINT_NAME
        if path.exists() and not resume:
            raise FileExistsError(f"{path} already exists: pass --resume to continue that run, "
                                  "or choose another --out so that it is not overwritten")
        checkpoint = load_checkpoint(path) if path.exists() else None
        if checkpoint is not None:
            check_made_by(checkpoint, path, command)
        yield RunFolder(out, checkpoint)


def made_by(ckpt: dict) -> str:
    """The command that made a checkpoint: recorded in ``trained_on`` since format version 3
    (fine-tunes since this release); before that, told by the model kind."""
    recorded = (ckpt.get("trained_on") or {}).get("command")
    if recorded:
        return recorded
    return {"seq2seq": "train-dates", "gpt-lora": "finetune"}.get(ckpt.get("model_kind"), "train")


def check_made_by(ckpt: dict, path: Path, command: str) -> None:
    """A ValueError unless ``command`` made the checkpoint at ``path``, naming the command that
    resumes it."""
    maker = made_by(ckpt)
    if maker != command:
        saved = ckpt.get("trained_on") or {}
        text = f" --text {shlex.quote(saved['text'])}" if saved.get("text") else ""
        raise ValueError(f"{path} was made by `{maker}`, not `{command}`: resume it with "
                         f"`python -m course_lib {maker}{text} --out {path.parent} --resume`")


# --- the lock ------------------------------------------------------------------------------------


@contextlib.contextmanager
def claim_folder(folder: str | Path):
    """Hold ``folder`` for one run: create it if needed and claim it atomically with a lock file
    (``O_EXCL``: of two runs started at once, exactly one gets it), so that a second run into
    the same folder is refused instead of both saving and one silently winning. On the way out
    the lock goes, and so do the folders this created if nothing was saved in them. A lock left
    by a run that was killed (its process is gone) is taken over."""
    folder = Path(folder)
    created = []
    try:
        for parent in reversed([folder, *folder.parents]):
            if not parent.exists():
                parent.mkdir()
                created.append(parent)
        _take_lock(folder / LOCK_NAME)
    except BaseException as e:
        _remove_if_empty(created)
        if isinstance(e, OSError) and not isinstance(e, FolderInUse):
            raise OSError(f"cannot write to {folder} ({e.strerror or e}): choose an output folder "
                          "you can write") from None
        raise
    try:
        yield folder
    finally:
        (folder / LOCK_NAME).unlink(missing_ok=True)
        _remove_if_empty(created)


def _take_lock(lock: Path) -> None:
    if lock.is_dir():  # os.open would say "Is a directory" of a folder the user can write
        raise FolderInUse(f"{lock} is a folder, not a run's lock file: remove it (rmdir {lock}) "
                          "and start again")
    for _ in range(3):
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            _refuse_if_held(lock)
            with contextlib.suppress(FileNotFoundError):  # a stale lock: one process takes it over
                os.replace(lock, stale := lock.with_name(f"{LOCK_NAME}.stale.{os.getpid()}"))
                stale.unlink()
            continue
        with os.fdopen(fd, "w") as f:
            f.write(str(os.getpid()))
        return
    raise FolderInUse(f"{lock.parent} is being claimed by other runs at this moment: choose "
                      "another --out")


def _refuse_if_held(lock: Path) -> None:
    """A FolderInUse naming who holds ``lock``, unless the lock is stale."""
    owner = _lock_owner(lock)
    if owner == "claiming":
        raise FolderInUse(f"{lock.parent} is being claimed by another run at this moment ({lock} "
                          "holds no process id yet): wait for it, or choose another --out; if no "
                          f"run is starting there, delete {lock}")
    if owner is not None:
        raise FolderInUse(f"{lock.parent} is in use by another run (process {owner}, which holds "
                          f"{lock}): wait for it to finish, or choose another --out; if no run of "
                          "course_lib is writing there (a process id reused after a restart), "
                          f"delete {lock}")


def _lock_owner(lock: Path) -> int | str | None:
    """The live process holding ``lock``, "claiming" for a claim being written this instant, or
    None for a stale lock (its process is gone, or it is old debris)."""
    try:
        text, age = lock.read_text().strip(), time.time() - lock.stat().st_mtime
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError):
        text, age = "", FRESH_LOCK_S  # unreadable bytes: debris
    if not text.isdigit():
        return "claiming" if age < FRESH_LOCK_S else None
    pid = int(text)
    if pid == os.getpid():
        return None
    if os.name == "nt":  # os.kill(pid, 0) would send Ctrl-C on Windows: trust the lock
        return pid
    try:
        os.kill(pid, 0)  # signal 0 only asks whether the process exists
    except ProcessLookupError:
        return None
    except OSError:
        pass  # it exists, under another user
    return pid


def _remove_if_empty(folders: list[Path]) -> None:
    for made in reversed(folders):
        with contextlib.suppress(OSError):
            made.rmdir()  # only an empty folder goes
