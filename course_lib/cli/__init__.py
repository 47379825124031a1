r"""Command line: ``python -m course_lib train / sample / params / train-dates / translate
/ finetune / eval / chat-sft / chat / dpo / grpo / induction / quantize / qat`` (chapter 17's two in
:mod:`course_lib.cli.chat`, chapter 18's in :mod:`course_lib.cli.align`, chapter 23's in
:mod:`course_lib.cli.quantize`; what they all share, the one body of every training command
included, in :mod:`course_lib.cli.common`).

    python -m course_lib train --preset shakespeare-char-cpu --out runs/cpu
    python -m course_lib train --text my.txt --set n_layer=6 --set max_iters=3000 --out runs/mine
    python -m course_lib train --out runs/cpu --resume --set max_iters=4000   # continue a run
    python -m course_lib train --set norm=rmsnorm --set rope_theta=10000 --set mlp=swiglu \
        --set n_kv_head=2   # ch. 14
    torchrun --nproc_per_node=2 -m course_lib train --set grad_accum_steps=2 \
        --out runs/ddp   # data parallel
    python -m course_lib sample --checkpoint runs/cpu/ckpt.pt --prompt "ROMEO:" --tokens 300
    python -m course_lib params --preset gpt2-small
    python -m course_lib train-dates --out runs/dates             # chapter 11's encoder-decoder
    python -m course_lib translate --checkpoint runs/dates/ckpt.pt "3 March 2021" "03/04/21" \
        --beam 4
    python -m course_lib finetune --checkpoint runs/cpu/ckpt.pt --task dates --lora-rank 8 \
        --out runs/ft
    python -m course_lib eval --checkpoint runs/cpu/ckpt.pt --tasks next-line,next-word \
        --limit 50 --json card.json
    python -m course_lib dpo --checkpoint runs/sft/ckpt.pt --set beta=0.1 \
        --out runs/dpo   # chapter 18
    python -m course_lib grpo --checkpoint runs/sft/ckpt.pt --reward exact --set group_size=8 \
        --out runs/grpo
    # chapter 17: the shipped model into a chat model
    python -m course_lib chat-sft --out runs/chat
    python -m course_lib chat --checkpoint runs/chat/ckpt.pt   # talk to it (--web: in the browser)
    # chapter 21: the phase change (--fixed-offset: the control)
    python -m course_lib induction --out runs/induction
    python -m course_lib quantize runs/cpu/ckpt.pt --bits 4 --method gptq --group-size 32 \
        --out runs/cpu/int4.pt   # ch. 23
    python -m course_lib qat --checkpoint runs/cpu/ckpt.pt --bits 4 \
        --out runs/qat   # quantization-aware training

Every bad input is a one-line error and exit status 2, with nothing written. Ctrl-C stops
training after the step under way, saves, says how to resume and exits with status 130; at any
other moment it is one line and status 130 too. A run holds its --out with a lock file, and its
checkpoint records what made it (the command, and its data or base), so that a resume by another
command or with other data is refused. Maintainer and instructor tools live in
``python -m course_lib.tools``.
"""
from __future__ import annotations

import argparse
import signal
import sys
import threading
from dataclasses import fields

from .. import distributed
from .._signals import (INTERRUPTED, TrainingInterrupted,
                        exit_quietly_on_ctrl_c_while_exiting, pause_point)
from ..chat.robustness import card_rows
from ..checkpoint import load_model, load_tokenizer
from ..dates import dates_train_config
from ..finetune import FINETUNE_TASKS
from ..generate import generate_text
from ..lora import DEFAULT_TARGETS
from ..model import GPT, GPTConfig
from ..presets import PRESETS, get_preset
from ..registry import class_for_config
from ..evaluation.report_card import evaluate_checkpoint
from ..evaluation.tasks import TASK_NAMES
from ..runs import DEFAULT_PRESET
from ..runs.finetune import MAX_EVAL_EXAMPLES
from ..seq2seq import Seq2Seq
from ..speculative import drafter_from_checkpoint, speculative_text
from ..sizing import count_parameters, flops_per_token, parameter_breakdown
from ..train import TrainConfig
from ..translate import translate
from ..utils import check_device
from .align import add_align_parsers
from .chat import add_chat_parsers
from .quantize import add_quantize_parsers
from .common import (DEVICES, add_run_options, add_sampling_options, check_sampling_options,
                     cmd_run)  # noqa: F401 (cmd_run: the parsers')




