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

Long contexts (chapter 14): a large base (Llama 3: 500,000) turns the slow pairs more slowly
still; :func:`scale_frequencies` stretches a trained model to a longer context, by position
interpolation or Llama 3's frequency-dependent scaling.

Shapes: B batch, nh heads, T time, hs head size.
"""
from __future__ import annotations

import math

import torch


ROPE_SCALINGS = ("linear", "llama3")  # None: plain RoPE


def rope_frequencies(head_size: int, theta: float = 10000.0, scaling: str | None = None,
                     factor: float = 1.0, low_freq_factor: float = 1.0,
                     high_freq_factor: float = 4.0,
                     original_context: int | None = None) -> torch.Tensor:
    """(hs/2,) angles per position of each pair: theta^(-2i/hs) for i = 0 .. hs/2 - 1.
    Pair 0 turns by one radian per position, the last pair theta^((hs-2)/hs) times more slowly.

    ``scaling`` stretches a model trained on ``original_context`` positions to ``factor`` times as
    many (see :func:`scale_frequencies`): None keeps plain RoPE."""
    if head_size % 2:
        raise ValueError("RoPE rotates pairs of channels: the head size must be even, got "
                         f"{head_size}")
    # computed as Hugging Face computes it (float32 powers of an int64 range), so the angles agree
    # bitwise
    exponents = torch.arange(0, head_size, 2, dtype=torch.int64).float() / head_size
    freqs = 1.0 / (theta**exponents)
    if scaling is None:
        return freqs
    return scale_frequencies(freqs, scaling, factor, low_freq_factor, high_freq_factor,
                             original_context)


def scale_frequencies(freqs: torch.Tensor, scaling: str, factor: float,
                      low_freq_factor: float = 1.0, high_freq_factor: float = 4.0,
                      original_context: int | None = None) -> torch.Tensor:
    """RoPE frequencies (hs/2,) for a context ``factor`` times longer than the trained one.

    - ``"linear"``, position interpolation (Chen et al. 2023): every frequency divided by
      ``factor``, so positions 0 .. factor*T map onto the angles the model saw for 0 .. T.
      Neighbouring tokens then differ by 1/factor of the angle they had in training.
    - ``"llama3"`` (Meta's Llama 3.1): leave the fast pairs alone, interpolate the slow ones.
      A pair whose wavelength 2*pi/freq is shorter than ``original_context / high_freq_factor``
      turns many times within the trained context and has seen every angle: kept. One longer
      than ``original_context / low_freq_factor`` never made a full turn: divided by ``factor``.
      In between, a smooth mix of the two. Written as Hugging Face's ``rope_type="llama3"``.
    """
    if scaling not in ROPE_SCALINGS:
        raise ValueError(f"unknown RoPE scaling {scaling!r}: choose one of {ROPE_SCALINGS} or None")
    if scaling == "linear":
        return freqs / factor
    if original_context is None:
        raise ValueError("llama3 RoPE scaling needs original_context, the context length the model "
                         "was trained at")
    if not high_freq_factor > low_freq_factor:
        raise ValueError(f"llama3 RoPE scaling needs high_freq_factor ({high_freq_factor}) > "
                         f"low_freq_factor ({low_freq_factor})")
    wavelength = 2 * math.pi / freqs  # positions per full turn of each pair
    slow = wavelength > original_context / low_freq_factor
    fast = wavelength < original_context / high_freq_factor
    scaled = torch.where(slow, freqs / factor, freqs)
    # 0 at the slow edge, 1 at the fast edge: how much of the original frequency a middle pair keeps
    smooth = (original_context / wavelength - low_freq_factor) / (
        high_freq_factor - low_freq_factor
    )
    mixed = (1 - smooth) * scaled / factor + smooth * scaled
    return torch.where(~slow & ~fast, mixed, scaled)


def rope_cos_sin(positions: torch.Tensor, head_size: int, theta: float = 10000.0,
                 **scaling) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of every angle: positions (...,) -> two tensors (..., hs/2), in float32.
    ``scaling``: the keyword arguments of :func:`rope_frequencies` (scaling, factor, ...)."""
    freqs = rope_frequencies(head_size, theta, **scaling).to(positions.device)
    angles = positions.float()[..., None] * freqs  # (..., hs/2)
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
