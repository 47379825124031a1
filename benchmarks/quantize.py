"""Chapter 23's measurements on the shipped model (course_lib/pretrained.py): round-to-nearest and
GPTQ at 8, 6, 4 and 3 bits, per row and per group of 32, each with the embedding tables stored as
each ``--embeddings`` setting says (int8 per row, as GPTQ leaves them wider; "same": at the working
bit width, the control), and quantization-aware training (QAT) at 3 and 4 bits per group of 32 with
its control (the same fine-tune without fake quantization, rounded afterwards; with
``--control-gptq`` also quantized by GPTQ), 3 seeds each, the embeddings as ``--qat-embeddings``
says; then int8 matrix products against float32 on this CPU. ``--parts calibration``: GPTQ at int3
per row and int3/int4 per group of 32 (embeddings int8) with its calibration windows drawn by each
of ``--calibration-seeds``, to show what the draw alone moves. ``--parts asym``: round-to-nearest
symmetric against asymmetric (a zero point per row or group), per row and per group of 32, at int4
and int3, the embeddings int8: bits per character, the paired asymmetric-minus-symmetric difference,
the bytes (zero points included), and how each grid uses its codes.

Quality: bits per character over the whole validation split cut into consecutive windows of the
model's block size (64), the same windows for every part, with 95% percentile-bootstrap intervals
over the windows, for the score and for its paired difference with the float model. Each QAT run
also scores its float weights before rounding (what "recovered" is measured against: the same
fine-tune's float model). Size: the bytes of every tensor written
(course_lib.quantize.apply.stored_bytes). GPTQ calibrates on 128 random windows of the training
split (seed 0). Speed: ``torch._int_mm`` (int8 x int8 -> int32) against a float32 ``@`` and against
dequantize-then-multiply, interleaved so that the load hits all alike, with the load average.

    PYTHONPATH=$PWD python benchmarks/quantize.py --update-record

writes course_lib/records/quantize.json, which the chapter reads.
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

from bench_args import RECORDS, add_record_options, at_least, count, record_file, seed_list  # noqa: E402
from course_lib.tools.numerics import apply_reference_environment, wait_passively  # noqa: E402  (no torch)

SHIPPED = RECORDS / "quantize.json"
BITS = (8, 6, 4, 3)
GRANULARITIES = (("row", None), ("group", 32))
# course_lib.quantize.embeddings.EMBEDDINGS (torch loads after the pin)
EMBEDDINGS = ("int8", "fp16", "same")


def score(model, x, y, base=None):
    """Bits per character with its interval, and the paired difference with ``base``'s windows."""
    from course_lib.quantize.apply import bits_per_char, bootstrap_interval, window_losses
    losses = window_losses(model, x, y)
    out = {"bpc": bits_per_char(losses), "bpc_ci": bootstrap_interval(losses)}
    if base is not None:
        out["delta_bpc"] = bits_per_char(losses - base)
        out["delta_ci"] = bootstrap_interval(losses - base)
    return out, losses


def grid_use(stored: dict, bits: int) -> dict:
    """How a rounding's linear layers use their grid: the mean share of the 2**bits codes that a
    group's (or row's) weights land on, and the bytes of the zero points (0 when symmetric)."""
    import torch
    from course_lib.quantize.rtn import unpack_bits
    used, n, zero_bytes = 0.0, 0, 0
    for qt in stored.values():
        if qt.config.bits != bits:  # the int8 embedding tables
            continue
        codes = unpack_bits(qt.codes, bits, qt.shape[0] * qt.shape[1]).view(qt.scales.numel(), -1)
        hit = torch.zeros(len(codes), 2 ** bits).scatter_(1, codes, 1.0)  # (groups, 2**bits)
        used, n = used + hit.sum().item(), n + len(codes)
        zero_bytes += 0 if qt.zeros is None else qt.zeros.numel() * qt.zeros.element_size()
    return {"codes_used": used / n / 2 ** bits, "zero_point_bytes": zero_bytes}


