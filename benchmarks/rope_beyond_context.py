"""Beyond the trained length (chapter 14): a RoPE model trained at T = 64, evaluated at 256 positions.

The CPU preset's model with RoPE (4 layers, C = 128, hs = 32, base 10,000) is trained on tiny
Shakespeare with contexts of 64 tokens. Its weights are then loaded, unchanged, into the same model
built for 256 positions, three ways (no fine-tuning):

- plain RoPE: positions 64 .. 255 get angles the slow pairs never reached in training;
- position interpolation (Chen et al. 2023; ``rope_scaling="linear"``, factor 4): every angle
  divided by 4, so 256 positions span the angles of 64;
- Llama 3.1's scaling (``rope_scaling="llama3"``, factor 4, original context 64, low/high frequency
  factors 1 and 4): the fast pairs kept, the slow ones divided by 4, the middle ones mixed.

Each is scored on the same validation windows of 256 tokens; the loss at every position, averaged
over the windows, is stored per seed. Usage:

    PYTHONPATH=$PWD python benchmarks/rope_beyond_context.py --json course_lib/records/rope_beyond_context.json

Runs in the reference numeric environment (course_lib/tools/numerics.py) unless --host-env.
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

TRAINED, LONG = 64, 256
METHODS = {
    "plain RoPE": {},
    "position interpolation (linear, x4)": dict(rope_scaling="linear", rope_factor=4.0),
    "llama3 scaling (x4)": dict(rope_scaling="llama3", rope_factor=4.0, rope_low_freq_factor=1.0,
                                rope_high_freq_factor=4.0, rope_original_context=TRAINED),
}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=500)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    p.add_argument("--windows", type=int, default=96, help="validation windows of 256 tokens")
    p.add_argument("--json", help="write the per-position losses to this JSON file")
    p.add_argument("--host-env", action="store_true")
    args = p.parse_args(argv)
    if not args.host_env:
        apply_reference_environment()
    wait_passively()
    from dataclasses import replace

    import torch
    import torch.nn.functional as F
    from tqdm import tqdm

    from course_lib import GPT
    from course_lib.data import load_text, train_val_split
    from course_lib.presets import get_preset
    from course_lib.tokenizers import CharTokenizer
    from course_lib.train import Trainer
    from course_lib.utils import seed_everything

    text = load_text("tinyshakespeare")
    tok = CharTokenizer.from_text(text)
    train_data, val_data = train_val_split(torch.tensor(tok.encode(text), dtype=torch.long))
    preset = get_preset("shakespeare-char-cpu")
    short = replace(preset.model, vocab_size=tok.vocab_size, block_size=TRAINED, rope_theta=10000.0)
    train_config = replace(preset.train, max_iters=args.steps, warmup_iters=args.steps // 10,
                           eval_interval=args.steps, eval_iters=1)
    g = torch.Generator().manual_seed(2024)
    starts = torch.randint(0, len(val_data) - LONG - 1, (args.windows,), generator=g)
    x = torch.stack([val_data[s:s + LONG] for s in starts.tolist()])  # (W, 256)
    y = torch.stack([val_data[s + 1:s + LONG + 1] for s in starts.tolist()])
    result = {"command": "python benchmarks/rope_beyond_context.py " + " ".join(argv if argv is not None else sys.argv[1:]),
              "trained_context": TRAINED, "evaluated_context": LONG, "steps": args.steps, "seeds": args.seeds,
              "windows": args.windows, "model": short.to_dict(), "methods": METHODS,
              "environment": "host" if args.host_env else "reference (course_lib/tools/numerics.py)",
              "per_position_loss": {m: {} for m in METHODS}}
    for seed in tqdm(args.seeds, desc="seeds"):
        seed_everything(seed)
        model = GPT(short)
        start = time.perf_counter()
        Trainer(model, train_data, val_data, replace(train_config, seed=seed), progress=False, verbose=False).train()
        print(f"seed {seed}: trained {args.steps} steps at T = {TRAINED} in {time.perf_counter() - start:.0f} s", flush=True)
        for method, options in METHODS.items():
            long = GPT(replace(short, block_size=LONG, **options)).eval()
            long.load_state_dict(model.state_dict())  # the angles are buffers, not weights: same weights
            with torch.no_grad():
                logits = torch.cat([long(x[i:i + 16])[0] for i in range(0, len(x), 16)])  # (W, 256, V)
                loss = F.cross_entropy(logits.transpose(1, 2), y, reduction="none").mean(0)  # (256,)
            result["per_position_loss"][method][str(seed)] = [round(v, 5) for v in loss.tolist()]
            print(f"  {method:36s} positions 0-63: {loss[:TRAINED].mean():.4f}, 64-255: {loss[TRAINED:].mean():.4f}",
                  flush=True)
    result["load_average_at_end"] = os.getloadavg()
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
