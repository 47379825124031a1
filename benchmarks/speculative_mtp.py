"""Drafter 3 (chapter 22): the MTP-trained speedrun model drafts for itself with its own heads,
beside the trigram table drafting for the same model; k = 1..D, temperature 0 and 1, against that
model's plain generation with the KV cache, interleaved repeats (course_lib.speculative.measure).

The target is not the shipped model of benchmarks/speculative.py: it is the MTP arm of
benchmarks/speedrun_mtp.py (the `shakespeare-char-speedrun` preset with ``--set mtp_heads=3``, seed
1337, the equal-time steps of course_lib/records/speedrun_mtp.json), trained here by
course_lib.runs.pretrain.make_trainer on one thread, or read from ``--checkpoint``. Usage:

    python benchmarks/speculative_mtp.py [--checkpoint CKPT] [--prompts 8] [--tokens 48]
        [--repeats 5]
        [--json FILE | --update-record]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch
from bench_args import RECORDS, add_record_options, at_least, count, record_file, seed_number
from speculative import prompts_from

from course_lib.checkpoint import load_model, load_tokenizer
from course_lib.data import load_text, train_val_split
from course_lib.losses import sequence_loss
from course_lib.speculative import NGramDrafter
from course_lib.speculative.measure import cost_model_rows, draft_cost, measure, summarise
from course_lib.speculative.self_draft import SelfDrafter, check_mtp_model
from course_lib.tools.numerics import wait_passively

SHIPPED = RECORDS / "speculative_mtp.json"
AB = RECORDS / "speedrun_mtp.json"


def parse(argv):
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--checkpoint", help="an MTP model's ckpt.pt (default: train it here, as the A/B did)"
    )
    p.add_argument(
        "--steps",
        type=count,
        help="training steps (default: the A/B's equal-time steps, else 396); "
        "with --checkpoint: the steps it was trained for, as recorded",
    )
    p.add_argument("--prompts", type=count, default=8)
    p.add_argument(
        "--tokens", type=at_least(2), default=48, help="new tokens per prompt (12 + tokens <= 64)"
    )
    p.add_argument("--repeats", type=count, default=5)
    p.add_argument("--seed", type=seed_number, default=0)
    add_record_options(p, SHIPPED)
    args = p.parse_args(argv)
    if 12 + args.tokens > 64:
        p.error(
            f"--tokens {args.tokens}: the 12-character prompt and the new tokens must fit in "
            "block_size 64 "
            "(at most 52)"
        )
    if args.checkpoint and not os.path.isfile(args.checkpoint):
        p.error(
            f"--checkpoint {args.checkpoint}: no such file; give an MTP run's ckpt.pt, or leave it "
            "out"
        )
    return p, args


def train_mtp_model(steps: int, seed: int = 1337):
    """The A/B's MTP arm, built by course_lib.runs (the speedrun preset, mtp_heads=3)."""
    from course_lib.runs.pretrain import make_trainer
    from course_lib.tokenizers import train_tokenizer

    text = load_text()
    tok = train_tokenizer("char", text)
    train, val = train_val_split(torch.tensor(tok.encode(text), dtype=torch.long))
    trainer = make_trainer(
        "shakespeare-char-speedrun",
        train,
        val,
        {"mtp_heads": 3, "max_iters": steps, "seed": seed},
        tokenizer=tok,
        device="cpu",
        progress=False,
        verbose=False,
    )
    trainer.train()
    return trainer.model.eval(), tok


def main(argv=None) -> int:
    p, args = parse(argv)
    out = record_file(p, args, SHIPPED)
    torch.set_num_threads(1)
    ab = json.loads(AB.read_text()) if AB.exists() else {}
    steps = args.steps or ab.get("steps", {}).get("mtp_equal_time", 396)
    start = time.perf_counter()
    if args.checkpoint:
        model, ckpt = load_model(args.checkpoint, "cpu")
        tok = load_tokenizer(ckpt, args.checkpoint)
        model.eval()
    else:
        model, tok = train_mtp_model(steps)
    try:
        heads = check_mtp_model(model)
    except ValueError as e:
        p.error(f"--checkpoint {args.checkpoint}: {e}")
    train_s = time.perf_counter() - start
    ids = torch.tensor(tok.encode(load_text()), dtype=torch.long)
    train, val = train_val_split(ids)
    val_loss = sequence_loss(model, val)
    drafters = {
        "trigram": NGramDrafter(train, tok.vocab_size, n=3),
        "mtp-heads": SelfDrafter(model),
    }
    prompts = [tok.encode(s) for s in prompts_from(tok.decode(val.tolist()), args.prompts)]
    costs = {"trigram": draft_cost(model, drafters["trigram"], prompts[0], args.tokens)}
    record = measure(
        model,
        drafters,
        prompts,
        args.tokens,
        range(1, heads + 1),
        (0.0, 1.0),
        args.repeats,
        args.seed,
        progress=lambda m: print(m, file=sys.stderr, flush=True),
    )
    rows = summarise(record, costs)
    given = list(argv if argv is not None else sys.argv[1:])
    if (
        args.checkpoint
    ):  # the record names the run (speedrun_mtp.py --keep RUNS), not this machine's folders
        given = [
            f"RUNS/{os.path.basename(os.path.dirname(os.path.abspath(a)))}/ckpt.pt"
            if a == args.checkpoint
            else a
            for a in given
        ]
    command = "python benchmarks/speculative_mtp.py " + " ".join(given)
    record.update(
        command=command.strip(),
        target=("read from --checkpoint" if args.checkpoint else "trained here")
        + f": {steps} steps",
        mtp_heads=heads,
        steps=steps,
        val_loss=val_loss,
        train_seconds=train_s,
        draft_cost=costs,
        cpu_count=os.cpu_count(),
        torch=torch.__version__,
        rows=rows,
        cost_model=cost_model_rows(record),
    )
    print(
        f"target: the MTP speedrun model ({heads} extra heads, {steps} steps), whole-split val "
        f"loss {val_loss:.4f}; "
        f"{args.prompts} prompts x {args.tokens} new tokens; load average "
        f"{min(min(t['loadavg']) for t in record['temperatures'].values()):.1f} to "
        f"{max(max(t['loadavg']) for t in record['temperatures'].values()):.1f} on "
        f"{os.cpu_count()} cores"
    )
    print(
        f"{'T':>3} {'drafter':10} {'k':>2} {'alpha':>6} {'tok/call':>8} {'tok/s':>7} {'plain':>7} "
        f"{'ratio':>6} "
        f"{'[min, max]':>13}"
    )
    for r in rows:
        print(
            f"{r['temperature']:3g} {r['drafter']:10} {r['k']:2d} {r['alpha']:6.2f} "
            f"{r['tokens_per_call']:8.2f} "
            f"{r['tokens_per_s']:7.0f} {r['plain_tokens_per_s']:7.0f} {r['ratio']:5.2f}x "
            f"[{r['ratio_min']:.2f}, {r['ratio_max']:.2f}]"
        )
    out.finish(record, say=True)
    return 0


if __name__ == "__main__":
    wait_passively()
    raise SystemExit(main())
