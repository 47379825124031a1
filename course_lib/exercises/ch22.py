"""Checks for chapter 22, Speculative decoding: ``from course_lib.exercises import ch22``.

The accept and residual checks run the student's rule through the exact enumeration of
:mod:`course_lib.speculative.exact` (a 3-token vocabulary, k = 2) and say how far the output
distribution lands from the target's: a wrong rule is refused by what it does, not by its code.
"""

from __future__ import annotations

import math

import torch

from ..speculative.exact import exact_output_distribution, largest_difference, target_distribution
from ..speculative.rule import (
    acceptance_probability,
    expected_tokens_per_call,
    residual_distribution,
)
from . import as_number, call, expect_tensor, fail, passed


def _tables(seed: int, V: int = 3):
    """A bigram target and draft (last token -> next-token distribution), float64."""
    g = torch.Generator().manual_seed(seed)
    P = torch.softmax(torch.randn(V, V, generator=g, dtype=torch.float64) * 2, -1)
    Q = torch.softmax(torch.randn(V, V, generator=g, dtype=torch.float64) * 2, -1)
    return (lambda s: P[s[-1]]), (lambda s: Q[s[-1]])


def _distance_from_target(accept, residual, seed: int) -> float:
    p_of, q_of = _tables(seed)
    got = exact_output_distribution(p_of, q_of, [0], 3, 2, accept, residual)
    return largest_difference(got, target_distribution(p_of, [0], 3, 3))


def check_accept_probability(fn) -> None:
    """``fn(p_x, q_x) -> probability``: how likely a drafted token x is kept, given the target's
    probability p_x and the draft's q_x of it (0-d tensors, q_x > 0)."""
    # p(x) = 0 (a token top-k or top-p filtered out of the target), p = q, and p / q just below 1:
    # the
    # random tables of the enumeration below never hold them, and a rule can go wrong exactly there.
    cases = [
        (0.5, 0.25),
        (0.2, 0.4),
        (0.3, 0.3),
        (0.0, 0.5),
        (0.9, 0.1),
        (0.19, 0.2),
        (0.25, 0.25),
        (0.0, 0.01),
    ]
    for p_x, q_x in cases:
        got = as_number(
            call(
                fn, torch.tensor(p_x, dtype=torch.float64), torch.tensor(q_x, dtype=torch.float64)
            ),
            f"accept_probability({p_x}, {q_x})",
        )
        if got > 1 + 1e-9 or got < -1e-9:
            fail(
                f"accept_probability({p_x}, {q_x}) = {got:.3g} is not a probability (it must lie "
                "in [0, 1]).",
                "cap the ratio at 1: where the target likes x more than the draft does, x is "
                "always kept",
            )
        want = min(1.0, p_x / q_x)
        if got > want + 1e-9:
            fail(
                f"accept_probability({p_x}, {q_x}) = {got:.3g}, above min(1, p/q) = {want:.3g}: "
                "the kept mass "
                f"q(x) a(x) then exceeds p(x)"
                + (", and x is a token the target never emits" if p_x == 0 else "")
                + ": the output leans towards the draft.",
                "keep x with probability min(1, p(x) / q(x))",
            )
        if got < want - 1e-9:
            fail(
                f"accept_probability({p_x}, {q_x}) = {got:.3g}, below min(1, p/q) = {want:.3g}: "
                "every rejection "
                "ends the round, so a rule that keeps less wastes drafts, and with the residual "
                "max(0, p - q) the "
                "output is no longer exactly p (the kept mass q(x) a(x) falls short of min(p(x), "
                "q(x))).",
                "keep x with probability min(1, p(x) / q(x)), the most the output's exactness "
                "allows",
            )
    for seed in range(3):

        def accept(p, q):
            return torch.as_tensor(as_number(call(fn, p, q), "accept"), dtype=torch.float64)

        wrong = _distance_from_target(accept, residual_distribution, seed)
        if wrong > 1e-7:
            fail(
                "with your rule (and the right residual) the speculative output is not the "
                "target's "
                f"distribution: the probability of some 3-token output is off by {wrong:.3f} "
                "(computed "
                f"exactly, every draft enumerated).",
                "keep x with probability min(1, p(x) / q(x)): always when the target likes x at "
                "least as "
                "much as the draft, else in proportion",
            )
    passed("min(1, p/q): with the residual, the output is exactly the target's distribution.")


