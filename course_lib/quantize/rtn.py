"""Round-to-nearest (RTN) integer quantization of a weight matrix from scratch (chapter 23).

A b-bit code is an integer q in a range of 2**b values; a weight is stored as q and read back as
``scale * (q - zero)``. The *step* is ``scale``: every weight inside the range is at most half a
step from its dequantized value, and one outside it is clamped to the nearest end.

- **Symmetric**: q in [-2**(b-1), 2**(b-1) - 1], no zero point; ``scale = absmax / (2**(b-1) - 1)``
  so that +absmax and -absmax are both representable (the code -2**(b-1) is never needed).
- **Asymmetric**: q in [0, 2**b - 1] and an *integer* zero point ``zero = round(-lo / scale)``,
  with ``scale = (hi - lo) / (2**b - 1)`` and the range [lo, hi] stretched to hold 0, so that the
  weight 0 (padding, a pruned weight) is stored exactly. The zero point must be an integer in the
  code range: it is stored in b bits like the codes.

One scale (and zero point) is shared by a *tensor*, a *row* (one output feature of an
``nn.Linear``: row i of the (out, in) weight), or a *group* of ``group_size`` consecutive weights
of a row. Smaller groups follow the weights more closely and store more scales.

Stored sizes are those of the tensors written (:func:`QuantizedTensor.nbytes`): the codes packed
b bits each into bytes (:func:`pack_bits`), the scales in float16, the zero points packed b bits
each. Shapes: W (out, in); G groups per row, g = in / G weights per group.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ..config import Rule, check_fields

GRANULARITIES = ("tensor", "row", "group")
RTN_RULES = {
    "bits": Rule(int, 2, 8),
    "granularity": Rule(str, choices=GRANULARITIES),
    "group_size": Rule(int, 1, None),
    "symmetric": Rule(bool),
}
SCALE_DTYPE = torch.float16  # scales are written in float16 (2 bytes each)


@dataclass(frozen=True)
class QuantConfig:
    """How a matrix is quantized: ``bits`` per weight, one scale per ``granularity`` ("tensor",
    "row", or "group" of ``group_size`` weights of a row), symmetric or with a zero point."""
    bits: int = 4
    granularity: str = "row"
    group_size: int = 32
    symmetric: bool = True

    def __post_init__(self):
        check_fields(self, RTN_RULES)

    @property
    def name(self) -> str:
        where = f"group-{self.group_size}" if self.granularity == "group" else self.granularity
        return f"int{self.bits} {'sym' if self.symmetric else 'asym'} per {where}"


def code_range(bits: int, symmetric: bool) -> tuple[int, int]:
    """The smallest and largest code: [-2**(b-1), 2**(b-1) - 1] or [0, 2**b - 1]."""
    return (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1) if symmetric else (0, 2 ** bits - 1)


def as_groups(w: torch.Tensor, config: QuantConfig) -> torch.Tensor:
    """(out, in) -> (out, G, g), a view: the weights that share a scale lie along the last axis
    (per tensor: (1, 1, out * in); per row: (out, 1, in))."""
    if w.dim() != 2:
        raise ValueError(f"expected a 2-D weight matrix (out, in), got shape {tuple(w.shape)}")
    out, n_in = w.shape
    if config.granularity == "tensor":
        return w.reshape(1, 1, out * n_in)
    if config.granularity == "row":
        return w.reshape(out, 1, n_in)
    if n_in % config.group_size:
        raise ValueError(f"group_size {config.group_size} does not divide the {n_in} columns of "
                         "the "
                         f"matrix: pick a divisor of {n_in}, or granularity='row'")
    return w.reshape(out, n_in // config.group_size, config.group_size)


def round_up_to_stored(scale: torch.Tensor) -> torch.Tensor:
    """The smallest float16 at or above each scale, as float32: what is stored is what is used,
    and rounding up keeps the whole range on the grid (a tiny scale rounded down to a float16
    subnormal could lose 1% and push the largest weight past the last code)."""
    s16 = scale.to(SCALE_DTYPE)
    s16 = torch.where(s16.float() < scale,
                      torch.nextafter(s16, torch.full_like(s16, float("inf"))), s16)
    return s16.float()


def find_params(groups: torch.Tensor, bits: int,
                symmetric: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """``(scale, zero)``, each (..., 1), for the weights of each group along the last axis.
    ``zero`` holds integers (0 for symmetric). A group
    of zeros gets scale 1 (any scale stores it)."""
    groups = groups.float()
    if symmetric:
        scale = groups.abs().amax(-1, keepdim=True) / code_range(bits, True)[1]
    else:
        lo = groups.amin(-1, keepdim=True).clamp(max=0)  # the range stretched to hold 0 ...
        scale = (groups.amax(-1, keepdim=True).clamp(min=0) - lo) / (2 ** bits - 1)
    scale = round_up_to_stored(torch.where(scale > 0, scale, torch.ones_like(scale)))
    if symmetric:
        return scale, torch.zeros_like(scale)
    zero = torch.round(-lo / scale).clamp(0, 2 ** bits - 1)  # ... exactly, at an integer code
    return scale, zero


def quantize_codes(w: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor, bits: int,
                   symmetric: bool) -> torch.Tensor:
    """The integer codes ``clamp(round(w / scale) + zero)`` (int16, w's shape; broadcasting)."""
    lo, hi = code_range(bits, symmetric)
    return (torch.round(w.float() / scale) + zero).clamp(lo, hi).to(torch.int16)


def dequantize_codes(q: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor) -> torch.Tensor:
    """``scale * (q - zero)`` in float32."""
    return scale * (q.float() - zero)


def pack_bits(codes: torch.Tensor, bits: int) -> torch.Tensor:
    """Non-negative integer codes below 2**bits, any shape (N numbers) -> uint8 (ceil(N bits / 8),):
    the bits of every code, lowest first, one after the other."""
    flat = codes.flatten().long()
    if flat.numel() and (flat.min() < 0 or flat.max() >= 2 ** bits):
        raise ValueError(f"codes must lie in [0, {2 ** bits - 1}] to be packed in {bits} bits")
    stream = ((flat[:, None] >> torch.arange(bits)) & 1).flatten()  # (N * bits,)
    stream = torch.nn.functional.pad(stream, (0, (-stream.numel()) % 8)).view(-1, 8)
    return (stream << torch.arange(8)).sum(1).to(torch.uint8)


def unpack_bits(packed: torch.Tensor, bits: int, n: int) -> torch.Tensor:
    """The inverse of :func:`pack_bits`: the first ``n`` codes (int64, (n,))."""
    stream = ((packed.long()[:, None] >> torch.arange(8)) & 1).flatten()[:n * bits].view(n, bits)
    return (stream << torch.arange(bits)).sum(1)


@dataclass
class QuantizedTensor:
    """A weight matrix as written: ``codes`` and ``zeros`` packed (uint8), ``scales`` float16."""
    config: QuantConfig
    shape: tuple[int, int]
    codes: torch.Tensor  # uint8 (ceil(out * in * bits / 8),)
    scales: torch.Tensor  # float16 (out, G) or (1, 1)
    zeros: torch.Tensor | None  # uint8, packed like the codes; None when symmetric

    def nbytes(self) -> int:
        """The bytes of every tensor written: codes, scales and zero points."""
        tensors = [self.codes, self.scales] + ([] if self.zeros is None else [self.zeros])
        return sum(t.numel() * t.element_size() for t in tensors)

    def dequantize(self) -> torch.Tensor:
        """The float32 (out, in) matrix the codes stand for."""
        c = self.config
        lo = code_range(c.bits, c.symmetric)[0]
        n = self.shape[0] * self.shape[1]
        scale = self.scales.float().unsqueeze(-1)  # (out, G, 1)
        q = (unpack_bits(self.codes, c.bits, n) + lo).view(*scale.shape[:2], -1)  # (out, G, g)
        zero = (torch.zeros_like(scale) if self.zeros is None
                else unpack_bits(self.zeros, c.bits, scale.numel()).float().view_as(scale))
        return dequantize_codes(q, scale, zero).reshape(self.shape)


def quantize(w: torch.Tensor, config: QuantConfig) -> QuantizedTensor:
    """Round-to-nearest: W (out, in) -> its :class:`QuantizedTensor`."""
    groups = as_groups(w.detach(), config)  # (out, G, g)
    scale, zero = find_params(groups, config.bits, config.symmetric)  # (out, G, 1) each
    return pack(quantize_codes(groups, scale, zero, config.bits, config.symmetric), scale, zero,
                config, tuple(w.shape))


def pack(q: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor, config: QuantConfig,
         shape: tuple[int, int]) -> QuantizedTensor:
    """Codes (out, G, g) with their scales and zero points (out, G, 1) -> what is written."""
    lo = code_range(config.bits, config.symmetric)[0]
    zeros = None if config.symmetric else pack_bits(zero.long(), config.bits)
    return QuantizedTensor(config, shape, pack_bits(q.long() - lo, config.bits),
                           scale.squeeze(-1).to(SCALE_DTYPE), zeros)


def fake_quantize(w: torch.Tensor, config: QuantConfig) -> torch.Tensor:
    """``dequantize(quantize(w))`` without packing (same values, float32, w's shape): what a
    quantized model computes with, and the forward pass of quantization-aware training."""
    groups = as_groups(w, config)
    scale, zero = find_params(groups.detach(), config.bits, config.symmetric)
    q = quantize_codes(groups, scale, zero, config.bits, config.symmetric)
    return dequantize_codes(q, scale, zero).reshape(w.shape)
