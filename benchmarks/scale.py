"""Training throughput (tokens/s) on this machine, side by side in one run: eager fp32, bf16
autocast and torch.compile in one process, then 1 vs 2 data-parallel processes under torchrun.

The model and training settings are the ``shakespeare-char-cpu`` preset's (4 layers, 4 heads,
C = 128, T = 64, batch 12; built by ``course_lib.runs.make_trainer``); the data are random token
windows (speed does not depend on them). Each way runs
``--warmup`` steps (compilation happens there, and is timed separately), then ``--rounds`` (3)
rounds of ``--steps`` (30) timed steps, the one-process ways interleaved in a rotating order in each
round and the torchrun launches alternating, so that a change of load hits all of them alike; the
median time per step is reported, with its range; tokens/s counts every token of every process's
micro-batches. Usage:

    python benchmarks/scale.py [--steps 30] [--rounds 3] [--threads N] [--skip-compile]
                               [--skip-torchrun]

torchrun gives each worker one thread (OMP_NUM_THREADS=1), so the torchrun rows compare 1 and 2
processes of one thread each. These are CPU figures: on GPUs the same switches behave very
differently (bf16 and compile are large wins there), and this script says nothing about them.

It runs in the reference numeric environment (course_lib/tools/numerics.py: AVX2 kernels, 2 threads,
idle OpenMP threads asleep) that chapter 12 is built in, unless ``--host-env`` (the script restarts
itself with it before torch loads), and torch.compile starts from an empty kernel cache, removed
afterwards, so that its warm-up time is a first compilation's. Eager fp32 also runs on one thread in
the same process. Chapter 12 prints the shipped record, which only the full run writes (no
``--skip-compile``, ``--skip-torchrun`` or ``--host-env``):

    python benchmarks/scale.py --update-record     (course_lib/records/scale_speed.json)
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench_args import (RECORDS, add_record_options, at_least, code_commit, count,  # noqa: E402
                        record_file, threads)
# (importing course_lib loads torch: the environment is set in __main__, before this module runs)
from course_lib.tools.numerics import run_in_reference_environment, wait_passively  # noqa: E402

PRESET = "shakespeare-char-cpu"
SHIPPED = RECORDS / "scale_speed.json"


def make_trainer(dtype="fp32", compile=False, grad_accum_steps=1):
    """The preset's run on random tokens (under torchrun, this joins the process group)."""
    import torch

    from course_lib import runs
    from course_lib.presets import get_preset
    data = torch.randint(0, get_preset(PRESET).model.vocab_size, (100_000,),
                         generator=torch.Generator().manual_seed(0))
    settings = {"max_iters": 10**6, "warmup_iters": 0, "dtype": dtype, "compile": compile,
                "grad_accum_steps": grad_accum_steps}
    return runs.make_trainer(PRESET, data, data, settings, device="cpu", progress=False)


def tokens_per_step(trainer) -> int:
    return (trainer.config.grad_accum_steps * trainer.config.batch_size
            * trainer.model.config.block_size)


def timed(trainer, steps: int) -> float:
    """Seconds for ``steps`` training steps."""
    start = time.perf_counter()
    for _ in range(steps):
        trainer.train_step()
    return time.perf_counter() - start


def time_steps(trainer, warmup: int, steps: int) -> dict:
    """One way timed alone (a torchrun worker): ``warmup`` steps, then ``steps`` timed steps."""
    first = timed(trainer, warmup)
    seconds = timed(trainer, steps)
    return {"tokens_per_s": tokens_per_step(trainer) * steps / seconds,
            "ms_per_step": 1000 * seconds / steps, "warmup_s": first}


def summary(ms: list[float], tokens: int, warmup_s: float) -> dict:
    """A way's rounds: the median time per step (and its tokens/s), the range, the warm-up."""
    median = statistics.median(ms)
    return {"tokens_per_s": tokens * 1000 / median, "ms_per_step": median,
            "ms_per_step_min": min(ms), "ms_per_step_max": max(ms), "warmup_s": warmup_s}


def worker(args) -> None:
    """One torchrun process: each handles one micro-batch of 12 sequences per step."""
    from course_lib import distributed
    # joins the other processes
    trainer = make_trainer(grad_accum_steps=distributed.launched_world_size())
    result = time_steps(trainer, args.warmup, args.steps)
    if distributed.is_main():
        print("RESULT " + json.dumps(result))
    distributed.teardown()


