"""The record of every chat model tried for the shipped one (issue 54): per run, how it was trained
(the commands, its settings, its cost in CPU minutes as measured) and its scores on both sets, each
with chapter 16's standard error and 95% bootstrap interval: version 1 of the frozen robustness set
(``course_lib.chat.robustness``; the shipped model's validation set: it chose the checkpoint, and
most of its requests have a training message's form, review R17-B1), the development set (version
2, ``robustness_v2``: held out request by request, but its failures steered the added conversations)
and the test split's conversations
(``course_lib.chat.scores``, the in-template scores). The models compared in chapter 17 are
scored on version 2 by benchmarks/chat_robustness.py into records/chat_robustness_v2.json.
``--score-v3 NAME=CKPT ...`` adds version 3, the blind test set (``robustness_v3``), and the
validation-loss history from each checkpoint (``val_loss_history``) to runs already recorded.
``--score-v4 NAME=CKPT ...`` adds version 4 (the blind set written after chat-char-cpu-5 shipped),
once per run. ``--score-blind-identity NAME=CKPT ...`` adds the blind identity set
(``chat.identity``: 64 questions of the phrasing bank's held-out half, exact answers) to runs
already recorded.
``--paired B=A ...`` loads no model: it compares runs already recorded, each B against its control A
(a pair per seed), item by item on version 2, version 3 and both together (where scored), the blind
identity set and in-template: each item's difference averaged over the pairs, with a bootstrap
interval that resamples items (an item's seeds together). Both read
the runs of ``--from FILE ...`` (default the shipped record).

    python benchmarks/chat_model_runs.py --checkpoint CKPT --name NAME [--commands "..."]
        [--cpu-minutes M] [--wall-minutes M] [--role shipped|first] [--update-record]

``--checkpoint`` is a chat model (a ``chat-sft`` run's ckpt.pt, or the shipped one with
``--shipped``). Writes, when asked (``--json FILE``, or ``--update-record`` for
course_lib/records/chat_model_runs.json), the record with this run added (or replaced, by name) to
the runs already there; without either it prints the scores only.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

import bench_args  # noqa: E402
from bench_args import add_record_options, count, record_file, threads  # noqa: E402
from course_lib.chat.data import CHAT_SHA256, load_conversations  # noqa: E402
from course_lib.chat.engine import load_chat_model  # noqa: E402
from course_lib.chat.identity import BLIND_SHA256, blind_identity_set  # noqa: E402
from course_lib.chat.robustness import (  # noqa: E402
    ROBUSTNESS_SHA256, ROBUSTNESS_V2_SHA256, ROBUSTNESS_V3_SHA256, ROBUSTNESS_V4_SHA256, is_right,
    load_robustness_set, load_robustness_set_v2, load_robustness_set_v3, load_robustness_set_v4,
    row_keys, score_robustness)
from course_lib.chat.scores import summarize  # noqa: E402
from course_lib.chat.scores import score_model, score_task  # noqa: E402
from course_lib.data import sha256_of  # noqa: E402
from course_lib.evaluation import paired_comparison  # noqa: E402

RECORD = ROOT / "course_lib" / "records" / "chat_model_runs.json"


def minutes(text: str) -> float:
    """An argparse type: a number of minutes, >= 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of minutes, got {text!r}") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be at least 0, got {text}")
    return value


def summary(row: dict) -> dict:
    return {k: row[k] for k in ("score", "stderr", "interval", "n")}


def rejudge(record: dict) -> dict:
    """Every run's stored version 1 replies judged again by today's rules (``robustness.is_right``:
    R17-B2 made spelling and dates exact), and its robustness scores recomputed from them: no model
    is loaded, so runs whose checkpoints are gone are judged too."""
    items = load_robustness_set()
    for run in record["runs"]:
        stored = run["robustness_replies"]
        if [r["request"] for r in stored] != [i["request"] for i in items]:
            raise ValueError(f"{run['name']}: its stored replies are not version 1's requests in "
                             "order")
        rows = [{**i, "reply": r["reply"], "right": is_right(i, r["reply"])}
                for i, r in zip(items, stored)]
        scores = {"all": summarize([float(r["right"]) for r in rows])}
        for key in dict.fromkeys(k for r in rows for k in row_keys(r)):
            scores[key] = summarize([float(r["right"]) for r in rows if key in row_keys(r)])
        run["robustness"] = {k: summary(v) for k, v in scores.items()}
        run["robustness_replies"] = [{k: r[k] for k in ("request", "reply", "right")} for r in rows]
    record["robustness_rules"] = ("today's exact rules (chat.robustness.is_right), every run's "
                                  "stored replies judged again: python "
                                  "benchmarks/chat_model_runs.py --rejudge --update-record")
    return record


