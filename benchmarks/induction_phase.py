"""Chapter 21's phase change over seeds: the 2-layer attention-only model trained on the repeat
task with the repeat length drawn per row (8-24) and on the fixed-offset control (16), each seed
examined afterwards (course_lib.induction.analysis.examine: head scores, every head ablated, the
top-two layer-1 heads against the other two and all of layer 0 ablated as groups, every pair of
layer-1 heads mean-ablated and with layer 0 cut from its keys, layer 0's
paths into the top-two heads cut one input at a time, K-composition, and for the control the
tests of a positional solution: attention by offset, and its repeat loss on rows whose repeat
length varies).

    PYTHONPATH=$PWD python benchmarks/induction_phase.py --seeds 0,1,2 --update-record

Every run: vocabulary 32, rows of 48 tokens, batch 64, AdamW at a constant 3e-3 (20 warm-up
steps), the repeat loss, the loss elsewhere and the in-context learning score measured on 256
fixed rows every ``--probe-every`` steps, with the highest layer-1 induction score
(course_lib.induction.training). The crossing step is
where the repeat loss first falls below half of chance (ln 32 / 2), interpolated between
probes. Writes its record only when asked (--json FILE, or --update-record for
course_lib/records/induction_phase.json, which chapter 21 prints).
"""
from __future__ import annotations

import argparse
import multiprocessing
import os
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

import torch
from bench_args import add_record_options, count, record_file, seed_list, threads

from course_lib.induction.analysis import examine
from course_lib.induction.task import RepeatTask
from course_lib.induction.training import (crossing_step, induction_trainer, mean_interval,
                                           probe_rows, train_config, train_with_probes)
from course_lib.tools.numerics import wait_passively

RECORD = Path(__file__).resolve().parents[1] / "course_lib" / "records" / "induction_phase.json"
TASKS = {"variable": dict(min_repeat=8, max_repeat=24), "fixed": dict(min_repeat=16, max_repeat=16)}


def run_one(name: str, seed: int, iters: int, probe_every: int) -> dict:
    task = RepeatTask(vocab_size=32, seq_len=48, **TASKS[name])
    variable = RepeatTask(vocab_size=32, seq_len=48, **TASKS["variable"])
    trainer = induction_trainer(task, train_config(iters, seed))
    rows = probe_rows(task)
    start, load = time.perf_counter(), os.getloadavg()[0]
    curve = train_with_probes(trainer, task, probe_every, rows)
    train_s = time.perf_counter() - start
    cross = crossing_step(curve["step"], curve["repeat"], task.chance_loss / 2)
    run = dict(task=name, seed=seed, crossing_step=cross, train_s=round(train_s, 1),
               loadavg=round(load, 2),
               curve={k: [round(v, 4) for v in vs] for k, vs in curve.items()},
               **examine(trainer.model, task, *rows, transfer=(variable, *probe_rows(variable))))
    print(f"{name:8s} seed {seed}: crosses half of chance at step {cross}, final repeat loss "
          f"{curve['repeat'][-1]:.3f}, {train_s:.0f} s (load {load:.1f})", flush=True)
    return run


def _one_thread(threads: int) -> None:
    torch.set_num_threads(threads)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--iters", type=count, default=1000)
    p.add_argument("--fixed-iters", type=count, default=600)
    p.add_argument("--probe-every", type=count, default=25)
    p.add_argument("--seeds", type=seed_list, default=[0, 1, 2])
    p.add_argument("--threads", type=threads, default=1)
    p.add_argument("--jobs", type=count, default=1,
                   help="runs trained at once, each in its own process with --threads threads (the "
                        "same results)")
    add_record_options(p, RECORD)
    args = p.parse_args(argv)
    out = record_file(p, args, RECORD)
    torch.set_num_threads(args.threads)
    command = (f"python benchmarks/induction_phase.py --iters {args.iters} --fixed-iters "
               f"{args.fixed_iters} --probe-every {args.probe_every} --seeds "
               f"{','.join(map(str, args.seeds))} --threads {args.threads} --jobs {args.jobs}")
    runs = []
    record = dict(command=command, cpu_count=os.cpu_count(), tasks=TASKS, runs=runs)
    todo = [(name, seed, iters, args.probe_every) for name, iters in (("variable", args.iters),
                                                                      ("fixed", args.fixed_iters))
            for seed in args.seeds]
    order = {(name, seed): i for i, (name, seed, _, _) in enumerate(todo)}
    if args.jobs == 1:
        for job in todo:
            runs.append(run_one(*job))
            out.progress(record)
    else:  # each run is seeded and single-process, so its numbers do not depend on --jobs
        with ProcessPoolExecutor(args.jobs, mp_context=multiprocessing.get_context("spawn"),
                                 initializer=_one_thread, initargs=(args.threads,)) as pool:
            for done in as_completed([pool.submit(run_one, *job) for job in todo]):
                runs.append(done.result())
                runs.sort(key=lambda r: order[r["task"], r["seed"]])
                out.progress(record)
    for name in TASKS:
        steps = [r["crossing_step"] for r in runs if r["task"] == name]
        if None not in steps and len(steps) > 1:
            mean, low, high = mean_interval(steps)
            record[f"{name}_crossing"] = dict(mean=round(mean, 1), low=round(low, 1),
                                              high=round(high, 1),
                                              steps=[round(s, 1) for s in steps])
            print(f"{name}: crossing step {mean:.0f} (95% interval {low:.0f} to {high:.0f}) over "
                  f"{len(steps)} seeds")
    out.finish(record, say=True)


if __name__ == "__main__":
    wait_passively()
    main()
