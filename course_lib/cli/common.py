"""What every command of ``python -m course_lib`` shares: the devices offered, the options of a
run (``--set``, ``--max-iters``, ``--out``, ``--resume``, ``--device``) and of sampling, and the one
body of every training command (:func:`cmd_run`): open the run's folder, start or resume the kind
of run (:mod:`course_lib.runs`), say what it is, train (Ctrl-C saves and says how to continue),
report.
"""
from __future__ import annotations

import os
import shlex
import time

from .. import distributed
from .._signals import pause_point
from ..config import settings_from_pairs
from ..generate import check_sampling_args
from ..run_folder import open_run
from ..runs import get_kind, resume, start
from ..utils import DEFAULT_SEED

DEVICES = ["cpu", "cuda", "mps"]


def run_settings(args) -> dict[str, str]:
    """``--set KEY=VALUE`` pairs with the short forms ``--max-iters`` (and train's ``--dtype``,
    ``--compile``); a short form and a ``--set`` of the same setting must agree."""
    settings = settings_from_pairs(args.set)
    if args.max_iters is not None and args.max_iters < 1:
        raise ValueError("--max-iters must be at least 1 (the same as --set max_iters=N), got "
                         f"{args.max_iters}")
    short = {"max_iters": ("--max-iters", None if args.max_iters is None else str(args.max_iters)),
             "dtype": ("--dtype", getattr(args, "dtype", None)),
             "compile": ("--compile", "true" if getattr(args, "compile", False) else None)}
    for key, (option, value) in short.items():
        if value is None:
            continue
        if key in settings and settings[key].strip().lower() != value:
            raise ValueError(f"{option} {value} and --set {key}={settings[key]} disagree: give the "
                             "setting once")
        settings[key] = value
    return settings


def main_process() -> bool:
    """Rank 0 under torchrun (read before the process group exists), or the only process."""
    return int(os.environ.get("RANK", 0)) == 0


def resume_command(argv: list[str]) -> str:
    """The command that continues the run ``argv`` started: the same arguments plus ``--resume``."""
    args = [a for a in argv if a != "--resume"] + ["--resume"]
    return "python -m course_lib " + " ".join(shlex.quote(a) for a in args)


def report_resume(trainer, folder, resume: bool) -> None:
    """Say whether this run continues a checkpoint or, asked to resume an empty --out, starts."""
    if not main_process():
        return
    if folder.checkpoint is not None:
        print(f"resuming {folder.checkpoint_path} at step {trainer.step} of "
              f"{trainer.config.max_iters}")
    elif resume:
        print(f"no checkpoint in {folder.path} yet: starting a new run")


def run_trainer(args, trainer) -> None:
    """Train (Ctrl-C: the Trainer saves, says how to resume and raises TrainingInterrupted), and
    from then on a Ctrl-C says that the run is saved."""
    trainer.resume_hint = resume_command(args.argv)
    trainer.train()
    args.on_interrupt = (f"the run is complete and saved in {trainer.checkpoint_path} (step "
                         f"{trainer.step})")


def cmd_run(args) -> int:
    """Every training command (``train``, ``train-dates``, ``finetune``, ``chat-sft``, ``dpo``,
    ``grpo``...): its kind of run (:data:`course_lib.runs.KINDS`) takes the options of the same
    names; the same checks, crash safety and ``--resume`` for all."""
    kind = get_kind(args.command)
    options = {name: getattr(args, name) for name in kind.options}
    report_options = {name: getattr(args, name) for name in kind.report_options}
    if kind.check_report_options:
        kind.check_report_options(**report_options)  # before any work, not after training
    settings = run_settings(args)
    with open_run(args.out or kind.default_out(options), args.resume, kind.command,
                  claim=main_process()) as folder:
        if folder.checkpoint is not None:
            trainer = resume(kind, folder.checkpoint_path, settings, device=args.device,
                             checkpoint=folder.checkpoint, **options)
        else:
            trainer = start(kind, settings, device=args.device, out_dir=folder.path, **options)
        report_resume(trainer, folder, args.resume)
        if main_process():
            print(kind.describe(trainer))
        pause_point("start")
        began = time.perf_counter()
        run_trainer(args, trainer)
    if not distributed.is_main():
        return 0
    speed = f", {trainer.tokens_per_s:,.0f} tokens/s" if trainer.tokens_per_s else ""
    speed += f", MFU {100 * trainer.mfu:.1f}%" if trainer.mfu is not None else ""
    lines = kind.report(trainer, **report_options)
    print(f"done in {time.perf_counter() - began:.1f} s{speed}: {next(lines)}", flush=True)
    # what the report computes next (a sample, held-out answers) may take a while
    for line in lines:
        print(line, flush=True)
    return 0


def check_sampling_options(args, tokens: int, option: str) -> None:
    """``sample``'s and ``chat``'s sampling options, checked before any work, each named as the user
    typed it (``tokens``: the value of ``option``, ``--tokens`` or ``--max-tokens``)."""
    if tokens < 1:
        raise ValueError(f"{option} must be at least 1, got {tokens}")
    check_sampling_args(args.temperature, args.top_k, args.top_p, tokens, names={
        "temperature": "--temperature", "top_k": "--top-k", "top_p": "--top-p",
        "max_new_tokens": option})


def add_sampling_options(p, temperature: float) -> None:  # sample's and chat's
    p.add_argument("--temperature", type=float, default=temperature,
                   help="0 = greedy; < 1 sharper, > 1 flatter "
                   f"(default {temperature:g})")
    p.add_argument("--top-k", type=int, default=None, help="sample among the k most likely tokens")
    p.add_argument("--top-p", type=float, default=None,
                   help="sample from the nucleus of probability p")
    p.add_argument("--seed", type=int, default=DEFAULT_SEED)
    p.add_argument("--device", choices=DEVICES)


def add_run_options(p, out: str | None,
                    set_help: str = "override one training setting; repeat for more") -> None:
    """The options of every training command; ``out`` None: the kind's default folder."""
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help=set_help)
    p.add_argument("--max-iters", type=int, help="the same as --set max_iters=N")
    p.add_argument("--out", default=out, help=f"output folder (default {out or 'runs/NAME'})")
    p.add_argument("--resume", action="store_true",
                   help="continue the run in --out if it has a checkpoint")
    p.add_argument("--device", choices=DEVICES, help="default: cuda, else mps, else cpu")
    p.set_defaults(func=cmd_run)
