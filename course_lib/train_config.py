"""The training settings (chapters 2, 7 and 12): :class:`TrainConfig`, its fields and what each
may hold (``TRAIN_CONFIG_RULES``, checked by :mod:`course_lib.config`'s rules). The
:class:`course_lib.train.Trainer` runs them; :mod:`course_lib.train` re-exports both names
(chapters import ``TrainConfig`` there).
"""
from __future__ import annotations

from dataclasses import dataclass

from .config import Rule, check_fields, config_from_dict
from .optim import OPTIMIZERS, SCHEDULES
from .speed import DTYPES
from .utils import DEFAULT_SEED


# What each TrainConfig field may hold (checked in __post_init__): a new field adds one row.
# The upper bounds refuse values no run can learn with (an AdamW step size above 1, betas of 1
# or more), so that a typo fails at once instead of training on NaN.
TRAIN_CONFIG_RULES = {
    "max_iters": Rule(int, 1),
    # sequences a micro-batch; the memory check comes on top (GPT.check_fits)
    "batch_size": Rule(int, 1, 1_000_000),
    "learning_rate": Rule(float, 0.0, 1.0, "(]"),
    "min_lr": Rule(float, 0.0, 1.0),
    "warmup_iters": Rule(int, 0),
    "lr_decay_iters": Rule(int, 1),
    "schedule": Rule(str, choices=SCHEDULES),
    "cooldown_fraction": Rule(float, 0.0, 1.0),
    "weight_decay": Rule(float, 0.0, 10.0),
    "beta1": Rule(float, 0.0, 1.0, "[)"),
    "beta2": Rule(float, 0.0, 1.0, "[)"),
    "grad_clip": Rule(float, 0.0),  # 0: off
    "eval_interval": Rule(int, 1),
    "eval_iters": Rule(int, 1),
    "checkpoint_interval": Rule(int, 0),
    "seed": Rule(int, 0, 2**63 - 1),
    "grad_accum_steps": Rule(int, 1),
    "dtype": Rule(str, choices=tuple(DTYPES)),
    "compile": Rule(bool),
    "optimizer": Rule(str, choices=OPTIMIZERS),
    "muon_lr": Rule(float, 0.0, 1.0, "(]"),
    "muon_momentum": Rule(float, 0.0, 1.0, "[)"),
}


@dataclass
class TrainConfig:
    max_iters: int = 2000
    batch_size: int = 12
    learning_rate: float = 1e-3  # peak learning rate
    min_lr: float = 1e-4  # where cosine decay ends
    warmup_iters: int = 100
    lr_decay_iters: int | None = None  # default: max_iters
    # "constant", "cosine" (linear warmup + cosine decay), "transformer" (2017 paper) or "wsd"
    # (warm-up, stable, linear decay over the last cooldown_fraction of the steps); see
    # course_lib.optim
    schedule: str = "cosine"
    cooldown_fraction: float = 0.2
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.99
    grad_clip: float = 1.0  # max global gradient norm; 0 turns clipping off
    eval_interval: int = 250
    eval_iters: int = 20  # batches per loss estimate
    # With an out_dir, save every N steps (None: at every evaluation; 0: only at the end and on
    # Ctrl-C).
    checkpoint_interval: int | None = None
    seed: int = DEFAULT_SEED
    # Chapter 12. A step's global batch is grad_accum_steps micro-batches of batch_size
    # sequences, in all (shared out among the processes under torchrun): the gradient of their
    # mean loss, as one big batch.
    grad_accum_steps: int = 1
    # forward passes under autocast: "fp32" (off), "bf16", or "fp16" (CUDA only)
    dtype: str = "fp32"
    # torch.compile the model; falls back to eager, with a message, where it cannot
    compile: bool = False
    # The CPU speedrun (chapter 14, course_lib.optim): "adamw", or "muon" for the hidden weight
    # matrices (at muon_lr, with momentum muon_momentum) and AdamW for embeddings, head, gains
    # and biases.
    optimizer: str = "adamw"
    muon_lr: float = 0.02
    muon_momentum: float = 0.95

    def __post_init__(self):
        check_fields(self, TRAIN_CONFIG_RULES)
        if self.schedule in ("cosine", "wsd") and self.min_lr > self.learning_rate:
            # The decay runs from learning_rate to min_lr: the other way round it would climb.
            raise ValueError(f"TrainConfig.min_lr ({self.min_lr:g}) is above learning_rate "
                             f"({self.learning_rate:g}): the {self.schedule} schedule decays from "
                             "learning_rate down to min_lr, so it would climb instead; set min_lr "
                             f"<= learning_rate, e.g. min_lr={self.learning_rate / 10:g}")

    @property
    def save_every(self) -> int:
        """Steps between periodic checkpoints (0: none)."""
        return self.eval_interval if self.checkpoint_interval is None else self.checkpoint_interval

    @classmethod
    def from_dict(cls, d: dict) -> "TrainConfig":
        return config_from_dict(cls, d)
