"""Scaling laws fitted to measured runs (chapter 19): Chinchilla's approaches 2 and 3
(Hoffmann et al. 2022), with bootstrap intervals. Nothing here trains: the runs come from
:mod:`course_lib.scaling.isoflop` (or any list of ``(N, D, C, loss)``).

- Approach 2, IsoFLOP profiles: at each compute budget C, the final loss against log N is fitted
  by a parabola; its vertex is the compute-optimal size N_opt(C) (and, against log D, the
  optimal tokens D_opt(C)). Power laws N_opt = k_N C^a and D_opt = k_D C^b are then fitted
  through the vertices, in log-log space.
- Approach 3, the parametric law L(N, D) = E + A / N^alpha + B / D^beta, fitted as the paper does:
  the Huber loss (delta 1e-3) between log L and log of the law, written as
  LSE(a - alpha log N, b - beta log D, e) with A = e^a, B = e^b, E = e^e, minimised by L-BFGS from
  a grid of starts (here: the whole grid scored at once, the best starts refined).

Symbols: N parameters, D training tokens, C training FLOPs, L validation loss in nats per token.
"""
from __future__ import annotations

import hashlib
import itertools
import math
from dataclasses import asdict, dataclass

import numpy as np
import torch

HUBER_DELTA = 1e-3  # Hoffmann et al. 2022, appendix D.2
# Appendix D.2's grid of initialisations: alpha, beta in {0, 0.5, ..., 2}, e in {-1, -0.5, ..., 1},
# a, b in {0, 5, ..., 25}.
START_GRID = dict(alpha=np.arange(0, 2.01, 0.5), beta=np.arange(0, 2.01, 0.5),
                  e=np.arange(-1, 1.01, 0.5), a=np.arange(0, 25.1, 5), b=np.arange(0, 25.1, 5))
REFINED_STARTS = 8  # the grid's best starts that L-BFGS refines


# --- approach 2: IsoFLOP profiles ---------------------------------------------------------------


def fit_parabola(x, y) -> tuple[float, float, float]:
    """The least-squares parabola y = p2 x^2 + p1 x + p0 through the points (x, y): (p2, p1, p0)."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if len(x) != len(y) or len(np.unique(x)) < 3:
        raise ValueError(f"a parabola needs at least 3 distinct x values, got {len(np.unique(x))}: "
                         "train at least 3 model sizes at this budget")
    p2, p1, p0 = np.polyfit(x, y, 2)
    return float(p2), float(p1), float(p0)


def parabola_minimum(x, y) -> tuple[float, float]:
    """(x*, y*) the vertex of the least-squares parabola through (x, y). A parabola that opens
    downwards has no minimum: refused, since the points do not bracket one."""
    p2, p1, p0 = fit_parabola(x, y)
    span = np.ptp(np.asarray(x, dtype=float))
    # no curvature above rounding: a line
    if p2 * span**2 <= 1e-9 * max(1.0, float(np.abs(y).max())):
        raise ValueError("the points curve downwards (or lie on a line): they do not bracket a "
                         "minimum; add a smaller and a larger model at this budget")
    x_min = -p1 / (2 * p2)
    return x_min, p0 - p1 * p1 / (4 * p2)


def isoflop_minimum(sizes, losses) -> tuple[float, float]:
    """(N_opt, L_opt) at one budget: the vertex of the parabola of loss against ln N (``sizes``
    may be N or D: the same fit gives D_opt against ln D)."""
    log_n, loss = parabola_minimum(np.log(np.asarray(sizes, dtype=float)), losses)
    return math.exp(log_n), loss


def fit_power_law(x, y) -> tuple[float, float]:
    """(k, a) of y = k x^a, fitted as a straight line in log-log space (least squares)."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if len(np.unique(x)) < 2 or (y <= 0).any() or (x <= 0).any():
        raise ValueError("a power law needs at least 2 distinct positive x values and positive y "
                         "values")
    a, log_k = np.polyfit(np.log(x), np.log(y), 1)
    return float(math.exp(log_k)), float(a)