def cmd_params(args) -> int:
    config = get_preset(args.preset).model
    print(f"{args.preset}: {config}")
    # chapter 24's hybrid: its own count of parameters and FLOPs
    if not isinstance(config, GPTConfig):
        model = class_for_config(config)(config)
        print(f"  total {sum(p.numel() for p in model.parameters()):,} parameters")
        print("training FLOPs per token (every operation, chapter 24): "
              f"{model.flops_per_token():,}")
        return 0
    parts = parameter_breakdown(config)
    total = count_parameters(config)
    width = max(len(k) for k in parts)
    for name, n in parts.items():
        print(f"  {name:<{width}}  {n:>15,}  {100 * n / total:5.1f}%")
    print(f"  {'total':<{width}}  {total:>15,}")
    print(f"training FLOPs per token (6N + 12LTC): {flops_per_token(config):,}")
    return 0


# --- train-dates and translate: chapter 11's encoder-decoder --------------------------------------


def cmd_translate(args) -> int:
    model, ckpt = load_model(args.checkpoint, check_device(args.device))
    if not isinstance(model, Seq2Seq):
        raise ValueError(f"{args.checkpoint} holds a {ckpt['model_kind']!r} model, not an "
                         "encoder-decoder: use `sample` to generate text from it")
    tokenizer = load_tokenizer(ckpt, args.checkpoint)
    for source, target in zip(args.texts,
                              translate(model, tokenizer, args.texts, beam_size=args.beam)):
        print(f"{source}  ->  {target}")
    return 0


# --- sample: any decoder checkpoint (bigram, gpt, gpt-lora) ---------------------------------------


def cmd_sample(args) -> int:
    check_sampling_options(args, args.tokens, "--tokens")
    model, ckpt = load_model(args.checkpoint, check_device(args.device))
    if isinstance(model, Seq2Seq):
        raise ValueError(f"{args.checkpoint} holds an encoder-decoder, which translates rather "
                         "than continues a text: use `python -m course_lib translate --checkpoint "
                         f"{args.checkpoint} TEXT`")
    tokenizer = load_tokenizer(ckpt, args.checkpoint)
    # let a shell user type \n for a newline
    prompt = args.prompt.replace("\\n", "\n") if args.prompt else "\n"
    sampling = dict(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p)
    # chapter 22: speculative decoding, the same text (greedy) or distribution (sampled)
    if args.draft:
        drafter = drafter_from_checkpoint(args.draft, model, ckpt, check_device(args.device))
        pause_point("sample")
        text, stats = speculative_text(model, drafter, tokenizer, prompt, args.tokens,
                                       args.draft_k, args.seed, **sampling)
        print(text)
        print(f"[draft: {stats.tokens_per_call:.2f} tokens per target call, {stats.acceptance:.0%} "
              f"of the drafted tokens kept]", file=sys.stderr)
        return 0
    pause_point("sample")
    print(generate_text(model, tokenizer, prompt, args.tokens, seed=args.seed,
                        use_cache=isinstance(model, GPT), **sampling))  # a bigram has no cache
    return 0


# --- the parsers ----------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m course_lib", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    for add in (add_train_parser, add_sample_parser, add_dates_parsers, add_finetune_parser,
                add_params_parser, add_eval_parser, add_chat_parsers, add_align_parsers,
                add_induction_parser, add_quantize_parsers):
        add(sub)
    return parser


