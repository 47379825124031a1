"""Chapter 19's IsoFLOP runs: a family of small GPTs, each trained for exactly the steps a compute
budget buys it, with a learning-rate schedule that ends where the run ends, then scored on the
whole validation split. ``benchmarks/scaling.py`` runs the sweep; the chapter re-runs its smallest
budget with the same function.

Counting. C, the training FLOPs of a run, is the exact count the package computes
(:func:`course_lib.sizing.flops_per_token`, 6N + 12 L T C per token: the matmuls forward and
backward plus the attention scores and weighted values) times the D tokens it trains on, not 6ND.
N, the size a law is fitted to, is :func:`matmul_parameters`: every parameter but the two lookup
tables (the token embedding and the position table), i.e. the N of that 6N. Kaplan et al. 2020 count
non-embedding parameters (a tied GPT-2's head is its embedding, so they leave out the head too);
Hoffmann et al. 2022 count all. At 10^4 parameters the embeddings are a large share, so the choice
moves N; the head, a V x C matmul every token pays for, is kept.

Shapes: B batch, T context (block_size), C channels (n_embd), V vocabulary, L layers.
"""
from __future__ import annotations

import math
import time
from dataclasses import replace

import torch

from ..losses import sequence_loss
from ..model import GPTConfig
from ..presets import get_preset
from ..runs import make_trainer
from ..sizing import flops_per_token, parameter_breakdown

# the book's GPT-2-style block: LayerNorm, GELU MLP of 4C, untied head
BASE_PRESET = "shakespeare-char-cpu"
HEAD_SIZE = 16  # n_head = n_embd / 16 (one head of all the channels below 32)
# The family of shapes, small to large in N: (n_layer, n_embd). Depth grows with width, as in the
# families of Kaplan et al. and Hoffmann et al.
LADDER = {"L1-C4": (1, 4), "L1-C8": (1, 8), "L1-C16": (1, 16), "L2-C16": (2, 16), "L1-C24": (1, 24),
          "L1-C32": (1, 32), "L2-C24": (2, 24), "L2-C32": (2, 32), "L1-C48": (1, 48),
          "L2-C48": (2, 48), "L2-C64": (2, 64), "L3-C64": (3, 64), "L3-C80": (3, 80),
          "L3-C96": (3, 96), "L4-C96": (4, 96), "L4-C112": (4, 112), "L4-C128": (4, 128),
          "L5-C128": (5, 128), "L5-C144": (5, 144), "L6-C160": (6, 160), "L1-C64": (1, 64),
          "L1-C96": (1, 96), "L1-C128": (1, 128)}
# The sweep's family: one block, the width alone varies (C = 4 to 128). At these sizes and a few
# hundred steps, two blocks of C = 16 or 32 lose to one block of about the same N (chapter 19 shows
# the runs), so a family that mixes depths is not a one-parameter family in N.
FAMILY = sorted((s for s in LADDER if LADDER[s][0] == 1), key=lambda s: LADDER[s][1])
# Training settings shared by every run (the base preset's otherwise): batch 32 of T = 64
# characters, AdamW at a peak of 3e-3 (the CPU speedrun's rate at batch 32) with 5% warm-up, then a
# cosine to a tenth of the peak at the run's last step.
TRAIN = dict(batch_size=32, learning_rate=3e-3, min_lr=3e-4, schedule="cosine")
WARMUP_FRACTION = 0.05


def shape_config(shape: str, vocab_size: int) -> GPTConfig:
    """The GPTConfig of a named shape of :data:`LADDER` on the base preset."""
    if shape not in LADDER:
        raise ValueError(f"unknown shape {shape!r}: choose one of {', '.join(LADDER)}")
    n_layer, n_embd = LADDER[shape]
    return replace(get_preset(BASE_PRESET).model, vocab_size=vocab_size, n_layer=n_layer,
                   n_embd=n_embd, n_head=max(1, n_embd // HEAD_SIZE))


def matmul_parameters(config: GPTConfig) -> int:
    """N: the parameters of ``GPT(config)`` but the lookup tables (token embedding, position
    table)."""
    parts = parameter_breakdown(config)
    return sum(parts.values()) - parts["token embedding"] - parts["position embedding"]


def plan_run(shape: str, budget: float, vocab_size: int, train_tokens: int,
             batch_size: int = TRAIN["batch_size"]) -> dict:
    """What ``budget`` FLOPs buy the shape: the whole steps of B x T tokens nearest to it, and so
    D tokens, the FLOPs actually spent and the passes over the ``train_tokens`` of the training
    split."""
    config = shape_config(shape, vocab_size)
    per_token = flops_per_token(config)
    tokens_per_step = batch_size * config.block_size
    steps = max(1, round(budget / (per_token * tokens_per_step)))
    D = steps * tokens_per_step
    return dict(shape=shape, budget=budget, n_layer=config.n_layer, n_embd=config.n_embd,
                n_head=config.n_head, N=matmul_parameters(config),
                parameters=sum(parameter_breakdown(config).values()), flops_per_token=per_token,
                steps=steps, D=D, flops=per_token * D, epochs=D / train_tokens,
                warmup_iters=max(1, round(WARMUP_FRACTION * steps)))


def train_planned(plan: dict, train_data: torch.Tensor, val_data: torch.Tensor, tokenizer, *,
                  seed: int = 1337, curve_points: int = 40, progress: bool = False) -> dict:
    """Train the run ``plan`` (from :func:`plan_run`) through :func:`course_lib.runs.make_trainer`
    and return the plan with its results: ``loss`` (the whole validation split, every token once,
    :func:`course_lib.losses.sequence_loss`), ``train_s`` (wall seconds of training) and ``curve``
    (about ``curve_points`` (step, training loss) pairs, each the mean of the steps since the
    last)."""
    settings = dict(TRAIN, n_layer=plan["n_layer"], n_embd=plan["n_embd"], n_head=plan["n_head"],
                    max_iters=plan["steps"], warmup_iters=plan["warmup_iters"],
                    eval_interval=plan["steps"] + 1, eval_iters=1, seed=seed)
    trainer = make_trainer(BASE_PRESET, train_data, val_data, settings, tokenizer=tokenizer,
                           device="cpu", progress=progress, verbose=False)
    start = time.perf_counter()
    trainer.train()
    train_s = time.perf_counter() - start
    loss = sequence_loss(trainer.model, val_data)
    losses = trainer.history["loss"]
    every = max(1, math.ceil(len(losses) / curve_points))
    curve = [[min(i + every, len(losses)),
              round(sum(losses[i:i + every]) / len(losses[i:i + every]), 4)]
             for i in range(0, len(losses), every)]
    return dict(plan, seed=seed, loss=round(loss, 5), train_s=round(train_s, 2), curve=curve)
