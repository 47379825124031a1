"""One trained model examined the way chapter 21 does it: every head's scores, every head
ablated (zero and mean) with the repeat loss it leaves, groups of heads ablated (the two layer-1
heads with the highest induction scores against the other two, all of layer 0), every pair of
layer-1 heads ablated and cut from layer 0 in its keys, the paths from layer 0 into the top two
heads (and into the induction head alone, and into every layer-1 head) cut one input at a time
(queries, keys, values), the K-composition of the layer-0 heads into the layer-1 heads, and for
a fixed-offset model the tests of a positional solution, in one plain dict (the benchmark records
it per seed).

Shapes: B batch, T time, L layers, nh heads.
"""
from __future__ import annotations

import itertools
import math

import torch
import torch.nn as nn

import contextlib

from .ablation import (ABLATIONS, PATHS, ablate, cut_path, head_means, k_composition,
                       random_composition_baseline)
from .scores import all_scores, attention_patterns
from .task import RepeatTask
from .training import measure, repeat_loss_rows


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
        table[how] = [[list(mean_and_halfwidth(_ablated(model, task, rows, lengths, layer, head,
                                                        how, means)))
                       for head in range(n_head)] for layer in range(n_layer)]
    return table


def _ablated(model, task, rows, lengths, layer, head, how, means) -> torch.Tensor:
    with ablate(model, layer, head, how, means):
        return repeat_loss_rows(model, task, rows, lengths)


def group_losses(model: nn.Module, task: RepeatTask, rows: torch.Tensor, lengths: torch.Tensor,
                 heads: list[tuple[int, int]], how: str, means: list[torch.Tensor]) -> dict:
    """The heads ``[(layer, head), ...]`` ablated together (several hooks on one point run in turn):
    ``repeat`` [mean, half-width] over rows and the mean loss on the ``other`` tokens."""
    with contextlib.ExitStack() as stack:
        for layer, head in heads:
            stack.enter_context(ablate(model, layer, head, how, means))
        return {"repeat": list(mean_and_halfwidth(repeat_loss_rows(model, task, rows, lengths))),
                "other": measure(model, task, rows, lengths)["other"]}


def top_heads(scores: torch.Tensor) -> tuple[list[int], list[int]]:
    """A layer's heads split in two by one score (nh,): the higher half and the rest, each
    sorted."""
    order = scores.argsort(descending=True).tolist()
    half = len(order) // 2
    return sorted(order[:half]), sorted(order[half:])


def group_table(model: nn.Module, task: RepeatTask, rows: torch.Tensor, lengths: torch.Tensor,
                induction: torch.Tensor, means: list[torch.Tensor]) -> dict:
    """Name -> heads and, per ablation, :func:`group_losses`: ``top_layer1`` the layer-1 heads with
    the higher half of the induction scores ``induction`` (nh,), ``other_layer1`` the rest (their
    complement, not a matched control: it holds the lowest-scoring head; :func:`pair_table` shows
    every pair), ``layer0`` every head of layer 0."""
    top, rest = top_heads(induction)
    groups = {"top_layer1": [(1, h) for h in top], "other_layer1": [(1, h) for h in rest],
              "layer0": [(0, h) for h in range(model.attn[0].n_head)]}
    return {name: {"heads": [list(lh) for lh in heads],
                   **{how: group_losses(model, task, rows, lengths, heads, how, means)
                      for how in ABLATIONS}}
            for name, heads in groups.items()}


def pair_table(model: nn.Module, task: RepeatTask, rows: torch.Tensor, lengths: torch.Tensor,
               means: list[torch.Tensor]) -> list[dict]:
    """Every pair of layer-1 heads, in order: the repeat loss [mean, half-width] with the pair
    mean-ablated (``ablated``) and with layer 0's output mean-cut from the pair's keys
    (``key_cut``).
    All pairs, not a chosen pair and its complement: which pair matters can then be read against
    the heads' scores without a control picked by the same scores."""
    n_head = model.attn[1].n_head
    table = []
    for pair in itertools.combinations(range(n_head), 2):
        heads = [(1, h) for h in pair]
        ablated = group_losses(model, task, rows, lengths, heads, "mean", means)["repeat"]
        with cut_path(model, (0, list(range(n_head))), (1, list(pair)), "k", "mean", means):
            key_cut = list(mean_and_halfwidth(repeat_loss_rows(model, task, rows, lengths)))
        table.append({"heads": list(pair), "ablated": ablated, "key_cut": key_cut})
    return table


