"""The repeated-sequence task of chapter 21: random tokens, then a random segment written twice.

Each row of T tokens is a random prefix of T - 2L tokens, then a segment of L distinct random
tokens, then the same L tokens again, so every row ends with the repeat. L is drawn per row in
[min_repeat, max_repeat]: nothing but the tokens themselves says where the first copy is, so a
model can predict the second copy only by looking the current token up earlier in the row and
reading what followed it (an induction head). With min_repeat == max_repeat (the fixed-offset
control) every row repeats at the same distance and position alone solves it.

Shapes: B batch, T time (the row length, ``seq_len``).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch

from ..config import Rule, check_fields, config_from_dict

REPEAT_TASK_RULES = {
    "vocab_size": Rule(int, 2, 100_000),
    "seq_len": Rule(int, 4, 4096),
    "min_repeat": Rule(int, 2),
    "max_repeat": Rule(int, 2),
}


@dataclass
class RepeatTask:
    """Rows of ``seq_len`` tokens over ``vocab_size`` symbols ending in a segment of length L,
    L uniform in [min_repeat, max_repeat], written twice."""
    vocab_size: int = 64
    seq_len: int = 48
    min_repeat: int = 8
    max_repeat: int = 24

    def __post_init__(self):
        check_fields(self, REPEAT_TASK_RULES)
        if self.min_repeat > self.max_repeat:
            raise ValueError(f"RepeatTask.min_repeat ({self.min_repeat}) is above max_repeat "
                             f"({self.max_repeat}): swap them, or set both equal for the "
                             "fixed-offset control")
        if 2 * self.max_repeat > self.seq_len:
            raise ValueError(f"RepeatTask: two copies of max_repeat={self.max_repeat} tokens do "
                             f"not fit in seq_len={self.seq_len}: raise seq_len to "
                             f"{2 * self.max_repeat} or lower max_repeat")
        if self.max_repeat > self.vocab_size:
            raise ValueError(f"RepeatTask: a segment of max_repeat={self.max_repeat} distinct "
                             f"tokens needs vocab_size >= {self.max_repeat}, got {self.vocab_size}")

    @property
    def fixed_offset(self) -> bool:
        return self.min_repeat == self.max_repeat

    @property
    def chance_loss(self) -> float:
        """The loss of a uniform guess over the vocabulary, ln V (nats)."""
        return math.log(self.vocab_size)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "RepeatTask":
        return config_from_dict(cls, d)


def repeat_rows(task: RepeatTask, batch_size: int,
                generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """``(rows, lengths)``: rows (B, T) of token ids, lengths (B,) the repeat length L of each row.
    Row b is a random prefix (T - 2L tokens, with replacement), a segment of L distinct tokens
    (a random permutation's first L), and that segment again."""
    B, T, V = batch_size, task.seq_len, task.vocab_size
    lengths = torch.randint(task.min_repeat, task.max_repeat + 1, (B,), generator=generator)
    rows = torch.randint(0, V, (B, T), generator=generator)
    segments = torch.rand(B, V, generator=generator).argsort(dim=1)  # (B, V): a permutation per row
    for b, L in enumerate(lengths.tolist()):
        rows[b, T - 2 * L:T - L] = segments[b, :L]
        rows[b, T - L:] = segments[b, :L]
    return rows, lengths


def repeat_mask(lengths: torch.Tensor, seq_len: int) -> torch.Tensor:
    """(B, T) bool: True at the positions whose token an induction head can predict, the second
    copy but its first token (T - L + 1 .. T - 1). The first token of the second copy follows the
    segment's last token, which occurs nowhere before it, so nothing in the row predicts it."""
    positions = torch.arange(seq_len)  # (T,)
    return positions[None, :] >= seq_len - lengths[:, None] + 1  # (B, T)


def batch_fn(task: RepeatTask, batch_size: int, device=None):
    """A ``batch_fn(split, generator) -> (x, y)`` for the Trainer: x rows[:, :-1], y rows[:, 1:],
    both (B, T - 1). The task is synthetic: both splits draw fresh rows from the generator."""
    def batch(split: str, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        rows, _ = repeat_rows(task, batch_size, generator)
        rows = rows.to(device) if device is not None else rows
        return rows[:, :-1], rows[:, 1:]
    return batch