def speed(repeats: int) -> dict:
    """int8 x int8 -> int32 (torch._int_mm) against float32, and against unpacking 4-bit codes and
    multiplying in float32, on an activation (M, K) times a weight (K, N), interleaved."""
    import torch
    from course_lib.quantize.rtn import QuantConfig, quantize
    M, K, N = 1024, 512, 512
    g = torch.Generator().manual_seed(0)
    a, w = torch.randn(M, K, generator=g), torch.randn(K, N, generator=g)
    a8 = torch.randint(-128, 128, (M, K), dtype=torch.int8, generator=g)
    w8 = torch.randint(-128, 128, (K, N), dtype=torch.int8, generator=g)
    q4 = quantize(w.T.contiguous(), QuantConfig(bits=4, granularity="group", group_size=32))
    try:
        torch._int_mm(a8, w8)
        has_int_mm = True
    except (RuntimeError, AttributeError) as e:
        has_int_mm = str(e).splitlines()[0]
    runs = {"fp32 matmul": lambda: a @ w,
            "dequantize int4 + fp32 matmul": lambda: a @ q4.dequantize().T}
    if has_int_mm is True:
        runs["int8 _int_mm"] = lambda: torch._int_mm(a8, w8)
    times = {k: [] for k in runs}
    load_before = os.getloadavg()
    for r in range(repeats):
        for k in list(runs)[r % len(runs):] + list(runs)[:r % len(runs)]:
            t = time.perf_counter()
            runs[k]()
            times[k].append(time.perf_counter() - t)
    return {"shape": [M, K, N], "repeats": repeats, "int_mm": has_int_mm,
            "threads": torch.get_num_threads(),
            "median_ms": {k: 1e3 * statistics.median(v) for k, v in times.items()},
            "best_ms": {k: 1e3 * min(v) for k, v in times.items()}, "loadavg_before": load_before,
            "loadavg_after": os.getloadavg()}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--calibration", type=count, default=128, help="GPTQ's calibration windows")
    p.add_argument("--qat-steps", type=count, default=200, help="steps of each QAT fine-tune")
    p.add_argument("--qat-bits", type=at_least(2), nargs="+", default=[3, 4],
                   help="QAT's bit widths (group of 32)")
    p.add_argument("--embeddings", nargs="+", default=["int8", "same"], choices=list(EMBEDDINGS),
                   help="post-training: how the embedding tables are stored, each setting measured")
    p.add_argument("--qat-embeddings", default="int8", choices=list(EMBEDDINGS),
                   help="QAT: how the embedding tables are trained and stored")
    p.add_argument("--seeds", type=seed_list, default=[0, 1, 2], help="QAT seeds, e.g. 0,1,2")
    p.add_argument("--variants", nargs="+", default=["qat", "control"], choices=["qat", "control"],
                   help="QAT, and its control: the same fine-tune without fake quantization")
    p.add_argument("--control-gptq", action="store_true",
                   help="also quantize each control's float weights by GPTQ (the same calibration "
                   "windows), beside RTN: a post-training method on the same fine-tune")
    p.add_argument("--granularities", nargs="+", default=["row", "group"], choices=["row", "group"])
    p.add_argument("--val-windows", type=count, default=None,
                   help="the first N windows (default all)")
    p.add_argument("--speed-repeats", type=count, default=30)
    p.add_argument("--threads", type=count, default=None,
                   help="torch threads (default: the reference's 2); "
                   "QAT trains about ten times faster in CPU time with 1 on the shared 2-core "
                   "machine")
    p.add_argument("--calibration-seeds", type=seed_list, default=[0, 1, 2, 3],
                   help="--parts calibration: the seeds drawing GPTQ's calibration windows")
    p.add_argument("--parts", nargs="+", default=["ptq", "qat", "speed"],
                   choices=["ptq", "qat", "speed", "calibration", "asym"])
    add_record_options(p, SHIPPED, "--json")
    args = p.parse_args(argv)
    apply_reference_environment()  # before torch is imported
    wait_passively()
    record_out = record_file(p, args, SHIPPED, "--json")
    import torch
    if args.threads is not None:
        torch.set_num_threads(args.threads)

    from course_lib.data import load_text, train_val_split
    from course_lib.pretrained import load_pretrained
    from course_lib.quantize.apply import (bits_per_char, bootstrap_interval, quantize_gptq,
                                           quantize_rtn, stored_bytes, windows)
    from course_lib.quantize.qat import qat_trainer, remove_fake_quantize
    from course_lib.quantize.rtn import QuantConfig

    model, tokenizer = load_pretrained()
    train, val = train_val_split(torch.tensor(tokenizer.encode(load_text())))
    x, y = windows(val, model.config.block_size, args.val_windows)
    def draw(seed):  # (n, T): GPTQ's calibration windows, random windows of the training split
        starts = torch.randint(0, len(train) - 65, (args.calibration,),
                               generator=torch.Generator().manual_seed(seed))
        return torch.stack([train[s:s + model.config.block_size] for s in starts])

    calibration = draw(0)
    record = {"command": "python benchmarks/quantize.py "
              + " ".join(argv if argv is not None else sys.argv[1:]),
              "val_windows": len(x), "val_chars": x.numel(),
              "calibration_windows": args.calibration,
              "torch": torch.__version__, "threads": torch.get_num_threads(),
              "loadavg_start": os.getloadavg()}
    fp, base = score(model, x, y)
    record["float"] = {**fp, "bytes_fp16": stored_bytes(model)}
    print(f"float: {fp['bpc']:.4f} bpc, {record['float']['bytes_fp16']:,} bytes in float16",
          flush=True)
    record["ptq"], record["qat"] = [], []
    if "ptq" in args.parts:
        for embeddings in args.embeddings:
            for granularity, group in [g for g in GRANULARITIES if g[0] in args.granularities]:
                for bits in BITS:
                    config = QuantConfig(bits=bits, granularity=granularity, group_size=group or 32)
                    for method, build in (("rtn", lambda: quantize_rtn(model, config, embeddings)),
                                          ("gptq", lambda: quantize_gptq(model, config, calibration,
                                                                         embeddings=embeddings))):
                        t = time.perf_counter()
                        qmodel, stored = build()
                        s, _ = score(qmodel, x, y, base)
                        row = {"method": method, "bits": bits, "granularity": granularity,
                               "group_size": group, "embeddings": embeddings,
                               "bytes": stored_bytes(model, stored), **s,
                               "seconds": time.perf_counter() - t}
                        record["ptq"].append(row)
                        print(f"{method:4} {config.name:22} embeddings {embeddings:4} "
                              f"{s['bpc']:.4f} bpc "
                              f"(+{s['delta_bpc']:.4f}) {row['bytes']:,} bytes", flush=True)
                        record_out.progress(record)
    if "qat" in args.parts:
        emb = args.qat_embeddings
        record["rtn_reference"] = []
        for bits in args.qat_bits:
            config = QuantConfig(bits=bits, granularity="group", group_size=32)
            # the gap to recover, same windows
            s, _ = score(quantize_rtn(model, config, emb)[0], x, y, base)
            record["rtn_reference"].append({"bits": bits, "granularity": "group", "group_size": 32,
                                            "embeddings": emb, **s})
        for bits in args.qat_bits:
            config = QuantConfig(bits=bits, granularity="group", group_size=32)
            for seed in args.seeds:
                for fake in [v == "qat" for v in args.variants]:
                    t = time.perf_counter()
                    trainer = qat_trainer(model, train, config, args.qat_steps,
                                          seed, fake=fake, embeddings=emb)
                    trainer.train()
                    trained = remove_fake_quantize(trainer.model)
                    qmodel, stored = quantize_rtn(trained, config, emb)
                    s, _ = score(qmodel, x, y, base)
                    f, _ = score(trained, x, y, base)
                    row = {"method": "qat" if fake else "fine-tune then rtn", "bits": bits,
                           "granularity": "group", "group_size": 32, "embeddings": emb,
                           "seed": seed, "steps": args.qat_steps,
                           "bytes": stored_bytes(trained, stored), **s, "float_bpc": f["bpc"],
                           "float_delta_bpc": f["delta_bpc"], "float_delta_ci": f["delta_ci"],
                           "seconds": time.perf_counter() - t}
                    record["qat"].append(row)
                    print(f"{row['method']:18} int{bits} seed {seed}: {s['bpc']:.4f} bpc "
                          f"(+{s['delta_bpc']:.4f}); "
                          f"its float weights {f['bpc']:.4f} (+{f['delta_bpc']:.4f})", flush=True)
                    if args.control_gptq and not fake:
                        t = time.perf_counter()
                        qmodel, stored = quantize_gptq(trained, config, calibration,
                                                       embeddings=emb)
                        g, _ = score(qmodel, x, y, base)
                        record["qat"].append({**row, "method": "fine-tune then gptq",
                                              "bytes": stored_bytes(trained, stored), **g,
                                              "seconds": time.perf_counter() - t})
                        print(f"{'fine-tune then gptq':18} int{bits} seed {seed}: "
                              f"{g['bpc']:.4f} bpc (+{g['delta_bpc']:.4f})", flush=True)
                    record_out.progress(record)
    if "calibration" in args.parts:
        record["calibration_draws"] = []
        for seed in args.calibration_seeds:
            for bits, granularity in ((3, "row"), (3, "group"), (4, "group")):
                config = QuantConfig(bits=bits, granularity=granularity, group_size=32)
                qmodel, stored = quantize_gptq(model, config, draw(seed))
                s, _ = score(qmodel, x, y, base)
                record["calibration_draws"].append(
                    {"method": "gptq", "bits": bits, "granularity": granularity,
                     "group_size": 32 if granularity == "group" else None, "embeddings": "int8",
                     "calibration_seed": seed, "bytes": stored_bytes(model, stored), **s})
                print(f"gptq {config.name:22} calibration seed {seed}: {s['bpc']:.4f} bpc "
                      f"(+{s['delta_bpc']:.4f})", flush=True)
                record_out.progress(record)
    if "asym" in args.parts:
        record["asym"] = []
        for granularity, group in [g for g in GRANULARITIES if g[0] in args.granularities]:
            for bits in (4, 3):
                for symmetric in (True, False):
                    config = QuantConfig(bits=bits, granularity=granularity,
                                         group_size=group or 32, symmetric=symmetric)
                    qmodel, stored = quantize_rtn(model, config)  # embeddings int8
                    s, losses = score(qmodel, x, y, base)
                    row = {"method": "rtn", "bits": bits, "granularity": granularity,
                           "group_size": group, "symmetric": symmetric, "embeddings": "int8",
                           "bytes": stored_bytes(model, stored), **grid_use(stored, bits), **s}
                    if symmetric:
                        sym, sym_scales = losses, {n: q.scales.float() for n, q in stored.items()
                                                   if q.config.bits == bits}
                    else:  # paired by window with the symmetric rounding just made
                        row["minus_sym_bpc"] = bits_per_char(losses - sym)
                        row["minus_sym_ci"] = bootstrap_interval(losses - sym)
                        ratio = torch.cat([(stored[n].scales.float() / v).flatten()
                                           for n, v in sym_scales.items()])
                        row["median_step_vs_sym"] = ratio.median().item()
                    record["asym"].append(row)
                    print(f"rtn  {config.name:23} {s['bpc']:.4f} bpc (+{s['delta_bpc']:.4f}) "
                          f"{row['bytes']:,} bytes, codes used {row['codes_used']:.0%}",
                          flush=True)
                    record_out.progress(record)
    if "speed" in args.parts:
        record["speed"] = speed(args.speed_repeats)
        print(record["speed"], flush=True)
    record["loadavg_end"] = os.getloadavg()
    record_out.finish(record, say=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
