"""GPTQ from scratch (chapter 23; Frantar, Ashkboos, Hoefler and Alistarh 2022, "GPTQ: Accurate
Post-Training Quantization for Generative Pre-trained Transformers"), and the exact
optimal-brain-quantization (OBQ) update it computes, written independently as its reference.

A linear layer maps inputs x (in,) to W x. Round-to-nearest makes each weight as close as it can
on its own; GPTQ asks for outputs instead: minimise the mean over calibration inputs of
||W x - Q x||^2 = tr((W - Q) H (W - Q)^T) / 2 with the Hessian ``H = 2 X X^T / N`` of the N
calibration inputs X (in, N) (the sum is N times it), one quadratic per row. Columns are quantized
one at a time, left to right; after column i is fixed at its code, the columns still free move to
cancel its error as well as a quadratic allows (the optimal-brain-surgeon step): with H_F^-1 the
inverse Hessian of the free columns, ``W_F -= (w_i - q_i) / [H_F^-1]_ii * [H_F^-1]_{i, F}``.

Three tricks make this fast and stable: the rows [H_F^-1]_{i, F} / sqrt([H_F^-1]_ii) for every i
are the rows of the *upper Cholesky factor* U of H^-1 (so no inverse is updated); a *damping*
``damp * mean(diag H)`` added to the diagonal keeps H invertible; *lazy blocks* apply each column's
update only inside its block of ``block_size`` columns, and to the columns after the block in one
matrix product once the block is done (the same numbers, fewer memory passes).

Shapes: W (out, in), H (in, in), X (N, in) in the accumulator.
"""
from __future__ import annotations

import torch

from .rtn import (QuantConfig, QuantizedTensor, as_groups,
                  dequantize_codes, find_params, pack, quantize_codes)

DAMP = 0.01  # the paper's damping: 1% of the mean diagonal of H
BLOCK_SIZE = 128  # the paper's lazy-batch width


class Hessian:
    """``H = 2 X X^T / N`` accumulated over batches of inputs (..., in) of one linear layer."""

    def __init__(self, n_in: int):
        self.sum = torch.zeros(n_in, n_in, dtype=torch.float64)
        self.count = 0

    def add(self, x: torch.Tensor) -> None:
        x = x.detach().reshape(-1, x.shape[-1]).float()  # (N, in)
        self.sum += (x.T @ x).double()  # summed in float64 over batches
        self.count += x.shape[0]

    @property
    def matrix(self) -> torch.Tensor:
        if not self.count:
            raise ValueError("no calibration inputs reached this layer: run the calibration set "
                             "first")
        return 2 * self.sum / self.count


def damped(H: torch.Tensor, w: torch.Tensor, damp: float) -> tuple[torch.Tensor, torch.Tensor]:
    """``(H + damp * mean(diag H) I, W)`` with the columns no input ever reached (a zero on H's
    diagonal) set to 0 in W and to 1 on H's diagonal, as the paper's code does."""
    if damp < 0:
        raise ValueError(f"damp must be >= 0, got {damp}")
    H, w = H.clone(), w.clone()
    dead = torch.diag(H) == 0
    H[dead, dead] = 1
    w[:, dead] = 0
    H += damp * torch.diag(H).mean() * torch.eye(H.shape[0], dtype=H.dtype)
    return H, w


