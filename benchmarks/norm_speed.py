"""RMSNorm against LayerNorm on this CPU (chapter 14): PyTorch's `F.layer_norm` (one kernel,
`aten::native_layer_norm`), its `F.rms_norm` (on the CPU `aten::_fused_rms_norm`, which despite its
name runs pow, mean, add, rsqrt and mul one after another), the library's `RMSNorm` module and the
same norm written out in six PyTorch operations, on one activation tensor of GPT-2 small's width,
(B, T, C) = (16, 256, 768). The four are timed interleaved: each repeat runs every one of them once,
in a rotating order, so a change of load hits all of them alike; the result is each one's median and
best time, the median over the rounds of its time over `F.layer_norm`'s in the same round, the load
average before and after, and the profiler's trace of each (the aten operations it runs). Run it
alone on the machine (the course's timing runs use `heavy --quiet`):

    PYTHONPATH=$PWD python benchmarks/norm_speed.py --json course_lib/records/norm_speed.json

Runs in the reference numeric environment (course_lib/tools/numerics.py: AVX2 kernels, 2 threads),
forward pass only, no gradient.
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench_args import add_record_options, record_file  # noqa: E402  (no torch)
# no torch
from course_lib.tools.numerics import apply_reference_environment, wait_passively  # noqa: E402


def aten_trace(fn) -> list[str]:
    """What the profiler sees ``fn()`` run: the top-level aten operations; where there is only one,
    the chain of single calls under it and then the operations the last one calls (allocations,
    views and dtype checks left out)."""
    import torch

    with torch.profiler.profile() as prof:
        fn()
    skip = {"aten::empty", "aten::empty_strided", "aten::view", "aten::result_type"}
    roots = [e for e in prof.events() if e.cpu_parent is None and e.name not in skip]
    if len(roots) != 1:
        return [e.name for e in roots]
    event, chain = roots[0], [roots[0].name]
    while len(calls := [c for c in event.cpu_children if c.name not in skip]) == 1:
        event = calls[0]
        chain.append(event.name)
    return [" > ".join(chain + ([f"({', '.join(c.name for c in calls)})"] if calls else []))]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--repeats", type=int, default=200,
                   help="interleaved rounds (each times all four once)")
    p.add_argument("--shape", type=int, nargs=3, default=[16, 256, 768], metavar=("B", "T", "C"))
    add_record_options(p, None, "--json")
    p.add_argument("--host-env", action="store_true",
                   help="this machine's numeric settings, not the reference")
    args = p.parse_args(argv)
    if args.repeats < 1 or min(args.shape) < 1:
        p.error("--repeats and every --shape size must be at least 1")
    if not args.host_env:
        apply_reference_environment()  # before torch is imported
    wait_passively()
    # checked before any work (and after the environment is set)
    record = record_file(p, args, None, "--json")
    import torch
    import torch.nn.functional as F
    from tqdm import tqdm

    from course_lib.norms import RMSNorm

    B, T, C = args.shape
    x = torch.randn(B, T, C, generator=torch.Generator().manual_seed(0))
    w = torch.ones(C)
    module = RMSNorm(C, eps=1e-5)

    def written_out():  # six operations: pow, mean, +, rsqrt, two multiplications
        return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + 1e-5) * w

    fns = {"F.layer_norm": lambda: F.layer_norm(x, (C,), w, None, 1e-5),
           "F.rms_norm": lambda: F.rms_norm(x, (C,), w, 1e-5),
           "RMSNorm module": lambda: module(x),
           "written out (6 operations)": written_out}
    times = {name: [] for name in fns}
    load_before = os.getloadavg()
    names = list(fns)
    with torch.no_grad():
        for fn in fns.values():  # warm-up: allocator, kernels
            for _ in range(3):
                fn()
        for r in tqdm(range(args.repeats), desc="interleaved rounds"):
            for name in names[r % len(names):] + names[: r % len(names)]:
                start = time.perf_counter()
                fns[name]()
                times[name].append(time.perf_counter() - start)
    load_after = os.getloadavg()
    base = statistics.median(times["F.layer_norm"])
    results = {name: {"median_ms": round(1e3 * statistics.median(t), 4),
                      "min_ms": round(1e3 * min(t), 4),
                      "ratio_to_layer_norm": round(statistics.median(t) / base, 3),
                      # paired by round: both timed within the same round, so under the same load
                      "median_round_ratio": round(statistics.median(
                          a / b for a, b in zip(t, times["F.layer_norm"])), 3)} for name,
               t in times.items()}
    for name, r in results.items():
        print(f"{name:28s} median {r['median_ms']:8.3f} ms (min {r['min_ms']:.3f}), "
              f"{r['median_round_ratio']:.2f}x F.layer_norm (median of the rounds' ratios)")
    with torch.no_grad():
        ops = {name: aten_trace(fn) for name, fn in fns.items()}
    for name, trace in ops.items():
        print(f"{name}: {' | '.join(trace)}")
    print(f"load average before {load_before[0]:.2f}, after {load_after[0]:.2f}")
    if record:
        result = {
            "command": "python benchmarks/norm_speed.py "
            + " ".join(argv if argv is not None else sys.argv[1:]),
            "shape_BTC": args.shape,
            "repeats": args.repeats,
            "interleaved": True,
            "statistic": "median",
            "environment": "host" if args.host_env else "reference (course_lib/tools/numerics.py)",
            "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
            "torch": torch.__version__,
            "load_average_before": load_before,
            "load_average_after": load_after,
            "results": results,
            "profiler_ops": ops,
        }
        record.finish(result, say=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
