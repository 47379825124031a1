"""Checks for chapter 21, Induction heads: ``from course_lib.exercises import ch21``."""
from __future__ import annotations

import torch

from ..induction.scores import head_scores, induction_pattern, previous_token_pattern
from . import call, expect_close, expect_tensor, fail, passed


def _patterns(B: int, nh: int, T: int, seed: int) -> torch.Tensor:
    """Random causal attention patterns (B, nh, T, T) whose rows sum to 1."""
    g = torch.Generator().manual_seed(seed)
    scores = torch.randn(B, nh, T, T, generator=g) * 2
    scores = scores.masked_fill(~torch.tril(torch.ones(T, T, dtype=torch.bool)), float("-inf"))
    return scores.softmax(-1)


def _stripe(patterns: torch.Tensor, offset: int) -> torch.Tensor:
    """(nh,): the share of attention on one diagonal, mean over rows (``offset`` 0 is the
    current token, -1 the previous one, -2 the one before)."""
    return patterns.diagonal(offset=offset, dim1=-2, dim2=-1).sum(-1).mean(0) / patterns.shape[-1]


def _rows_with_repeats(B: int, T: int, seed: int) -> torch.Tensor:
    """(B, T) rows ending in a segment written twice, its length different in each row."""
    g = torch.Generator().manual_seed(seed)
    rows = torch.randint(0, 32, (B, T), generator=g)
    for b in range(B):
        L = 4 + b % 4
        segment = torch.randperm(32, generator=g)[:L]
        rows[b, T - 2 * L:T - L], rows[b, T - L:] = segment, segment
    return rows


def check_previous_token_score(fn) -> None:
    """``fn(patterns) -> scores``: for one layer's attention patterns (B, nh, T, T), each head's
    previous-token score (nh,): per row, the share of the head's attention from query t to key
    t - 1 (summed over queries, divided by the sum of all its attention, T), then the mean over
    rows. TransformerLens's ``previous_token_head`` with ``error_measure="mul"``."""
    for B, nh, T, seed in ((3, 4, 10, 0), (2, 2, 7, 1)):
        patterns = _patterns(B, nh, T, seed)
        got = call(fn, patterns.clone())
        expect_tensor(got, (nh,), "scores",
                      "one score per head: average over rows and sum over (query, key)")
        expected = head_scores(patterns[:, None], previous_token_pattern(torch.zeros(B, T)))[0]
        for offset, what in ((0, "the current token (the main diagonal)"),
                             (-2, "the token two back"), (1, "the next token, above the diagonal, "
                                                             "where a causal pattern is 0")):
            if torch.allclose(got.double(), _stripe(patterns, offset).double(), atol=1e-6):
                fail(f"your scores measure attention to {what}: off by one position.",
                     "query t, key t - 1: patterns.diagonal(offset=-1, dim1=-2, dim2=-1)")
        if torch.allclose(got.double(), patterns.diagonal(-1, -2, -1).mean((0, -1)).double(),
                          atol=1e-6):
            fail("your scores average the diagonal over its T - 1 entries; TransformerLens divides "
                 "the attention on it by all the attention of the row, T (query 0 has no previous "
                 "token).",
                 "sum the diagonal over queries and divide by T (or by patterns.sum((-2, -1)))")
        expect_close(got, expected, "scores",
                     "for each row: sum of patterns[b, h, t, t - 1] over t, divided "
                     "by T; then the mean over rows")
    passed("the share of each head's attention on the previous token, as TransformerLens scores "
           "it.")


