"""A classification head on a pretrained GPT (chapter 15): who speaks this line?

The second kind of fine-tuning: instead of generating text, the model picks one of K labels. We
replace the LM head, a (V, C) matrix that scores every token, by a (K, C) one that scores every
label, and read it at the last position of the sequence: the only position whose causal attention
has seen the whole text (Radford et al. 2018 read GPT the same way).

The task comes from tiny Shakespeare: the opening of a speech (up to ``block_size`` characters)
and four speakers, one from each of four plays. The baselines are the majority class and a bag
of words (multinomial naive Bayes), which knows the words each speaker uses but not their order.

Two ways to read a whole text out of a causal model (``pooling``): the **last** real token's
hidden state (the only one that saw everything), or the **mean** over the real tokens. And two
ways to train: the **linear probe** (GPT frozen, only the head learns: :func:`text_features`
once, then :func:`fit_probe`, a logistic regression) and **full fine-tuning**. Chapter 15 prints
its figures from its own cells; ``benchmarks/classify_speakers.py`` runs the longer seeded sweep
(full fine-tuning on three splits, both poolings, learning curves), whose results are not stored
yet.

A caveat the chapter states: the pretrained model saw 90% of tiny Shakespeare (without labels)
while pretraining, so many of these speeches are not new text to it, as web text is not new to
a model pretrained on the web.

Shapes: B batch, T time, C channels, K classes.
"""
from __future__ import annotations

import math
from collections import Counter

import torch
import torch.nn as nn
import torch.nn.functional as F

from .data import load_text
from .model import GPT

# One speaker from each of four plays: Coriolanus, Romeo and Juliet, Measure for Measure and
# The Taming of the Shrew; each speaks between 155 and 189 times in tiny Shakespeare.
SPEAKERS = ("MENENIUS", "ROMEO", "DUKE VINCENTIO", "PETRUCHIO")
PAD = -1  # a left pad in a batch of ids; GPTClassifier turns it into an attention mask
POOLINGS = ("last", "mean")


def speeches(text: str, speakers=SPEAKERS) -> list[tuple[str, int]]:
    """``(speech, label)`` for every speech of ``speakers`` in ``text``: a speech is a paragraph
    whose first line is "NAME:"; the label is the speaker's index in ``speakers``."""
    out = []
    for block in text.split("\n\n"):
        first, _, body = block.strip("\n").partition("\n")
        if first.endswith(":") and first[:-1] in speakers and body:
            out.append((body, speakers.index(first[:-1])))
    return out


def speaker_splits(test_fraction: float = 0.2, seed: int = 0, speakers=SPEAKERS) -> dict[str, list]:
    """The speeches of ``speakers`` shuffled with ``seed`` and split into "train" and "val"."""
    data = speeches(load_text("tinyshakespeare"), speakers)
    order = torch.randperm(len(data), generator=torch.Generator().manual_seed(seed)).tolist()
    n_val = round(test_fraction * len(data))
    return {"train": [data[i] for i in order[n_val:]], "val": [data[i] for i in order[:n_val]]}


def encode_left(tokenizer, texts: list[str], T: int) -> torch.Tensor:
    """The first ``T`` characters of each text as ids, padded on the left with PAD: (B, T).
    Left padding puts every row's last real token in the last column."""
    rows = [tokenizer.encode(t[:T]) for t in texts]
    return torch.tensor([[PAD] * (T - len(r)) + r for r in rows], dtype=torch.long)


