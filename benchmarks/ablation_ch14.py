"""Chapter 14's ablation: the CPU preset's model (4 layers, 4 heads, C=128, T=64, batch 12) trained
on tiny Shakespeare for the same number of steps with each Llama-style change alone and all four
together, several seeds, each model's loss on the same validation batches. It stores every per-batch
loss as JSON (after every run, so a stopped run keeps the seeds it finished), for chapter 14's test
paired over the batches and the seeds.

    PYTHONPATH=$PWD python benchmarks/ablation_ch14.py --json /tmp/ablation.json
    PYTHONPATH=$PWD python benchmarks/ablation_ch14.py --steps 1000 --seeds 0 1 2 --json
    /tmp/ablation_1000.json

The defaults are the design of the runs in course_lib/records/ablation_ch14.json, which chapter 14
reads: 250 steps with 25 of warm-up and cosine decay, 40 validation batches of 32 windows drawn with
seed 2024, seeds 0, 1 and 2. Runs in the reference numeric environment
(course_lib/tools/numerics.py), so the losses are the same on any x86-64 CPU with AVX2. The set-up
is shared with rope_beyond_context.py (benchmarks/ch14_setup.py).
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_args import seed_number  # noqa: E402  (no torch)
# no torch
from ch14_setup import (PRESET, parse_args, start_cpu_run, validation_batches,  # noqa: E402
                        write_record)

VARIANTS = {
    "GPT-2 block": {},
    "RMSNorm": dict(norm="rmsnorm"),
    "RoPE": dict(rope_theta=10000.0),
    "SwiGLU": dict(mlp="swiglu"),
    "GQA (2 kv heads)": dict(n_kv_head=2),
    "all four": dict(norm="rmsnorm", rope_theta=10000.0, mlp="swiglu", n_kv_head=2),
}


def _options(p) -> None:
    p.add_argument("--seeds", type=seed_number, nargs="+", default=[0, 1, 2])
    p.add_argument("--variants", nargs="+", default=list(VARIANTS), metavar="NAME",
                   help="run only these variants")


def main(argv=None) -> int:
    args = parse_args(__doc__, argv, steps=250, eval_batches=40, add=_options)
    unknown = [name for name in args.variants if name not in VARIANTS]
    if unknown:
        args.parser.error(f"--variants: unknown {unknown}; the variants are {list(VARIANTS)}")
    from dataclasses import replace

    import torch
    from tqdm import tqdm

    from course_lib.presets import get_preset

    variants = {name: VARIANTS[name] for name in args.variants}
    runs = {name: {"options": options, "seeds": {}} for name, options in variants.items()}
    fields, val_batches = None, None
    bar = tqdm(total=len(variants) * len(args.seeds), desc="ablation runs")
    for seed in args.seeds:  # seeds outside: a run stopped part-way keeps whole seeds
        for name, options in variants.items():
            run = start_cpu_run(args.steps, seed, options)
            if val_batches is None:
                val_batches = validation_batches(run.val_data, run.trainer.model.config.block_size,
                                                 32, args.eval_batches)
            start = time.perf_counter()
            run.trainer.train()
            seconds = time.perf_counter() - start
            model = run.trainer.model.eval()
            with torch.no_grad():
                losses = [model(xb, yb)[1].item() for xb, yb in val_batches]
            runs[name]["params"] = model.num_parameters()
            runs[name]["seeds"][str(seed)] = {"mean_val_loss": round(sum(losses) / len(losses), 6),
                                              "val_losses": [round(x, 6) for x in losses],
                                              "train_s": round(seconds, 1)}
            bar.update()
            bar.write(f"{name:18s} seed {seed}: mean val loss {sum(losses) / len(losses):.4f} "
                      f"({seconds:.1f} s)")
            if fields is None:
                train = run.trainer.config
                fields = {
                    "steps": args.steps,
                    "warmup_iters": train.warmup_iters,
                    "seeds": args.seeds,
                    "model": replace(
                        get_preset(PRESET).model, vocab_size=run.tokenizer.vocab_size
                    ).to_dict(),
                    "batch_size": train.batch_size,
                    "val_batches": {
                        "count": args.eval_batches,
                        "windows_each": 32,
                        "generator_seed": 2024,
                    },
                }
            # after every run
            write_record(args, "ablation_ch14.py", argv, {**fields, "runs": runs}, final=False)
    bar.close()
    write_record(args, "ablation_ch14.py", argv, {**fields, "runs": runs})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