def check_induction_score(fn) -> None:
    """``fn(patterns, tokens) -> scores``: patterns (B, nh, T, T), tokens (B, T) -> (nh,): per row,
    the share of attention from query t to key s + 1 for every earlier s < t whose token equals
    token t (the token after an earlier occurrence), then the mean over rows. The repeats differ
    in length from row to row, so no single diagonal finds them."""
    for B, nh, T, seed in ((4, 3, 24, 2), (4, 2, 18, 3)):
        patterns, tokens = _patterns(B, nh, T, seed), _rows_with_repeats(B, T, seed)
        got = call(fn, patterns.clone(), tokens.clone())
        expect_tensor(got, (nh,), "scores", "one score per head, averaged over rows")
        expected = head_scores(patterns[:, None], induction_pattern(tokens))[0]
        # duplicate tokens
        same = torch.tril((tokens[:, :, None] == tokens[:, None, :]).float(), -1)
        duplicate = head_scores(patterns[:, None], same)[0]
        before = torch.zeros_like(same)
        before[:, :, :-1] = same[:, :, 1:]  # key s - 1: shifted the wrong way
        if torch.allclose(got.double(), duplicate.double(), atol=1e-6):
            fail("your scores measure attention to the earlier occurrence of the current token "
                 "itself: that is a duplicate-token head. An induction head looks one position "
                 "later.",
                 "key s + 1 for each earlier s with tokens[s] == tokens[t]")
        if torch.allclose(got.double(), head_scores(patterns[:, None], before)[0].double(),
                          atol=1e-6):
            fail("your scores look at the token before the earlier occurrence (key s - 1): off by "
                 "one position, the wrong way.",
                 "key s + 1 for each earlier s with tokens[s] == tokens[t]")
        expect_close(got, expected, "scores",
                     "mark (t, s + 1) for every s < t with tokens[s] == tokens[t] "
                     "(keep s + 1 <= t), multiply with the patterns, sum, divide by T, mean over "
                     "rows")
    passed("the induction score, with the repeat found by the tokens, not by a fixed offset.")


def check_mean_ablation(fn) -> None:
    """``fn(z, head, mean_z) -> z_new``: z (B, T, nh, hs) the heads' outputs at a hook point, mean_z
    (T, nh, hs) each head's mean output at each position over reference rows; return z with head
    ``head`` replaced by its mean at every position (the other heads untouched)."""
    g = torch.Generator().manual_seed(21)
    B, T, nh, hs = 3, 5, 4, 6
    for head in (1, 3):
        z, mean_z = torch.randn(B, T, nh, hs, generator=g), torch.randn(T, nh, hs, generator=g)
        got = call(fn, z.clone(), head, mean_z.clone())
        expect_tensor(got, (B, T, nh, hs), "z_new", "return a tensor shaped like z (B, T, nh, hs)")
        expected = z.clone()
        expected[:, :, head] = mean_z[:, head]
        got, z, mean_z = got.double(), z.double(), mean_z.double()  # any float dtype compares
        if torch.allclose(got, z):
            fail("z_new equals z: no head was replaced.",
                 "z[:, :, head] = mean_z[:, head] on a copy of z")
        if torch.allclose(got[:, :, head], torch.zeros(B, T, hs, dtype=got.dtype)):
            fail("you zero the head: that is zero-ablation. Mean-ablation writes its mean output "
                 "instead.",
                 "mean_z[:, head] holds it, one vector per position")
        if not torch.allclose(torch.cat([got[:, :, :head], got[:, :, head + 1:]], 2),
                              torch.cat([z[:, :, :head], z[:, :, head + 1:]], 2)):
            fail(f"other entries of z changed, not only head {head}: the wrong axis.",
                 "z is (B, T, nh, hs): the head is the third axis, z[:, :, head]")
        if torch.allclose(got[:, :, head], mean_z[:, head].mean(0).expand(B, T, hs)):
            fail("you write one vector at every position (the mean over positions too): "
                 "mean-ablation keeps each position's mean, which the positions' embeddings make "
                 "different.",
                 "mean_z[:, head] is (T, hs): one mean per position")
        expect_close(got, expected, "z_new", "z[:, :, head] = mean_z[:, head]")
    passed("the head replaced by its mean output at each position, the others untouched.")