class GPTClassifier(nn.Module):
    """A GPT whose LM head is replaced by a K-way classification head.

    ``forward(idx, labels=None)``: ``idx`` (B, T) token ids, left-padded with PAD (-1) ->
    ``(logits (B, K), loss)``, read at the last position (``pooling="last"``) or averaged over
    the real tokens (``pooling="mean"``; the head is linear, so the mean of the per-position
    logits is the head of the mean hidden state).
    ``train_head_only=True`` freezes the GPT (a "linear probe"): only the head learns.
    """

    def __init__(self, gpt: GPT, n_classes: int, train_head_only: bool = False,
                 pooling: str = "last"):
        super().__init__()
        if pooling not in POOLINGS:
            raise ValueError(f"pooling must be one of {POOLINGS}, got {pooling!r}")
        self.gpt, self.pooling = gpt, pooling
        self.config = gpt.config  # the Trainer reads the model's config
        if train_head_only:
            gpt.requires_grad_(False)
        # A fresh (K, C) head; the token embedding keeps its own matrix even when it was tied.
        gpt.lm_head = nn.Linear(gpt.config.n_embd, n_classes, bias=True,
                                device=gpt.wte.weight.device)
        nn.init.normal_(gpt.lm_head.weight, std=0.02)
        nn.init.zeros_(gpt.lm_head.bias)

    def forward(self, idx: torch.Tensor, labels: torch.Tensor | None = None):
        mask = idx != PAD  # (B, T): True on real tokens
        # (B, T, K); pads get positions 0..
        logits, _ = self.gpt(idx.clamp(min=0), attention_mask=mask)
        logits = pool(logits, mask, self.pooling)  # (B, K)
        loss = F.cross_entropy(logits, labels) if labels is not None else None
        return logits, loss


def pool(h: torch.Tensor, mask: torch.Tensor, pooling: str) -> torch.Tensor:
    """(B, T, D) per-position vectors -> (B, D): the last column (every row's last real token,
    with left padding) or the mean over the real tokens (``mask`` (B, T), True on them)."""
    if pooling == "last":
        return h[:, -1, :]
    m = mask.unsqueeze(-1).to(h.dtype)  # (B, T, 1)
    return (h * m).sum(1) / m.sum(1).clamp(min=1)


@torch.no_grad()
def text_features(gpt: GPT, tokenizer, texts: list[str], pooling: str = "last",
                  batch_size: int = 128) -> torch.Tensor:
    """The frozen GPT's final hidden states (after the last LayerNorm, what its LM head reads),
    pooled over each text's first ``block_size`` characters: (N, C). What a linear probe reads."""
    # the model's "logits" are then its hidden states
    head, gpt.lm_head = gpt.lm_head, nn.Identity()
    was_training = gpt.training
    gpt.eval()
    try:
        device = gpt.wte.weight.device
        out = []
        for i in range(0, len(texts), batch_size):
            idx = encode_left(tokenizer, texts[i:i + batch_size], gpt.config.block_size).to(device)
            mask = idx != PAD
            h, _ = gpt(idx.clamp(min=0), attention_mask=mask)  # (B, T, C)
            out.append(pool(h, mask, pooling))
        return torch.cat(out)
    finally:
        gpt.lm_head = head
        gpt.train(was_training)


def fit_probe(features: torch.Tensor, labels: torch.Tensor, n_classes: int,
              weight_decay: float = 1e-2, steps: int = 300, lr: float = 0.05,
              seed: int = 0) -> nn.Linear:
    """A linear probe: logistic regression (a (K, C) ``nn.Linear``) on fixed ``features`` (N, C),
    full-batch AdamW on the cross-entropy for ``steps`` steps. Features are standardised first
    (their mean and spread folded into the returned layer), so one learning rate fits any model."""
    mean, std = features.mean(0), features.std(0).clamp(min=1e-6)
    z = (features - mean) / std
    generator = torch.Generator().manual_seed(seed)
    head = nn.Linear(features.shape[1], n_classes)
    with torch.no_grad():
        head.weight.copy_(torch.randn(head.weight.shape, generator=generator) * 0.01)
        head.bias.zero_()
    opt = torch.optim.AdamW(head.parameters(), lr=lr, weight_decay=weight_decay)
    for _ in range(steps):
        opt.zero_grad()
        F.cross_entropy(head(z), labels).backward()
        opt.step()
    with torch.no_grad():  # fold the standardisation in: head(z) = (W / std) x + (b - W mean / std)
        folded = nn.Linear(features.shape[1], n_classes)
        folded.weight.copy_(head.weight / std)
        folded.bias.copy_(head.bias - (head.weight / std) @ mean)
    return folded


