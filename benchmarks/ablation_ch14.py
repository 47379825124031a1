"""Chapter 14's ablation, larger: the CPU preset's model (4 layers, C=128, T=64) trained on tiny
Shakespeare for the same number of steps with each Llama-style change alone and all four together,
several seeds, validation loss on many batches (the same batches for every run).

    PYTHONPATH=$PWD python benchmarks/ablation_ch14.py --iters 2000 --seeds 3 --eval-batches 200

Prints a table: mean validation loss, its spread over seeds, and the difference to the GPT-2 baseline.
The chapter runs the same comparison at a size that fits its time budget (250 steps, 2 seeds, 40 batches).

Measured on 2026-11-24 (this repository's 2-core CI-sized machine, shared with other jobs, 2 threads;
timings not comparable, losses are): --iters 1000 --seeds 1 --eval-batches 100, validation loss after
1000 of the preset's steps (one seed: no noise estimate; the chapter's two seeds at 250 steps differ by
0.002-0.010):

    variant               mean  vs base
    GPT-2 baseline      2.0661  +0.0000
    RMSNorm             2.0649  -0.0012
    RoPE                1.9082  -0.1579
    SwiGLU              1.8868  -0.1793
    GQA (2 kv heads)    2.0736  +0.0075
    all four            1.8154  -0.2506
"""
from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import replace

import torch

from course_lib import GPT, Trainer
from course_lib.data import load_text, train_val_split
from course_lib.presets import get_preset
from course_lib.tokenizers import CharTokenizer
from course_lib.data import get_batch
from course_lib.losses import estimate_loss
from course_lib.utils import seed_everything

VARIANTS = {
    "GPT-2 baseline": {},
    "RMSNorm": dict(norm="rmsnorm"),
    "RoPE": dict(rope_theta=10000.0),
    "SwiGLU": dict(mlp="swiglu"),
    "GQA (2 kv heads)": dict(n_kv_head=2),
    "all four": dict(norm="rmsnorm", rope_theta=10000.0, mlp="swiglu", n_kv_head=2),
}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--iters", type=int, default=2000)
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--eval-batches", type=int, default=200)
    p.add_argument("--batch-size", type=int, default=None)
    args = p.parse_args()
    preset = get_preset("shakespeare-char-cpu")
    text = load_text(preset.corpus)
    tok = CharTokenizer.train(text)
    train, val = train_val_split(torch.tensor(tok.encode(text)))
    base = replace(preset.model, vocab_size=tok.vocab_size)
    tc = replace(preset.train, max_iters=args.iters, eval_interval=args.iters, eval_iters=1,
                 **({"batch_size": args.batch_size} if args.batch_size else {}))
    val_batch = lambda split, g: get_batch(val, base.block_size, 32, g)
    results = {}
    for name, options in VARIANTS.items():
        losses = []
        for seed in range(args.seeds):
            seed_everything(seed)
            model = GPT(replace(base, **options))
            start, cpu = time.perf_counter(), time.process_time()
            Trainer(model, train, val, replace(tc, seed=seed), progress=False, verbose=False).train()
            elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
            loss = estimate_loss(model, val_batch, args.eval_batches, seed=12345, splits=("val",))["val"]
            losses.append(loss)
            print(f"{name:18s} seed {seed}: val loss {loss:.4f}  ({elapsed:.1f} s wall, {cpu:.1f} s CPU, {model.num_parameters():,} params)",
                  flush=True)
        results[name] = losses
    base_mean = statistics.mean(results["GPT-2 baseline"])
    print(f"\n{'variant':18s} {'mean':>7s} {'spread':>7s} {'vs base':>8s}")
    for name, losses in results.items():
        mean = statistics.mean(losses)
        spread = max(losses) - min(losses)
        print(f"{name:18s} {mean:7.4f} {spread:7.4f} {mean - base_mean:+8.4f}")


if __name__ == "__main__":
    main()
