"""Chapter 15's fine-tuning runs, with seeds: every number the chapter quotes about them.

Each run fine-tunes the shipped pretrained model (or, as the control, the same architecture
from a random initialisation) with chapter 15's recipe (``finetune.finetune_config``: AdamW,
1e-3 for full fine-tuning, 1e-2 for LoRA, batches of 32 fresh examples) and records:

- the task: exact match on held-out examples (greedy; 100 dates, 200 words), the task's
  validation loss over training (masked runs: the answer's targets only); for the words, also
  exact match on 200 training words;
- forgetting on Shakespeare's validation split (``forgetting.vocab_split_loss``, 20 batches of
  32 windows of 64, the same windows for every model): the plain loss, the loss renormalised over
  the original 65 characters, the probability mass on the new characters, and a greedy sample;
- trained parameters, seconds and the load average (the machine is shared: seconds are not
  comparable across runs).

The runs (``RUNS``; ``--only NAME`` picks some, ``--list`` shows them): the unscrambling task
(``course_lib.unscramble``), where pretraining helps, pretrained against the from-scratch control;
the dates task, where it does not, with its control; and the chapter's sweeps on unscrambling: full
fine-tuning unmasked, LoRA of rank 1, 4, 8 on the attention, on the MLP and on all linear layers,
the new token row alone, replay of 25% Shakespeare rows (full and LoRA), and LoRA on an
NF4-quantised base. Results go, when asked, to ``--out FILE`` or (``--update-record``) to
``course_lib/records/finetune_runs.json``, one entry per run and seed, written after each run (a
file lock lets two processes share it); a run already recorded is skipped, so an interrupted sweep
continues where it stopped. Without either, the results are printed only. Usage:

    # every run, seeds 0 1 2: what chapter 15 prints
    python benchmarks/finetune_dates.py --update-record
    python benchmarks/finetune_dates.py --only "dates full" --seeds 0 --steps 20 --out /tmp/x.json

Defaults are the chapter's: 200 steps and 100 held-out dates for the dates runs, 300 steps and
200 held-out words for the unscrambling runs. One run takes about a minute of one core (one
thread) on an idle machine; each record stores its seconds and the load average beside them, and
the command that made it (``command``). The runs stored before commands were kept carry
``command_reconstructed``: the command that reproduces their settings (steps, held-out size, seeds
and learning rate all equal its defaults), not a copy of the one typed.
"""
from __future__ import annotations

import argparse
import fcntl
import json
import os
import shlex
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import torch
from bench_args import add_record_options, count, record_file, seed_number

from course_lib.data import load_text
from course_lib.finetune import (SEP, END, TASK_CHARS, answer_batch_fn, dates_test_pairs,
                                 answers_exact_match, extend_tokenizer, finetune_config)
from course_lib.forgetting import replay_batch_fn, vocab_split_loss
from course_lib.generate import generate_batch
from course_lib.lora import add_lora
from course_lib.lora_gpt import GrownRows, extend_vocabulary
from course_lib.model import GPT, GPTConfig
from course_lib.nf4 import quantize_linears
from course_lib.pretrained import load_pretrained
from course_lib.train import Trainer
from course_lib.unscramble import unscramble_batch_fn, unscramble_test_pairs, word_split
from course_lib.utils import seed_everything, write_text_atomic

RECORDS = Path(__file__).resolve().parents[1] / "course_lib" / "records" / "finetune_runs.json"
# The chapter's settings per task: steps and held-out examples for exact match
DEFAULT_STEPS = {"dates": 200, "words": 300}
DEFAULT_EVAL = {"dates": 100, "words": 200}
ATTN, MLP = ("attn.c_attn", "attn.c_proj"), ("mlp.c_fc", "mlp.c_proj")


def spec(task="dates", init="pretrained", method="full", rank=None, targets=ATTN, masked=True,
         replay=0.0):
    return dict(task=task, init=init, method=method, rank=rank, targets=list(targets),
                masked=masked, replay=replay)


