"""The GPT: config, feed-forward, Transformer block and the full model (chapters 5-6).
How big it is (parameters, FLOPs, memory) is worked out in :mod:`course_lib.sizing`.

Shapes: B batch, T time, C = n_embd channels, V vocabulary size.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from .attention import CausalSelfAttention, KVCache, causal_padding_mask, check_attention_mask
from .checkpoint import register_model
from .utils import IGNORE_INDEX, Rule, check_fields, config_from_dict


# GPT-2 computes GELU with a tanh approximation; its logits match ours only with the same one.
ACTIVATIONS = {"gelu": lambda: nn.GELU(), "relu": lambda: nn.ReLU(), "gelu_tanh": lambda: nn.GELU(approximate="tanh")}


# What each GPTConfig field may hold (checked in __post_init__): a new field adds one row.
GPT_CONFIG_RULES = {
    "vocab_size": Rule(int, 1),
    "block_size": Rule(int, 1),
    "n_layer": Rule(int, 1),
    "n_head": Rule(int, 1),
    "n_embd": Rule(int, 1),
    "dropout": Rule(float, 0.0, 1.0, "[)"),
    "bias": Rule(bool),
    "tie_weights": Rule(bool),
    "norm_position": Rule(str, choices=("pre", "post")),
    "activation": Rule(str, choices=tuple(ACTIVATIONS)),
}


@dataclass
class GPTConfig:
    vocab_size: int = 65
    block_size: int = 64  # the longest context the model sees
    n_layer: int = 4
    n_head: int = 4
    n_embd: int = 128
    dropout: float = 0.0
    bias: bool = False  # biases in Linear layers and LayerNorms (GPT-2: True)
    tie_weights: bool = True  # share the token embedding with the LM head
    norm_position: str = "pre"  # "pre": LayerNorm before each sub-layer (GPT-2); "post": after the residual add (2017 paper)
    activation: str = "gelu"  # "gelu", "relu" or "gelu_tanh" (GELU's tanh approximation, as GPT-2)

    def __post_init__(self):
        check_fields(self, GPT_CONFIG_RULES)
        if self.n_embd % self.n_head != 0:
            divisors = [h for h in range(1, self.n_embd + 1) if self.n_embd % h == 0]
            raise ValueError(
                f"n_embd ({self.n_embd}) must be divisible by n_head ({self.n_head}): each head gets "
                f"n_embd / n_head channels. Change n_head to one of {divisors[:12]} or change n_embd."
            )

    @property
    def head_size(self) -> int:
        return self.n_embd // self.n_head

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "GPTConfig":
        return config_from_dict(cls, d)


class FeedForward(nn.Module):
    """Position-wise MLP: C -> 4C -> C, applied to every position independently."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd, bias=config.bias)
        self.act = ACTIVATIONS[config.activation]()
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd, bias=config.bias)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, T, C) -> (B, T, C)
        return self.dropout(self.c_proj(self.act(self.c_fc(x))))


