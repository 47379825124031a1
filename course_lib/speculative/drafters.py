"""Drafters: cheap guessers of the next k tokens for speculative decoding.

A drafter has ``vocab_size`` and ``propose(tokens, k, temperature, top_k, top_p, generator)``,
which returns k token ids and, when temperature > 0, the (k, V) distributions q they were drawn
from (the accept/reject rule needs q; greedy needs only the tokens). Any drafter is exact: a poor
one only lowers the acceptance rate.

- :class:`NGramDrafter`: counts of the next token after each (n - 1)-token context in the training
  split, backing off to shorter contexts where a context was never seen. No training, no weights.
- :class:`ModelDrafter`: a small language model (e.g. a 1-layer GPT trained on the same text), run
  with its own KV cache.

Shapes: k draft tokens, V vocabulary size.
"""
from __future__ import annotations

import torch

from ..checkpoint import load_model
from ..model import GPT
from .cached import CachedLM
from .rule import probabilities


def _draw(probs: torch.Tensor, generator: torch.Generator | None) -> int:
    return int(torch.multinomial(probs, 1, generator=generator))


class NGramDrafter:
    """An n-gram table counted from token ids (a 1-D tensor or list), with back-off.

    ``n`` = 3 is a trigram: the next token's counts after the last 2 tokens. The draft distribution
    at temperature T is softmax(log(count + ``smoothing``) / T) (counts to the power 1/T), so that
    the draft sharpens as the target does; greedy takes the most counted token."""

    def __init__(self, ids, vocab_size: int, n: int = 3, smoothing: float = 0.01):
        if not isinstance(n, int) or n < 1:
            raise ValueError(f"n must be an integer >= 1 (3 is a trigram), got {n!r}")
        ids = torch.as_tensor(ids, dtype=torch.long).flatten()
        if ids.numel() < n or int(ids.min()) < 0 or int(ids.max()) >= vocab_size:
            raise ValueError(f"the n-gram table needs at least {n} token ids in "
                             f"[0, {vocab_size - 1}]")
        self.vocab_size, self.n, self.smoothing = vocab_size, n, smoothing
        self.tables: list[dict[tuple[int, ...], torch.Tensor]] = []  # tables[j]: context length j
        for j in range(n):
            windows = ids.unfold(0, j + 1, 1)  # (N - j, j + 1): context then next token
            key = torch.zeros(windows.shape[0], dtype=torch.long)
            for col in range(j):  # the context as one number in base V
                key = key * vocab_size + windows[:, col]
            contexts, row_of = torch.unique(key, return_inverse=True)
            counts = torch.zeros(len(contexts), vocab_size)
            counts.index_put_((row_of, windows[:, -1]), torch.ones(len(key)), accumulate=True)
            firsts = torch.zeros(len(contexts), dtype=torch.long).scatter_(
                0, row_of, torch.arange(len(key)))
            ctx_rows = windows[firsts, :j].tolist()  # one occurrence of each context
            self.tables.append({tuple(c): counts[i] for i, c in enumerate(ctx_rows)})
    def counts(self, tokens: list[int]) -> torch.Tensor:
        """(V,) the counts after the longest context of ``tokens`` that the table has seen."""
        for j in range(min(self.n - 1, len(tokens)), -1, -1):
            ctx = tuple(tokens[len(tokens) - j :]) if j else ()
            row = self.tables[j].get(ctx)
            if row is not None:
                return row
        return self.tables[0][()]

    def propose(self, tokens, k, temperature=0.0, top_k=None, top_p=None, generator=None):
        tokens = list(tokens)
        out, qs = [], []
        for _ in range(k):
            c = self.counts(tokens)
            if temperature == 0:
                nxt = int(c.argmax())
            else:
                q = probabilities((c + self.smoothing).log(), temperature, top_k, top_p)
                nxt = _draw(q, generator)
                qs.append(q)
            out.append(nxt)
            tokens.append(nxt)
        return out, (torch.stack(qs) if qs else None)


class ModelDrafter:
    """A language model (``model(idx) -> (logits, loss)`` with ``config.block_size``, ``n_layer``)
    as the drafter, with a KV cache that follows the text (rewound after rejections)."""

    def __init__(self, model):
        self.model = model
        self.vocab_size = model.config.vocab_size
        self.lm = CachedLM(model)

    def propose(self, tokens, k, temperature=0.0, top_k=None, top_p=None, generator=None):
        tokens = list(tokens)
        out, qs = [], []
        for _ in range(k):
            logits = self.lm.logits(tokens, 1)[0]  # (V,)
            if temperature == 0:
                nxt = int(logits.argmax())
            else:
                q = probabilities(logits, temperature, top_k, top_p)
                if generator is not None and generator.device != q.device:
                    q = q.cpu()
                nxt = _draw(q, generator)
                qs.append(q.cpu())
            out.append(nxt)
            tokens.append(nxt)
        return out, (torch.stack(qs) if qs else None)


def drafter_from_checkpoint(path, target, target_checkpoint: dict, device="cpu") -> ModelDrafter:
    """The GPT stored at ``path`` as a drafter for ``target`` (a GPT, loaded from
    ``target_checkpoint``): refused in one line when either is another kind of model or when the
    two do not share one tokenizer (a draft must speak the target's tokens)."""
    if type(target) is not GPT:
        raise ValueError("--draft needs a GPT as the target, and the checkpoint holds a "
                         f"{type(target).__name__}: "
                         "sample without --draft, or give a GPT checkpoint (from `train`)")
    draft, ckpt = load_model(path, device)
    if type(draft) is not GPT:
        raise ValueError(f"the draft {path} holds a {type(draft).__name__}, not a GPT: "
                         "give a GPT checkpoint trained on the target's tokens as --draft")
    if ckpt.get("tokenizer") != target_checkpoint.get("tokenizer") or \
            draft.config.vocab_size != target.config.vocab_size:
        raise ValueError(f"the draft {path} has another vocabulary than the target "
                         f"({draft.config.vocab_size} and {target.config.vocab_size} tokens, and "
                         "another tokenizer): train the draft on the target's tokenizer and text")
    return ModelDrafter(draft)
