"""Measuring speculative decoding: acceptance, tokens per target call and tokens per second against
plain generation with the KV cache, the ways run interleaved (so a busy machine slows all alike).
A drafter with a ``generate`` method (:class:`.self_draft.SelfDrafter`: the target's own MTP heads)
generates whole; then ``target`` must be its model, so that plain generation is that model's.

:func:`measure` times, in each repeat and for each prompt, plain
:func:`~course_lib.generate.generate` (with the cache) and then every (drafter, k) on the same
prompt and seed, one after the other; a ratio is a paired one: plain time over speculative time
within one repeat, summed over the prompts.
"""
from __future__ import annotations

import math
import os
import statistics
import time

import torch

from ..generate import generate
from .decode import speculative_generate
from .rule import alpha_from_rounds, expected_speedup, expected_tokens_per_call


def draft_cost(target, drafter, prompt: list[int], new_tokens: int, repeats: int = 3) -> float:
    """c: the time of one draft token over the time of one plain target token (with its cache),
    both generating ``new_tokens`` greedily from ``prompt``, interleaved, fastest of ``repeats``."""
    idx = torch.tensor([prompt])
    best_t, best_d = float("inf"), float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        generate(target, idx, new_tokens, temperature=0, use_cache=True)
        best_t = min(best_t, time.perf_counter() - start)
        if hasattr(drafter, "lm"):
            drafter.lm.reset()
        start = time.perf_counter()
        drafter.propose(prompt, new_tokens, 0.0)
        best_d = min(best_d, time.perf_counter() - start)
    return best_d / best_t


def measure(target, drafters: dict, prompts: list[list[int]], new_tokens: int, ks=range(1, 9),
            temperatures=(0.0, 1.0), repeats: int = 3, seed: int = 0, progress=None) -> dict:
    """The measurements of the chapter's benchmark: for each temperature, drafter name and k,
    the kept and drafted tokens per round, target calls, new tokens, times per repeat; and plain
    generation's times. Every speculative greedy output is checked against plain greedy."""
    ks = list(ks)
    out = {"new_tokens": new_tokens, "prompts": len(prompts), "ks": ks, "repeats": repeats,
           "threads": torch.get_num_threads(), "temperatures": {}}
    for temperature in temperatures:
        plain_times = []
        cells = {name: {k: {"kept": [], "drafted": [], "target_calls": 0, "new": 0, "times": []}
                        for k in ks}
                 for name in drafters}
        loads = []
        for r in range(repeats):
            loads.append(os.getloadavg()[0])
            plain_t = 0.0
            spec_t = {(name, k): 0.0 for name in drafters for k in ks}
            for i, prompt in enumerate(prompts):
                idx = torch.tensor([prompt])
                s = seed + 1000 * r + i
                start = time.perf_counter()
                ref = generate(target, idx, new_tokens, temperature=temperature, use_cache=True,
                               generator=torch.Generator().manual_seed(s))
                plain_t += time.perf_counter() - start
                for name, drafter in drafters.items():
                    # a drafter that drafts for itself (drafter 3, self_draft.SelfDrafter)
                    # generates whole
                    run = getattr(drafter, "generate", None) or (
                        lambda *a, **kw: speculative_generate(target, drafter, *a, **kw))
                    for k in ks:
                        start = time.perf_counter()
                        got, st = run(idx, new_tokens, k=k, temperature=temperature,
                                      generator=torch.Generator().manual_seed(s), return_stats=True)
                        spec_t[name, k] += time.perf_counter() - start
                        if temperature == 0 and not torch.equal(got, ref):
                            raise AssertionError("greedy speculative output differs from plain "
                                                 f"greedy ({name}, k={k})")
                        cell = cells[name][k]
                        # greedy rounds repeat exactly: count them once
                        if r == 0 or temperature > 0:
                            cell["kept"] += st.kept
                            cell["drafted"] += st.drafted
                            cell["target_calls"] += st.target_calls
                            cell["new"] += st.new_tokens
            plain_times.append(plain_t)
            for (name, k), t in spec_t.items():
                cells[name][k]["times"].append(t)
            if progress:
                progress(f"temperature {temperature:g}: repeat {r + 1}/{repeats} done")
        out["temperatures"][str(temperature)] = {"plain_times": plain_times,
                                                 "loadavg": loads, "drafters": cells}
    return out


