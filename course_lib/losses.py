"""Losses and accuracy beyond a model's own mean cross-entropy: masked over padding (chapter 10),
the train/val loss estimate every evaluation prints (chapter 7), and the exact loss over a whole
token sequence (the CPU speedrun's final figure, chapter 14).

Shapes: B batch, T time, V vocabulary size.
"""
from __future__ import annotations

from typing import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

from .utils import IGNORE_INDEX

# batch_fn(split, generator) -> (x, y): a batch of inputs and targets, (B, T) each, of split "train"
# or "val"
BatchFn = Callable[[str, torch.Generator], "tuple[torch.Tensor, torch.Tensor]"]


def masked_cross_entropy(logits: torch.Tensor, targets: torch.Tensor,
                         mask: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy over the positions where ``mask`` (B, T) is True. logits (B, T, V)."""
    losses = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="none")  # (B*T,)
    mask = mask.flatten().to(losses.dtype)
    return (losses * mask).sum() / mask.sum().clamp(min=1)


def masked_accuracy(logits: torch.Tensor, targets: torch.Tensor,
                    ignore_index: int = IGNORE_INDEX) -> float:
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


@torch.no_grad()
def sequence_loss(model: nn.Module, data: torch.Tensor, batch_size: int = 64) -> float:
    """Mean cross-entropy over every token of ``data`` (N,) but the first, each predicted once, from
    consecutive windows of the model's block size T (the last, shorter window included): the same
    windows for every model of that block size and no randomness, so unlike :func:`estimate_loss`
    it cannot dip below a target by luck."""
    device = next(model.parameters()).device
    T = model.config.block_size
    starts = list(range(0, len(data) - 1, T))
    full = [s for s in starts if s + T <= len(data) - 1]
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    for i in range(0, len(full), batch_size):
        chunk = full[i:i + batch_size]
        x = torch.stack([data[s:s + T] for s in chunk]).to(device)  # (B, T)
        y = torch.stack([data[s + 1:s + T + 1] for s in chunk]).to(device)  # (B, T)
        total += model(x, y)[1].item() * y.numel()
        count += y.numel()
    for s in starts[len(full):]:  # the tail: fewer than T tokens left
        x, y = data[s:len(data) - 1][None].to(device), data[s + 1:][None].to(device)  # (1, t) each
        total += model(x, y)[1].item() * y.numel()
        count += y.numel()
    model.train(was_training)
    return total / count
