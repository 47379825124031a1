"""A chat model tried as a new user would (issue 54, course_lib.chat.robustness): the frozen requests
in forms the training conversations never use, each in a new conversation, greedy, the calculator on;
per task and over all, the share right with its standard error and 95% bootstrap interval, and
every reply.

    python benchmarks/chat_robustness.py [--checkpoint CKPT] [--update-record]

Default: the shipped chat model. Writes, when asked (``--json FILE``, or ``--update-record`` for
course_lib/records/chat_robustness.json), the record; without either it prints the scores only.
"""
from __future__ import annotations

import argparse
import datetime
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from bench_args import add_record_options, count, record_file, threads  # noqa: E402
from course_lib.chat.engine import CHAT_MODEL_PATH, load_chat_model  # noqa: E402
from course_lib.chat.robustness import ROBUSTNESS_SHA256, load_robustness_set, score_robustness  # noqa: E402

RECORD = ROOT / "course_lib" / "records" / "chat_robustness.json"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkpoint", type=Path, help="a chat model (default: the one course_lib ships)")
    p.add_argument("--limit", type=count, help="score only the first N requests (a quick try; the record is of all)")
    p.add_argument("--threads", type=threads, default=1)
    add_record_options(p, RECORD)
    args = p.parse_args(argv)
    out = record_file(p, args, RECORD, inputs=[args.checkpoint] if args.checkpoint else ())
    argv = sys.argv[1:] if argv is None else argv
    torch.set_num_threads(args.threads)
    began = time.perf_counter()
    model, tokenizer = load_chat_model(args.checkpoint)
    scores = score_robustness(model.float(), tokenizer, load_robustness_set()[:args.limit])
    for key, row in scores.items():
        if key != "rows":
            low, high = row["interval"]
            print(f"{key:<11} {row['score']:6.1%} of {row['n']:>2}  (95% interval {low:.1%} to {high:.1%})")
    command = " ".join("CKPT" if a == str(args.checkpoint) else a for a in argv)  # no local path in the record
    record = {"command": f"python benchmarks/chat_robustness.py {command}".strip(),
              "model": "CKPT" if args.checkpoint else f"the shipped chat model (course_lib/weights/{CHAT_MODEL_PATH.name})",
              "set_sha256": ROBUSTNESS_SHA256, "torch": torch.__version__, "threads": args.threads,
              "seconds": round(time.perf_counter() - began, 1), "load_average": os.getloadavg()[0],
              "made_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"), **scores}
    out.finish(record, say=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
