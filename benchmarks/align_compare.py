"""Chapter 18's comparison: more SFT, DPO and GRPO from the same starting model, at equal compute,
on two-digit addition without a calculator, and GRPO on a reward that can be hacked.

    python benchmarks/align_compare.py --update-record  # the record (about 5 minutes on 1 core)
    # a smoke test
    python benchmarks/align_compare.py --tiny --out-dir /tmp/a --record /tmp/a/record.json

**The start** (``start.pt`` in ``--out-dir``): the shipped chat model (chapter 17), which answers
sums through its calculator inside a chat and never saw a bare ``"a+b="``, after
``course_lib.align.START_SFT`` steps of SFT on training sums in that format (seed 0). It writes
sums and is mostly wrong: room to improve. Every run below starts from this one file.

**Equal compute.** Each method gets the same budget of model FLOPs, counted in *token passes*:
a token read without gradients (sampling, scoring by the frozen reference) costs 1 (2N FLOPs for
N parameters), a token trained on costs 3 (forward and backward, 6N). Rows are counted at their
longest (a prompt of 6 tokens, an answer of at most 6), so a step's cost is fixed in advance:

- SFT, a batch of B sums: ``3 * B * 10`` (rows "a+b=" + sum + END, shifted by one);
- DPO, B pairs: ``(3 + 1) * 2B * 12`` (policy trained, reference scored), plus sampling its pairs
  once at the start, ``pair_prompts * G * 12``;
- GRPO, B prompts of G answers: ``B * G * (12 + 3 * 12)`` (sampling, then training). The
  reference is scored at every step too, only to log the KL (beta = 0: it does not steer the
  training), and so is the policy's entropy: neither is charged.

The budget is ``--budget`` GRPO steps' worth; each method runs as many steps as it buys. Wall
seconds are recorded too (they differ: small batches use the CPU less well).

**Tuning** (on validation sums, never on the test sums): each method's learning rate is chosen
from ``LEARNING_RATES`` on seed 0's validation accuracy; then ``--seeds`` runs of each at that
rate are scored on the 200 held-out test sums of chapter 16's ``arithmetic`` task, each with a
95% bootstrap interval over items (chapter 16's), with each item's 0/1 score (``right``) for
paired tests against the start, and the mean and spread over seeds. At the end of each of these
runs the KL of the final model to the start is measured (``kl_to_start``: k3 per answer token, as
GRPO's curve, on ``KL_GROUP`` answers sampled at temperature 1 to each validation prompt).

**Reward hacking, with its control.** From the same start, GRPO on a proxy reward, ``units`` (the
right last digit: every right answer earns it, and so does any wrong one ending in the right digit)
against GRPO on the exact reward, ``--hack-seeds`` seeds each, same settings and budget, at
``HACK_LR`` (above the chosen rate, so that the optimiser pushes hard enough to find the gap).

The record (``course_lib/records/align_compare.json``) is rewritten after every run; a run already
in it (same name and budget) is not run again, so a stopped benchmark continues where it was.
"""
from __future__ import annotations

import argparse
import datetime
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from bench_args import add_record_options, count, device, record_file, seed_number  # noqa: E402
from course_lib import align  # noqa: E402
from course_lib.align import START_SFT, SFTTrainer, sft_start, task_splits  # noqa: E402
from course_lib.chat.engine import CHAT_V1_MODEL_PATH, load_chat_model  # noqa: E402
from course_lib.checkpoint import load_model, load_tokenizer, save_checkpoint  # noqa: E402
from course_lib.evaluation import bootstrap_interval  # noqa: E402
from course_lib.align.grpo import kl_k3, masked_mean  # noqa: E402
from course_lib.align.dpo import completion_logprobs  # noqa: E402
from course_lib.align.rewards import (END, arithmetic_items, exact_answer_reward,  # noqa: E402
                                      format_reward, greedy_answers, sample_groups,
                                      units_digit_reward)
from course_lib.runs import start_dpo_run, start_grpo_run  # noqa: E402
from course_lib.train import TrainConfig  # noqa: E402

RECORD = ROOT / "course_lib" / "records" / "align_compare.json"
LEARNING_RATES = {"sft": [3e-4, 1e-3, 3e-3], "dpo": [1e-5, 3e-5, 1e-4, 3e-4],
                  "grpo": [3e-5, 1e-4, 3e-4, 1e-3]}
