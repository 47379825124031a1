"""``python -m course_lib.tools book ... | assignments ...``: see course_lib/tools/__init__.py."""
from __future__ import annotations

import argparse
import sys

from . import __doc__ as TOOLS_DOC
from . import assignments, book, gpu_lane, numerics, op_fingerprints, pretrained


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m course_lib.tools", description=TOOLS_DOC,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    book.add_parser(sub)
    assignments.add_parser(sub)
    numerics.add_parser(sub)
    op_fingerprints.add_parser(sub)
    gpu_lane.add_parser(sub)
    pretrained.add_parser(sub)
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except (ImportError, ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
