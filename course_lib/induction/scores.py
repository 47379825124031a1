"""Per-head attention scores (chapter 21), with TransformerLens's definitions.

A head's attention pattern A (T, T) on one row is compared with a 0/1 *detection pattern* D
(T, T) that marks where a head of a given kind should look, as TransformerLens's
``head_detector`` does (``error_measure="mul"``, neither BOS nor the current token excluded):
the score of one row is sum(A * D) / sum(A), the share of the head's attention that falls on
the marked pairs, and a head's score is the mean over rows. The detection patterns:

- previous token: query t looks at key t - 1;
- duplicate token: query t looks at every earlier key s < t holding the same token;
- induction: query t looks at every key s + 1 whose token s equals token t, s < t (the token
  *after* an earlier occurrence of the current one), lower triangle only.

ARENA's exercises score a fixed repeat length n instead by the mean of one diagonal
(:func:`stripe_scores`): offset -1 for the previous token, 1 - n for induction, -n for duplicates.

Shapes: B batch, L layers, nh heads, T time.
"""
from __future__ import annotations

import torch
import torch.nn as nn


def previous_token_pattern(tokens: torch.Tensor) -> torch.Tensor:
    """(B, T) -> (B, T, T) float: 1 where key = query - 1."""
    B, T = tokens.shape
    return torch.diag(torch.ones(T - 1), -1).expand(B, T, T).to(tokens.device)


def duplicate_token_pattern(tokens: torch.Tensor) -> torch.Tensor:
    """(B, T) -> (B, T, T) float: 1 where key s < query t and token s == token t."""
    same = tokens[:, :, None] == tokens[:, None, :]  # (B, T, T): [b, t, s]
    return torch.tril(same.float(), diagonal=-1)


def induction_pattern(tokens: torch.Tensor) -> torch.Tensor:
    """(B, T) -> (B, T, T) float: the duplicate pattern moved one key to the right (key s + 1
    for each earlier occurrence s of the query's token), key 0 empty, lower triangle kept."""
    shifted = torch.zeros_like(duplicate_token_pattern(tokens))
    shifted[:, :, 1:] = duplicate_token_pattern(tokens)[:, :, :-1]
    return torch.tril(shifted)


DETECTION_PATTERNS = {"previous_token": previous_token_pattern,
                      "duplicate_token": duplicate_token_pattern, "induction": induction_pattern}


def head_scores(patterns: torch.Tensor, detection: torch.Tensor) -> torch.Tensor:
    """patterns (B, L, nh, T, T) attention weights, detection (B, T, T) or (T, T) -> (L, nh):
    for each row sum(A * D) / sum(A) over (query, key), then the mean over rows."""
    if patterns.dim() != 5 or patterns.shape[-1] != patterns.shape[-2]:
        raise ValueError(f"patterns must be (B, layers, heads, T, T), got {tuple(patterns.shape)}")
    detection = detection.to(patterns.dtype)
    if detection.dim() == 2:
        detection = detection.expand(patterns.shape[0], *detection.shape)
    # (B, L, nh)
    per_row = (patterns * detection[:, None, None]).sum((-2, -1)) / patterns.sum((-2, -1))
    return per_row.mean(0)


def all_scores(patterns: torch.Tensor, tokens: torch.Tensor) -> dict[str, torch.Tensor]:
    """The three scores, name -> (L, nh), for patterns (B, L, nh, T, T) computed on ``tokens`` (B,
    T)."""
    return {name: head_scores(patterns, make(tokens.cpu()).to(patterns.device))
            for name, make in DETECTION_PATTERNS.items()}


def stripe_scores(patterns: torch.Tensor, offset: int) -> torch.Tensor:
    """ARENA's score for a fixed repeat: patterns (B, L, nh, T, T) -> (L, nh), the mean over rows
    and over the diagonal ``offset`` (-1 previous token; 1 - n induction and -n duplicate token
    for a segment of n tokens repeated)."""
    return patterns.diagonal(offset=offset, dim1=-2, dim2=-1).mean(dim=(0, -1))


def attention_patterns(model: nn.Module, rows: torch.Tensor) -> torch.Tensor:
    """(B, T) rows -> (B, L, nh, T, T): every layer's attention weights on ``rows``, read by
    forward hooks on the model's ``hook_pattern`` points (removed afterwards)."""
    found = []
    handles = [attn.hook_pattern.register_forward_hook(lambda module, args,
                                                       out: found.append(out.detach()))
               for attn in model.attn]
    try:
        with torch.no_grad():
            model(rows)
    finally:
        for handle in handles:
            handle.remove()
    return torch.stack(found, dim=1)


def gpt_attention_patterns(model: nn.Module, rows: torch.Tensor) -> torch.Tensor:
    """The same for a :class:`course_lib.model.GPT` (the shipped model): its attention layers keep
    their weights when ``need_weights`` is set (the written-out path, no fused kernel)."""
    layers = [block.attn for block in model.blocks]
    for attn in layers:
        attn.need_weights = True
    try:
        with torch.no_grad():
            model(rows)
        return torch.stack([attn.last_weights for attn in layers], dim=1)
    finally:
        for attn in layers:
            attn.need_weights, attn.last_weights = False, None