named_checkpoint = bench_args.named_checkpoint("a run's name in the record")


def recorded(record: dict, names, option: str) -> dict:
    """The record's runs by name (the part before ":"), every one of ``names`` checked to be
    there (a ValueError naming ``option`` and the runs there are)."""
    runs = {r["name"].split(":")[0]: r for r in record["runs"]}
    for name in names:
        if name not in runs:
            raise ValueError(f"{option} {name}: no such run in the record; give one of "
                             f"{', '.join(runs)}")
    return runs


def scored(path: Path, items: list[dict]) -> tuple[dict, list[dict]]:
    """The chat model of ``path`` on robustness-set ``items`` (each in a new conversation): its
    summaries by row key and its replies (request, reply, right)."""
    model, tokenizer = load_chat_model(path)
    scores = score_robustness(model.float(), tokenizer, items)
    return ({k: summary(v) for k, v in scores.items() if k != "rows"},
            [{k: r[k] for k in ("request", "reply", "right")} for r in scores["rows"]])


def score_v3(record: dict, pairs: list[tuple[str, Path]], limit=None) -> dict:
    """Each named run scored on version 3, the blind test set (``robustness_v3``, its replies in
    ``v3_replies``), and its validation-loss history (``val_loss_history``: the steps evaluated
    and the loss at each, step 0 being the model it started from) read from its checkpoint."""
    runs = recorded(record, [name for name, _ in pairs], "--score-v3")
    for name, path in pairs:
        run = runs[name]
        run["robustness_v3"], run["v3_replies"] = scored(path, load_robustness_set_v3()[:limit])
        history = torch.load(path, map_location="cpu", weights_only=False).get("history") or {}
        run["val_loss_history"] = {"step": history.get("eval_step"),
                                   "val_loss": history.get("val_loss")}
        print(f"{name}: v3 {run['robustness_v3']['all']['score']:.3f}", flush=True)
    record["robustness_v3_sha256"] = ROBUSTNESS_V3_SHA256
    record["v3_command"] = ("python benchmarks/chat_model_runs.py --score-v3 NAME=CKPT ... "
                            "--update-record (the nine GPU runs' checkpoints)")
    return record


def score_v4(record: dict, pairs: list[tuple[str, Path]], limit=None) -> dict:
    """Each named run scored on version 4, the blind set written after chat-char-cpu-5 shipped
    (``robustness_v4``, its replies in ``v4_replies``): once per model, for a run chosen before it
    is scored; a checkpoint whose SHA-256 a run of this record was scored with is refused, under
    any name (the guard reads this record only: another --json, or another copy of the same
    weights, is not caught; records/chat_robustness_v4.json holds the shipped models' scores)."""
    runs = recorded(record, [name for name, _ in pairs], "--score-v4")
    done = {r.get("v4_checkpoint_sha256"): n for n, r in runs.items() if "v4_replies" in r}
    for name, path in pairs:
        run, sha256 = runs[name], sha256_of(path)
        if "v4_replies" in run or sha256 in done:
            raise ValueError(f"--score-v4 {name}: {path} is already scored on version 4 (as "
                             f"{done.get(sha256, name)}), which is scored once per model")
        run["robustness_v4"], run["v4_replies"] = scored(path, load_robustness_set_v4()[:limit])
        run["v4_checkpoint_sha256"] = done[sha256] = sha256
        print(f"{name}: v4 {run['robustness_v4']['all']['score']:.3f}", flush=True)
    record["robustness_v4_sha256"] = ROBUSTNESS_V4_SHA256
    return record


def score_blind_identity(record: dict, pairs: list[tuple[str, Path]], limit=None) -> dict:
    """Each named run scored on chat.identity's blind set (``identity_blind``, its replies in
    ``identity_blind_replies``): each question asked once in a new conversation, greedy."""
    runs = recorded(record, [name for name, _ in pairs], "--score-blind-identity")
    for name, path in pairs:
        table, runs[name]["identity_blind_replies"] = scored(path, blind_identity_set()[:limit])
        runs[name]["identity_blind"] = table["all"]
        print(f"{name}: blind identity {table['all']['score']:.3f}", flush=True)
    record["identity_blind_sha256"] = BLIND_SHA256
    return record


