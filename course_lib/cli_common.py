"""What every command of ``python -m course_lib`` shares: the devices offered, the options of a
run (``--set``, ``--max-iters``, ``--out``, ``--resume``, ``--device``) and of sampling, and how a
training command reports a resume and trains (Ctrl-C saves and says how to continue). The commands
themselves are in :mod:`course_lib.cli` (and, by chapter, ``cli_chat`` and ``cli_align``).
"""
from __future__ import annotations

import os
import shlex

from .config import settings_from_pairs
from .utils import DEFAULT_SEED

DEVICES = ["cpu", "cuda", "mps"]


def run_settings(args) -> dict[str, str]:
    """``--set KEY=VALUE`` pairs with ``--max-iters`` (its short form): a fine-tune's, chat-sft's, dpo's, grpo's."""
    return settings_from_pairs(args.set) | ({} if args.max_iters is None else {"max_iters": str(args.max_iters)})


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
        print(f"resuming {folder.checkpoint_path} at step {trainer.step} of {trainer.config.max_iters}")
    elif resume:
        print(f"no checkpoint in {folder.path} yet: starting a new run")


def run_trainer(args, trainer) -> None:
    """Train (Ctrl-C: the Trainer saves, says how to resume and raises TrainingInterrupted), and
    from then on a Ctrl-C says that the run is saved."""
    trainer.resume_hint = resume_command(args.argv)
    trainer.train()
    args.on_interrupt = f"the run is complete and saved in {trainer.checkpoint_path} (step {trainer.step})"


def add_sampling_options(p, temperature: float) -> None:  # sample's and chat's
    p.add_argument("--temperature", type=float, default=temperature, help="0 = greedy; < 1 sharper, > 1 flatter "
                   f"(default {temperature:g})")
    p.add_argument("--top-k", type=int, default=None, help="sample among the k most likely tokens")
    p.add_argument("--top-p", type=float, default=None, help="sample from the nucleus of probability p")
    p.add_argument("--seed", type=int, default=DEFAULT_SEED)
    p.add_argument("--device", choices=DEVICES)


def add_run_options(p, out: str) -> None:  # finetune's, chat-sft's, dpo's and grpo's
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override one training setting; repeat for more")
    p.add_argument("--max-iters", type=int, help="the same as --set max_iters=N")
    p.add_argument("--out", default=out, help=f"output folder (default {out})")
    p.add_argument("--resume", action="store_true", help="continue the run in --out if it has a checkpoint")
    p.add_argument("--device", choices=DEVICES, help="default: cuda, else mps, else cpu")
