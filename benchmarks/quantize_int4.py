"""Chapter 23: 4-bit weights multiplied on a CPU, by PyTorch's packed kernel
(``torch.ops.aten._weight_int4pack_mm_for_cpu``, through course_lib.quantize.int4.Int4Linear)
against float32 and against the course's unpacked paths (the weight's codes unpacked to float32,
then a float32 product), side by side in one process, interleaved so that the load hits every
variant alike.

For each matrix shape (K inputs, N outputs) and each number of rows M of the activation (M = 1: one
token decoded; larger: a batch or a prompt), the median time of ``x @ W^T`` for:

- ``fp32``: ``F.linear`` on the float32 weight;
- ``int8 unpack + fp32`` and ``int4 unpack + fp32``: the course's ``QuantizedTensor.dequantize()``
  (int8 per row, int4 per group of 32; its bit stream unpacked), then ``F.linear``;
- ``int4 nibbles + fp32``: Int4Linear's fallback, the
  codes two to a byte unpacked, then ``F.linear``;
- ``int4 packed kernel``: Int4Linear with the kernel (forced, whatever the row count);
- ``int8 packed kernel``: ``torch.ops.aten._weight_int8pack_mm`` (int8 per row, the build's other
  weight-only kernel);
- ``int8 x int8 _int_mm``: the activations rounded to int8 per row as well, ``torch._int_mm``'s
  int32 sums, rescaled (dynamic int8 quantization, weights and activations);
- ``int8 fbgemm dynamic``: ``torch.ao.quantization.quantize_dynamic``'s linear layer on the fbgemm
  engine (``quantized::linear_dynamic``): int8 weights per row in fbgemm's packed layout, the
  activations quantized to int8 on the fly, an int8 x int8 GEMM with int32 sums (deprecated in
  torch 2.13 in favour of torchao's ``Int8DynamicActivationInt8WeightConfig``, which this course
  does not install; it still runs).

Memory: the bytes each variant holds for the weight between calls (the unpacking variants also
rebuild the float32 matrix, 4 N K bytes, at every call; fbgemm's packed copy is counted as its int8
weights and float32 scales, its layout's padding not seen). Threads: ``--threads`` (default 1: two
threads on two cores shared with other jobs are over-subscribed, and their times say more about the
load than the kernels). Shapes: the shipped model's matrices (course_lib/pretrained.py: C = 128, the
MLP's 512, the LM head's 65 outputs) and a larger one.

    PYTHONPATH=$PWD python benchmarks/quantize_int4.py --update-record

writes course_lib/records/quantize_int4.json, which the chapter prints.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench_args import RECORDS, add_record_options, count, record_file  # noqa: E402
from course_lib.tools.numerics import apply_reference_environment, wait_passively  # noqa: E402  (no torch)

SHIPPED = RECORDS / "quantize_int4.json"
# (K, N): c_attn, c_fc, MLP c_proj, LM head
SHIPPED_SHAPES = ((128, 384), (128, 512), (512, 128), (128, 65))
LARGE = (2048, 2048)


def shape(text: str) -> tuple[int, int]:
    """``K,N``: a matrix with K inputs (a multiple of 32) and N outputs."""
    try:
        k, n = (int(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"write a shape as K,N (e.g. 2048,2048), got {text!r}") from None
    if k < 32 or k % 32 or n < 1:
        raise argparse.ArgumentTypeError("K must be a multiple of 32 (the group size) and N at "
                                         f"least 1, got {text!r}")
    return k, n


def row_counts(text: str) -> list[int]:
    try:
        rows = [int(v) for v in text.split(",")]
    except ValueError:
        rows = []
    if not rows or min(rows) < 1:
        raise argparse.ArgumentTypeError("write row counts as 1,16,256 (each at least 1), got "
                                         f"{text!r}")
    return rows


def variants(K: int, N: int, seed: int):
    """``{name: (weight holder bytes, fn(x))}`` for one (K, N) weight."""
    import torch
    import torch.nn.functional as F
    from course_lib.quantize.int4 import Int4Linear
    from course_lib.quantize.rtn import QuantConfig, quantize
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(N, K, generator=g) * 0.02
    q8 = quantize(w, QuantConfig(bits=8, granularity="row"))
    q4 = quantize(w, QuantConfig(bits=4, granularity="group", group_size=32))
    lin = Int4Linear.from_quantized(q4)
    # (N, K) codes of the int8 kernel
    w8 = (q8.dequantize() / q8.scales.float()).round().to(torch.int8)
    s8 = q8.scales.float().view(-1)
    held_kernel = lin.packed.numel() * lin.packed.element_size() + lin.scale_and_zero.numel() * 4
    fbgemm = fbgemm_linear(w)

    w8t = w8.T.contiguous()  # (K, N)

    def int8_dynamic(x):  # the activations rounded to int8 per row too, int32 sums, rescaled
        sx = x.abs().amax(1, keepdim=True).clamp(min=1e-12) / 127
        return torch._int_mm(torch.round(x / sx).to(torch.int8), w8t) * sx * s8

    def kernel(x):
        return torch.ops.aten._weight_int4pack_mm_for_cpu(x, lin.packed, 32,
                                                          lin.scale_and_zero)[:, :N]

    return {
        "fp32": (4 * w.numel(), lambda x: F.linear(x, w)),
        "int8 unpack + fp32": (q8.nbytes(), lambda x: F.linear(x, q8.dequantize())),
        "int4 unpack + fp32": (q4.nbytes(), lambda x: F.linear(x, q4.dequantize())),
        "int4 nibbles + fp32": (lin.nbytes(), lambda x: F.linear(x, lin.weight)),
        "int4 packed kernel": (lin.nbytes() + held_kernel, kernel),
        "int8 packed kernel": (w8.numel() + 4 * s8.numel(),
                               lambda x: torch.ops.aten._weight_int8pack_mm(x, w8, s8)),
        "int8 x int8 _int_mm": (w8.numel() + 4 * s8.numel(), int8_dynamic),
        "int8 fbgemm dynamic": (w8.numel() + 4 * s8.numel(), fbgemm),
    }, (lambda x: F.linear(x, q4.dequantize())), kernel


def fbgemm_linear(w):
    """fbgemm's dynamic int8 linear layer of the float weight w (N, K): int8 per row (per-channel
    scales), activations quantized per call."""
    import warnings

    import torch
    torch.backends.quantized.engine = "fbgemm"
    lin = torch.nn.Linear(w.shape[1], w.shape[0], bias=False)
    with torch.no_grad():
        lin.weight.copy_(w)
    # the torch.ao.quantization API is deprecated (moved to torchao), not gone
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic
        return quantize_dynamic(torch.nn.Sequential(lin),
                                {torch.nn.Linear: per_channel_dynamic_qconfig})[0]


def measure(K: int, N: int, M: int, repeats: int, seed: int) -> dict:
    import torch
    runs, reference, kernel = variants(K, N, seed)
    x = torch.randn(M, K, generator=torch.Generator().manual_seed(seed + 1))
    # the kernel against the dequantized product
    err = (kernel(x) - reference(x)).abs().max().item()
    times = {k: [] for k in runs}
    for name, (_, fn) in runs.items():
        fn(x)  # warm up
    for r in range(repeats):
        names = list(runs)
        for name in names[r % len(names):] + names[:r % len(names)]:
            t = time.perf_counter()
            runs[name][1](x)
            times[name].append(time.perf_counter() - t)
    fp32_out = runs["fp32"][1](x)
    fbgemm_diff = (runs["int8 fbgemm dynamic"][1](x) - fp32_out).abs().max()
    fbgemm_err = (fbgemm_diff / fp32_out.abs().max()).item()
    return {"K": K, "N": N, "M": M, "kernel_max_abs_diff": err, "fbgemm_rel_diff": fbgemm_err,
            "median_ms": {k: 1e3 * statistics.median(v) for k, v in times.items()},
            "held_bytes": {k: held for k, (held, _) in runs.items()}}


def cpu_name() -> str:
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
        return next(line.split(":", 1)[1].strip() for line in lines
                    if line.startswith("model name"))
    except (OSError, StopIteration):
        import platform
        return platform.processor() or platform.machine()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--repeats", type=count, default=20, help="timed calls of each variant (median)")
    p.add_argument("--rows", type=row_counts, default=[1, 8, 64, 512],
                   help="activation rows M, e.g. 1,8,64")
    p.add_argument("--large-rows", type=row_counts, default=[1, 8, 64],
                   help="rows M for the larger shape")
    p.add_argument("--large", type=shape, default=LARGE,
                   help="the larger shape K,N (default 2048,2048)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=count, default=1, help="torch threads (default 1: see above)")
    add_record_options(p, SHIPPED, "--json")
    args = p.parse_args(argv)
    apply_reference_environment()  # before torch is imported: 2 threads, AVX2 kernels
    wait_passively()
    record_out = record_file(p, args, SHIPPED, "--json")
    import torch
    torch.set_num_threads(args.threads)

    record = {"command": "python benchmarks/quantize_int4.py "
              + " ".join(argv if argv is not None else sys.argv[1:]),
              "torch": torch.__version__, "threads": torch.get_num_threads(),
              "repeats": args.repeats, "quantized_engine": "fbgemm",
              "cpu_capability": os.environ.get("ATEN_CPU_CAPABILITY"), "cpu": cpu_name(),
              "loadavg_start": os.getloadavg(), "rows": []}
    plan = ([(K, N, M) for K, N in SHIPPED_SHAPES for M in args.rows]
            + [(*args.large, M) for M in args.large_rows])
    for K, N, M in plan:
        row = measure(K, N, M, args.repeats, args.seed)
        row["loadavg"] = os.getloadavg()[0]
        record["rows"].append(row)
        fp32 = row["median_ms"]["fp32"]
        print(f"K={K} N={N} M={M} (load {row['loadavg']:.1f}): " + ", ".join(
            f"{k} {v:.3f} ms ({fp32 / v:.2f}x)" for k, v in row["median_ms"].items()), flush=True)
        record_out.progress(record)
    record["loadavg_end"] = os.getloadavg()
    record_out.finish(record, say=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
