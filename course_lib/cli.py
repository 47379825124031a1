"""Command line: ``python -m course_lib train / sample / params``.

    python -m course_lib train --preset shakespeare-char-cpu --out runs/cpu
    python -m course_lib sample --checkpoint runs/cpu/ckpt.pt --prompt "ROMEO:" --tokens 300
    python -m course_lib params --preset gpt2-small
    python -m course_lib assignments build --chapter 3 --out student/   # for instructors
"""
from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch


def cmd_params(args) -> int:
    from .sizing import count_parameters, flops_per_token, parameter_breakdown
    from .presets import get_preset

    config = get_preset(args.preset).model
    print(f"{args.preset}: {config}")
    parts = parameter_breakdown(config)
    total = count_parameters(config)
    width = max(len(k) for k in parts)
    for name, n in parts.items():
        print(f"  {name:<{width}}  {n:>15,}  {100 * n / total:5.1f}%")
    print(f"  {'total':<{width}}  {total:>15,}")
    print(f"training FLOPs per token (6N + 12LTC): {flops_per_token(config):,}")
    return 0


def cmd_train(args) -> int:
    from .data import load_text, train_val_split
    from .generate import generate_text
    from .model import GPT
    from .presets import get_preset
    from .tokenizers import CharTokenizer
    from .train import Trainer
    from .utils import pick_device, seed_everything

    preset = get_preset(args.preset)
    if preset.train is None:
        raise ValueError(f"preset {args.preset!r} is for counting parameters only (try `params --preset "
                         f"{args.preset}`); train shakespeare-char-cpu or shakespeare-char-gpu")
    device = args.device or pick_device()
    text = load_text(preset.corpus)
    tokenizer = CharTokenizer.from_text(text)
    data = torch.tensor(tokenizer.encode(text), dtype=torch.long)
    train_data, val_data = train_val_split(data)
    out = Path(args.out or f"runs/{args.preset}")
    ckpt = out / "ckpt.pt"
    train_config = preset.train if args.max_iters is None else replace(preset.train, max_iters=args.max_iters)
    if ckpt.exists():
        if not args.resume:
            raise FileExistsError(f"{ckpt} already exists: pass --resume to continue that run, "
                                  "or choose another --out so that it is not overwritten")
        trainer = Trainer.resume(ckpt, train_data=train_data, val_data=val_data, device=device,
                                 max_iters=args.max_iters)
        print(f"resuming {ckpt} at step {trainer.step}")
    else:
        seed_everything(train_config.seed)
        model = GPT(replace(preset.model, vocab_size=tokenizer.vocab_size))
        trainer = Trainer(model, train_data, val_data, train_config, device=device, out_dir=out, tokenizer=tokenizer)
    print(f"{args.preset}: {trainer.model.num_parameters():,} parameters on {device}, "
          f"{trainer.config.max_iters} iterations")
    start = time.perf_counter()
    history = trainer.train()
    print(f"done in {time.perf_counter() - start:.1f} s: val loss {history['val_loss'][-1]:.4f}; saved {ckpt}")
    print(generate_text(trainer.model, tokenizer, "\n", 200, seed=train_config.seed, device=device))
    return 0


def cmd_sample(args) -> int:
    from .checkpoint import CheckpointError, load_model
    from .generate import check_sampling_args, generate_text
    from .tokenizers import CharTokenizer
    from .utils import pick_device

    check_sampling_args(args.temperature, args.top_k, args.top_p)
    device = args.device or pick_device()
    model, ckpt = load_model(args.checkpoint, device)
    if not ckpt.get("tokenizer"):
        raise CheckpointError(f"{args.checkpoint} stores no tokenizer, so its tokens cannot be turned into text")
    tokenizer = CharTokenizer.from_dict(ckpt["tokenizer"])
    prompt = args.prompt.replace("\\n", "\n") if args.prompt else "\n"  # let a shell user type \n for a newline
    print(generate_text(model, tokenizer, prompt, args.tokens, seed=args.seed, device=device,
                        temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, use_cache=True))
    return 0


def build_parser() -> argparse.ArgumentParser:
    from .presets import PRESETS

    parser = argparse.ArgumentParser(prog="python -m course_lib", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("train", help="train a preset on its corpus, writing DIR/ckpt.pt")
    p.add_argument("--preset", required=True, help=f"one of: {', '.join(PRESETS)}")
    p.add_argument("--max-iters", type=int, help="override the preset's number of iterations")
    p.add_argument("--out", help="output folder (default runs/PRESET)")
    p.add_argument("--resume", action="store_true", help="continue the run in --out if it has a checkpoint")
    p.add_argument("--device", help="cpu or cuda (default: cuda when available)")
    p.set_defaults(func=cmd_train)

    p = sub.add_parser("sample", help="generate text from a checkpoint")
    p.add_argument("--checkpoint", required=True, help="a ckpt.pt written by `train`")
    p.add_argument("--prompt", default="\n", help="text to continue (default: a newline)")
    p.add_argument("--tokens", type=int, default=500, help="how many tokens to generate")
    p.add_argument("--temperature", type=float, default=1.0, help="0 = greedy; < 1 sharper, > 1 flatter")
    p.add_argument("--top-k", type=int, default=None, help="sample among the k most likely tokens")
    p.add_argument("--top-p", type=float, default=None, help="sample from the nucleus of probability p")
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--device")
    p.set_defaults(func=cmd_sample)

    p = sub.add_parser("params", help="print a preset's parameter breakdown and total")
    p.add_argument("--preset", required=True, help=f"one of: {', '.join(PRESETS)}")
    p.set_defaults(func=cmd_params)

    # For instructors: `assignments build` (student notebooks) and `assignments grade`.
    from .assignments import add_parser as add_assignments_parser

    add_assignments_parser(sub)
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except (ValueError, FileNotFoundError, FileExistsError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
