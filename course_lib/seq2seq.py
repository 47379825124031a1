"""The original Transformer of "Attention Is All You Need" (Vaswani et al., 2017): an encoder-decoder
with cross-attention, "Add & Norm", sinusoidal positions, label smoothing and beam search (chapter 11).
It also holds the chapter's toy task (normalising dates to ISO form), its tokenizer, and the two
functions the command line uses: :func:`train_dates` and :func:`translate`.

Shapes: B batch, S source length, T target length, C = n_embd channels, V vocabulary size,
nh heads, hs head size, K beam size.

The layout follows ``torch.nn.Transformer`` (post-LN layers, a final LayerNorm after each
stack), so that :meth:`Seq2Seq.load_from_torch` can copy its weights and the outputs agree.
"""
from __future__ import annotations

import calendar
import datetime
import math
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

from .attention import CausalSelfAttention, scaled_dot_product_attention
from .model import FeedForward, sinusoidal_position_encoding
from .registry import register_model
from .tokenizers import register_tokenizer
from .utils import IGNORE_INDEX, Rule, check_fields, config_from_dict

PAD_ID, BOS_ID, EOS_ID = 0, 1, 2  # the special tokens of Seq2SeqTokenizer


# What each Seq2SeqConfig field may hold (checked in __post_init__): a new field adds one row.
SEQ2SEQ_CONFIG_RULES = {
    **{name: Rule(int, 1) for name in ("vocab_size", "block_size", "n_encoder_layers", "n_decoder_layers",
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
    n_embd: int = 64  # d_model in the paper; the feed-forward layer has 4 * n_embd hidden units (d_ff)
    dropout: float = 0.1
    bias: bool = True  # biases in Linear layers and LayerNorms (the paper and torch.nn.Transformer: True)
    norm_position: str = "post"  # "post": LN(x + f(x)), "Add & Norm" of the paper; "pre": x + f(LN(x))
    activation: str = "relu"  # "relu" (paper) or "gelu"
    final_norm: bool = True  # a LayerNorm after each stack, as torch.nn.Transformer has (needed for pre-LN)
    share_embeddings: bool = True  # one token embedding for encoder and decoder
    tie_weights: bool = True  # the output layer reuses the decoder's token embedding
    label_smoothing: float = 0.1  # epsilon_ls of the paper
    pad_id: int = PAD_ID
    bos_id: int = BOS_ID
    eos_id: int = EOS_ID

    def __post_init__(self):
        check_fields(self, SEQ2SEQ_CONFIG_RULES)
        if self.n_embd % self.n_head:
            raise ValueError(f"n_embd ({self.n_embd}) must be divisible by n_head ({self.n_head}); "
                             f"try n_head in {[h for h in range(1, self.n_embd + 1) if self.n_embd % h == 0][:12]}")
        if self.n_embd % 2:
            raise ValueError(f"n_embd must be even (sinusoidal positions come in sin/cos pairs), got {self.n_embd}")
        if self.norm_position == "pre" and not self.final_norm:
            raise ValueError("a pre-LN stack needs final_norm=True: otherwise its output is never normalised")
        if self.tie_weights and not self.share_embeddings:
            pass  # allowed: the head is tied to the decoder's embedding
        specials = (self.pad_id, self.bos_id, self.eos_id)
        if len(set(specials)) != 3 or not all(0 <= i < self.vocab_size for i in specials):
            raise ValueError(f"pad_id, bos_id, eos_id must be 3 distinct ids below vocab_size, got {specials}")

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

    def forward(self, x: torch.Tensor, context: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        B, T, C = x.shape
        q = self.split_heads(self.q_proj(x))  # (B, nh, T, hs)
        k, v = (self.split_heads(t) for t in self.kv_proj(context).split(C, dim=2))  # each (B, nh, S, hs)
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
        self.self_attn = CausalSelfAttention.from_config(config)  # chapter 4's fused causal attention
        self.ln_1 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.cross_attn = Attention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.mlp = FeedForward(config)
        self.ln_3 = nn.LayerNorm(config.n_embd, bias=config.bias)

    def forward(self, x: torch.Tensor, memory: torch.Tensor, src_mask: torch.Tensor) -> torch.Tensor:
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
        self.tgt_embed = self.src_embed if config.share_embeddings else nn.Embedding(config.vocab_size, C)
        # Fixed, not learned: a buffer, rebuilt from the config, not stored in checkpoints.
        self.register_buffer("pos", sinusoidal_position_encoding(config.block_size, C), persistent=False)
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
            raise ValueError(f"{what} must be a (B, length) tensor of token ids, got shape {tuple(ids.shape)}")
        if ids.shape[1] > L:
            raise ValueError(f"{what} has length {ids.shape[1]}, longer than block_size {L}: the model has "
                             f"positions for {L} tokens only. Shorten the input or train with a larger block_size.")
        if ids.numel() and (ids.min() < 0 or ids.max() >= V):
            raise ValueError(f"{what} ids must lie in [0, {V - 1}] (vocab_size {V}), got ids from {int(ids.min())} "
                             f"to {int(ids.max())}: was it encoded with another tokenizer?")

    def embed(self, ids: torch.Tensor, table: nn.Embedding) -> torch.Tensor:
        """(B, T) -> (B, T, C): token embedding scaled by sqrt(C), plus the sinusoidal position."""
        T = ids.shape[1]
        return self.drop(table(ids) * math.sqrt(self.config.n_embd) + self.pos[:T])

    def encode(self, src: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """src (B, S) -> (memory (B, S, C), src_mask (B, 1, 1, S)); the mask is True on real tokens."""
        self._check_ids(src, "source")
        keep = src != self.config.pad_id  # (B, S)
        if src.shape[1] == 0 or not keep.any(dim=1).all():
            bad = [i for i, row in enumerate(keep) if not row.any()] if src.shape[1] else list(range(len(src)))
            raise ValueError(f"source sequence(s) {bad[:10]} of the batch are empty (only padding): every source "
                             "needs at least one token, or its cross-attention has nothing to attend to. "
                             "Drop empty sources from the batch.")
        src_mask = keep[:, None, None, :]  # (B, 1, 1, S): broadcast over heads and query positions
        x = self.embed(src, self.src_embed)
        for layer in self.encoder:
            x = layer(x, src_mask)
        return self.enc_norm(x), src_mask

    def decode(self, tgt_in: torch.Tensor, memory: torch.Tensor, src_mask: torch.Tensor) -> torch.Tensor:
        """tgt_in (B, T) decoder input, memory (B, S, C) -> logits (B, T, V)."""
        self._check_ids(tgt_in, "target")
        x = self.embed(tgt_in, self.tgt_embed)
        for layer in self.decoder:
            x = layer(x, memory, src_mask)
        return self.lm_head(self.dec_norm(x))

    def forward(self, src: torch.Tensor, targets: torch.Tensor | None = None, tgt_in: torch.Tensor | None = None,
                ignore_index: int = IGNORE_INDEX):
        if tgt_in is None:
            if targets is None:
                raise ValueError("give targets (teacher forcing uses shift_right(targets)) or a decoder input tgt_in")
            self._check_ids(targets.masked_fill(targets == ignore_index, self.config.pad_id), "target")
            tgt_in = shift_right(targets, self.config.bos_id, self.config.pad_id, ignore_index)
        memory, src_mask = self.encode(src)
        logits = self.decode(tgt_in, memory, src_mask)
        loss = None
        if targets is not None:
            loss = label_smoothed_cross_entropy(logits, targets, self.config.label_smoothing, ignore_index)
        return logits, loss

    def set_need_weights(self, on: bool = True) -> None:
        """Keep every cross-attention layer's (B, nh, T, S) weights in ``layer.cross_attn.last_weights``."""
        for layer in self.decoder:
            layer.cross_attn.need_weights = on

    # --- torch.nn.Transformer ---

    def torch_transformer(self) -> nn.Transformer:
        """An ``nn.Transformer`` of the same shape (batch_first, no dropout), for comparisons."""
        c = self.config
        if c.norm_position != "post" or not c.final_norm or not c.bias:
            raise ValueError("nn.Transformer's default layout is post-LN with biases and a final LayerNorm per stack")
        return nn.Transformer(d_model=c.n_embd, nhead=c.n_head, num_encoder_layers=c.n_encoder_layers,
                              num_decoder_layers=c.n_decoder_layers, dim_feedforward=c.d_ff, dropout=0.0,
                              activation=c.activation, batch_first=True)

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
        if len(enc) != len(self.encoder) or len(dec) != len(self.decoder) or enc[0].linear1.in_features != C:
            raise ValueError("the nn.Transformer has another shape: build it with model.torch_transformer()")
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
    out = transformer(model.embed(src, model.src_embed), model.embed(tgt_in, model.tgt_embed), tgt_mask=tgt_mask,
                      src_key_padding_mask=pad, memory_key_padding_mask=pad, tgt_is_causal=True)
    return model.lm_head(out)


# --- decoding -------------------------------------------------------------------------------------


def _decode_args(model: Seq2Seq, src: torch.Tensor, max_len: int | None) -> int:
    if src.dim() != 2:
        raise ValueError(f"src must be a (B, S) tensor of token ids, got shape {tuple(src.shape)}")
    L = model.config.block_size
    max_len = L if max_len is None else max_len
    if not 1 <= max_len <= L:
        raise ValueError(f"max_len must be in [1, block_size={L}] (the decoder input grows to max_len tokens), "
                         f"got {max_len}")
    return max_len


@torch.no_grad()
def greedy_decode(model: Seq2Seq, src: torch.Tensor, max_len: int | None = None) -> list[list[int]]:
    """The most likely next token, one step at a time, until EOS or ``max_len`` tokens.
    src (B, S) -> B lists of token ids (BOS and EOS left out)."""
    max_len = _decode_args(model, src, max_len)
    c = model.config
    memory, src_mask = model.encode(src)
    seqs = torch.full((src.shape[0], 1), c.bos_id, dtype=torch.long, device=src.device)  # (B, 1)
    done = torch.zeros(src.shape[0], dtype=torch.bool, device=src.device)
    for _ in range(max_len):
        logits = next_token_logits(model, seqs, memory, src_mask)  # (B, V)
        nxt = logits.argmax(dim=-1).masked_fill(done, c.pad_id)  # (B,)
        seqs = torch.cat([seqs, nxt[:, None]], dim=1)
        done |= nxt == c.eos_id
        if done.all():
            break
    return [_strip(row, c) for row in seqs[:, 1:].tolist()]


def _strip(ids: list[int], c: Seq2SeqConfig) -> list[int]:
    """Token ids up to (not including) the first EOS."""
    return ids[: ids.index(c.eos_id)] if c.eos_id in ids else ids


def next_token_logits(model: Seq2Seq, seqs: torch.Tensor, memory: torch.Tensor, src_mask: torch.Tensor):
    """(B, t) decoder inputs -> (B, V) logits of the next token; PAD and BOS, never targets,
    are ruled out (-inf)."""
    logits = model.decode(seqs, memory, src_mask)[:, -1].float()  # only the last position is new
    logits[:, [model.config.pad_id, model.config.bos_id]] = float("-inf")
    return logits


def length_penalty(length: int, alpha: float) -> float:
    """GNMT's length normalisation (Wu et al. 2016), used by the 2017 paper with alpha = 0.6:
    lp = ((5 + length) / 6) ** alpha. A hypothesis is ranked by log p / lp."""
    return ((5.0 + length) / 6.0) ** alpha


@torch.no_grad()
def beam_search(model: Seq2Seq, src: torch.Tensor, beam_size: int = 4, max_len: int | None = None,
                alpha: float = 0.6) -> list[list[int]]:
    """Keep the ``beam_size`` most likely partial translations at every step.

    Each step extends every live hypothesis by every token, and ranks the K * V candidates by
    their summed log-probability. Candidates ending in EOS (among the top K) are finished;
    the best K others stay live. A source is done when it has K finished hypotheses (or at
    ``max_len``); its answer is the finished one with the best length-normalised score
    log p / :func:`length_penalty`. With ``beam_size=1`` this is exactly greedy decoding.

    src (B, S) -> B lists of token ids (BOS and EOS left out).
    """
    if not isinstance(beam_size, int) or beam_size < 1:
        raise ValueError(f"beam_size must be an integer >= 1 (1 is greedy decoding), got {beam_size!r}")
    max_len = _decode_args(model, src, max_len)
    c, K = model.config, beam_size
    B = src.shape[0]
    memory, src_mask = model.encode(src)
    memory, src_mask = memory.repeat_interleave(K, dim=0), src_mask.repeat_interleave(K, dim=0)  # (B*K, ...)
    seqs = torch.full((B * K, 1), c.bos_id, dtype=torch.long, device=src.device)  # (B*K, t)
    scores = torch.full((B, K), float("-inf"), device=src.device)
    scores[:, 0] = 0.0  # at the start only one hypothesis (BOS) is live
    finished: list[list[tuple[float, list[int]]]] = [[] for _ in range(B)]
    done = [False] * B
    for step in range(max_len):
        logp = F.log_softmax(next_token_logits(model, seqs, memory, src_mask), dim=-1)  # (B*K, V)
        V = logp.shape[-1]
        cand = (scores[:, :, None] + logp.view(B, K, V)).view(B, K * V)  # (B, K*V)
        top_scores, top_idx = cand.topk(min(2 * K, K * V), dim=1)  # (B, 2K): K live ones survive even if K end
        new_rows, new_scores = [], torch.full((B, K), float("-inf"), device=src.device)
        for b in range(B):
            rows = []
            for rank, (s, i) in enumerate(zip(top_scores[b].tolist(), top_idx[b].tolist())):
                if done[b] or len(rows) == K or s == float("-inf"):
                    break
                beam, tok = divmod(i, V)
                prefix = seqs[b * K + beam]
                if tok == c.eos_id:
                    if rank < K:
                        ids = prefix[1:].tolist()
                        finished[b].append((s / length_penalty(len(ids) + 1, alpha), ids))
                        if len(finished[b]) >= K:
                            done[b] = True
                else:
                    new_scores[b, len(rows)] = s
                    rows.append(torch.cat([prefix, prefix.new_tensor([tok])]))
            while len(rows) < K:  # a finished source (or too few candidates): filler rows, score -inf
                rows.append(torch.cat([seqs[b * K], seqs.new_tensor([c.pad_id])]))
            new_rows.extend(rows)
        seqs, scores = torch.stack(new_rows), new_scores
        if all(done):
            break
    out = []
    for b in range(B):
        if not done[b]:  # ran out of steps: live hypotheses compete too
            for k in range(K):
                if scores[b, k] > float("-inf"):
                    ids = seqs[b * K + k, 1:].tolist()
                    finished[b].append((scores[b, k].item() / length_penalty(len(ids), alpha), ids))
        out.append(max(finished[b], key=lambda f: f[0])[1] if finished[b] else [])
    return out


# --- the tokenizer ------------------------------------------------------------------------------------


@register_tokenizer("seq2seq-char")
class Seq2SeqTokenizer:
    """Characters plus three special tokens: ``<pad>`` (0), ``<s>`` (1, BOS) and ``</s>`` (2, EOS).

    ``encode`` maps characters only (the model adds BOS/EOS where they belong); ``decode``
    writes specials by name, or drops them with ``skip_special=True``.
    """

    SPECIALS = ("<pad>", "<s>", "</s>")

    def __init__(self, chars: list[str] | str):
        chars = list(chars)
        if not chars or len(set(chars)) != len(chars) or any(len(ch) != 1 for ch in chars):
            raise ValueError("chars must be a non-empty list of distinct single characters")
        self.chars = chars
        self.stoi = {ch: i + len(self.SPECIALS) for i, ch in enumerate(chars)}
        self.itos = {i: ch for ch, i in self.stoi.items()} | dict(enumerate(self.SPECIALS))

    @classmethod
    def train(cls, text: str) -> "Seq2SeqTokenizer":
        if not text:
            raise ValueError("cannot build a tokenizer from empty text")
        return cls(sorted(set(text)))

    @property
    def vocab_size(self) -> int:
        return len(self.chars) + len(self.SPECIALS)

    def encode(self, text: str) -> list[int]:
        try:
            return [self.stoi[ch] for ch in text]
        except KeyError:
            pos = next(i for i, ch in enumerate(text) if ch not in self.stoi)
            raise ValueError(f"unknown character {text[pos]!r} at position {pos} of {text!r}: it is not in this "
                             "tokenizer's vocabulary") from None

    def decode(self, ids, skip_special: bool = False) -> str:
        ids = ids.tolist() if hasattr(ids, "tolist") else list(ids)
        out = []
        for i in map(int, ids):
            if i not in self.itos:
                raise ValueError(f"unknown token id {i}: ids run from 0 to {self.vocab_size - 1}")
            if not (skip_special and i < len(self.SPECIALS)):
                out.append(self.itos[i])
        return "".join(out)

    def to_dict(self) -> dict:
        return {"type": "seq2seq-char", "chars": "".join(self.chars)}

    @classmethod
    def from_dict(cls, d: dict) -> "Seq2SeqTokenizer":
        if d.get("type") != "seq2seq-char" or "chars" not in d:
            raise ValueError(f"not a Seq2SeqTokenizer description: {sorted(d)}")
        return cls(d["chars"])

    def __repr__(self) -> str:
        return f"Seq2SeqTokenizer(vocab_size={self.vocab_size})"


def encode_batch(tokenizer, texts: list[str], eos: bool = False, pad: int = PAD_ID,
                 device=None) -> torch.Tensor:
    """Encode ``texts`` and pad them on the right into a (B, L) tensor (with EOS after each when
    ``eos``; pass ``pad=IGNORE_INDEX`` for targets)."""
    rows = [tokenizer.encode(t) + ([EOS_ID] if eos else []) for t in texts]
    L = max((len(r) for r in rows), default=0)
    return torch.tensor([r + [pad] * (L - len(r)) for r in rows], dtype=torch.long, device=device).view(len(rows), L)


# --- the toy task: dates written many ways -> ISO 8601 -------------------------------------------------

DATE_ALPHABET = "".join(sorted(set(
    "0123456789 ,./-" + "".join(calendar.month_name[1:]) + "".join(calendar.month_name[1:]).upper()
    + "".join(calendar.month_name[1:]).lower() + "thesofTHEOF"
)))
FIRST_DAY, LAST_DAY = datetime.date(1950, 1, 1), datetime.date(2049, 12, 31)  # two-digit years: 50-99 -> 19xx
N_DAYS = (LAST_DAY - FIRST_DAY).days + 1


def _ordinal(d: int) -> str:
    return str(d) + ("th" if 11 <= d % 100 <= 13 else {1: "st", 2: "nd", 3: "rd"}.get(d % 10, "th"))


DATE_FORMATS = (  # (name, how to write a date); month names come in Title, lower or UPPER case
    ("3 March 2021", lambda d, M, m: f"{d.day} {M} {d.year}"),
    ("3 Mar 2021", lambda d, M, m: f"{d.day} {m} {d.year}"),
    ("March 3, 2021", lambda d, M, m: f"{M} {d.day}, {d.year}"),
    ("March 3rd, 2021", lambda d, M, m: f"{M} {_ordinal(d.day)}, {d.year}"),
    ("Mar 3 2021", lambda d, M, m: f"{m} {d.day} {d.year}"),
    ("3rd March 2021", lambda d, M, m: f"{_ordinal(d.day)} {M} {d.year}"),
    ("the 3rd of March, 2021", lambda d, M, m: f"the {_ordinal(d.day)} of {M}, {d.year}"),
    ("03/03/21", lambda d, M, m: d.strftime("%d/%m/%y")),
    ("03/03/2021", lambda d, M, m: d.strftime("%d/%m/%Y")),
    ("3.3.2021", lambda d, M, m: f"{d.day}.{d.month}.{d.year}"),
    ("03-Mar-21", lambda d, M, m: f"{d.day:02d}-{m}-{d.strftime('%y')}"),
    ("2021/03/03", lambda d, M, m: d.strftime("%Y/%m/%d")),
    ("20210303", lambda d, M, m: d.strftime("%Y%m%d")),
)


def format_date(day: datetime.date, style: int, case: int = 0) -> str:
    """``day`` written in ``DATE_FORMATS[style]``; month names in Title (case 0), lower (1) or
    UPPER (2) case. Day-first order for all-digit forms (03/04/21 is 3 April 2021)."""
    M, m = calendar.month_name[day.month], calendar.month_abbr[day.month]
    if case == 1:
        M, m = M.lower(), m.lower()
    elif case == 2:
        M, m = M.upper(), m.upper()
    text = DATE_FORMATS[style][1](day, M, m)
    return text.upper() if case == 2 else text


def date_split_days(seed: int = 0, n_heldout: int = 3650) -> dict[str, torch.Tensor]:
    """Day numbers (0 = 1950-01-01) split into "train" and "val": held-out dates the model never
    sees in training, in any format. A fixed permutation from ``seed``."""
    perm = torch.randperm(N_DAYS, generator=torch.Generator().manual_seed(seed))
    return {"train": perm[n_heldout:], "val": perm[:n_heldout]}


def sample_dates(days: torch.Tensor, n: int, generator: torch.Generator) -> list[tuple[str, str]]:
    """``n`` (source, target) pairs: a random day from ``days``, a random format and case, and
    its ISO form, e.g. ("March 3rd, 2021", "2021-03-03"). All randomness from ``generator``."""
    idx = torch.randint(len(days), (n,), generator=generator)
    style = torch.randint(len(DATE_FORMATS), (n,), generator=generator)
    case = torch.randint(3, (n,), generator=generator)
    pairs = []
    for i, s, c in zip(idx.tolist(), style.tolist(), case.tolist()):
        day = FIRST_DAY + datetime.timedelta(days=int(days[i]))
        pairs.append((format_date(day, s, c), day.isoformat()))
    return pairs


def date_tokenizer() -> Seq2SeqTokenizer:
    return Seq2SeqTokenizer(DATE_ALPHABET)


def date_batch_fn(tokenizer, batch_size: int, seed: int = 0, device="cpu"):
    """A ``Trainer`` batch_fn: fresh random dates of the split each call -> (src (B, S), targets (B, T))."""
    days = date_split_days(seed)

    def batch_fn(split: str, generator: torch.Generator):
        pairs = sample_dates(days[split], batch_size, generator)
        src = encode_batch(tokenizer, [p[0] for p in pairs], device=device)
        tgt = encode_batch(tokenizer, [p[1] for p in pairs], eos=True, pad=IGNORE_INDEX, device=device)
        return src, tgt

    return batch_fn


def date_test_set(n: int = 1000, seed: int = 0) -> list[tuple[str, str]]:
    """``n`` fixed held-out (source, target) pairs, from days never used in training."""
    return sample_dates(date_split_days(seed)["val"], n, torch.Generator().manual_seed(seed + 12345))


# The chapter's model and training run (the command line uses them too).
DATES_MODEL = Seq2SeqConfig(vocab_size=len(DATE_ALPHABET) + 3, block_size=32, n_encoder_layers=2,
                            n_decoder_layers=2, n_head=4, n_embd=64, dropout=0.0, label_smoothing=0.1)


def dates_train_config(max_iters: int = 750, batch_size: int = 64, warmup_iters: int = 200):
    from .train import TrainConfig

    return TrainConfig(max_iters=max_iters, batch_size=batch_size, schedule="transformer", warmup_iters=warmup_iters,
                       beta1=0.9, beta2=0.98, weight_decay=0.0, grad_clip=1.0, eval_interval=250, eval_iters=4)


# --- what the command line calls ------------------------------------------------------------------------


def translate(model: Seq2Seq, tokenizer, texts: list[str], beam_size: int = 1, max_len: int | None = None,
              alpha: float = 0.6) -> list[str]:
    """Translate ``texts`` with greedy decoding (``beam_size=1``) or beam search."""
    if not isinstance(beam_size, int) or beam_size < 1:
        raise ValueError(f"beam_size must be an integer >= 1 (1 is greedy decoding), got {beam_size!r}")
    if not texts:
        return []
    if any(len(t) == 0 for t in texts):
        raise ValueError("cannot translate an empty text: every source needs at least one character")
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    src = encode_batch(tokenizer, list(texts), device=device)
    ids = greedy_decode(model, src, max_len) if beam_size == 1 else beam_search(model, src, beam_size, max_len, alpha)
    model.train(was_training)
    return [tokenizer.decode(row, skip_special=True) for row in ids]


def exact_match(model: Seq2Seq, tokenizer, pairs: list[tuple[str, str]], beam_size: int = 1,
                batch_size: int = 250) -> float:
    """Share of (source, target) pairs translated exactly right."""
    right = 0
    for i in range(0, len(pairs), batch_size):
        chunk = pairs[i:i + batch_size]
        got = translate(model, tokenizer, [source for source, _ in chunk], beam_size)
        right += sum(g == target for g, (_, target) in zip(got, chunk))
    return right / max(1, len(pairs))


def train_dates(out_dir: str | Path | None, max_iters: int | None = None, device: str = "cpu",
                progress: bool = True, resume: bool = False, resume_hint: str | None = None):
    """Train the chapter's date normaliser and write its checkpoint (tokenizer included) to
    ``out_dir/ckpt.pt``; with ``resume``, continue the run saved there (``max_iters`` then
    extends it). ``resume_hint`` is what to print after Ctrl-C. Returns the
    :class:`~course_lib.train.Trainer`."""
    from .checkpoint import CHECKPOINT_NAME, load_checkpoint
    from .train import Trainer
    from .utils import seed_everything

    tokenizer = date_tokenizer()
    if resume:
        path = Path(out_dir) / CHECKPOINT_NAME
        batch_size = load_checkpoint(path)["train_config"]["batch_size"]
        trainer = Trainer.resume(path, batch_fn=date_batch_fn(tokenizer, batch_size, device=device),
                                 device=device, max_iters=max_iters, progress=progress)
    else:
        config = dates_train_config() if max_iters is None else dates_train_config(max_iters)
        seed_everything(config.seed)
        trainer = Trainer(Seq2Seq(DATES_MODEL), config=config, device=device, out_dir=out_dir, tokenizer=tokenizer,
                          batch_fn=date_batch_fn(tokenizer, config.batch_size, device=device), progress=progress)
    trainer.trained_on = {"command": "train-dates", "preset": None, "text": None, "text_sha256": None}
    if resume_hint is not None:
        trainer.resume_hint = resume_hint
    trainer.train()
    return trainer
