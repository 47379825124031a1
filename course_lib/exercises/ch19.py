"""Checks for chapter 19, Scaling laws: ``from course_lib.exercises import ch19``."""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from ..scaling.isoflop import matmul_parameters
from ..model import GPTConfig
from ..scaling import LossLaw, isoflop_minimum
from ..sizing import count_parameters, flops_per_token
from . import as_number, call, fail, passed


def check_run_flops(fn) -> None:
    """``fn(config, tokens) -> float``: the training FLOPs of a run of ``GPT(config)`` on ``tokens``
    tokens, counted as the chapter counts them: (6 N + 12 L T C) per token, N the parameters but the
    two lookup tables (token embedding, position table)."""
    base = GPTConfig(vocab_size=65, block_size=64, n_layer=2, n_head=3, n_embd=48, dropout=0.0,
                     tie_weights=False)
    for config, tokens in (
        (base, 1_000_000),
        (replace(base, n_layer=4, n_embd=64, n_head=4), 250_000),
        (replace(base, n_layer=1, n_embd=32, n_head=2, block_size=128), 3_000_000),
    ):
        got = as_number(call(fn, config, tokens), "run_flops(config, tokens)")
        expected = flops_per_token(config) * tokens
        N = matmul_parameters(config)
        if math.isclose(got, 6 * count_parameters(config) * tokens, rel_tol=1e-6):
            fail("you counted 6 x all the parameters: the token embedding and the position table "
                 "are lookups (a row is read, nothing is multiplied), and the attention scores are "
                 "left out.",
                 "N = all parameters but the two tables; per token 6 N + 12 L T C")
        if math.isclose(got, 6 * N * tokens, rel_tol=1e-6):
            fail("that is 6ND: the attention scores and the weighted sum of values are missing.",
                 "add 12 L T C per token (4 L T C forward, x3 with backward)")
        head = config.vocab_size * config.n_embd
        if math.isclose(got, expected - 6 * head * tokens, rel_tol=1e-6):
            fail("the LM head is missing: it is a C x V matrix product every token pays for "
                 "(untied here).",
                 "add V * C to N")
        if math.isclose(got, expected + 6 * config.block_size * config.n_embd * tokens,
                        rel_tol=1e-6):
            fail("you counted the position table: it is a lookup (a row is read), not a matrix "
                 "product.",
                 "leave T * C out of N")
        if math.isclose(got, expected / 3, rel_tol=1e-6):
            fail("that is the forward pass only: training runs backward too, about twice the "
                 "forward.",
                 "multiply the forward FLOPs per token by 3")
        if not math.isclose(got, expected, rel_tol=1e-6):
            fail(f"run_flops gave {got:.4g}, expected {expected:.4g}.", "(6 N + 12 L T C) x tokens")
    passed("(6N + 12LTC) D: the matmuls forward and backward, and attention over the context.")


def check_isoflop_minimum(fn) -> None:
    """``fn(N, losses) -> float``: the compute-optimal size at one budget, the vertex of the
    least-squares parabola of the losses against ln N (N and losses: lists of equal length)."""
    rng = np.random.default_rng(19)
    cases = [([1.4e4, 3.1e4, 5.9e4, 1.0e5, 1.5e5], 2.0, 4.2e4, 0.12),
             ([3e4, 6e4, 1e5, 1.5e5, 2.4e5, 3.4e5], 1.8, 1.3e5, 0.07),
             ([1e3, 1e4, 1e5, 1e6], 3.0, 2e4, 0.02)]
    for N, floor, n_opt, k in cases:
        losses = [floor + k * (math.log(n) - math.log(n_opt)) ** 2 + 0.003 * rng.standard_normal()
                  for n in N]
        got = as_number(call(fn, list(N), list(losses)), "isoflop_minimum(N, losses)")
        expected = isoflop_minimum(N, losses)[0]
        if got in N and not math.isclose(got, expected, rel_tol=1e-3):
            fail("you returned the best run's size: the minimum lies between the runs.",
                 "fit a parabola to the losses against ln N (np.polyfit(np.log(N), losses, 2)) and "
                 "take its vertex")
        p2, p1, _ = np.polyfit(N, losses, 2)
        if p2 > 0 and math.isclose(got, -p1 / (2 * p2), rel_tol=1e-3):
            fail("you fitted the parabola against N itself: IsoFLOP curves are parabolas in ln N.",
                 "fit against np.log(N), then return exp of the vertex")
        if math.isclose(got, math.log(expected), rel_tol=1e-3):
            fail("that is ln N_opt: return N_opt itself.", "math.exp of the vertex")
        if not math.isclose(got, expected, rel_tol=1e-3):
            fail(f"isoflop_minimum gave {got:.4g}, expected {expected:.4g}.",
                 "the vertex -p1 / (2 p2) in ln N")
    passed("the vertex of the parabola in ln N: the compute-optimal size between the runs.")


def check_optimal_size(fn) -> None:
    """``fn(E, A, B, alpha, beta, C) -> float``: the N that minimises L(N, D) = E + A/N^alpha +
    B/D^beta under the budget C = 6 N D."""
    for law, C in ((LossLaw(E=1.69, A=406.4, B=410.7, alpha=0.34, beta=0.28), 5.76e23),
                   (LossLaw(E=1.4, A=60.0, B=400.0, alpha=0.45, beta=0.38), 1e12),
                   (LossLaw(E=1.2, A=20.0, B=900.0, alpha=0.6, beta=0.3), 3e13)):
        got = as_number(call(fn, law.E, law.A, law.B, law.alpha, law.beta, C),
                        "optimal_size(E, A, B, alpha, beta, C)")
        expected = law.optimal_N(C)
        G = (law.alpha * law.A / (law.beta * law.B)) ** (1 / (law.alpha + law.beta))
        if math.isclose(got, G * (C / 6) ** (law.alpha / (law.alpha + law.beta)), rel_tol=1e-4):
            fail("the exponent is swapped: N_opt grows as C^(beta / (alpha + beta)).",
                 "the larger beta (data's exponent), the more of a larger budget goes to N")
        if math.isclose(got, G * C ** law.a, rel_tol=1e-4):
            fail("you used C instead of C / 6: under C = 6 N D, N D = C / 6.")
        if not math.isclose(got, expected, rel_tol=1e-4):
            fail(f"optimal_size gave {got:.4g}, expected {expected:.4g}.",
                 "set dL/dN = 0 with D = C / (6 N): N_opt = G (C/6)^(beta/(alpha+beta)), "
                 "G = (alpha A / (beta B))^(1/(alpha+beta))")
    passed("N_opt = G (C/6)^(beta/(alpha+beta)): the optimal size grows as a power of the budget.")
