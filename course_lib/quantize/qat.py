"""Quantization-aware training (QAT) with the straight-through estimator (chapter 23).

Fine-tune the model while its forward pass already computes with quantized weights: every linear
layer's weight W (and the embedding tables at their own ``embeddings`` setting, :mod:`.embeddings`)
is read through a *fake quantizer*, ``W + (fake_quantize(W) - W).detach()``, whose value
is the quantized matrix and whose gradient with respect to W is the identity (rounding has a zero
gradient almost everywhere; the straight-through estimator, Bengio et al. 2013, passes the
gradient through as if it were not there). The float weights keep learning in small steps; the
model learns weights whose *rounded* values predict well. After training, the float weights are
quantized by round-to-nearest with the same settings: exactly the values the forward pass used.

The fine-tune is an ordinary :class:`course_lib.train.Trainer` run (the model's forward(x, y)
returns (logits, loss)) on the shipped model's training split: :func:`qat_trainer` builds it.
Its control is the same run without fake quantization (``fake=False``), rounded afterwards: what
fine-tuning alone does.
"""
from __future__ import annotations

import copy

import torch
import torch.nn as nn
import torch.nn.utils.parametrize as parametrize

from ..data import get_batch
from ..train import TrainConfig, Trainer
from ..utils import seed_everything
from .embeddings import embedding_config
from .models import FakeQuantize, add_fake_quantizers
from .rtn import QuantConfig

__all__ = ["FakeQuantize", "add_fake_quantize", "remove_fake_quantize", "qat_trainer"]


def add_fake_quantize(model: nn.Module, config: QuantConfig, embeddings: str = "int8") -> nn.Module:
    """Read every linear layer of ``model`` through a :class:`FakeQuantize` at ``config`` and its
    embedding tables as ``embeddings`` says ("int8" per
    row, "fp16": not rounded, "same"), in place."""
    return add_fake_quantizers(model, config, embeddings)


def remove_fake_quantize(model: nn.Module) -> nn.Module:
    """Back to plain float weights (the trained ones, not rounded), in place."""
    for m in list(model.modules()):
        if parametrize.is_parametrized(m, "weight"):
            parametrize.remove_parametrizations(m, "weight", leave_parametrized=False)
    return model


QAT_TRAIN = dict(batch_size=32, learning_rate=3e-4, min_lr=3e-5, warmup_iters=20, weight_decay=0.0,
                 # a short, gentle fine-tune
                 eval_interval=10**9, eval_iters=1, checkpoint_interval=0)


def qat_trainer(model: nn.Module, train_data: torch.Tensor, config: QuantConfig, steps: int,
                seed: int, fake: bool = True, progress: bool = False,
                embeddings: str = "int8") -> Trainer:
    """A Trainer that fine-tunes a copy of ``model`` for ``steps`` steps on random windows of
    ``train_data`` (N,), with fake quantization (QAT; the embeddings as ``embeddings`` says) or
    without it (``fake=False``: the control)."""
    embedding_config(config, embeddings)  # checked before any work
    seed_everything(seed)
    model = copy.deepcopy(model).train()
    if fake:
        add_fake_quantize(model, config, embeddings)
    T = model.config.block_size
    train_config = TrainConfig(max_iters=steps, seed=seed, **QAT_TRAIN)

    def batch_fn(split, generator):  # both splits from the training text: no validation peeking
        return get_batch(train_data, T, train_config.batch_size, generator)

    return Trainer(model, config=train_config, batch_fn=batch_fn, progress=progress, verbose=False)