class Block(nn.Module):
    """A Transformer block: communication (attention) then computation (MLP), each wrapped
    in a residual connection and a LayerNorm. (B, T, C) -> (B, T, C)."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        self.pre_norm = config.norm_position == "pre"
        self.ln_1 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.attn = CausalSelfAttention.from_config(config)
        self.ln_2 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.mlp = FeedForward(config)

    def forward(self, x: torch.Tensor, cache=None, mask: torch.Tensor | None = None) -> torch.Tensor:
        if self.pre_norm:  # GPT-2: x + f(LN(x)); the residual path stays a clean highway
            x = x + self.attn(self.ln_1(x), cache, mask)
            x = x + self.mlp(self.ln_2(x))
        else:  # the 2017 paper: LN(x + f(x)), "add & norm"
            x = self.ln_1(x + self.attn(x, cache, mask))
            x = self.ln_2(x + self.mlp(x))
        return x


@register_model("gpt", GPTConfig)
class GPT(nn.Module):
    """A decoder-only Transformer language model.

    ``forward(idx, targets=None)`` takes token ids ``idx`` (B, T) and returns
    ``(logits, loss)``: logits (B, T, V), and the mean cross-entropy against
    ``targets`` (B, T) when they are given (positions whose target equals
    ``ignore_index`` are left out), else ``None``.

    Batches of sequences of different lengths (chapter 10): ``attention_mask`` (B, T) is True
    on real tokens and False on pads (with a KV cache it covers the cached positions too:
    (B, past + T)); no position attends to a pad. ``position_ids`` (B, T) or (T,) give each
    token's position; by default they are 0, 1, 2, ... counted over the real tokens of each
    row when a mask is given (so a left-padded row gets the positions it would have alone),
    else ``past, past + 1, ...``. Padded targets are left out of the loss by setting them to
    ``ignore_index`` (the mask does not do it). A (B, T, T) ``attention_mask`` is a full
    per-sequence mask, e.g. the block-diagonal one of packed sequences; the causal part is
    always added.
    """

    def __init__(self, config: GPTConfig):
        super().__init__()
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)  # token embedding
        self.wpe = nn.Embedding(config.block_size, config.n_embd)  # learned position embedding
        self.drop = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layer))
        # Pre-LN needs a final LayerNorm (the residual stream is never normalised otherwise);
        # post-LN blocks already end in one.
        self.ln_f = nn.LayerNorm(config.n_embd, bias=config.bias) if config.norm_position == "pre" else nn.Identity()
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        if config.tie_weights:
            self.lm_head.weight = self.wte.weight  # one (V, C) matrix both reads and writes tokens
        self.apply(self._init_weights)
        # GPT-2: scale the projections that write into the residual stream by 1/sqrt(2 * n_layer).
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layer))

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    @classmethod
    def from_pretrained(cls, model_or_name, dropout: float = 0.0) -> "GPT":
        """Our GPT holding OpenAI's GPT-2 weights (chapter 13): ``model_or_name`` is a Hugging Face
        ``GPT2LMHeadModel`` or one of ``gpt2``, ``gpt2-medium``, ``gpt2-large``, ``gpt2-xl``
        (downloaded with ``transformers``). The mapping lives in :mod:`course_lib.gpt2`."""
        from .gpt2 import from_pretrained
        return from_pretrained(model_or_name, dropout=dropout)

    def num_parameters(self) -> int:
        """Parameters actually held (a tied matrix counts once)."""
        return sum(p.numel() for p in self.parameters())

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None, cache: KVCache | None = None,
                ignore_index: int = IGNORE_INDEX, attention_mask: torch.Tensor | None = None,
                position_ids: torch.Tensor | None = None):
        if idx.dim() != 2:
            raise ValueError(f"idx must be a (B, T) tensor of token ids, got shape {tuple(idx.shape)}: add the batch "
                             "dimension with idx[None] (or idx.unsqueeze(0)) for a single sequence")
        B, T = idx.shape
        if targets is not None and tuple(targets.shape) != (B, T):
            raise ValueError(f"targets must have the shape of idx ({B}, {T}), got {tuple(targets.shape)}: "
                             "targets[b, t] is the token that follows idx[b, :t+1]")
        past = cache.length if cache is not None else 0
        if past + T > self.config.block_size:
            raise ValueError(
                f"sequence length {past + T} exceeds block_size {self.config.block_size}: the model has "
                f"position embeddings for {self.config.block_size} positions only. Crop the context to its "
                f"last {self.config.block_size} tokens (idx[:, -block_size:]) or train with a larger block_size."
            )
        if idx.numel() and (idx.min() < 0 or idx.max() >= self.config.vocab_size):
            raise ValueError(
                f"token ids must lie in [0, {self.config.vocab_size - 1}] (vocab_size {self.config.vocab_size}), "
                f"got ids from {int(idx.min())} to {int(idx.max())}: was the text encoded with another tokenizer?"
            )
        mask = None
        if attention_mask is not None:
            attention_mask = check_attention_mask(attention_mask, B, past + T, T)
            mask = causal_padding_mask(attention_mask, T)  # (B, 1, T, past + T): causal AND real keys
        if position_ids is None:
            if attention_mask is not None and attention_mask.dim() == 2:
                # the i-th real token of a row is at position i, however many pads come before it
                position_ids = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)[:, past:]  # (B, T)
            else:
                position_ids = torch.arange(past, past + T, device=idx.device)  # (T,)
        else:
            if tuple(position_ids.shape) not in ((T,), (B, T)):
                raise ValueError(f"position_ids has shape {tuple(position_ids.shape)}, expected ({T},) or ({B}, {T})")
            if position_ids.numel() and (position_ids.min() < 0 or position_ids.max() >= self.config.block_size):
                raise ValueError(f"position_ids must lie in [0, {self.config.block_size - 1}] (block_size "
                                 f"{self.config.block_size}), got {int(position_ids.min())} to {int(position_ids.max())}")
        pos = position_ids
        x = self.drop(self.wte(idx) + self.wpe(pos))  # (B, T, C) + (T, C) or (B, T, C) -> (B, T, C)
        for i, block in enumerate(self.blocks):
            x = block(x, cache.layers[i] if cache is not None else None, mask)
        x = self.ln_f(x)
        logits = self.lm_head(x)  # (B, T, V)
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(B * T, -1), targets.reshape(B * T), ignore_index=ignore_index)
        return logits, loss


def sinusoidal_position_encoding(max_len: int, n_embd: int) -> torch.Tensor:
    """(max_len, C) fixed encodings of the 2017 paper:
    PE[pos, 2i] = sin(pos / 10000^(2i/C)), PE[pos, 2i+1] = cos(pos / 10000^(2i/C))."""
    if n_embd % 2:
        raise ValueError(f"n_embd must be even for sin/cos pairs, got {n_embd}")
    pos = torch.arange(max_len, dtype=torch.float32)[:, None]  # (max_len, 1)
    freq = torch.exp(-math.log(10000.0) * torch.arange(0, n_embd, 2, dtype=torch.float32) / n_embd)  # (C/2,)
    pe = torch.zeros(max_len, n_embd)
    pe[:, 0::2] = torch.sin(pos * freq)
    pe[:, 1::2] = torch.cos(pos * freq)
    return pe
