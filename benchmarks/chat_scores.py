r"""Chapter 17's per-task scores: the chat fine-tunes of ``benchmarks/chat_sft.py`` at the chosen
step count (from the pretrained model and from scratch, 3 seeds each) and the pretrained model
before fine-tuning, each playing the test split's conversations (``course_lib.chat.scores``: greedy,
the tool loop on; arithmetic and follow-ups also without the calculator).

    python benchmarks/chat_scores.py --models-dir /work/chat_models [--iters 1000] [--seeds 0 1 2] \
        --update-record

``--models-dir`` holds the runs' folders (``<start>-it<iters>-lr0.001-s<seed>/model.pt``, the
slim float16 models that ``chat_sft.py`` writes). Writes, when asked (``--record FILE``, or
``--update-record`` for course_lib/records/chat_scores.json), the record after each model (a stopped
run keeps what it finished, unless that would replace a whole record): per model and task the score,
its standard error and 95% bootstrap interval, the per-item scores; per start and task the mean and
spread across seeds; per task the paired comparison of pretrained against scratch (per-item scores
averaged over the seeds, chapter 16's ``paired_comparison``). The shipped model's replies are kept.

The record measured the first chat models, on the test split of the first conversations
(``course_lib/tasks/chat_v1.json``), and this script scores that split. Since issue 54 the
conversations are others (``chat.json``) and ``chat_sft.py`` trains on them; the new chat model's
runs and scores are in records/chat_model_runs.json (benchmarks/chat_model_runs.py).
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

from bench_args import add_record_options, count, record_file, seed_number, threads  # noqa: E402
from course_lib.chat.data import CHAT_V1_PATH, CHAT_V1_SHA256, load_conversations  # noqa: E402
from course_lib.chat.engine import load_chat_model  # noqa: E402
from course_lib.chat.scores import across_seeds, before_fine_tuning, score_model  # noqa: E402
from course_lib.evaluation import paired_comparison  # noqa: E402
from course_lib.pretrained import load_pretrained  # noqa: E402

RECORD = ROOT / "course_lib" / "records" / "chat_scores.json"
SHIPPED = "pretrained-it1000-lr0.001-s0"


def row_key(row: dict) -> str:
    return row.get("key") or row["task"] + ("" if row["calculator"] else " (no calculator)")


def summarize(models: dict, starts=("pretrained", "scratch")) -> tuple[dict, dict]:
    """Per start and task: the spread across seeds; per task: pretrained against scratch, paired."""
    spread, paired = {}, {}
    for start in starts:
        runs = [m for m in models.values() if m["start"] == start]
        if runs:
            spread[start] = {key: across_seeds([m["rows"][key]["score"] for m in runs])
                             for key in runs[0]["rows"]}
    if all(s in spread for s in starts):
        for key in spread[starts[0]]:
            means = []
            for start in starts:
                items = [m["rows"][key]["per_item"] for m in models.values() if m["start"] == start]
                means.append([sum(v) / len(v) for v in zip(*items)])
            p = paired_comparison(*means)
            paired[key] = {"diff": p["diff"], "stderr": p["stderr"],
                           "interval": list(p["interval"]), "p_value": p["p_value"],
                           "pretrained_wins": p["a_wins"], "scratch_wins": p["b_wins"]}
    return spread, paired


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--models-dir", type=Path, required=True)
    p.add_argument("--iters", type=count, default=1000)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seeds", type=seed_number, nargs="+", default=[0, 1, 2])
    p.add_argument("--no-base", action="store_true",
                   help="leave out the pretrained model before fine-tuning")
    p.add_argument("--threads", type=threads, default=1)
    p.add_argument("--limit", type=count,
                   help="score only the first N test conversations (a quick try; the record says "
                   "how many)")
    add_record_options(p, RECORD, "--record", type=Path)
    args = p.parse_args(argv)
    out = record_file(p, args, RECORD, "--record")
    argv = sys.argv[1:] if argv is None else argv
    torch.set_num_threads(args.threads)
    # what the record measured
    test = load_conversations("test", path=CHAT_V1_PATH, sha256=CHAT_V1_SHA256)[:args.limit]
    names = [f"{start}-it{args.iters}-lr{args.lr:g}-s{seed}" for start in ("pretrained", "scratch")
             for seed in args.seeds]
    missing = [n for n in names if not (args.models_dir / n / "model.pt").exists()]
    if missing:
        print(f"error: {args.models_dir} lacks {', '.join(missing)} (model.pt of each): train them "
              "with benchmarks/chat_sft.py first", file=sys.stderr)
        return 2
    # no local path in the record
    command = " ".join("DIR" if a == str(args.models_dir) else a for a in argv)
    record = {"command": "python benchmarks/chat_scores.py " + command,
              "models_dir": "DIR: the run folders of benchmarks/chat_sft.py (its --out-dir)",
              "split": "test", "conversations": len(test), "threads": args.threads,
              "torch": torch.__version__, "models": {}}
    if not args.no_base:
        names = ["base"] + names
    for name in names:
        began = time.perf_counter()
        if name == "base":  # before fine-tuning: it never calls the tool, so "without" is the same
            model, tokenizer = before_fine_tuning(*load_pretrained())
            rows = score_model(model, tokenizer, test, without_calculator=(), progress=True)
            start = "base"
        else:
            model, tokenizer = load_chat_model(args.models_dir / name / "model.pt")
            rows = score_model(model.float(), tokenizer, test, progress=True)
            start = name.split("-")[0]
        keep = name == SHIPPED
        record["models"][name] = {
            "start": start, "seconds": round(time.perf_counter() - began, 1),
            "rows": {row_key(r): {k: v for k, v in r.items() if k != "outputs" or keep}
                     for r in rows}}
        print(name, " ".join(f"{row_key(r)}={r['score']:.3f}" for r in rows), flush=True)
        record["across_seeds"], record["pretrained_vs_scratch"] = summarize(
            {n: m for n, m in record["models"].items() if m["start"] != "base"})
        record["made_at"] = (datetime.datetime.now(datetime.timezone.utc)
                             .isoformat(timespec="seconds"))
        record["load_average"] = os.getloadavg()[0]
        out.progress(record)  # after each model, where no whole record is replaced
    out.finish(record, say=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
