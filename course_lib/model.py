"""The GPT: config, feed-forward, Transformer block, the full model, and how big it is
(chapters 5-6).

Shapes: B batch, T time, C = n_embd channels, V vocabulary size.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields

import torch
import torch.nn as nn
import torch.nn.functional as F

from .attention import CausalSelfAttention, KVCache


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
    activation: str = "gelu"  # "gelu" or "relu"

    def __post_init__(self):
        for name in ("vocab_size", "block_size", "n_layer", "n_head", "n_embd"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"GPTConfig.{name} must be a positive integer, got {value!r}")
        if self.n_embd % self.n_head != 0:
            divisors = [h for h in range(1, self.n_embd + 1) if self.n_embd % h == 0]
            raise ValueError(
                f"n_embd ({self.n_embd}) must be divisible by n_head ({self.n_head}): each head gets "
                f"n_embd / n_head channels. Change n_head to one of {divisors[:12]} or change n_embd."
            )
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")
        if self.norm_position not in ("pre", "post"):
            raise ValueError(f"norm_position must be 'pre' or 'post', got {self.norm_position!r}")
        if self.activation not in ("gelu", "relu"):
            raise ValueError(f"activation must be 'gelu' or 'relu', got {self.activation!r}")

    @property
    def head_size(self) -> int:
        return self.n_embd // self.n_head

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "GPTConfig":
        known = {f.name for f in fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise ValueError(f"unknown GPTConfig fields {sorted(unknown)}")
        return cls(**d)


class FeedForward(nn.Module):
    """Position-wise MLP: C -> 4C -> C, applied to every position independently."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd, bias=config.bias)
        self.act = nn.GELU() if config.activation == "gelu" else nn.ReLU()
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
        self.attn = CausalSelfAttention(config.n_embd, config.n_head, config.block_size, config.dropout, config.bias)
        self.ln_2 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.mlp = FeedForward(config)

    def forward(self, x: torch.Tensor, cache=None) -> torch.Tensor:
        if self.pre_norm:  # GPT-2: x + f(LN(x)); the residual path stays a clean highway
            x = x + self.attn(self.ln_1(x), cache)
            x = x + self.mlp(self.ln_2(x))
        else:  # the 2017 paper: LN(x + f(x)), "add & norm"
            x = self.ln_1(x + self.attn(x, cache))
            x = self.ln_2(x + self.mlp(x))
        return x


class GPT(nn.Module):
    """A decoder-only Transformer language model.

    ``forward(idx, targets=None)`` takes token ids ``idx`` (B, T) and returns
    ``(logits, loss)``: logits (B, T, V), and the mean cross-entropy against
    ``targets`` (B, T) when they are given (positions whose target equals
    ``ignore_index`` are left out), else ``None``.
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

    def num_parameters(self) -> int:
        """Parameters actually held (a tied matrix counts once)."""
        return sum(p.numel() for p in self.parameters())

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None, cache: KVCache | None = None,
                ignore_index: int = -100):
        B, T = idx.shape
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
        pos = torch.arange(past, past + T, device=idx.device)  # (T,)
        x = self.drop(self.wte(idx) + self.wpe(pos))  # (B, T, C) + (T, C) -> (B, T, C)
        for i, block in enumerate(self.blocks):
            x = block(x, cache.layers[i] if cache is not None else None)
        x = self.ln_f(x)
        logits = self.lm_head(x)  # (B, T, V)
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(B * T, -1), targets.reshape(B * T), ignore_index=ignore_index)
        return logits, loss


# --- how big is it --------------------------------------------------------------------------


def parameter_breakdown(config: GPTConfig) -> dict[str, int]:
    """Parameters of each part of a :class:`GPT`, from the config alone.

    Per block: attention 4C^2 (q, k, v and output projections), MLP 8C^2
    (C x 4C and 4C x C), so 12C^2, plus 3C + C + 4C + C biases when ``bias``;
    two LayerNorms of C gains (+ C biases). Embeddings: V*C tokens and T*C
    positions. The LM head adds V*C unless it is tied to the token embedding.
    """
    V, T, C, L = config.vocab_size, config.block_size, config.n_embd, config.n_layer
    b = 1 if config.bias else 0
    norm = C + b * C  # a LayerNorm: gain (+ bias)
    attention = (3 * C * C + b * 3 * C) + (C * C + b * C)
    mlp = (4 * C * C + b * 4 * C) + (4 * C * C + b * C)
    final_norm = norm if config.norm_position == "pre" else 0
    return {
        "token embedding": V * C,
        "position embedding": T * C,
        "attention": L * attention,
        "MLP": L * mlp,
        "LayerNorms": L * 2 * norm + final_norm,
        "LM head": 0 if config.tie_weights else V * C,
    }


def count_parameters(config: GPTConfig) -> int:
    """The exact parameter count of ``GPT(config)``, equal to ``sum(p.numel())``."""
    return sum(parameter_breakdown(config).values())


def flops_per_token(config: GPTConfig, training: bool = True) -> int:
    """Approximate floating-point operations per token at full context.

    A matmul with N weights costs 2N FLOPs per token forward (a multiply and an
    add); the attention scores and the weighted sum of values add 2 * 2 * T * C
    per layer. Backward costs about twice forward, so training is about 3x:
    6N + 12 L T C (the estimate of the PaLM paper, used by nanoGPT). N leaves out
    the position embedding, which is a lookup, not a matmul; the token
    embedding counts once, as the LM head's matmul.
    """
    N = count_parameters(config) - config.block_size * config.n_embd
    if not config.tie_weights:
        N -= config.vocab_size * config.n_embd  # the input embedding is a lookup too
    forward = 2 * N + 4 * config.n_layer * config.block_size * config.n_embd
    return 3 * forward if training else forward


def training_memory_bytes(config: GPTConfig) -> dict[str, int]:
    """fp32 memory for weights, gradients and AdamW's two moments (activations not included)."""
    n = count_parameters(config)
    return {"weights": 4 * n, "gradients": 4 * n, "AdamW state": 8 * n, "total": 16 * n}


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


