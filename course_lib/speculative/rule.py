"""The accept/reject rule of speculative sampling (Leviathan et al. 2023; Chen et al. 2023).

A cheap draft proposes k tokens x_1 .. x_k, drawn from its distributions q_1 .. q_k; the target
scores all of them in one forward, which gives its distributions p_1 .. p_{k+1}. Token i is kept
with probability min(1, p_i(x_i) / q_i(x_i)); at the first rejection a token is drawn from the
residual max(0, p_i - q_i), normalised, and the round ends; when all k are kept, a (k+1)-th token
comes free from p_{k+1}. Every emitted token is then distributed exactly as the target's own
sample (the proof: P(emit y) = min(q(y), p(y)) + (1 - sum_x min(p(x), q(x))) * residual(y) = p(y)).

Greedy decoding is the limit temperature -> 0: keep the draft's tokens while they equal the
target's argmax, then emit the target's argmax.

Shapes: k draft tokens, V vocabulary size; p is (k + 1, V), q is (k, V).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ..generate import top_k_filter, top_p_filter


def probabilities(logits: torch.Tensor, temperature: float, top_k: int | None = None,
                  top_p: float | None = None) -> torch.Tensor:
    """(..., V) logits -> (..., V) the distribution :func:`course_lib.generate.sample_next` samples
    from at this temperature (> 0) and with these filters, in float32."""
    logits = logits.float() / temperature
    if top_k is not None:
        logits = top_k_filter(logits, top_k)
    if top_p is not None and top_p < 1.0:
        logits = top_p_filter(logits, top_p)
    return F.softmax(logits, dim=-1)


def acceptance_probability(p_x: torch.Tensor, q_x: torch.Tensor) -> torch.Tensor:
    """min(1, p(x) / q(x)): how likely a drafted token x is kept. The draft drew x, so q(x) > 0."""
    return torch.clamp(p_x / q_x.clamp_min(torch.finfo(q_x.dtype).tiny), max=1.0)


def residual_distribution(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """(V,) max(0, p - q) normalised: where the target puts more mass than the draft. Drawing
    from it after a rejection is what makes the output exactly p. When p equals q the residual is
    empty; a rejection then has probability 0, and p itself is returned."""
    residual = (p - q).clamp_min(0.0)
    total = residual.sum()
    return p if total <= 0 else residual / total


def acceptance_rate(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """(..., V) -> (...): the probability that a token drafted from q is kept, sum_x min(p(x), q(x))
    = 1 - total variation distance (Leviathan et al.'s alpha for one position)."""
    return torch.minimum(p, q).sum(dim=-1)


def speculative_round(p: torch.Tensor, q: torch.Tensor, draft: list[int],
                      generator: torch.Generator | None = None) -> tuple[list[int], int]:
    """One round of speculative sampling: p (k + 1, V) the target's distributions after each draft
    prefix, q (k, V) the draft's, ``draft`` its k tokens. Returns (emitted tokens, how many draft
    tokens were kept): the kept ones, then one token from the residual or, when all were kept, from
    p[k]. Uniforms and samples come from ``generator`` (CPU)."""
    k = len(draft)
    for i, x in enumerate(draft):
        u = torch.rand((), generator=generator)
        if u < acceptance_probability(p[i, x], q[i, x]):
            continue
        fix = torch.multinomial(residual_distribution(p[i], q[i]), 1, generator=generator)
        return list(draft[:i]) + [int(fix)], i
    bonus = torch.multinomial(p[k], 1, generator=generator)
    return list(draft) + [int(bonus)], k


def greedy_round(target_logits: torch.Tensor, draft: list[int]) -> tuple[list[int], int]:
    """Greedy verification: target_logits (k + 1, V). The draft's tokens are kept while each equals
    the target's argmax; then the target's argmax at the first mismatch (or after all k) is
    emitted. The output is the target's own greedy text, whatever the draft proposed."""
    best = target_logits.argmax(dim=-1).tolist()  # (k + 1,)
    n = 0
    while n < len(draft) and draft[n] == best[n]:
        n += 1
    return list(draft[:n]) + [best[n]], n


def expected_tokens_per_call(alpha: float, k: int) -> float:
    """Leviathan et al.'s cost model: when each draft token is kept independently with probability
    alpha, a round with k draft tokens emits (1 - alpha^(k+1)) / (1 - alpha) tokens on average for
    one target call (k + 1 when alpha = 1, 1 when alpha = 0)."""
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must be a probability in [0, 1], got {alpha!r}")
    if alpha == 1.0:
        return float(k + 1)
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


def expected_speedup(alpha: float, k: int, c: float) -> float:
    """The wall-clock speed-up the cost model predicts: tokens per round over the round's cost,
    k draft steps costing c target steps each plus one target call (the verification of k + 1
    positions assumed to cost what one position costs, which holds while the hardware is idle)."""
    return expected_tokens_per_call(alpha, k) / (k * c + 1.0)


def alpha_from_rounds(kept: list[int], k: int) -> float:
    """The acceptance rate alpha estimated from rounds with k draft tokens each: kept tokens over
    examined ones (a round examines kept + 1 tokens, or k when it kept them all), the maximum
    likelihood estimate when each token is kept independently with probability alpha."""
    examined = sum(min(n + 1, k) for n in kept)
    return sum(kept) / examined if examined else float("nan")
