"""Does multi-token prediction pay in the CPU speedrun? (chapters 14 and 22) A paired A/B at equal
wall clock: the `shakespeare-char-speedrun` preset against the same preset with ``--set
mtp_heads=D`` (D extra heads, course_lib.mtp; the loss adds 0.3 x their mean cross-entropy), the
same seeds, so each pair starts from the same trunk and sees the same batches.

Equal wall clock on a machine others share cannot be read off raw wall times. So the script first
measures the per-step cost ratio r (MTP step time / plain step time) in this process, the two
arms interleaved round by round (a busy machine slows both alike), one training step each (forward,
backward, clipping, AdamW) on a batch of the preset's shape; then it gives the plain arm the
preset's S steps and the MTP arm round(S / r) steps: the budget that equal time implies when the
ratio holds. A third arm, MTP for the full S steps, says whether the heads help per step at all.
Each run is the whole command a reader types (benchmarks/speedrun.py's helpers), on one thread, and
is scored on the whole validation split by its next-token head alone (the MTP heads count only while
training). Usage:

    PYTHONPATH=$PWD python benchmarks/speedrun_mtp.py [--seeds 1337 1 2] [--heads 3]
        [--json FILE | --update-record] [--keep DIR]

It prints the cost ratio, each run's whole-split validation loss, and the paired differences (MTP
minus plain) with a 95% t interval over the seeds; --update-record writes
course_lib/records/speedrun_mtp.json and the entry "multi-token prediction" of
course_lib/records/speedrun_records.json (kept only when the equal-time interval lies below 0).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from course_lib.tools.numerics import REFERENCE, reference_environment  # noqa: E402  (imports no torch)
from bench_args import RECORDS, add_record_options, at_least, count, record_file, seed_number  # noqa: E402
from speedrun import run_command, whole_split_loss  # noqa: E402

PRESET = "shakespeare-char-speedrun"
SHIPPED = RECORDS / "speedrun_mtp.json"
LOG = RECORDS / "speedrun_records.json"
CHANGE = "multi-token prediction"


def parse(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seeds", type=seed_number, nargs="+", default=[1337, 1, 2])
    p.add_argument(
        "--heads", type=at_least(1), default=3, help="mtp_heads: extra heads (Gloeckle et al.: 3)"
    )
    p.add_argument("--weight", type=float, default=0.3, help="mtp_weight (DeepSeek-V3: 0.3)")
    p.add_argument(
        "--cost-rounds",
        type=count,
        default=15,
        help="interleaved rounds of the step-cost measurement",
    )
    p.add_argument("--cost-steps", type=count, default=5, help="steps per arm and round")
    p.add_argument(
        "--max-iters",
        type=count,
        help="the plain arm's steps instead of the preset's (smoke tests)",
    )
    p.add_argument(
        "--keep", help="keep every run's folder here (the chapter's drafter 3 reads the MTP model)"
    )
    add_record_options(p, SHIPPED)
    args = p.parse_args(argv)
    if not 0.0 <= args.weight <= 10.0:
        p.error(f"--weight {args.weight}: mtp_weight must be in [0, 10] (DeepSeek-V3: 0.3)")
    if args.keep and Path(args.keep).exists() and any(Path(args.keep).iterdir()):
        p.error(f"--keep {args.keep} is not empty: give a new folder (nothing is overwritten)")
    return p, args


def step_cost_ratio(heads: int, weight: float, rounds: int, steps: int) -> dict:
    """The MTP step's time over the plain step's, one training step of the preset's shapes each,
    the two arms interleaved (their order alternating), on this process's threads."""
    import torch

    from course_lib.model import GPT
    from course_lib.presets import get_preset

    preset = get_preset(PRESET)
    B, T = preset.train.batch_size, preset.model.block_size
    arms = {}
    for name, extra in (("plain", {}), ("mtp", {"mtp_heads": heads, "mtp_weight": weight})):
        torch.manual_seed(0)
        model = GPT(preset.model.__class__(**{**preset.model.to_dict(), **extra})).train()
        arms[name] = (model, torch.optim.AdamW(model.parameters(), lr=preset.train.learning_rate))
    g = torch.Generator().manual_seed(0)
    batch = torch.randint(0, preset.model.vocab_size, (B, T + 1), generator=g)

    def run(name: int, n: int) -> float:
        model, opt = arms[name]
        start = time.perf_counter()
        for _ in range(n):
            opt.zero_grad(set_to_none=True)
            model(batch[:, :-1], batch[:, 1:])[1].backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), preset.train.grad_clip)
            opt.step()
        return (time.perf_counter() - start) / n

    for name in arms:
        run(name, 3)  # warm-up
    times = {"plain": [], "mtp": []}
    for r in range(rounds):
        for name in ("plain", "mtp") if r % 2 == 0 else ("mtp", "plain"):
            times[name].append(run(name, steps))
    ratios = [m / p for p, m in zip(times["plain"], times["mtp"])]
    return {
        "ratio": statistics.median(ratios),
        "ratio_min": min(ratios),
        "ratio_max": max(ratios),
        "ms_per_step": {k: round(1000 * statistics.median(v), 2) for k, v in times.items()},
        "rounds": rounds,
        "steps_per_round": steps,
        "threads": torch.get_num_threads(),
        "load_average": os.getloadavg(),
    }


