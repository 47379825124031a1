"""Our evaluation harness against lm-evaluation-harness's HFLM: the same model, the same items,
the same 2 threads, side by side in one process (chapter 16, book/measured.md).

    python benchmarks/eval_speed.py --json course_lib/records/eval_speed.json

The model: a random GPT2LMHeadModel the size of the book's CPU GPT (4 layers, C=128, 128
positions) over a character tokenizer built offline with the `tokenizers` library; lm-eval sees
it through HFLM, we through course_lib.gpt2.from_pretrained (the same weights). The work:
the 200 items of the next-line task as 800 log-likelihood requests (--items N: the first N), and
greedy generation on 50 items of next-word (stop at a newline, 12 tokens at most). Log-likelihoods
are timed twice for us: on the very same Hugging Face forward passes (``hf_decoder``: the harnesses
alone compared), and on our GPT holding the same weights (its own forward pass; the shared context
is packed once only where a whole item fits in a row, and no next-line item fits in 128 positions,
so this times the forward passes, not the packing). Generation runs on our GPT (its KV cache)
against HF's ``generate``. Each side runs --repeats times, interleaved (every other repeat in
reverse order); the medians are compared, and the fastest repeats (the least disturbed by other
work). The JSON is rewritten after every repeat. The load average is recorded: on shared cores both
sides slow down together, so the ratio is what to read.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def hf_decoder(hf):
    """The Hugging Face model itself behind course_lib's model interface (``model(idx) -> (logits,
    None)``, ``config.block_size``), so that both harnesses run the very same forward passes and
    the timing compares the harnesses alone. It takes no attention mask, so our harness scores it
    one row per request, as lm-eval does."""
    import types

    import torch

    class HFDecoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.hf = hf
            self.config = types.SimpleNamespace(block_size=hf.config.n_positions)

        def forward(self, idx):
            return self.hf(input_ids=idx).logits, None

    return HFDecoder().eval()


def summary(args, times, loads, requests, gen, theirs, mine, mine_gpt, their_text, my_text) -> dict:
    """The record of the repeats finished so far: every time, the medians and their ratios."""
    median = {k: statistics.median(v) for k, v in times.items()}
    fastest = {k: min(v) for k, v in times.items()}
    return {
        "command": "python benchmarks/eval_speed.py"
        + (f" --items {args.items}" if args.items != 200 else "")
        + (f" --repeats {args.repeats}" if args.repeats != 3 else "")
        + (f" --json {args.json}" if args.json else ""),
        "threads": args.threads,
        "batch_size": args.batch_size,
        "repeats": len(loads),
        "requests": len(requests),
        "generations": len(gen),
        "load_average": os.getloadavg(),
        "load_average_after_each_repeat": loads,
        "cpu": os.uname().machine,
        "seconds": times,
        "median_seconds": median,
        "speedup_loglikelihood": median["lm_eval_loglikelihood"] / median["ours_loglikelihood"],
        "speedup_loglikelihood_our_gpt": median["lm_eval_loglikelihood"]
        / median["ours_loglikelihood_our_gpt"],
        "speedup_generate": median["lm_eval_generate"] / median["ours_generate"],
        # on shared cores a repeat is only ever slowed down by others: the fastest repeats are
        # the least disturbed, and the ratio of each repeat (same moment, both sides) shows the
        # spread
        "fastest_seconds": fastest,
        "speedup_loglikelihood_fastest": fastest["lm_eval_loglikelihood"]
        / fastest["ours_loglikelihood"],
        "speedup_loglikelihood_our_gpt_fastest": (
            fastest["lm_eval_loglikelihood"] / fastest["ours_loglikelihood_our_gpt"]
        ),
        "speedup_generate_fastest": fastest["lm_eval_generate"] / fastest["ours_generate"],
        "speedup_loglikelihood_per_repeat": [
            a / b for a, b in zip(times["lm_eval_loglikelihood"], times["ours_loglikelihood"])
        ],
        "speedup_loglikelihood_our_gpt_per_repeat": [
            a / b
            for a, b in zip(times["lm_eval_loglikelihood"], times["ours_loglikelihood_our_gpt"])
        ],
        "max_abs_loglikelihood_difference": max(abs(a[0] - b[0]) for a, b in zip(theirs, mine)),
        "max_abs_loglikelihood_difference_our_gpt": max(
            abs(a[0] - b[0]) for a, b in zip(theirs, mine_gpt)
        ),
        "same_generations": their_text == my_text,
    }


def main(argv=None) -> None:
    from bench_args import add_record_options, count, record_file, threads
    from course_lib.tools.numerics import wait_passively
    wait_passively()
    import torch
    from lm_eval.api.instance import Instance
    from lm_eval.models.huggingface import HFLM

    from course_lib import evaluation as ev
    from course_lib.evaluation.tasks import load_task
    from course_lib.gpt2 import from_pretrained
    from eval_helpers import char_hf_tokenizer, tiny_gpt2

    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_record_options(p, None, "--json")
    p.add_argument("--repeats", type=count, default=3)
    p.add_argument("--threads", type=threads, default=2)
    p.add_argument("--batch-size", type=count, default=32)
    p.add_argument("--items", type=count, default=200, help="next-line items (4 requests each)")
    args = p.parse_args(argv)
    record = record_file(p, args, None, "--json")
    torch.set_num_threads(args.threads)
    hf_tok, tok = char_hf_tokenizer()
    hf = tiny_gpt2(len(hf_tok), n_positions=128, n_embd=128, n_layer=4, n_head=4)
    lm = HFLM(pretrained=hf, tokenizer=hf_tok, batch_size=args.batch_size, device="cpu",
              max_length=128)
    ours = from_pretrained(hf)
    mc = load_task("next-line").test[:args.items]
    requests = [(i["context"], " " + c) for i in mc for c in i["choices"]]
    gen = load_task("next-word").test[:50]
    instances = [Instance(request_type="loglikelihood", doc={}, arguments=r, idx=0)
                 for r in requests]
    gen_instances = [Instance(request_type="generate_until", doc={}, idx=0,
                              arguments=(i["prompt"],
                                         {"until": ["\n"], "max_gen_toks": 12, "do_sample": False}))
                     for i in gen]
    same_model = hf_decoder(hf)
    times = {k: []
             for k in ("lm_eval_loglikelihood", "ours_loglikelihood", "ours_loglikelihood_our_gpt",
                             "lm_eval_generate", "ours_generate")}
    loads = []
    out = {}

    def timed(name, work):
        t = time.perf_counter()
        out[name] = work()
        times[name].append(time.perf_counter() - t)

    jobs = [("lm_eval_loglikelihood", lambda: lm.loglikelihood(instances, disable_tqdm=True)),
            ("ours_loglikelihood",
             lambda: ev.loglikelihood(same_model, tok, requests, batch_size=args.batch_size)),
            ("ours_loglikelihood_our_gpt",
             lambda: ev.loglikelihood(ours, tok, requests, batch_size=args.batch_size)),
            ("lm_eval_generate", lambda: lm.generate_until(gen_instances, disable_tqdm=True)),
            ("ours_generate",
             lambda: ev.greedy_generate(ours, tok, [i["prompt"] for i in gen], 12, ["\n"],
                                                         batch_size=args.batch_size))]
    for repeat in range(args.repeats):
        # every other repeat runs the jobs in reverse order, so neither side always goes first
        for name, work in (jobs if repeat % 2 == 0 else jobs[::-1]):
            timed(name, work)
        theirs, mine = out["lm_eval_loglikelihood"], out["ours_loglikelihood"]
        mine_gpt = out["ours_loglikelihood_our_gpt"]
        their_text, my_text = out["lm_eval_generate"], out["ours_generate"]
        loads.append(os.getloadavg()[0])
        result = summary(args, times, loads, requests, gen, theirs, mine, mine_gpt, their_text,
                         my_text)
        print(f"repeat {len(loads)} of {args.repeats}: " + ", ".join(f"{k} {v[-1]:.1f}s" for k,
                                                                     v in times.items())
              + f", load {loads[-1]:.1f}", flush=True)
        record.progress(result)  # after every repeat: a run that is stopped keeps what it finished
    print(json.dumps({k: v for k, v in result.items() if k != "seconds"}, indent=1))
    record.finish(result, say=True)


if __name__ == "__main__":
    main()
