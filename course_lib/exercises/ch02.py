"""Checks for chapter 2, A bigram baseline: ``from course_lib.exercises import ch02``."""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ..bigram import bigram_probs
from . import as_number, call, expect_close, fail, passed


def check_initial_loss(fn) -> None:
    """``fn(vocab_size) -> float``: the cross-entropy of a model that gives every one of the
    ``vocab_size`` tokens the same probability."""
    for V in (2, 10, 65, 1000, 50257):
        got = as_number(call(fn, V), f"initial_loss({V})", "return a float")
        expected = math.log(V)
        if math.isclose(got, math.log2(V), rel_tol=1e-4):
            fail(f"initial_loss({V}) = {got:.4f} is log base 2; the loss uses natural logarithms.",
                 "PyTorch's cross-entropy is in nats: use math.log, not math.log2.")
        if math.isclose(got, 1 / V, rel_tol=1e-4):
            fail(f"initial_loss({V}) = {got:.4f} is the probability of the target, not the loss.",
                 "the loss is minus the log of that probability: -ln(1/V).")
        if math.isclose(got, -expected, rel_tol=1e-4):
            fail(f"initial_loss({V}) = {got:.4f} is negative; a cross-entropy never is.",
                 "the loss is MINUS the log-probability of the target: -ln(1/V) = ln V.")
        expect_close(got, expected, f"initial_loss({V})",
                     "a uniform guess gives the target probability 1/V; the loss is -ln of that.")
    # The same number, measured: all-zero logits are a uniform guess.
    V = 65
    measured = F.cross_entropy(torch.zeros(100, V), torch.randint(V, (100,), generator=torch.Generator().manual_seed(0)))
    expect_close(call(fn, V), measured.item(), "initial_loss(65) vs F.cross_entropy of all-zero logits")
    passed(f"initial_loss(V) = ln V; for V = 65 that is {math.log(65):.4f}, what F.cross_entropy gives for "
           "all-zero logits.")


def check_cross_entropy(fn) -> None:
    """``fn(logits, targets) -> scalar tensor``: logits (N, V), targets (N,) ids; the mean over
    the N rows of -log softmax(logits)[target], equal to ``F.cross_entropy``."""
    for N, V, scale, seed in [(5, 3, 1.0, 0), (64, 65, 3.0, 1), (1, 10, 1.0, 2), (32, 7, 0.1, 3)]:
        g = torch.Generator().manual_seed(seed)
        logits = torch.randn(N, V, generator=g) * scale
        targets = torch.randint(V, (N,), generator=g)
        got = call(fn, logits.clone(), targets.clone())
        if not isinstance(got, torch.Tensor):
            fail(f"expected a tensor, got {type(got).__name__}.", "return the mean as a 0-d tensor: losses.mean()")
        if got.numel() != 1:
            fail(f"expected a single number (the mean over the {N} rows), got shape {tuple(got.shape)}.",
                 "pick each row's target log-probability, then take .mean() over the rows.")
        got = got.reshape(())
        expected = F.cross_entropy(logits, targets)
        if torch.isclose(got, -expected, rtol=1e-4, atol=1e-5) and expected.abs() > 1e-4:
            fail(f"the loss is negative ({got.item():.4f}); expected {expected.item():.4f}.",
                 "the loss is MINUS the mean log-probability of the targets.")
        wrong_axis = -F.log_softmax(logits, dim=0)[torch.arange(N), targets].mean()
        if N > 1 and torch.isclose(got, wrong_axis, rtol=1e-4, atol=1e-5) \
                and not torch.isclose(wrong_axis, expected, rtol=1e-4, atol=1e-5):
            fail("the softmax runs over the wrong axis (down the rows instead of along each row).",
                 "normalise over the vocabulary, the last dimension: dim=-1.")
        expect_close(got, expected, f"cross-entropy of a ({N}, {V}) batch",
                     "log-probabilities = logits - logsumexp(logits, dim=-1, keepdim=True); then "
                     "-logprobs[torch.arange(N), targets].mean().")
    # Large logits: exp overflows unless the maximum is subtracted first.
    logits = torch.tensor([[1000.0, 0.0, -1000.0], [0.0, 1000.0, 999.0]])
    targets = torch.tensor([0, 2])
    got = call(fn, logits.clone(), targets.clone())
    expected = F.cross_entropy(logits, targets)
    if not torch.isfinite(torch.as_tensor(got)).all():
        fail(f"with logits as large as 1000 your loss is {torch.as_tensor(got).item()} (exp(1000) overflows).",
             "subtract each row's maximum before exponentiating (log-softmax is unchanged by it), "
             "or use torch.logsumexp.")
    expect_close(got, expected, "cross-entropy with logits of +-1000",
                 "subtract each row's maximum before exponentiating, or use torch.logsumexp.")
    passed("your cross-entropy equals F.cross_entropy, and it stays finite for huge logits.")


