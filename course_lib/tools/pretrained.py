"""``python -m course_lib.tools pretrained``: (re)make the pretrained model shipped in the package
(course_lib/weights/shakespeare-char-cpu.pt, see :mod:`course_lib.pretrained`) and print its
SHA-256, which goes into ``course_lib.pretrained.PRETRAINED_SHA256``.

The training runs in a child process with the reference numeric environment of
:mod:`course_lib.tools.numerics` (AVX2 kernels), but with ``course_lib.pretrained.THREADS`` (1)
threads: the same bytes come out every time on one host (another CPU vendor computes other last
bits, see :mod:`course_lib.tools.op_fingerprints`). About 3 minutes on a free core.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import torch

from ..checkpoint import save_checkpoint
from ..data import get_batch, sha256_of
from ..losses import estimate_loss
from ..pretrained import PRESET, PRETRAINED_PATH, PRETRAINED_SHA256, THREADS
from ..runs import start_run
from . import numerics  # numerics.unsupported_host asks a subprocess (tests replace it there)

# The child stops quietly on Ctrl-C (the parent says the one line): the file is written once, at the
# end.
CHILD = ("import sys\nfrom course_lib.tools.pretrained import train_pretrained\ntry:\n"
         "    path, loss = train_pretrained(sys.argv[1])\nexcept KeyboardInterrupt:\n    "
         "sys.exit(130)\nprint(f'val loss {loss:.4f} (50 batches of 64)')")


def check_writable(path: Path) -> None:
    """Before a 3-minute run: ``path`` must be a file name in a folder this process can write
    (probed by creating and removing a file there; a missing folder is probed at its first existing
    parent, and created only when the model is written)."""
    import tempfile

    if path.is_dir():
        raise ValueError(f"--out {path} is a folder: give the file to write, e.g. "
                         f"{path / 'shakespeare-char-cpu.pt'}")
    folder = next((p for p in [path.parent, *path.parent.parents] if p.exists()), Path("."))
    if not folder.is_dir():
        raise ValueError(f"cannot write {path}: {folder} is a file, not a folder; choose another "
                         "--out")
    try:
        fd, probe = tempfile.mkstemp(prefix=".write-probe-", dir=folder)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise ValueError(f"cannot write {path} ({e.strerror} in {folder}): choose an --out in a "
                         "folder you can write") from None


def add_parser(sub) -> None:
    p = sub.add_parser("pretrained",
                       help="train the shipped pretrained model and print its SHA-256")
    p.add_argument("--out", help="where to write it (default: the package's own file)")
    p.set_defaults(func=run)


def run(args) -> int:
    path = Path(args.out) if args.out else PRETRAINED_PATH
    check_writable(path)
    why = numerics.unsupported_host()
    if why:
        raise ValueError(f"this host cannot compute the reference numbers ({why}): make the file "
                         "on x86-64 with AVX2")
    env = numerics.reference_environment(threads=THREADS)
    with subprocess.Popen([sys.executable, "-c", CHILD, str(path)], env=env) as child:
        try:
            returncode = child.wait()
        except KeyboardInterrupt:
            # the child got the same Ctrl-C: wait for it to stop, then one line
            previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C: one line
            try:
                child.wait(timeout=60)
            except subprocess.TimeoutExpired:
                child.kill()
            finally:
                signal.signal(signal.SIGINT, previous)
            print(f"interrupted (Ctrl-C): {path} was not written", file=sys.stderr)
            return 130
    if returncode:
        return returncode
    digest = sha256_of(path)
    print(f"wrote {path} ({path.stat().st_size:,} bytes), SHA-256 {digest}" +
          (" (as course_lib.pretrained.PRETRAINED_SHA256)" if digest == PRETRAINED_SHA256
           else ": put it into course_lib.pretrained.PRETRAINED_SHA256"))
    return 0


def train_pretrained(out: str | Path = PRETRAINED_PATH,
                     progress: bool = True) -> tuple[Path, float]:
    """Train the preset from scratch and write it in float16 to ``out``. Returns the path and
    the final validation loss (of the float16 weights, measured in float32)."""
    torch.set_num_threads(THREADS)
    # what `python -m course_lib train` builds
    run = start_run(PRESET, device="cpu", progress=progress)
    trainer, tokenizer, val_data = run.trainer, run.tokenizer, run.val_data
    trainer.train()
    model = trainer.model
    model.half()
    path = save_checkpoint(out, model, tokenizer=tokenizer, train_config=trainer.config,
                           step=trainer.step, history=trainer.history)
    model.float()
    block = model.config.block_size
    loss = estimate_loss(model, lambda split, g: get_batch(val_data, block, 64, g), 50,
                         splits=("val",))["val"]
    return path, loss