def rescore_letters(record: dict, pairs: list[tuple[str, Path]], limit=None) -> dict:
    """Each named run's in-template letters row scored again by today's rule (``chat.scores``: the
    last integer in the reply; exact match of the reply until issue 54 judged worked replies), its
    replies kept (``in_template_rows``' ``outputs``) so the next rule change needs no model."""
    runs = recorded(record, [name for name, _ in pairs], "--rescore-letters")
    test = load_conversations("test")[:limit]
    for name, path in pairs:
        model, tokenizer = load_chat_model(path)
        row = score_task(model.float(), tokenizer, test, "letters")
        run, was = runs[name], runs[name]["in_template"]["letters"]["score"]
        run["in_template"]["letters"] = summary(row)
        rows = run.setdefault("in_template_rows", [])  # the first runs kept no per-item rows
        stored = next((r for r in rows if r["task"] == "letters"), None)
        if stored is None:
            rows.append(stored := {"task": "letters"})
        stored.update(per_item=[float(x) for x in row["per_item"]], outputs=row["outputs"])
        print(f"{name}: in-template letters {was:.3f} (exact match) -> {row['score']:.3f} "
              "(last number)", flush=True)
    record["letters_rule"] = ("in-template letters judged by the last integer in the reply "
                              "(chat.scores.judge) for every run whose model was at hand: python "
                              "benchmarks/chat_model_runs.py --rescore-letters NAME=CKPT ... "
                              "--json FILE; the others' replies were bare counts (exact match)")
    return record


def run_pair(text: str) -> tuple[str, str]:
    """An argparse type: B=A, two run names of the record (a treatment and its control)."""
    b, sep, a = text.partition("=")
    if not sep or not a or not b:
        raise argparse.ArgumentTypeError(f"expected B=A, two run names of the record, got {text!r}")
    return b, a


def per_item(run: dict) -> dict[str, list[float]]:
    """A recorded run's per-item scores: version 2 (``v2 all``, ``v2 TASK``), version 3 when it was
    scored (``v3 ...``, and both development sets together: ``v2+v3 all``, ``v2+v3 spelling and
    letters``), in-template and the blind identity set."""
    out = {}
    for name, replies, items in (("v2", run["v2_replies"], load_robustness_set_v2()),
                                 ("v3", run.get("v3_replies"), load_robustness_set_v3())):
        if replies is None:
            continue
        right = [float(r["right"]) for r in replies]
        if [r["request"] for r in replies] != [i["request"] for i in items]:
            raise ValueError(f"{run['name']}: its stored replies are not {name}'s requests in "
                             "order")
        out[f"{name} all"] = right
        for key in dict.fromkeys(k for i in items for k in row_keys(i)):
            out[f"{name} {key}"] = [x for x, i in zip(right, items) if key in row_keys(i)]
    if "v3 all" in out:
        out["v2+v3 all"] = out["v2 all"] + out["v3 all"]
        out["v2+v3 spelling and letters"] = [x for v in ("v2", "v3") for task in
                                             ("spelling", "letters") for x in out[f"{v} {task}"]]
    for row in run["in_template_rows"]:
        out[f"in-template {row['task']}"] = row["per_item"]
    if "identity_blind_replies" in run:
        out["blind identity"] = [float(r["right"]) for r in run["identity_blind_replies"]]
    return out


