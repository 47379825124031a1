r"""The CPU speedrun (issue 24, chapter 14):
`shakespeare-char-speedrun` against `shakespeare-char-cpu`.

For each seed it runs the two presets back to back, each as the whole command a reader types,

    python -m course_lib train --preset PRESET --set seed=S --out DIR --device cpu

in its own process (same machine, same environment), and times it from the moment the process
starts to the moment the trainer reports its last evaluation (the "done in" line, printed right
after the final evaluation and checkpoint; start-up, data loading, every evaluation and
checkpoint count; only the 200-character sample printed after it does not). Then it evaluates
each run's final checkpoint on the SAME fixed estimate: the whole validation split (the last 10%
of tiny Shakespeare), cut into consecutive windows of the model's block size, every token after
the first predicted once. Deterministic: no random batches, so 1.88 cannot be reached by noise.

It prints the wall-time ratio (speedrun / baseline) per seed and its median, each run's
validation loss, the seed-to-seed spread, and whether issue 24's goal holds: a ratio of at most
0.5 and every speedrun validation loss at most 1.88. Usage:

    python benchmarks/speedrun.py                      # seeds 1337, 1, 2 (about 5 minutes, 2 cores)
    # chapter 14, book/measured.md:
    python benchmarks/speedrun.py --json course_lib/records/speedrun_results.json
    # the plot:
    python benchmarks/speedrun.py --seeds 1337 --curve-evals 10 \
        --json course_lib/records/speedrun_curve.json

``--json`` writes every number, and each run's (wall time, step, val loss) curve: one point per
evaluation line the trainer printed (its own estimate: the preset's ``eval_iters`` random batches),
timestamped as the line arrived, plus the whole-split loss at the end. ``--curve-evals K`` makes the
speedrun evaluate K times (``--set eval_interval``) instead of only at its start and end, for a
denser curve: those extra evaluations are then part of its timed run, as they would be for a reader.

By default the runs and the evaluation use the reference numeric environment (course_lib/tools/
numerics.py: AVX2 kernels, 2 threads), so the losses reproduce bitwise on any x86-64 CPU with AVX2;
``--host-env`` runs with this machine's own settings instead. Timings depend on the machine and on
what else runs on it: compare the ratio, measured side by side, not the seconds.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

sys.path.insert(0, str(ROOT / "benchmarks"))  # bench_args, when a test loads this file
from bench_args import at_least, count, record_file, seed_number  # noqa: E402  (imports no torch)
# (imports no torch)
from course_lib.tools.numerics import REFERENCE, reference_environment  # noqa: E402

GOAL_RATIO = 0.5
GOAL_LOSS = 1.88  # nanoGPT's published validation loss for its CPU baby GPT
BASELINE, SPEEDRUN = "shakespeare-char-cpu", "shakespeare-char-speedrun"


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seeds", type=seed_number, nargs="+", default=[1337, 1, 2])
    p.add_argument("--baseline", default=BASELINE)
    p.add_argument("--speedrun", default=SPEEDRUN)
    p.add_argument("--out", help="folder for the runs' checkpoints (default: a temporary folder, "
                                 "removed after)")
    p.add_argument("--json", help="write every number and each run's loss curve to this JSON file")
    p.add_argument("--curve-evals", type=at_least(0), default=0,
                   help="make the speedrun evaluate this many times (default: as the preset says)")
    p.add_argument("--max-iters", type=count,
                   help="override both presets' max_iters (a quick smoke test only)")
    p.add_argument("--host-env", action="store_true",
                   help="this machine's numeric settings, not the reference")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"],
                   help="where both presets train (cuda: e.g. --speedrun "
                        "shakespeare-char-speedrun-gpu --host-env)")
    args = p.parse_args(argv)
    args.parser = p
    return args


def check_after_environment(args):
    """What needs torch or the presets, checked once the numeric environment is set and before any
    run: the presets, the device, and where --json goes. Returns the record file."""
    from course_lib.presets import PRESETS
    from course_lib.utils import check_device
    for option, name in (("--baseline", args.baseline), ("--speedrun", args.speedrun)):
        if name not in PRESETS:
            args.parser.error(f"{option}: unknown preset {name!r}; choose one of "
                              f"{', '.join(PRESETS)}")
    try:
        check_device(args.device)
    except ValueError as e:
        args.parser.error(str(e))
    return record_file(args.parser, args, None, "--json")


def timed_output(command: list[str], cwd, env: dict) -> tuple[list[tuple[float, str]], int, float]:
    """Run a command; each line it prints (progress-bar carriage returns split too) with the
    second it arrived, counted from the start; its exit status and its whole run's seconds."""
    start = time.perf_counter()
    process = subprocess.Popen(command, cwd=cwd, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    lines = []
    for raw in process.stdout:  # binary lines, split at \n only (the progress bar's \r stay inside)
        now = time.perf_counter() - start
        lines += [(now, line.strip()) for line in raw.decode("utf-8", "replace").split("\r")
                  if line.strip()]
    code = process.wait()
    return lines, code, time.perf_counter() - start


def run_command(preset: str, seed: int, out: Path, extra: list[str],
                env: dict, device: str = "cpu") -> dict:
    """Run one training command; its wall time to the "done in" line and to its exit, and the
    evaluation lines it printed, each with the second it arrived."""
    command = [sys.executable, "-m", "course_lib", "train", "--preset", preset,
               "--set", f"seed={seed}", "--out", str(out), "--device", device, *extra]
    lines, code, wall_exit = timed_output(command, ROOT, env)
    curve, done, done_line = [], None, None
    for now, line in lines:
        # "step   250: train loss 2.0, val loss 2.1"
        if line.startswith("step ") and "val loss" in line:
            step = int(line.split(":")[0].split()[1])
            curve.append({"wall_s": round(now, 2), "step": step,
                          "val_loss": float(line.rsplit(" ", 1)[1])})
        elif line.startswith("done in "):
            done, done_line = now, line
    if code != 0 or done is None:
        log = [line for _, line in lines if not line.startswith("train:")]
        raise SystemExit(f"`{' '.join(command)}` failed (exit status {code}):\n"
                         + "\n".join(log[-15:]))
    return {"command": " ".join(command[1:]), "wall_s": round(done, 2),
            "wall_exit_s": round(wall_exit, 2), "curve": curve, "done_line": done_line}


def whole_split_loss(checkpoint: Path, text: str | None = None, split: str = "val",
                     batch_size: int = 64) -> float:
    """``course_lib.losses.sequence_loss`` of the checkpoint's model over the whole ``split`` of
    ``text`` (default: the corpus of the checkpoint's preset, the text the CLI trained on)."""
    import torch

    from course_lib.checkpoint import load_model, load_tokenizer
    from course_lib.data import load_text, train_val_split
    from course_lib.losses import sequence_loss
    from course_lib.presets import get_preset

    model, ckpt = load_model(checkpoint, "cpu")
    tokenizer = load_tokenizer(ckpt, checkpoint)
    if text is None:
        text = load_text(get_preset(ckpt["trained_on"]["preset"]).corpus)
    data = dict(zip(("train", "val"),
                    train_val_split(torch.tensor(tokenizer.encode(text), dtype=torch.long))))[split]
    return sequence_loss(model, data, batch_size)


def main(argv=None) -> int:
    args = parse_args(argv)
    env = dict(os.environ) if args.host_env else reference_environment()
    if not args.host_env:
        # this process evaluates in it too (set before torch is imported)
        os.environ.update(REFERENCE)
    paths = [str(ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
    # this checkout's course_lib
    env.update(PYTHONUNBUFFERED="1", PYTHONPATH=os.pathsep.join(paths))

    record = check_after_environment(args)
    from course_lib.presets import get_preset

    extra = {args.baseline: [], args.speedrun: []}
    if args.max_iters is not None:  # 0 is refused, never read as "no override"
        for preset in extra:
            extra[preset] += ["--max-iters", str(args.max_iters)]
    if args.curve_evals:
        speedrun = get_preset(args.speedrun).train
        steps = speedrun.max_iters if args.max_iters is None else args.max_iters
        extra[args.speedrun] += ["--set", f"eval_interval={max(1, -(-steps // args.curve_evals))}"]

    temporary = None if args.out else tempfile.TemporaryDirectory(prefix="speedrun-")
    out = Path(args.out or temporary.name)
    runs = {args.baseline: [], args.speedrun: []}
    try:
        for seed in args.seeds:
            for preset in (args.baseline, args.speedrun):
                folder = out / f"{preset}-seed{seed}"
                if (folder / "ckpt.pt").exists():
                    raise SystemExit(f"{folder} already holds a run: choose another --out")
                run = run_command(preset, seed, folder, extra[preset], env, args.device)
                run.update(seed=seed, val_loss=round(whole_split_loss(folder / "ckpt.pt"), 4))
                last_step = run["curve"][-1]["step"] if run["curve"] else None
                run["curve"].append({"wall_s": run["wall_s"], "step": last_step,
                                     "val_loss": run["val_loss"],
                                     "estimate": "whole validation split"})
                runs[preset].append(run)
                print(f"seed {seed:5d}  {preset:28s} {run['wall_s']:7.1f} s to its last evaluation "
                      f"({run['wall_exit_s']:.1f} s to exit), val loss {run['val_loss']:.4f} "
                      "(whole split)", flush=True)
    finally:
        if temporary is not None:
            temporary.cleanup()

    # from the wall times as stored (to 0.01 s), so that the JSON and the printed ratios agree
    ratios = [round(s["wall_s"] / b["wall_s"], 4)
              for b, s in zip(runs[args.baseline], runs[args.speedrun])]
    speed_losses = [r["val_loss"] for r in runs[args.speedrun]]
    base_losses = [r["val_loss"] for r in runs[args.baseline]]
    holds = max(ratios) <= GOAL_RATIO and max(speed_losses) <= GOAL_LOSS
    print(f"\nwall-time ratio speedrun / baseline: median {statistics.median(ratios):.3f}; "
          "per seed "
          + ", ".join(f"{seed}: {r:.3f}" for seed, r in zip(args.seeds, ratios)))
    for name, losses in ((args.baseline, base_losses), (args.speedrun, speed_losses)):
        print(f"{name:28s} val loss (whole split): mean {statistics.mean(losses):.4f}, "
              f"spread {max(losses) - min(losses):.4f} (min {min(losses):.4f}, max "
              f"{max(losses):.4f})")
    print(f"goal (every ratio <= {GOAL_RATIO} and every speedrun val loss <= {GOAL_LOSS}): "
          f"{'HOLDS' if holds else 'does NOT hold'}")
    if record:
        result = {"goal": {"ratio": GOAL_RATIO, "val_loss": GOAL_LOSS}, "holds": holds,
                  "ratio_median": statistics.median(ratios), "ratios": ratios,
                  "seeds": args.seeds, "device": args.device,
                  "environment": "host" if args.host_env
                  else "reference (course_lib/tools/numerics.py)",
                  "curve_evals": args.curve_evals, "max_iters_override": args.max_iters,
                  "load_average_at_end": os.getloadavg() if hasattr(os, "getloadavg") else None,
                  "runs": runs}
        record.finish(result, say=True)
    return 0 if holds else 1


if __name__ == "__main__":
    raise SystemExit(main())