def check_bigram_probs(fn) -> None:
    """``fn(data, vocab_size, smoothing) -> (V, V)`` table of P(next = j | current = i) from
    the counts of adjacent pairs in the 1-D tensor ``data``, plus ``smoothing`` per entry."""
    cases = [(torch.tensor([0, 1, 1, 2, 0, 1]), 3, 0.0), (torch.tensor([0, 1, 1, 2, 0, 1]), 3, 1.0),
             (torch.randint(5, (300,), generator=torch.Generator().manual_seed(0)), 5, 0.5),
             (torch.randint(20, (2000,), generator=torch.Generator().manual_seed(1)), 20, 1.0)]
    for data, V, smoothing in cases:
        got = call(fn, data.clone(), V, smoothing)
        expected = bigram_probs(data, V, smoothing)
        if not isinstance(got, torch.Tensor):
            fail(f"expected a (V, V) tensor, got {type(got).__name__}.", "return the normalised count table")
        if tuple(got.shape) != (V, V):
            fail(f"with vocab_size={V}, expected shape ({V}, {V}), got {tuple(got.shape)}.",
                 "one row per current token, one column per next token.")
        got = got.double()
        counts = torch.zeros(V, V, dtype=torch.float64)
        for a, b in zip(data[:-1].tolist(), data[1:].tolist()):
            counts[a, b] += 1
        if torch.allclose(got, counts + smoothing) or torch.allclose(got, counts):
            fail("the table holds counts, not probabilities.", "divide each row by its sum: P = N / N.sum(1, keepdim=True).")
        col_norm = (counts + smoothing) / (counts + smoothing).sum(0, keepdim=True)
        if torch.allclose(got, col_norm, atol=1e-6) and not torch.allclose(col_norm, expected.double(), atol=1e-6):
            fail("the columns sum to 1, not the rows.",
                 "row i is the distribution of the token after i: normalise with sum(dim=1, keepdim=True).")
        transposed = (counts.T + smoothing) / (counts.T + smoothing).sum(1, keepdim=True)
        if torch.allclose(got, transposed, atol=1e-6) and not torch.allclose(transposed, expected.double(), atol=1e-6):
            fail("the table is transposed: entry [i, j] should count j FOLLOWING i.",
                 "count N[data[t], data[t + 1]] += 1 (current token first).")
        if smoothing > 0 and (got == 0).any():
            fail(f"with smoothing={smoothing} some probabilities are 0.",
                 "add `smoothing` to every count before normalising: (N + smoothing).")
        expect_close(got, expected.double(), f"bigram table of {len(data)} tokens, V={V}, smoothing={smoothing}",
                     "N[i, j] = how often j follows i; P = (N + smoothing) / (N + smoothing).sum(1, keepdim=True).",
                     atol=1e-6)
    passed("your table equals course_lib.bigram.bigram_probs: every row is a probability distribution.")


__all__ = ["check_initial_loss", "check_cross_entropy", "check_bigram_probs"]
