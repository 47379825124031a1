"""``python -m course_lib dpo`` and ``grpo``: chapter 18's runs, which improve a GPT at two-digit
addition from its own answers (pairs of a right and a wrong one; groups rewarded by code). Their
body is every training command's (:func:`course_lib.cli.common.cmd_run`); the runs are
:mod:`course_lib.runs.align`'s.
"""
from __future__ import annotations

from ..align.rewards import REWARDS
from .common import add_run_options


def add_align_parsers(sub) -> None:
    for method, what in (("dpo", "DPO on pairs of its own right and wrong answers"),
                         ("grpo", "GRPO on groups of its own answers, rewarded by code")):
        p = sub.add_parser(method, help=f"improve a GPT at two-digit addition by {what}, "
                                        "writing DIR/ckpt.pt")
        p.add_argument("--checkpoint", dest="base_checkpoint",
                       help="the GPT to start from (its tokenizer must write digits, + and =); "
                       "with --resume only needed when that file has moved "
                       "(checked by its SHA-256)")
        p.add_argument("--reward", choices=list(REWARDS),
                       help="exact (the right sum, the default), format (any number) or units "
                       "(the right last digit): the last two can be hacked")
        add_run_options(p, f"runs/{method}")