def compare_pairs(record: dict, pairs: list[tuple[str, str]]) -> dict:
    """Each pair's scores, and per score B - A with the items as the unit: chapter 16's paired
    comparison of each item's score averaged over the seeds of B and of A (its interval resamples
    items, an item's seeds together: the seeds of one arm fail on the same items, so pooling them
    as independent pairs would narrow it), and the items better and worse."""
    runs = recorded(record, [n for pair in pairs for n in pair], "--paired")
    scores = [(per_item(runs[b]), per_item(runs[a])) for b, a in pairs]
    out = {}
    for key in [k for k in scores[0][0] if all(k in s for pair in scores for s in pair)]:
        sizes = {len(s[key]) for pair in scores for s in pair}
        if len(sizes) > 1:
            raise ValueError(f"--paired: the runs hold {key} scores of different lengths "
                             f"({', '.join(map(str, sorted(sizes)))}): pair runs scored on the "
                             "same sets")
        each = [(sum(sb[key]) / len(sb[key]), sum(sa[key]) / len(sa[key])) for sb, sa in scores]
        b, a = ([sum(items) / len(scores) for items in zip(*(pair[k][key] for pair in scores))]
                for k in (0, 1))
        c = paired_comparison(b, a)
        out[key] = {"pairs": each, "diff": c["diff"], "interval": list(c["interval"]),
                    "items_better": c["a_wins"], "items_worse": c["b_wins"]}
        low, high = c["interval"]
        print(f"{key:<36} " + "  ".join(f"{x:.2f} vs {y:.2f}" for x, y in each)
              + f"  | B-A {c['diff']:+.3f} [{low:+.3f}, {high:+.3f}]"
              + f" items better:worse {c['a_wins']}:{c['b_wins']}", flush=True)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--checkpoint", type=Path, help="a chat model written by chat-sft")
    source.add_argument("--shipped", action="store_true", help="the chat model course_lib ships")
    source.add_argument("--rejudge", action="store_true",
                        help="no model: judge every run's stored replies again "
                        "by today's rules and recompute their robustness scores (after a rule "
                        "changed)")
    source.add_argument("--score-v3", type=named_checkpoint, nargs="+", metavar="NAME=CKPT",
                        help="score these runs of the record on version 3 (the blind test set) "
                        "and store their validation-loss history from the checkpoint")
    source.add_argument("--rescore-letters", type=named_checkpoint, nargs="+",
                        metavar="NAME=CKPT", help="score these runs of the record again on the "
                        "in-template letters conversations, by today's rule (the last number in "
                        "the reply), keeping the replies")
    source.add_argument("--score-v4", type=named_checkpoint, nargs="+", metavar="NAME=CKPT",
                        help="score these runs of the record on version 4 (the blind set written "
                        "after chat-char-cpu-5 shipped), once per run")
    source.add_argument("--score-blind-identity", type=named_checkpoint, nargs="+",
                        metavar="NAME=CKPT", help="score these runs of the record on the blind "
                        "identity set (chat.identity: the phrasing bank's held-out half)")
    source.add_argument("--paired", type=run_pair, nargs="+", metavar="B=A",
                        help="no model: compare recorded runs B against their controls A, item "
                        "by item (versions 2 and 3, in-template), the items resampled with their "
                        "seeds")
    p.add_argument("--name",
                   help="the run's name in the record (needed with --checkpoint or --shipped)")
    p.add_argument("--commands", default="", help="the commands that trained it, as one text")
    p.add_argument("--cpu-minutes", type=minutes, help="CPU time of the training, as measured")
    p.add_argument("--wall-minutes", type=minutes, help="wall time of the training, as measured")
    p.add_argument("--role", choices=("shipped", "first"),
                   help="name this run as the model that ships now (the "
                   "one that shipped before becomes the role 'previous'), or the first chat model, "
                   "in the record's roles")
    p.add_argument("--limit", type=count,
                   help="score only the first N items of each set (a quick try)")
    p.add_argument("--threads", type=threads, default=1)
    p.add_argument("--from", dest="source", type=Path, nargs="+", default=[RECORD],
                   metavar="FILE", help="the records --paired and --score-v3 read, their runs "
                   "together (default: the shipped one)")
    add_record_options(p, RECORD)
    args = p.parse_args(argv)
    for path in args.source:
        if not path.is_file():
            p.error(f"--from {path} is not a file: give a record this benchmark wrote")
    source = json.loads(args.source[0].read_text())
    source["runs"] += [r for path in args.source[1:] for r in json.loads(path.read_text())["runs"]]
    if args.rejudge:
        out = record_file(p, args, RECORD)
        out.finish(rejudge(json.loads(RECORD.read_text())), say=True)
        return 0
    for named, update in ((args.rescore_letters, rescore_letters), (args.score_v3, score_v3),
                          (args.score_v4, score_v4),
                          (args.score_blind_identity, score_blind_identity)):
        if named:  # recorded runs scored again from their checkpoints
            out = record_file(p, args, RECORD, inputs=[c for _, c in named])
            torch.set_num_threads(args.threads)
            try:
                record = update(source, named, args.limit)
            except ValueError as e:
                p.error(str(e))
            out.finish(record, say=True)
            return 0
    if args.paired:
        try:
            compare_pairs(source, args.paired)
        except ValueError as e:
            p.error(str(e))
        return 0
    if args.name is None:
        p.error("--name is needed: the run's name in the record")
    if args.checkpoint is not None and not args.checkpoint.is_file():
        p.error(f"--checkpoint {args.checkpoint} is not a file: give a chat-sft run's ckpt.pt")
    out = record_file(p, args, RECORD, inputs=[args.checkpoint] if args.checkpoint else ())
    torch.set_num_threads(args.threads)
    began = time.perf_counter()
    model, tokenizer = load_chat_model(args.checkpoint)
    model = model.float()
    ckpt = (torch.load(args.checkpoint, map_location="cpu", weights_only=False) if args.checkpoint
            else {})
    robust = score_robustness(model, tokenizer, load_robustness_set()[:args.limit])
    robust_v2 = score_robustness(model, tokenizer, load_robustness_set_v2()[:args.limit])
    test = load_conversations("test")[:args.limit]
    tasks = sorted({c["task"] for c in test}, key=lambda t: [c["task"] for c in test].index(t))
    rows = score_model(model, tokenizer, test, tasks=tasks, without_calculator=(), progress=False)
    in_template = {row.get("key") or row["task"]: summary(row) for row in rows}
    for name, table in (("validation (v1)", {k: v for k, v in robust.items() if k != "rows"}),
                        ("test (v2)", {k: v for k, v in robust_v2.items() if k != "rows"}),
                        ("in-template (test split)", in_template)):
        print(name)
        for key, row in table.items():
            low, high = row["interval"]
            print(f"  {key:<25} {row['score']:6.1%} of {row['n']:>3}  (95% interval {low:.1%} to "
                  f"{high:.1%})")
    config = model.config
    run = {"name": args.name, "commands": args.commands,
           "parameters": model.num_parameters(),
           "model": {k: getattr(config, k) for k in ("n_layer", "n_head", "n_embd",
                                                     "block_size", "vocab_size")},
           "train_config": ckpt.get("train_config"), "trained_on": ckpt.get("trained_on"),
           "steps": ckpt.get("step"),
           "final_val_loss": (ckpt.get("history") or {}).get("val_loss", [None])[-1],
           "cpu_minutes": args.cpu_minutes, "wall_minutes": args.wall_minutes,
           "robustness": {k: summary(v) for k, v in robust.items() if k != "rows"},
           "robustness_replies": [{k: r[k] for k in ("request", "reply", "right")}
                                  for r in robust["rows"]],
           "robustness_v2": {k: summary(v) for k, v in robust_v2.items() if k != "rows"},
           "v2_replies": [{k: r[k] for k in ("request", "reply", "right")}
                          for r in robust_v2["rows"]],
           "in_template": in_template,
           "in_template_rows": [{"task": row.get("key") or row["task"],
                                 "per_item": [float(x) for x in row["per_item"]],
                                 **({"outputs": row["outputs"]} if "outputs" in row else {})}
                                for row in rows if "per_item" in row],
           "scoring_seconds": round(time.perf_counter() - began, 1),
           "load_average": os.getloadavg()[0],
           "made_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    if run["trained_on"]:
        # no local path
        run["trained_on"] = {k: v for k, v in run["trained_on"].items() if k != "base_checkpoint"}
    old = json.loads(out.path.read_text()) if out.path is not None and out.path.exists() else {}
    runs = [r for r in old.get("runs", []) if r["name"] != args.name] + [run]
    roles = dict(old.get("roles", {}))
    if args.role == "shipped" and roles.get("shipped") not in (None, args.name):
        # the model that shipped before this one, kept in the record's roles
        roles["previous"] = roles["shipped"]
    roles.update({args.role: args.name} if args.role else {})
    # what other modes added to the record (the v3 command, the letters rule...) is kept
    record = {**old,
              "command": "python benchmarks/chat_model_runs.py --checkpoint CKPT --name NAME "
                         "--commands ... --cpu-minutes M --wall-minutes M --update-record (one run "
                         "at a time)",
              "robustness_sha256": ROBUSTNESS_SHA256, "robustness_v2_sha256": ROBUSTNESS_V2_SHA256,
              "conversations_sha256": CHAT_SHA256,
              "torch": torch.__version__, "threads": args.threads, "roles": roles, "runs": runs}
    out.finish(record, say=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
