"""``python -m course_lib quantize`` and ``qat``: chapter 23. ``quantize`` writes the 4-bit
(``gpt-int4``) checkpoint of a GPT, by round-to-nearest or GPTQ (the work is
:func:`course_lib.quantize.convert.quantize_checkpoint`'s); ``qat`` is a kind of run,
quantization-aware training (:mod:`course_lib.runs.qat`), whose body is every training command's
(:func:`course_lib.cli.common.cmd_run`).
"""
from __future__ import annotations

from ..quantize.convert import CALIBRATION_WINDOWS, METHODS, quantize_checkpoint
from ..quantize.embeddings import EMBEDDINGS
from ..quantize.int4 import KERNEL_GROUP_SIZES
from .common import add_run_options


def cmd_quantize(args) -> int:
    if (args.checkpoint is None) == (args.checkpoint_option is None):
        raise ValueError("give the checkpoint to quantize once: python -m course_lib quantize CKPT "
                         "--out FILE (or --checkpoint CKPT)")
    args.checkpoint = args.checkpoint or args.checkpoint_option
    done = quantize_checkpoint(args.checkpoint, args.out, bits=args.bits,
                               method=args.method, group_size=args.group_size,
                               symmetric=not args.asymmetric, text_file=args.text,
                               calibration=args.calibration, embeddings=args.embeddings)
    args.on_interrupt = f"{done['path']} is written"
    how = "symmetric" if done["symmetric"] else "with zero points"
    print(f"wrote {done['path']}: int4 per group of {done['group_size']} ({how}) by "
          f"{done['method']}, "
          f"embeddings {done['embeddings']}; "
          f"{done['tensor_bytes']:,} bytes of tensors, a {done['file_bytes']:,}-byte file "
          f"(the input: {done['input_bytes']:,} bytes)")
    return 0


def add_quantize_parsers(sub) -> None:
    p = sub.add_parser("quantize",
                       help="write the 4-bit checkpoint of a GPT (round-to-nearest or GPTQ) that "
                       "sample, eval and chat read")
    p.add_argument("checkpoint", nargs="?",
                   help="a GPT ckpt.pt (train, a full finetune, the shipped model) or a qat "
                   "run's (or give it as --checkpoint)")
    p.add_argument("--checkpoint", dest="checkpoint_option", metavar="CHECKPOINT",
                   help="the same, as an option "
                   "(as sample, eval and qat take it)")
    p.add_argument("--bits", type=int, default=4,
                   help="bits per weight (4: what PyTorch's CPU kernel multiplies)")
    p.add_argument("--method", default="rtn", help=f"one of: {', '.join(METHODS)} (default rtn)")
    p.add_argument("--group-size", type=int, default=32, help="weights of a row sharing a scale: "
                   f"{', '.join(map(str, KERNEL_GROUP_SIZES))} (default 32)")
    p.add_argument("--asymmetric", action="store_true",
                   help="a zero point per group (default: symmetric)")
    p.add_argument("--text", metavar="FILE",
                   help="gptq: the text to calibrate on (default: the one the "
                   "checkpoint records)")
    p.add_argument("--calibration", type=int, default=CALIBRATION_WINDOWS,
                   help="gptq: random windows of the "
                   f"training text (default {CALIBRATION_WINDOWS})")
    p.add_argument("--embeddings", default="int8",
                   help=f"how the embedding tables are stored: {', '.join(EMBEDDINGS)} "
                   "(default int8: 8 bits per row, as GPTQ leaves them wider; same: 4 bits like "
                   "the rest)")
    p.add_argument("--out", required=True,
                   help="the new checkpoint (never the input, nor another checkpoint)")
    p.set_defaults(func=cmd_quantize)

    p = sub.add_parser("qat", help="quantization-aware training: fine-tune a GPT with its weights "
                       "rounded in the forward pass, writing DIR/ckpt.pt")
    p.add_argument("--checkpoint", dest="base_checkpoint", help="the GPT to start from (a ckpt.pt)")
    p.add_argument("--text", dest="text_file", metavar="FILE",
                   help="the text to train on (default: the one the "
                   "checkpoint records: its preset's corpus, or the shipped model's)")
    p.add_argument("--bits", type=int,
                   help="bits per weight in the forward pass (2 to 8, default 4)")
    p.add_argument("--group-size", type=int, help="weights of a row sharing a scale (default 32)")
    p.add_argument("--embeddings",
                   help=f"how the embedding tables are trained and stored: {', '.join(EMBEDDINGS)} "
                   "(default int8)")
    add_run_options(p, "runs/qat")
