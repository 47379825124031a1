"""How a quantized GPT stores its two embedding tables (chapter 23): a setting of its own.

The token and position embeddings are lookups, not products: GPTQ has no input to calibrate them
on, and published GPTQ (Frantar et al. 2022; IST-DASLab/gptq quantizes only the linear layers of
the decoder blocks, AutoGPTQ lists the embeddings among its unquantized modules) leaves them in 16
bits. On the course's model they are 2% of the weights and, rounded to 3 bits, about half of
RTN's damage. So the embeddings have their own setting, ``embeddings``:

- ``"int8"`` (the default): 8 bits per row (one token's or one position's vector) by round-to-
  nearest, one float16 scale a row;
- ``"fp16"``: kept in float16, as the shipped model stores them;
- ``"same"``: rounded like every other matrix, at the working bit width (the chapter's control,
  the behaviour before this setting existed).

A tied LM head is the token embedding (one matrix): it is stored, and read, as the embedding is.
:class:`WideEmbedding` is an ``nn.Embedding`` stored in int8 per row or in float16, and
:class:`TiedHead` the LM head that reads it (the ``gpt-int4`` kind's embeddings unless "same").

Shapes: the table (V, C) (V rows: tokens or positions); codes int8 or float16 (V, C), scales
float16 (V,).
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from .rtn import QuantConfig, QuantizedTensor

EMBEDDINGS = ("int8", "fp16", "same")
INT8_ROWS = QuantConfig(bits=8, granularity="row")  # what "int8" stores: symmetric, a scale a row


def check_embeddings(embeddings, option: str = "embeddings") -> None:
    """Refuse anything but the three settings, in one line."""
    if embeddings not in EMBEDDINGS:
        raise ValueError(
            f"{option} must be one of {', '.join(EMBEDDINGS)} (int8: 8 bits per row; fp16: kept in "
            f"float16; same: at the working bit width), got {embeddings!r}"
        )


def embedding_config(config: QuantConfig, embeddings: str) -> QuantConfig | None:
    """The QuantConfig an embedding table is rounded with under ``config`` (None: kept in
    float16)."""
    check_embeddings(embeddings)
    return {"int8": INT8_ROWS, "fp16": None, "same": config}[embeddings]


def embedding_weights(model: nn.Module) -> set[int]:
    """The ``id`` of every embedding table's weight (a tied LM head's weight is one of them)."""
    return {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}


class WideEmbedding(nn.Module):
    """An embedding table stored wider than the working bit width: ``"int8"`` (codes int8 (V, C),
    float16 scales (V,): row v is ``scales[v] * codes[v]``) or ``"fp16"`` (codes: the float16
    table, no scales). A lookup dequantizes only the rows it reads."""

    def __init__(self, num_embeddings: int, embedding_dim: int, embeddings: str = "int8"):
        super().__init__()
        if embeddings not in ("int8", "fp16"):
            raise ValueError(f"a WideEmbedding stores int8 or fp16, not {embeddings!r}")
        self.num_embeddings, self.embedding_dim, self.embeddings = (
            num_embeddings,
            embedding_dim,
            embeddings,
        )
        dtype = torch.int8 if embeddings == "int8" else torch.float16
        self.register_buffer("codes", torch.zeros(num_embeddings, embedding_dim, dtype=dtype))
        self.register_buffer(
            "scales",
            torch.ones(num_embeddings, dtype=torch.float16) if embeddings == "int8" else None,
        )

    @torch.no_grad()
    def load(self, weight: torch.Tensor, qt: QuantizedTensor | None = None) -> None:
        """Store ``qt`` (an int8 per-row QuantizedTensor of the table) or, for fp16, ``weight``
        (V, C)."""
        if self.embeddings == "fp16":
            self.codes.copy_(weight.to(torch.float16))
            return
        if qt is None or qt.config != INT8_ROWS or qt.shape != tuple(self.codes.shape):
            raise ValueError(
                f"an int8 embedding of shape {tuple(self.codes.shape)} loads an int8 per-row "
                "QuantizedTensor of that shape"
            )
        self.scales.copy_(qt.scales.view(-1))
        self.codes.copy_(
            (qt.dequantize() / qt.scales.float()).round().to(torch.int8)
        )  # exact: |q| <= 127

    def rows(self, idx: torch.Tensor) -> torch.Tensor:
        """The float32 rows ``idx`` (...,) -> (..., C)."""
        if self.scales is None:
            return self.codes[idx].float()
        return self.codes[idx].float() * self.scales[idx].float().unsqueeze(-1)

    @property
    def weight(self) -> torch.Tensor:
        """The whole float32 table (V, C)."""
        return self.rows(torch.arange(self.num_embeddings, device=self.codes.device))

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.codes, self.scales) if t is not None)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:  # (...,) -> (..., C)
        return self.rows(idx)

    def extra_repr(self) -> str:
        return f"{self.num_embeddings}, {self.embedding_dim}, {self.embeddings}"


class TiedHead(nn.Module):
    """A tied LM head that multiplies by its :class:`WideEmbedding`'s table
    (x (..., C) -> (..., V)), sharing its stored tensors (a checkpoint holds them once)."""

    def __init__(self, embedding: WideEmbedding):
        super().__init__()
        self.embeddings = embedding.embeddings
        self.register_buffer("codes", embedding.codes)
        self.register_buffer("scales", embedding.scales)

    @property
    def weight(self) -> torch.Tensor:
        """The float32 (V, C) table it multiplies by."""
        if self.scales is None:
            return self.codes.float()
        return self.codes.float() * self.scales.float().unsqueeze(-1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight.to(x.dtype))
