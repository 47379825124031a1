"""``python -m course_lib.tools pretrained``: (re)make the pretrained model shipped in the package
(course_lib/weights/shakespeare-char-cpu.pt, see :mod:`course_lib.pretrained`) and print its SHA-256,
which goes into ``course_lib.pretrained.PRETRAINED_SHA256``.

The training runs in a child process with the reference numeric environment of
:mod:`course_lib.tools.numerics` (AVX2 kernels), but with ``course_lib.pretrained.THREADS`` (1)
threads: the same bytes come out on any x86-64 CPU with AVX2. About 3 minutes on a free core.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

CHILD = ("import sys; from course_lib.pretrained import train_pretrained; "
         "path, loss = train_pretrained(sys.argv[1]); print(f'val loss {loss:.4f} (50 batches of 64)')")


def add_parser(sub) -> None:
    p = sub.add_parser("pretrained", help="train the shipped pretrained model and print its SHA-256")
    p.add_argument("--out", help="where to write it (default: the package's own file)")
    p.set_defaults(func=run)


def run(args) -> int:
    from ..data import sha256_of
    from ..pretrained import PRETRAINED_PATH, PRETRAINED_SHA256, THREADS
    from .numerics import reference_environment, unsupported_host

    why = unsupported_host()
    if why:
        raise ValueError(f"this host cannot compute the reference numbers ({why}): make the file on x86-64 with AVX2")
    env = reference_environment(threads=THREADS)
    path = Path(args.out) if args.out else PRETRAINED_PATH
    done = subprocess.run([sys.executable, "-c", CHILD, str(path)], env=env)
    if done.returncode:
        return done.returncode
    digest = sha256_of(path)
    print(f"wrote {path} ({path.stat().st_size:,} bytes), SHA-256 {digest}" +
          (" (as course_lib.pretrained.PRETRAINED_SHA256)" if digest == PRETRAINED_SHA256
           else ": put it into course_lib.pretrained.PRETRAINED_SHA256"))
    return 0
