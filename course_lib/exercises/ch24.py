"""Checks for chapter 24, Beyond attention: ``from course_lib.exercises import ch24``."""
from __future__ import annotations

import torch

from ..linear_attention.rules import gated_delta_rule_recurrent, l2norm, within_chunk_decay
from . import call, expect_close, expect_sequence, expect_tensor, fail, passed


def _close(a: torch.Tensor, b: torch.Tensor) -> bool:
    return (isinstance(a, torch.Tensor) and a.shape == b.shape
            and torch.allclose(a.double(), b.double(), atol=1e-5))


def check_delta_write(fn) -> None:
    """``fn(S, k, v, beta) -> S_new``: one delta-rule write. S (B, H, dk, dv), a raw key k (B, H,
    dk) to L2-normalise first, a value v (B, H, dv), beta (B, H): S + k (beta (v - S^T k))^T."""
    g = torch.Generator().manual_seed(24)
    B, H, dk, dv = 2, 3, 6, 4
    for _ in range(3):
        S, k = torch.randn(B, H, dk, dv, generator=g), 3 * torch.randn(B, H, dk, generator=g)
        v, beta = torch.randn(B, H, dv, generator=g), torch.rand(B, H, generator=g)
        got = call(fn, S.clone(), k.clone(), v.clone(), beta.clone())
        expect_tensor(got, (B, H, dk, dv), "S_new",
                      "the new state has the old one's shape (B, H, dk, dv)")
        kn = l2norm(k)
        error = v - (S * kn[..., None]).sum(-2)
        expected = S + kn[..., None] * (beta[..., None] * error)[..., None, :]
        raw_error = v - (S * k[..., None]).sum(-2)
        if _close(got, S + k[..., None] * (beta[..., None] * raw_error)[..., None, :]):
            fail("you wrote with the raw key: its length multiplies the write, so a key three "
                 "times as long writes nine times as much, and reading it back no longer returns "
                 "v.",
                 "k = k / k.norm(dim=-1, keepdim=True) first (or rules.l2norm), then the delta "
                 "rule")
        if _close(got, S + kn[..., None] * (beta[..., None] * v)[..., None, :]):
            fail("you added beta k v^T, as plain linear attention does: the old value stored under "
                 "k is never taken out.",
                 "write beta (v - S^T k), the error of what S predicts for k")
        expect_close(got, expected, "S_new",
                     "S + k_hat (beta (v - S^T k_hat))^T with k_hat = k / |k|")
    k = l2norm(torch.randn(1, 1, dk, generator=g))
    v = torch.randn(1, 1, dv, generator=g)
    S_new = call(fn, torch.randn(1, 1, dk, dv, generator=g), k, v, torch.ones(1, 1))
    expect_close((S_new * k[..., None]).sum(-2), v, "reading k back after a write with beta = 1",
                 "with a unit key and beta = 1 the delta rule replaces the value stored under k by "
                 "v")
    passed("the error of the prediction is written, along a unit key: with beta = 1, reading k "
           "gives v.")


def check_gated_step(fn) -> None:
    """``fn(S, q, k, v, g, beta) -> (o, S_new)``: one step of Gated DeltaNet for keys and queries
    already normalised: decay S by exp(g), then the delta-rule write, then read o = S^T q."""
    gen = torch.Generator().manual_seed(240)
    B, H, dk, dv = 2, 2, 5, 3
    for _ in range(3):
        S = torch.randn(B, H, dk, dv, generator=gen)
        q, k = (l2norm(torch.randn(B, H, dk, generator=gen)) for _ in range(2))
        v, g = torch.randn(B, H, dv, generator=gen), -torch.rand(B, H, generator=gen) * 2
        beta = torch.rand(B, H, generator=gen)
        got = call(fn, S.clone(), q, k, v, g, beta)
        o, S_new = expect_sequence(got, 2, "gated_step(...)", "return (o, S_new)")
        ref_o, ref_S = gated_delta_rule_recurrent(q[:, :, None], k[:, :, None], v[:, :, None],
                                                  g[:, :, None], beta[:, :, None], state=S.clone(),
                                                  normalize=False)
        decay = g.exp()[..., None, None]
        error = v - (S * k[..., None]).sum(-2)
        after = decay * (S + k[..., None] * (beta[..., None] * error)[..., None, :])
        if _close(S_new, after):
            fail("you decayed the state after the write: the new token's own write is then "
                 "forgotten a little, and the prediction S^T k was made from a state that had not "
                 "decayed yet.",
                 "S = exp(g) S first; then predict, write and read from that decayed state")
        if _close(S_new, S + k[..., None] * (beta[..., None] * error)[..., None, :]):
            fail("your state never decays: that is the plain delta rule.",
                 "multiply S by exp(g) before the write")
        expect_tensor(S_new, (B, H, dk, dv), "S_new")
        expect_close(S_new, ref_S, "S_new", "S = exp(g) S; S = S + k (beta (v - S^T k))^T")
        expect_close(o, ref_o[:, :, 0], "o", "read the new state: o = S^T q, (B, H, dv)")
    passed("decay, then write, then read: the order of Gated DeltaNet.")


def check_chunk_decay(fn) -> None:
    """``fn(g) -> D``: for log decays g (C,) of one chunk, D (C, C) with D[t, i] the share of
    position i's write still there at position t: exp(g_{i+1} + ... + g_t) for i <= t, else 0."""
    gen = torch.Generator().manual_seed(2400)
    for C in (4, 7):
        g = -torch.rand(C, generator=gen)
        D = call(fn, g.clone())
        expect_tensor(D, (C, C), "D", "one row per position t, one column per earlier position i")
        expected = within_chunk_decay(g)
        cum = g.cumsum(-1)
        if _close(D, expected.T):
            fail("D is transposed: row t must hold the writes of positions i <= t.",
                 "index D[t, i]")
        if _close(D, expected - torch.eye(C)):
            fail("the diagonal is 0: a token's own write does reach its own read (o_t reads S_t, "
                 "which holds the write of token t).",
                 "keep i <= t, not i < t: torch.ones(C, C).tril(), not .tril(-1)")
        shifted = torch.where(torch.ones(C, C, dtype=torch.bool).tril(),
                              (cum[:, None] - cum[None, :] + g[None, :])
                              .exp(), torch.zeros(C, C))
        if _close(D, shifted):
            fail("off by one: you applied g_i to position i's own write, but in Gated DeltaNet a "
                 "token's decay comes before its write, so D[t, t] = 1.",
                 "exp(cumsum(g)[t] - cumsum(g)[i]): the decays of positions i+1 .. t")
        expect_close(D, expected, "D", "exp(cum[t] - cum[i]) below and on the diagonal, 0 above it")
    passed("the decays between positions i and t of a chunk, one on the diagonal, none from the "
           "future.")
