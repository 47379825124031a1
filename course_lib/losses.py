"""Losses and accuracy beyond a model's own mean cross-entropy: masked over padding (chapter 10),
and the train/val loss estimate every evaluation prints (chapter 7).

Shapes: B batch, T time, V vocabulary size.
"""
from __future__ import annotations

from typing import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

from .utils import IGNORE_INDEX

# batch_fn(split, generator) -> (x, y): a batch of inputs and targets, (B, T) each, of split "train" or "val"
BatchFn = Callable[[str, torch.Generator], "tuple[torch.Tensor, torch.Tensor]"]


def masked_cross_entropy(logits: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy over the positions where ``mask`` (B, T) is True. logits (B, T, V)."""
    losses = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="none")  # (B*T,)
    mask = mask.flatten().to(losses.dtype)
    return (losses * mask).sum() / mask.sum().clamp(min=1)


def masked_accuracy(logits: torch.Tensor, targets: torch.Tensor, ignore_index: int = IGNORE_INDEX) -> float:
    """Share of positions whose most likely token is the target, skipping ``ignore_index``."""
    keep = targets != ignore_index
    correct = (logits.argmax(dim=-1) == targets) & keep
    return correct.sum().item() / max(1, keep.sum().item())


@torch.no_grad()
def estimate_loss(model: nn.Module, batch_fn: BatchFn, eval_iters: int, seed: int = 0,
                  splits=("train", "val")) -> dict[str, float]:
    """Mean loss over ``eval_iters`` batches of each split, in eval mode (no dropout).

    Batches come from a generator seeded with ``seed``, so every estimate sees the same
    batches and the training batch stream is left untouched.
    """
    was_training = model.training
    model.eval()
    out = {}
    for i, split in enumerate(splits):
        generator = torch.Generator().manual_seed(seed + i)
        losses = [model(*batch_fn(split, generator))[1].item() for _ in range(eval_iters)]
        out[split] = sum(losses) / len(losses)
    model.train(was_training)
    return out
