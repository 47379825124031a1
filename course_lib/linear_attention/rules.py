"""Chapter 24: attention without the softmax as a running state, and the rules that write to it.

Every function here works on one layout, the course's heads layout: queries and keys (B, H, T, dk),
values (B, H, T, dv), per-token scalars (B, H, T), a state (B, H, dk, dv). The state is what a
layer remembers of the whole past: dk x dv numbers per head, however long the past is.

- ``causal_linear_attention``: softmax attention with the softmax taken out, in parallel (T x T).
- ``linear_attention_recurrent``: the same outputs from a running sum of outer products k v^T.
- ``delta_rule_recurrent``: the state corrects what it predicts for k instead of adding to it.
- ``gated_delta_rule_recurrent``: the delta rule with a decay (a gate) before each write: Gated
  DeltaNet (Yang, Kautz and Hatamizadeh 2024), as Qwen3.5 and Qwen3-Next run it token by token.
- ``gated_delta_rule_chunked``: the same outputs computed a chunk at a time: matrix products inside
  a chunk, the recurrence only across chunks (how it trains fast).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F


def l2norm(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """x (..., D) scaled to unit length along D (eps as Hugging Face's and FLA's kernels put it)."""
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + eps)


def causal_linear_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Attention without the softmax: o_t = sum over i <= t of (q_t . k_i) v_i.
    q, k (B, H, T, dk), v (B, H, T, dv) -> (B, H, T, dv). Costs T x T like attention."""
    T = q.shape[-2]
    scores = (q @ k.transpose(-1, -2)).masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), 0.0)
    return scores @ v  # (B, H, T, dv)


def linear_attention_recurrent(q, k, v, state=None):
    """The same outputs as ``causal_linear_attention``, one token at a time: since
    sum_i (q . k_i) v_i = (sum_i k_i v_i^T)^T q, keep S = sum_i k_i v_i^T (B, H, dk, dv) and read
    it. Returns (outputs (B, H, T, dv), the final state)."""
    B, H, T, dk = k.shape
    S = q.new_zeros(B, H, dk, v.shape[-1]) if state is None else state
    out = []
    for t in range(T):
        S = S + k[:, :, t, :, None] * v[:, :, t, None, :]  # write: add the outer product k v^T
        out.append((S * q[:, :, t, :, None]).sum(-2))  # read: S^T q, (B, H, dv)
    return torch.stack(out, dim=2), S


def delta_rule_recurrent(q, k, v, beta, state=None):
    """The delta rule (Widrow and Hoff 1960; DeltaNet, Schlag et al. 2021): the state first predicts
    a value for the key, S^T k, and writes only beta times the error v - S^T k. With a unit-length
    key and beta = 1, reading the key right after returns v exactly. beta (B, H, T) in (0, 1)."""
    B, H, T, dk = k.shape
    S = q.new_zeros(B, H, dk, v.shape[-1]) if state is None else state
    out = []
    for t in range(T):
        k_t = k[:, :, t]  # (B, H, dk)
        error = v[:, :, t] - (S * k_t[..., None]).sum(-2)  # v - S^T k, (B, H, dv)
        S = S + k_t[..., None] * (beta[:, :, t, None] * error)[..., None, :]
        out.append((S * q[:, :, t, :, None]).sum(-2))
    return torch.stack(out, dim=2), S


