"""Chapter 15's speaker classification with seeds: full fine-tuning of the shipped pretrained GPT
with a classification head (last-token and mean pooling), its learning curves (accuracy on the
training speeches and on the held-out ones every 25 steps), the linear probe, and the baselines.

Each seed draws its own train/held-out split of the speeches (``classify.speaker_splits(seed)``)
and its own initialisation and batches, so the spread covers both. Results go, when asked, to
``--out FILE`` or (``--update-record``) to ``course_lib/records/classify_speakers.json``, one entry
per configuration and seed, written after each run; a recorded run is skipped. Usage:

    python benchmarks/classify_speakers.py [--seeds 0 1 2] [--steps 150] [--only "full mean" "probe
    last"] \
        [--out FILE | --update-record]

Chapter 15 prints the full fine-tunes with mean pooling (``--only "full mean"``), three seeds.
Each entry keeps the command that made it (``command``); the three stored before commands were kept
carry ``command_reconstructed``: the command that reproduces their settings, not a copy of the one
typed.
"""
from __future__ import annotations

import argparse
import os
import shlex
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_args import add_record_options, count, record_file, seed_number  # noqa: E402
from finetune_dates import store, read_records  # noqa: E402  (one JSON writer for both benchmarks)

from course_lib.classify import (SPEAKERS, GPTClassifier, NaiveBayes, accuracy,  # noqa: E402
                                 classify_batch_fn, confusion_matrix,
                                 fit_probe, majority_accuracy, predict, speaker_splits,
                                 text_features)
from course_lib.finetune import finetune_config  # noqa: E402
from course_lib.pretrained import load_pretrained  # noqa: E402
from course_lib.train import Trainer  # noqa: E402
from course_lib.utils import seed_everything  # noqa: E402

RECORDS = Path(__file__).resolve().parents[1] / "course_lib" / "records" / "classify_speakers.json"
CURVE_EVERY = 25
CONFIGS = ["probe last", "probe mean", "full last", "full mean"]


def baselines(splits, T) -> dict:
    nb = NaiveBayes(splits["train"], max_chars=T)
    return dict(
        majority=majority_accuracy(splits["train"], splits["val"]),
        naive_bayes=nb.accuracy(splits["val"]),
        naive_bayes_train=nb.accuracy(splits["train"]),
        n_train=len(splits["train"]),
        n_val=len(splits["val"]),
    )


def probe(splits, tok, pooling, seed) -> dict:
    gpt, _ = load_pretrained()
    feats = {k: text_features(gpt, tok, [t for t, _ in v], pooling) for k, v in splits.items()}
    labels = {k: torch.tensor([y for _, y in v]) for k, v in splits.items()}
    head = fit_probe(feats["train"], labels["train"], len(SPEAKERS), seed=seed)
    acc = {k: (head(feats[k]).argmax(-1) == labels[k]).float().mean().item() for k in splits}
    return dict(val_accuracy=acc["val"], train_accuracy=acc["train"],
                confusion=confusion_matrix(head(feats["val"]).argmax(-1), labels["val"],
                                           len(SPEAKERS)).tolist())


def full(splits, tok, pooling, seed, steps) -> dict:
    gpt, _ = load_pretrained()
    seed_everything(1337 + seed)
    clf = GPTClassifier(gpt, len(SPEAKERS), pooling=pooling)
    config = finetune_config(max_iters=steps, learning_rate=3e-4, eval_interval=steps,
                             seed=1337 + seed)
    trainer = Trainer(clf, config=config, progress=False, verbose=False,
                      batch_fn=classify_batch_fn(splits, tok, config.batch_size,
                                                 gpt.config.block_size))
    curve = dict(step=[0], train=[accuracy(clf, tok, splits["train"])],
                 val=[accuracy(clf, tok, splits["val"])])
    start = time.perf_counter()
    for step in range(CURVE_EVERY, steps + 1, CURVE_EVERY):
        trainer.train(until=step)
        curve["step"].append(step)
        curve["train"].append(accuracy(clf, tok, splits["train"]))
        curve["val"].append(accuracy(clf, tok, splits["val"]))
    got = predict(clf, tok, [t for t, _ in splits["val"]])
    return dict(val_accuracy=curve["val"][-1], train_accuracy=curve["train"][-1], curve=curve,
                best_val=max(curve["val"]),
                confusion=confusion_matrix(got, [y for _, y in splits["val"]],
                                                                       len(SPEAKERS)).tolist(),
                seconds=round(time.perf_counter() - start, 1), load_average=os.getloadavg()[0])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=seed_number, nargs="*", default=[0, 1, 2])
    parser.add_argument("--steps", type=count, default=150)
    add_record_options(parser, RECORDS, "--out", type=Path)
    parser.add_argument("--only", nargs="*", metavar="METHOD POOLING", choices=CONFIGS,
                        help=f"run only these configurations (default: all of {CONFIGS})")
    args = parser.parse_args(argv)
    # keyed runs: only added to
    out = record_file(parser, args, RECORDS, "--out", continues=True).path
    torch.set_num_threads(1)
    _, tok = load_pretrained()
    command = "python benchmarks/classify_speakers.py " + " ".join(
        shlex.quote(a) for a in (sys.argv[1:] if argv is None else argv))
    for seed in args.seeds:
        splits = speaker_splits(seed=seed)
        T = 64
        for method, pooling in (c.split() for c in args.only or CONFIGS):
            key = (f"{method} {pooling} | seed {seed}" + (f" | {args.steps} steps"
                                                          if method == "full" else ""))
            if key in read_records(out):
                continue
            result = probe(splits, tok, pooling,
                           seed) if method == "probe" else full(splits, tok, pooling, seed,
                                                                                       args.steps)
            store(out, key, dict(method=method, pooling=pooling, seed=seed,
                                 steps=args.steps if method == "full"
                                      else None, **baselines(splits, T), **result, command=command))
            print(f"{key}: held out {result['val_accuracy']:.1%}, training "
                  f"{result['train_accuracy']:.1%}",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