RUNS = {  # in order of importance: a sweep cut short has the chapter's main comparisons first
    # the main task (unscrambling, where pretraining helps) and its control
    "words full": spec(task="words"),
    "words scratch": spec(task="words", init="scratch"),
    # dates, where it does not, with its control
    "dates full": spec(),
    "dates scratch": spec(init="scratch"),
    # the sweeps, on the main task
    "words full unmasked": spec(task="words", masked=False),
    "words lora r=1": spec(task="words", method="lora", rank=1),
    "words lora r=4": spec(task="words", method="lora", rank=4),
    "words lora r=8": spec(task="words", method="lora", rank=8),
    "words lora r=8 mlp": spec(task="words", method="lora", rank=8, targets=MLP),
    "words lora r=8 all": spec(task="words", method="lora", rank=8, targets=ATTN + MLP),
    "words qlora r=8": spec(task="words", method="qlora", rank=8),
    "words full replay 25%": spec(task="words", replay=0.25),
    "words lora r=8 replay 25%": spec(task="words", method="lora", rank=8, replay=0.25),
    "words new rows only": spec(task="words", method="rows"),
    # dates with LoRA (one seed stored; the chapter's live runs are on dates)
    "dates lora r=8": spec(method="lora", rank=8),
}


def build_model(base, n_new: int, s: dict):
    """The model a run trains: the pretrained base (or a random one of its shape) with ``n_new``
    rows, fully trainable, or frozen with LoRA adapters (on a float or NF4 base) and trainable
    new rows, or frozen but for the new rows."""
    if s["init"] == "scratch":
        return GPT(GPTConfig.from_dict({**base.config.to_dict(),
                                        "vocab_size": base.config.vocab_size + n_new}))
    model = extend_vocabulary(base, n_new)
    if s["method"] == "full":
        return model
    model.wte = GrownRows(model.wte.weight, n_new)
    model.lm_head = GrownRows(model.lm_head.weight, n_new, head=True)
    if s["method"] == "qlora":
        quantize_linears(model, ATTN + MLP)  # the whole base in NF4; the adapters on s["targets"]
    if s["method"] in ("lora", "qlora"):
        add_lora(model, s["rank"], float(s["rank"]), targets=tuple(s["targets"]))
    else:
        model.requires_grad_(False)
    model.wte.new.requires_grad_(True)
    model.lm_head.new.requires_grad_(True)
    return model


