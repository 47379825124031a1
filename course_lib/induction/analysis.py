"""One trained model examined the way chapter 21 does it: every head's scores, every head
ablated (zero and mean) with the repeat loss it leaves, and the K-composition of the layer-0
heads into the layer-1 heads, in one plain dict (the benchmark records it per seed).

Shapes: B batch, T time, L layers, nh heads.
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn

from .ablation import ABLATIONS, ablate, head_means, k_composition, random_composition_baseline
from .scores import all_scores, attention_patterns
from .task import RepeatTask
from .training import repeat_loss_rows


def mean_and_halfwidth(values: torch.Tensor) -> tuple[float, float]:
    """The mean of per-row values and the half-width of its normal 95% interval across rows."""
    return values.mean().item(), 1.96 * values.std().item() / math.sqrt(len(values))


def ablation_table(model: nn.Module, task: RepeatTask, rows: torch.Tensor, lengths: torch.Tensor
                   ) -> dict[str, list[list[list[float]]]]:
    """``how`` -> [layer][head] -> [mean, half-width]: the repeat loss (nats) with that one head
    ablated, over ``rows``; the mean-ablation's means come from the same rows."""
    means = head_means(model, rows)
    n_layer, n_head = len(model.attn), model.attn[0].n_head
    table = {}
    for how in ABLATIONS:
        table[how] = [[list(mean_and_halfwidth(_ablated(model, task, rows, lengths, layer, head, how, means)))
                       for head in range(n_head)] for layer in range(n_layer)]
    return table


def _ablated(model, task, rows, lengths, layer, head, how, means) -> torch.Tensor:
    with ablate(model, layer, head, how, means):
        return repeat_loss_rows(model, task, rows, lengths)


def examine(model: nn.Module, task: RepeatTask, rows: torch.Tensor, lengths: torch.Tensor) -> dict:
    """Scores, ablations and K-composition of a 2-layer model, as JSON-able lists."""
    was_training = model.training
    model.eval()
    scores = all_scores(attention_patterns(model, rows), rows)
    induction_head = int(scores["induction"][1].argmax())
    previous_head = int(scores["previous_token"][0].argmax())
    comp = k_composition(model)
    attn = model.attn[0]
    result = {
        "scores": {name: [[round(v, 4) for v in layer] for layer in s.tolist()] for name, s in scores.items()},
        "induction_head": [1, induction_head], "previous_token_head": [0, previous_head],
        "repeat_loss": list(mean_and_halfwidth(repeat_loss_rows(model, task, rows, lengths))),
        "ablation": ablation_table(model, task, rows, lengths),
        "k_composition": [[round(v, 4) for v in row] for row in comp.tolist()],
        "k_composition_random": round(random_composition_baseline(attn.c_proj.weight.shape[0], attn.head_size), 4),
    }
    model.train(was_training)
    return result
