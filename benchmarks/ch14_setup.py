"""What chapter 14's CPU-model benchmarks share (ablation_ch14.py, rope_beyond_context.py): their
command-line options, the reference numeric environment, a run of the `shakespeare-char-cpu` preset
(4 layers, 4 heads, C=128, T=64, batch 12) built by `course_lib.runs.start_run` exactly as
``python -m course_lib train`` builds it, the fixed validation batches, and the JSON record.

Not a script: the two benchmarks import it (``sys.path`` holds ``benchmarks/`` once they run).
"""
from __future__ import annotations

import argparse
import os
import platform
import shlex
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench_args, when a test loads this file

# no torch
from bench_args import RecordFile, add_record_options, code_commit, count, record_file  # noqa: E402
# no torch
from course_lib.tools.numerics import apply_reference_environment, wait_passively  # noqa: E402

PRESET = "shakespeare-char-cpu"
VAL_GENERATOR_SEED = 2024  # the validation batches every model of the chapter is scored on


def parse_args(doc: str, argv, *, steps: int, eval_batches: int, add=None) -> argparse.Namespace:
    """The options both benchmarks take (``--steps``, ``--eval-batches``, ``--json``,
    ``--host-env``), plus those ``add(parser)`` adds; then the numeric environment, before torch is
    imported."""
    p = argparse.ArgumentParser(description=doc.split("\n")[0])
    p.add_argument("--steps", type=count, default=steps,
                   help="training steps (a tenth of them warm-up)")
    p.add_argument("--eval-batches", type=count, default=eval_batches,
                   help="fixed validation batches")
    add_record_options(p, None, "--json")
    p.add_argument("--host-env", action="store_true",
                   help="this machine's numeric settings, not the reference")
    if add is not None:
        add(p)
    args = p.parse_args(argv)
    args.parser = p
    if not args.host_env:
        apply_reference_environment()  # before torch is imported
    wait_passively()
    # before any work (it imports torch: after the environment)
    args.record = record_file(p, args, None, "--json")
    return args


def start_cpu_run(steps: int, seed: int, options: dict, *, progress: bool = False):
    """A `course_lib.runs.Run` of the CPU preset with the model ``options`` (e.g. ``rope_theta``)
    applied, ``steps`` steps with a tenth of warm-up and one evaluation batch at the start and end
    (the benchmark scores the model itself, on fixed batches), seeded by ``seed``."""
    from course_lib.runs import start_run

    settings = dict(options, max_iters=steps, warmup_iters=max(1, steps // 10), eval_interval=steps,
                    eval_iters=1, seed=seed)
    return start_run(PRESET, settings=settings, device="cpu", progress=progress, verbose=False)


def validation_batches(val_data, block_size: int, batch_size: int, count: int) -> list:
    """``count`` (x, y) batches of ``batch_size`` windows of ``block_size`` tokens, (B, T) each,
    drawn from ``val_data`` by a generator of its own (seed 2024): the same for every model."""
    from course_lib.data import get_batch
    import torch

    generator = torch.Generator().manual_seed(VAL_GENERATOR_SEED)
    return [get_batch(val_data, block_size, batch_size, generator) for _ in range(count)]


def write_record(args, script: str, argv, fields: dict, final: bool = True) -> None:
    """``fields`` with the command that made them, the environment, the machine and the load
    average, as JSON to ``args.json`` (nothing when it is not given). ``final=False``: a run's
    progress, written only where it replaces no whole record (bench_args.RecordFile)."""
    if not args.json:
        return
    command = (f"python benchmarks/{script} " + shlex.join(argv if argv is not None
                                                           else sys.argv[1:]))
    result = {"command": command, "commit": code_commit(), **fields,
              "environment": "host" if args.host_env
              else "reference (course_lib/tools/numerics.py)",
              "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
              "load_average_at_end": os.getloadavg()}
    record = getattr(args, "record", None) or RecordFile(Path(args.json))
    if final:
        record.finish(result, say=True)  # atomic: a stopped run never leaves half a file
    else:
        record.progress(result)
