"""Speculative decoding: a drafter guesses k tokens, the target checks them in one forward.

:func:`speculative_generate` returns what :func:`course_lib.generate.generate` returns for the
target alone: token for token at temperature 0 (greedy), in distribution when sampling (the accept/
reject rule of :mod:`.rule`). It is faster when the drafter is cheap and often right, because one
target forward over k + 1 positions costs about one forward over one position while the hardware
has idle capacity (most so on a GPU; on a busy CPU less).

Shapes: T time, V vocabulary size, k draft tokens.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..generate import check_sampling_args
from .cached import CachedLM
from .rule import greedy_round, probabilities, speculative_round


@dataclass
class SpeculativeStats:
    """What one call did: ``kept`` per round (draft tokens accepted), ``drafted`` per round,
    ``target_calls`` (target forwards) and ``new_tokens``."""
    kept: list[int] = field(default_factory=list)
    drafted: list[int] = field(default_factory=list)
    target_calls: int = 0
    new_tokens: int = 0

    @property
    def tokens_per_call(self) -> float:
        return self.new_tokens / max(self.target_calls, 1)

    @property
    def acceptance(self) -> float:
        """Kept draft tokens over drafted ones (the share of the draft's work that was used)."""
        return sum(self.kept) / max(sum(self.drafted), 1)


def check_drafter(target, drafter) -> None:
    """One line naming the problem when ``drafter`` cannot draft for ``target``."""
    if not callable(getattr(drafter, "propose", None)) or not hasattr(drafter, "vocab_size"):
        raise TypeError("drafter must have vocab_size and propose(tokens, k, ...) "
                        f"(an NGramDrafter or ModelDrafter), got {type(drafter).__name__}")
    V = target.config.vocab_size
    if drafter.vocab_size != V:
        raise ValueError(f"the draft has a vocabulary of {drafter.vocab_size} tokens and the "
                         f"target {V}: a draft must use the target's tokenizer "
                         "(train it on the same tokens)")


@torch.no_grad()
def speculative_generate(target, drafter, idx: torch.Tensor, max_new_tokens: int, k: int = 4,
                         temperature: float = 0.0, top_k: int | None = None,
                         top_p: float | None = None, generator: torch.Generator | None = None,
                         return_stats: bool = False):
    """Extend ``idx`` (1, T) by ``max_new_tokens`` tokens of ``target`` (a GPT), ``k`` drafted at a
    time by ``drafter``; returns (1, T + max_new_tokens), and the :class:`SpeculativeStats` too with
    ``return_stats``. ``generator``: a CPU ``torch.Generator`` for the draws (drafts, uniforms,
    residual and bonus tokens)."""
    check_sampling_args(temperature, top_k, top_p, max_new_tokens)
    check_drafter(target, drafter)
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise ValueError(f"k must be an integer >= 1 (draft tokens per round), got {k!r}")
    if idx.dim() != 2 or idx.shape[0] != 1 or idx.shape[1] == 0:
        raise ValueError("idx must have shape (1, T) with T >= 1 (one prompt), "
                         f"got {tuple(idx.shape)}")
    was_training = target.training
    target.eval()
    lm = CachedLM(target)
    tokens = idx[0].tolist()
    start = len(tokens)
    stats = SpeculativeStats()
    while len(tokens) - start < max_new_tokens:
        left = max_new_tokens - (len(tokens) - start)
        n_draft = min(k, left - 1)  # a round emits up to n_draft + 1 tokens
        draft, q = (drafter.propose(tokens, n_draft, temperature, top_k, top_p, generator)
                    if n_draft else ([], None))
        logits = lm.logits(tokens + draft, n_draft + 1)  # (n_draft + 1, V): one target call
        if temperature == 0:
            emitted, kept = greedy_round(logits, draft)
        else:
            p = probabilities(logits, temperature, top_k, top_p).cpu()
            emitted, kept = speculative_round(p, q.cpu() if q is not None else q, draft, generator)
        tokens.extend(emitted)
        if n_draft:
            stats.kept.append(kept)
            stats.drafted.append(n_draft)
    stats.target_calls = lm.calls
    stats.new_tokens = len(tokens) - start
    target.train(was_training)
    out = torch.tensor([tokens], dtype=torch.long, device=idx.device)
    return (out, stats) if return_stats else out


def speculative_text(target, drafter, tokenizer, prompt: str, max_new_tokens: int, k: int = 4,
                     seed: int | None = None, **sampling) -> tuple[str, SpeculativeStats]:
    """:func:`course_lib.generate.generate_text` with a drafter: the prompt and its continuation,
    and the :class:`SpeculativeStats` of the call."""
    device = next(target.parameters()).device
    idx = torch.tensor([tokenizer.encode(prompt)], dtype=torch.long, device=device)
    generator = None if seed is None else torch.Generator().manual_seed(seed)
    out, stats = speculative_generate(target, drafter, idx, max_new_tokens, k, generator=generator,
                                      return_stats=True, **sampling)
    return tokenizer.decode(out[0].tolist()), stats
