"""Command line: ``python -m course_lib train / sample / params``.

    python -m course_lib train --preset shakespeare-char-cpu --out runs/cpu
    python -m course_lib train --text my.txt --set n_layer=6 --set max_iters=3000 --out runs/mine
    python -m course_lib train --out runs/cpu --resume --set max_iters=4000   # continue a run
    python -m course_lib train --set norm=rmsnorm --set rope_theta=10000 --set mlp=swiglu --set n_kv_head=2  # ch. 14
    torchrun --nproc_per_node=2 -m course_lib train --set grad_accum_steps=2 --out runs/ddp   # data parallel
    python -m course_lib sample --checkpoint runs/cpu/ckpt.pt --prompt "ROMEO:" --tokens 300
    python -m course_lib params --preset gpt2-small
    python -m course_lib train-dates --out runs/dates             # chapter 11's encoder-decoder
    python -m course_lib translate --checkpoint runs/dates/ckpt.pt "3 March 2021" "03/04/21" --beam 4
    python -m course_lib finetune --checkpoint runs/cpu/ckpt.pt --task dates --lora-rank 8 --out runs/ft
    python -m course_lib eval --checkpoint runs/cpu/ckpt.pt --tasks next-line,next-word --limit 50 --json card.json

Every bad input is a one-line error and exit status 2, with nothing written. Ctrl-C stops
training after the step under way, saves, says how to resume and exits with status 130; at any
other moment it is one line and status 130 too. A run holds its --out with a lock file, and its
checkpoint records what it was trained on, so that a resume with other data is refused.
Maintainer and instructor tools live in ``python -m course_lib.tools``.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import threading
import time
from dataclasses import fields
from pathlib import Path

DEVICES = ["cpu", "cuda", "mps"]

def cmd_params(args) -> int:
    from .presets import get_preset
    from .sizing import count_parameters, flops_per_token, parameter_breakdown

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


# --- train: a run is built by course_lib.runs; here, the folder it owns and what it prints ------------


def main_process() -> bool:
    """Rank 0 under torchrun (read before the process group exists), or the only process."""
    return int(os.environ.get("RANK", 0)) == 0


def train_settings(args) -> dict[str, str]:
    """``--set KEY=VALUE`` pairs, with ``--max-iters``, ``--dtype`` and ``--compile`` (their short forms)."""
    from .runs import settings_from_pairs

    settings = settings_from_pairs(args.set)
    if args.max_iters is not None:
        settings["max_iters"] = str(args.max_iters)
    if args.dtype is not None:
        settings["dtype"] = args.dtype
    if args.compile:
        settings["compile"] = "true"
    return settings


def cmd_train(args) -> int:
    from .checkpoint import CHECKPOINT_NAME, claim_folder
    from .runs import DEFAULT_PRESET
    from .utils import check_device

    # Everything that can be wrong is checked before anything is written.
    device = check_device(args.device)
    name = ("stdin" if args.text == "-" else Path(args.text).stem) if args.text else (args.preset or DEFAULT_PRESET)
    out = Path(args.out or f"runs/{name}")
    with claim_folder(out) if main_process() else contextlib.nullcontext():
        ckpt_path = out / CHECKPOINT_NAME
        if ckpt_path.exists() and not args.resume:
            raise FileExistsError(f"{ckpt_path} already exists: pass --resume to continue that run, "
                                  "or choose another --out so that it is not overwritten")
        return run_training(args, build_run(args, device, ckpt_path), name)


def build_run(args, device: str, ckpt_path: Path):
    """A new run, or the run saved in ``ckpt_path`` continued (``--resume``)."""
    from .runs import resume_run, start_run

    settings = train_settings(args)
    if ckpt_path.exists():
        run = resume_run(ckpt_path, settings, preset=args.preset, text_file=args.text, device=device)
        if main_process():
            print(f"resuming {ckpt_path} at step {run.trainer.step} of {run.trainer.config.max_iters}")
        return run
    run = start_run(args.preset, args.text, settings, device=device, out_dir=ckpt_path.parent)
    if args.resume and main_process():
        print(f"no checkpoint in {ckpt_path.parent} yet: starting a new run")
    return run


def run_training(args, run, name: str) -> int:
    from . import distributed
    from ._signals import pause_point
    from .generate import generate_text
    from .runs import resume_command

    trainer, tokenizer = run.trainer, run.tokenizer
    trainer.resume_hint = resume_command(args.argv)
    config, main = trainer.config, distributed.is_main()
    if main:
        processes = f" x {distributed.world_size()} processes" if distributed.is_distributed() else ""
        print(f"{name}: {trainer.model.num_parameters():,} parameters, {type(tokenizer).__name__} with "
              f"{tokenizer.vocab_size} tokens, on {trainer.device}{processes}; {config.max_iters} iterations, "
              f"checkpoints in {trainer.out_dir}")
    pause_point("start")
    start = time.perf_counter()
    history = trainer.train()  # Ctrl-C: it saves, says how to resume and raises TrainingInterrupted
    if not main:
        return 0
    speed = f", {trainer.tokens_per_s:,.0f} tokens/s" if trainer.tokens_per_s else ""
    speed += f", MFU {100 * trainer.mfu:.1f}%" if trainer.mfu is not None else ""
    print(f"done in {time.perf_counter() - start:.1f} s{speed}: val loss {history['val_loss'][-1]:.4f}; "
          f"saved {trainer.checkpoint_path}")
    args.on_interrupt = f"the run is complete and saved in {trainer.checkpoint_path} (step {trainer.step})"
    pause_point("final-sample")
    prompt = "\n" if "\n" in run.text else run.text[0]
    print(generate_text(trainer.model, tokenizer, prompt, 200, seed=config.seed, device=trainer.device))
    return 0


def cmd_train_dates(args) -> int:
    from .checkpoint import CHECKPOINT_NAME, claim_folder, load_checkpoint
    from .runs import check_made_by, resume_command
    from .dates import train_dates
    from .utils import check_device

    device = check_device(args.device)
    if args.max_iters is not None and args.max_iters < 1:
        raise ValueError(f"--max-iters must be at least 1, got {args.max_iters}")
    out = Path(args.out)
    with claim_folder(out):
        ckpt_path = out / CHECKPOINT_NAME
        if ckpt_path.exists() and not args.resume:
            raise FileExistsError(f"{ckpt_path} already exists: pass --resume to continue that run, "
                                  "or choose another --out so that it is not overwritten")
        ckpt = load_checkpoint(ckpt_path) if ckpt_path.exists() else None  # read once
        if ckpt is not None:
            check_made_by(ckpt, ckpt_path, "train-dates")
        trainer = train_dates(out, args.max_iters, device=device, resume=ckpt is not None,
                              resume_hint=resume_command(args.argv), checkpoint=ckpt)
    print(f"done: val loss {trainer.history['val_loss'][-1]:.4f}; saved {ckpt_path}")
    return 0


def cmd_translate(args) -> int:
    from .checkpoint import load_model, load_tokenizer
    from .seq2seq import Seq2Seq
    from .translate import translate
    from .utils import check_device

    device = check_device(args.device)
    model, ckpt = load_model(args.checkpoint, device)
    if not isinstance(model, Seq2Seq):
        raise ValueError(f"{args.checkpoint} holds a {ckpt['model_kind']!r} model, not an encoder-decoder: "
                         "use `sample` to generate text from it")
    tokenizer = load_tokenizer(ckpt, args.checkpoint)
    for source, target in zip(args.texts, translate(model, tokenizer, args.texts, beam_size=args.beam)):
        print(f"{source}  ->  {target}")
    return 0


def cmd_sample(args) -> int:
    from .checkpoint import load_model, load_tokenizer
    from ._signals import pause_point
    from .generate import check_sampling_args, generate_text
    from .utils import check_device

    if args.tokens < 1:
        raise ValueError(f"--tokens must be at least 1, got {args.tokens}")
    check_sampling_args(args.temperature, args.top_k, args.top_p, args.tokens)
    device = check_device(args.device)
    model, ckpt = load_model(args.checkpoint, device)
    if ckpt["model_kind"] == "seq2seq":
        raise ValueError(f"{args.checkpoint} holds an encoder-decoder, which translates rather than continues "
                         f"a text: use `python -m course_lib translate --checkpoint {args.checkpoint} TEXT`")
    tokenizer = load_tokenizer(ckpt, args.checkpoint)
    prompt = args.prompt.replace("\\n", "\n") if args.prompt else "\n"  # let a shell user type \n for a newline
    pause_point("sample")
    print(generate_text(model, tokenizer, prompt, args.tokens, seed=args.seed, device=device,
                        temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, use_cache=True))
    return 0


def build_parser() -> argparse.ArgumentParser:
    from .finetune import add_finetune_parser  # its logic lives in course_lib/finetune.py

    parser = argparse.ArgumentParser(prog="python -m course_lib", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    for add in (add_train_parser, add_sample_parser, add_dates_parsers, add_finetune_parser, add_params_parser,
                add_eval_parser):
        add(sub)
    return parser


def add_train_parser(sub) -> None:
    from .presets import PRESETS
    from .runs import DEFAULT_PRESET

    p = sub.add_parser("train", help="train a GPT on a preset's corpus or your own text, writing DIR/ckpt.pt",
                       formatter_class=argparse.RawDescriptionHelpFormatter, epilog=settings_help())
    p.add_argument("--preset", help=f"one of: {', '.join(PRESETS)} (default {DEFAULT_PRESET}; with --resume, the run's)")
    p.add_argument("--text", metavar="FILE", help="train on this UTF-8 text file instead of the preset's corpus "
                   "(its tokenizer is built from it; 90%% train, 10%% validation); - reads standard input")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override one model or training setting of the preset; repeat for more (see below)")
    p.add_argument("--max-iters", type=int, help="the same as --set max_iters=N")
    p.add_argument("--out", help="output folder (default runs/PRESET, or runs/NAME for --text NAME.txt)")
    p.add_argument("--resume", action="store_true", help="continue the run in --out if it has a checkpoint")
    p.add_argument("--device", choices=DEVICES, help="default: cuda, else mps, else cpu")
    p.add_argument("--dtype", choices=["fp32", "bf16", "fp16"], help="autocast precision (the same as --set dtype=...; "
                   "fp16 needs a CUDA GPU)")
    p.add_argument("--compile", action="store_true", help="torch.compile the model (the same as --set compile=true)")
    p.set_defaults(func=cmd_train)


def add_sample_parser(sub) -> None:
    from .utils import DEFAULT_SEED

    p = sub.add_parser("sample", help="generate text from a checkpoint")
    p.add_argument("--checkpoint", required=True, help="a ckpt.pt written by `train`")
    p.add_argument("--prompt", default="\n", help="text to continue (default: a newline)")
    p.add_argument("--tokens", type=int, default=500, help="how many tokens to generate (at least 1)")
    p.add_argument("--temperature", type=float, default=1.0, help="0 = greedy; < 1 sharper, > 1 flatter")
    p.add_argument("--top-k", type=int, default=None, help="sample among the k most likely tokens")
    p.add_argument("--top-p", type=float, default=None, help="sample from the nucleus of probability p")
    p.add_argument("--seed", type=int, default=DEFAULT_SEED)
    p.add_argument("--device", choices=DEVICES)
    p.set_defaults(func=cmd_sample)


def add_dates_parsers(sub) -> None:
    """``train-dates`` and ``translate``: chapter 11's encoder-decoder."""
    p = sub.add_parser("train-dates", help="train chapter 11's encoder-decoder to normalise dates, writing DIR/ckpt.pt")
    p.add_argument("--out", default="runs/dates", help="output folder (default runs/dates)")
    p.add_argument("--max-iters", type=int, help="training steps (default: the chapter's 1000)")
    p.add_argument("--resume", action="store_true", help="continue the run in --out if it has a checkpoint")
    p.add_argument("--device", choices=DEVICES)
    p.set_defaults(func=cmd_train_dates)

    p = sub.add_parser("translate", help="translate texts with an encoder-decoder checkpoint (train-dates)")
    p.add_argument("--checkpoint", required=True, help="a ckpt.pt written by `train-dates`")
    p.add_argument("texts", nargs="+", help="the texts to translate, e.g. '3 March 2021'")
    p.add_argument("--beam", type=int, default=1, help="beam size (1: greedy decoding)")
    p.add_argument("--device", choices=DEVICES)
    p.set_defaults(func=cmd_translate)


