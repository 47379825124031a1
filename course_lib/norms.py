"""RMSNorm (chapter 14; Zhang & Sennrich 2019), the norm of Llama-style blocks and of QK-norm.

It lives below both :mod:`course_lib.model` (the blocks' norms) and :mod:`course_lib.attention`
(QK-norm: one RMSNorm over each head's hs channels of the queries and of the keys).
"""
from __future__ import annotations

import torch
import torch.nn as nn


class RMSNorm(nn.Module):
    """Root-mean-square norm: x / sqrt(mean(x^2) + eps) * gain, over the last dimension.

    LayerNorm without its two centring steps: no mean is subtracted and no bias added. Equal to
    ``torch.nn.RMSNorm(size, eps)`` (tests/test_norms.py). (..., size) -> (..., size)."""

    def __init__(self, size: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(size))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # in float32 even under bf16 autocast, as Llama does: squares of bf16 values lose too much
        x32 = x.float()
        normed = x32 * torch.rsqrt(x32.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return self.weight * normed.to(x.dtype)
