"""Chapter 19's bootstrap of the parametric law (approach 3): the law L(N, D) = E + A/N^alpha +
B/D^beta refitted to ``--resamples`` (400) case resamples of the runs it was fitted to, each fit
started from the full fit (warm starts), and what each resampled law says: alpha, beta, a = beta /
(alpha + beta) and its prediction for the held-out run. The 400 fits take about a minute on 2 cores,
too long to repeat on every build of the chapter, which prints this record:

    python benchmarks/scaling_law_bootstrap.py --update-record
    (course_lib/records/scaling_law_bootstrap.json)

The runs are those of the shipped sweep record (course_lib/records/scaling_sweep.json) and the first
windows' one-block runs that the sweep did not repeat (scaling.py's ``fit_runs``: the runs the
prediction was fitted to, checked against its ``fitted_to``), in chapter 19's order (by budget, N
and seed, then the first windows'); the resamples are drawn by ``course_lib.scaling.bootstrap`` with
seed ``--seed`` (0), as chapter 19 drew them when it ran the fits itself; the record holds the runs
in that order and the SHA-256 of the run indices each fit was given, which the chapter compares with
those ``course_lib.scaling.case_resamples_sha256`` draws from the seed: the same on every machine
with the same NumPy. The fits are not: they are float64 L-BFGS
(``course_lib.scaling.fit_loss_law``), and along the ridge on which alpha, beta and E trade a warm-
started fit can end elsewhere when the last bits of the arithmetic differ. Under the project's
simulated other host (ATEN_CPU_CAPABILITY=default) most resamples agree to about 1e-5, but 4 of the
first 12 moved by 2-14% (beta of one from 0.210 to 0.239); the intervals' ends moved by up to 0.003
between an Intel Xeon and an AMD EPYC. The record names the CPU it was made on. Only the chapter's
run (400 resamples, seed 0) writes the shipped record.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench_args import (RECORDS, add_record_options, code_commit, count,  # noqa: E402
                        record_file, seed_number)
# (importing course_lib loads torch: the environment is set in __main__, before this module runs)
from course_lib.tools.numerics import run_in_reference_environment  # noqa: E402

SHIPPED = RECORDS / "scaling_law_bootstrap.json"
STATISTICS = ("alpha", "beta", "a", "prediction")


def law_fit_runs() -> tuple[dict, list[dict]]:
    """The shipped sweep record and the runs the law is fitted to, in chapter 19's order (a case
    resample draws by index): the sweep's runs by budget, N and seed, then the first windows'
    one-block runs the sweep did not repeat (scaling.py's ``fit_runs``)."""
    from scaling import FIRST_WINDOWS, RECORD, fit_runs

    sweep = json.loads(RECORD.read_text())
    seeds = sweep["seeds"]
    in_order = sorted(sweep["runs"], key=lambda r: (r["budget"], r["N"], seeds.index(r["seed"])))
    return sweep, fit_runs(dict(sweep, runs=in_order), json.loads(FIRST_WINDOWS.read_text()))


def law_statistics(sample: list[dict], law, chosen: dict) -> dict:
    """What one resample's law says (the chapter's ``law_exponents``): its exponents, a, and its
    prediction for the held-out run (``chosen``: plan_run's N and D), the fit started from
    ``law``."""
    from course_lib.scaling import fit_loss_law

    fit = fit_loss_law([r["N"] for r in sample], [r["D"] for r in sample],
                       [r["loss"] for r in sample], start=law)
    return {"alpha": fit.alpha, "beta": fit.beta, "a": fit.a,
            "prediction": float(fit(chosen["N"], chosen["D"]))}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--resamples", type=count, default=400, help="bootstrap resamples (fits)")
    p.add_argument("--seed", type=seed_number, default=0, help="the resamples' NumPy seed")
    add_record_options(p, SHIPPED)
    args = p.parse_args(argv)
    if args.update_record and (args.resamples, args.seed) != (400, 0):
        p.error("--update-record writes the record chapter 19 prints: 400 resamples, seed 0 "
                "(for others, --json FILE)")
    record = record_file(p, args, SHIPPED)  # checked before any work
    import torch
    from tqdm import tqdm

    from course_lib.scaling import (bootstrap, case_indices, fit_loss_law, indices_digest,
                                    interval)
    from course_lib.scaling.isoflop import plan_run
    from course_lib.tools.op_fingerprints import cpu_name
    from scaling import key

    sweep, runs = law_fit_runs()
    pred = sweep["prediction"]
    fitted_to = sorted([list(key(r)) for r in runs])
    if fitted_to != pred["fitted_to"]:
        p.error("the sweep's runs are not those its prediction was fitted to: finish "
                "benchmarks/scaling.py's sweep and prediction first")
    law = fit_loss_law([r["N"] for r in runs], [r["D"] for r in runs], [r["loss"] for r in runs])
    chosen = plan_run(pred["shape"], pred["budget"], 65, sweep["train_tokens"])

    bar = tqdm(total=args.resamples, desc="bootstrap fits", file=sys.stdout)
    drawn = hashlib.sha256()  # the run indices each fit was given, in order

    def resample(runs, rng):  # course_lib.scaling.resample_runs, remembering what it drew
        indices = case_indices(len(runs), rng)
        indices_digest(drawn, indices)
        return [runs[i] for i in indices]

    def statistic(sample):
        bar.update(1)
        return law_statistics(sample, law, chosen)

    start = time.perf_counter()
    values, dropped = bootstrap(runs, statistic, n=args.resamples, seed=args.seed,
                                resample=resample)
    seconds = time.perf_counter() - start
    bar.close()
    for j, name in enumerate(STATISTICS):
        low, high = interval(values[:, j])
        print(f"{name:10s} 95% bootstrap interval {low:.4f} to {high:.4f}")
    print(f"{args.resamples} fits in {seconds:.0f} s, {dropped} dropped")
    record.finish({
        "command": "python benchmarks/scaling_law_bootstrap.py "
        + " ".join(argv if argv is not None else sys.argv[1:]),
        "resamples": args.resamples, "seed": args.seed, "dropped": dropped,
        "fitted_to": fitted_to,
        "runs_in_order": [list(key(r)) for r in runs],  # the order the resamples index
        # what the fits were given; the chapter and the tests compare it with what
        # course_lib.scaling draws from the seed (case_resamples_sha256)
        "resamples_sha256": drawn.hexdigest(),
        "law": {k: getattr(law, k) for k in ("E", "A", "B", "alpha", "beta")},
        "chosen": {"shape": chosen["shape"], "N": chosen["N"], "D": chosen["D"]},
        "statistics": list(STATISTICS),
        "values": values.tolist(),  # (resamples kept, 4), in the order of "statistics"
        "seconds": round(seconds, 1), "cpu": cpu_name(), "cpus": os.cpu_count(),
        "threads": torch.get_num_threads(), "torch": torch.__version__, "code": code_commit(),
        "made_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }, say=True)
    return 0


if __name__ == "__main__":
    run_in_reference_environment()  # before torch loads: the chapter's numeric environment
    raise SystemExit(main())
