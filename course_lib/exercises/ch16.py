"""Checks for chapter 16, Evaluation: ``from course_lib.exercises import ch16``."""
from __future__ import annotations

import math

import torch

from ..evaluation import bootstrap_interval, choice_scores, mean_stderr
from . import as_integer, as_number, call, expect_sequence, fail, passed


def check_acc_norm(fn) -> None:
    """``fn(lls, choices) -> int``: the index lm-eval's ``acc_norm`` picks: the highest
    log-likelihood per character of the choice."""
    cases = [([-2.1, -6.0, -1.9], ["ab", "abcdef", "a"]),
             ([-2.0, -9.0, -8.5], ["ab", "abcdefghij", "abcdefgh"]), ([-4.0, -3.0], ["one", "two"]),
             ([-12.0, -6.5, -30.0, -7.0], ["a long line", "short", "x" * 40, "hmm!"])]
    answers = [as_integer(call(fn, list(lls), list(choices)), f"acc_norm_choice({lls}, {choices})",
                          "return the index of the chosen answer, an int") for lls,
               choices in cases]

    def rule(key, best=max):  # the index each case would get from a rule
        return [best(range(len(lls)), key=lambda i: key(lls, choices, i)) for lls, choices in cases]

    right = rule(lambda lls, choices, i: lls[i] / len(choices[i]))
    if answers == right:
        assert choice_scores(cases[1][0], cases[1][1], 1)["acc_norm"] == 1.0  # the library agrees
        passed("length-normalised accuracy picks the most likely choice per character, as lm-eval "
               "does.")
        return
    k = next(k for k in range(len(cases)) if answers[k] != right[k])  # the first case it gets wrong
    lls, choices = cases[k]
    if answers == rule(lambda lls, choices, i: lls[i] / len(choices[i]), best=min):
        fail(f"for log-likelihoods {lls} you picked choice {answers[k]}, the lowest per character: "
             "log-likelihoods are not losses.",
             "they are negative, and the largest (closest to 0) is the most likely choice")
    if answers == rule(lambda lls, choices, i: lls[i] / (len(choices[i]) + 1)):
        fail(f"you picked choice {answers[k]}: did you count the space before the choice? lm-eval "
             "divides by len(choice), the choice alone.", "use len(choices[i])")
    if answers == rule(lambda lls, choices, i: lls[i]):
        fail(f"for log-likelihoods {lls} you picked choice {answers[k]}, the highest total: that "
             "is acc, not acc_norm.", "divide each log-likelihood by its choice's length in "
                                      "characters before taking the largest")
    fail(f"for log-likelihoods {lls} and choices {choices} you picked {answers[k]}, expected "
         f"{right[k]}.",
         "acc_norm is argmax of lls[i] / len(choices[i]); the log-likelihoods are negative")


def check_bits_per_byte(fn) -> None:
    """``fn(mean_loss, n_tokens, n_bytes) -> float``: bits per byte of a text from a model's
    mean loss in nats per token over its ``n_tokens`` tokens, which spell ``n_bytes`` bytes."""
    for loss, tokens, n_bytes in ((1.5, 1000, 1000), (3.2, 512, 1030), (0.9, 64, 250)):
        got = as_number(call(fn, loss, tokens, n_bytes),
                        f"bits_per_byte({loss}, {tokens}, {n_bytes})")
        expected = loss * tokens / math.log(2) / n_bytes
        if math.isclose(got, expected, rel_tol=1e-6):
            continue
        if math.isclose(got, loss * tokens / n_bytes, rel_tol=1e-6):
            fail(f"got {got:.4f}: that is nats per byte.",
                 "a bit is ln 2 nats: divide by math.log(2)")
        if math.isclose(got, loss / math.log(2), rel_tol=1e-6):
            fail(f"got {got:.4f}: that is bits per token, which depends on the tokenizer.",
                 "the total is loss * n_tokens nats; spread it over n_bytes")
        if math.isclose(got, loss * tokens * math.log(2) / n_bytes, rel_tol=1e-6):
            fail(f"got {got:.4f}: you multiplied by ln 2.", "bits = nats / ln 2")
        fail(f"bits_per_byte({loss}, {tokens}, {n_bytes}) = {got:.6g}, expected {expected:.6g}.",
             "total nats = mean loss * tokens; bits = nats / ln 2; divide by the bytes")
    passed("bits per byte compare a character model and a BPE model on the same text.")


def check_bootstrap(fn) -> None:
    """``fn(scores, iters, seed) -> (low, high)``: a 95% percentile bootstrap interval of the
    mean of ``scores`` (0/1 per item)."""
    g = torch.Generator().manual_seed(16)
    # the third case is skewed (2 successes in 40): a percentile interval stays inside [0, 1], a
    # normal approximation (mean +- 1.96 standard errors) does not
    cases = [torch.rand(200, generator=g) < 0.3, torch.rand(80, generator=g) < 0.6,
             torch.arange(40) < 2]
    for case in cases:
        scores = case.double().tolist()
        n = len(scores)
        got = expect_sequence(call(fn, scores, 2000, 0), 2, "bootstrap(scores, 2000, 0)",
                              "return two numbers, (low, high)")
        lo, hi = (as_number(v, "a bound of the interval") for v in got)
        mean = sum(scores) / n
        ref_lo, ref_hi = bootstrap_interval(scores, 2000, seed=1)
        if not lo <= mean <= hi:
            fail(f"the interval ({lo:.3f}, {hi:.3f}) does not contain the mean {mean:.3f}.",
                 "take the 2.5% and 97.5% quantiles of the resampled means")
        width, ref = hi - lo, ref_hi - ref_lo
        if width < 1e-9:
            fail("the interval has no width: did you resample without replacement? Every resample "
                 "then holds every item once and has the same mean.",
                 "draw n indices with torch.randint (with replacement)")
        if lo < min(scores) - 1e-12 or hi > max(scores) + 1e-12:
            fail(f"for {n} scores with mean {mean:.3f} the interval ({lo:.3f}, {hi:.3f}) leaves "
                 "the range of the scores: no resampled mean can go there. A normal approximation "
                 "(mean +- 1.96 standard errors) is not a bootstrap.",
                 "resample the items, then take quantiles of the resampled means")
        if width > 3 * ref:
            fail(f"the interval ({lo:.3f}, {hi:.3f}) is far too wide (expected about {ref:.3f}): "
                 "quantiles of the scores themselves, not of the resampled means?",
                 "compute one mean per resample, then quantiles")
        # 2 successes in 40: the resampled means are too coarse for the width tests below
        if n < 50:
            continue
        if width < 0.9 * ref:
            fail(f"the interval ({lo:.3f}, {hi:.3f}) is narrower than the 95% bootstrap interval "
                 f"(about ({ref_lo:.3f}, {ref_hi:.3f})): a 90% interval?",
                 "quantiles 0.025 and 0.975, not 0.05 and 0.95")
        if abs(width - ref) > 0.1 * ref or abs(lo - ref_lo) > 0.15 * ref:
            fail(f"the interval ({lo:.3f}, {hi:.3f}) is not the 95% bootstrap interval (about "
                 f"({ref_lo:.3f}, {ref_hi:.3f})).",
                 "quantiles 0.025 and 0.975 of the means of the resamples")
        # the normal approximation agrees here
        assert abs(ref - 2 * 1.96 * mean_stderr(scores)) < 0.3 * ref
    passed("the interval comes from the items' own spread, resampled with replacement.")
