"""4-bit weights multiplied without unpacking them first (chapter 23): PyTorch's CPU kernel.

A CPU build of torch 2.13 has a 4-bit weight-only matrix product, written for its own packed
layout: ``torch.ops.aten._convert_weight_to_int4pack_for_cpu(codes, inner_k_tiles)`` turns codes
0..15 (int32, (N, K)) into its uint8 layout (N, K / 2), and
``torch.ops.aten._weight_int4pack_mm_for_cpu(x, packed, group_size, scale_and_zero)`` computes
``x @ W^T`` for float activations x (M, K), reading every weight as ``(c - 8) * s + m`` with one
float scale s and one float offset m per group of ``group_size`` consecutive weights of a row,
``scale_and_zero`` (K / group_size, N, 2) in x's dtype. It accepts group sizes 32, 64, 128 and
256 (K a multiple of the group size) and N a multiple of 16 (checked in torch 2.13.0 on this CPU;
other shapes are refused by the kernel).

The course's codes fit that formula exactly: a symmetric code q in [-8, 7] is stored as c = q + 8
and means ``s * q = (c - 8) * s``; an asymmetric one c in [0, 15] with integer zero point z means
``s * (c - z) = (c - 8) * s + s * (8 - z)``, so m = s (8 - z) (a float16 scale times an integer
below 16 is exact in float32). What is kept is the course's format: the codes two to a byte
(``codes``, (N, K / 2), the lower 4 bits the even column), float16 scales (N, G) and, asymmetric,
the zero points (N, G) one to a byte; the kernel's layout is made from them when the module is
built or loaded (a buffer not saved). Where the kernel cannot run (another device, a group size it
refuses, float16 activations) or is the slower way (more than ``KERNEL_MAX_ROWS`` rows), the weight
is dequantized and multiplied in float32, the same numbers to float rounding. The backward pass (a
model trained through them: the norms' gains) multiplies by the dequantized weight.

Shapes: x (..., K), W (N, K), codes (N, K / 2), scales and zeros (N, G) with G = K / group_size.
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from .rtn import QuantizedTensor, unpack_bits

KERNEL_GROUP_SIZES = (32, 64, 128, 256)  # what _weight_int4pack_mm_for_cpu accepts
ROW_MULTIPLE = 16  # N must be a multiple of 16: other row counts are padded with rows of zeros
INNER_K_TILES = 2  # the packing's tiling (2, 4 or 8 on a CPU: the results are the same)
# The kernel is written for decoding (one row: one token of one sequence).
# benchmarks/quantize_int4.py measures it against dequantize-then-multiply at 1 to 512 rows: in two
# runs (2 threads, AVX2, load average 4 to 6; course_lib/records/quantize_int4.json is the second)
# it was the faster at one row and the slower at 64 rows at 2048 x 2048 (the small shapes' times
# were noise at that load); so it is used for one row only.
KERNEL_MAX_ROWS = 1


def kernel_available() -> bool:
    """Whether this torch build has the CPU 4-bit kernel (torch 2.5 and later)."""
    return hasattr(torch.ops.aten, "_weight_int4pack_mm_for_cpu")


def unpack_nibbles(codes: torch.Tensor) -> torch.Tensor:
    """uint8 (..., K / 2) -> the codes 0..15, int32 (..., K): low 4 bits first."""
    return torch.stack([codes & 15, codes >> 4], -1).flatten(-2).to(torch.int32)


def dequantize_int4(codes: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor
                    | None) -> torch.Tensor:
    """The float32 weights (..., K) the codes (..., K / 2) stand for: ``s * (c - z)`` per group,
    with z = 8 when symmetric (``zeros`` None), scales and zeros (..., G)."""
    c = unpack_nibbles(codes).float()
    G = scales.shape[-1]
    c = c.unflatten(-1, (G, c.shape[-1] // G))  # (..., G, g)
    z = 8.0 if zeros is None else zeros.float().unsqueeze(-1)
    return (scales.float().unsqueeze(-1) * (c - z)).flatten(-2)


def kernel_scale_and_zero(scales: torch.Tensor, zeros: torch.Tensor | None,
                          rows: int) -> torch.Tensor:
    """The kernel's (G, rows, 2) float32 table of (s, m) from scales and zeros (N, G), rows
    padded with zeros up to ``rows``."""
    s = scales.float()
    m = torch.zeros_like(s) if zeros is None else s * (8 - zeros.float())
    table = torch.stack([s, m], -1).transpose(0, 1)  # (G, N, 2)
    return F.pad(table, (0, 0, 0, rows - table.shape[1])).contiguous()


class _Int4MatMul(torch.autograd.Function):
    """``x @ W^T`` by the packed kernel; the backward multiplies by the dequantized W."""

    @staticmethod
    def forward(ctx, x, linear):  # x (M, K) float32 -> (M, N)
        ctx.linear = linear
        out = torch.ops.aten._weight_int4pack_mm_for_cpu(x, linear.packed, linear.group_size,
                                                         linear.scale_and_zero)
        return out[:, :linear.out_features]

    @staticmethod
    def backward(ctx, grad):  # (M, N) -> (M, K)
        return grad @ ctx.linear.weight, None


class Int4Linear(nn.Module):
    """An ``nn.Linear`` whose weight is stored in 4 bits per group of ``group_size`` weights of a
    row (symmetric, or with zero points), multiplied by the packed CPU kernel."""

    def __init__(self, in_features: int, out_features: int, group_size: int = 32,
                 symmetric: bool = True, bias: bool = False):
        super().__init__()
        if in_features % group_size or in_features % 2:
            raise ValueError(f"group_size {group_size} must divide the {in_features} inputs (an "
                             "even number)")
        self.in_features, self.out_features = in_features, out_features
        self.group_size, self.symmetric = group_size, symmetric
        G = in_features // group_size
        self.register_buffer("codes",
                             torch.full((out_features, in_features // 2), 0x88, dtype=torch.uint8))
        self.register_buffer("scales", torch.ones(out_features, G, dtype=torch.float16))
        self.register_buffer("zeros", None if symmetric
                             else torch.full((out_features, G), 8, dtype=torch.uint8))
        self.bias = nn.Parameter(torch.zeros(out_features)) if bias else None
        # the kernel's layout, made by repack()
        self.register_buffer("packed", None, persistent=False)
        self.register_buffer("scale_and_zero", None, persistent=False)
        self.register_load_state_dict_post_hook(lambda module, keys: module.repack())
        self.repack()

    @classmethod
    def from_quantized(cls, qt: QuantizedTensor, bias: torch.Tensor | None = None) -> "Int4Linear":
        """The module of a 4-bit per-group :class:`QuantizedTensor` (the course's RTN or GPTQ)."""
        c = qt.config
        if c.bits != 4 or c.granularity != "group":
            raise ValueError(f"Int4Linear holds 4-bit weights per group, not {c.name}")
        out, n = qt.shape
        linear = cls(n, out, c.group_size, c.symmetric, bias is not None)
        linear.load_quantized(qt, bias)
        return linear

    @torch.no_grad()
    def load_quantized(self, qt: QuantizedTensor, bias: torch.Tensor | None = None) -> None:
        """Take the codes, scales and zero points of ``qt`` (same shape and settings)."""
        c = qt.config
        if (qt.shape != (self.out_features, self.in_features) or c.bits != 4
            or c.granularity != "group"
                or c.group_size != self.group_size or c.symmetric != self.symmetric):
            raise ValueError(f"a {c.name} weight of shape {qt.shape} does not fit this Int4Linear")
        # the same nibble order
        self.codes.copy_(qt.codes.view(self.out_features, self.in_features // 2))
        self.scales.copy_(qt.scales)
        if self.zeros is not None:
            self.zeros.copy_(unpack_bits(qt.zeros, 4, self.scales.numel()).view_as(self.scales))
        if bias is not None:
            self.bias.copy_(bias)
        self.repack()

    @property
    def kernel_ok(self) -> bool:
        return kernel_available() and self.group_size in KERNEL_GROUP_SIZES

    @torch.no_grad()
    def repack(self) -> None:
        """The kernel's packed weight and (s, m) table, from the stored codes (on a CPU)."""
        if not self.kernel_ok or self.codes.device.type != "cpu":
            self.packed = self.scale_and_zero = None
            return
        rows = -(-self.out_features // ROW_MULTIPLE) * ROW_MULTIPLE
        # (rows, K)
        codes = F.pad(unpack_nibbles(self.codes), (0, 0, 0, rows - self.out_features), value=8)
        self.packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(codes, INNER_K_TILES)
        self.scale_and_zero = kernel_scale_and_zero(self.scales, self.zeros, rows)

    @property
    def weight(self) -> torch.Tensor:
        """The dequantized (out, in) float32 weight: what the codes stand for."""
        return dequantize_int4(self.codes, self.scales, self.zeros)

    def nbytes(self) -> int:
        """The bytes of the stored codes, scales and zero points."""
        return sum(t.numel() * t.element_size() for t in (self.codes, self.scales, self.zeros)
                   if t is not None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (..., K) -> (..., N)
        if (self.packed is None or x.device.type != "cpu" or x.dtype != torch.float32
                or x.numel() > KERNEL_MAX_ROWS * self.in_features):
            return F.linear(x, self.weight.to(x.dtype), self.bias)  # dequantize, then multiply
        out = _Int4MatMul.apply(x.reshape(-1, self.in_features), self)
        out = out.view(*x.shape[:-1], self.out_features)
        return out if self.bias is None else out + self.bias

    def extra_repr(self) -> str:
        how = "symmetric" if self.symmetric else "with zero points"
        return (f"in={self.in_features}, out={self.out_features}, int4 per group of "
                f"{self.group_size}, {how}")


class Int4Embedding(nn.Module):
    """An ``nn.Embedding`` stored like :class:`Int4Linear` (a (V, C) table of 4-bit rows): a
    lookup dequantizes only the rows it reads. ``tied``: the LM head's Int4Linear, whose stored
    tensors it shares (a tied embedding is one matrix)."""

    def __init__(self, num_embeddings: int, embedding_dim: int, group_size: int = 32,
                 symmetric: bool = True, tied: Int4Linear | None = None):
        super().__init__()
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        source = tied or Int4Linear(embedding_dim, num_embeddings, group_size, symmetric)
        for name in ("codes", "scales", "zeros"):
            self.register_buffer(name, getattr(source, name))

    @property
    def weight(self) -> torch.Tensor:
        return dequantize_int4(self.codes, self.scales, self.zeros)

    def nbytes(self) -> int:
        return Int4Linear.nbytes(self)

    @torch.no_grad()
    def load_quantized(self, qt: QuantizedTensor) -> None:
        source = Int4Linear.from_quantized(qt)
        for name in ("codes", "scales", "zeros"):
            if getattr(self, name) is not None:
                getattr(self, name).copy_(getattr(source, name))

    def forward(self, idx: torch.Tensor) -> torch.Tensor:  # (...,) -> (..., C)
        zeros = None if self.zeros is None else self.zeros[idx]
        return dequantize_int4(self.codes[idx], self.scales[idx], zeros)
