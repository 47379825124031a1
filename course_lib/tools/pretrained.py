"""``python -m course_lib.tools pretrained``: (re)make the pretrained model shipped in the package
(course_lib/weights/shakespeare-char-cpu.pt, see :mod:`course_lib.pretrained`) and print its SHA-256,
which goes into ``course_lib.pretrained.PRETRAINED_SHA256``. About two minutes on 2 CPU cores."""
from __future__ import annotations

from pathlib import Path


def add_parser(sub) -> None:
    p = sub.add_parser("pretrained", help="train the shipped pretrained model and print its SHA-256")
    p.add_argument("--out", help="where to write it (default: the package's own file)")
    p.set_defaults(func=run)


def run(args) -> int:
    from ..data import sha256_of
    from ..pretrained import PRETRAINED_PATH, PRETRAINED_SHA256, train_pretrained

    path, loss = train_pretrained(Path(args.out) if args.out else PRETRAINED_PATH)
    digest = sha256_of(path)
    print(f"wrote {path} ({path.stat().st_size:,} bytes); val loss {loss:.4f} (50 batches of 64)")
    print(f"SHA-256 {digest}" + (" (as course_lib.pretrained.PRETRAINED_SHA256)" if digest == PRETRAINED_SHA256
                                 else ": put it into course_lib.pretrained.PRETRAINED_SHA256"))
    return 0
