"""Rotary position embeddings, RoPE (chapter 14; Su et al. 2021).

Instead of adding a position vector to the token embedding, RoPE rotates every query and key
inside attention. The hs channels of a head form hs/2 pairs; pair i is a point in a plane,
turned by the angle ``position * theta^(-2i/hs)``. A query turned by m angles and a key turned
by n angles have a dot product that depends on m - n only: attention sees relative positions.

Which channels form a pair is a convention. The RoFormer paper and Meta's Llama code pair
neighbours (0, 1), (2, 3), ... ("interleaved"); Hugging Face, GPT-NeoX and this module pair
each channel with the one half a head away: (0, hs/2), (1, hs/2 + 1), ... ("halves"). The two
are the same rotation once the channels are permuted, which the query and key weights can
absorb (chapter 14 shows it); we use the halves, so Llama weights from Hugging Face load as
they are.

Shapes: B batch, nh heads, T time, hs head size.
"""
from __future__ import annotations

import torch


def rope_frequencies(head_size: int, theta: float = 10000.0) -> torch.Tensor:
    """(hs/2,) angles per position of each pair: theta^(-2i/hs) for i = 0 .. hs/2 - 1.
    Pair 0 turns by one radian per position, the last pair about 1/theta as fast."""
    if head_size % 2:
        raise ValueError(f"RoPE rotates pairs of channels: the head size must be even, got {head_size}")
    # computed as Hugging Face computes it (float32 powers of an int64 range), so the angles agree bitwise
    exponents = torch.arange(0, head_size, 2, dtype=torch.int64).float() / head_size
    return 1.0 / (theta**exponents)


def rope_cos_sin(positions: torch.Tensor, head_size: int, theta: float = 10000.0) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of every angle: positions (...,) -> two tensors (..., hs/2), in float32."""
    angles = positions.float()[..., None] * rope_frequencies(head_size, theta).to(positions.device)  # (..., hs/2)
    return angles.cos(), angles.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate the channel pairs (j, j + hs/2) of x (B, nh, T, hs) by the angles whose cos and sin
    are given, (T, hs/2) for every row alike or (B, T, hs/2) per row:

        (a, b) -> (a cos - b sin, a sin + b cos)
    """
    if cos.dim() == 3:  # (B, T, hs/2): one set of positions per row, the same for every head
        cos, sin = cos[:, None], sin[:, None]  # (B, 1, T, hs/2)
    half = x.shape[-1] // 2
    a, b = x[..., :half], x[..., half:]  # the two coordinates of every pair, each (B, nh, T, hs/2)
    return torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1).to(x.dtype)
