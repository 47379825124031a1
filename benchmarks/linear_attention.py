"""Chapter 24's measurements: what a Gated DeltaNet state costs against a KV cache as the
context grows, and what it buys or loses at equal training FLOPs.

    PYTHONPATH=$PWD python benchmarks/linear_attention.py --update-record

Three parts, one record (course_lib/records/linear_attention.json), which chapter 24 prints:

- ``memory``: a 4-layer decoder (C=256, 4 heads of
  64) as all-attention, all-DeltaNet and 3:1 (LLLA):
  after a prompt of T tokens, the bytes each keeps for the next token (the DeltaNet states' and the
  KV caches' ``nbytes``, summed over layers), and the seconds per generated token (greedy, the mean
  of 16 one-token steps after the prompt, the fastest of 3 repeats, the repeats interleaved over the
  models and lengths; the load averages seen are recorded next to them).
- ``compare``: decoders (4 layers, C=64, 4 heads, T=64, batch 16) trained on tiny Shakespeare by
  characters: the ``--arms`` A (all-attention, RoPE on a quarter of each head: Qwen3.5's), A-full
  (RoPE on every channel), L (all-DeltaNet) and LLLA (3:1), each for the steps that give it the same
  training FLOPs (``HybridGPT.flops_per_token``, every operation counted) as ``--iters`` steps of A,
  with the same seeds and batches; the validation loss on the same held-out batches. The one
  comparison declared before running: LLLA minus A-full (the stronger attention), paired by seed, at
  150 steps.
- ``recall``: the same arms trained on associative recall (``probes.recall_batch``: ``--pairs``
  pairs, then up to 8 questions; keys and values 32 tokens each) for ``--recall-iters`` steps each;
  the share of questions answered on 512 held-out sequences.

One process per seed (or budget) writes its own ``--json``; ``--merge`` joins them into the record
(the compare runs grouped by budget). The shipped record::

    for s in 0 1 2; do
      python benchmarks/linear_attention.py --parts compare --iters 150 --seeds $s \\
          --json c150_$s.json
      python benchmarks/linear_attention.py --parts compare --iters 75 \\
          --arms A,A-full,LLLA --seeds $s --json c75_$s.json
      python benchmarks/linear_attention.py --parts recall --recall-iters 250 --pairs 8 \\
          --seeds $s --json r_$s.json
    done
    python benchmarks/linear_attention.py --parts memory --json memory.json
    python benchmarks/linear_attention.py --merge memory.json c*.json r_*.json --update-record
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import torch
from bench_args import count, record_file, seed_list, threads

from course_lib.data import get_batch, load_text, train_val_split
from course_lib.linear_attention.hybrid import HybridConfig, HybridGPT
from course_lib.linear_attention.probes import recall_accuracy, recall_batch
from course_lib.tokenizers import CharTokenizer
from course_lib.tools.numerics import wait_passively

RECORD = Path(__file__).resolve().parents[1] / "course_lib" / "records" / "linear_attention.json"
PATTERNS = {"attention": "A", "DeltaNet": "L", "3:1 hybrid": "LLLA"}
# the trained arms: the three patterns, and all-attention with RoPE on every channel of a head (the
# others turn a quarter, Qwen3.5's setting), the
# stronger attention baseline the comparison is made to
ARMS = {"attention": dict(layers="A"),
        "attention (full RoPE)": dict(layers="A", rotary_fraction=1.0),
        "DeltaNet": dict(layers="L"), "3:1 hybrid": dict(layers="LLLA")}
ARM_CODES = dict(zip(("A", "A-full", "L", "LLLA"), ARMS))  # --arms A,A-full,L,LLLA
SMALL = dict(n_layer=4, n_embd=64, n_head=4, block_size=64, chunk_size=32)
BATCH, LR = 16, 2e-3


def memory_part(contexts: list[int], new_tokens: int = 16, repeats: int = 3) -> list[dict]:
    """Interleaved: each repeat times every (model, context) once, in turn, so a change in the
    machine's load falls on all of them alike; a row keeps the fastest repeat and the load
    averages seen over its repeats."""
    models = {}
    for name, layers in PATTERNS.items():
        torch.manual_seed(0)
        models[name] = HybridGPT(HybridConfig(vocab_size=256, block_size=max(contexts), n_layer=4,
                                              n_embd=256, n_head=4, layers=layers)).eval()
    times: dict = {}
    kept: dict = {}
    loads: dict = {}
    for _ in range(repeats):
        for T in contexts:
            prompt = torch.randint(0, 256, (1, T), generator=torch.Generator().manual_seed(T))
            for name, model in models.items():
                memory: list = [None] * len(model.blocks)
                with torch.no_grad():
                    logits, _ = model(prompt, memory=memory)  # the prompt read once
                    kept[name, T] = sum(t.nbytes for m in memory
                                        for t in (m.values() if isinstance(m, dict) else m))
                    start = time.perf_counter()
                    # one token a step, each reading what the layers kept
                    for i in range(new_tokens):
                        logits, _ = model(logits[:, -1:].argmax(-1), memory=memory, start=T + i)
                    times.setdefault((name, T), []).append((time.perf_counter() - start)
                                                           / new_tokens)
                loads.setdefault((name, T), []).append(os.getloadavg()[0])
    rows = []
    for name in models:
        for T in contexts:
            per_token = min(times[name, T])
            rows.append({"model": name, "context": T, "bytes": kept[name, T],
                         "s_per_token": round(per_token, 5),
                         "tokens_per_s": round(1 / per_token, 1),
                         "load": round(max(loads[name, T]), 2),
                         "load_min": round(min(loads[name, T]), 2), "interleaved": True})
            print(rows[-1], flush=True)
    return rows


def train(model: HybridGPT, steps: int, batch_fn, seed: int) -> None:
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.1)
    g = torch.Generator().manual_seed(seed)
    model.train()
    for _ in range(steps):
        x, y = batch_fn(g)
        _, loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
    model.eval()


def compare_part(seeds: list[int], iters: int, eval_batches: int, arms: list[str]) -> dict:
    text = load_text("tinyshakespeare")
    tok = CharTokenizer.train(text)
    train_ids, val_ids = train_val_split(torch.tensor(tok.encode(text)))
    T = SMALL["block_size"]
    val = [get_batch(val_ids, T, BATCH, torch.Generator().manual_seed(10_000 + i))
           for i in range(eval_batches)]
    configs = {n: HybridConfig(vocab_size=tok.vocab_size, **arm, **SMALL)
               for n, arm in ARMS.items()}
    # every arm's: the budget is A's
    flops = {n: HybridGPT(c).flops_per_token() for n, c in configs.items()}
    budget = flops["attention"] * iters * BATCH * T
    steps = {n: round(budget / (f * BATCH * T)) for n, f in flops.items()}
    runs = []
    for seed in seeds:
        for name in arms:
            torch.manual_seed(seed)
            model = HybridGPT(configs[name])
            start = time.perf_counter()
            train(model, steps[name], lambda g: get_batch(train_ids, T, BATCH, g), seed)
            with torch.no_grad():
                loss = statistics.mean(float(model(x, y)[1]) for x, y in val)
            runs.append({"model": name, "seed": seed,
                         "steps": steps[name], "val_loss": round(loss, 4),
                         "train_s": round(time.perf_counter() - start, 1),
                         "load": os.getloadavg()[0]})
            print(runs[-1], flush=True)
    return {"iters": iters, "flops_per_token": flops,
            "steps": steps, "budget_flops": budget, "runs": runs}


def recall_part(seeds: list[int], iters: int, pairs_list: list[int], arms: list[str]) -> list[dict]:
    keys = values = 32
    rows = []
    for pairs in pairs_list:
        for seed in seeds:
            for name in arms:
                torch.manual_seed(seed)
                config = HybridConfig(vocab_size=keys + values, **ARMS[name],
                                      **dict(SMALL, block_size=2 * pairs + 16))
                model = HybridGPT(config)
                asked = min(8, pairs)
                train(model, iters, lambda g: recall_batch(32, pairs, asked, keys, values, g), seed)
                x, y = recall_batch(512, pairs, asked, keys, values,
                                    torch.Generator().manual_seed(99))
                with torch.no_grad():
                    acc = recall_accuracy(model(x)[0], y)
                rows.append({"model": name, "pairs": pairs,
                             "seed": seed, "accuracy": round(acc, 4)})
                print(rows[-1], flush=True)
    return rows


def merge_records(records: list[dict]) -> dict:
    """One record from several runs of this script (e.g. one process per seed): the memory part
    from the last that has one, the compare runs joined
    by budget (``iters``), the recall rows joined."""
    merged: dict = {}
    budgets: dict = {}
    for r in records:
        if "memory" in r:
            merged["memory"] = r["memory"]
        for part in r.get("compare", []):
            kept = budgets.setdefault(part["iters"], dict(part, runs=[]))
            kept["runs"] += part["runs"]
        if "recall" in r:
            merged.setdefault("recall", []).extend(r["recall"])
    if budgets:
        merged["compare"] = [budgets[k] for k in sorted(budgets)]
    return merged


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--parts", default="memory,compare,recall",
                   help="comma-separated: memory, compare, recall")
    p.add_argument("--contexts", default="64,256,1024,4096",
                   help="prompt lengths for the memory part")
    p.add_argument("--seeds", default="0,1,2", help="comma-separated seeds")
    p.add_argument("--iters", type=count, default=400,
                   help="all-attention's steps; the others get equal FLOPs")
    p.add_argument("--arms", default="A,A-full,L,LLLA",
                   help="the trained arms: A (attention, RoPE on a quarter of "
                   "each head, Qwen3.5's), A-full (RoPE on every channel), L (all DeltaNet), LLLA "
                   "(3:1 hybrid)")
    p.add_argument("--eval-batches", type=count, default=20)
    p.add_argument("--recall-iters", type=count, default=600)
    p.add_argument("--pairs", default="8,32", help="comma-separated numbers of key-value pairs")
    p.add_argument("--threads", type=threads, default=1,
                   help="torch threads (1: the fairest on a shared machine)")
    p.add_argument("--json", type=Path, default=None,
                   help="write the record here; without it nothing is written")
    p.add_argument("--update-record", action="store_true",
                   help=f"write the shipped record {RECORD.name}")
    p.add_argument("--merge", type=Path, nargs="+",
                   help="join these records' parts into one record and stop")
    args = p.parse_args(argv)
    if args.merge:
        missing = [str(m) for m in args.merge if not m.is_file()]
        if missing:
            p.error(f"--merge: no record at {', '.join(missing)}")
        out = record_file(p, args, RECORD, inputs=args.merge)
        records = [json.loads(m.read_text()) for m in args.merge]
        merged = merge_records(records)
        merged["command"] = " && ".join(r["command"] for r in records) + " (merged with --merge)"
        merged["machine"] = records[0]["machine"]
        out.finish(merged, say=True)
        return
    parts = args.parts.split(",")
    if set(parts) - {"memory", "compare", "recall"}:
        p.error(f"--parts: choose from memory, compare, recall; got {args.parts!r}")
    unknown = set(args.arms.split(",")) - set(ARM_CODES)
    if unknown:
        p.error(f"--arms: choose from {', '.join(ARM_CODES)}; got {', '.join(sorted(unknown))}")
    arms = [ARM_CODES[a] for a in args.arms.split(",")]
    try:
        seeds, contexts, pairs = (seed_list(args.seeds), seed_list(args.contexts),
                                  seed_list(args.pairs))
    except argparse.ArgumentTypeError as e:
        p.error(str(e))
    out = record_file(p, args, RECORD)
    torch.set_num_threads(args.threads)
    record = {"command": "python benchmarks/linear_attention.py " + " ".join(
        f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items()
        if k not in ("json", "update_record", "merge")),
        "machine": f"{os.cpu_count()} CPUs, torch {torch.__version__}, {args.threads} thread(s)"}
    if "memory" in parts:
        record["memory"] = memory_part(contexts)
    if "compare" in parts:
        record["compare"] = [compare_part(seeds, args.iters, args.eval_batches, arms)]
    if "recall" in parts:
        record["recall"] = recall_part(seeds, args.recall_iters, pairs, arms)
    out.finish(record, say=True)


if __name__ == "__main__":
    wait_passively()
    main()
