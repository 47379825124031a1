"""Chapter 14's ablation: the CPU preset's model (4 layers, 4 heads, C=128, T=64, batch 12) trained on
tiny Shakespeare for the same number of steps with each Llama-style change alone and all four together,
several seeds, each model's loss on the same validation batches. It stores every per-batch loss as JSON,
for a test paired over batches and seeds (chapter 14 shows one paired over seeds).

    PYTHONPATH=$PWD python benchmarks/ablation_ch14.py --json /tmp/ablation.json
    PYTHONPATH=$PWD python benchmarks/ablation_ch14.py --steps 1000 --seeds 0 1 2 --json /tmp/ablation_1000.json

The defaults are the design of the runs stored in course_lib/records/ablation_ch14.json, which chapter 14
reads (250 steps with 25 of warm-up, 40 validation batches of 32 windows drawn with seed 2024), with seeds 0,
1 and 2 instead of 0 and 1. Seeds 0 and 1 use the same code and numeric environment as those stored runs (not
re-checked on 2026-11-26, when the shared machine was too loaded to run it). Runs in the reference numeric
environment (course_lib/tools/numerics.py).

An earlier, one-seed run of this script (2026-11-24, --iters 1000 --seeds 1 --eval-batches 100, no noise
estimate) gave, vs the GPT-2 block: RMSNorm -0.0012, RoPE -0.1579, SwiGLU -0.1793, GQA +0.0075, all four
-0.2506.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from course_lib.tools.numerics import apply_reference_environment, wait_passively  # noqa: E402  (no torch)

VARIANTS = {
    "GPT-2 block": {},
    "RMSNorm": dict(norm="rmsnorm"),
    "RoPE": dict(rope_theta=10000.0),
    "SwiGLU": dict(mlp="swiglu"),
    "GQA (2 kv heads)": dict(n_kv_head=2),
    "all four": dict(norm="rmsnorm", rope_theta=10000.0, mlp="swiglu", n_kv_head=2),
}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=250)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--eval-batches", type=int, default=40)
    p.add_argument("--json", help="write every per-batch loss to this JSON file")
    p.add_argument("--host-env", action="store_true", help="this machine's numeric settings, not the reference")
    args = p.parse_args(argv)
    if not args.host_env:
        apply_reference_environment()  # before torch is imported
    wait_passively()
    from dataclasses import replace

    import torch
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
    base = replace(preset.model, vocab_size=tok.vocab_size)
    train_config = replace(preset.train, max_iters=args.steps, warmup_iters=max(1, args.steps // 10),
                           eval_interval=args.steps, eval_iters=1)
    generator = torch.Generator().manual_seed(2024)
    val_batches = [get_batch(val_data, base.block_size, 32, generator) for _ in range(args.eval_batches)]
    runs = {}
    bar = tqdm(total=len(VARIANTS) * len(args.seeds), desc="ablation runs")
    for name, options in VARIANTS.items():
        runs[name] = {"options": options, "seeds": {}}
        for seed in args.seeds:
            seed_everything(seed)
            model = GPT(replace(base, **options))
            start = time.perf_counter()
            Trainer(model, train_data, val_data, replace(train_config, seed=seed), progress=False,
                    verbose=False).train()
            seconds = time.perf_counter() - start
            model.eval()
            with torch.no_grad():
                losses = [model(xb, yb)[1].item() for xb, yb in val_batches]
            runs[name]["params"] = model.num_parameters()
            runs[name]["seeds"][str(seed)] = {"val_losses": [round(x, 6) for x in losses], "train_s": round(seconds, 1)}
            bar.update()
            bar.write(f"{name:18s} seed {seed}: mean val loss {sum(losses) / len(losses):.4f} ({seconds:.1f} s)")
    bar.close()
    if args.json:
        result = {"command": "python benchmarks/ablation_ch14.py " + " ".join(argv if argv is not None else sys.argv[1:]),
                  "steps": args.steps, "warmup_iters": train_config.warmup_iters, "seeds": args.seeds,
                  "model": base.to_dict(), "batch_size": train_config.batch_size,
                  "val_batches": {"count": args.eval_batches, "windows_each": 32, "generator_seed": 2024},
                  "environment": "host" if args.host_env else "reference (course_lib/tools/numerics.py)",
                  "load_average_at_end": os.getloadavg(), "runs": runs}
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