def summarise(record: dict, costs: dict | None = None) -> list[dict]:
    """One row per (temperature, drafter, k): alpha (estimated from its own rounds), tokens per
    target call measured and predicted by the cost model from the alpha of k = 1, plain and
    speculative tokens/s (median over repeats), the paired speed ratio's median, min and max, and,
    given draft ``costs`` c per drafter, the speed-up the cost model predicts."""
    rows = []
    n_tokens = record["new_tokens"] * record["prompts"]
    for temp, rec in record["temperatures"].items():
        plain = rec["plain_times"]
        for name, by_k in rec["drafters"].items():
            first = by_k.get("1") or by_k.get(1)
            alpha1 = alpha_from_rounds(first["kept"], 1) if first else float("nan")
            for k, cell in by_k.items():
                k = int(k)
                alpha = alpha_from_rounds(cell["kept"], k)
                ratios = [p / s for p, s in zip(plain, cell["times"])]
                row = dict(temperature=float(temp), drafter=name, k=k, alpha=alpha,
                           acceptance=sum(cell["kept"]) / max(sum(cell["drafted"]), 1),
                           tokens_per_call=cell["new"] / cell["target_calls"],
                           predicted_tokens_per_call=expected_tokens_per_call(alpha1, k) if first
                           else None, plain_tokens_per_s=n_tokens / statistics.median(plain),
                           tokens_per_s=n_tokens / statistics.median(cell["times"]),
                           ratio=statistics.median(ratios), ratio_min=min(ratios),
                           ratio_max=max(ratios))
                if costs and name in costs:
                    row["predicted_speedup"] = expected_speedup(alpha, k, costs[name])
                rows.append(row)
    return rows


def wilson_interval(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score interval (95% at z = 1.96) of a binomial proportion."""
    if n == 0:
        return float("nan"), float("nan")
    phat = successes / n
    centre = (phat + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(phat * (1 - phat) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def cost_model_rows(record: dict, resamples: int = 2000, seed: int = 0) -> list[dict]:
    """The cost model against the measurement, each
    with a 95% interval, per (temperature, drafter, k):
    predicted tokens per round, (1 - a^(k+1)) / (1 - a) with a the acceptance measured at k = 1 (its
    Wilson interval carried through the formula, which grows with a); measured tokens per round, the
    mean of kept + 1 over the rounds that drafted all k tokens (a text's last, shorter round left
    out), with a bootstrap interval over those rounds (percentiles of ``resamples`` resamples,
    seeded). Rounds of one text are not independent (a loop is guessed many times in a row), so the
    measured interval is if anything too narrow."""
    g = torch.Generator().manual_seed(seed)
    rows = []
    for temp, rec in record["temperatures"].items():
        for name, by_k in rec["drafters"].items():
            first = by_k.get("1") or by_k.get(1)
            if first is None:
                continue
            ones = [n for n, d in zip(first["kept"], first["drafted"]) if d == 1]
            if not ones:
                continue
            a_lo, a_hi = wilson_interval(sum(ones), len(ones))
            a = sum(ones) / len(ones)
            for k, cell in by_k.items():
                k = int(k)
                full = torch.tensor([n + 1 for n, d in zip(cell["kept"], cell["drafted"])
                                     if d == k],
                                    dtype=torch.float64)
                if len(full) < 2:  # too few full rounds for an interval (a smoke test)
                    continue
                means = full[torch.randint(len(full), (resamples, len(full)), generator=g)].mean(1)
                lo, hi = torch.quantile(means, torch.tensor([0.025, 0.975],
                                                            dtype=torch.float64)).tolist()
                rows.append(dict(temperature=float(temp), drafter=name, k=k, rounds=len(full),
                                 alpha_k1=a, alpha_k1_interval=(a_lo, a_hi),
                                 predicted=expected_tokens_per_call(a, k),
                                 predicted_interval=(expected_tokens_per_call(a_lo, k),
                                                     expected_tokens_per_call(a_hi, k)),
                                 measured=float(full.mean()), measured_interval=(lo, hi),
                                 agree=lo <= expected_tokens_per_call(a_hi, k) and
                                 expected_tokens_per_call(a_lo, k) <= hi))
    return rows