def t_interval(diffs: list[float]) -> dict:
    """Mean of the paired differences with its 95% Student t interval (n - 1 degrees of freedom)."""
    from scipy import stats

    n, mean = len(diffs), statistics.mean(diffs)
    if n < 2:
        return {"mean": mean, "n": n, "low": None, "high": None}
    half = float(stats.t.ppf(0.975, n - 1)) * statistics.stdev(diffs) / n**0.5
    return {
        "mean": mean,
        "sd": statistics.stdev(diffs),
        "n": n,
        "low": mean - half,
        "high": mean + half,
    }


def log_entry(result: dict) -> dict:
    """The entry of speedrun_records.json: kept only when MTP at equal time lowers the loss for
    sure."""
    equal = result["paired"]["mtp_equal_time"]
    kept = equal["high"] is not None and equal["high"] < 0
    sets = {"plain": {}, "mtp_equal_time": result["mtp_set"], "mtp_equal_steps": result["mtp_set"]}
    runs = [
        {
            "max_iters": run["steps"],
            "seed": run["seed"],
            "val_loss": run["val_loss"],
            "set": sets[arm],
        }
        for arm, arm_runs in result["runs"].items()
        for run in arm_runs
    ]
    eq_steps = result["paired"]["mtp_equal_steps"]

    def interval(iv):  # one seed (a smoke test) has none
        return (
            "no interval: one seed"
            if iv["low"] is None
            else f"[{iv['low']:+.4f}, {iv['high']:+.4f}]"
        )

    why = (
        f"{result['heads']} extra heads (Gloeckle et al. 2024's parallel heads; loss + "
        f"{result['weight']} x their "
        f"mean, DeepSeek-V3) cost {result['cost']['ratio']:.2f}x per step (measured "
        "interleaved, one thread, "
        f"under load); at equal time ({result['steps']['mtp_equal_time']} steps against "
        f"{result['steps']['plain']}) the next-token val loss moves by {equal['mean']:+.4f} "
        f"(95% t interval {interval(equal)}, {equal['n']} seeds, paired); at equal "
        f"steps by {eq_steps['mean']:+.4f} {interval(eq_steps)}: "
        + ("kept" if kept else "dropped: at this scale the heads do not pay for their time")
        + " (benchmarks/speedrun_mtp.py, course_lib/records/speedrun_mtp.json)"
    )
    return {
        "change": f"{CHANGE}: {result['heads']} extra heads predicting 2..{result['heads'] + 1} "
        f"tokens ahead, at equal wall clock",
        "kept": kept,
        "ms_per_step_vs_preset": round(result["cost"]["ratio"], 3),
        "runs": runs,
        "why": why,
    }


def update_log(entry: dict) -> None:
    """Put ``entry`` into speedrun_records.json: it replaces an earlier multi-token-prediction
    entry, else it comes last; written atomically."""
    from course_lib.utils import write_text_atomic

    log = json.loads(LOG.read_text())
    records = [r for r in log["records"] if not r["change"].startswith(CHANGE)]
    entry = {"n": len(records) + 1, **entry}
    log["records"] = records + [entry]
    write_text_atomic(LOG, json.dumps(log, indent=1) + "\n", option="--update-record")
    print(f"wrote {LOG}")


