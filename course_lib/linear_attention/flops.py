"""Chapter 24's FLOP count: every operation of a hybrid decoder's forward pass, per token, term by
term, so that all-attention, all-DeltaNet and hybrids can be trained at equal compute.

The convention: a multiply-add in a matrix product is 2 FLOPs; any other arithmetic operation on one
number (an add, a multiply, an exp, a log, a division, an rsqrt) is 1. So SiLU x sigmoid(x) is 4
(exp, add, divide, multiply), sigmoid 3, softplus log(1 + e^x) 3, an RMSNorm of n numbers 3n + 2
(squares, their mean, + eps, rsqrt, the scaling). Training costs three forward passes (the backward
pass two), the usual estimate, so ``HybridGPT.flops_per_token`` is 6 per weight (the projections,
the convolution, the head) plus 3 x the rest counted here.

- ``deltanet_terms``: one Gated DeltaNet layer's work besides its weights, as the chunked form of
  ``rules.gated_delta_rule_chunked`` computes it (the products inside each chunk, the triangular
  solve, the decays, the state update), with the normalisations and the gates around it.
- ``attention_terms``: one gated attention layer's work besides its weights: QK-norm, RoPE, the
  scores and the weighted values over the causal half of a T x T matrix (context T / 2 on average),
  the softmax, the output gate.
- ``block_terms``, ``head_terms``: what every block (two norms, the residual adds, SwiGLU's
  activation) and the head (the final norm, the loss's softmax) add, whatever the mixer.
"""

from __future__ import annotations

import math


def _rms_norm(n: int) -> int:
    """x * rsqrt(mean(x^2) + eps): n squares, n adds for the mean, + eps, rsqrt, n multiplies."""
    return 3 * n + 2


def deltanet_terms(s, T: int) -> dict[str, float]:
    """Forward FLOPs per token of one Gated DeltaNet layer besides its weights, by name. ``s`` has
    the resolved sizes (``hybrid._Sizes``); ``T`` the sequence length, cut into chunks of
    s.chunk_size and padded to whole chunks as the chunked form pads it (the padding's work is
    counted: it is done)."""
    H, dk, dv, C = s.linear_v_heads, s.linear_k_dim, s.linear_v_dim, s.chunk_size
    conv_dim = 2 * s.linear_k_heads * dk + H * dv
    # chunks per token, times the heads (q and k repeated to H)
    per_chunk = math.ceil(T / C) * H / T
    return {
        "conv SiLU": 4 * conv_dim,
        "beta = sigmoid(b)": 3 * H,
        "g = -e^A softplus(a + dt)": 5 * H,  # add, softplus (3), multiply
        "L2 norm of q and k, q scaled": H * (2 * _rms_norm(dk) + dk),
        # inside a chunk: k k^T and q k^T (C x C x dk each), D (C^2 subtracts and exps), the
        # products
        # beta * D * (k k^T), + I, D * (q k^T) (4 C^2), the cumulative sums and decays (5 C)
        "chunk: k k^T, q k^T": per_chunk * 2 * (2 * C * C * dk),
        "chunk: decays and masks": per_chunk * (6 * C * C + 5 * C),
        "chunk: triangular solve": per_chunk
        * C
        * (C - 1)
        * dv,  # row t: t - 1 multiply-adds per column
        "chunk: reads of the writes (C x C x dv)": per_chunk * 2 * C * C * dv,
        # across chunks: K S0 and Q S0 (C x dk x dv), the new state k^T U (C x dk x dv)
        "state: predict, read, write": per_chunk * 3 * (2 * C * dk * dv),
        "state: decay and add": per_chunk * (2 * dk * dv + C * dk),  # gamma_C S0, + ..., to_end * k
        "state: right-hand side and output scalings": per_chunk * 5 * C * dv,
        "output: RMSNorm, SiLU(z) gate": H * (_rms_norm(dv) + dv + 4 * dv + dv),
    }


def attention_terms(c, T: int) -> dict[str, float]:
    """Forward FLOPs per token of one gated attention layer besides its weights, by name, at an
    average context of T / 2 (causal). ``c``: the HybridConfig."""
    nh, nkv, hs, ctx = c.n_head, c.kv_heads, c.head_size, T // 2
    r = 2 * len(range(0, int(hs * c.rotary_fraction), 2))  # the channels RoPE turns (hybrid.rope)
    return {
        "QK-norm": (nh + nkv) * (_rms_norm(hs) + 2 * hs),  # + the gain 1 + w and its multiply
        "RoPE": (nh + nkv) * 3 * r,  # a cos - b sin, a sin + b cos: 6 per pair
        "scores q k^T": nh * 2 * ctx * hs,
        "scale and softmax": nh * 6 * ctx,  # scale, max, subtract, exp, sum, divide
        "weighted values": nh * 2 * ctx * hs,
        "output gate": nh * hs * 4,  # sigmoid (3) and multiply
    }


def block_terms(c, ffn_hidden: int) -> dict[str, float]:
    """Forward FLOPs per token every block adds besides its weights and its mixer."""
    return {
        "two norms": 2 * (_rms_norm(c.n_embd) + 2 * c.n_embd),
        "residual adds": 2 * c.n_embd,
        "SwiGLU SiLU and product": 5 * ffn_hidden,
    }


def head_terms(c) -> dict[str, float]:
    """The final norm and the loss: log-softmax over V (max, subtract, exp, sum, log, pick)."""
    return {"final norm": _rms_norm(c.n_embd) + 2 * c.n_embd, "loss softmax": 5 * c.vocab_size}
