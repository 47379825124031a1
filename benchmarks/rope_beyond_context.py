"""Chapter 14: what a RoPE model does beyond the length it was trained at. Trains the ablation's
RoPE model (the CPU preset's 4 layers, 4 heads, C=128, RoPE base 10000) at T = 64 on tiny
Shakespeare, then, with no fine-tuning, rebuilds it with block_size 256 (RoPE has no position table:
the state dict is copied as is) and measures the mean validation loss at each position 0..255 of
windows of 256 tokens with plain RoPE, position interpolation (rope_scaling="linear", factor 4) and
Llama 3.1's scaling (rope_scaling="llama3", factor 4, original context 64). Writes the per-position
losses as JSON.

    PYTHONPATH=$PWD python benchmarks/rope_beyond_context.py --json
    course_lib/records/rope_beyond_context.json

Runs in the reference numeric environment (course_lib/tools/numerics.py). Position interpolation and
the llama3 scaling are normally followed by a short fine-tune at the longer length; this does not do
one.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_args import seed_number  # noqa: E402  (no torch)
# no torch
from ch14_setup import parse_args, start_cpu_run, validation_batches, write_record  # noqa: E402

SCALINGS = {
    "plain RoPE": dict(rope_scaling=None),
    "linear x4 (position interpolation)": dict(rope_scaling="linear", rope_factor=4.0),
    "llama3 x4": dict(rope_scaling="llama3", rope_factor=4.0, rope_original_context=64),
}


def _options(p) -> None:
    p.add_argument("--seed", type=seed_number, default=0)
    p.add_argument("--long", type=int, default=256, help="the evaluation windows' length")


def main(argv=None) -> int:
    args = parse_args(__doc__, argv, steps=150, eval_batches=25, add=_options)
    from dataclasses import replace

    import torch
    import torch.nn.functional as F
    from tqdm import tqdm

    from course_lib import GPT

    run = start_cpu_run(args.steps, args.seed, dict(rope_theta=10000.0), progress=True)
    config, train_config = run.trainer.model.config, run.trainer.config
    if config.block_size >= args.long:
        args.parser.error(f"--long {args.long} must exceed the trained block_size "
                          f"{config.block_size}")
    start = time.perf_counter()
    run.trainer.train()
    train_s = time.perf_counter() - start
    state = run.trainer.model.state_dict()
    batches = validation_batches(run.val_data, args.long, 8, args.eval_batches)
    per_position = {}
    for name, options in tqdm(SCALINGS.items(), desc="scalings"):
        long_model = GPT(replace(config, block_size=args.long, **options))
        long_model.load_state_dict(state)
        long_model.eval()
        total = torch.zeros(args.long, dtype=torch.float64)
        with torch.no_grad():
            for xb, yb in batches:
                logits, _ = long_model(xb)
                loss = F.cross_entropy(logits.transpose(1, 2), yb, reduction="none")  # (B, T)
                total += loss.double().sum(0)
        mean = total / (len(batches) * xb.shape[0])
        per_position[name] = [round(x, 5) for x in mean.tolist()]
        tqdm.write(f"{name:36s} loss at 0-63 {mean[:64].mean():.4f}, 64-127 "
                   f"{mean[64:128].mean():.4f}, 128-255 {mean[128:].mean():.4f}")
    write_record(args, "rope_beyond_context.py", argv, {
        "model": config.to_dict(), "scalings": SCALINGS, "steps": args.steps,
        "warmup_iters": train_config.warmup_iters, "batch_size": train_config.batch_size,
        "seed": args.seed, "train_s": round(train_s, 1),
        "eval_windows": {"length": args.long, "count": args.eval_batches * 8,
                         "generator_seed": 2024},
        "per_position_loss": per_position})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
