"""Chapter 24's model kind ``hybrid``: a decoder whose layers are Gated DeltaNet (``L``) or gated
attention (``A``), in the pattern of ``HybridConfig.layers`` ("LLLA": three DeltaNet layers, then
one attention layer, repeated: Qwen3.5's and Qwen3-Next's 3:1). "A" alone is an all-attention
decoder, "L" alone an all-DeltaNet one. Shapes: idx (B, T) token ids, logits (B, T, V).

Generation keeps, per DeltaNet layer, a state of fixed size (``rules.state_bytes``) and, per
attention layer, a KV cache that grows a position a token (``HybridGPT.generate``).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..config import Rule, check_fields, config_from_dict
from ..registry import register_model
from . import flops
from .layers import GatedAttention, GatedDeltaNet, SwiGLU, ZeroCenteredRMSNorm

HYBRID_CONFIG_RULES = {
    "vocab_size": Rule(int, 1), "block_size": Rule(int, 1), "n_layer": Rule(int, 1),
    "n_embd": Rule(int, 1), "n_head": Rule(int, 1), "n_kv_head": Rule(int, 1),
    "head_dim": Rule(int, 2), "layers": Rule(str), "linear_k_heads": Rule(int, 1),
    "linear_v_heads": Rule(int, 1), "linear_k_dim": Rule(int, 1), "linear_v_dim": Rule(int, 1),
    "conv_kernel": Rule(int, 2, 16), "chunk_size": Rule(int, 1), "ffn_hidden": Rule(int, 1),
    "rope_theta": Rule(float, 0.0, None, "(]"), "rotary_fraction": Rule(float, 0.0, 1.0, "(]"),
    "norm_eps": Rule(float, 0.0, None, "(]"), "tie_weights": Rule(bool),
}


@dataclass
class HybridConfig:
    """A hybrid decoder's settings. Unset sizes (None) follow n_embd and n_head: head_dim =
    n_embd / n_head, as many DeltaNet heads of that size as attention heads, ffn_hidden = 3 n_embd.
    ``layers`` is cycled over the n_layer layers; Hugging Face's names are in ``hf_qwen35``."""
    vocab_size: int = 65
    block_size: int = 256
    n_layer: int = 4
    n_embd: int = 128
    n_head: int = 4
    layers: str = "LLLA"  # L: Gated DeltaNet, A: gated attention; cycled over the layers
    n_kv_head: int | None = None  # attention's key/value heads (None: n_head)
    head_dim: int | None = None  # attention's head size (None: n_embd / n_head)
    linear_k_heads: int | None = None  # DeltaNet's query/key heads (None: n_head)
    linear_v_heads: int | None = None  # DeltaNet's value heads (None: linear_k_heads)
    linear_k_dim: int | None = None  # DeltaNet's key size per head (None: head size)
    linear_v_dim: int | None = None  # DeltaNet's value size per head (None: head size)
    conv_kernel: int = 4  # the short causal convolution over q, k, v
    chunk_size: int = 64  # tokens per chunk of the chunked form (a speed setting, not the maths)
    ffn_hidden: int | None = None  # SwiGLU's hidden size (None: 3 n_embd)
    rope_theta: float = 10000.0
    rotary_fraction: float = 0.25  # the share of each attention head's channels that RoPE turns
    norm_eps: float = 1e-6
    tie_weights: bool = True

    def __post_init__(self):
        check_fields(self, HYBRID_CONFIG_RULES)
        if not self.layers or set(self.layers) - {"L", "A"}:
            raise ValueError("layers must be letters L (Gated DeltaNet) and A (attention), "
                             "e.g. 'LLLA' for 3:1, 'L' or 'A' for one kind only; "
                             f"got {self.layers!r}")
        if self.head_dim is None and self.n_embd % self.n_head:
            raise ValueError(f"n_embd ({self.n_embd}) must be divisible by n_head ({self.n_head}), "
                             "or set head_dim")
        if self.n_head % self.kv_heads:
            raise ValueError(f"n_kv_head ({self.n_kv_head}) must divide n_head ({self.n_head})")
        if self.linear_v_heads is not None and self.linear_v_heads % self.linear_k_heads_:
            raise ValueError(f"linear_k_heads ({self.linear_k_heads_}) must divide linear_v_heads "
                             f"({self.linear_v_heads}): each key head serves whole value heads")

    @property
    def head_size(self) -> int:
        return self.head_dim or self.n_embd // self.n_head

    @property
    def kv_heads(self) -> int:
        return self.n_kv_head or self.n_head

    @property
    def linear_k_heads_(self) -> int:
        return self.linear_k_heads or self.n_head

    @property
    def layer_kinds(self) -> str:
        """One letter per layer: ``layers`` cycled to n_layer letters."""
        return (self.layers * self.n_layer)[: self.n_layer]

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "HybridConfig":
        return config_from_dict(cls, d)


class _Sizes:
    """The config with every None size resolved, as the layers read it."""

    def __init__(self, c: HybridConfig):
        self.n_embd, self.n_head, self.kv_heads, self.head_size = (c.n_embd, c.n_head, c.kv_heads,
                                                                   c.head_size)
        self.linear_k_heads = c.linear_k_heads_
        self.linear_v_heads = c.linear_v_heads or self.linear_k_heads
        self.linear_k_dim = c.linear_k_dim or c.head_size
        self.linear_v_dim = c.linear_v_dim or c.head_size
        self.conv_kernel, self.chunk_size, self.norm_eps = c.conv_kernel, c.chunk_size, c.norm_eps


