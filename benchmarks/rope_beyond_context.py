"""Chapter 14: what a RoPE model does beyond the length it was trained at. Trains the ablation's RoPE
model (the CPU preset's 4 layers, 4 heads, C=128, RoPE base 10000) at T = 64 on tiny Shakespeare, then,
with no fine-tuning, rebuilds it with block_size 256 (RoPE has no position table: the state dict is
copied as is) and measures the mean validation loss at each position 0..255 of windows of 256 tokens
with plain RoPE, position interpolation (rope_scaling="linear", factor 4) and Llama 3.1's scaling
(rope_scaling="llama3", factor 4, original context 64). Writes the per-position losses as JSON.

    PYTHONPATH=$PWD python benchmarks/rope_beyond_context.py --json course_lib/records/rope_beyond_context.json

Runs in the reference numeric environment (course_lib/tools/numerics.py). Position interpolation and
the llama3 scaling are normally followed by a short fine-tune at the longer length; this does not do one.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from course_lib.tools.numerics import apply_reference_environment, wait_passively  # noqa: E402  (no torch)

SCALINGS = {
    "plain RoPE": dict(rope_scaling=None),
    "linear x4 (position interpolation)": dict(rope_scaling="linear", rope_factor=4.0),
    "llama3 x4": dict(rope_scaling="llama3", rope_factor=4.0, rope_original_context=64),
}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=150)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--long", type=int, default=256, help="the evaluation windows' length")
    p.add_argument("--eval-batches", type=int, default=25)
    p.add_argument("--json", help="write the per-position losses to this JSON file")
    p.add_argument("--host-env", action="store_true", help="this machine's numeric settings, not the reference")
    args = p.parse_args(argv)
    if not args.host_env:
        apply_reference_environment()  # before torch is imported
    wait_passively()
    from dataclasses import replace

    import torch
    import torch.nn.functional as F
    from tqdm import tqdm

    from course_lib import GPT
    from course_lib.data import get_batch, load_text, train_val_split
    from course_lib.presets import get_preset
    from course_lib.tokenizers import CharTokenizer
    from course_lib.train import Trainer
    from course_lib.utils import seed_everything

    text = load_text("tinyshakespeare")
    tok = CharTokenizer.from_text(text)
    train_data, val_data = train_val_split(torch.tensor(tok.encode(text), dtype=torch.long))
    preset = get_preset("shakespeare-char-cpu")
    config = replace(preset.model, vocab_size=tok.vocab_size, rope_theta=10000.0)
    if config.block_size >= args.long:
        p.error(f"--long {args.long} must exceed the trained block_size {config.block_size}")
    train_config = replace(preset.train, max_iters=args.steps, warmup_iters=max(1, args.steps // 10),
                           eval_interval=args.steps, eval_iters=1, seed=args.seed)
    seed_everything(args.seed)
    model = GPT(config)
    start = time.perf_counter()
    Trainer(model, train_data, val_data, train_config, progress=True, verbose=False).train()
    train_s = time.perf_counter() - start
    state = model.state_dict()
    generator = torch.Generator().manual_seed(2024)
    batches = [get_batch(val_data, args.long, 8, generator) for _ in range(args.eval_batches)]
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
        tqdm.write(f"{name:36s} loss at 0-63 {mean[:64].mean():.4f}, 64-127 {mean[64:128].mean():.4f}, "
                   f"128-255 {mean[128:].mean():.4f}")
    if args.json:
        result = {"command": "python benchmarks/rope_beyond_context.py "
                             + " ".join(argv if argv is not None else sys.argv[1:]),
                  "model": config.to_dict(), "scalings": SCALINGS, "steps": args.steps,
                  "warmup_iters": train_config.warmup_iters, "batch_size": train_config.batch_size,
                  "seed": args.seed, "train_s": round(train_s, 1),
                  "eval_windows": {"length": args.long, "count": args.eval_batches * 8, "generator_seed": 2024},
                  "environment": "host" if args.host_env else "reference (course_lib/tools/numerics.py)",
                  "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
                  "load_average_at_end": os.getloadavg(), "per_position_loss": per_position}
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
