"""Chat models tried as a new user would (issue 54, course_lib.chat.robustness): version 2 of the
robustness set (71 frozen requests, every one held out from every user message of the conversations
under a strict normalisation), each in a new conversation, greedy, the calculator on; per model, per
task (arithmetic in digits and in words apart) and over all, the share right with its standard error
and 95% bootstrap interval, and every reply; each task's best constant answer on the set (the
baseline); each model after the first paired with the first (difference, interval, McNemar); and
version 1 (the shipped model's validation set, no longer held out) split into the requests whose
form a training message has and the rest.

    python benchmarks/chat_robustness.py [--checkpoint CKPT ...] [--update-record]

Default: the two chat models course_lib ships (weights/chat-char-cpu.pt, the first, then the one
`chat` loads, weights/chat-char-cpu-5.pt). ``--checkpoint`` (repeat it) scores any chat models
instead, in that order. The shipped records were made when chat-char-cpu-4 shipped (chapter 17
prints them as its history; chat-char-cpu-5's scores are in records/chat_count_first_runs.json, run
cpu4-wallL-s1); they list all three models:

    git show 641d1f7:course_lib/weights/chat-char-cpu-4.pt > chat-char-cpu-4.pt
    python benchmarks/chat_robustness.py --checkpoint course_lib/weights/chat-char-cpu.pt \\
        --checkpoint chat-char-cpu-3.pt --checkpoint chat-char-cpu-4.pt --update-record

Writes, when asked (``--json FILE``, or ``--update-record`` for
course_lib/records/chat_robustness_v2.json), the record; without either it prints the scores only.
(course_lib/records/chat_robustness.json is this script's earlier record, on version 1.)

``--set v3`` scores version 3 instead (85 requests written by hand, blind, after the shipped model;
course_lib/tasks/chat_robustness_v3.json): per model and task as above, each model after the first
paired with the one before it and with the first; its record is
course_lib/records/chat_robustness_v3.json. The shipped record scores the first model,
chat-char-cpu-3 and chat-char-cpu-4:

    git show fb216c9:course_lib/weights/chat-char-cpu-3.pt > chat-char-cpu-3.pt
    python benchmarks/chat_robustness.py --set v3 --checkpoint course_lib/weights/chat-char-cpu.pt \
        --checkpoint chat-char-cpu-3.pt --checkpoint chat-char-cpu-4.pt --update-record

``--set v4`` scores version 4 the same way (course_lib/tasks/chat_robustness_v4.json, 85 requests
written blind after chat-char-cpu-5 shipped, held out from the --count-first and --wide-identity
conversations too), into course_lib/records/chat_robustness_v4.json: the first model,
chat-char-cpu-4 and chat-char-cpu-5, scored once, no model chosen on it:

    git show 641d1f7:course_lib/weights/chat-char-cpu-4.pt > chat-char-cpu-4.pt
    python benchmarks/chat_robustness.py --set v4 --checkpoint course_lib/weights/chat-char-cpu.pt \
        --checkpoint chat-char-cpu-4.pt --checkpoint course_lib/weights/chat-char-cpu-5.pt \
        --update-record
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

from bench_args import add_record_options, code_commit, count, record_file, threads  # noqa: E402
from course_lib.chat.engine import (  # noqa: E402
    CHAT_MODEL_PATH, CHAT_V1_MODEL_PATH, load_chat_model)
from course_lib.chat import robustness as rb  # noqa: E402
from course_lib.chat.anywhere import build_anywhere_conversations  # noqa: E402
from course_lib.chat.counting import build_count_conversations  # noqa: E402
from course_lib.chat.identity import build_identity_conversations  # noqa: E402
from course_lib.chat.variety import build_more_conversations  # noqa: E402
from course_lib.chat.scores import summarize  # noqa: E402
from course_lib.evaluation import paired_comparison  # noqa: E402

RECORD = ROOT / "course_lib" / "records" / "chat_robustness_v2.json"
RECORD_V3 = RECORD.with_name("chat_robustness_v3.json")
PREVIOUS = "git show fb216c9:course_lib/weights/chat-char-cpu-3.pt > chat-char-cpu-3.pt"
PREVIOUS_V4 = "git show 641d1f7:course_lib/weights/chat-char-cpu-4.pt > chat-char-cpu-4.pt"
# the blind sets: (loader, SHA-256, file, record, how it was written, the model before the shipped
# one, what it is held out from)
HELD_OUT_V3 = ("course_lib.chat.phrasing.abstracted against every user message of chat.json and "
               "chat_v1.json, all splits, and of the conversations chat-sft --more-phrasings adds "
               "(chat.variety)")
BLIND_SETS = {
    "v3": (rb.load_robustness_set_v3, rb.ROBUSTNESS_V3_SHA256,
           "course_lib/tasks/chat_robustness_v3.json", RECORD_V3,
           "by hand, after the shipped model, by someone who had read neither the conversations' "
           "generators (phrasing, variety, data) nor version 2; frozen (commit 626a874) before any "
           "model was scored on it",
           f"chat-char-cpu-3.pt, the model before the shipped one: {PREVIOUS}", HELD_OUT_V3),
    "v4": (rb.load_robustness_set_v4, rb.ROBUSTNESS_V4_SHA256,
           "course_lib/tasks/chat_robustness_v4.json", RECORD.with_name("chat_robustness_v4.json"),
           "by hand, after chat-char-cpu-5 shipped, by someone who had read none of the "
           "conversations' generators (phrasing, variety, data, counting, identity) nor versions "
           "1-3; frozen (commit 7f31502) before any model was scored on it; scored once on the "
           "models below, and no model is chosen on it",
           f"chat-char-cpu-4.pt, the model before the shipped one: {PREVIOUS_V4}",
           HELD_OUT_V3 + ", chat-sft --count-first worked (chat.counting), --wide-identity "
           "(chat.identity) and --word-anywhere (chat.anywhere)"),
}
TASKS = ("arithmetic", "spelling", "letters", "dates", "identity")


def shown_path(path: Path) -> str:
    """A checkpoint as the record names it: relative to
    the repository if inside it, else its file name."""
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return path.name


def table(scores: dict) -> dict:
    return {k: {f: v[f] for f in ("score", "stderr", "interval", "n")} for k, v in scores.items()
            if k != "rows"}


def best_constants(items: list[dict], name: str) -> dict:
    """Each task's best constant answer on ``items`` (the floor a model must beat), printed."""
    tasks = [t for t in TASKS if any(i["task"] == t for i in items)]
    constants = {t: rb.best_constant(items, t) for t in tasks}
    print(f"best constant answers on {name}:",
          {t: (c["answer"], round(c["score"], 3)) for t, c in constants.items()})
    return constants


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkpoint", type=Path, action="append",
                   help="a chat model (repeat for several; default: the two course_lib ships)")
    p.add_argument("--limit", type=count,
                   help="score only the first N requests of each set (a quick try)")
    p.add_argument("--threads", type=threads, default=1)
    p.add_argument("--set", choices=("v2", "v3", "v4"), default="v2",
                   help="the robustness set: v2 (default, with version 1 too), v3 or v4 (each "
                        "written blind); --update-record writes that set's record")
    add_record_options(p, RECORD)
    args = p.parse_args(argv)
    checkpoints = args.checkpoint or [CHAT_V1_MODEL_PATH, CHAT_MODEL_PATH]
    for path in checkpoints:
        if not path.is_file():
            p.error(f"--checkpoint {path} is not a file: give a chat-sft run's ckpt.pt or a "
                    "shipped chat model")
    out = record_file(p, args, BLIND_SETS[args.set][3] if args.set in BLIND_SETS else RECORD,
                      inputs=checkpoints)
    torch.set_num_threads(args.threads)
    if args.set in BLIND_SETS:
        return score_blind(args, checkpoints, out)
    began = time.perf_counter()
    v2, v1 = rb.load_robustness_set_v2()[:args.limit], rb.load_robustness_set()[:args.limit]
    forms, trained = rb.training_forms(), rb.training_forms(("train",))
    # and the conversations chat-sft --more-phrasings adds (their forms kept with them)
    forms |= {f for c in build_more_conversations() for f in c["forms"]}
    collisions = [item["request"] for item, seen in zip(v2, rb.template_seen(v2, forms)) if seen]
    print(f"version 2: {len(v2)} requests, {len(collisions)} with the form of a user message of "
          "the conversations")
    seen = rb.template_seen(v1, trained)
    models = []
    for path in checkpoints:
        model, tokenizer = load_chat_model(path)
        model = model.float()
        s2, s1 = (rb.score_robustness(model, tokenizer, v2),
                  rb.score_robustness(model, tokenizer, v1))
        right1 = [float(r["right"]) for r in s1["rows"]]
        split = {name: summarize([x for x, s in zip(right1, seen) if s == want])
                 for name, want in (("template seen in training", True), ("new template", False))
                 if want in seen}
        models.append({"checkpoint": shown_path(path), "block_size": model.config.block_size,
                       "parameters": model.num_parameters(), "v2": table(s2),
                       "v2_replies": [{k: r[k] for k in ("task", "request", "reply", "right")}
                                      for r in s2["rows"]],
                       "v1": {"all": table(s1)["all"], **split},
                       "v1_right": [r["right"] for r in s1["rows"]]})
        print(f"\n{shown_path(path)} (context {model.config.block_size})")
        for key, row in {**table(s2),
                         **{f"v1, {k}": v for k, v in models[-1]["v1"].items()}}.items():
            low, high = row["interval"]
            print(f"  {key:30} {row['score']:6.1%} of {row['n']:>2}  (95% interval {low:.1%} to "
                  f"{high:.1%})")
    first = [float(r["right"]) for r in models[0]["v2_replies"]]
    for m in models[1:]:
        c = paired_comparison([float(r["right"]) for r in m["v2_replies"]], first)
        m["v2_minus_first"] = {k: c[k] for k in ("diff", "stderr", "interval",
                                                 "a_wins", "b_wins", "mcnemar_p")}
        print(f"{m['checkpoint']} minus {models[0]['checkpoint']} on version 2: {c['diff']:+.3f} "
              f"[{c['interval'][0]:+.3f}, {c['interval'][1]:+.3f}], {c['a_wins']}/{c['b_wins']} "
              "discordant")
    constants = best_constants(v2, "version 2")
    listed = " ".join(f"--checkpoint {m['checkpoint']}" for m in models)
    record = {"command": f"python benchmarks/chat_robustness.py {listed} --update-record",
              "add_a_model": "list every model to keep, the new one last: python "
                             f"benchmarks/chat_robustness.py {listed} --checkpoint NEW.pt "
                             "--update-record",
              "set": {"path": "course_lib/tasks/chat_robustness_v2.json",
                      "sha256": rb.ROBUSTNESS_V2_SHA256,
                      "requests": len(v2),
                      "held_out_check": "course_lib.chat.phrasing.abstracted: lower case, letters "
                      "and digits only, numbers and slot values abstracted; against every user "
                      "message of chat.json and chat_v1.json, all splits, and of the "
                      "conversations chat-sft --more-phrasings adds (chat.variety)",
                      "collisions": collisions},
              "best_constant": constants,
              "v1": {"path": "course_lib/tasks/chat_robustness.json",
                     "sha256": rb.ROBUSTNESS_SHA256,
                     "role": "validation set of the shipped model (chose its checkpoint); no "
                             "longer held out",
                     "template_seen_in_training": sum(seen), "new_template": len(seen) - sum(seen),
                     "seen_means": "the request's abstracted form is that of a user message of the "
                                   "training split of chat.json or chat_v1.json"},
              "models": models, "torch": torch.__version__, "threads": args.threads,
              "commit": code_commit(),
              "seconds": round(time.perf_counter() - began, 1), "load_average": os.getloadavg()[0],
              "made_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    out.finish(record, say=True)
    return 0


def held_out_forms(name: str = "v3") -> set[str]:
    """Every user message's abstracted form: chat.json and chat_v1.json (all splits) and the
    conversations chat-sft --more-phrasings adds (their forms kept with them); for version 4 also
    those of --count-first worked, --wide-identity and --word-anywhere."""
    forms = rb.training_forms() | {f for c in build_more_conversations() for f in c["forms"]}
    if name == "v4":
        forms |= {f for c in (build_count_conversations(worked=True)
                              + build_identity_conversations() + build_anywhere_conversations())
                  for f in c["forms"]}
    return forms


def paired(new: dict, old: dict, name: str = "v3") -> dict:
    """``new`` minus ``old`` on a blind set, request by request (difference, interval, McNemar)."""
    c = paired_comparison([float(r["right"]) for r in new[f"{name}_replies"]],
                          [float(r["right"]) for r in old[f"{name}_replies"]])
    return {"minus": old["checkpoint"],
            **{k: c[k] for k in ("diff", "stderr", "interval", "a_wins", "b_wins", "mcnemar_p")}}


def score_blind(args, checkpoints, out) -> int:
    """A blind set (version 3 or 4): each model per task, paired with the one before and the
    first."""
    name = args.set
    load, sha256, path, _, written, previous, held_out = BLIND_SETS[name]
    began = time.perf_counter()
    items = load()[:args.limit]
    collisions = [i["request"] for i, seen in zip(items, rb.template_seen(
        items, held_out_forms(name))) if seen]
    print(f"version {name[1:]}: {len(items)} requests, {len(collisions)} with the form of a user "
          "message of the conversations")
    models = []
    for checkpoint in checkpoints:
        model, tokenizer = load_chat_model(checkpoint)
        model = model.float()
        scores = rb.score_robustness(model, tokenizer, items)
        models.append({"checkpoint": shown_path(checkpoint),
                       "block_size": model.config.block_size,
                       "parameters": model.num_parameters(), name: table(scores),
                       f"{name}_replies": [{k: r[k] for k in ("task", "request", "reply", "right")}
                                           for r in scores["rows"]]})
        print(f"\n{shown_path(checkpoint)} (context {model.config.block_size})")
        for key, row in table(scores).items():
            low, high = row["interval"]
            print(f"  {key:30} {row['score']:6.1%} of {row['n']:>2}  (95% interval {low:.1%} to "
                  f"{high:.1%})")
    for before, m in zip(models, models[1:]):
        m[f"{name}_minus_previous"] = paired(m, before, name)
        if before is not models[0]:
            m[f"{name}_minus_first"] = paired(m, models[0], name)
        for c in (m[f"{name}_minus_previous"], m.get(f"{name}_minus_first")):
            if c is None:
                continue
            print(f"{m['checkpoint']} minus {c['minus']} on version {name[1:]}: "
                  f"{c['diff']:+.3f} [{c['interval'][0]:+.3f}, {c['interval'][1]:+.3f}], "
                  f"{c['a_wins']}/{c['b_wins']} discordant, McNemar p {c['mcnemar_p']:.3f}")
    constants = best_constants(items, f"version {name[1:]}")
    listed = " ".join(f"--checkpoint {m['checkpoint']}" for m in models)
    record = {"command": f"python benchmarks/chat_robustness.py --set {name} {listed} "
                         "--update-record",
              "previous_model": previous,
              "set": {"path": path, "sha256": sha256, "requests": len(items),
                      "per_task": {t: sum(i["task"] == t for i in items) for t in constants},
                      "written": written, "held_out_check": held_out, "collisions": collisions},
              "best_constant": constants, "models": models, "torch": torch.__version__,
              "threads": args.threads, "commit": code_commit(),
              "seconds": round(time.perf_counter() - began, 1), "load_average": os.getloadavg()[0],
              "made_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    out.finish(record, say=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
