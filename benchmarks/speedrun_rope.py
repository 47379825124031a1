"""Does RoPE pay in the CPU speedrun? (chapter 14) The `shakespeare-char-speedrun` preset (1 layer,
learned positions) against the same preset with RoPE (``--set rope_theta=10000``), both for the
preset's 550 steps, evaluated 10 times along the way, so each run gives a curve of validation loss
against step and against wall-clock seconds. The two are run back to back for each seed, as the
whole command a reader types (see benchmarks/speedrun.py, whose helpers this reuses):

    PYTHONPATH=$PWD python benchmarks/speedrun_rope.py --json course_lib/records/speedrun_rope.json

Per step the comparison is deterministic (reference numeric environment); per second it depends on
the machine and on its load, which is stored with the result: compare the two curves of one seed,
measured side by side, not seconds across machines.
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from course_lib.tools.numerics import REFERENCE, reference_environment  # noqa: E402
from bench_args import count, record_file, seed_number  # noqa: E402  (imports no torch)
from speedrun import run_command, whole_split_loss  # noqa: E402

VARIANTS = {"learned positions (the preset)": [], "RoPE": ["--set", "rope_theta=10000"]}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seeds", type=seed_number, nargs="+", default=[1337, 1])
    p.add_argument("--evals", type=count, default=10)
    p.add_argument("--max-iters", type=count,
                   help="override the preset's max_iters (a quick smoke test only)")
    p.add_argument("--json", help="write the record (JSON) to FILE; without it nothing is written")
    args = p.parse_args(argv)
    env = reference_environment()
    os.environ.update(REFERENCE)
    # before any run (it imports torch: after the environment)
    record = record_file(p, args, None, "--json")
    env.update(
        PYTHONUNBUFFERED="1",
        PYTHONPATH=os.pathsep.join(
            [str(ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
        ),
    )
    from course_lib.presets import get_preset

    steps = args.max_iters or get_preset("shakespeare-char-speedrun").train.max_iters
    every = ["--set", f"eval_interval={-(-steps // args.evals)}"]
    every += ["--max-iters", str(args.max_iters)] if args.max_iters else []
    runs = {name: [] for name in VARIANTS}
    loads, load_before = [], os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="speedrun-rope-") as tmp:
        for seed in args.seeds:
            for name, extra in VARIANTS.items():
                folder = Path(tmp) / f"{len(loads)}"
                run = run_command("shakespeare-char-speedrun", seed, folder, extra + every, env)
                run.update(seed=seed, val_loss=round(whole_split_loss(folder / "ckpt.pt"), 4))
                loads.append(os.getloadavg()[0])
                runs[name].append(run)
                print(f"seed {seed:5d} {name:32s} {run['wall_s']:6.1f} s, whole-split val loss "
                      f"{run['val_loss']:.4f}, load average {loads[-1]:.1f}", flush=True)
                result = {
                    "command": "python benchmarks/speedrun_rope.py "
                    + " ".join(argv if argv is not None else sys.argv[1:]),
                    "preset": "shakespeare-char-speedrun",
                    "steps": steps,
                    "seeds": args.seeds,
                    "curve_estimate": "the preset's eval_iters random validation batches at each "
                                      "evaluation",
                    "final_estimate": "the whole validation split",
                    "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
                    "load_average_before": load_before,
                    "load_average_after_each_run": loads,
                    "environment": "reference (course_lib/tools/numerics.py)",
                    "runs": runs,
                }
                # after every run: a run stopped part-way keeps what it finished
                record.progress(result)
    record.finish(result, say=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