BATCH = {"sft": 64, "dpo": 32, "grpo": 8}  # sums, pairs, prompts (of G answers) per step
GROUP, PAIR_PROMPTS, PAIR_GROUP = 8, 512, 8
HACK_LR = 1e-4  # the proxy-against-exact runs: GRPO's second rate, where its KL still stays small
KL_GROUP = 8  # answers sampled per validation prompt to measure a final model's KL to the start
PROMPT, ANSWER = 6, 6  # tokens of "ab+cd=" and of the longest answer sampled


def step_cost(method: str, batch: int, group: int = GROUP) -> int:
    """Token passes of one step (see the module's docstring)."""
    row = PROMPT + ANSWER
    return {"sft": 3 * batch * (PROMPT + 4), "dpo": (3 + 1) * 2 * batch * row,
            "grpo": batch * group * (row + 3 * row)}[method]


def setup_cost(method: str, pair_prompts: int = PAIR_PROMPTS) -> int:
    return pair_prompts * PAIR_GROUP * (PROMPT + ANSWER) if method == "dpo" else 0


def steps_for(method: str, budget: int, batch: int, pair_prompts: int = PAIR_PROMPTS) -> int:
    return max(1, (budget - setup_cost(method, pair_prompts)) // step_cost(method, batch))


def make_start(out_dir: Path, device: str, start_steps: int) -> Path:
    path = out_dir / f"start-{start_steps}.pt"
    if not path.exists():
        chat, tokenizer = load_chat_model(CHAT_V1_MODEL_PATH)  # chapter 17's first chat model
        settings = {"max_iters": start_steps, "eval_interval": start_steps,
                    "warmup_iters": min(START_SFT["warmup_iters"], start_steps)}
        model = sft_start(chat, tokenizer, settings, device=device)
        save_checkpoint(path, model.cpu(), tokenizer=tokenizer)
    return path


def score(model, tokenizer, items) -> dict:
    """Greedy answers to ``items``: accuracy with its bootstrap interval, the share in the right
    format (a number then END: what the hackable reward pays for), the mean answer length."""
    answers = greedy_answers(model, tokenizer, items)
    right = [exact_answer_reward(i["prompt"], a) for i, a in zip(items, answers)]
    formatted = [format_reward(i["prompt"], a) for i, a in zip(items, answers)]
    units = [units_digit_reward(i["prompt"], a) for i, a in zip(items, answers)]
    lo, hi = bootstrap_interval(right)
    return {"accuracy": sum(right) / len(right), "interval": [lo, hi],
            "format": sum(formatted) / len(formatted), "units": sum(units) / len(units),
            "answer_chars": statistics.mean(len(a.rstrip("\n")) for a in answers),
            "examples": answers[:8], "right": [int(x) for x in right]}


@torch.no_grad()
def kl_to_start(model, start_model, tokenizer, items, seed: int = 0) -> float:
    """KL(model || start) per answer token: the k3 estimate (GRPO's) on ``KL_GROUP`` answers sampled
    from ``model`` at temperature 1 to each of ``items``' prompts, averaged over their tokens."""
    model.eval()
    groups = sample_groups(model, tokenizer, [i["prompt"] for i in items], KL_GROUP, ANSWER,
                           torch.Generator().manual_seed(seed), None)
    prompts = [g.prompt_ids for g in groups for _ in g.completion_ids]
    completions = [c for g in groups for c in g.completion_ids]
    pad = tokenizer.encode(END)[0]
    logps, mask = completion_logprobs(model, prompts, completions, pad)
    ref_logps, _ = completion_logprobs(start_model, prompts, completions, pad)
    return masked_mean(kl_k3(logps, ref_logps), mask.to(logps.dtype)).item()


def train_one(method: str, reward: str, lr: float, seed: int, budget: int, start: Path, device: str,
              batch: int, pair_prompts: int = PAIR_PROMPTS):
    """One run from ``start``: its trainer (trained), its steps and its seconds. ``pair_prompts``:
    DPO's training prompts whose sampled answers make its pairs (charged before its first step)."""
    steps = steps_for(method, budget, batch, pair_prompts)
    settings = {"max_iters": steps, "learning_rate": lr, "min_lr": lr / 10, "seed": seed,
                "batch_size": batch, "warmup_iters": max(1, steps // 20),
                "eval_interval": max(1, steps // 5), "eval_iters": 1, "weight_decay": 0.0,
                "grad_clip": 1.0}
    began = time.perf_counter()
    if method == "sft":
        model, ckpt = load_model(start, device)
        tokenizer = load_tokenizer(ckpt, start)
        trainer = SFTTrainer(model.requires_grad_(True), task_splits(seed), TrainConfig(**settings),
                             device=device, tokenizer=tokenizer, progress=False, verbose=False)
    elif method == "dpo":
        trainer = start_dpo_run(
            start,
            {**settings, "pair_prompts": pair_prompts, "pair_group_size": PAIR_GROUP},
            reward=reward,
            device=device,
            progress=False,
        )
    else:
        trainer = start_grpo_run(start, {**settings, "group_size": GROUP}, reward=reward,
                                 device=device, progress=False)
    trainer.verbose = False
    trainer.train()
    return trainer, steps, time.perf_counter() - began


def run_one(method: str, reward: str, lr: float, seed: int, budget: int, start: Path, device: str,
            batch: int) -> dict:
    """One run from ``start``, scored on the validation and test sums."""
    trainer, steps, seconds = train_one(method, reward, lr, seed, budget, start, device, batch)
    h = trainer.history
    out = {"method": method, "reward": reward, "learning_rate": lr, "seed": seed, "steps": steps,
           "batch": batch, "token_passes": setup_cost(method) + steps * step_cost(method, batch),
           "seconds": round(seconds, 2), "eval_step": h["eval_step"],
           "val_accuracy": h["val_accuracy"], "train_accuracy": h["train_accuracy"],
           "loss": [round(x, 5) for x in h["loss"]]}
    out["curves"] = {key: [round(x, 5) for x in h[key]]
                     for key in ("reward", "kl", "rewards/accuracies",
                                                                     "rewards/margins") if key in h}
    if method == "dpo":
        out["pairs"] = len(trainer.trained_on["pairs"]["train"])
    out["val"] = score(trainer.model, trainer.tokenizer, trainer.items["val"])
    out["test"] = score(trainer.model, trainer.tokenizer, arithmetic_items("test"))
    start_model, _ = load_model(start, device)
    out["kl_to_start"] = round(kl_to_start(trainer.model, start_model, trainer.tokenizer,
                                           trainer.items["val"]), 5)
    return out


def summary(runs: list[dict]) -> dict:
    acc = [r["test"]["accuracy"] for r in runs]
    return {"seeds": [r["seed"] for r in runs], "test_accuracy": acc, "mean": statistics.mean(acc),
            "std": statistics.stdev(acc) if len(acc) > 1 else 0.0, "min": min(acc), "max": max(acc),
            "format": statistics.mean(r["test"]["format"] for r in runs),
            "units": statistics.mean(r["test"]["units"] for r in runs),
            "answer_chars": statistics.mean(r["test"]["answer_chars"] for r in runs),
            "kl_to_start": statistics.mean(r["kl_to_start"] for r in runs),
            "seconds": statistics.mean(r["seconds"] for r in runs)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seeds", type=seed_number, nargs="+", default=None, help="default 0 1 2")
    p.add_argument("--hack-seeds", type=seed_number, nargs="+", default=None, help="default 0 1 2")
    p.add_argument("--budget", type=count, default=None,
                   help="the compute of this many GRPO steps (default 60)")
    p.add_argument("--start-steps", type=count, default=START_SFT["max_iters"])
    p.add_argument("--device", type=device, default="cpu")
    p.add_argument("--out-dir", default="runs/align_compare")
    add_record_options(p, RECORD, "--record")
    p.add_argument("--tiny", action="store_true",
                   help="a smoke test: tiny budget, one rate, one seed")
    args = p.parse_args(argv)
    given = [o for o, v in (("--budget", args.budget), ("--seeds", args.seeds),
                            ("--hack-seeds", args.hack_seeds))
             if v is not None]
    if args.tiny and given:  # --tiny sets them: a value given beside it would be silently dropped
        p.error(f"--tiny sets the budget and the seeds: leave out {', '.join(given)}")
    args.budget = args.budget or 60
    args.seeds, args.hack_seeds = args.seeds or [0, 1, 2], args.hack_seeds or [0, 1, 2]
    if args.tiny:
        args.budget, args.seeds, args.hack_seeds = 2, [0], [0]
        for m in LEARNING_RATES:
            LEARNING_RATES[m] = LEARNING_RATES[m][1:2]
        align.EVAL_ITEMS = 10
    out = record_file(p, args, RECORD, "--record", continues=True)  # the runs it holds are reused
    old = out.read({})
    # a new record would replace it, run by run
    if old and (old.get("budget_token_passes") != args.budget * step_cost("grpo", BATCH["grpo"])
                or old.get("start_steps") != args.start_steps):
        p.error(f"{out.path} holds runs of another --budget or --start-steps (its command: "
                f"{old.get('command')}): give those, or write to another --record")
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    budget = args.budget * step_cost("grpo", BATCH["grpo"])
    command = ("python benchmarks/align_compare.py " + " ".join(argv if argv is not None
                                                                else sys.argv[1:]))
    record = out.read({})  # its runs are reused: a record of other settings was refused above
    record.update(
        {
            "command": command.strip(),
            "budget_grpo_steps": args.budget,
            "budget_token_passes": budget,
            "start_steps": args.start_steps,
            "device": args.device,
            "threads": torch.get_num_threads(),
            "learning_rates": LEARNING_RATES,
            "batch": BATCH,
            "group": GROUP,
            "pair_prompts": PAIR_PROMPTS,
            "token_passes_per_step": {m: step_cost(m, BATCH[m]) for m in BATCH},
            "setup_token_passes": {m: setup_cost(m) for m in BATCH},
        }
    )
    record.setdefault("runs", {})

    def save():
        record["made_at"] = datetime.datetime.now(datetime.timezone.utc).isoformat(
            timespec="seconds"
        )
        record["load_average"] = [round(x, 2) for x in os.getloadavg()]
        out.progress(record)

    start = make_start(out_dir, args.device, args.start_steps)
    if "right" not in record.get("start", {}).get("test", {}):
        model, ckpt = load_model(start, args.device)
        tokenizer = load_tokenizer(ckpt, start)
        record["start"] = {"test": score(model, tokenizer, arithmetic_items("test")),
                           "val": score(model, tokenizer, task_splits(0)["val"]),
                           "settings": START_SFT}
        save()
        print(f"start: test accuracy {record['start']['test']['accuracy']:.3f}", flush=True)

    def run(method, reward, lr, seed, full=True):
        """One run, from the record when it is there (``full``: with every field of the current
        script)."""
        name = f"{method}-{reward}-lr{lr:g}-s{seed}"
        if name not in record["runs"] or (full and "kl_to_start" not in record["runs"][name]):
            r = run_one(method, reward, lr, seed, budget, start, args.device, BATCH[method])
            record["runs"][name] = r
            save()
            print(f"{name}: {r['steps']} steps, {r['seconds']:.0f} s, val "
                  f"{r['val']['accuracy']:.3f}, test {r['test']['accuracy']:.3f} "
                  f"{r['test']['interval']}, units {r['test']['units']:.2f}, KL to start "
                  f"{r.get('kl_to_start', float('nan')):.3f}",
                  flush=True)
        return record["runs"][name]

    chosen = {}
    for method, rates in LEARNING_RATES.items():  # tuning: seed 0, validation accuracy
        tried = {lr: run(method, "exact", lr, args.seeds[0], full=False)["val"]["accuracy"]
                 for lr in rates}
        chosen[method] = max(rates, key=lambda lr: (tried[lr], -lr))  # ties: the smaller rate
    record["chosen_learning_rate"] = chosen
    for method in LEARNING_RATES:
        for seed in args.seeds:
            run(method, "exact", chosen[method], seed)
    for seed in args.hack_seeds:  # the proxy against its control, the same settings
        for reward in ("units", "exact"):
            run("grpo", reward, HACK_LR, seed)
    for stale in [k for k in record
                  if k == "hack_start"] + [k for k in record["runs"] if "-format-" in k]:
        # the format-reward runs of earlier versions
        del (record if stale == "hack_start" else record["runs"])[stale]
    record["summary"] = {
        **{m: summary([record["runs"][f"{m}-exact-lr{chosen[m]:g}-s{s}"] for s in args.seeds])
           for m in chosen},
        **{f"grpo-{reward}-hack": summary([record["runs"][f"grpo-{reward}-lr{HACK_LR:g}-s{s}"]
                                          for s in args.hack_seeds])
           for reward in ("units", "exact")}}
    record["hack_learning_rate"] = HACK_LR
    save()
    for name, s in record["summary"].items():
        print(f"{name:12s} test accuracy {s['mean']:.3f} +- {s['std']:.3f} over seeds "
              f"{s['seeds']}; units {s['units']:.2f}; KL to start {s['kl_to_start']:.3f}; "
              f"{s['seconds']:.0f} s a run")
    return 0


if __name__ == "__main__":
    sys.exit(main())