def confusion_matrix(predicted, labels, n_classes: int) -> torch.Tensor:
    """(K, K) counts: row = true label, column = predicted label."""
    m = torch.zeros(n_classes, n_classes, dtype=torch.long)
    for p, y in zip(torch.as_tensor(predicted).tolist(), torch.as_tensor(labels).tolist()):
        m[y, p] += 1
    return m


@torch.no_grad()
def predict(model: "GPTClassifier", tokenizer, texts: list[str],
            batch_size: int = 128) -> torch.Tensor:
    """The most likely class of each text: (N,)."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    out = [model(encode_left(tokenizer, texts[i:i + batch_size],
                             model.config.block_size).to(device))[0].argmax(-1)
           for i in range(0, len(texts), batch_size)]
    model.train(was_training)
    return torch.cat(out).cpu()


def classify_batch_fn(splits: dict[str, list], tokenizer, batch_size: int, T: int, device="cpu"):
    """A ``Trainer`` batch_fn: random ``(ids (B, T), labels (B,))`` from ``splits[split]``."""
    def batch_fn(split: str, generator: torch.Generator):
        data = splits[split]
        pick = torch.randint(len(data), (batch_size,), generator=generator).tolist()
        x = encode_left(tokenizer, [data[i][0] for i in pick], T)
        y = torch.tensor([data[i][1] for i in pick], dtype=torch.long)
        return x.to(device), y.to(device)

    return batch_fn


def accuracy(model: GPTClassifier, tokenizer, examples: list[tuple[str, int]],
             batch_size: int = 128) -> float:
    """Share of ``(text, label)`` examples whose most likely class is the label."""
    got = predict(model, tokenizer, [t for t, _ in examples], batch_size)
    return ((got == torch.tensor([y for _, y in examples])).float().mean().item() if examples
            else 0.0)


# --- baselines ------------------------------------------------------------------------------------


def majority_accuracy(train: list[tuple[str, int]], test: list[tuple[str, int]]) -> float:
    """Accuracy of always answering the most frequent training label."""
    label = Counter(y for _, y in train).most_common(1)[0][0]
    return sum(y == label for _, y in test) / max(1, len(test))


def words(text: str) -> list[str]:
    return "".join(c.lower() if c.isalpha() or c == "'" else " " for c in text).split()


class NaiveBayes:
    """Multinomial naive Bayes over lower-cased words with add-one (Laplace) smoothing:
    predict argmax_k log P(k) + sum over the words w of the text of log P(w | k), where
    P(w | k) = (count of w in class k + 1) / (words in class k + vocabulary size + 1)."""

    def __init__(self, train: list[tuple[str, int]], max_chars: int | None = None):
        self.max_chars = max_chars  # read only the first characters, as the GPT does
        self.labels = sorted({y for _, y in train})
        self.prior = Counter(y for _, y in train)
        self.n_train = len(train)
        self.counts = {k: Counter() for k in self.labels}
        for text, y in train:
            self.counts[y].update(words(text[:max_chars]))
        self.vocab = set().union(*self.counts.values())
        self.totals = {k: sum(c.values()) for k, c in self.counts.items()}

    def score(self, text: str, k: int) -> float:
        n = len(self.vocab) + 1  # +1: one slot for every unseen word
        return math.log(self.prior[k] / self.n_train) + sum(
            math.log((self.counts[k][w] + 1) / (self.totals[k] + n))
            for w in words(text[: self.max_chars])
        )

    def predict(self, text: str) -> int:
        return max(self.labels, key=lambda k: self.score(text, k))

    def accuracy(self, test: list[tuple[str, int]]) -> float:
        return sum(self.predict(t) == y for t, y in test) / max(1, len(test))
