"""The GPT: feed-forward, Transformer block and the full model (chapters 5-6). Its config,
:class:`GPTConfig`, is :mod:`course_lib.gpt_config`'s (importable from here too). How big it is
(parameters, FLOPs, memory) is worked out in :mod:`course_lib.sizing`.

Chapter 14's options turn the GPT-2 block into a Llama-style one, each on its own and each off by
default: ``norm="rmsnorm"``, ``rope_theta`` (rotary positions instead of the learned table),
``mlp="swiglu"`` and ``n_kv_head`` (grouped-query attention); the decoders of 2025-26 add
``qk_norm`` and ``head_dim`` (Qwen3), ``rope_scaling`` (Llama 3.1) and ``sliding_window`` (Mistral).
Chapter 20's ``moe_experts`` replaces each MLP with a mixture of experts (:mod:`course_lib.moe`);
chapter 22's ``mtp_heads`` adds multi-token prediction heads (:mod:`course_lib.mtp`).

Shapes: B batch, T time, C = n_embd channels, V vocabulary size.
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from .attention import CausalSelfAttention, KVCache, causal_padding_mask, check_attention_mask
# GPTConfig and its tables live in gpt_config; importable from here as before
from .gpt_config import (ACTIVATIONS, GPT_CONFIG_RULES, LATER_FIELDS, MLPS,  # noqa: F401
                         NEEDS_ANOTHER, NORMS, SWIGLU_MULTIPLE, GPTConfig)
from .norms import RMSNorm  # noqa: F401  (course_lib.model.RMSNorm, as chapter 14 imports it)
from .moe import MoEFeedForward, balancing_loss
from .mtp import MTPHeads
from .registry import PRETRAINED_LOADERS, register_model
from .rope import rope_cos_sin
from .sizing import check_gpt_fits
from .utils import IGNORE_INDEX


class FeedForward(nn.Module):
    """Position-wise MLP: C -> 4C -> C, applied to every position independently
    (the hidden size is ``config.ffn_size``: 4C unless ``ffn_hidden`` says otherwise)."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        # chapter 11's Seq2SeqConfig: always 4C
        hidden = getattr(config, "ffn_size", 4 * config.n_embd)
        self.c_fc = nn.Linear(config.n_embd, hidden, bias=config.bias)
        self.act = ACTIVATIONS[config.activation]()
        self.c_proj = nn.Linear(hidden, config.n_embd, bias=config.bias)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, T, C) -> (B, T, C)
        return self.dropout(self.c_proj(self.act(self.c_fc(x))))


class SwiGLU(nn.Module):
    """The gated MLP of Llama (Shazeer 2020): c_proj(silu(c_gate(x)) * c_fc(x)), C -> H -> C.

    One hidden projection (c_fc, Llama's up_proj) is multiplied channel by channel with a second
    one passed through SiLU (c_gate, Llama's gate_proj): the gate decides how much of each hidden
    feature passes. Three matrices instead of two, so H is about 8/3 C to keep the weights of a
    4C MLP (``config.ffn_size``). ``activation`` is not used: the gate is always SiLU.
    """

    def __init__(self, config: GPTConfig):
        super().__init__()
        H = config.ffn_size
        self.c_gate = nn.Linear(config.n_embd, H, bias=config.bias)
        self.c_fc = nn.Linear(config.n_embd, H, bias=config.bias)
        self.c_proj = nn.Linear(H, config.n_embd, bias=config.bias)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, T, C) -> (B, T, H) -> (B, T, C)
        return self.dropout(self.c_proj(F.silu(self.c_gate(x)) * self.c_fc(x)))


def make_norm(config: GPTConfig) -> nn.Module:
    """The normalisation layer the config asks for, over C channels."""
    if config.norm == "rmsnorm":
        return RMSNorm(config.n_embd, eps=config.norm_eps)
    return nn.LayerNorm(config.n_embd, eps=config.norm_eps, bias=config.bias)