def add_train_parser(sub) -> None:
    p = sub.add_parser("train", help="train a GPT on a preset's corpus or your own text, writing "
                                     "DIR/ckpt.pt",
                       formatter_class=argparse.RawDescriptionHelpFormatter, epilog=settings_help())
    p.add_argument("--preset", help=f"one of: {', '.join(PRESETS)} (default {DEFAULT_PRESET}; with "
                                    "--resume, the run's)")
    p.add_argument("--text", metavar="FILE", dest="text_file",
                   help="train on this UTF-8 text file instead of the "
                   "preset's corpus (its tokenizer is built from it; 90%% train, 10%% validation); "
                   "- reads standard input")
    add_run_options(p, None, "override one model or training setting of the preset; repeat for "
                             "more (see below)")
    p.add_argument("--dtype", choices=["fp32", "bf16", "fp16"],
                   help="autocast precision (the same as --set dtype=...; "
                   "fp16 needs a CUDA GPU)")
    p.add_argument("--compile", action="store_true",
                   help="torch.compile the model (the same as --set compile=true)")


def add_sample_parser(sub) -> None:
    p = sub.add_parser("sample",
                       help="generate text from a checkpoint (a bigram, a GPT or a LoRA fine-tune)")
    p.add_argument("--checkpoint", required=True,
                   help="a ckpt.pt written by `train`, `finetune` or the Trainer")
    p.add_argument("--prompt", default="\n", help="text to continue (default: a newline)")
    p.add_argument("--tokens", type=int, default=500,
                   help="how many tokens to generate (at least 1)")
    add_sampling_options(p, temperature=1.0)
    p.add_argument("--draft", help="a smaller GPT checkpoint with the same tokenizer: speculative "
                                   "decoding (chapter 22)")
    p.add_argument("--draft-k", type=int, default=4,
                   help="with --draft: tokens drafted per target call (default 4)")
    p.set_defaults(func=cmd_sample)


def add_dates_parsers(sub) -> None:
    """``train-dates`` and ``translate``: chapter 11's encoder-decoder."""
    p = sub.add_parser("train-dates", help="train chapter 11's encoder-decoder to normalise dates, "
                                           "writing DIR/ckpt.pt")
    add_run_options(p, "runs/dates", f"override one training setting (default: the chapter's, "
                    f"{dates_train_config().max_iters} steps); repeat for more")

    p = sub.add_parser("translate",
                       help="translate texts with an encoder-decoder checkpoint (train-dates)")
    p.add_argument("--checkpoint", required=True, help="a ckpt.pt written by `train-dates`")
    p.add_argument("texts", nargs="+", help="the texts to translate, e.g. '3 March 2021'")
    p.add_argument("--beam", type=int, default=1, help="beam size (1: greedy decoding)")
    p.add_argument("--device", choices=DEVICES)
    p.set_defaults(func=cmd_translate)


def comma_list(text: str) -> tuple[str, ...]:
    """``--lora-targets a,b``: the names between the commas, blanks left out."""
    return tuple(t.strip() for t in text.split(",") if t.strip())


def add_finetune_parser(sub) -> None:
    p = sub.add_parser("finetune",
                       help="fine-tune a pretrained GPT checkpoint on a task (full or LoRA), "
                       "writing DIR/ckpt.pt")
    p.add_argument("--checkpoint", dest="base_checkpoint",
                   help="the pretrained GPT (a ckpt.pt written by `train`); "
                   "with --resume only needed for a LoRA run whose base has moved (the same file, "
                   "checked by its SHA-256)")
    p.add_argument("--task", default="dates",
                   help=f"one of: {', '.join(FINETUNE_TASKS)} (default dates: chapter 11's "
                   "date normalisation as prompt=answer)")
    p.add_argument("--lora-rank", type=int,
                   help="train LoRA adapters of this rank (default: full fine-tuning)")
    p.add_argument("--lora-alpha", type=float,
                   help="LoRA's alpha (default: the rank, a scaling of 1)")
    p.add_argument("--lora-targets", metavar="NAMES", type=comma_list,
                   help="comma-separated linear layers to adapt "
                   f"(default: the attention projections, {','.join(DEFAULT_TARGETS)}; the MLP's "
                   "are mlp.c_fc,mlp.c_proj)")
    add_run_options(p, "runs/ft")
    p.add_argument("--eval-examples", type=int, default=500,
                   help="held-out dates for the final exact "
                   f"match (1 to {MAX_EVAL_EXAMPLES:,})")


