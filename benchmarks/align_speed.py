"""Our DPO and GRPO steps against TRL's, on the same model and batch, side by side (chapter 18,
book/measured.md).

    # course_lib/records/align_speed.json (or --json FILE)
    python benchmarks/align_speed.py --update-record

The model: a random GPT2LMHeadModel the size of the book's CPU GPT (4 layers, C=128, 64
positions) over a character tokenizer built offline; TRL trains it, we train our GPT holding the
same weights (``course_lib.gpt2.from_pretrained``), both in float32 on ``--threads`` threads, in
eval mode (no dropout: the two would draw different masks; gradients flow all the same).

- **DPO step**: the loss of 16 preference pairs (prompts of 6 tokens, answers of 1 to 6) under
  the policy and the frozen reference, and its gradient. TRL: ``DPOTrainer.compute_loss`` on the
  batch of its own collator, then ``backward``; ours: ``dpo_batch_loss`` on ``pack_pairs``' batch.
- **GRPO step**: 8 prompts (of one length: TRL pads prompts on the left), a group of 8 answers each
  sampled at temperature 1 (6 tokens at most), rewarded, advantages, the loss (beta = 0, TRL's
  default: no reference) and its gradient. TRL: ``_generate_and_score_completions`` then
  ``_compute_loss`` and ``backward``; ours: ``sample_groups``, ``score_groups``,
  ``completion_logprobs`` and ``grpo_loss``.

No optimizer step on either side (the same AdamW would be timed twice). Each side runs
``--repeats`` times, interleaved (every other repeat in reverse order); the medians and the fastest
repeats are compared, and the load average is recorded next to them: on shared cores both sides
slow down together, so the ratio is what to read. The JSON is rewritten after every repeat.
"""
from __future__ import annotations

import argparse
import datetime
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

from course_lib.gpt2 import from_pretrained  # noqa: E402
from course_lib.align.grpo import GRPOConfig, grpo_loss  # noqa: E402
from course_lib.align.dpo import (DPOConfig, completion_logprobs, dpo_batch_loss,  # noqa: E402
                                  pack_pairs)
from course_lib.align.rewards import flatten, sample_groups, score_groups  # noqa: E402
from bench_args import add_record_options, count, record_file, threads  # noqa: E402
from eval_helpers import char_hf_tokenizer, tiny_gpt2  # noqa: E402

RECORD = ROOT / "course_lib" / "records" / "align_speed.json"

VOCAB, PAIRS, PROMPTS, GROUP, MAX_NEW = 66, 16, 8, 8, 6
SHAPE = dict(n_positions=64, n_embd=128, n_layer=4, n_head=4)


def reward(completions, **kwargs):  # TRL's signature; ours calls it one answer at a time
    return [float(len(c) % 2) for c in completions]


def dpo_sides(folder: Path):
    from datasets import Dataset
    from trl import DPOConfig as TRLDPOConfig, DPOTrainer
    from trl.trainer.dpo_trainer import DataCollatorForPreference

    # eval mode: no dropout
    hf, hf_ref = tiny_gpt2(VOCAB, seed=0, **SHAPE), tiny_gpt2(VOCAB, seed=0, **SHAPE)
    ours, ref = from_pretrained(hf).eval(), from_pretrained(hf_ref).eval()
    ref.requires_grad_(False)
    g = torch.Generator().manual_seed(0)
    rand = lambda lo, hi: torch.randint(1, VOCAB,
                                        (int(torch.randint(lo, hi + 1, (1,), generator=g)),),
                                        generator=g).tolist()
    pairs = [(rand(6, 6), rand(1, 6), rand(1, 6)) for _ in range(PAIRS)]
    args = TRLDPOConfig(output_dir=str(folder / "dpo"), report_to="none", use_cpu=True,
                        save_strategy="no", bf16=False, per_device_train_batch_size=PAIRS, beta=0.1)
    data = Dataset.from_dict({"prompt": ["ab", "cd"], "chosen": ["e", "f"], "rejected": ["g", "h"]})
    trainer = DPOTrainer(model=hf, ref_model=hf_ref, args=args, train_dataset=data,
                         processing_class=char_hf_tokenizer()[0])
    batch = DataCollatorForPreference(pad_token_id=0)(
        [{"prompt_ids": p, "chosen_ids": c, "rejected_ids": r} for p, c, r in pairs])
    ids, mask = pack_pairs(pairs, pad_id=0)

    def theirs():
        hf.zero_grad(set_to_none=True)
        loss = trainer.compute_loss(hf, batch)
        loss.backward()
        return loss.item()

    def mine():
        ours.zero_grad(set_to_none=True)
        loss, _ = dpo_batch_loss(ours, ref, ids, mask, DPOConfig(beta=0.1))
        loss.backward()
        return loss.item()

    return theirs, mine