def isoflop_frontier(runs: list[dict]) -> dict:
    """Approach 2 on ``runs`` (dicts with ``budget``, ``N``, ``D``, ``flops``, ``loss``; runs of a
    budget share its nominal ``budget`` key): each budget's minimum in N and in D (``inside``:
    whether the vertex lies within the sizes trained, not extrapolated beyond them), then the power
    laws N_opt(C) = k_N C^a and D_opt(C) = k_D C^b through them (C: the budget's mean actual
    FLOPs)."""
    minima = []
    for budget in sorted({r["budget"] for r in runs}):
        mine = [r for r in runs if r["budget"] == budget]
        n_opt, loss_opt = isoflop_minimum([r["N"] for r in mine], [r["loss"] for r in mine])
        d_opt, _ = isoflop_minimum([r["D"] for r in mine], [r["loss"] for r in mine])
        sizes = [r["N"] for r in mine]
        minima.append(dict(budget=budget, C=float(np.mean([r["flops"] for r in mine])), N_opt=n_opt,
                           D_opt=d_opt,
                           # False: extrapolated
                           loss_opt=loss_opt, inside=min(sizes) <= n_opt <= max(sizes)))
    if len(minima) < 2:
        raise ValueError("the frontier needs at least 2 budgets")
    C = [m["C"] for m in minima]
    k_n, a = fit_power_law(C, [m["N_opt"] for m in minima])
    k_d, b = fit_power_law(C, [m["D_opt"] for m in minima])
    return dict(minima=minima, k_N=k_n, a=a, k_D=k_d, b=b)


# --- approach 3: the parametric law -------------------------------------------------------------


@dataclass(frozen=True)
class LossLaw:
    """L(N, D) = E + A / N^alpha + B / D^beta: E the loss of an infinite model trained on infinite
    data (the text's entropy, for this model family), the two other terms what a finite N and a
    finite D cost."""
    E: float
    A: float
    B: float
    alpha: float
    beta: float

    def __call__(self, N, D):
        N, D = np.asarray(N, dtype=float), np.asarray(D, dtype=float)
        return self.E + self.A / N**self.alpha + self.B / D**self.beta

    def optimal_N(self, C: float, flops_per_param_token: float = 6.0) -> float:
        """The N that minimises L under C = k N D (k = ``flops_per_param_token``, 6 for 6ND):
        N_opt = G (C / k)^(beta / (alpha + beta)), G = (alpha A / (beta B))^(1 / (alpha + beta))."""
        G = (self.alpha * self.A / (self.beta * self.B)) ** (1 / (self.alpha + self.beta))
        return G * (C / flops_per_param_token) ** (self.beta / (self.alpha + self.beta))

    @property
    def a(self) -> float:
        """The exponent of N_opt(C) this law implies: beta / (alpha + beta)."""
        return self.beta / (self.alpha + self.beta)

    def as_dict(self) -> dict:
        return asdict(self)


def huber(r: torch.Tensor, delta: float = HUBER_DELTA) -> torch.Tensor:
    """The Huber loss of residuals ``r``: r^2 / 2 within delta, delta (|r| - delta / 2) beyond."""
    a = r.abs()
    return torch.where(a <= delta, 0.5 * r * r, delta * (a - 0.5 * delta))


def law_objective(theta: torch.Tensor, log_n, log_d, log_loss,
                  delta: float = HUBER_DELTA) -> torch.Tensor:
    """Summed Huber loss of ``theta`` (..., 5) = (a, b, e, alpha, beta) on the runs (R,), for any
    leading shape of starts: log L_hat = LSE(a - alpha ln N, b - beta ln D, e)."""
    a, b, e, alpha, beta = theta.unbind(-1)
    terms = torch.stack([a[..., None] - alpha[..., None] * log_n,
                         b[..., None] - beta[..., None] * log_d,
                         e[..., None].expand(*e.shape, log_n.shape[-1])], dim=-1)  # (..., R, 3)
    return huber(torch.logsumexp(terms, dim=-1) - log_loss, delta).sum(-1)