# --- measuring a model (chapters 5-6) ---------------------------------------------------------


def parameter_gradient_norms(modules) -> list[float]:
    """After a backward pass: the L2 norm of the gradients of all parameters of each module in
    ``modules`` (e.g. the blocks of a stack, input side first), one float per module.

    Parameters without a gradient count as zero. Squares are summed in float64, so gradients as
    small as 1e-30 (whose float32 squares would underflow) are still measured.
    """
    norms = []
    for module in modules:
        total = 0.0
        for p in module.parameters():
            if p.grad is not None:
                total += p.grad.detach().double().pow(2).sum().item()
        norms.append(math.sqrt(total))
    return norms


def format_count(n: int | float) -> str:
    """A parameter (or FLOP, or byte) count in short form: 804096 -> '804.1K', 124439808 ->
    '124.4M', 174604259328 -> '174.6B'; from 1e18 on, scientific notation ('3.14e+23')."""
    if abs(n) >= 1e18:
        return f"{n:.2e}"
    for value, suffix in ((1e15, "P"), (1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if abs(n) >= value:
            return f"{n / value:.1f}{suffix}"
    return f"{n:g}" if isinstance(n, float) else str(n)


def format_table(header: list[str], rows: list[list], markdown: bool = False) -> str:
    """Rows of values as an aligned plain-text table (first column left-aligned, the others
    right-aligned; ints get thousands separators), or as a Markdown table."""
    def cell(v):
        return f"{v:,}" if isinstance(v, int) and not isinstance(v, bool) else str(v)

    table = [[str(h) for h in header]] + [[cell(v) for v in row] for row in rows]
    if any(len(row) != len(header) for row in table):
        raise ValueError(f"every row needs {len(header)} values, one per column of {header}")
    if markdown:
        lines = ["| " + " | ".join(table[0]) + " |", "|" + "|".join([":---"] + ["---:"] * (len(header) - 1)) + "|"]
        lines += ["| " + " | ".join(row) + " |" for row in table[1:]]
        return "\n".join(lines)
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    lines = []
    for k, row in enumerate(table):
        lines.append("  ".join(v.ljust(w) if i == 0 else v.rjust(w) for i, (v, w) in enumerate(zip(row, widths))))
        if k == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(line.rstrip() for line in lines)


def parameter_table(configs: dict[str, GPTConfig], markdown: bool = False) -> str:
    """One row per named config: layers L, heads, C, T, V, the 12·L·C² weights of the blocks'
    matrices, the embeddings (V·C + T·C), the exact total (:func:`count_parameters`) and that
    total in short form. Computed from the configs alone: nothing is instantiated."""
    header = ["model", "L", "heads", "C", "T", "V", "12·L·C²", "embeddings", "total", "≈"]
    rows = []
    for name, c in configs.items():
        total = count_parameters(c)
        parts = parameter_breakdown(c)
        embeddings = parts["token embedding"] + parts["position embedding"]
        rows.append([name, c.n_layer, c.n_head, c.n_embd, c.block_size, c.vocab_size,
                     12 * c.n_layer * c.n_embd**2, embeddings, total, format_count(total)])
    return format_table(header, rows, markdown)