def add_induction_parser(sub) -> None:
    p = sub.add_parser("induction", help="chapter 21: train the 2-layer attention-only model on "
                       "repeated segments, writing DIR/ckpt.pt")
    # default None, not False: a resume tells "not given"
    # (continue as started) from "given" (must match)
    p.add_argument("--fixed-offset", action="store_true", default=None,
                   help="the control: every row repeats at distance 16 (default: the length drawn "
                        "per row, 8-24)")
    add_run_options(p, "runs/induction")


def add_params_parser(sub) -> None:
    p = sub.add_parser("params", help="print a preset's parameter breakdown and total")
    p.add_argument("--preset", required=True, help=f"one of: {', '.join(PRESETS)}")
    p.set_defaults(func=cmd_params)


def cmd_eval(args) -> int:
    """``eval``: a checkpoint's report card (chapter 16); the work is
    course_lib.evaluation.report_card's."""
    evaluate_checkpoint(args.checkpoint, tasks=args.tasks, limit=args.limit, json_path=args.json,
                        shots=args.shots, device=check_device(args.device), progress=True,
                        more_rows=card_rows)  # a chat model: chapter 17's robustness sets too
    return 0


def add_eval_parser(sub) -> None:
    p = sub.add_parser("eval", help="a checkpoint's report card: bits per byte and every task with "
                                    "its interval")
    p.add_argument("--checkpoint", required=True, help="a ckpt.pt written by `train` or `finetune`")
    p.add_argument("--tasks",
                   help=f"comma-separated task names, of {', '.join(TASK_NAMES)} (default: every "
                   "task the tokenizer can encode, and for a chat model chapter 17's robustness "
                   "sets chat-v2 and chat-v3; the card says what each asks)")
    p.add_argument("--limit", type=int, help="score only the first N items of each task")
    p.add_argument("--shots", type=int, default=0,
                   help="worked examples from each task's training items")
    p.add_argument("--json", metavar="FILE",
                   help="also write the report card as JSON to FILE (-: standard "
                   "output); never over a checkpoint, a device or a folder")
    p.add_argument("--device", choices=DEVICES)
    p.set_defaults(func=cmd_eval)


def settings_help() -> str:
    def names(cls):
        return ", ".join(f.name for f in fields(cls))

    return ("settings for --set KEY=VALUE (values are checked like the config classes check "
            f"them):\n  model:    {names(GPTConfig)} (vocab_size comes from the tokenizer)\n"
            f"  training: {names(TrainConfig)}\n"
            "  (--preset shakespeare-char-hybrid, chapter 24: the fields of HybridConfig instead, "
            "e.g. --set layers=LLLA --set chunk_size=32)\n"
            "example: --set n_layer=6 --set n_embd=192 --set learning_rate=3e-4 --set dropout=0.1")


def main(argv=None, process: bool = False) -> int:
    """Run a command; every failure is one line on stderr: a bad input exits with status 2, Ctrl-C
    with 130 (during training the Trainer saves first and says how to resume). ``process``: this
    is the whole process (``python -m course_lib``), so a Ctrl-C after the command, while Python
    exits, is one line too."""
    if (signal.getsignal(signal.SIGINT) is not signal.SIG_IGN
            and threading.current_thread() is threading.main_thread()):
        # Ctrl-C raises KeyboardInterrupt from here on
        signal.signal(signal.SIGINT, signal.default_int_handler)
    argv = list(sys.argv[1:] if argv is None else argv)
    args = argparse.Namespace(on_interrupt="nothing was written")
    try:
        build_parser().parse_args(argv, namespace=args)
        args.argv = argv
        status = args.func(args)
        if process:  # at once, inside the try: a Ctrl-C before this line is the except's one line
            exit_quietly_on_ctrl_c_while_exiting(args.on_interrupt)
        return status
    except TrainingInterrupted as stop:  # the Trainer has saved and printed how to resume
        return 128 + stop.signum
    except KeyboardInterrupt:
        print(f"interrupted (Ctrl-C): {args.on_interrupt}", file=sys.stderr)
        return INTERRUPTED
    # CheckpointError is a ValueError; FileNotFoundError an OSError
    except (ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    finally:
        if process:  # after an error too: from here on Python exits
            exit_quietly_on_ctrl_c_while_exiting(args.on_interrupt)
        distributed.teardown()  # leave the torchrun process group, if this process joined one
