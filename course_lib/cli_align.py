"""``python -m course_lib dpo`` and ``grpo``: chapter 18's runs, which improve a GPT at two-digit
addition from its own answers (pairs of a right and a wrong one; groups rewarded by code).
"""
from __future__ import annotations

from .cli_common import add_run_options, report_resume, run_settings, run_trainer
from .rewards import REWARDS, arithmetic_items, greedy_reward
from .run_folder import open_run
from .runs_assistant import resume_dpo_run, resume_grpo_run, start_dpo_run, start_grpo_run


ALIGN_RUNS = {"dpo": (start_dpo_run, resume_dpo_run), "grpo": (start_grpo_run, resume_grpo_run)}


def cmd_align(args) -> int:
    """``dpo`` and ``grpo``: the same checks, crash safety and ``--resume`` as ``train``; then the
    share of chapter 16's held-out sums answered right."""
    method, (start, resume) = args.command, ALIGN_RUNS[args.command]
    settings = run_settings(args)
    with open_run(args.out, args.resume, method) as folder:
        if folder.checkpoint is not None:
            trainer = resume(folder.checkpoint_path, settings, base_checkpoint=args.checkpoint, device=args.device,
                             checkpoint=folder.checkpoint)
            if args.reward and args.reward != trainer.trained_on["reward"]:
                raise ValueError(f"--reward {args.reward}: {folder.checkpoint_path} was trained with the "
                                 f"{trainer.trained_on['reward']!r} reward; leave --reward out to continue it")
        elif not args.checkpoint:
            raise ValueError(f"--checkpoint is needed to start a {method} run: the GPT to improve, e.g. a model "
                             "fine-tuned on the arithmetic task")
        else:
            trainer = start(args.checkpoint, settings, reward=args.reward or "exact", device=args.device,
                            out_dir=folder.path)
        report_resume(trainer, folder, args.resume)
        print(f"{method} from {trainer.trained_on['base_checkpoint']} (reward {trainer.trained_on['reward']}) on "
              f"{trainer.device}; {trainer.config.max_iters} iterations, checkpoints in {folder.path}")
        run_trainer(args, trainer)
    items = arithmetic_items("test")
    print(f"done: answered right (greedy) {greedy_reward(trainer.model, trainer.tokenizer, items):.1%} of "
          f"{len(items)} held-out sums; saved {trainer.checkpoint_path}")
    return 0


def add_align_parsers(sub) -> None:
    for method, what in (("dpo", "DPO on pairs of its own right and wrong answers"),
                         ("grpo", "GRPO on groups of its own answers, rewarded by code")):
        p = sub.add_parser(method, help=f"improve a GPT at two-digit addition by {what}, writing DIR/ckpt.pt")
        p.add_argument("--checkpoint", help="the GPT to start from (its tokenizer must write digits, + and =); "
                       "with --resume only needed when that file has moved (checked by its SHA-256)")
        p.add_argument("--reward", choices=list(REWARDS), help="exact (the right sum, the default), format "
                       "(any number) or units (the right last digit): the last two can be hacked")
        add_run_options(p, f"runs/{method}")
        p.set_defaults(func=cmd_align)