def main(argv=None) -> int:
    p, args = parse(argv)
    env = reference_environment()
    os.environ.update(REFERENCE)
    one = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}  # one thread: the machine is shared
    env.update(one)
    os.environ.update(one)
    record = record_file(p, args, SHIPPED)
    env.update(
        PYTHONUNBUFFERED="1",
        PYTHONPATH=os.pathsep.join(
            [str(ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
        ),
    )
    import torch

    from course_lib.presets import get_preset

    torch.set_num_threads(1)

    cost = step_cost_ratio(args.heads, args.weight, args.cost_rounds, args.cost_steps)
    print(
        f"step cost MTP / plain: {cost['ratio']:.3f} (median of {cost['rounds']} interleaved "
        "rounds, range "
        f"{cost['ratio_min']:.3f}-{cost['ratio_max']:.3f}; {cost['ms_per_step']['plain']:.1f} "
        "and "
        f"{cost['ms_per_step']['mtp']:.1f} ms per step on one thread, load average "
        f"{cost['load_average'][0]:.1f})",
        flush=True,
    )
    plain_steps = args.max_iters or get_preset(PRESET).train.max_iters
    steps = {
        "plain": plain_steps,
        "mtp_equal_time": max(1, round(plain_steps / cost["ratio"])),
        "mtp_equal_steps": plain_steps,
    }
    mtp_set = {"mtp_heads": args.heads, "mtp_weight": args.weight}
    extra = {
        "plain": [],
        "mtp_equal_time": [
            "--set",
            f"mtp_heads={args.heads}",
            "--set",
            f"mtp_weight={args.weight}",
        ],
    }
    extra["mtp_equal_steps"] = extra["mtp_equal_time"]
    runs = {arm: [] for arm in steps}
    result = {}
    keep = Path(args.keep) if args.keep else None
    with tempfile.TemporaryDirectory(prefix="speedrun-mtp-") as tmp:
        for seed in args.seeds:
            for arm in steps:
                folder = (keep or Path(tmp)) / f"{arm}-seed{seed}"
                run = run_command(
                    PRESET, seed, folder, extra[arm] + ["--max-iters", str(steps[arm])], env
                )
                run.update(
                    seed=seed,
                    steps=steps[arm],
                    val_loss=round(whole_split_loss(folder / "ckpt.pt"), 4),
                    load_average=os.getloadavg()[0],
                )
                del run["curve"]
                runs[arm].append(run)
                print(
                    f"seed {seed:5d} {arm:16s} {steps[arm]:4d} steps  whole-split val loss "
                    f"{run['val_loss']:.4f}  "
                    f"({run['wall_s']:.1f} s, load average {run['load_average']:.1f})",
                    flush=True,
                )
    paired = {
        arm: t_interval([m["val_loss"] - b["val_loss"] for b, m in zip(runs["plain"], runs[arm])])
        for arm in ("mtp_equal_time", "mtp_equal_steps")
    }
    for arm, iv in paired.items():
        interval = (
            "" if iv["low"] is None else f", 95% t interval [{iv['low']:+.4f}, {iv['high']:+.4f}]"
        )
        print(f"{arm:16s} minus plain (paired, {iv['n']} seeds): mean {iv['mean']:+.4f}{interval}")
    given = [
        ("RUNS" if a == args.keep else a) for a in (argv if argv is not None else sys.argv[1:])
    ]  # no local path
    result = {
        "command": "python benchmarks/speedrun_mtp.py " + " ".join(given),
        "preset": PRESET,
        "heads": args.heads,
        "weight": args.weight,
        "mtp_set": mtp_set,
        "seeds": args.seeds,
        "cost": cost,
        "steps": steps,
        "paired": paired,
        "runs": runs,
        "threads": 1,
        "environment": "the reference numeric environment (course_lib/tools/numerics.py) but one "
        "thread",
        "final_estimate": "the whole validation split, next-token head only",
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
        "torch": torch.__version__,
    }
    entry = log_entry(result)
    print(f"verdict: {'kept' if entry['kept'] else 'dropped'}")
    record.finish({**result, "log_entry": entry}, say=True)
    if args.update_record:
        update_log(entry)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
