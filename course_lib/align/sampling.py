"""What sampling alone buys (chapter 18): pass@k, best-of-N with a verifier, self-consistency,
and the entropy of the policy's next-token distribution; parsers of sampled answers.

**pass@k** (Chen et al. 2021, "Evaluating Large Language Models Trained on Code", section 2.1):
the chance that at least one of k answers drawn without replacement from n sampled ones, c of them
right, is right: ``1 - C(n - c, k) / C(n, k)``. Unbiased for "at least one right in k fresh
samples", and far less noisy than drawing k answers once. The binomials overflow for large n, so
:func:`pass_at_k` computes HumanEval's product ``1 - prod_{i = n-c+1}^{n} (1 - k / i)`` instead.

**Best-of-N**: draw N answers, keep the one a *verifier* scores highest. With the exact reward as
the verifier, best-of-N is right whenever any of the N is: pass@N, at N times the sampling cost.
With an imperfect verifier (e.g. chapter 18's units-digit proxy) it can pick a wrong answer the
proxy likes. **Self-consistency** (Wang et al. 2023): no verifier, the most frequent of the N
parsed answers (a majority vote) is the answer.

Shapes: P prompts, n samples per prompt, V vocabulary size.
"""
from __future__ import annotations

import math
import re
from collections import Counter
from typing import Sequence

import numpy as np
import torch
import torch.nn.functional as F

# --- pass@k -------------------------------------------------------------------------------------


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased pass@k of one prompt with ``c`` right answers among ``n`` sampled:
    ``1 - C(n - c, k) / C(n, k)``, computed as a product (no huge binomials). 1.0 when fewer
    than k answers are wrong (every draw of k holds a right one); c / n at k = 1."""
    if not (isinstance(n, int) and isinstance(c, int) and isinstance(k, int)):
        raise ValueError(f"n, c and k must be whole numbers, got n={n!r}, c={c!r}, k={k!r}")
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"need 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}: "
                         "pass@k needs at least k samples per prompt")
    if n - c < k:
        return 1.0
    return 1.0 - float(np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


def pass_at_k_curve(correct: Sequence[int], n: int, ks: Sequence[int]) -> dict[int, list[float]]:
    """Per-prompt pass@k for each k in ``ks``: ``{k: [pass@k of prompt 0, ...]}`` from the
    number of right answers (``correct``, one count per prompt) among ``n`` samples each."""
    return {k: [pass_at_k(n, int(c), k) for c in correct] for k in ks}


def exact_pass_at_k(n: int, c: int, k: int) -> float:
    """The same quantity with Python's exact integers (slow for large n): what the tests compare
    :func:`pass_at_k` against."""
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


# --- best-of-N and self-consistency -------------------------------------------------------------


def best_of_n(scores: Sequence[float], right: Sequence[bool], n: int) -> bool:
    """Whether best-of-``n`` picks a right answer: among the first ``n`` samples, the one the
    verifier scores highest (``scores``; the first of equal scores, i.e. a random one of them,
    as the samples come in random order) is right (``right``)."""
    if not 1 <= n <= min(len(scores), len(right)):
        raise ValueError("n must be between 1 and the number of samples "
                         f"({min(len(scores), len(right))}), got {n}")
    best = max(range(n), key=lambda i: (scores[i], -i))
    return bool(right[best])


def majority_vote(answers: Sequence[str | None]) -> str | None:
    """The most frequent answer (None, an unparsed answer, never wins; ties go to the answer seen
    first); None when no answer was parsed."""
    counts = Counter(a for a in answers if a is not None)
    if not counts:
        return None
    first = {}
    for i, a in enumerate(answers):
        first.setdefault(a, i)
    return max(counts, key=lambda a: (counts[a], -first[a]))


def self_consistency(answers: Sequence[str | None], expected: str, n: int) -> bool:
    """Whether the majority vote of the first ``n`` parsed answers is ``expected``."""
    if not 1 <= n <= len(answers):
        raise ValueError(f"n must be between 1 and the number of answers ({len(answers)}), got {n}")
    return majority_vote(answers[:n]) == expected


def subsets_mean(values: Sequence, n: int, fn, draws: int = 16, seed: int = 0) -> float:
    """The mean of ``fn(subset)`` over ``draws`` random orders of ``values``, each cut to its first
    ``n``: best-of-N and self-consistency estimated from a larger pool of samples with less noise
    than one draw (pass@k has its exact formula; these have none)."""
    if not 1 <= n <= len(values):
        raise ValueError(f"n must be between 1 and the number of values ({len(values)}), got {n}")
    rng = np.random.default_rng(seed)
    total = 0.0
    for _ in range(draws):
        order = rng.permutation(len(values))
        total += float(fn([values[i] for i in order[:n]]))
    return total / draws


# --- the policy's entropy -----------------------------------------------------------------------


def per_token_entropy(logits: torch.Tensor) -> torch.Tensor:
    """The entropy (nats) of the next-token distribution at every position: (..., V) -> (...).
    ``-sum_v p_v log p_v`` with ``p = softmax(logits)``, from log_softmax (stable for any logits:
    a token of probability 0 adds 0, not NaN)."""
    logp = F.log_softmax(logits.float(), dim=-1)
    # a -inf logit: 0 * -inf is NaN
    p_logp = torch.where(logp > -float("inf"), logp.exp() * logp, 0.0)
    return -p_logp.sum(dim=-1)


# --- parsing answers ----------------------------------------------------------------------------

_LETTER_PATTERNS = (
    # "the answer is (B)", "Answer: C"
    r"(?i:answer)\s*(?i:is|:)?\s*(?i:option\s*)?\(?([{L}])\)?(?![A-Za-z])",
    r"^\s*\(?([{L}])\)?(?:[.):\s]|$)",  # "B", "(B)", "B) ...", "C. because" at the start
    r"\(([{L}])\)",  # "(D)" anywhere
)


def parse_answer_letter(text: str, letters: str = "ABCD") -> str | None:
    """The letter a generation chose for a multiple-choice question, or None.

    Tried in order: an explicit "answer is X" / "Answer: (X)" (the last one, a model may correct
    itself), a letter alone at the start ("B", "(B)", "B) ...", "B. ..."), a letter in brackets
    anywhere. Upper case only, so the article "A" inside a sentence is not read as an answer.
    """
    if not letters or not letters.isalpha() or not letters.isupper():
        raise ValueError(f"letters must be upper-case letters, e.g. 'ABCD', got {letters!r}")
    for pattern in _LETTER_PATTERNS:
        found = re.findall(pattern.replace("{L}", re.escape(letters)), text, re.MULTILINE)
        if found:
            return found[-1]
    return None
