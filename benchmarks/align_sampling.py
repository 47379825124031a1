"""Chapter 18's second comparison: what sampling alone buys (pass@k, best-of-N, self-consistency),
expert iteration as a fourth method, and the budget at which each method pays.

    python benchmarks/align_sampling.py --update-record                 # 1x: chapter 18's budget
    python benchmarks/align_sampling.py --budgets 4 --record course_lib/records/align_budget.json

(The shipped records were made by these commands split into processes run side by side, by seed or
method, each with its own ``--record``, their runs then put together: the records' ``commands``.)
    # a smoke test
    python benchmarks/align_sampling.py --tiny --out-dir /tmp/s --record /tmp/s/record.json

Every run starts from chapter 18's start (``benchmarks/align_compare.py``'s ``start-300.pt``, made
the same way) and is charged in token passes exactly as there (its ``step_cost``). ``--budgets``:
multiples of that benchmark's budget (60 GRPO steps' worth, 184,320 token passes); each method runs
as many steps as the budget buys, ``--seeds`` seeds each.

**Methods and rates.** SFT, DPO and GRPO at the rate whose *three seeds'* mean validation accuracy
is highest in ``align_compare.json`` among the rates it ran with every seed (GRPO: 1e-4, not seed
0's choice 3e-5; SFT and DPO: their chosen rates, the only ones with three seeds there). **Expert
iteration** (``course_lib.align.expert``): rounds of sampling ``EI_SAMPLES`` answers to each of
``EI_PROMPTS`` training prompts from the current model, keeping the right ones, and SFT on them
(SFT's batch) for one epoch over the right ones, rounded up to whole steps, one SFT run (one AdamW
state) across the rounds: per round ``EI_PROMPTS * EI_SAMPLES * 12`` token passes of sampling and
SFT's 1,920 a step, rounds until the budget is spent. Its rate, ``EI_LR``, is SFT's smallest (not
tuned on validation): at SFT's chosen 3e-3 the first steps raise SFT's own loss (0.71 -> 1.65 in
``align_compare.json``), which SFT recovers from on fresh sums, while expert iteration's yield of
right samples collapses with it (kept as ``ei_lr0.003-x1-s0``: 0.015 greedy; two earlier versions
collapsed too: 17 steps a round on about 70 right sums, learnt by heart, and a fresh AdamW each
round).

**Sampling, per final model** (and the start): ``N_SAMPLES`` answers at temperature 1 to each of
the 200 test sums: per sum the number right (pass@k for every k up to 64 follows, Chen et al.'s
estimator), self-consistency (the majority answer right) and best-of-N with the units-digit proxy as
the verifier, each the mean over ``DRAWS`` random subsets of N of the 64, for N in ``NS``; the mean
per-token entropy of the policy on its sampled answers; the greedy answers' 0/1 scores. With the
exact reward as the verifier best-of-N is pass@N (the chapter says so). GRPO runs also keep their
per-step entropy; DPO runs their loss and reward accuracy.

The record is rewritten after every run; a run already in it is not run again.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from align_compare import (ANSWER, BATCH, PAIR_PROMPTS, PROMPT, make_start,  # noqa: E402
                           setup_cost, step_cost, train_one)
from bench_args import (RECORDS, add_record_options, at_least, count, device,  # noqa: E402
                        record_file, seed_number)
from course_lib import align  # noqa: E402
from course_lib.align import START_SFT, task_splits  # noqa: E402
from course_lib.align.expert import expert_iteration  # noqa: E402
from course_lib.align.grpo import masked_mean  # noqa: E402
from course_lib.align.rewards import (answer_text, arithmetic_items,  # noqa: E402
                                      exact_answer_reward, greedy_scores,
                                      sample_groups, units_digit_reward)
from course_lib.align.sampling import (best_of_n, per_token_entropy, self_consistency,  # noqa: E402
                                       subsets_mean)
from course_lib.align.dpo import model_logits, pack_completions  # noqa: E402
from course_lib.checkpoint import load_model, load_tokenizer  # noqa: E402

RECORD = RECORDS / "align_sampling.json"
COMPARE = RECORDS / "align_compare.json"
N_SAMPLES, NS, DRAWS = 64, (1, 4, 16, 64), 16
EI_PROMPTS, EI_SAMPLES = 256, 4  # per round of expert iteration
# SFT's smallest rate: at 3e-3 SFT's first steps raise its loss (0.71 -> 1.65), see the docstring
EI_LR = 3e-4
METHODS = ("sft", "dpo", "grpo", "ei")


def chosen_rates(compare: dict) -> dict:
    """Each method's rate with the best mean validation accuracy over all of ``compare``'s seeds,
    among the rates run with every seed (ties: the smaller rate); expert iteration's is
    ``EI_LR``."""
    seeds = compare["summary"]["sft"]["seeds"]
    rates = {}
    for method in ("sft", "dpo", "grpo"):
        means = {}
        for lr in compare["learning_rates"][method]:
            runs = [compare["runs"].get(f"{method}-exact-lr{lr:g}-s{s}") for s in seeds]
            if all(r is not None for r in runs):
                means[lr] = statistics.mean(r["val"]["accuracy"] for r in runs)
        rates[method] = max(means, key=lambda lr: (means[lr], -lr))
    rates["ei"] = EI_LR
    return rates


@torch.no_grad()
def sampled(model, tokenizer, items, seed: int) -> dict:
    """``N_SAMPLES`` answers to each item at temperature 1: per item the count right and, for each
    N in ``NS``, self-consistency and best-of-N with the units-digit verifier (means over ``DRAWS``
    subsets); the mean per-token entropy of the model on its answers."""
    model.eval()
    groups = sample_groups(model, tokenizer, [i["prompt"] for i in items], N_SAMPLES, 6,
                           torch.Generator().manual_seed(seed), exact_answer_reward)
    out = {"right": [int(sum(g.rewards)) for g in groups], "self_consistency": {},
           "best_of_n_units": {}}
    for n in NS:
        out["self_consistency"][n] = [round(subsets_mean(
            [answer_text(t) for t in g.completions], n, lambda a, e=item["answer"],
            n=n: self_consistency(a, e, n), DRAWS), 4) for g, item in zip(groups, items)]
        out["best_of_n_units"][n] = [round(subsets_mean(
            [(units_digit_reward(g.prompt, t), r) for t, r in zip(g.completions, g.rewards)], n,
            lambda s, n=n: best_of_n([x for x, _ in s], [y > 0.5 for _, y in s], n), DRAWS), 4)
                                     for g in groups]
    pad = tokenizer.encode("\n")[0]
    entropies = []
    for g in groups:
        ids, mask = pack_completions([g.prompt_ids] * len(g.completion_ids), g.completion_ids, pad,
                                     next(model.parameters()).device)
        entropies.append(masked_mean(per_token_entropy(model_logits(model, ids)[:, :-1]),
                                     mask[:, 1:].float()).item())
    out["entropy"] = round(statistics.mean(entropies), 4)
    out["distinct_answers"] = round(statistics.mean(len(set(g.completions)) for g in groups), 3)
    return out


def evaluate(model, tokenizer, seed: int) -> dict:
    test = arithmetic_items("test")
    return {"greedy": [int(x) for x in greedy_scores(model, tokenizer, test)],
            **sampled(model, tokenizer, test, seed)}


def run_ei(lr: float, seed: int, budget: int, start: Path, device: str):
    """Rounds of expert iteration (one epoch over each round's right samples) until ``budget``
    token passes are spent: a round is not begun when what is left would not pay its sampling."""
    model, ckpt = load_model(start, device)
    tokenizer = load_tokenizer(ckpt, start)
    sft_step, sampling = step_cost("sft", BATCH["sft"]), EI_PROMPTS * EI_SAMPLES * (PROMPT + ANSWER)
    horizon = budget // sft_step  # the schedule's horizon: more SFT steps than the budget can buy
    settings = {"learning_rate": lr, "min_lr": lr / 10, "batch_size": BATCH["sft"],
                "max_iters": horizon, "warmup_iters": max(1, horizon // 20),
                "eval_interval": horizon, "eval_iters": 1, "weight_decay": 0.0, "grad_clip": 1.0}

    def spent(history):
        return sum(sampling + h["steps"] * sft_step for h in history)

    began = time.perf_counter()
    model, history = expert_iteration(model, tokenizer, task_splits(seed), 10**6, EI_PROMPTS,
                                      EI_SAMPLES, settings, seed, device,
                                      keep_going=lambda h: budget - spent(h) >= sampling + sft_step)
    return model, tokenizer, {"steps": sum(h["steps"] for h in history), "rounds": len(history),
                              "token_passes": spent(history),
                              "seconds": round(time.perf_counter() - began, 2),
                              "ei_rounds": history}


def run(method: str, lr: float, seed: int, budget: int, start: Path, device: str,
        pair_prompts: int = PAIR_PROMPTS) -> dict:
    if method == "ei":
        model, tokenizer, out = run_ei(lr, seed, budget, start, device)
    else:
        trainer, steps, seconds = train_one(method, "exact", lr, seed, budget, start, device,
                                            BATCH[method], pair_prompts)
        model, tokenizer, h = trainer.model, trainer.tokenizer, trainer.history
        out = {
            "steps": steps,
            "token_passes": setup_cost(method, pair_prompts)
            + steps * step_cost(method, BATCH[method]),
            "seconds": round(seconds, 2),
            "val_accuracy": h["val_accuracy"],
            "eval_step": h["eval_step"],
            "loss_first_last10": [
                round(statistics.mean(h["loss"][:10]), 4),
                round(statistics.mean(h["loss"][-10:]), 4),
            ],
        }
        for key in ("reward", "kl", "entropy", "rewards/accuracies", "rewards/margins"):
            if key in h:
                out.setdefault("curves", {})[key] = [round(x, 4) for x in h[key]]
        out["batch"] = BATCH[method]
        # the pairs sampled once, then re-read: steps * batch / pairs passes over them
        if method == "dpo":
            out["pairs"] = len(trainer.trained_on["pairs"]["train"])
            out["pair_prompts"] = pair_prompts
    out.update({"method": method, "learning_rate": lr, "seed": seed})
    out["test"] = evaluate(model, tokenizer, seed)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--budgets", type=count, nargs="+", default=None,
                   help="multiples of the 1x budget (default 1)")
    p.add_argument("--seeds", type=seed_number, nargs="+", default=None, help="default 0 1 2")
    p.add_argument("--methods", choices=METHODS, nargs="+", default=list(METHODS))
    p.add_argument("--device", type=device, default="cpu")
    p.add_argument("--threads", type=at_least(1), default=1)
    p.add_argument("--out-dir", default="runs/align_compare",
                   help="where the start is (made if missing)")
    p.add_argument("--dpo-pairs", choices=("fixed", "scaled"), default="fixed",
                   help="DPO's pairs: sampled from 512 prompts at every budget (fixed, the "
                        "default), or from 512 times the budget's multiple (scaled: a larger "
                        "budget buys more preference data, not more passes over the same pairs); "
                        "runs named ...-pairs-scaled")
    p.add_argument("--dpo-rates", type=float, nargs="+", default=None,
                   help="DPO at each of these rates (runs named ...-lrR) instead of its chosen "
                        "rate: to choose the rate on validation over seeds")
    add_record_options(p, RECORD, "--record")
    p.add_argument("--tiny", action="store_true",
                   help="a smoke test: a tiny budget, one seed and a 60-step SFT start")
    args = p.parse_args(argv)
    given = [o for o, v in (("--budgets", args.budgets), ("--seeds", args.seeds)) if v is not None]
    if args.tiny and given:
        p.error(f"--tiny sets the budget and the seeds: leave out {', '.join(given)}")
    args.budgets, args.seeds = args.budgets or [1], args.seeds or [0, 1, 2]
    torch.set_num_threads(args.threads)
    unit = 60 * step_cost("grpo", BATCH["grpo"])
    start_steps = START_SFT["max_iters"]
    if args.tiny:
        global N_SAMPLES, NS, DRAWS, EI_PROMPTS
        unit, args.seeds, start_steps = 4 * step_cost("grpo", BATCH["grpo"]), [0], 60
        N_SAMPLES, NS, DRAWS, EI_PROMPTS = 4, (1, 4), 2, 8
        align.EVAL_ITEMS = 10
    out = record_file(p, args, RECORD, "--record", continues=True)
    record = out.read({})
    if record and record.get("unit_token_passes") != unit:
        p.error(f"{out.path} holds runs of another budget unit (its command: "
                f"{record.get('command')}): write to another --record")
    compare = json.loads(COMPARE.read_text())
    rates = chosen_rates(compare)
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    start = make_start(out_dir, args.device, start_steps)
    command = ("python benchmarks/align_sampling.py " + " ".join(argv if argv is not None
                                                                 else sys.argv[1:]))
    record.update({"command": command.strip(), "unit_token_passes": unit, "budgets": sorted(
        set(record.get("budgets", [])) | set(args.budgets)), "learning_rates": rates,
                   "device": args.device,
        "threads": torch.get_num_threads(), "n_samples": N_SAMPLES, "ns": list(NS), "draws": DRAWS,
        "expert_iteration": {"prompts": EI_PROMPTS, "samples": EI_SAMPLES, "epochs": 1},
        "start_steps": start_steps})
    record.setdefault("runs", {})

    def save():
        record["made_at"] = datetime.datetime.now(datetime.timezone.utc).isoformat(
            timespec="seconds"
        )
        record["load_average"] = [round(x, 2) for x in os.getloadavg()]
        out.progress(record)

    if "start" not in record:
        model, ckpt = load_model(start, args.device)
        record["start"] = {"test": evaluate(model, load_tokenizer(ckpt, start), 0)}
        save()
    for multiple in args.budgets:
        for seed in args.seeds:
            for method in args.methods:
                for lr in (args.dpo_rates if method == "dpo" and args.dpo_rates
                           else [rates[method]]):
                    name = f"{method}-x{multiple}-s{seed}"
                    pair_prompts = PAIR_PROMPTS
                    if method == "dpo" and args.dpo_rates:
                        name += f"-lr{lr:g}"
                    if method == "dpo" and args.dpo_pairs == "scaled":
                        name, pair_prompts = name + "-pairs-scaled", PAIR_PROMPTS * multiple
                    if name in record["runs"]:
                        continue
                    r = run(method, lr, seed, multiple * unit, start, args.device, pair_prompts)
                    r["budget"] = multiple
                    record["runs"][name] = r
                    save()
                    t = r["test"]
                    print(f"{name}: {r['steps']} steps, {r['seconds']:.0f} s, "
                          f"greedy {statistics.mean(t['greedy']):.3f}, "
                          f"pass@1 {sum(t['right']) / (N_SAMPLES * len(t['right'])):.3f}, "
                          f"pass@{N_SAMPLES} {statistics.mean(c > 0 for c in t['right']):.3f}, "
                          f"entropy {t['entropy']:.3f}", flush=True)
    save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