class HybridBlock(nn.Module):
    """Pre-norm block: x + mixer(norm(x)), then x + SwiGLU(norm(x)); the mixer is a Gated DeltaNet
    ("L") or gated attention ("A")."""

    def __init__(self, config: HybridConfig, kind: str):
        super().__init__()
        sizes = _Sizes(config)
        self.kind = kind
        self.mixer = GatedDeltaNet(sizes) if kind == "L" else GatedAttention(sizes)
        self.input_layernorm = ZeroCenteredRMSNorm(config.n_embd, config.norm_eps)
        self.post_attention_layernorm = ZeroCenteredRMSNorm(config.n_embd, config.norm_eps)
        self.mlp = SwiGLU(config.n_embd, config.ffn_hidden or 3 * config.n_embd)

    def forward(self, x, cos, sin, memory=None):
        """x (B, T, C) -> (x, this layer's new state or cache)."""
        h = self.input_layernorm(x)
        h, memory = self.mixer(h, memory) if self.kind == "L" else self.mixer(h, cos, sin, memory)
        x = x + h
        return x + self.mlp(self.post_attention_layernorm(x)), memory


@register_model("hybrid", HybridConfig)
class HybridGPT(nn.Module):
    """Embedding, the blocks, a final norm and the head (tied to the embedding if tie_weights)."""

    def __init__(self, config: HybridConfig):
        super().__init__()
        self.config = config
        self.embed_tokens = nn.Embedding(config.vocab_size, config.n_embd)
        self.blocks = nn.ModuleList(HybridBlock(config, kind) for kind in config.layer_kinds)
        self.norm = ZeroCenteredRMSNorm(config.n_embd, config.norm_eps)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.apply(self._init_weights)
        if config.tie_weights:
            self.lm_head.weight = self.embed_tokens.weight

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None,
                memory: list | None = None, start: int = 0):
        """idx (B, T) -> (logits (B, T, V), loss or None). With ``memory`` (a list with one entry
        per layer, None at first), each layer's state or cache is read from it and replaced in
        place; ``start`` is the position of idx's first token (for RoPE)."""
        T = idx.shape[1]
        cos, sin = self.rope(torch.arange(start, start + T, device=idx.device))
        x = self.embed_tokens(idx)
        for i, block in enumerate(self.blocks):
            x, new = block(x, cos, sin, None if memory is None else memory[i])
            if memory is not None:
                memory[i] = new
        logits = self.lm_head(self.norm(x))
        loss = None if targets is None else F.cross_entropy(logits.flatten(0, 1), targets.flatten())
        return logits, loss

    def rope(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin (T, r/2) for attention's partial RoPE: the first r = hs x rotary_fraction
        channels of a head turn (Hugging Face's rounding: int(), then one frequency per 2
        channels, so an odd r turns r + 1), the others carry no position."""
        c = self.config
        dim = int(c.head_size * c.rotary_fraction)
        freqs = 1.0 / (c.rope_theta ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
        angles = positions.float()[:, None] * freqs.to(positions.device)  # (T, r/2)
        return angles.cos(), angles.sin()

    @torch.no_grad()
    def generate(self, idx: torch.Tensor, max_new_tokens: int,
                 memory: list | None = None) -> torch.Tensor:
        """Greedy tokens after idx (B, T), reading the prompt once and then one token a step: the
        DeltaNet layers carry their fixed-size state, the attention layers their KV cache.
        Returns (B, T + max_new_tokens). Pass ``memory=[]`` to see the states afterwards."""
        memory = [None] * len(self.blocks) if memory is None else memory
        memory[:] = [None] * len(self.blocks)
        logits, _ = self(idx, memory=memory)
        for _ in range(max_new_tokens):
            nxt = logits[:, -1:].argmax(-1)  # (B, 1)
            logits, _ = self(nxt, memory=memory, start=idx.shape[1])
            idx = torch.cat([idx, nxt], dim=1)
        return idx

    def flops_per_token(self, context: int | None = None) -> int:
        """Training FLOPs per token (``flops``' convention): 6 per weight of the projections, the
        convolutions and the head, plus 3 x every other forward operation, each layer's mixer
        (DeltaNet's chunked rule, or attention at an average context T/2; ``context`` T: the block
        size by default), norms, gates and the loss. ``flops_terms`` gives the parts by name."""
        terms = self.flops_terms(context)
        return round(terms.pop("6 x weights") + 3 * sum(terms.values()))

    def flops_terms(self, context: int | None = None) -> dict[str, float]:
        """The forward FLOPs per token by part, summed over the layers, and "6 x weights"."""
        c, T = self.config, context or self.config.block_size
        weights = sum(p.numel() for n, p in self.named_parameters()
                      if p.dim() >= 2 and "embed" not in n)
        if c.tie_weights:
            weights += self.lm_head.weight.numel()
        sizes, out = _Sizes(c), {"6 x weights": 6 * weights}
        for kind in c.layer_kinds:
            mixer = flops.deltanet_terms(sizes, T) if kind == "L" else flops.attention_terms(c, T)
            prefix = "DeltaNet: " if kind == "L" else "attention: "
            for name, value in mixer.items():
                out[prefix + name] = out.get(prefix + name, 0) + value
            for name, value in flops.block_terms(c, c.ffn_hidden or 3 * c.n_embd).items():
                out["block: " + name] = out.get("block: " + name, 0) + value
        return out | {"head: " + n: v for n, v in flops.head_terms(c).items()}