def torchrun(n: int, args) -> dict:
    # one thread per process, whatever the pin says (torchrun sets it only where it is unset)
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={n}",
           __file__, "--worker", "--steps", str(args.steps), "--warmup", str(args.warmup)]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout
    return json.loads(next(line for line in out.splitlines() if line.startswith("RESULT "))[7:])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, allow_abbrev=False,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=count, default=30, help="timed training steps per way")
    parser.add_argument("--warmup", type=at_least(0), default=3,
                        help="untimed steps first (compilation happens here)")
    parser.add_argument("--rounds", type=count, default=3,
                        help="interleaved rounds of timed steps (the median is reported)")
    parser.add_argument("--threads", type=threads, default=None,
                        help="torch.set_num_threads for the one-process rows")
    parser.add_argument("--skip-compile", action="store_true")
    parser.add_argument("--skip-torchrun", action="store_true")
    parser.add_argument("--host-env", action="store_true",
                        help="this machine's numeric settings, not the reference")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    add_record_options(parser, SHIPPED)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args)
        return 0
    if args.update_record and (args.skip_compile or args.skip_torchrun or args.host_env
                               or (args.steps, args.warmup, args.rounds, args.threads)
                               != (30, 3, 3, None)):
        parser.error("--update-record writes the record chapter 12 prints: run every way in the "
                     "reference environment with the default settings (leave out "
                     "--skip-compile, --skip-torchrun, --host-env, --steps, --warmup, --rounds, "
                     "--threads)")
    record = record_file(parser, args, SHIPPED)  # checked before any work
    load_before = os.getloadavg()[0]
    # torch.compile's first compilation, not a cache's: a fresh kernel cache for this run
    with tempfile.TemporaryDirectory(prefix="scale-inductor-") as cache:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache
        command = " ".join(argv if argv is not None else sys.argv[1:])
        return measure(args, record, load_before, command)


def measure(args, record, load_before: float, command: str) -> int:
    import torch
    from tqdm import tqdm

    from course_lib.tools.op_fingerprints import cpu_name
    if args.threads:
        torch.set_num_threads(args.threads)

    n_threads = torch.get_num_threads()
    ways = [("eager fp32", {}, n_threads), ("bf16 autocast", {"dtype": "bf16"}, n_threads)]
    if not args.skip_compile:
        ways.append(("torch.compile fp32", {"compile": True}, n_threads))
    if n_threads > 1:  # what a second thread buys
        ways.append(("eager fp32", {}, 1))
    trainers, warmups = [], []
    for name, options, t in ways:  # each warmed up (compiled) first
        torch.set_num_threads(t)
        trainers.append(make_trainer(**options))
        warmups.append(timed(trainers[-1], args.warmup))
    # then the rounds: every way once per round, in a rotating order, so that a change of load
    # hits all of them alike
    ms = [[] for _ in ways]
    with tqdm(total=args.rounds * len(ways), desc="rounds x ways", file=sys.stdout) as bar:
        for r in range(args.rounds):
            for i in [(r + j) % len(ways) for j in range(len(ways))]:
                torch.set_num_threads(ways[i][2])
                ms[i].append(1000 * timed(trainers[i], args.steps) / args.steps)
                bar.update(1)
    torch.set_num_threads(n_threads)
    tokens = tokens_per_step(trainers[0])
    rows = [(f"{name}, 1 process x {t} thread{'s' if t > 1 else ''}",
             summary(ms[i], tokens, warmups[i])) for i, (name, _, t) in enumerate(ways)]
    if not args.skip_torchrun:
        launched = {1: [], 2: []}
        for _ in range(args.rounds):  # alternating, like the rounds above
            for n in launched:
                launched[n].append(torchrun(n, args))
        for n, results in launched.items():
            rows.append((f"torchrun, {n} process{'es' if n > 1 else ''} x 1 thread (gloo)",
                         summary([x["ms_per_step"] for x in results], n * tokens,
                                 statistics.median(x["warmup_s"] for x in results))))

    base = rows[0][1]["tokens_per_s"]
    print(f"shakespeare-char-cpu shape, batch 12 x 64 tokens per process per step; {args.steps} "
          f"timed steps after {args.warmup} warm-up steps; torch {torch.__version__}, "
          f"{os.cpu_count()} CPUs")
    print(f"median of {args.rounds} interleaved rounds (range)")
    print("| way | tokens/s | ms/step | vs eager fp32 | warm-up steps (s) |")
    print("|---|---:|---:|---:|---:|")
    for name, r in rows:
        print(f"| {name} | {r['tokens_per_s']:,.0f} | {r['ms_per_step']:.1f} "
              f"({r['ms_per_step_min']:.1f}-{r['ms_per_step_max']:.1f}) | "
              f"{r['tokens_per_s'] / base:.2f}x | {r['warmup_s']:.1f} |")
    record.finish({
        "command": f"python benchmarks/scale.py {command}",
        "preset": PRESET, "tokens_per_step_per_process": 12 * 64,
        "steps": args.steps, "warmup_steps": args.warmup, "rounds": args.rounds,
        "statistic": "median over the rounds (ways interleaved in a rotating order)",
        "cpu": cpu_name(), "cpus": os.cpu_count(), "threads": n_threads,
        "environment": ("host" if args.host_env
                        else "reference (course_lib/tools/numerics.py: AVX2 kernels)"),
        "torch": torch.__version__, "code": code_commit(),
        "made_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "load_average_before": load_before, "load_average_after": os.getloadavg()[0],
        "rows": [{"way": name, **{k: round(v, 4) for k, v in r.items()},
                  "vs_eager_fp32": round(r["tokens_per_s"] / base, 4)} for name, r in rows],
    }, say=True)
    return 0


if __name__ == "__main__":
    if "--host-env" in sys.argv or "--worker" in sys.argv:  # a worker keeps torchrun's settings
        wait_passively()  # OpenMP threads sleep while they wait (a shared machine's cores)
    else:
        run_in_reference_environment()  # before torch loads
    raise SystemExit(main())
