"""The original Transformer of "Attention Is All You Need" (Vaswani et al., 2017): an
encoder-decoder with cross-attention, "Add & Norm", sinusoidal positions and label smoothing
(chapter 11). Decoding it (greedy and beam search) is in :mod:`course_lib.translate`; the chapter's
toy task, normalising dates, in :mod:`course_lib.dates`.

Shapes: B batch, S source length, T target length, C = n_embd channels, V vocabulary size,
nh heads, hs head size.

The layout follows ``torch.nn.Transformer`` (post-LN layers, a final LayerNorm after each
stack), so that :meth:`Seq2Seq.load_from_torch` can copy its weights and the outputs agree.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from .attention import CausalSelfAttention, scaled_dot_product_attention
from .model import FeedForward, sinusoidal_position_encoding
from .registry import register_model
from .config import Rule, check_fields, config_from_dict
from .utils import IGNORE_INDEX

# The special tokens of a seq2seq vocabulary, first in it: a CharTokenizer(chars, specials=SPECIALS)
# gives them the ids 0, 1, 2, which are the config's default pad_id, bos_id and eos_id.
SPECIALS = ("<pad>", "<s>", "</s>")
PAD_ID, BOS_ID, EOS_ID = range(len(SPECIALS))


# What each Seq2SeqConfig field may hold (checked in __post_init__): a new field adds one row.
SEQ2SEQ_CONFIG_RULES = {
    **{name: Rule(int, 1)
       for name in ("vocab_size", "block_size", "n_encoder_layers", "n_decoder_layers",
                                       "n_head", "n_embd")},
    "dropout": Rule(float, 0.0, 1.0, "[)"),
    "label_smoothing": Rule(float, 0.0, 1.0, "[)"),
    **{name: Rule(bool) for name in ("bias", "final_norm", "share_embeddings", "tie_weights")},
    "norm_position": Rule(str, choices=("pre", "post")),
    "activation": Rule(str, choices=("relu", "gelu")),
    **{name: Rule(int, 0) for name in ("pad_id", "bos_id", "eos_id")},
}


@dataclass
class Seq2SeqConfig:
    vocab_size: int = 72  # one vocabulary for source and target (shared embeddings)
    block_size: int = 32  # the longest source, and the longest decoder input, the model accepts
    n_encoder_layers: int = 2
    n_decoder_layers: int = 2
    n_head: int = 4
    # d_model in the paper; the feed-forward layer has 4 * n_embd hidden units (d_ff)
    n_embd: int = 64
    dropout: float = 0.1
    # biases in Linear layers and LayerNorms (the paper and torch.nn.Transformer: True)
    bias: bool = True
    # "post": LN(x + f(x)), "Add & Norm" of the paper; "pre": x + f(LN(x))
    norm_position: str = "post"
    activation: str = "relu"  # "relu" (paper) or "gelu"
    # a LayerNorm after each stack, as torch.nn.Transformer has (needed for pre-LN)
    final_norm: bool = True
    share_embeddings: bool = True  # one token embedding for encoder and decoder
    tie_weights: bool = True  # the output layer reuses the decoder's token embedding
    label_smoothing: float = 0.1  # epsilon_ls of the paper
    pad_id: int = PAD_ID
    bos_id: int = BOS_ID
    eos_id: int = EOS_ID

    def __post_init__(self):
        check_fields(self, SEQ2SEQ_CONFIG_RULES)
        if self.n_embd % self.n_head:
            raise ValueError(
                f"n_embd ({self.n_embd}) must be divisible by n_head ({self.n_head}); "
                "try n_head in "
                f"{[h for h in range(1, self.n_embd + 1) if self.n_embd % h == 0][:12]}"
            )
        if self.n_embd % 2:
            raise ValueError("n_embd must be even (sinusoidal positions come in sin/cos pairs), "
                             f"got {self.n_embd}")
        if self.norm_position == "pre" and not self.final_norm:
            raise ValueError("a pre-LN stack needs final_norm=True: otherwise its output is never "
                             "normalised")
        if self.tie_weights and not self.share_embeddings:
            pass  # allowed: the head is tied to the decoder's embedding
        specials = (self.pad_id, self.bos_id, self.eos_id)
        if len(set(specials)) != 3 or not all(0 <= i < self.vocab_size for i in specials):
            raise ValueError("pad_id, bos_id, eos_id must be 3 distinct ids below vocab_size, got "
                             f"{specials}")

    @property
    def head_size(self) -> int:
        return self.n_embd // self.n_head

    @property
    def d_ff(self) -> int:
        return 4 * self.n_embd

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "Seq2SeqConfig":
        return config_from_dict(cls, d)


# --- attention with a mask: encoder self-attention and cross-attention -------------------------


class Attention(nn.Module):
    """Multi-head attention whose queries come from ``x`` (B, T, C) and whose keys and values
    come from ``context`` (B, S, C): the encoder's self-attention (context = x) and the
    decoder's cross-attention (context = the encoder output, "memory").

    ``mask`` is boolean, broadcastable to (B, nh, T, S), True where attending is allowed (here:
    the key is a real source token, not padding). Returns (B, T, C).
    """

    def __init__(self, config: Seq2SeqConfig):
        super().__init__()
        C = config.n_embd
        self.n_head = config.n_head
        self.q_proj = nn.Linear(C, C, bias=config.bias)  # queries from x
        self.kv_proj = nn.Linear(C, 2 * C, bias=config.bias)  # keys and values from context
        self.c_proj = nn.Linear(C, C, bias=config.bias)
        self.dropout = config.dropout
        self.resid_dropout = nn.Dropout(config.dropout)
        self.need_weights = False  # keep (B, nh, T, S) weights in last_weights (eval mode)
        self.last_weights: torch.Tensor | None = None

    def split_heads(self, t: torch.Tensor) -> torch.Tensor:
        B, T, C = t.shape
        return t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)

    def forward(self, x: torch.Tensor, context: torch.Tensor,
                mask: torch.Tensor | None = None) -> torch.Tensor:
        B, T, C = x.shape
        q = self.split_heads(self.q_proj(x))  # (B, nh, T, hs)
        # each (B, nh, S, hs)
        k, v = (self.split_heads(t) for t in self.kv_proj(context).split(C, dim=2))
        if self.need_weights:
            y, weights = scaled_dot_product_attention(q, k, v, mask)
            self.last_weights = weights.detach()
        else:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask,
                                               dropout_p=self.dropout if self.training else 0.0)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


def _add_norm(x, sublayer, norm, pre_norm: bool):
    """One residual sub-layer. Post-LN (paper): LN(x + f(x)), "Add & Norm". Pre-LN: x + f(LN(x))."""
    return x + sublayer(norm(x)) if pre_norm else norm(x + sublayer(x))


class EncoderLayer(nn.Module):
    """Bidirectional self-attention over the source, then the feed-forward layer, each with
    Add & Norm. (B, S, C) -> (B, S, C)."""

    def __init__(self, config: Seq2SeqConfig):
        super().__init__()
        self.pre_norm = config.norm_position == "pre"
        self.self_attn = Attention(config)
        self.ln_1 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.mlp = FeedForward(config)  # the GPT's feed-forward layer: C -> 4C -> C
        self.ln_2 = nn.LayerNorm(config.n_embd, bias=config.bias)

    def forward(self, x: torch.Tensor, src_mask: torch.Tensor) -> torch.Tensor:
        x = _add_norm(x, lambda h: self.self_attn(h, h, src_mask), self.ln_1, self.pre_norm)
        return _add_norm(x, self.mlp, self.ln_2, self.pre_norm)


class DecoderLayer(nn.Module):
    """Causal self-attention over the target so far, cross-attention to the encoder output,
    then the feed-forward layer, each with Add & Norm. (B, T, C) -> (B, T, C)."""

    def __init__(self, config: Seq2SeqConfig):
        super().__init__()
        self.pre_norm = config.norm_position == "pre"
        # chapter 4's fused causal attention
        self.self_attn = CausalSelfAttention.from_config(config)
        self.ln_1 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.cross_attn = Attention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.mlp = FeedForward(config)
        self.ln_3 = nn.LayerNorm(config.n_embd, bias=config.bias)

    def forward(self, x: torch.Tensor, memory: torch.Tensor,
                src_mask: torch.Tensor) -> torch.Tensor:
        x = _add_norm(x, self.self_attn, self.ln_1, self.pre_norm)
        x = _add_norm(x, lambda h: self.cross_attn(h, memory, src_mask), self.ln_2, self.pre_norm)
        return _add_norm(x, self.mlp, self.ln_3, self.pre_norm)


# --- losses ------------------------------------------------------------------------------------


def label_smoothed_cross_entropy(logits: torch.Tensor, targets: torch.Tensor, epsilon: float = 0.1,
                                 ignore_index: int = IGNORE_INDEX) -> torch.Tensor:
    """Cross-entropy against a smoothed target: probability 1 - epsilon on the right token and
    epsilon spread evenly over all V tokens (the right one included), as in the 2017 paper and
    ``F.cross_entropy(..., label_smoothing=epsilon)``:

        loss = (1 - epsilon) * (-log p[target]) + epsilon * mean_v(-log p[v])

    logits (..., V), targets (...); positions whose target is ``ignore_index`` are left out of
    the mean. Returns a scalar.
    """
    logp = F.log_softmax(logits.float(), dim=-1).flatten(0, -2)  # (N, V)
    targets = targets.flatten()
    keep = targets != ignore_index
    nll = -logp.gather(1, targets.clamp(min=0)[:, None]).squeeze(1)  # (N,)
    uniform = -logp.mean(dim=-1)  # (N,) cross-entropy against the uniform distribution
    losses = (1.0 - epsilon) * nll + epsilon * uniform
    return (losses * keep).sum() / keep.sum().clamp(min=1)


def shift_right(targets: torch.Tensor, bos_id: int = BOS_ID, pad_id: int = PAD_ID,
                ignore_index: int = IGNORE_INDEX) -> torch.Tensor:
    """Teacher forcing: the decoder input is the target moved one step to the right, starting
    with BOS. targets (B, T) -> (B, T); ``ignore_index`` padding becomes ``pad_id``.

    targets  y1  y2  y3  EOS        ->  decoder input  BOS  y1  y2  y3
    """
    tgt_in = torch.full_like(targets, bos_id)
    tgt_in[:, 1:] = targets[:, :-1]
    return tgt_in.masked_fill(tgt_in == ignore_index, pad_id)


def encode_batch(tokenizer, texts: list[str], eos: bool = False, pad: int = PAD_ID,
                 device=None) -> torch.Tensor:
    """Encode ``texts`` and pad them on the right into a (B, L) tensor (with EOS after each when
    ``eos``; pass ``pad=IGNORE_INDEX`` for targets)."""
    rows = [tokenizer.encode(t) + ([EOS_ID] if eos else []) for t in texts]
    L = max((len(r) for r in rows), default=0)
    return torch.tensor([r + [pad] * (L - len(r)) for r in rows], dtype=torch.long,
                        device=device).view(len(rows), L)


# --- the model ----------------------------------------------------------------------------------


@register_model("seq2seq", Seq2SeqConfig)
class Seq2Seq(nn.Module):
    """The encoder-decoder Transformer.

    ``forward(src, targets, tgt_in=None)``: src (B, S) source ids padded with ``pad_id``;
    targets (B, T) the ids the decoder must produce (ending in EOS, padded with ``ignore_index``).
    The decoder input defaults to ``shift_right(targets)`` (teacher forcing). Returns
    ``(logits, loss)``: logits (B, T, V) and the label-smoothed cross-entropy (``None`` when
    ``targets`` is None and a ``tgt_in`` is given instead). So ``Trainer`` can train it with a
    ``batch_fn`` that returns ``(src, targets)``.
    """

    def __init__(self, config: Seq2SeqConfig):
        super().__init__()
        self.config = config
        C = config.n_embd
        self.src_embed = nn.Embedding(config.vocab_size, C)
        self.tgt_embed = (self.src_embed if config.share_embeddings
                          else nn.Embedding(config.vocab_size, C))
        # Fixed, not learned: a buffer, rebuilt from the config, not stored in checkpoints.
        self.register_buffer("pos", sinusoidal_position_encoding(config.block_size, C),
                             persistent=False)
        self.drop = nn.Dropout(config.dropout)
        self.encoder = nn.ModuleList(EncoderLayer(config) for _ in range(config.n_encoder_layers))
        self.decoder = nn.ModuleList(DecoderLayer(config) for _ in range(config.n_decoder_layers))
        norm = lambda: nn.LayerNorm(C, bias=config.bias) if config.final_norm else nn.Identity()
        self.enc_norm, self.dec_norm = norm(), norm()
        self.lm_head = nn.Linear(C, config.vocab_size, bias=False)
        self._init_weights()
        if config.tie_weights:
            self.lm_head.weight = self.tgt_embed.weight

    def _init_weights(self) -> None:
        # As torch.nn.Transformer: Xavier-uniform matrices. Embeddings N(0, 1/C): multiplied by
        # sqrt(C) in forward, their entries then have variance 1, like the positions' sin/cos.
        for name, p in self.named_parameters():
            if "embed" in name:
                nn.init.normal_(p, mean=0.0, std=self.config.n_embd**-0.5)
            elif p.dim() > 1:
                nn.init.xavier_uniform_(p)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def _check_ids(self, ids: torch.Tensor, what: str) -> None:
        V, L = self.config.vocab_size, self.config.block_size
        if ids.dim() != 2:
            raise ValueError(f"{what} must be a (B, length) tensor of token ids, got shape "
                             f"{tuple(ids.shape)}")
        if ids.shape[1] > L:
            raise ValueError(f"{what} has length {ids.shape[1]}, longer than block_size {L}: the "
                             f"model has positions for {L} tokens only. Shorten the input or train "
                             "with a larger block_size.")
        if ids.numel() and (ids.min() < 0 or ids.max() >= V):
            raise ValueError(f"{what} ids must lie in [0, {V - 1}] (vocab_size {V}), got ids from "
                             f"{int(ids.min())} to {int(ids.max())}: was it encoded with another "
                             "tokenizer?")

    def embed(self, ids: torch.Tensor, table: nn.Embedding) -> torch.Tensor:
        """(B, T) -> (B, T, C): token embedding scaled by sqrt(C), plus the sinusoidal position."""
        T = ids.shape[1]
        return self.drop(table(ids) * math.sqrt(self.config.n_embd) + self.pos[:T])

    def encode(self, src: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """src (B, S) -> (memory (B, S, C), src_mask (B, 1, 1, S)); the mask is True on real
        tokens."""
        self._check_ids(src, "source")
        keep = src != self.config.pad_id  # (B, S)
        if src.shape[1] == 0 or not keep.any(dim=1).all():
            bad = ([i for i, row in enumerate(keep) if not row.any()] if src.shape[1]
                   else list(range(len(src))))
            raise ValueError(f"source sequence(s) {bad[:10]} of the batch are empty (only "
                             "padding): every source needs at least one token, or its "
                             "cross-attention has nothing to attend to. Drop empty sources from "
                             "the batch.")
        src_mask = keep[:, None, None, :]  # (B, 1, 1, S): broadcast over heads and query positions
        x = self.embed(src, self.src_embed)
        for layer in self.encoder:
            x = layer(x, src_mask)
        return self.enc_norm(x), src_mask

    def decode(self, tgt_in: torch.Tensor, memory: torch.Tensor,
               src_mask: torch.Tensor) -> torch.Tensor:
        """tgt_in (B, T) decoder input, memory (B, S, C) -> logits (B, T, V)."""
        self._check_ids(tgt_in, "target")
        x = self.embed(tgt_in, self.tgt_embed)
        for layer in self.decoder:
            x = layer(x, memory, src_mask)
        return self.lm_head(self.dec_norm(x))

    def forward(self, src: torch.Tensor, targets: torch.Tensor | None = None,
                tgt_in: torch.Tensor | None = None, ignore_index: int = IGNORE_INDEX):
        if tgt_in is None:
            if targets is None:
                raise ValueError("give targets (teacher forcing uses shift_right(targets)) or a "
                                 "decoder input tgt_in")
            self._check_ids(targets.masked_fill(targets == ignore_index, self.config.pad_id),
                            "target")
            tgt_in = shift_right(targets, self.config.bos_id, self.config.pad_id, ignore_index)
        memory, src_mask = self.encode(src)
        logits = self.decode(tgt_in, memory, src_mask)
        loss = None
        if targets is not None:
            loss = label_smoothed_cross_entropy(logits, targets, self.config.label_smoothing,
                                                ignore_index)
        return logits, loss

    def set_need_weights(self, on: bool = True) -> None:
        """Keep every cross-attention layer's (B, nh, T, S) weights in
        ``layer.cross_attn.last_weights``."""
        for layer in self.decoder:
            layer.cross_attn.need_weights = on

    # --- torch.nn.Transformer ---

    def torch_transformer(self) -> nn.Transformer:
        """An ``nn.Transformer`` of the same shape (batch_first, no dropout), for comparisons."""
        c = self.config
        if c.norm_position != "post" or not c.final_norm or not c.bias:
            raise ValueError("nn.Transformer's default layout is post-LN with biases and a final "
                             "LayerNorm per stack")
        return nn.Transformer(d_model=c.n_embd, nhead=c.n_head,
                              num_encoder_layers=c.n_encoder_layers,
                              num_decoder_layers=c.n_decoder_layers, dim_feedforward=c.d_ff,
                              dropout=0.0, activation=c.activation, batch_first=True)

    @torch.no_grad()
    def load_from_torch(self, transformer: nn.Transformer) -> "Seq2Seq":
        """Copy the weights of a ``torch.nn.Transformer`` of the same shape into the two stacks.

        ``nn.MultiheadAttention`` keeps q, k, v in one (3C, C) ``in_proj_weight``: its first C rows
        are our ``q_proj``, the other 2C our ``kv_proj`` (the decoder's causal self-attention keeps
        all 3C in ``c_attn``, like chapter 4's). Embeddings and output layer are not part of
        ``nn.Transformer`` and stay as they are.
        """
        C = self.config.n_embd

        def attn(ours: nn.Module, theirs: nn.MultiheadAttention) -> None:
            if isinstance(ours, CausalSelfAttention):
                ours.c_attn.weight.copy_(theirs.in_proj_weight)
                ours.c_attn.bias.copy_(theirs.in_proj_bias)
            else:
                ours.q_proj.weight.copy_(theirs.in_proj_weight[:C])
                ours.q_proj.bias.copy_(theirs.in_proj_bias[:C])
                ours.kv_proj.weight.copy_(theirs.in_proj_weight[C:])
                ours.kv_proj.bias.copy_(theirs.in_proj_bias[C:])
            ours.c_proj.load_state_dict(theirs.out_proj.state_dict())

        def mlp(ours: FeedForward, layer) -> None:
            ours.c_fc.load_state_dict(layer.linear1.state_dict())
            ours.c_proj.load_state_dict(layer.linear2.state_dict())

        enc, dec = transformer.encoder.layers, transformer.decoder.layers
        if (len(enc) != len(self.encoder) or len(dec) != len(self.decoder)
            or enc[0].linear1.in_features != C):
            raise ValueError("the nn.Transformer has another shape: build it with "
                             "model.torch_transformer()")
        for ours, theirs in zip(self.encoder, enc):
            attn(ours.self_attn, theirs.self_attn)
            mlp(ours.mlp, theirs)
            ours.ln_1.load_state_dict(theirs.norm1.state_dict())
            ours.ln_2.load_state_dict(theirs.norm2.state_dict())
        for ours, theirs in zip(self.decoder, dec):
            attn(ours.self_attn, theirs.self_attn)
            attn(ours.cross_attn, theirs.multihead_attn)
            mlp(ours.mlp, theirs)
            for i in (1, 2, 3):
                getattr(ours, f"ln_{i}").load_state_dict(getattr(theirs, f"norm{i}").state_dict())
        self.enc_norm.load_state_dict(transformer.encoder.norm.state_dict())
        self.dec_norm.load_state_dict(transformer.decoder.norm.state_dict())
        return self


def torch_reference_logits(model: Seq2Seq, transformer: nn.Transformer, src: torch.Tensor,
                           tgt_in: torch.Tensor) -> torch.Tensor:
    """Logits (B, T, V) computed by ``transformer`` between our model's embeddings and output
    layer: the reference the equality proof compares :meth:`Seq2Seq.forward` with.

    Mind PyTorch's mask conventions: a boolean ``*_key_padding_mask`` is True where a key is
    padding (to be ignored), the opposite of ours; ``tgt_mask`` is a float mask, -inf above
    the diagonal.
    """
    pad = src == model.config.pad_id  # (B, S) True = ignore
    T = tgt_in.shape[1]
    tgt_mask = nn.Transformer.generate_square_subsequent_mask(T)
    out = transformer(model.embed(src, model.src_embed), model.embed(tgt_in, model.tgt_embed),
                      tgt_mask=tgt_mask, src_key_padding_mask=pad, memory_key_padding_mask=pad,
                      tgt_is_causal=True)
    return model.lm_head(out)