def path_table(model: nn.Module, task: RepeatTask, rows: torch.Tensor, lengths: torch.Tensor,
               targets: list[int], means: list[torch.Tensor]) -> dict:
    """Path -> the repeat loss [mean, half-width] with layer 0's output mean-cut from that one input
    (queries, keys or values) of the layer-1 heads ``targets``: ``layer0`` every layer-0 head at
    once, ``per_head`` one layer-0 head at a time."""
    def cut(heads, path):
        with cut_path(model, (0, heads), (1, targets), path, "mean", means):
            return list(mean_and_halfwidth(repeat_loss_rows(model, task, rows, lengths)))
    n_head = model.attn[0].n_head
    return {path: {"layer0": cut(list(range(n_head)), path),
                   "per_head": [cut([h], path) for h in range(n_head)]}
            for path in PATHS}


def offset_attention(patterns: torch.Tensor, offset: int, queries: torch.Tensor) -> torch.Tensor:
    """patterns (B, L, nh, T, T) -> (L, nh): the mean attention from each query t of ``queries`` to
    key t - ``offset``, where a head that attends by position alone looks whatever the tokens."""
    return patterns[:, :, :, queries, queries - offset].mean((0, -1))


def positional_tests(model: nn.Module, task: RepeatTask, rows: torch.Tensor,
                     transfer: tuple) -> dict:
    """For a fixed-offset model (repeat length L): ``offset_attention`` to t - (L - 1) from the
    queries before the first copy ends (L - 1 .. T - L - 1, where that key holds no copy to read),
    and ``transfer``, its repeat loss on rows of another task ``transfer = (task, rows, lengths)``
    (rows whose repeat length varies, which a positional solution gets wrong)."""
    T, L = task.seq_len, task.min_repeat
    queries = torch.arange(L - 1, T - L)
    patterns = attention_patterns(model, rows)
    return {"offset_attention": [[round(v, 4) for v in layer] for layer in
                                 offset_attention(patterns, L - 1, queries).tolist()],
            "transfer": measure(model, *transfer)["repeat"]}


def examine(model: nn.Module, task: RepeatTask, rows: torch.Tensor, lengths: torch.Tensor,
            transfer: tuple | None = None) -> dict:
    """Scores, ablations (one head, groups, paths) and K-composition of a 2-layer model, as
    JSON-able lists; for a fixed-offset task with ``transfer = (task, rows, lengths)``, the
    positional tests."""
    was_training = model.training
    model.eval()
    scores = all_scores(attention_patterns(model, rows), rows)
    induction_head = int(scores["induction"][1].argmax())
    previous_head = int(scores["previous_token"][0].argmax())
    comp = k_composition(model)
    attn = model.attn[0]
    means = head_means(model, rows)
    top, _ = top_heads(scores["induction"][1])
    result = {
        "scores": {name: [[round(v, 4) for v in layer] for layer in s.tolist()] for name,
                   s in scores.items()},
        "induction_head": [1, induction_head], "previous_token_head": [0, previous_head],
        "repeat_loss": list(mean_and_halfwidth(repeat_loss_rows(model, task, rows, lengths))),
        "ablation": ablation_table(model, task, rows, lengths),
        "groups": group_table(model, task, rows, lengths, scores["induction"][1], means),
        "pairs": pair_table(model, task, rows, lengths, means),
        "paths": path_table(model, task, rows, lengths, top, means),
        "paths_to_induction_head": path_table(model, task, rows, lengths, [induction_head], means),
        "paths_to_layer1": path_table(model, task, rows, lengths, list(range(attn.n_head)), means),
        "k_composition": [[round(v, 4) for v in row] for row in comp.tolist()],
        "k_composition_random": round(random_composition_baseline(attn.c_proj.weight.shape[0],
                                                                  attn.head_size), 4),
    }
    if task.fixed_offset and transfer is not None:
        result["positional"] = positional_tests(model, task, rows, transfer)
    model.train(was_training)
    return result
