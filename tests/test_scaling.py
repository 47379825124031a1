"""course_lib.scaling: each fit recovers what it was given on synthetic data whose answer is known
(a parabola's vertex, a power law's exponent, a law's five constants, the optimum of a law), bad
input is refused in one line, and the bootstrap is reproducible from its seed."""
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

from course_lib.scaling import (LossLaw, bootstrap, fit_loss_law, fit_parabola, fit_power_law,
                                huber, interval, isoflop_frontier, isoflop_minimum,
                                leave_one_budget_out, parabola_minimum, resample_residuals,
                                seed_spread)

LAW = LossLaw(E=1.4, A=60.0, B=400.0, alpha=0.45, beta=0.38)


@settings(max_examples=60, deadline=None)
@given(st.floats(-3, 3), st.floats(0.05, 5), st.floats(-2, 2), st.integers(3, 9))
def test_parabola_minimum_recovers_the_vertex(x0, curvature, y0, n):
    x = np.linspace(x0 - 2.5, x0 + 1.5, n)  # not centred on the vertex: the fit must find it
    got_x, got_y = parabola_minimum(x, curvature * (x - x0) ** 2 + y0)
    assert got_x == pytest.approx(x0, abs=1e-6)
    assert got_y == pytest.approx(y0, abs=1e-6)


