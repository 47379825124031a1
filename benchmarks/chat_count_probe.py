"""Does a chat model count letters? (issue 54) ``--per-count`` requests for each count k = 0..4,
drawn count first (``course_lib.chat.counting``) from the VALIDATION words of ``chat.data`` (held
out from training) and letter strings (``--seed``, other draws than training's), asked in the
shipped phrasings (``phrasing.ASK_LETTERS``: no phrasing noise, so it measures counting), greedy.
Per model and k, the share right by exact match (the reply is the count: the in-template rule
until issue 54) and by the last number in the reply (``chat.scores.last_number``: the rule of the
robustness sets, and of the in-template scores since), and its most frequent replies; and the
letters conversations of the in-template test split (``chat.json``) judged by both rules
(``in_template``), which tells a worked reply's counting from its format.

    python benchmarks/chat_count_probe.py --model NAME=CKPT ... [--shipped] [--per-count 50]
        [--json FILE]

Writes the record only when asked (``--json FILE``); it prints the table anyway.
"""
from __future__ import annotations

import argparse
import random
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

import bench_args  # noqa: E402
from bench_args import add_record_options, count, record_file, seed_number  # noqa: E402
from course_lib.chat import counting  # noqa: E402
from course_lib.chat.data import _pools, load_conversations  # noqa: E402
from course_lib.chat.engine import ChatEngine, load_chat_model  # noqa: E402
from course_lib.chat.phrasing import ASK_LETTERS  # noqa: E402
from course_lib.chat.scores import last_number, play, reference, reply_text  # noqa: E402


named_checkpoint = bench_args.named_checkpoint("a name")


def probe_items(per_count: int, seed: int) -> list[tuple[int, str]]:
    """(k, request) for k = 0..MAX_COUNT in turn, ``per_count`` each, over the validation words."""
    pools = _pools(0)
    val = {"words": pools["val"]["words"], "pseudo": pools["train"]["pseudo"]}
    pairs = counting.pairs_by_count(val["words"])
    rng, items = random.Random(seed), []
    for i in range(per_count * (counting.MAX_COUNT + 1)):
        k = i % (counting.MAX_COUNT + 1)
        word, letter = counting.draw_item(k, val, pairs, rng)
        items.append((k, rng.choice(ASK_LETTERS).format(c=letter, w=word)))
    return items


def judged(reply: str, answer: str) -> tuple[bool, bool]:
    """(the reply is the answer, the reply's last number is the answer)."""
    return reply.strip() == answer, last_number(reply) == answer


def in_template(engine) -> dict:
    """The in-template test split's letters conversations, judged by both rules."""
    items = [c for c in load_conversations("test") if c["task"] == "letters"]
    rows = [judged(reply_text(play(engine, c)[-1]), reference(c)) for c in items]
    return {"exact": sum(e for e, _ in rows) / len(rows),
            "last_number": sum(n for _, n in rows) / len(rows), "n": len(rows)}


def probe(model, tokenizer, items: list[tuple[int, str]]) -> dict:
    engine = ChatEngine(model, tokenizer, temperature=0.0, max_reply_tokens=40)
    exact, last, said = Counter(), Counter(), Counter()
    for k, text in items:
        reply = reply_text(play(engine, {"messages": [{"role": "user", "content": text}]})[-1])
        is_exact, is_last = judged(reply, str(k))
        exact[k] += is_exact
        last[k] += is_last
        said[last_number(reply) or reply.strip()] += 1
    n = len(items) // (counting.MAX_COUNT + 1)
    ks = range(counting.MAX_COUNT + 1)
    return {"exact": {k: exact[k] / n for k in ks}, "last_number": {k: last[k] / n for k in ks},
            "all_exact": sum(exact.values()) / len(items),
            "all_last_number": sum(last.values()) / len(items),
            "answers": dict(said.most_common(6)), "in_template": in_template(engine)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", type=named_checkpoint, nargs="*", default=[], metavar="NAME=CKPT")
    p.add_argument("--shipped", action="store_true", help="also the chat model course_lib ships")
    p.add_argument("--per-count", type=count, default=50, help="requests per count (default 50)")
    p.add_argument("--seed", type=seed_number, default=99)
    add_record_options(p, None)
    args = p.parse_args(argv)
    models = ([("shipped", None)] if args.shipped else []) + list(args.model)
    if not models:
        p.error("no model: give --model NAME=CKPT or --shipped")
    out = record_file(p, args, None, inputs=[c for _, c in args.model])
    torch.set_num_threads(1)
    items = probe_items(args.per_count, args.seed)
    record = {"command": "python benchmarks/chat_count_probe.py " + " ".join(argv or sys.argv[1:]),
              "per_count": args.per_count, "seed": args.seed, "models": {}}
    for name, path in models:
        model, tokenizer = load_chat_model(path)
        row = record["models"][name] = probe(model.float(), tokenizer, items)
        print(f"{name:16} exact " + " ".join(f"{v:.2f}" for v in row["exact"].values())
              + f" all {row['all_exact']:.3f} | last number "
              + " ".join(f"{v:.2f}" for v in row["last_number"].values())
              + f" all {row['all_last_number']:.3f} | in-template letters exact "
              + f"{row['in_template']['exact']:.3f} last number "
              + f"{row['in_template']['last_number']:.3f} | {row['answers']}", flush=True)
    out.finish(record, say=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