def grpo_sides(folder: Path):
    from datasets import Dataset
    from trl import GRPOConfig as TRLGRPOConfig, GRPOTrainer

    hf_tok, tokenizer = char_hf_tokenizer()
    saved = folder / "tiny-gpt2"
    tiny_gpt2(VOCAB, seed=0, **SHAPE).save_pretrained(saved)
    hf_tok.save_pretrained(saved)
    args = TRLGRPOConfig(output_dir=str(folder / "grpo"), report_to="none", use_cpu=True,
                         save_strategy="no", bf16=False,
                         per_device_train_batch_size=PROMPTS * GROUP, num_generations=GROUP,
                         max_completion_length=MAX_NEW, beta=0.0, temperature=1.0)
    # 6 characters each
    prompts = ["First ", "Citize", "Before", "Speak,", "You ar", "Resolv", "We kno", "Let us"]
    trainer = GRPOTrainer(model=str(saved), reward_funcs=[reward], args=args,
                          train_dataset=Dataset.from_dict({"prompt": prompts}),
                          processing_class=hf_tok)
    trainer.model.eval()  # no dropout on either side (TRL then normalises as on one process)
    ours = from_pretrained(trainer.model).float().eval()
    config = GRPOConfig(group_size=GROUP, beta=0.0, max_completion_length=MAX_NEW)
    inputs = [{"prompt": p} for p in prompts for _ in range(GROUP)]
    generator = torch.Generator().manual_seed(0)
    score = lambda prompt, completion: reward([completion])[0]

    def theirs():
        trainer.model.zero_grad(set_to_none=True)
        out = trainer._generate_and_score_completions(inputs)
        loss = trainer._compute_loss(trainer.model, out)
        loss.backward()
        return loss.item()

    def mine():
        ours.zero_grad(set_to_none=True)
        groups = sample_groups(ours, tokenizer, prompts, GROUP, MAX_NEW, generator, score)
        _, advantages = score_groups(groups, config.scale_rewards)
        ids, completions = flatten(groups)
        logps, mask = completion_logprobs(ours, ids, completions, pad_id=0)
        loss, _ = grpo_loss(logps, logps.detach(), advantages, mask, config)
        loss.backward()
        return loss.item()

    return theirs, mine


def timed(fn) -> float:
    began = time.perf_counter()
    fn()
    return time.perf_counter() - began


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--repeats", type=count, default=30)
    p.add_argument("--threads", type=threads, default=2)
    add_record_options(p, RECORD, "--json")
    args = p.parse_args(argv)
    out = record_file(p, args, RECORD, "--json")
    torch.set_num_threads(args.threads)
    import transformers
    import trl

    command = ("python benchmarks/align_speed.py " + " ".join(argv if argv is not None
                                                              else sys.argv[1:]))
    record = {"command": command.strip(), "threads": args.threads, "repeats": args.repeats,
              "versions": {"torch": torch.__version__, "trl": trl.__version__,
                           "transformers": transformers.__version__},
              "model": {"vocab": VOCAB, **SHAPE}, "dpo_pairs": PAIRS, "grpo_prompts": PROMPTS,
              "grpo_group": GROUP, "max_completion_length": MAX_NEW, "steps": {}}
    with tempfile.TemporaryDirectory() as tmp:
        sides = {"dpo": dpo_sides(Path(tmp)), "grpo": grpo_sides(Path(tmp))}
        for name, (theirs, mine) in sides.items():
            theirs(), mine()  # warm-up: first calls allocate and build caches
            times = {"trl": [], "ours": []}
            for repeat in range(args.repeats):
                order = [("trl", theirs), ("ours", mine)]
                for side, fn in (order if repeat % 2 == 0 else order[::-1]):
                    times[side].append(timed(fn))
                med = {s: statistics.median(t) for s, t in times.items()}
                best = {s: min(t) for s, t in times.items()}
                record["steps"][name] = {
                    "seconds": {s: [round(x, 5) for x in t] for s, t in times.items()},
                    "median_s": med, "fastest_s": best, "ratio_median": med["trl"] / med["ours"],
                    "ratio_fastest": best["trl"] / best["ours"],
                    "ratio_per_repeat_range": [min(a / b for a,
                                                   b in zip(times["trl"], times["ours"])),
                                               max(a / b for a,
                                                   b in zip(times["trl"], times["ours"]))]}
                record["load_average"] = [round(x, 2) for x in os.getloadavg()]
                record["made_at"] = datetime.datetime.now(datetime.timezone.utc).isoformat(
                    timespec="seconds"
                )
                out.progress(record)  # after every repeat, where no whole record is replaced
            s = record["steps"][name]
            print(f"{name}: TRL {s['median_s']['trl'] * 1e3:.1f} ms, ours "
                  f"{s['median_s']['ours'] * 1e3:.1f} ms a step (median of {args.repeats}): ours "
                  f"{s['ratio_median']:.2f}x faster; fastest repeats {s['ratio_fastest']:.2f}x; "
                  f"load average {record['load_average']}", flush=True)
    out.finish(record, say=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