def test_parabola_refuses_what_has_no_minimum():
    x = np.array([0.0, 1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="do not bracket a minimum"):
        parabola_minimum(x, -(x - 1.5) ** 2)
    with pytest.raises(ValueError, match="do not bracket a minimum"):
        parabola_minimum(x, 2 * x + 1)  # a straight line: no curvature
    with pytest.raises(ValueError, match="at least 3 distinct"):
        fit_parabola([1.0, 1.0, 2.0], [3.0, 3.0, 4.0])


def test_isoflop_minimum_is_in_log_space():
    N = np.array([1e4, 3e4, 1e5, 3e5, 1e6])
    loss = 2.0 + 0.1 * (np.log(N) - math.log(7e4)) ** 2
    n_opt, l_opt = isoflop_minimum(N, loss)
    assert n_opt == pytest.approx(7e4, rel=1e-6)
    assert l_opt == pytest.approx(2.0, abs=1e-9)


@settings(max_examples=60, deadline=None)
@given(st.floats(1e-3, 1e3), st.floats(-1.5, 1.5))
def test_power_law_recovers_its_constants(k, a):
    C = np.geomspace(1e10, 1e14, 5)
    got_k, got_a = fit_power_law(C, k * C**a)
    assert got_a == pytest.approx(a, abs=1e-9)
    assert got_k == pytest.approx(k, rel=1e-6)


def test_power_law_refuses_bad_input():
    with pytest.raises(ValueError, match="at least 2 distinct"):
        fit_power_law([1e10, 1e10], [1.0, 2.0])
    with pytest.raises(ValueError, match="positive"):
        fit_power_law([1e10, 1e11], [1.0, -2.0])


def test_huber_is_quadratic_then_linear_and_continuous():
    delta = 0.01
    r = torch.tensor([-0.5, -delta, 0.0, 0.005, delta, 0.3], dtype=torch.float64)
    expected = torch.tensor([delta * (0.5 - delta / 2), delta**2 / 2, 0.0, 0.005**2 / 2,
                             delta**2 / 2, delta * (0.3 - delta / 2)], dtype=torch.float64)
    torch.testing.assert_close(huber(r, delta), expected)


def test_the_law_s_optimum_is_the_argmin_under_6nd():
    C = 1e15
    N = np.geomspace(1e4, 1e9, 200_001)
    numeric = N[np.argmin(LAW(N, C / (6 * N)))]
    assert LAW.optimal_N(C) == pytest.approx(numeric, rel=1e-3)
    assert LAW.a == pytest.approx(0.38 / 0.83)


def synthetic_sweep(law: LossLaw, budgets, per_budget: int = 7) -> list[dict]:
    """Runs on the law under C = 6ND, N spread over 16x around each budget's optimum."""
    runs = []
    for C in budgets:
        for N in law.optimal_N(C) * np.geomspace(0.25, 4, per_budget):
            D = C / (6 * N)
            runs.append(dict(budget=C, N=N, D=D, flops=C, loss=float(law(N, D))))
    return runs


def test_isoflop_frontier_recovers_the_law_s_exponents():
    runs = synthetic_sweep(LAW, [1e12, 1e13, 1e14, 1e15])
    frontier = isoflop_frontier(runs)
    # the law is not exactly a parabola in log N: its vertex is a little off, the exponent barely
    assert frontier["a"] == pytest.approx(LAW.a, abs=0.01)
    assert frontier["b"] == pytest.approx(1 - LAW.a, abs=0.01)
    # N_opt D_opt = C / 6 at every budget
    assert frontier["a"] + frontier["b"] == pytest.approx(1.0, abs=1e-9)
    for m in frontier["minima"]:
        assert m["N_opt"] == pytest.approx(LAW.optimal_N(m["C"]), rel=0.05) and m["inside"]



def test_a_vertex_beyond_the_sizes_trained_is_flagged():
    runs = synthetic_sweep(LAW, [1e13, 1e14])
    # at 1e13, only models smaller than the optimum: the vertex lies beyond the largest
    left_arm = []
    for C in (1e13,):
        for N in LAW.optimal_N(C) * np.geomspace(0.05, 0.6, 5):
            left_arm.append(dict(budget=C, N=N, D=C / (6 * N), flops=C,
                                 loss=float(LAW(N, C / (6 * N)))))
    runs = left_arm + [r for r in runs if r["budget"] == 1e14]
    first, second = isoflop_frontier(runs)["minima"]
    assert not first["inside"] and first["N_opt"] > max(r["N"] for r in left_arm)
    assert second["inside"]


def test_isoflop_frontier_needs_two_budgets():
    with pytest.raises(ValueError, match="at least 2 budgets"):
        isoflop_frontier(synthetic_sweep(LAW, [1e12]))


def test_fit_loss_law_recovers_the_constants():
    runs = synthetic_sweep(LAW, [1e11, 1e12, 1e13], per_budget=5)
    fit = fit_loss_law([r["N"] for r in runs], [r["D"] for r in runs], [r["loss"] for r in runs],
                       refine=2)
    for name in ("E", "A", "B", "alpha", "beta"):
        assert getattr(fit, name) == pytest.approx(getattr(LAW, name), rel=1e-3), name


def test_fit_loss_law_from_a_start_and_refusals():
    runs = synthetic_sweep(LAW, [1e11, 1e12], per_budget=4)
    N, D, L = ([r[k] for r in runs] for k in ("N", "D", "loss"))
    near = LossLaw(E=1.3, A=50.0, B=500.0, alpha=0.4, beta=0.4)
    fit = fit_loss_law(N, D, L, start=near)
    assert (fit.alpha == pytest.approx(LAW.alpha, rel=1e-3)
            and fit.beta == pytest.approx(LAW.beta, rel=1e-3))
    with pytest.raises(ValueError, match="at least 5 runs"):
        fit_loss_law(N[:4], D[:4], L[:4])


def test_bootstrap_is_seeded_and_counts_refusals():
    runs = synthetic_sweep(LAW, [1e12, 1e13, 1e14], per_budget=4)
    stat = lambda sample: {"a": isoflop_frontier(sample)["a"]}
    one, dropped_one = bootstrap(runs, stat, n=40, seed=3)
    two, dropped_two = bootstrap(runs, stat, n=40, seed=3)
    np.testing.assert_array_equal(one, two)
    assert dropped_one == dropped_two and len(one) + dropped_one == 40
    assert dropped_one > 0  # some resamples keep fewer than 3 sizes of a budget: refused, counted
    low, high = interval(one[:, 0])
    assert low <= LAW.a <= high
    with pytest.raises(ValueError, match="every resample was refused"):
        bootstrap(runs[:2], stat, n=5)


def test_residual_bootstrap_keeps_every_size_and_brackets_the_exponent():
    rng = np.random.default_rng(0)
    runs = [dict(r, loss=r["loss"] + 0.01 * rng.standard_normal())
            for r in synthetic_sweep(LAW, [1e12, 1e13, 1e14])]
    sample = resample_residuals(runs, np.random.default_rng(1))
    assert [(r["budget"], r["N"]) for r in sample] == [(r["budget"], r["N"]) for r in runs]
    assert [r["loss"] for r in sample] != [r["loss"] for r in runs]
    values, dropped = bootstrap(runs, lambda s: {"a": isoflop_frontier(s)["a"]}, n=200, seed=0,
                                resample=resample_residuals)
    assert dropped == 0
    low, high = interval(values[:, 0])
    # the parabola's own bias (up to 0.01, above) comes on top of the noise's spread
    assert low - 0.01 <= LAW.a <= high + 0.01 and 0 < high - low < 0.2


def _law_runs(law=LAW, budgets=(1e10, 2e10, 4e10, 8e10), seeds=(0, 1, 2), noise=0.01):
    """Runs whose loss is ``law`` at (N, D = C / 6N) plus a seed's noise: 5 sizes around each
    optimum."""
    rng = np.random.default_rng(0)
    runs = []
    for C in budgets:
        for k, N in enumerate(law.optimal_N(C) * np.geomspace(1 / 4, 4, 5)):
            for seed in seeds:
                D = C / (6 * N)
                runs.append(dict(budget=C, shape=f"s{k}", N=N, D=D, flops=C, seed=seed,
                                 loss=float(law(N, D)) + noise * rng.standard_normal()))
    return runs


def test_seed_spread_measures_the_noise_it_was_given():
    runs = _law_runs(noise=0.02)
    spread = seed_spread(runs)
    assert spread["pooled"] == pytest.approx(0.02, rel=0.25)  # 40 degrees of freedom
    mean, sd, n = spread[(1e10, "s0")]
    assert n == 3 and mean == pytest.approx(np.mean([r["loss"] for r in runs[:3]]))
    with pytest.raises(ValueError, match="one seed"):
        seed_spread(_law_runs(seeds=(0,)))


@pytest.mark.slow  # 8 fits of the law from the whole grid of starts
def test_leave_one_budget_out_finds_the_budget_that_breaks_the_law():
    clean = leave_one_budget_out(_law_runs(noise=0.0))
    assert [b["budget"] for b in clean] == [1e10, 2e10, 4e10, 8e10]
    # the law predicts what it made
    assert all(abs(e) < 2e-3 for b in clean for e in b["errors"].values())
    assert all(b["a"] == pytest.approx(LAW.a, abs=0.05) for b in clean)
    shifted = [dict(r, loss=r["loss"] + (0.1 if r["budget"] == 8e10 else 0.0))
               for r in _law_runs(noise=0.0)]
    last = leave_one_budget_out(shifted)[-1]
    # a budget off the law is seen when left out
    assert last["mean_error"] == pytest.approx(0.1, abs=0.01)
    with pytest.raises(ValueError, match="at least 3 budgets"):
        leave_one_budget_out(_law_runs(budgets=(1e10, 2e10)))
