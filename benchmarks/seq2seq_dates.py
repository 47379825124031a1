"""How long chapter 11's date-normalising run takes: seconds per training step of the chapter's
model (``DATES_MODEL``, batch 64) with 1 and 2 threads, and the resulting time for the chapter's
1,000 steps. Usage:

    python benchmarks/seq2seq_dates.py [--steps 50] [--threads 1 2]

It reports wall-clock time and the process's CPU time per step. On a busy machine the wall
time is inflated by waiting for a core; with one thread the CPU time is then the better
estimate of the wall time on an idle machine.
"""
from __future__ import annotations

import argparse
import time

import torch
from bench_args import count, threads

from course_lib.dates import DATES_MODEL, date_batch_fn, date_tokenizer, dates_train_config
from course_lib.seq2seq import Seq2Seq
from course_lib.tools.numerics import wait_passively
from course_lib.train import Trainer


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=count, default=50)
    parser.add_argument("--threads", type=threads, nargs="+", default=[1, 2])
    args = parser.parse_args(argv)
    config = dates_train_config()
    for n_threads in args.threads:
        torch.set_num_threads(n_threads)
        torch.manual_seed(1337)
        tok = date_tokenizer()
        trainer = Trainer(Seq2Seq(DATES_MODEL), config=config,
                          batch_fn=date_batch_fn(tok, config.batch_size), progress=False)
        trainer.train_step()  # warm-up
        wall, cpu = time.perf_counter(), time.process_time()
        for _ in range(args.steps):
            trainer.train_step()
        wall, cpu = (
            (time.perf_counter() - wall) / args.steps,
            (time.process_time() - cpu) / args.steps,
        )
        print(f"{n_threads} thread(s): {wall * 1000:.1f} ms/step wall, {cpu * 1000:.1f} ms/step "
              f"CPU; {config.max_iters} steps: about {wall * config.max_iters:.0f} s wall "
              f"({cpu * config.max_iters:.0f} s of CPU time)")


if __name__ == "__main__":
    wait_passively()  # OpenMP threads sleep while they wait (a shared machine's cores)
    main()
