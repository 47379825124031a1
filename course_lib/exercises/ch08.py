"""Checks for chapter 8, Generation: ``from course_lib.exercises import ch08``."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ..generate import top_k_filter, top_p_filter
from . import call, expect_close, expect_tensor, fail, passed


def _logit_cases():
    """(logits, p) pairs: several shapes, sharp and flat distributions, no ties."""
    g = torch.Generator().manual_seed(8)
    cases = [
        (torch.tensor([2.0, 1.0, 0.5, -1.0, 0.0]), 0.5),
        (torch.tensor([5.0, 0.0, 0.1, -0.2]), 0.5),  # the top token alone exceeds p
        (torch.tensor([[0.3, 0.1, -0.4, 0.2, 0.0, -0.1]]), 0.9),
    ]
    for shape, scale, p in [((65,), 2.0, 0.9), ((4, 65), 1.0, 0.8), ((2, 3, 11), 3.0, 0.95),
                            ((8, 30), 0.3, 0.5), ((3, 100), 4.0, 0.99), ((5, 7), 1.5, 0.1)]:
        cases.append((torch.randn(*shape, generator=g) * scale, p))
    return cases


def check_top_p_filter(fn) -> None:
    """``fn(logits, p) -> logits`` of the same shape (..., V): the logits of the nucleus (the
    fewest most likely tokens whose probabilities sum to at least p) unchanged, every
    other entry ``-inf``. Must equal ``course_lib.generate.top_p_filter``."""
    for logits, p in _logit_cases():
        got = call(fn, logits.clone(), p)
        expected = top_p_filter(logits, p)
        what = f"top_p_filter of logits with shape {tuple(logits.shape)}, p={p}"
        expect_tensor(got, logits.shape, what, "return the filtered logits",
                      "sort, cumsum and mask along the last dimension (dim=-1) so that any leading "
                      "shape works.")
        kept = torch.isfinite(got)
        if kept.all() and not torch.isfinite(expected).all():
            if torch.all((got >= 0) & (got <= 1)) and torch.allclose(got.sum(-1), torch.ones(())):
                fail(f"{what}: you returned probabilities; expected logits with -inf outside the "
                     "nucleus.",
                     "compute the mask with probabilities, then apply it to the logits: "
                     "logits.masked_fill(drop, float('-inf')).")
            fail(f"{what}: no token was dropped (nothing is -inf).",
                 "set the logits outside the nucleus to float('-inf').")
        if (got[kept] != logits[kept]).any():
            fail(f"{what}: the logits you kept were changed.",
                 "leave the nucleus' logits as they are; only the dropped ones become -inf.")
        if not kept.any(dim=-1).all():
            fail(f"{what}: every token of a row was dropped.",
                 "the most likely token is always kept, even when its probability alone exceeds p.")
        probs = F.softmax(logits.double(), dim=-1)
        top_dropped = (probs * ~kept).amax(-1)
        least_kept = torch.where(kept, probs, torch.full_like(probs, 2.0)).amin(-1)
        if (top_dropped > least_kept).any():
            fail(f"{what}: a token was dropped while a less likely one was kept.",
                 "the nucleus is the most likely tokens: after sorting, map the mask back to the "
                 "original order (e.g. mask.scatter(-1, order, sorted_mask)).")
        mass = (probs * kept).sum(-1)
        if (mass < p - 1e-6).any():
            fail(f"{what}: your nucleus holds only {mass.min().item():.4f} of the probability, "
                 "less than p.",
                 "keep tokens up to AND including the one whose cumulative probability first "
                 "reaches p: drop a token when the probability BEFORE it already reaches p.")
        if not torch.equal(kept, torch.isfinite(expected)):
            n_got, n_exp = kept.sum().item(), torch.isfinite(expected).sum().item()
            fail(f"{what}: you kept {n_got} tokens in all; the smallest nucleus has {n_exp}.",
                 "keep the fewest most likely tokens whose probabilities reach p: stop right after "
                 "the token that brings the running sum to p.")
    passed("your top-p filter equals course_lib.generate.top_p_filter on every shape and p tried.")


def check_temperature_probs(fn) -> None:
    """``fn(logits, temperature) -> probs`` (..., V): softmax(logits / temperature) along the
    last dimension, finite for any temperature > 0, and the one-hot vector of the argmax
    (greedy) at temperature 0. The check compares with a float64 reference at temperatures
    from 2 down to 1e-4, then verifies that small temperatures approach one-hot."""
    g = torch.Generator().manual_seed(80)
    for shape, scale in [((10,), 3.0), ((4, 65), 2.0), ((2, 3, 7), 5.0)]:
        logits = torch.randn(*shape, generator=g) * scale
        one_hot = F.one_hot(logits.argmax(-1), shape[-1]).to(logits.dtype)
        for t in (2.0, 1.0, 0.5, 0.1, 0.01, 1e-3, 1e-4):
            got = call(fn, logits.clone(), t)
            what = f"temperature_probs at temperature {t} (logits of shape {tuple(shape)})"
            if not isinstance(got, torch.Tensor) or got.shape != logits.shape:
                fail(
                    f"{what}: expected a tensor of shape {tuple(shape)}, got "
                    f"{tuple(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__}.",
                    "return softmax(logits / temperature, dim=-1).",
                )
            if not torch.isfinite(got).all():
                fail(f"{what}: your probabilities contain nan or inf; exp(logits / T) overflows "
                     "when T is small.",
                     "subtract each row's maximum before exponentiating, or simply use "
                     "torch.softmax(logits / temperature, dim=-1), which does it for you.")
            expected = F.softmax(logits.double() / t, dim=-1)
            if t != 1.0:
                scaled = F.softmax(logits.double() * t, dim=-1)
                if (torch.allclose(got.double(), scaled, atol=1e-5)
                    and not torch.allclose(scaled, expected, atol=1e-5)):
                    fail(f"{what}: you multiplied the logits by the temperature.",
                         "divide by it: a temperature below 1 must SHARPEN the distribution.")
            expect_close(got, expected, what,
                         "probs = softmax(logits / temperature) over the last dimension.",
                         atol=1e-5)
            if t <= 1e-3 and torch.allclose(expected, one_hot.double(), atol=1e-4):
                expect_close(got, one_hot, f"{what} vs the one-hot vector of the argmax",
                             "at a tiny temperature nearly all the probability sits on the most "
                             "likely token.",
                             atol=1e-4)
        got = call(fn, logits.clone(), 0.0)
        what = f"temperature_probs at temperature 0 (logits of shape {tuple(shape)})"
        if (not isinstance(got, torch.Tensor) or got.shape != logits.shape
            or not torch.isfinite(got).all()):
            fail(f"{what}: expected the one-hot vector of the argmax, got "
                 f"{got if not isinstance(got, torch.Tensor) else 'nan/inf or a wrong shape'}.",
                 "dividing by 0 gives inf/nan: handle temperature == 0 separately, "
                 "with F.one_hot(logits.argmax(-1), V).")
        expect_close(got, one_hot, what,
                     "at temperature 0 sampling is greedy: all the probability on the argmax.",
                     atol=0.0, rtol=0.0)
    passed("softmax(logits / T) tends to the one-hot argmax as T -> 0, and T = 0 is exactly "
           "greedy.")


__all__ = ["check_top_p_filter", "check_temperature_probs"]


def _sampling_cases():
    """(logits, temperature, top_k, top_p): each filter alone, and combinations where the order
    matters (a temperature above 1 widens the nucleus; top-k first makes the nucleus smaller)."""
    g = torch.Generator().manual_seed(81)
    rows = torch.randn(6, 40, generator=g) * 2.0  # (B, V)
    return [(rows, 1.0, None, None), (rows, 0.7, None, None), (rows[0], 1.0, 5, None),
            (rows, 1.0, None, 0.9), (rows, 2.0, None, 0.8), (rows, 0.5, None, 0.6),
            (rows, 1.0, 8, 0.7), (rows.view(2, 3, 40), 1.5, 10, 0.9), (rows, 0.8, 40, 1.0)]


def _reference_probs(logits, temperature, top_k, top_p):
    """The distribution course_lib.generate.sample_next draws from."""
    logits = logits / temperature
    if top_k is not None:
        logits = top_k_filter(logits, top_k)
    if top_p is not None and top_p < 1.0:
        logits = top_p_filter(logits, top_p)
    return F.softmax(logits, dim=-1)


def check_sampling_probs(fn) -> None:
    """``fn(logits, temperature, top_k, top_p) -> probs`` (..., V): the distribution that
    ``course_lib.generate.sample_next`` samples from, for temperature > 0: divide by the
    temperature, then keep the top k (when top_k is not None), then the nucleus of p (when
    top_p is not None and below 1), then softmax."""
    for logits, temperature, top_k, top_p in _sampling_cases():
        what = (f"sampling_probs(logits of shape {tuple(logits.shape)}, temperature={temperature}, "
                f"top_k={top_k}, top_p={top_p})")
        got = call(fn, logits.clone(), temperature, top_k, top_p)
        expect_tensor(
            got,
            logits.shape,
            what,
            "return the probabilities, a tensor shaped like the logits.",
            "work along the last dimension (dim=-1), so that any leading shape works.",
            dtype=logits.dtype,
            dtype_hint="keep the logits' dtype (float32): no .double() or .to(...)",
        )
        expected = _reference_probs(logits, temperature, top_k, top_p)
        if torch.allclose(got, expected, atol=1e-6, rtol=1e-5):
            continue
        if not torch.allclose(got.sum(-1), torch.ones(()), atol=1e-4) or (got < 0).any():
            fail(f"{what}: your rows are not probability distributions (non-negative, summing to "
                 "1).",
                 "finish with F.softmax(filtered_logits, dim=-1): the -inf logits become exactly "
                 "0.")
        close = lambda a: torch.allclose(got, a, atol=1e-6, rtol=1e-5)  # noqa: E731
        tempered_late = logits
        if top_k is not None:
            tempered_late = top_k_filter(tempered_late, top_k)
        if top_p is not None and top_p < 1.0:
            tempered_late = top_p_filter(tempered_late, top_p)
        if close(F.softmax(tempered_late / temperature, dim=-1)):
            fail(f"{what}: you applied the temperature after the filters, so the nucleus was "
                 "chosen from the untempered distribution.",
                 "divide the logits by the temperature FIRST: top-p keeps a different set of "
                 "tokens once the temperature has sharpened or flattened the distribution.")
        if top_k is not None and top_p is not None:
            p_first = top_k_filter(top_p_filter(logits / temperature, top_p), top_k)
            if close(F.softmax(p_first, dim=-1)):
                fail(f"{what}: you applied top-p before top-k.",
                     "top-k first, then top-p on what is left: the nucleus is measured on the "
                     "renormalised top-k distribution, so it can only be smaller.")
        if close(F.softmax(logits / temperature, dim=-1)):
            fail(f"{what}: nothing was filtered out.",
                 "apply top_k_filter when top_k is not None and top_p_filter when top_p is not "
                 "None (and below 1).")
        expect_close(got, expected, what,
                     "logits / temperature, then top_k_filter (if top_k), then top_p_filter "
                     "(if top_p < 1), then softmax.", atol=1e-6)
    passed("your probabilities are what course_lib.generate.sample_next draws from: temperature "
           "first, then top-k, then top-p.")


__all__.append("check_sampling_probs")