class Block(nn.Module):
    """A Transformer block: communication (attention) then computation (MLP), each wrapped
    in a residual connection and a LayerNorm. (B, T, C) -> (B, T, C)."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        self.pre_norm = config.norm_position == "pre"
        self.ln_1 = make_norm(config)
        self.attn = CausalSelfAttention.from_config(config)
        self.ln_2 = make_norm(config)
        make_mlp = ((lambda: SwiGLU(config)) if config.mlp == "swiglu"
                    else (lambda: FeedForward(config)))
        # getattr: chapter 11's Seq2SeqConfig has no moe_experts
        self.mlp = (MoEFeedForward(config, make_mlp) if getattr(config, "moe_experts", None)
                    else make_mlp())

    def forward(self, x: torch.Tensor, cache=None, mask: torch.Tensor | None = None,
                rope: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
        if self.pre_norm:  # GPT-2: x + f(LN(x)); the residual path stays a clean highway
            x = x + self.attn(self.ln_1(x), cache, mask, rope)
            x = x + self.mlp(self.ln_2(x))
        else:  # the 2017 paper: LN(x + f(x)), "add & norm"
            x = self.ln_1(x + self.attn(x, cache, mask, rope))
            x = self.ln_2(x + self.mlp(x))
        return x


@register_model("gpt", GPTConfig)
class GPT(nn.Module):
    """A decoder-only Transformer language model.

    ``forward(idx, targets=None)`` takes token ids ``idx`` (B, T) and returns ``(logits, loss)``:
    logits (B, T, V), and the mean cross-entropy against ``targets`` (B, T) when they are given
    (positions whose target equals ``ignore_index`` are left out), else ``None``.

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
        self.wpe = None
        if config.rope_theta is None:
            self.wpe = nn.Embedding(config.block_size, config.n_embd)  # learned position embedding
        else:  # RoPE: no table to learn; the angles of every position, kept out of the state_dict
            cos, sin = rope_cos_sin(torch.arange(config.block_size), config.head_size,
                                    config.rope_theta, **config.rope_options())
            self.register_buffer("rope_cos", cos, persistent=False)  # (block_size, hs/2)
            self.register_buffer("rope_sin", sin, persistent=False)
        self.drop = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layer))
        # Pre-LN needs a final LayerNorm (the residual stream is never normalised otherwise);
        # post-LN blocks already end in one.
        self.ln_f = make_norm(config) if config.norm_position == "pre" else nn.Identity()
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        if config.tie_weights:
            self.lm_head.weight = self.wte.weight  # one (V, C) matrix both reads and writes tokens
        self.apply(self._init_weights)
        # GPT-2: scale the projections that write into the residual stream by 1/sqrt(2 * n_layer).
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layer))
        # chapter 22's heads, made last
        self.mtp = (MTPHeads(config.n_embd, config.mtp_heads, config.bias) if config.mtp_heads
                    else None)

    @staticmethod
    def check_fits(config: GPTConfig, batch_size: int | None = None) -> None:
        """A TooLargeError, before allocating, when a GPT of ``config`` (and a training step of
        ``batch_size``) needs more than this machine's memory
        (:func:`course_lib.sizing.check_gpt_fits`); not called by GPT()."""
        check_gpt_fits(config, batch_size)

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
        """Our GPT holding published weights. ``model_or_name`` is a Hugging Face model object or a
        name (downloaded with ``transformers``):

        a ``GPT2LMHeadModel`` or ``gpt2``, ``gpt2-medium``, ``gpt2-large``, ``gpt2-xl`` (chapter 13,
        :mod:`course_lib.gpt2`); a ``LlamaForCausalLM`` or a Hub name with a slash such as
        ``"HuggingFaceTB/SmolLM2-135M"`` (chapter 14, :mod:`course_lib.llama`). Each loader
        registers itself in ``PRETRAINED_LOADERS`` under its ``model_type``."""
        if isinstance(model_or_name, str):
            # the GPT-2 loader knows its four names
            model_type = "llama" if "/" in model_or_name else "gpt2"
        else:
            model_type = getattr(getattr(model_or_name, "config", None), "model_type", None)
        # anything else goes to the GPT-2 loader, whose error says what it expected
        loader = PRETRAINED_LOADERS.get(model_type, PRETRAINED_LOADERS["gpt2"])
        return loader(model_or_name, dropout=dropout)

    def num_parameters(self) -> int:
        """Parameters actually held (a tied matrix counts once)."""
        return sum(p.numel() for p in self.parameters())

    def flops_per_token(self, training: bool = True) -> int:
        """Approximate floating-point operations per token at full context: 2N per token forward
        for the N weights used in matmuls, plus 2 * 2 * T * nh * hs per layer for the attention
        scores and the weighted sum of values (T: the window, when ``sliding_window`` is shorter);
        training (backward about twice forward) is 3x that, 6N + 12 L T C. N leaves out the lookups:
        the position table and, when the LM head is untied, the token embedding. Counted from the
        parameters this model holds, so it equals :func:`course_lib.sizing.flops_per_token` of its
        config (the trainer's MFU uses it)."""
        lookups = self.wpe.weight.numel() if self.wpe is not None else 0
        if not self.config.tie_weights:
            lookups += self.wte.weight.numel()
        c = self.config
        if c.moe_experts:  # a token goes through k of the E experts: the others cost it nothing
            expert = sum(p.numel() for p in self.blocks[0].mlp.experts[0].parameters())
            lookups += c.n_layer * (c.moe_experts - c.moe_top_k) * expert
        # the keys each query scores at full context
        span = min(c.block_size, c.sliding_window or c.block_size)
        forward = (2 * (self.num_parameters() - lookups)
                   + 4 * c.n_layer * span * c.n_head * c.head_size)
        return 3 * forward if training else forward

    def check_inputs(self, idx, targets=None, cache=None, position_ids=None) -> int:
        """:meth:`forward`'s guards, each a ValueError that names the fix (shapes, the context
        length, token ids in the vocabulary, positions); returns the cache's length (0 without)."""
        if idx.dim() != 2:
            raise ValueError("idx must be a (B, T) tensor of token ids, got shape "
                             f"{tuple(idx.shape)}: add the batch dimension with idx[None] (or "
                             "idx.unsqueeze(0)) for a single sequence")
        B, T = idx.shape
        if targets is not None and tuple(targets.shape) != (B, T):
            raise ValueError(f"targets must have the shape of idx ({B}, {T}), got "
                             f"{tuple(targets.shape)}: targets[b, t] is the token that follows "
                             "idx[b, :t+1]")
        if cache is not None and len(cache.layers) != self.config.n_layer:
            raise ValueError(f"this KV cache has {len(cache.layers)} layer(s) and the model "
                             f"{self.config.n_layer}: make it with KVCache(model.config.n_layer, "
                             "model.config.block_size)")
        past = cache.length if cache is not None else 0
        if past + T > self.config.block_size:
            what = "position embeddings" if self.wpe is not None else "RoPE angles"
            raise ValueError(f"sequence length {past + T} exceeds block_size "
                             f"{self.config.block_size}: the model has {what} for "
                             f"{self.config.block_size} positions only. Crop the context to its "
                             f"last {self.config.block_size} tokens (idx[:, -block_size:]) or "
                             "train with a larger block_size.")
        if idx.numel() and (idx.min() < 0 or idx.max() >= self.config.vocab_size):
            raise ValueError(f"token ids must lie in [0, {self.config.vocab_size - 1}] (vocab_size "
                             f"{self.config.vocab_size}), got ids from {int(idx.min())} to "
                             f"{int(idx.max())}: was the text encoded with another tokenizer?")
        pos = position_ids
        if pos is not None and tuple(pos.shape) not in ((T,), (B, T)):
            raise ValueError(f"position_ids has shape {tuple(pos.shape)}, expected "
                             f"({T},) or ({B}, {T})")
        if (pos is not None and pos.numel()
                and (pos.min() < 0 or pos.max() >= self.config.block_size)):
            raise ValueError(f"position_ids must lie in [0, {self.config.block_size - 1}] "
                             f"(block_size {self.config.block_size}), got {int(pos.min())} to "
                             f"{int(pos.max())}")
        return past

    def hidden(self, idx: torch.Tensor, cache: KVCache | None = None, attention_mask=None,
               position_ids=None, targets=None):
        """(B, T) ids -> (B, T, C): the trunk's last hidden state, after ln_f: what lm_head (and
        MTP heads) read."""
        past, (B, T) = self.check_inputs(idx, targets, cache, position_ids), idx.shape
        mask = None
        if attention_mask is not None:
            attention_mask = check_attention_mask(attention_mask, B, past + T, T)
            # (B, 1, T, past + T): causal AND real keys
            mask = causal_padding_mask(attention_mask, T)
        if position_ids is None:
            if attention_mask is not None and attention_mask.dim() == 2:
                # the i-th real token of a row is at position i, however many pads come before
                # it: (B, T)
                position_ids = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)[:, past:]
            else:
                position_ids = torch.arange(past, past + T, device=idx.device)  # (T,)
        pos, rope = position_ids, None
        if self.wpe is not None:
            # (B, T, C) + (T, C) or (B, T, C) -> (B, T, C)
            x = self.drop(self.wte(idx) + self.wpe(pos))
        else:  # RoPE: positions enter inside attention, as rotations of queries and keys
            x = self.drop(self.wte(idx))
            rope = (self.rope_cos[pos], self.rope_sin[pos])  # each (T, hs/2) or (B, T, hs/2)
        for i, block in enumerate(self.blocks):
            x = block(x, cache.layers[i] if cache is not None else None, mask, rope)
        return self.ln_f(x)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None,
                cache: KVCache | None = None, ignore_index: int = IGNORE_INDEX,
                attention_mask: torch.Tensor | None = None,
                position_ids: torch.Tensor | None = None):
        x = self.hidden(idx, cache, attention_mask, position_ids, targets)  # (B, T, C)
        logits, loss = self.lm_head(x), None  # (B, T, V)
        if targets is not None:
            loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten(),
                                   ignore_index=ignore_index)
            if self.config.moe_experts and self.training and self.config.moe_aux_coef:
                # only while training: a validation loss stays the cross-entropy a dense
                # model reports
                loss = loss + self.config.moe_aux_coef * self.balancing_loss()
            # chapter 22, the same way: the heads learn while training
            if self.mtp is not None and self.training:
                loss = loss + self.config.mtp_weight * self.mtp.loss(x, self.lm_head, targets,
                                                                     ignore_index)
        return logits, loss

    def router_logits(self) -> list[torch.Tensor]:
        """Each MoE block's (N, E) router logits from the last forward (empty for a dense GPT)."""
        return [b.mlp.router_logits for b in self.blocks if isinstance(b.mlp, MoEFeedForward)]

    def balancing_loss(self) -> torch.Tensor:
        """The last forward's balancing loss, as ``moe_balancing`` asks
        (:func:`course_lib.moe.balancing_loss`)."""
        return balancing_loss(self.router_logits(), self.config.moe_top_k,
                              self.config.moe_balancing)


def sinusoidal_position_encoding(max_len: int, n_embd: int) -> torch.Tensor:
    """(max_len, C) fixed encodings of the 2017 paper:
    PE[pos, 2i] = sin(pos / 10000^(2i/C)), PE[pos, 2i+1] = cos(pos / 10000^(2i/C))."""
    if n_embd % 2:
        raise ValueError(f"n_embd must be even for sin/cos pairs, got {n_embd}")
    pos = torch.arange(max_len, dtype=torch.float32)[:, None]  # (max_len, 1)
    freq = torch.exp(-math.log(10000.0) * torch.arange(0, n_embd, 2, dtype=torch.float32)
                     / n_embd)  # (C/2,)
    pe = torch.zeros(max_len, n_embd)
    pe[:, 0::2] = torch.sin(pos * freq)
    pe[:, 1::2] = torch.cos(pos * freq)
    return pe