def _refine(theta0: torch.Tensor, data, delta: float) -> tuple[torch.Tensor, float]:
    theta = theta0.clone().requires_grad_(True)
    opt = torch.optim.LBFGS([theta], lr=1.0, max_iter=200, tolerance_grad=1e-10,
                            tolerance_change=1e-13, history_size=20, line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        loss = law_objective(theta, *data, delta)
        loss.backward()
        return loss

    opt.step(closure)
    with torch.no_grad():
        return theta.detach(), float(law_objective(theta, *data, delta))


def fit_loss_law(N, D, loss, delta: float = HUBER_DELTA, refine: int = REFINED_STARTS,
                 start: LossLaw | None = None) -> LossLaw:
    """Approach 3: the :class:`LossLaw` of least Huber loss on log-loss over runs (N, D, loss).
    Every start of :data:`START_GRID` is scored at once; L-BFGS (float64) refines the ``refine``
    best, and the best result wins. With ``start`` (a law fitted before, e.g. to all the runs when
    these are a bootstrap resample) L-BFGS starts from it alone. Deterministic: no random
    numbers."""
    N, D, loss = (np.asarray(v, dtype=float) for v in (N, D, loss))
    if not len(N) == len(D) == len(loss) or len(N) < 5:
        raise ValueError(f"the law has 5 parameters: fit it to at least 5 runs, got {len(N)}")
    data = tuple(torch.tensor(np.log(v), dtype=torch.float64) for v in (N, D, loss))
    if start is None:
        g = START_GRID
        grid = torch.tensor(list(itertools.product(g["a"], g["b"], g["e"], g["alpha"], g["beta"])),
                            dtype=torch.float64)  # (S, 5)
        starts = grid[torch.argsort(law_objective(grid, *data, delta))[:refine]]
    else:
        starts = torch.tensor([[math.log(start.A), math.log(start.B), math.log(start.E),
                                start.alpha, start.beta]],
                              dtype=torch.float64)
    best_theta, best = None, math.inf
    for theta0 in starts:
        theta, value = _refine(theta0, data, delta)
        if math.isfinite(value) and value < best:
            best_theta, best = theta, value
    a, b, e, alpha, beta = best_theta.tolist()
    return LossLaw(E=math.exp(e), A=math.exp(a), B=math.exp(b), alpha=alpha, beta=beta)


# --- uncertainty ------------------------------------------------------------------------------


def case_indices(n_runs: int, rng: np.random.Generator) -> np.ndarray:
    """The run indices of one case resample: ``n_runs`` drawn with replacement, (n_runs,)."""
    return rng.integers(0, n_runs, n_runs)


def resample_runs(runs: list[dict], rng: np.random.Generator) -> list[dict]:
    """A case resample: len(runs) runs drawn with replacement (:func:`case_indices`)."""
    return [runs[i] for i in case_indices(len(runs), rng)]


def resample_residuals(runs: list[dict], rng: np.random.Generator) -> list[dict]:
    """A residual resample of IsoFLOP profiles: each budget keeps its sizes; its losses become the
    parabola's fitted values (in ln N) plus that budget's residuals drawn with replacement, scaled
    by sqrt(n / (n - 3)) because a 3-parameter fit to n points leaves residuals smaller than the
    noise. (A case resample would often leave a budget fewer than 3 sizes, and no parabola.)"""
    out = []
    for budget in sorted({r["budget"] for r in runs}):
        mine = [r for r in runs if r["budget"] == budget]
        x = np.log([r["N"] for r in mine])
        y = np.array([r["loss"] for r in mine])
        fitted = np.polyval(fit_parabola(x, y), x)
        residuals = (y - fitted) * math.sqrt(len(y) / max(1, len(y) - 3))
        noise = residuals[rng.integers(0, len(y), len(y))]
        out += [dict(r, loss=float(f + e)) for r, f, e in zip(mine, fitted, noise)]
    return out


def indices_digest(h, indices: np.ndarray) -> None:
    """Add one resample's run indices to the hash ``h`` (as little-endian int64: the same bytes
    on every machine)."""
    h.update(np.asarray(indices).astype("<i8").tobytes())


def case_resamples_sha256(n_runs: int, n: int, seed: int = 0) -> str:
    """The SHA-256 of the run indices that :func:`bootstrap`'s ``n`` case resamples of ``n_runs``
    runs draw with ``seed`` (:func:`case_indices`), in order: the same on every machine (NumPy's
    generator), so a record of resampled fits can show which resamples it fitted, where the fits
    themselves may end a little differently on another CPU."""
    rng = np.random.default_rng(seed)
    h = hashlib.sha256()
    for _ in range(n):
        indices_digest(h, case_indices(n_runs, rng))
    return h.hexdigest()


def bootstrap(runs: list[dict], statistic, n: int = 200, seed: int = 0,
              resample=resample_runs) -> tuple[np.ndarray, int]:
    """``statistic(sample)`` (a dict of numbers) over ``n`` resamples of ``runs`` (``resample(runs,
    rng)``: cases by default, or :func:`resample_residuals`; rng a NumPy generator seeded with
    ``seed``): an array (kept, len(keys)) of the values, in key order of the first, and how many
    resamples were dropped because the fit refused them (e.g. a parabola that no longer has a
    minimum)."""
    rng = np.random.default_rng(seed)
    values, dropped = [], 0
    for _ in range(n):
        try:
            values.append(statistic(resample(runs, rng)))
        except ValueError:
            dropped += 1
    if not values:
        raise ValueError("every resample was refused: too few runs to bootstrap")
    keys = list(values[0])
    return np.array([[v[k] for k in keys] for v in values]), dropped


def interval(values, level: float = 0.95) -> tuple[float, float]:
    """The central ``level`` percentile interval of ``values`` (1-D)."""
    tail = (1 - level) / 2 * 100
    low, high = np.percentile(np.asarray(values, dtype=float), [tail, 100 - tail])
    return float(low), float(high)


# --- seeds and held-out budgets ------------------------------------------------------------------


def seed_spread(runs: list[dict]) -> dict:
    """The runs grouped by (budget, shape) over their seeds: {(budget, shape): (mean loss, sample
    s.d., number of seeds)}, and under the key ``"pooled"`` the pooled s.d. of one run's loss (the
    root of the groups' variances averaged with n - 1 weights): the noise of a single run at a fixed
    N and D."""
    groups: dict = {}
    for r in runs:
        groups.setdefault((r["budget"], r["shape"]), []).append(r["loss"])
    out, ss, dof = {}, 0.0, 0
    for k, losses in groups.items():
        x = np.asarray(losses, dtype=float)
        out[k] = (float(x.mean()), float(x.std(ddof=1)) if len(x) > 1 else math.nan, len(x))
        ss, dof = ss + float(((x - x.mean()) ** 2).sum()), dof + len(x) - 1
    if dof == 0:
        raise ValueError("every (budget, shape) has one seed: train some at more seeds to measure "
                         "the spread")
    out["pooled"] = math.sqrt(ss / dof)
    return out


def leave_one_budget_out(runs: list[dict]) -> list[dict]:
    """Each budget predicted by approach 3 fitted to the OTHER budgets' runs: per budget, the law's
    ``error`` (measured - predicted, nats) on each of its shapes (the mean over its seeds), their
    mean, and approach 2's exponent ``a`` without that budget (None where fewer than 2 budgets
    remain)."""
    budgets = sorted({r["budget"] for r in runs})
    if len(budgets) < 3:
        raise ValueError("leave-one-budget-out needs at least 3 budgets")
    out = []
    for left in budgets:
        rest = [r for r in runs if r["budget"] != left]
        law = fit_loss_law([r["N"] for r in rest], [r["D"] for r in rest],
                           [r["loss"] for r in rest])
        mine = [r for r in runs if r["budget"] == left]
        errors = {}
        for shape in dict.fromkeys(r["shape"] for r in mine):
            same = [r for r in mine if r["shape"] == shape]
            errors[shape] = float(np.mean([r["loss"]
                                           for r in same]) - law(same[0]["N"], same[0]["D"]))
        out.append(dict(budget=left, law=law, errors=errors,
                        mean_error=float(np.mean(list(errors.values()))),
                        a=isoflop_frontier(rest)["a"]))
    return out