def add_params_parser(sub) -> None:
    from .presets import PRESETS

    p = sub.add_parser("params", help="print a preset's parameter breakdown and total")
    p.add_argument("--preset", required=True, help=f"one of: {', '.join(PRESETS)}")
    p.set_defaults(func=cmd_params)


def cmd_eval(args) -> int:
    """``eval``: a checkpoint's report card (chapter 16); the work is course_lib.report_card's."""
    from .report_card import evaluate_checkpoint
    from .utils import check_device

    evaluate_checkpoint(args.checkpoint, tasks=args.tasks, limit=args.limit, json_path=args.json,
                        shots=args.shots, device=check_device(args.device), progress=True)
    return 0


def add_eval_parser(sub) -> None:
    p = sub.add_parser("eval", help="a checkpoint's report card: bits per byte and every task with its interval")
    p.add_argument("--checkpoint", required=True, help="a ckpt.pt written by `train` or `finetune`")
    p.add_argument("--tasks", help="comma-separated task names (default: every task the tokenizer can encode)")
    p.add_argument("--limit", type=int, help="score only the first N items of each task")
    p.add_argument("--shots", type=int, default=0, help="worked examples from each task's training items")
    p.add_argument("--json", metavar="FILE", help="also write the report card as JSON to FILE")
    p.add_argument("--device", choices=DEVICES)
    p.set_defaults(func=cmd_eval)


