r"""Chapter 17's chat model: the shipped pretrained GPT fine-tuned on the shipped conversations
(``python -m course_lib chat-sft``), against the from-scratch control at equal steps, for several
step counts and seeds. Each run is the CLI's run (``runs.start_chat_sft_run``), so its
checkpoint resumes bit for bit; the benchmark only loops over settings and keeps the results.

    python benchmarks/chat_sft.py --device cuda --iters 1000 3000 6000 --seeds 0 1 2 \
        --out-dir runs/chat_sft
    # the runs' results -> the record:
    python benchmarks/chat_sft.py --collect runs/chat_sft --update-record

Every run writes ``run.json`` (its settings, validation curve, seconds and device) and a slim copy
of its model, ``model.pt`` (float16 weights, no optimizer: what ships, as with the pretrained
model); ``--collect`` gathers the ``run.json`` files into ``--record FILE`` (``--update-record``:
course_lib/records/chat_sft_runs.json).
The step count is chosen on the validation loss of the pretrained runs (never on the test split),
and the per-task scores on the test split come from ``benchmarks/chat_scores.py``.

The record was made on the first conversations (``course_lib/tasks/chat_v1.json``, 64-token ones).
Since issue 54 the runs train on the current ones (``chat.json``), of which a 64-token model keeps
only those that fit its context; the 256-token model that ships now was trained with the commands
in records/chat_model_runs.json.
"""
from __future__ import annotations

import argparse
import datetime
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from bench_args import (  # noqa: E402
    RecordFile, add_record_options, count, device, record_file, seed_number)
from course_lib.checkpoint import load_checkpoint, write_atomic  # noqa: E402
from course_lib.pretrained import pretrained_checkpoint  # noqa: E402
from course_lib.runs import start_chat_sft_run  # noqa: E402

RECORD = ROOT / "course_lib" / "records" / "chat_sft_runs.json"


def run_name(start: str, iters: int, lr: float, seed: int) -> str:
    return f"{start}-it{iters}-lr{lr:g}-s{seed}"


def slim(ckpt_path: Path, out: Path) -> Path:
    """The checkpoint as it ships: float16 weights, no optimizer or batch generators."""
    ckpt = load_checkpoint(ckpt_path)
    ckpt["model"] = {k: v.half() if v.is_floating_point() else v for k, v in ckpt["model"].items()}
    ckpt["optimizer"], ckpt["rng"] = None, None
    return write_atomic(out, ckpt)


def train_one(start: str, iters: int, lr: float, seed: int, device: str, out_dir: Path) -> dict:
    folder = out_dir / run_name(start, iters, lr, seed)
    if (folder / "run.json").exists():
        return json.loads((folder / "run.json").read_text())
    settings = {"max_iters": iters, "learning_rate": lr, "min_lr": lr / 10, "seed": seed,
                "eval_interval": max(iters // 20, 1), "eval_iters": 20}
    began = time.perf_counter()
    trainer = start_chat_sft_run(pretrained_checkpoint(), settings,
                                 from_scratch=(start == "scratch"),
                                 device=device, out_dir=folder, progress=False)
    trainer.train()
    seconds = time.perf_counter() - began
    slim(trainer.checkpoint_path, folder / "model.pt")
    # the full checkpoint (with Adam's moments) stays out of the record
    trainer.checkpoint_path.unlink()
    result = {"name": folder.name, "start": start, "iters": iters, "learning_rate": lr,
              "seed": seed, "device": torch.cuda.get_device_name() if device == "cuda" else device,
              "settings": settings, "eval_step": trainer.history["eval_step"],
              "val_loss": [round(v, 5) for v in trainer.history["val_loss"]],
              "train_loss": [round(v, 5) for v in trainer.history["train_loss"]],
              "final_val_loss": round(trainer.history["val_loss"][-1], 5),
              "train_s": round(seconds, 1), "torch": torch.__version__}
    (folder / "run.json").write_text(json.dumps(result, indent=1))
    print(f"{folder.name}: val loss {result['final_val_loss']:.4f} in {seconds:.0f} s", flush=True)
    return result


def collect(out_dir: Path, record: RecordFile, command: str) -> dict:
    runs = sorted((json.loads(p.read_text()) for p in out_dir.glob("*/run.json")),
                  key=lambda r: r["name"])
    payload = {"command": command,
               "made_at": (datetime.datetime.now(datetime.timezone.utc)
                           .isoformat(timespec="seconds")),
               "runs": runs}
    record.finish(payload)
    print(f"{len(runs)} runs -> {record.path}")
    return payload


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", type=device, default="cpu")
    p.add_argument("--iters", type=count, nargs="+", default=[1000])
    p.add_argument("--lr", type=float, nargs="+", default=[1e-3])
    p.add_argument("--seeds", type=seed_number, nargs="+", default=[0, 1, 2])
    p.add_argument("--starts", nargs="+", default=["pretrained", "scratch"],
                   choices=["pretrained", "scratch"])
    p.add_argument("--out-dir", type=Path, default=Path("runs/chat_sft"))
    p.add_argument("--collect", type=Path, metavar="DIR",
                   help="gather DIR's run.json files into --record")
    add_record_options(p, RECORD, "--record", type=Path)
    args = p.parse_args(argv)
    if args.collect:
        if not args.collect.is_dir():
            p.error(f"--collect {args.collect}: no such folder (the --out-dir of earlier runs)")
        record = record_file(p, args, RECORD, "--record")
        if not record:
            p.error("--collect gathers the runs into a record: name it with --record FILE, or "
                    "--update-record")
        collect(args.collect, record,
                "python benchmarks/chat_sft.py " + " ".join(argv or sys.argv[1:]))
        return 0
    for iters in args.iters:
        for lr in args.lr:
            for seed in args.seeds:
                for start in args.starts:
                    train_one(start, iters, lr, seed, args.device, args.out_dir)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
