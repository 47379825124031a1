"""Forgetting, measured for what it is, and replay, its usual remedy (chapter 15).

After a fine-tune on dates, a model's loss on Shakespeare rises. Two different things raise it:

- **a prior shift**: the model now puts probability on the characters it was fine-tuned to
  write (the digits, "=", "/"), even while it reads Shakespeare. Nothing it knew about English
  need be lost for this: only the output layer's preference moved;
- **lost knowledge**: among the characters Shakespeare uses, it now ranks the right one worse.

:func:`vocab_split_loss` separates the two. With logits z over V = V0 + n_new tokens, the
probability mass on the new tokens is ``sum_{v >= V0} softmax(z)_v``; the loss *renormalised
over the original vocabulary* is the cross-entropy of ``softmax(z[:V0])``, the model's
distribution once the new tokens are ruled out. A model that knows nothing scores ln V0 on it.

Replay (mixing a share of the pretraining text into every fine-tuning batch) keeps the model
practising what it knew; :func:`replay_batch_fn` builds such batches. Biderman et al. (2024,
"LoRA Learns Less and Forgets Less") measure the learning-forgetting trade-off of full
fine-tuning and LoRA at scale.

Shapes: B batch, T time, V vocabulary size (V0 before the new tokens).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from .data import get_batch
from .utils import IGNORE_INDEX


@torch.no_grad()
def vocab_split_loss(model, data: torch.Tensor, V0: int, batches: int = 20, batch_size: int = 32,
                     seed: int = 0) -> dict[str, float]:
    """Forgetting on a 1-D tensor of token ids ``data`` (all below ``V0``: text from before the
    fine-tune), read on ``batches`` random windows (the same windows for every model with the
    same ``seed``). Returns a dict:

    - ``loss``: the ordinary next-token loss over all V tokens (what ``text_loss`` measures);
    - ``old_vocab_loss``: the loss with the softmax restricted to the first ``V0`` tokens;
    - ``new_mass``: the mean probability the model puts on tokens ``V0`` and above;
    - ``uniform``: ln V0, the old-vocabulary loss of a model that knows nothing.
    """
    if int(data.max()) >= V0:
        raise ValueError(f"data holds token id {int(data.max())}, not below V0={V0}: pass text of "
                         "the original vocabulary")
    device = next(model.parameters()).device
    generator = torch.Generator().manual_seed(seed)
    was_training = model.training
    model.eval()
    total, old, mass = 0.0, 0.0, 0.0
    for _ in range(batches):
        # (B, T) each
        x, y = get_batch(data, model.config.block_size, batch_size, generator, device)
        logits, _ = model(x)  # (B, T, V)
        flat, targets = logits.flatten(0, 1).float(), y.flatten()
        total += F.cross_entropy(flat, targets).item()
        old += F.cross_entropy(flat[:, :V0], targets).item()  # softmax over the old tokens only
        mass += flat.softmax(-1)[:, V0:].sum(-1).mean().item()
    model.train(was_training)
    return {"loss": total / batches, "old_vocab_loss": old / batches, "new_mass": mass / batches,
            "uniform": math.log(V0)}


def replay_batch_fn(task_batch_fn, text: torch.Tensor, share: float):
    """A ``Trainer`` batch_fn that replaces a ``share`` of the rows of ``task_batch_fn``'s
    batches (rounded, at least one row when ``share > 0``) by random windows of the pretraining
    ``text`` (a 1-D tensor of ids), cut to the task batch's length T. Every target of a text
    window counts, so the text's share of the *targets* is larger than its share of rows
    (:func:`replay_token_share` measures it). ``share=0`` returns the task batches unchanged."""
    if not 0.0 <= share < 1.0:
        raise ValueError(f"replay share must be in [0, 1), got {share!r}: the share of each "
                         "batch's rows that is pretraining text")

    def batch_fn(split: str, generator: torch.Generator):
        x, y = task_batch_fn(split, generator)  # (B, T) each
        if share == 0.0 or split != "train":  # the task's validation loss stays the task's
            return x, y
        B, T = x.shape
        n = min(B - 1, max(1, round(share * B)))
        tx, ty = get_batch(text, T, n, generator, x.device)  # (n, T) each
        return torch.cat([tx, x[n:]]), torch.cat([ty, y[n:]])

    return batch_fn


def replay_token_share(x_y: tuple[torch.Tensor, torch.Tensor], n_text_rows: int) -> float:
    """The share of a mixed batch's counted targets that come from its first ``n_text_rows``
    (the replayed text): the loss is a mean over targets, so this is the text's weight in it."""
    _, y = x_y
    kept = y != IGNORE_INDEX
    return kept[:n_text_rows].sum().item() / max(1, kept.sum().item())
