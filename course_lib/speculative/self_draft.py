"""Drafter 3: self-speculative decoding with a GPT's own multi-token prediction heads.

A GPT trained with ``mtp_heads`` D (:mod:`course_lib.mtp`) drafts for itself: the hidden state z
at the last verified position already holds, besides the next-token logits, D guesses of the
tokens after it (head j: j + 1 places ahead). So a round is one forward of the target over the
last emitted token and k <= D drafted ones, with the KV cache; the drafts of the next round are
read off the hidden state of the last kept position, for k small matrix products and no forward
of anything else (Stern et al. 2018's blockwise parallel decoding; Gloeckle et al. 2024, section
3.2; Medusa, Cai et al. 2024). The verification is :mod:`.rule`'s, so the output is the model's own
greedy text at temperature 0 and its own distribution when sampling: head j's guess does not see
the tokens drafted before it, which only lowers the acceptance, never the exactness (the rule
needs the distribution q each draft was drawn from, whatever it conditions on).

The prompt and the new tokens stay within ``block_size`` (the KV cache's reach with learned
positions); past it use :func:`.decode.speculative_generate` with another drafter.

Shapes: T time, C channels, V vocabulary size, k draft tokens, D extra heads.
"""

from __future__ import annotations

import torch

from ..attention import KVCache
from ..generate import check_sampling_args
from .decode import SpeculativeStats
from .rule import greedy_round, probabilities, speculative_round


def check_mtp_model(model) -> int:
    """D, the model's extra heads; one line naming the fix when it has none."""
    heads = getattr(getattr(model, "config", None), "mtp_heads", None)
    if not heads or getattr(model, "mtp", None) is None:
        raise ValueError(
            "self-speculative decoding drafts with the model's multi-token prediction heads, and "
            "this "
            f"{type(model).__name__} has none: train it with --set mtp_heads=3 "
            "(chapter 22), or use "
            "speculative_generate with another drafter"
        )
    return heads


def _pick(
    logits: torch.Tensor, temperature, top_k, top_p, generator
) -> tuple[list[int], torch.Tensor | None]:
    """(n, V) logits -> n tokens (argmax at temperature 0, else one draw from each row's
    distribution) and the (n, V) distributions drawn from (None at temperature 0)."""
    if temperature == 0:
        return logits.argmax(-1).tolist(), None
    q = probabilities(logits, temperature, top_k, top_p).cpu()
    return torch.multinomial(q, 1, generator=generator)[:, 0].tolist(), q


@torch.no_grad()
def self_speculative_generate(
    model,
    idx: torch.Tensor,
    max_new_tokens: int,
    k: int | None = None,
    temperature: float = 0.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
    return_stats: bool = False,
):
    """Extend ``idx`` (1, T) by ``max_new_tokens`` tokens of ``model`` (a GPT with ``mtp_heads``),
    drafting ``k`` (default D, at most D) tokens a round with its own heads; returns
    (1, T + max_new_tokens) and, with ``return_stats``, a :class:`.decode.SpeculativeStats`.
    ``generator``: a CPU generator."""
    check_sampling_args(temperature, top_k, top_p, max_new_tokens)
    D = check_mtp_model(model)
    k = D if k is None else k
    if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= D:
        raise ValueError(
            f"k must be an integer in [1, {D}]: the model has {D} extra heads, one per draft "
            "token; "
            f"got {k!r}"
        )
    if idx.dim() != 2 or idx.shape[0] != 1 or idx.shape[1] == 0:
        raise ValueError(
            f"idx must have shape (1, T) with T >= 1 (one prompt), got {tuple(idx.shape)}"
        )
    if idx.shape[1] + max_new_tokens > model.config.block_size:
        raise ValueError(
            f"the prompt ({idx.shape[1]} tokens) and max_new_tokens ({max_new_tokens}) exceed "
            "block_size "
            f"{model.config.block_size}: generate fewer tokens, or use "
            "speculative_generate"
        )
    if max_new_tokens == 0:
        return (idx.clone(), SpeculativeStats()) if return_stats else idx.clone()
    was_training = model.training
    model.eval()
    cache = KVCache(model.config.n_layer, model.config.block_size)
    tokens, stats = idx[0].tolist(), SpeculativeStats()
    z = model.hidden(idx, cache=cache)[0, -1]  # (C,) the prompt's last position, now in the cache
    first, _ = _pick(model.lm_head(z)[None], temperature, top_k, top_p, generator)
    tokens += first
    calls = 1
    while len(tokens) - idx.shape[1] < max_new_tokens:
        n = min(
            k, max_new_tokens - (len(tokens) - idx.shape[1]) - 1
        )  # a round emits up to n + 1 tokens
        draft, q = (
            _pick(model.mtp.logits(z, model.lm_head)[:n], temperature, top_k, top_p, generator)
            if n
            else ([], None)
        )
        past = cache.length  # every token but the last emitted one
        feed = torch.tensor(
            [tokens[-1:] + draft], dtype=torch.long, device=idx.device
        )  # (1, n + 1)
        zs = model.hidden(feed, cache=cache)[0]  # (n + 1, C): one target forward
        calls += 1
        logits = model.lm_head(
            zs
        )  # (n + 1, V): the target's guesses after the last token and each draft
        if temperature == 0:
            emitted, kept = greedy_round(logits, draft)
        else:
            emitted, kept = speculative_round(
                probabilities(logits, temperature, top_k, top_p).cpu(), q, draft, generator
            )
        for (
            layer
        ) in cache.layers:  # keep the last token and the kept drafts; drop the rejected ones
            layer.length = past + 1 + kept
        z = zs[
            kept
        ]  # the hidden state that made the round's last token: the next drafts come from it
        tokens += emitted
        if n:
            stats.kept.append(kept)
            stats.drafted.append(n)
    stats.target_calls, stats.new_tokens = calls, len(tokens) - idx.shape[1]
    model.train(was_training)
    out = torch.tensor([tokens], dtype=torch.long, device=idx.device)
    return (out, stats) if return_stats else out


class SelfDrafter:
    """Drafter 3 as :func:`.measure.measure` takes it: the MTP model drafts for itself, so it
    generates whole (``generate``) instead of proposing to another target."""

    def __init__(self, model):
        self.model, self.max_k = model, check_mtp_model(model)
        self.vocab_size = model.config.vocab_size

    def generate(
        self,
        idx,
        max_new_tokens,
        k,
        temperature=0.0,
        generator=None,
        return_stats=False,
        **sampling,
    ):
        return self_speculative_generate(
            self.model,
            idx,
            max_new_tokens,
            k,
            temperature,
            generator=generator,
            return_stats=return_stats,
            **sampling,
        )