@contextmanager
def locked(path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(str(path) + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def read_records(path: Path | None) -> dict:
    return json.loads(path.read_text()) if path is not None and path.exists() else {}


def store(path: Path | None, key: str, record: dict) -> None:
    """Add one run to the JSON file under a lock, atomically (write a temporary file, rename);
    nothing without a file."""
    if path is None:
        return
    with locked(path):
        records = read_records(path)
        records[key] = record
        write_text_atomic(path, json.dumps(dict(sorted(records.items())), indent=1) + "\n",
                          option="--out")


def claim(folder: Path, key: str) -> bool:
    """Claim a run for this process: True if no other process has (the file is created
    exclusively)."""
    folder.mkdir(parents=True, exist_ok=True)
    try:
        os.close(os.open(folder / (key.replace(" ",
                                               "_").replace("|", "").replace("/", "_") + ".claim"),
                         os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        return True
    except FileExistsError:
        return False


@torch.no_grad()
def sample(model, tok, prompt="ROMEO:\n", n=60) -> str:
    model.eval()
    out = generate_batch(model, [tok.encode(prompt)], n, temperature=0.0, use_cache=True)[0]
    return tok.decode(out[len(tok.encode(prompt)):])


def run_one(name: str, s: dict, seed: int, steps: int, n_eval: int, base, tok0, text_ids) -> dict:
    chars = TASK_CHARS if s["task"] == "dates" else SEP + END
    tok = extend_tokenizer(tok0, chars)
    n_new = tok.vocab_size - tok0.vocab_size
    seed_everything(1337 + seed)
    model = build_model(base, n_new, s)
    lora = s["method"] != "full"
    config = finetune_config(lora, max_iters=steps, eval_interval=50, seed=1337 + seed)
    if s["task"] == "dates":
        task_fn, pairs = answer_batch_fn(tok, config.batch_size,
                                         s["masked"]), dates_test_pairs(n_eval)
        train_pairs = None
    else:
        task_fn, pairs = unscramble_batch_fn(tok, config.batch_size,
                                             s["masked"]), unscramble_test_pairs(n_eval)
        g = torch.Generator().manual_seed(0)
        from course_lib.unscramble import scrambled_pairs
        train_pairs = scrambled_pairs(word_split()["train"], n_eval, g)
    batch_fn = replay_batch_fn(task_fn, text_ids, s["replay"]) if s["replay"] else task_fn
    trainer = Trainer(model, config=config, batch_fn=batch_fn, progress=False, verbose=False)
    start = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - start
    model.eval()
    val_ids = torch.tensor(
        tok0.encode(load_text("tinyshakespeare")[int(0.9 * len(load_text("tinyshakespeare"))) :])
    )
    forgetting = vocab_split_loss(model, val_ids, tok0.vocab_size)
    record = dict(name=name, seed=seed, steps=steps, **s,
                  learning_rate=config.learning_rate, batch_size=config.batch_size,
                  exact_match=answers_exact_match(model, tok, pairs), n_eval=len(pairs),
                  train_exact_match=answers_exact_match(model, tok, train_pairs) if train_pairs
                  else None,
                  eval_step=trainer.history["eval_step"], val_loss=trainer.history["val_loss"],
                  trained=sum(p.numel() for p in model.parameters() if p.requires_grad),
                  sample=sample(model, tok), seconds=round(seconds, 1),
                  load_average=os.getloadavg()[0], **forgetting)
    return record


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="*", metavar="NAME", help="run only these (see --list)")
    parser.add_argument("--seeds", type=seed_number, nargs="*", default=[0, 1, 2])
    parser.add_argument("--steps", type=count,
                        help=f"training steps (default per task: {DEFAULT_STEPS})")
    parser.add_argument("--eval", type=count,
                        help=f"held-out examples for exact match (default {DEFAULT_EVAL})")
    add_record_options(parser, RECORDS, "--out", type=Path)
    parser.add_argument("--claims", type=Path,
                        help="a folder where each process claims a run before starting it, "
                        "so that several processes can share one list without running anything "
                        "twice")
    parser.add_argument("--list", action="store_true", help="list the runs and exit")
    args = parser.parse_args(argv)
    if args.list:
        for name, s in RUNS.items():
            print(f"{name:28} {s}")
        return 0
    names = args.only or list(RUNS)
    unknown = [n for n in names if n not in RUNS]
    if unknown:
        parser.error(f"unknown run(s) {unknown}; --list shows them")
    # keyed runs: only added to
    out = record_file(parser, args, RECORDS, "--out", continues=True).path
    torch.set_num_threads(1)
    base, tok0 = load_pretrained()
    text = load_text("tinyshakespeare")
    # replay: the pretraining split
    text_ids = torch.tensor(tok0.encode(text[:int(0.9 * len(text))]))
    command = "python benchmarks/finetune_dates.py " + " ".join(
        shlex.quote(a) for a in (sys.argv[1:] if argv is None else argv))
    todo = [(n, seed) for n in names for seed in args.seeds]  # each run's seeds together
    for i, (name, seed) in enumerate(todo):
        task = RUNS[name]["task"]
        # --steps 0 is refused, never "default"
        steps = DEFAULT_STEPS[task] if args.steps is None else args.steps
        n_eval = DEFAULT_EVAL[task] if args.eval is None else args.eval
        key = f"{name} | seed {seed} | {steps} steps"
        if key in read_records(out) or (args.claims and not claim(args.claims, key)):
            continue
        record = run_one(name, RUNS[name], seed, steps, n_eval, base, tok0, text_ids)
        # the command that made it (chapter 15 prints each run's settings)
        record["command"] = command
        store(out, key, record)
        print(f"[{i + 1}/{len(todo)}] {key}: exact match {record['exact_match']:.1%}, Shakespeare "
              f"loss {record['loss']:.3f} (old vocab {record['old_vocab_loss']:.3f}, new mass "
              f"{record['new_mass']:.3f}), {record['seconds']} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
