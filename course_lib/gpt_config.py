"""The GPT's config (chapters 5-6): :class:`GPTConfig`, its fields and what each may hold
(``GPT_CONFIG_RULES``, checked by :mod:`course_lib.config`'s rules), the options that act only
with another one set (``NEEDS_ANOTHER``), the checks across fields, and the sizes it implies
(head size, key/value heads, the MLP's hidden size). The model built from it is
:mod:`course_lib.model`'s, which re-exports these names (chapters import ``GPTConfig`` there).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, fields

import torch.nn as nn

from .config import Rule, check_fields, config_from_dict
from .moe import BALANCINGS, check_moe_options
from .rope import ROPE_SCALINGS


# GPT-2 computes GELU with a tanh approximation; its logits match ours only with the same one.
ACTIVATIONS = {"gelu": lambda: nn.GELU(), "relu": lambda: nn.ReLU(),
               "gelu_tanh": lambda: nn.GELU(approximate="tanh")}
NORMS = ("layernorm", "rmsnorm")
MLPS = ("standard", "swiglu")  # C -> hidden -> activation -> C, or the gated SwiGLU of chapter 14
# SwiGLU's default hidden size: 8/3 C (three matrices of C x 8C/3 hold as many weights as two of
# C x 4C), rounded up to a multiple of 32 for kernel-friendly matmuls (Llama: 256 at C = 4096).
# C = 128 -> 352.
SWIGLU_MULTIPLE = 32


# Fields the repr shows only when set (the options of chapter 14's later sections; see
# GPTConfig.__repr__).
LATER_FIELDS = ("head_dim", "qk_norm", "rope_scaling", "rope_factor", "rope_low_freq_factor",
                "rope_high_freq_factor", "rope_original_context", "sliding_window",  # chapter 14
                "moe_experts", "moe_top_k", "moe_norm_topk", "moe_shared_expert", "moe_aux_coef",
                "moe_balancing", "moe_bias_rate", "mtp_heads", "mtp_weight")  # chapters 20 and 22


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
    "norm": Rule(str, choices=NORMS),
    "norm_eps": Rule(float, 0.0, None, "(]"),
    # or None: learned absolute positions. Below 1 the rotation frequencies theta^(-2i/hs) grow past
    # 1 and, for a tiny theta, overflow to inf (NaN losses): real models use 1e4 to 1e6.
    "rope_theta": Rule(float, 1.0, None, "[]"),
    "mlp": Rule(str, choices=MLPS),
    "ffn_hidden": Rule(int, 1),  # or None: the default hidden size
    "n_kv_head": Rule(int, 1),  # or None: n_head
    # the decoders of 2025-26 (chapter 14): QK-norm, a head size of its own, long-context RoPE,
    # a window
    "head_dim": Rule(int, 1),  # or None: n_embd / n_head
    "qk_norm": Rule(bool),
    "rope_scaling": Rule(str, choices=ROPE_SCALINGS),  # or None: plain RoPE
    "rope_factor": Rule(float, 1.0),
    "rope_low_freq_factor": Rule(float, 0.0, None, "(]"),
    "rope_high_freq_factor": Rule(float, 0.0, None, "(]"),
    "rope_original_context": Rule(int, 1),  # or None: block_size
    "sliding_window": Rule(int, 1),  # or None: every query sees the whole past
    # chapter 20: a mixture of experts. moe_experts or None: a dense MLP; real models have a few
    # hundred at most
    "moe_experts": Rule(int, 1, 1024),
    "moe_top_k": Rule(int, 1),
    "moe_norm_topk": Rule(bool),
    "moe_shared_expert": Rule(bool),
    # Switch: 0.01; far beyond, the loss overflows (review 2026-11-28 M2)
    "moe_aux_coef": Rule(float, 0.0, 10.0),
    "moe_balancing": Rule(str, choices=BALANCINGS), "moe_bias_rate": Rule(float, 0.0, None, "(]"),
    # chapter 22: multi-token prediction
    "mtp_heads": Rule(int, 1, 16), "mtp_weight": Rule(float, 0.0, 10.0),
}


# Fields that act only with another one set (an example of it): without it they would be silently
# ignored. The other checks of the MoE options are moe.check_moe_options'.
NEEDS_ANOTHER = {**dict.fromkeys(("moe_top_k", "moe_norm_topk", "moe_shared_expert", "moe_aux_coef",
                                  "moe_balancing", "moe_bias_rate"), "moe_experts=8"),
                 **dict.fromkeys(("rope_factor", "rope_low_freq_factor", "rope_high_freq_factor",
                                  "rope_original_context"), "rope_scaling='llama3'"),
                 "mtp_weight": "mtp_heads=3"}


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
    # "pre": LayerNorm before each sub-layer (GPT-2); "post": after the residual add (2017 paper)
    norm_position: str = "pre"
    activation: str = "gelu"  # "gelu", "relu" or "gelu_tanh" (GELU's tanh approximation, as GPT-2)

    # Chapter 14 (Llama-style decoders); the defaults are GPT-2's block.
    norm: str = "layernorm"  # "layernorm" or "rmsnorm" (RMSNorm has a gain only, never a bias)
    norm_eps: float = 1e-5  # added to the variance in every norm (Llama: 1e-5 or 1e-6)
    # None: learned absolute positions (GPT-2); a base such as 10000: RoPE
    rope_theta: float | None = None
    # "standard" (C -> 4C -> activation -> C) or "swiglu" (SiLU-gated, see SwiGLU)
    mlp: str = "standard"
    # the MLP's hidden size; None: 4C, or 8/3 C rounded up to 32 for SwiGLU
    ffn_hidden: int | None = None
    # key/value heads; None: n_head (multi-head), 1: multi-query attention
    n_kv_head: int | None = None

    # The decoders of 2025-26 (chapter 14); the defaults change nothing.
    head_dim: int | None = None  # channels per head; None: n_embd / n_head (Qwen3 sets its own)
    # an RMSNorm on each head's queries and keys before RoPE (Qwen3, OLMo 2, Gemma 3)
    qk_norm: bool = False
    # None: plain RoPE; "linear": position interpolation; "llama3" (Llama 3.1)
    rope_scaling: str | None = None
    rope_factor: float = 1.0  # how many times the trained context the scaled RoPE stretches to
    # llama3: pairs slower than rope_original_context / this are divided
    rope_low_freq_factor: float = 1.0
    # llama3: pairs faster than rope_original_context / this are kept
    rope_high_freq_factor: float = 4.0
    # llama3: the context the model was trained at; None: block_size
    rope_original_context: int | None = None
    # each query sees itself and the window - 1 keys before it (Mistral)
    sliding_window: int | None = None

    # Chapter 20 (mixture of experts, course_lib.moe); None: every block has one dense MLP.
    moe_experts: int | None = None  # E experts per block, each the MLP above (mlp, ffn_hidden)
    moe_top_k: int = 2  # experts per token (Mixtral 2, Qwen3-MoE 8, Switch 1)
    # the k weights divided by their sum (Mixtral; Qwen3-MoE's norm_topk_prob)
    moe_norm_topk: bool = True
    moe_shared_expert: bool = False  # one more expert that every token goes through (DeepSeek-MoE)
    # the load-balancing loss's weight in the training loss (Switch: 0.01)
    moe_aux_coef: float = 0.01
    # "pooled" (Hugging Face), "per-layer" (Switch) or "bias" (no aux loss)
    moe_balancing: str = "pooled"
    # "bias": the selection bias's step per training forward (DeepSeek-V3)
    moe_bias_rate: float = 1e-3
    # chapter 22: D heads, head j guessing the token j + 1 ahead (course_lib.mtp)
    mtp_heads: int | None = None
    # the training loss adds mtp_weight x the heads' mean cross-entropy (DeepSeek-V3: 0.3)
    mtp_weight: float = 0.3

    def __post_init__(self):
        check_fields(self, GPT_CONFIG_RULES)
        if self.head_dim is None and self.n_embd % self.n_head != 0:
            divisors = [h for h in range(1, self.n_embd + 1) if self.n_embd % h == 0]
            raise ValueError(
                f"n_embd ({self.n_embd}) must be divisible by n_head ({self.n_head}): each head "
                f"gets n_embd / n_head channels. Change n_head to one of {divisors[:12]} or "
                "change n_embd."
            )
        if self.rope_theta is not None and self.head_size % 2:
            raise ValueError(f"RoPE rotates pairs of channels: the head size {self.head_size} "
                             "(head_dim, or n_embd / n_head) must be even; change head_dim, n_embd "
                             "or n_head")
        if self.rope_scaling is not None and self.rope_theta is None:
            raise ValueError(f"rope_scaling={self.rope_scaling!r} scales RoPE's frequencies: set "
                             "rope_theta (e.g. 10000) too, or rope_scaling=None")
        if (self.rope_scaling == "llama3"
                and not self.rope_high_freq_factor > self.rope_low_freq_factor):
            raise ValueError("llama3 RoPE scaling needs rope_high_freq_factor "
                             f"({self.rope_high_freq_factor}) > rope_low_freq_factor "
                             f"({self.rope_low_freq_factor})")
        if self.n_kv_head is not None and self.n_head % self.n_kv_head:
            divisors = [h for h in range(1, self.n_head + 1) if self.n_head % h == 0]
            raise ValueError(f"n_kv_head ({self.n_kv_head!r}) must divide n_head ({self.n_head}): "
                             "each key/value head serves n_head / n_kv_head query heads. Choose "
                             f"one of {divisors}, or None.")
        for name, example in NEEDS_ANOTHER.items():
            needed, default = example.split("=")[0], GPTConfig.__dataclass_fields__[name].default
            if getattr(self, needed) is None and getattr(self, name) != default:
                raise ValueError(f"{name}={getattr(self, name)!r} takes effect only with {needed}: "
                                 f"set it too (e.g. {example}), or leave {name} at its default "
                                 f"{default!r}")
        check_moe_options(self)

    @property
    def head_size(self) -> int:
        """Channels per head: ``head_dim``, or n_embd / n_head when it is None."""
        return self.n_embd // self.n_head if self.head_dim is None else self.head_dim

    def rope_options(self) -> dict:
        """The keyword arguments of :func:`course_lib.rope.rope_frequencies` this config asks
        for."""
        return dict(scaling=self.rope_scaling, factor=self.rope_factor,
                    low_freq_factor=self.rope_low_freq_factor,
                    high_freq_factor=self.rope_high_freq_factor,
                    original_context=self.rope_original_context or self.block_size)

    @property
    def kv_heads(self) -> int:
        """Key/value heads actually used: ``n_kv_head``, or ``n_head`` when it is None."""
        return self.n_head if self.n_kv_head is None else self.n_kv_head

    @property
    def ffn_size(self) -> int:
        """The MLP's hidden size actually used (see ``ffn_hidden``)."""
        if self.ffn_hidden is not None:
            return self.ffn_hidden
        if self.mlp == "swiglu":
            # ceil(8C/3) to a multiple of SWIGLU_MULTIPLE
            return -(-8 * self.n_embd // (3 * SWIGLU_MULTIPLE)) * SWIGLU_MULTIPLE
        return 4 * self.n_embd

    def __repr__(self) -> str:
        """Every field, except those added after chapter 13 (``LATER_FIELDS``) while they hold their
        defaults: a config printed by an earlier chapter reads the same as before they existed."""
        shown = [f for f in fields(self) if f.name not in LATER_FIELDS
                 or getattr(self, f.name) != f.default]
        return f"GPTConfig({', '.join(f'{f.name}={getattr(self, f.name)!r}' for f in shown)})"

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "GPTConfig":
        return config_from_dict(cls, d)
