"""The exact output distribution of speculative sampling, every outcome enumerated (tiny
vocabularies).

No sampling: each draft of k tokens is weighted by its probability under the draft, each accept or
reject by its probability under the rule, each residual or bonus token by its probability. What
comes out is the distribution of the first n emitted tokens, which the rule makes equal to the
target's own, p(x_1) p(x_2 | x_1) ... (the chapter and the tests compare the two; a wrong rule, such
as accepting every draft token, visibly changes it). ``accept`` and ``residual`` can be replaced, to
see what a wrong rule does; they default to the library's.

``p_of(tokens)`` and ``q_of(tokens)`` give the target's and the draft's (V,) next-token
distributions after a list of tokens. Cost: V^k drafts per round, so keep V and k small (V = 3,
k = 3 is 27 drafts per round).
"""
from __future__ import annotations

import itertools

from .rule import acceptance_probability, residual_distribution


def exact_output_distribution(p_of, q_of, prompt: list[int], n: int, k: int,
                              accept=acceptance_probability, residual=residual_distribution
                              ) -> dict[tuple[int, ...], float]:
    """{first n emitted tokens: probability} for speculative sampling with k draft tokens a
    round."""
    V = len(p_of(list(prompt)))
    dist: dict[tuple[int, ...], float] = {}
    start = len(prompt)

    def record(seq: list[int], prob: float) -> None:
        key = tuple(seq[start : start + n])
        dist[key] = dist.get(key, 0.0) + prob

    def walk(seq: list[int], prob: float) -> None:  # a new round starts after seq
        if prob == 0.0:
            return
        if len(seq) - start >= n:
            record(seq, prob)
        else:
            draft(seq, [], prob)

    def draft(seq: list[int], drafted: list[int], reach: float) -> None:
        # reach: the probability of reaching here, every draft token so far proposed and kept
        ctx = seq + drafted
        if reach == 0.0:
            return
        if len(ctx) - start >= n:  # the first n emitted tokens are known already
            record(ctx, reach)
            return
        p = p_of(ctx)
        if len(drafted) == k:  # all k kept: the bonus token from the target
            for y in range(V):
                walk(ctx + [y], reach * float(p[y]))
            return
        q = q_of(ctx)
        for x in range(V):
            proposed = reach * float(q[x])  # the draft proposes x
            if proposed == 0.0:
                continue
            a = float(accept(p[x], q[x]))
            r = residual(p, q)
            for y in range(V):  # rejected: a token from the residual ends the round
                walk(ctx + [y], proposed * (1.0 - a) * float(r[y]))
            draft(seq, drafted + [x], proposed * a)

    walk(list(prompt), 1.0)
    return dist


def target_distribution(p_of, prompt: list[int], n: int, V: int) -> dict[tuple[int, ...], float]:
    """{n tokens: p(x_1) p(x_2 | x_1) ...}: what sampling from the target alone gives."""
    out = {}
    for seq in itertools.product(range(V), repeat=n):
        prob, ctx = 1.0, list(prompt)
        for t in seq:
            prob *= float(p_of(ctx)[t])
            ctx.append(t)
        out[seq] = prob
    return out


def largest_difference(a: dict, b: dict) -> float:
    """The largest |a - b| over the outcomes of either distribution."""
    return max(abs(a.get(s, 0.0) - b.get(s, 0.0)) for s in set(a) | set(b))
