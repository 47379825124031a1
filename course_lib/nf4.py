"""4-bit NormalFloat (NF4) weights from scratch: the frozen base of QLoRA (chapter 15;
Dettmers et al. 2023, "QLoRA: Efficient Finetuning of Quantized LLMs").

LoRA freezes the base model, so the base need not be stored in a format that trains well:
QLoRA stores it in 4 bits and dequantises each weight matrix on the fly in the forward pass;
gradients flow through the dequantised matrix to the LoRA adapters, which stay in float.

**Block-wise absmax.** The weight matrix is cut into blocks of 64 consecutive numbers; each block
is divided by its largest absolute value (its *absmax*, kept in float32), so every number lands
in [-1, 1] and one outlier spoils only its own block.

**The NormalFloat code book.** A 4-bit code is an index into 16 values. Pretrained weights are
roughly normal, so NF4 places the 16 values at quantiles of the standard normal: 8 for the
positive half and 7 for the negative half, plus an exact zero, scaled so the largest is 1
(:func:`nf4_code_book`). Each number is stored as the index of its nearest value. An
asymmetric book (8 positive, 7 negative) is the price of having a zero and 16 values.

**Memory.** 4 bits per weight plus one float32 absmax per 64: 4.5 bits, against 32 for float32
(QLoRA's double quantisation also stores the absmaxes in 8 bits, for about 4.13 bits; not done
here).

Shapes: out/in the features of a quantised ``nn.Linear``; N numbers, n_blocks = N / block.
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from .lora import target_layers

BLOCK_SIZE = 64  # QLoRA's block size for the weights
# the outermost quantile used (bitsandbytes' create_normal_map, Dettmers et al. 2023)
NF4_OFFSET = 0.9677083


def nf4_code_book(offset: float = NF4_OFFSET) -> torch.Tensor:
    """The 16 NF4 values, sorted, from -1 to 1 with an exact 0 (float32, shape (16,)).

    8 positive values: the standard normal's quantiles at 8 evenly spaced probabilities from
    ``offset`` down to (not including) 0.5; 7 negative ones the same way; the list scaled so its
    largest value is 1. (Using quantile 1 itself would give infinity, hence ``offset`` < 1.)
    """
    positive = torch.special.ndtri(torch.linspace(offset, 0.5, 9, dtype=torch.float64)[:-1])  # (8,)
    # (7,)
    negative = -torch.special.ndtri(torch.linspace(offset, 0.5, 8, dtype=torch.float64)[:-1])
    values = torch.cat([positive, torch.zeros(1, dtype=torch.float64), negative]).sort().values
    return (values / values.max()).float()


def quantize_nf4(w: torch.Tensor,
                 block_size: int = BLOCK_SIZE) -> tuple[torch.Tensor, torch.Tensor]:
    """``w`` (any shape, N numbers) -> ``(codes, absmax)``: ``codes`` uint8 (n_blocks * block / 2,),
    two 4-bit indices per byte (the even-numbered one in the high half), and ``absmax`` float32
    (n_blocks,). The last block is padded with zeros when N is not a multiple of ``block_size``."""
    if block_size < 2 or block_size % 2:
        raise ValueError(f"block_size must be an even number >= 2, got {block_size}")
    flat = w.detach().float().flatten()
    pad = (-flat.numel()) % block_size
    blocks = F.pad(flat, (0, pad)).view(-1, block_size)  # (n_blocks, block)
    absmax = blocks.abs().amax(1)  # (n_blocks,)
    normalised = blocks / absmax.clamp(min=torch.finfo(torch.float32).tiny)[:, None]  # in [-1, 1]
    book = nf4_code_book().to(w.device)
    midpoints = (book[1:] + book[:-1]) / 2  # (15,): a number goes to the nearest value
    # (n_blocks * block,) in 0..15
    codes = torch.bucketize(normalised.flatten(), midpoints).to(torch.uint8)
    packed = (codes[0::2] << 4) | codes[1::2]  # two codes per byte
    return packed, absmax


def dequantize_nf4(codes: torch.Tensor, absmax: torch.Tensor, shape, block_size: int = BLOCK_SIZE,
                   dtype=torch.float32) -> torch.Tensor:
    """The inverse of :func:`quantize_nf4`: a tensor of ``shape`` whose every number is a code
    book value times its block's absmax."""
    n = 1
    for d in shape:
        n *= d
    book = nf4_code_book().to(codes.device)
    idx = torch.stack([codes >> 4, codes & 0xF], dim=1).flatten().long()  # (n_blocks * block,)
    values = book[idx].view(-1, block_size) * absmax[:, None]  # (n_blocks, block)
    return values.flatten()[:n].view(*shape).to(dtype)


class NF4Linear(nn.Linear):
    """A frozen ``nn.Linear`` stored in NF4: (B, T, in) -> (B, T, out). The weight is
    dequantised in every forward pass (``self.weight`` is computed, not stored); the bias, if
    any, stays in float and frozen. It *is* an ``nn.Linear`` (a subclass), so ``add_lora`` wraps
    it like any other: QLoRA is LoRA on this layer."""

    def __init__(self, linear: nn.Linear, block_size: int = BLOCK_SIZE):
        nn.Module.__init__(self)  # not nn.Linear's: no float weight is ever allocated
        self.in_features, self.out_features, self.block_size = (
            linear.in_features,
            linear.out_features,
            block_size,
        )
        codes, absmax = quantize_nf4(linear.weight, block_size)
        self.register_buffer("codes", codes)
        self.register_buffer("absmax", absmax)
        bias = linear.bias
        self.bias = (None if bias is None
                     else nn.Parameter(bias.detach().clone(), requires_grad=False))
        self.weight_dtype = linear.weight.dtype

    @property
    def weight(self) -> torch.Tensor:  # (out, in), dequantised on the fly
        return dequantize_nf4(self.codes, self.absmax, (self.out_features, self.in_features),
                              self.block_size, self.weight_dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight.to(x.dtype),
                        None if self.bias is None else self.bias.to(x.dtype))

    def nbytes(self) -> int:
        """Bytes this layer stores: the packed codes, the absmaxes and the bias."""
        return sum(t.numel() * t.element_size() for t in (self.codes, self.absmax, self.bias)
                   if t is not None)


def quantize_linears(model: nn.Module, targets, block_size: int = BLOCK_SIZE) -> nn.Module:
    """Replace the ``nn.Linear`` layers of ``model`` that ``targets`` name (as in ``lora.add_lora``)
    by :class:`NF4Linear`, in place; returns ``model``. Everything else stays in float."""
    for name, layer in target_layers(model, tuple(targets)).items():
        if isinstance(layer, NF4Linear):
            raise ValueError(f"{name} is already quantised")
        parent, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent) if parent else model, child,
                NF4Linear(layer, block_size))
    return model


def linear_bytes(model: nn.Module) -> int:
    """Bytes held by the weights and biases of ``model``'s linear layers, NF4 or float."""
    total = 0
    for m in model.modules():
        if isinstance(m, NF4Linear):
            total += m.nbytes()
        elif isinstance(m, nn.Linear):
            total += sum(p.numel() * p.element_size() for p in m.parameters(recurse=False))
    return total
