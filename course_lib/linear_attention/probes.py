"""Chapter 24's probes of what a fixed-size state keeps: associative recall (key-value pairs,
then questions: which value went with this key?), the task of Zoology's MQAR (Arora et al. 2023)
and the cousin of chapter 21's induction heads.

- ``recall_batch``: token sequences [k1 v1 ... kN vN, q1 a1 ... qM aM]: N pairs, then M of the
  keys again, each followed by its value; targets are -100 (ignored) except at the questions.
- ``state_capacity``: no training at all: write N random unit keys with their values into a
  delta-rule state of dk x dv numbers, read every key back, and measure how much of each value
  comes back; the same N pairs read by softmax attention, which keeps every pair.
"""
from __future__ import annotations

import torch

from .rules import delta_rule_recurrent, l2norm

IGNORE = -100  # F.cross_entropy's ignore_index: positions that are not questions


def recall_batch(batch: int, pairs: int, questions: int, keys: int, values: int,
                 generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(x, y) of shape (batch, 2 (pairs + questions)): keys are tokens 0..keys-1 (distinct within a
    sequence), values keys..keys+values-1. y holds the value at each question key's position."""
    if pairs > keys or questions > pairs:
        raise ValueError(f"need questions <= pairs <= keys, got {questions}, {pairs}, {keys}")
    k = torch.stack([torch.randperm(keys, generator=generator)[:pairs]
                     for _ in range(batch)])  # (B, N)
    v = torch.randint(keys, keys + values, (batch, pairs), generator=generator)
    asked = torch.stack([torch.randperm(pairs, generator=generator)[:questions]
                         for _ in range(batch)])
    qk, qv = k.gather(1, asked), v.gather(1, asked)  # (B, M)
    context = torch.stack([k, v], dim=2).flatten(1)  # k1 v1 k2 v2 ...
    tail = torch.stack([qk, qv], dim=2).flatten(1)
    seq = torch.cat([context, tail], dim=1)  # (B, 2N + 2M)
    x, y = seq[:, :-1], torch.full_like(seq[:, 1:], IGNORE)
    y[:, 2 * pairs::2] = qv  # after each question key comes its value
    return x, y


def recall_accuracy(logits: torch.Tensor, y: torch.Tensor) -> float:
    """The share of questions whose value is the top prediction. logits (B, T, V), y (B, T)."""
    asked = y != IGNORE
    return float((logits.argmax(-1)[asked] == y[asked]).float().mean())


def state_capacity(dk: int, pairs: int, dv: int = 16, seed: int = 0) -> dict[str, float]:
    """Store ``pairs`` random (unit key, value) pairs, read each key back; returns the mean cosine
    similarity between what comes back and the stored value for the delta rule (beta = 1, no decay,
    a dk x dv state), plain linear attention (the same state, added to), and softmax attention
    over the kept keys (scale 20: sharp, as a trained head's scores are)."""
    g = torch.Generator().manual_seed(seed)
    k = l2norm(torch.randn(1, 1, pairs, dk, generator=g))
    v = torch.randn(1, 1, pairs, dv, generator=g)
    _, S = delta_rule_recurrent(k, k, v, torch.ones(1, 1, pairs))
    delta = k @ S  # every key read from the final state, (1, 1, N, dv)
    plain = k @ (k.transpose(-1, -2) @ v)
    soft = torch.softmax(20.0 * k @ k.transpose(-1, -2), dim=-1) @ v
    cos = lambda a: float(torch.nn.functional.cosine_similarity(a, v, dim=-1).mean())  # noqa: E731
    return {"delta rule": cos(delta), "linear attention": cos(plain),
            "softmax attention": cos(soft)}