def check_residual(fn) -> None:
    """``fn(p, q) -> (V,)``: the distribution a token is drawn from after a rejection, for the
    target's p and the draft's q (V,) at that position (p differs from q)."""
    g = torch.Generator().manual_seed(22)
    for V in (3, 5):
        p = torch.softmax(torch.randn(V, generator=g, dtype=torch.float64) * 2, -1)
        q = torch.softmax(torch.randn(V, generator=g, dtype=torch.float64) * 2, -1)
        got = call(fn, p.clone(), q.clone())
        expect_tensor(got, (V,), "residual(p, q)", "one probability per token of the vocabulary")
        got = got.double()
        if (got < -1e-12).any():
            fail(
                "your residual has negative entries: it is not a distribution.",
                "clamp p - q at 0 (torch.clamp_min(p - q, 0)) before normalising",
            )
        if not math.isclose(float(got.sum()), 1.0, abs_tol=1e-6):
            fail(
                f"your residual sums to {float(got.sum()):.4f}, not 1: torch.multinomial would "
                "still draw "
                "from it, but as from the normalised one, and a check of its probabilities fails.",
                "divide max(0, p - q) by its sum",
            )
        if torch.allclose(got, p):
            fail(
                "your residual is p itself: after a rejection, drawing from p counts again the "
                "tokens "
                "where the draft already gave the target its due (the output is not p).",
                "draw from where p exceeds q: max(0, p - q), normalised",
            )
    for seed in range(3):
        wrong = _distance_from_target(
            acceptance_probability, lambda p, q: call(fn, p, q).double(), seed
        )
        if wrong > 1e-7:
            fail(
                "with your residual (and the right acceptance) the speculative output is not the "
                "target's "
                f"distribution: some 3-token output is off by {wrong:.3f} (computed exactly).",
                "the residual is max(0, p - q) / sum(max(0, p - q)): the mass the target has and "
                "the draft lacks",
            )
    passed(
        "max(0, p - q), normalised: the mass the draft under-proposes, which makes the output "
        "exact."
    )


def check_expected_tokens(fn) -> None:
    """``fn(alpha, k) -> float``: the expected number of tokens one target call emits with k draft
    tokens, each kept independently with probability alpha (alpha in [0, 1], 1 included)."""
    for alpha, k in ((0.5, 1), (0.5, 2), (0.7, 4), (0.9, 8), (0.0, 3), (0.3, 1), (1.0, 4)):
        got = as_number(call(fn, alpha, k), f"expected_tokens({alpha}, {k})")
        want = expected_tokens_per_call(alpha, k)
        if math.isclose(got, want, rel_tol=1e-6, abs_tol=1e-9):
            continue
        if alpha < 1 and math.isclose(got, (1 - alpha**k) / (1 - alpha), rel_tol=1e-6):
            fail(
                f"expected_tokens({alpha}, {k}) = {got:.4f}: you left out the token the target "
                "adds in every "
                f"round (the correction after a rejection, or the bonus after k kept).",
                "a round emits (kept tokens) + 1: sum alpha^i for i = 0 .. k",
            )
        if math.isclose(got, 1 + alpha * k, rel_tol=1e-6):
            fail(
                f"expected_tokens({alpha}, {k}) = {got:.4f}: 1 + alpha k counts every draft token "
                "as examined, "
                "but a round stops at the first rejection.",
                "token i is kept only if tokens 1 .. i all are: alpha^i",
            )
        fail(
            f"expected_tokens({alpha}, {k}) = {got:.4f}, which is not the expected number of "
            "tokens per call.",
            "1 + alpha + alpha^2 + ... + alpha^k = (1 - alpha^(k+1)) / (1 - alpha); k + 1 when "
            "alpha = 1",
        )
    passed(
        "(1 - alpha^(k+1)) / (1 - alpha) tokens per target call, k + 1 when every draft is kept."
    )