def prepare_qk(q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Gated DeltaNet's queries and keys: both L2-normalised (so a key is a direction and the
    delta rule cannot blow the state up), queries also scaled by dk^-0.5, in float32."""
    q, k = l2norm(q.float()), l2norm(k.float())
    return q * q.shape[-1] ** -0.5, k


def gated_delta_rule_recurrent(q, k, v, g, beta, state=None, normalize: bool = True):
    """Gated DeltaNet token by token. g (B, H, T) is the log of the decay (<= 0), beta (B, H, T) the
    write strength. For each t:

        S = exp(g_t) S                          forget a little of everything (the gate)
        S = S + k_t (beta_t (v_t - S^T k_t))^T   write the error of the prediction (delta rule)
        o_t = S^T q_t                            read

    ``normalize`` applies ``prepare_qk`` first (as Qwen3.5 does). Computes in float32; returns
    (outputs (B, H, T, dv) float32, final state (B, H, dk, dv))."""
    if normalize:
        q, k = prepare_qk(q, k)
    q, k, v, g, beta = (x.float() for x in (q, k, v, g, beta))
    B, H, T, dk = k.shape
    S = v.new_zeros(B, H, dk, v.shape[-1]) if state is None else state.float()
    out = []
    for t in range(T):
        S = S * g[:, :, t, None, None].exp()
        k_t = k[:, :, t]
        error = v[:, :, t] - (S * k_t[..., None]).sum(-2)
        S = S + k_t[..., None] * (beta[:, :, t, None] * error)[..., None, :]
        out.append((S * q[:, :, t, :, None]).sum(-2))
    return torch.stack(out, dim=2), S


def within_chunk_decay(g: torch.Tensor) -> torch.Tensor:
    """How much of a write at position i of a chunk survives to position t of it:
    exp(g_{i+1} + ... + g_t) for i <= t (1 on the diagonal: a token's own write is made after its
    decay), 0 above the diagonal (the future). g (..., C) -> (..., C, C), indexed [t, i]."""
    cum = g.cumsum(-1)  # gamma_t = g_1 + ... + g_t
    C = g.shape[-1]
    future = torch.ones(C, C, dtype=torch.bool, device=g.device).triu(1)
    return (cum[..., :, None] - cum[..., None, :]).masked_fill(future, float("-inf")).exp()


def gated_delta_rule_chunked(q, k, v, g, beta, chunk_size: int = 64, state=None,
                             normalize: bool = True):
    """The outputs of ``gated_delta_rule_recurrent``, a chunk of C tokens at a time.

    Inside a chunk with starting state S0 and Gamma_t = exp(g_1 + ... + g_t), unrolling the
    recurrence gives the writes u_t = beta_t (v_t - Gamma_t S0^T k_t - sum_{i<t} D_ti (k_t . k_i)
    u_i), with D = ``within_chunk_decay``: a unit lower-triangular system (I + A) U = beta (V -
    Gamma K S0), solved for all C writes at once. Then every output and the next state are matrix
    products:

        o_t = Gamma_t S0^T q_t + sum_{i<=t} D_ti (q_t . k_i) u_i
        S_C = Gamma_C S0 + sum_i (Gamma_C / Gamma_i) k_i u_i^T

    Only the loop over chunks is sequential (T / C steps instead of T). The sequence is padded with
    zeros to a multiple of C (a zero key writes nothing; g = 0 decays nothing)."""
    if normalize:
        q, k = prepare_qk(q, k)
    q, k, v, g, beta = (x.float() for x in (q, k, v, g, beta))
    B, H, T, dk = k.shape
    dv, C = v.shape[-1], chunk_size
    pad = (C - T % C) % C
    q, k, v = (F.pad(x, (0, 0, 0, pad)) for x in (q, k, v))
    g, beta = F.pad(g, (0, pad)), F.pad(beta, (0, pad))
    n = (T + pad) // C
    q, k, v = (x.reshape(B, H, n, C, -1) for x in (q, k, v))  # (B, H, n, C, d)
    g, beta = g.reshape(B, H, n, C), beta.reshape(B, H, n, C)
    D = within_chunk_decay(g)  # (B, H, n, C, C)
    cum = g.cumsum(-1)  # log Gamma_t
    gamma = cum.exp()  # Gamma_t, (B, H, n, C)
    strictly_lower = torch.ones(C, C, dtype=torch.bool).tril(-1)
    A = (beta[..., None] * D * (k @ k.transpose(-1, -2))).masked_fill(~strictly_lower, 0.0)
    system = A + torch.eye(C)  # I + A, unit lower triangular
    reads = D * (q @ k.transpose(-1, -2))  # (q_t . k_i) D_ti, zero above the diagonal
    to_end = (cum[..., -1:] - cum).exp()[..., None]  # Gamma_C / Gamma_i, (B, H, n, C, 1)
    S = v.new_zeros(B, H, dk, dv) if state is None else state.float()
    out = []
    for c in range(n):
        rhs = beta[:, :, c, :, None] * (v[:, :, c] - gamma[:, :, c, :, None] * (k[:, :, c] @ S))
        U = torch.linalg.solve_triangular(system[:, :, c], rhs, upper=False, unitriangular=True)
        out.append(gamma[:, :, c, :, None] * (q[:, :, c] @ S) + reads[:, :, c] @ U)
        S = (gamma[:, :, c, -1, None, None] * S
             + (to_end[:, :, c] * k[:, :, c]).transpose(-1, -2) @ U)
    return torch.cat(out, dim=2)[:, :, :T], S


def state_bytes(batch: int, heads: int, dk: int, dv: int, element_size: int = 4) -> int:
    """Bytes of one layer's Gated DeltaNet state: B x H x dk x dv numbers, whatever the length."""
    return batch * heads * dk * dv * element_size


def kv_cache_bytes(batch: int, heads: int, head_size: int, tokens: int,
                   element_size: int = 4) -> int:
    """Bytes of one attention layer's KV cache after ``tokens`` tokens: a key and a value per token
    and head, so it grows by 2 x H x hs numbers a token."""
    return 2 * batch * heads * head_size * tokens * element_size