def settings_help() -> str:
    from .model import GPTConfig
    from .train import TrainConfig

    def names(cls):
        return ", ".join(f.name for f in fields(cls))

    return ("settings for --set KEY=VALUE (values are checked like the config classes check them):\n"
            f"  model:    {names(GPTConfig)} (vocab_size comes from the tokenizer)\n"
            f"  training: {names(TrainConfig)}\n"
            "example: --set n_layer=6 --set n_embd=192 --set learning_rate=3e-4 --set dropout=0.1")


def main(argv=None) -> int:
    """Run a command; every failure is one line on stderr: a bad input exits with status 2, Ctrl-C
    with 130 (during training the Trainer saves first and says how to resume)."""
    from ._signals import INTERRUPTED, TrainingInterrupted

    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.default_int_handler)  # Ctrl-C raises KeyboardInterrupt from here on
    argv = list(sys.argv[1:] if argv is None else argv)
    args = argparse.Namespace(on_interrupt="nothing was written")
    try:
        build_parser().parse_args(argv, namespace=args)
        args.argv = argv
        return args.func(args)
    except TrainingInterrupted as stop:  # the Trainer has saved and printed how to resume
        return 128 + stop.signum
    except KeyboardInterrupt:
        print(f"interrupted (Ctrl-C): {args.on_interrupt}", file=sys.stderr)
        return INTERRUPTED
    except (ValueError, OSError) as e:  # CheckpointError is a ValueError; FileNotFoundError an OSError
        print(f"error: {e}", file=sys.stderr)
        return 2
    finally:
        from .distributed import teardown
        teardown()  # leave the torchrun process group, if this process joined one
