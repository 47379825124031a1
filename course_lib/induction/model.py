"""A small attention-only Transformer for chapter 21, with hook points to read and replace.

No MLPs: token and learned position embeddings, ``n_layer`` blocks of causal multi-head attention
each read through a LayerNorm and added to the residual stream, a final LayerNorm and a linear
unembedding (``layer_norm=False`` leaves the norms out). Without MLPs every head's effect is a
sum of paths through the residual stream, which is what makes the composition of two heads
readable from their weights (Elhage et al. 2021; the shape of ARENA's ``attn_only_2L``). Measured
on this task: with vocabulary 32 the LayerNorms bring the phase change within a few hundred steps,
without them it had not come after 1200 (one seed each, in development).

Hook points are ``nn.Identity`` modules that the forward pass calls on the tensors worth
reading: a forward hook registered on one of them sees that tensor and may return a
replacement. ``attn.hook_pattern`` carries the attention weights (B, nh, T, T) after the
softmax, ``attn.hook_z`` each head's output before the output projection (B, T, nh, hs), and
``attn.hook_q``, ``attn.hook_k``, ``attn.hook_v`` each head's queries, keys and values
(B, nh, T, hs), so that one input of a head can be replaced alone (path patching). The same names
as TransformerLens's ``hook_pattern``, ``hook_z``, ``hook_q``, ``hook_k`` and ``hook_v``.

Shapes: B batch, T time, C = n_embd channels, nh heads, hs = C / nh head size, V vocabulary.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..config import Rule, check_fields, config_from_dict
from ..registry import register_model

ATTN_ONLY_RULES = {
    "vocab_size": Rule(int, 1),
    "block_size": Rule(int, 1, 65_536),
    "n_layer": Rule(int, 1, 64),
    "n_head": Rule(int, 1),
    "n_embd": Rule(int, 1, 16_384),
    "layer_norm": Rule(bool),
}


@dataclass
class AttnOnlyConfig:
    vocab_size: int = 64
    block_size: int = 48
    n_layer: int = 2
    n_head: int = 4
    n_embd: int = 64
    layer_norm: bool = True  # a LayerNorm before each attention and before the unembedding

    def __post_init__(self):
        check_fields(self, ATTN_ONLY_RULES)
        if self.n_embd % self.n_head:
            raise ValueError(f"AttnOnlyConfig.n_embd ({self.n_embd}) must be a multiple of n_head "
                             f"({self.n_head}): each head reads n_embd / n_head channels")

    @property
    def head_size(self) -> int:
        return self.n_embd // self.n_head

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "AttnOnlyConfig":
        return config_from_dict(cls, d)


class HookedAttention(nn.Module):
    """Causal multi-head attention written out (no fused kernel), so that the weights exist as a
    tensor and pass through ``hook_pattern``; each head's output passes through ``hook_z``."""

    def __init__(self, config: AttnOnlyConfig):
        super().__init__()
        C = config.n_embd
        self.n_head, self.head_size = config.n_head, config.head_size
        # q, k, v of every head, head h in channels h*hs..(h+1)*hs
        self.c_attn = nn.Linear(C, 3 * C)
        self.c_proj = nn.Linear(C, C)
        self.hook_q, self.hook_k, self.hook_v = nn.Identity(), nn.Identity(), nn.Identity()
        self.hook_pattern = nn.Identity()
        self.hook_z = nn.Identity()
        mask = torch.tril(torch.ones(config.block_size, config.block_size, dtype=torch.bool))
        self.register_buffer("causal", mask, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, T, C) -> (B, T, C)
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)  # 3x (B, T, C)
        # (B, nh, T, hs)
        q, k, v = (t.view(B, T, self.n_head, self.head_size).transpose(1, 2) for t in (q, k, v))
        q, k, v = self.hook_q(q), self.hook_k(k), self.hook_v(v)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_size)  # (B, nh, T, T)
        scores = scores.masked_fill(~self.causal[:T, :T], float("-inf"))
        pattern = self.hook_pattern(F.softmax(scores, dim=-1))  # (B, nh, T, T), each row sums to 1
        z = self.hook_z((pattern @ v).transpose(1, 2))  # (B, T, nh, hs)
        return self.c_proj(z.reshape(B, T, C))


@register_model("attn-only", AttnOnlyConfig)
class AttnOnlyTransformer(nn.Module):
    """Embeddings, ``n_layer`` attention-only residual blocks, unembedding. ``forward(idx,
    targets)`` returns ``(logits, loss)`` as every model the Trainer trains: logits (B, T, V), the
    mean cross-entropy over every position (or None without targets)."""

    def __init__(self, config: AttnOnlyConfig):
        super().__init__()
        self.config = config
        C = config.n_embd
        self.tok_emb = nn.Embedding(config.vocab_size, C)
        self.pos_emb = nn.Embedding(config.block_size, C)
        self.attn = nn.ModuleList(HookedAttention(config) for _ in range(config.n_layer))
        norm = (lambda: nn.LayerNorm(C)) if config.layer_norm else nn.Identity
        self.ln = nn.ModuleList(norm() for _ in range(config.n_layer))
        self.ln_final = norm()
        self.unembed = nn.Linear(C, config.vocab_size, bias=False)
        self.apply(self._init_weights)

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        # GPT-2's scale: small weights, so the first logits are near uniform (loss ln V)
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def residual(self, idx: torch.Tensor) -> torch.Tensor:  # (B, T) -> (B, T, C)
        B, T = idx.shape
        if T > self.config.block_size:
            raise ValueError(f"a row of {T} tokens is longer than "
                             f"block_size={self.config.block_size}: crop it or build the model "
                             "with a larger block_size")
        x = self.tok_emb(idx) + self.pos_emb(torch.arange(T, device=idx.device))
        for ln, attn in zip(self.ln, self.attn):
            x = x + attn(ln(x))  # each layer reads the normalised stream and adds into it
        return x

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None):
        logits = self.unembed(self.ln_final(self.residual(idx)))  # (B, T, V)
        loss = None if targets is None else F.cross_entropy(logits.flatten(0, 1), targets.flatten())
        return logits, loss


@torch.no_grad()
def token_losses(model: nn.Module, rows: torch.Tensor) -> torch.Tensor:
    """(B, T) rows -> (B, T) the loss of predicting each token from those before it (nats); column
    0, which nothing predicts, is NaN. No gradient; the model's mode is left as it is."""
    logits, _ = model(rows[:, :-1])  # (B, T-1, V)
    losses = F.cross_entropy(logits.flatten(0, 1), rows[:, 1:].flatten(), reduction="none")
    first = torch.full((rows.shape[0], 1), float("nan"), device=rows.device)
    return torch.cat([first, losses.view(rows.shape[0], -1)], dim=1)
