"""Speculative decoding on the shipped model (chapter 22): two drafters side by side, k = 1..8,
temperature 0 and 1, against plain generation with the KV cache, interleaved repeats.

The target is course_lib.pretrained's model (4 layers, C=128, block_size 64). The drafters: a
trigram table counted from the training split (no training), and a 1-layer GPT (C=64) trained on
the same split (course_lib.speculative.train_draft, ``--draft-steps``). The prompts are the first
characters of lines of the validation split; prompt and new tokens fit in block_size, where the
KV cache works (past it the course's learned positions make every step a full window). Usage:

    python benchmarks/speculative.py [--prompts 8] [--tokens 48] [--repeats 5] [--threads 1]
        [--json FILE | --update-record]

It prints, for every (temperature, drafter, k): the acceptance rate alpha, tokens per target call
measured and predicted by Leviathan et al.'s formula from the alpha of k = 1, tokens/s, and the
paired speed ratio (plain time / speculative time within a repeat; median, min, max over repeats).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import torch
from bench_args import (RECORDS, add_record_options, at_least,
                        count, record_file, seed_number, threads)

from course_lib.data import load_text, train_val_split
from course_lib.pretrained import load_pretrained
from course_lib.speculative import ModelDrafter, NGramDrafter
from course_lib.speculative.measure import draft_cost, measure, summarise
from course_lib.speculative.train_draft import DRAFT_STEPS, train_draft_gpt
from course_lib.tools.numerics import wait_passively

SHIPPED = RECORDS / "speculative.json"


def prompts_from(val_text: str, n: int, length: int = 12) -> list[str]:
    """The first ``length`` characters of n lines of
    the validation text that are at least that long."""
    lines = [line for line in val_text.split("\n") if len(line) >= length]
    step = max(1, len(lines) // n)
    return [lines[i * step][:length] for i in range(n)]


def parse(argv):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--prompts", type=count, default=8, help="prompts from the validation split")
    p.add_argument("--tokens", type=at_least(2), default=48,
                   help="new tokens per prompt (prompt 12 + tokens <= 64)")
    p.add_argument("--max-k", type=count, default=8, help="k = 1 .. max-k draft tokens per round")
    p.add_argument("--repeats", type=count, default=5, help="interleaved repeats of every way")
    p.add_argument("--draft-steps", type=count, default=DRAFT_STEPS,
                   help="training steps of the 1-layer GPT drafter")
    p.add_argument("--seed", type=seed_number, default=0)
    p.add_argument("--threads", type=threads, default=1,
                   help="torch.set_num_threads (1: fastest on a busy machine)")
    add_record_options(p, SHIPPED)
    args = p.parse_args(argv)
    if 12 + args.tokens > 64:
        p.error(f"--tokens {args.tokens}: the 12-character prompt and the new tokens must fit in "
                f"block_size 64 (at most 52)")
    return p, args


def main(argv=None) -> int:
    p, args = parse(argv)
    out = record_file(p, args, SHIPPED)
    torch.set_num_threads(args.threads)
    target, tok = load_pretrained()
    ids = torch.tensor(tok.encode(load_text()), dtype=torch.long)
    train, val = train_val_split(ids)
    start = time.perf_counter()
    draft_gpt, history = train_draft_gpt(tok, steps=args.draft_steps, seed=1337)
    train_s = time.perf_counter() - start
    drafters = {"trigram": NGramDrafter(train, tok.vocab_size, n=3),
                "gpt-1-layer": ModelDrafter(draft_gpt)}
    prompts = [tok.encode(s) for s in prompts_from(tok.decode(val.tolist()), args.prompts)]
    costs = {name: draft_cost(target, d, prompts[0], args.tokens) for name, d in drafters.items()}
    record = measure(target, drafters, prompts, args.tokens, range(1, args.max_k + 1), (0.0, 1.0),
                     args.repeats,
                     args.seed, progress=lambda m: print(m, file=sys.stderr, flush=True))
    rows = summarise(record, costs)
    command = "python benchmarks/speculative.py " + " ".join(argv if argv is not None
                                                             else sys.argv[1:])
    record.update(command=command.strip(), draft_steps=args.draft_steps,
                  draft_val_loss=history["val_loss"][-1], draft_train_seconds=train_s,
                  draft_cost=costs, cpu_count=os.cpu_count(), torch=torch.__version__, rows=rows)
    print(f"target: the shipped model; {args.prompts} prompts x {args.tokens} new tokens; threads "
          f"{args.threads}; "
          f"load average {min(min(t['loadavg']) for t in record['temperatures'].values()):.1f} to "
          f"{max(max(t['loadavg']) for t in record['temperatures'].values()):.1f} on "
          f"{os.cpu_count()} cores")
    print("draft cost c (one draft token / one target token): "
          + ", ".join(f"{k} {v:.3f}" for k, v in costs.items()))
    print(f"{'T':>3} {'drafter':12} {'k':>2} {'alpha':>6} {'tok/call':>8} {'model':>6} "
          f"{'tok/s':>7} "
          f"{'plain':>7} {'ratio':>6} {'[min, max]':>13}")
    for r in rows:
        print(f"{r['temperature']:3g} {r['drafter']:12} {r['k']:2d} {r['alpha']:6.2f} "
              f"{r['tokens_per_call']:8.2f} "
              f"{r['predicted_tokens_per_call']:6.2f} {r['tokens_per_s']:7.0f} "
              f"{r['plain_tokens_per_s']:7.0f} "
              f"{r['ratio']:5.2f}x [{r['ratio_min']:.2f}, {r['ratio_max']:.2f}]")
    out.finish(record, say=True)
    return 0


if __name__ == "__main__":
    wait_passively()
    raise SystemExit(main())