def gptq_quantize(w: torch.Tensor, H: torch.Tensor, config: QuantConfig, damp: float = DAMP,
                  block_size: int = BLOCK_SIZE, dtype=torch.float32, grid=None) -> QuantizedTensor:
    """GPTQ (the paper's Algorithm 1): W (out, in) and its layer's H (in, in) -> the quantized W.

    Per tensor and per row the grid (scales, zero points) is fixed from W before the first column;
    per group it is fixed when the group's first column is reached, from the weights as the earlier
    columns' updates left them (groups never straddle a block: ``block_size`` must be a multiple of
    ``group_size``, so the result does not depend on ``block_size``). ``grid``, a pair of (out, 1)
    scales and zero points chosen elsewhere, replaces the per-row grid (to compare with another
    library's rounding convention)."""
    out, n = w.shape
    if H.shape != (n, n):
        raise ValueError(f"H must be ({n}, {n}) for a weight of shape {tuple(w.shape)}, got "
                         f"{tuple(H.shape)}")
    grouped = config.granularity == "group"
    if grouped and block_size % config.group_size:
        raise ValueError(f"block_size {block_size} must be a multiple of group_size "
                         f"{config.group_size}")
    as_groups(w, config)  # refuses a group size that does not divide the columns
    H, W = damped(H.to(dtype), w.detach().to(dtype), damp)
    # H^-1 from H's Cholesky factor (cholesky_solve: 20 times faster than cholesky_inverse on a CPU)
    H_inv = torch.cholesky_solve(torch.eye(n, dtype=dtype), torch.linalg.cholesky(H))
    U = torch.linalg.cholesky(H_inv, upper=True)  # (in, in)
    if grid is not None:
        scale, zero = (t.reshape(-1, 1, 1).float() for t in grid)
    elif not grouped:
        # (out|1, 1, 1)
        scale, zero = find_params(as_groups(W, config), config.bits, config.symmetric)
    if not grouped:
        scale, zero = scale.view(-1).to(dtype), zero.view(-1).to(dtype)  # (out,) or (1,)
    Q = torch.zeros(out, n, dtype=torch.int16)
    scales, zeros = [], []
    for i1 in range(0, n, block_size):
        i2 = min(i1 + block_size, n)
        W1, U1 = W[:, i1:i2].clone(), U[i1:i2, i1:i2]  # (out, B), (B, B)
        E1 = torch.zeros_like(W1)  # each column's scaled error, for the update after the block
        for i in range(i2 - i1):
            if grouped and (i1 + i) % config.group_size == 0:
                s, z = find_params(W1[:, i:i + config.group_size], config.bits, config.symmetric)
                scales.append(s), zeros.append(z)
                scale, zero = s.view(-1).to(dtype), z.view(-1).to(dtype)  # (out,)
            q = quantize_codes(W1[:, i], scale, zero, config.bits, config.symmetric)  # (out,)
            Q[:, i1 + i] = q
            err = (W1[:, i] - dequantize_codes(q, scale, zero).to(dtype)) / U1[i, i]  # (out,)
            W1[:, i:] -= err[:, None] * U1[i, i:][None, :]  # the free columns of this block
            E1[:, i] = err
        W[:, i2:] -= E1 @ U[i1:i2, i2:]  # the lazy update of every later column
    if grouped:
        scale, zero = torch.cat(scales, 1)[..., None], torch.cat(zeros, 1)[..., None]  # (out, G, 1)
    else:
        scale, zero = scale.float().view(-1, 1, 1), zero.float().view(-1, 1, 1)
    return pack(as_groups(Q, config), scale, zero, config, (out, n))


def obq_reference(w: torch.Tensor, H: torch.Tensor, config: QuantConfig, damp: float = DAMP
                  ) -> torch.Tensor:
    """The exact column-by-column optimal-brain-quantization result, written without GPTQ's
    tricks (float64, a fixed grid: per tensor or per row): after columns 0..i are fixed at their
    quantized values Q, the free columns F are the minimiser of the quadratic,
    ``W_F = W0_F - (Q - W0)_{:, 0..i} H_{0..i, F} (H_FF)^-1`` (a linear solve, no Cholesky
    factor, no lazy blocks). Returns the dequantized (out, in) matrix, float64."""
    if config.granularity == "group":
        raise ValueError("the reference fixes its grid up front: use granularity 'row' or 'tensor'")
    H, W0 = damped(H.double(), w.detach().double(), damp)
    n = W0.shape[1]
    scale, zero = find_params(as_groups(W0, config), config.bits, config.symmetric)
    scale, zero = scale.view(-1, 1).double(), zero.view(-1, 1).double()  # (out|1, 1)
    W, Qd = W0.clone(), torch.zeros_like(W0)
    for i in range(n):
        q = quantize_codes(W[:, i:i + 1], scale, zero, config.bits, config.symmetric)
        Qd[:, i:i + 1] = dequantize_codes(q, scale, zero).double()
        if i + 1 < n:
            D = Qd[:, :i + 1] - W0[:, :i + 1]  # (out, i+1): the fixed columns' changes
            rhs = (D @ H[:i + 1, i + 1:]).T  # (F, out)
            W[:, i + 1:] = W0[:, i + 1:] - torch.linalg.solve(H[i + 1:, i + 1:], rhs).T
    return Qd


def output_error(w: torch.Tensor, w_hat: torch.Tensor, H: torch.Tensor) -> float:
    """``tr((W - W_hat) H (W - W_hat)^T) / 2``: the summed squared output error per input."""
    D = (w.double() - w_hat.double())
    return float(torch.einsum("oi,ij,oj->", D, H.double(), D) / 2)
