"""The bigram language model and the count-based baselines it is measured against
(chapters 1-2).

A bigram model predicts the next token from the current token alone: its only
parameter is a (V, V) table whose row ``i`` holds the logits of the token that
follows token ``i``. Counting which token follows which gives the same kind of
table in closed form (:func:`bigram_probs`), and :meth:`BigramLanguageModel.from_probs`
turns such a table into a model.

Shapes: B batch, T time, V vocabulary size.
"""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import asdict, dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from .registry import register_model
from .config import Rule, check_fields, config_from_dict
from .utils import check_fits_in_memory


# --- count-based baselines ------------------------------------------------------------------


def unigram_entropy(tokens) -> float:
    """Entropy, in nats, of the distribution of tokens (characters of a string, or ids of a
    1-D tensor / list): H = -sum_c p(c) ln p(c), with p(c) the share of the tokens equal to c.

    It is the loss (mean cross-entropy) of the best model that ignores context entirely.
    Divide by ln 2 for bits.
    """
    if isinstance(tokens, torch.Tensor):
        tokens = tokens.flatten().tolist()
    counts = Counter(tokens)
    n = sum(counts.values())
    if n == 0:
        raise ValueError("the entropy of an empty sequence is undefined: pass at least one token")
    return -sum(c / n * math.log(c / n) for c in counts.values())


def _check_ids(data: torch.Tensor, vocab_size: int) -> torch.Tensor:
    data = torch.as_tensor(data)
    if data.dim() != 1:
        raise ValueError(f"data must be a 1-D tensor of token ids, got shape {tuple(data.shape)}")
    if len(data) < 2:
        raise ValueError(f"data has {len(data)} tokens; a bigram needs at least 2")
    if data.min() < 0 or data.max() >= vocab_size:
        raise ValueError(f"token ids must lie in [0, {vocab_size - 1}] (vocab_size {vocab_size}), "
                         f"got ids from {int(data.min())} to {int(data.max())}")
    return data.long()


def bigram_counts(data: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """(V, V) int64 counts: entry [i, j] is how often token j directly follows token i in
    the 1-D token tensor ``data``."""
    data = _check_ids(data, vocab_size)
    pairs = data[:-1] * vocab_size + data[1:]  # one number per (current, next) pair
    return torch.bincount(pairs, minlength=vocab_size * vocab_size).view(vocab_size, vocab_size)


def bigram_probs(data: torch.Tensor, vocab_size: int, smoothing: float = 1.0) -> torch.Tensor:
    """(V, V) float32 table of P(next = j | current = i): the counts of :func:`bigram_counts`
    plus ``smoothing`` (add-k smoothing; 1 is Laplace's rule), each row divided by its sum.

    With ``smoothing=0`` this is the maximum-likelihood bigram model of ``data``: no bigram
    model has a lower mean cross-entropy on ``data`` itself. A row of a token that never
    occurs (or is never followed) is then all zeros; smoothing > 0 keeps every probability
    positive, so an unseen pair in new text costs a finite loss.
    """
    if smoothing < 0:
        raise ValueError(f"smoothing must be >= 0, got {smoothing}")
    counts = bigram_counts(data, vocab_size).double() + smoothing
    totals = counts.sum(dim=1, keepdim=True)
    return (counts / totals.clamp(min=1e-300)).float()  # each row sums to 1 (or is all 0)


# --- the model ------------------------------------------------------------------------------


# What each BigramConfig field may hold (checked in __post_init__).
BIGRAM_CONFIG_RULES = {"vocab_size": Rule(int, 1), "block_size": Rule(int, 1)}


@dataclass
class BigramConfig:
    """What a :class:`BigramLanguageModel` is: its vocabulary size, and the context length of
    the windows it is trained and sampled on (``block_size``). The model itself looks at one
    token; ``block_size`` is there so that the course's :class:`~course_lib.train.Trainer`
    and :func:`~course_lib.generate.generate` can treat it like the GPT."""

    vocab_size: int = 65
    block_size: int = 8

    def __post_init__(self):
        check_fields(self, BIGRAM_CONFIG_RULES)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "BigramConfig":
        return config_from_dict(cls, d)


@register_model("bigram", BigramConfig)
class BigramLanguageModel(nn.Module):
    """The simplest neural language model: a (V, V) table of logits, looked up by the
    current token.

    ``forward(idx, targets=None)`` takes ids ``idx`` (B, T) and returns ``(logits, loss)``:
    logits (B, T, V), where ``logits[b, t]`` is row ``idx[b, t]`` of the table, and the mean
    cross-entropy against ``targets`` (B, T) when they are given, else ``None`` (the same
    interface as :class:`~course_lib.model.GPT`, so the Trainer and the samplers work as is).

    The table starts as small random numbers (std ``init_std``), so the untrained model
    predicts almost uniformly and its loss is close to ln V.
    """

    # Zero probabilities of the counting model (from_probs) are -inf logits: a valid table, which
    # checkpoints save and load (load_weights still refuses NaN and +inf there).
    minus_inf_allowed = ("token_embedding_table.weight",)

    def __init__(self, vocab_size: int | BigramConfig = 65, block_size: int = 8,
                 init_std: float = 0.02):
        super().__init__()
        if isinstance(vocab_size, BigramConfig):
            self.config = vocab_size
        else:
            self.config = BigramConfig(vocab_size=vocab_size, block_size=block_size)
        V = self.config.vocab_size
        check_fits_in_memory(V * V, f"a bigram model of vocab_size {V:,} (a V x V table)",
                             "choose a smaller vocabulary")
        self.token_embedding_table = nn.Embedding(V, V)  # row i: logits of the token after token i
        nn.init.normal_(self.token_embedding_table.weight, mean=0.0, std=init_std)

    @classmethod
    def from_probs(cls, probs: torch.Tensor, block_size: int = 8) -> "BigramLanguageModel":
        """A model whose table is ``ln probs``: softmax of row i gives back row i of ``probs``
        (e.g. the counting model of :func:`bigram_probs`). Zero probabilities become -inf."""
        if probs.dim() != 2 or probs.shape[0] != probs.shape[1]:
            raise ValueError(f"probs must be a (V, V) table, got shape {tuple(probs.shape)}")
        model = cls(probs.shape[0], block_size)
        with torch.no_grad():
            model.token_embedding_table.weight.copy_(probs.float().log())
        return model

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None,
                ignore_index: int = -100):
        V = self.config.vocab_size
        if idx.dim() != 2:
            raise ValueError(f"idx must have shape (B, T), got {tuple(idx.shape)}")
        if idx.numel() and (idx.min() < 0 or idx.max() >= V):
            raise ValueError(
                f"token ids must lie in [0, {V - 1}] (vocab_size {V}), got ids from "
                f"{int(idx.min())} to {int(idx.max())}: was the text encoded with another "
                "tokenizer?"
            )
        B, T = idx.shape
        logits = self.token_embedding_table(idx)  # (B, T, V)
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(B * T, V), targets.reshape(B * T),
                                   ignore_index=ignore_index)
        return logits, loss
