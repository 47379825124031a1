"""Chapter 21's longer-context GPT: chapter 7's character GPT (the shakespeare-char-cpu preset's
shape: 4 layers, 4 heads, C=128, its batch and schedule) trained on tiny Shakespeare with a
context of 256 characters instead of 64, through the course's own command, then examined the way
chapter 21 examines the shipped 64-character model: validation passages written twice, the loss
on the second copy against the first and against the text that really follows (paired over the
passages, with t-intervals), every head's previous-token, duplicate-token and induction scores
(course_lib.induction.scores, the chapter's functions) beside a uniform-attention baseline, the
attention of each head from the second copy to the token after the earlier occurrence (the
copy stripe), and the head with the highest copy stripe mean-ablated against the other heads of
its layer. The shipped model gets the same test on the passages that fit its context.

    OMP_NUM_THREADS=1 PYTHONPATH=$PWD python benchmarks/induction_long_context.py \\
        --out runs/induction-ctx256 --update-record

Training runs ``python -m course_lib train --preset shakespeare-char-cpu --set block_size=256
--max-iters N --device cpu --out DIR --resume`` with OMP_NUM_THREADS=--threads; stopped, the
same command continues it. Each training session's CPU and wall time and the load average are
added to DIR/timing.json. ``--examine-only`` examines the run's checkpoint as it stands (a run
stopped early is recorded with the step it reached). The weights stay in DIR: they are not shipped.
Writes its record only when asked (--json FILE, or --update-record for
course_lib/records/induction_long_context.json, which chapter 21 prints).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from bench_args import (
    ROOT,
    add_record_options,
    code_commit,
    count,
    record_file,
    seed_number,
    threads,
)

from course_lib.checkpoint import load_model, load_tokenizer
from course_lib.data import load_text, train_val_split
from course_lib.induction.scores import all_scores, gpt_attention_patterns
from course_lib.induction.training import mean_interval
from course_lib.losses import sequence_loss
from course_lib.pretrained import load_pretrained
from course_lib.tools.numerics import wait_passively
from course_lib.utils import write_text_atomic

RECORD = ROOT / "course_lib" / "records" / "induction_long_context.json"
PRESET = "shakespeare-char-cpu"
SHORT = 30  # the passage length chapter 21 uses on the shipped model (written twice: 60 of its 64)


def train_command(args) -> list[str]:
    return [
        "python",
        "-m",
        "course_lib",
        "train",
        "--preset",
        PRESET,
        "--set",
        f"block_size={args.block_size}",
        "--max-iters",
        str(args.max_iters),
        "--device",
        "cpu",
        "--out",
        str(args.out),
        "--resume",
    ]


def train(args) -> None:
    """One training session (start or resume) through the course's command; its times appended to
    DIR/timing.json. A stopped session exits with the command's status."""
    env = dict(
        os.environ,
        OMP_NUM_THREADS=str(args.threads),
        PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p),
    )
    before, start, load = (
        resource.getrusage(resource.RUSAGE_CHILDREN),
        time.perf_counter(),
        os.getloadavg()[0],
    )
    done = subprocess.run([sys.executable, *train_command(args)[1:]], env=env)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    session = dict(
        threads=args.threads,
        steps_after=_steps(args.out),
        cpu_s=round(cpu, 1),
        wall_s=round(time.perf_counter() - start, 1),
        loadavg_start=round(load, 2),
        loadavg_end=round(os.getloadavg()[0], 2),
        status=done.returncode,
    )
    timing = args.out / "timing.json"
    sessions = json.loads(timing.read_text()) if timing.exists() else []
    write_text_atomic(timing, json.dumps(sessions + [session], indent=1) + "\n")
    if done.returncode != 0:
        sys.exit(
            f"error: training stopped (status {done.returncode}); run the same command again to "
            "continue it"
        )


def _steps(out: Path) -> int | None:
    """The step the run's checkpoint holds (None without one)."""
    path = out / "ckpt.pt"
    return (
        torch.load(path, map_location="cpu", weights_only=False)["step"] if path.exists() else None
    )


def choose_passages(
    val: torch.Tensor, n: int, low: int, high: int, seed: int
) -> list[tuple[int, int]]:
    """``n`` (start, length) pairs: lengths drawn in low..high, starts anywhere the passage and the
    text that follows it (as long again) lie inside ``val``."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(low, high + 1, (n,), generator=g).tolist()
    return [(int(torch.randint(0, len(val) - 2 * L, (1,), generator=g)), L) for L in lengths]


@torch.no_grad()
def token_losses(model, seqs: list[torch.Tensor]) -> list[torch.Tensor]:
    """Per sequence (N,), the loss of predicting each token from those before it (N - 1,): entry j
    predicts token j + 1. Right-padded into one batch, which a causal model does not see."""
    T = max(len(s) for s in seqs) - 1
    x, y = torch.zeros(len(seqs), T, dtype=torch.long), torch.zeros(len(seqs), T, dtype=torch.long)
    for i, s in enumerate(seqs):
        x[i, : len(s) - 1], y[i, : len(s) - 1] = s[:-1], s[1:]
    logits, _ = model(x)  # (B, T, V)
    losses = F.cross_entropy(logits.transpose(1, 2), y, reduction="none")  # (B, T)
    return [losses[i, : len(s) - 1] for i, s in enumerate(seqs)]


def interval(values: list[float]) -> dict:
    mean, low, high = mean_interval(values)
    return dict(mean=round(mean, 4), low=round(low, 4), high=round(high, 4), n=len(values))


def repeat_test(model, val: torch.Tensor, passages: list[tuple[int, int]]) -> dict:
    """Each passage p of length L written twice (2L tokens) and, as the control at the same
    positions, p followed by the L characters that really follow it: per passage the mean loss on
    tokens 1..L-1 (first copy), on L+1..2L-1 of the doubled passage (second copy) and of the real
    text (natural); then the paired differences with their 95% t-intervals over passages."""
    doubled = [torch.cat([val[s : s + L], val[s : s + L]]) for s, L in passages]
    natural = [val[s : s + 2 * L] for s, L in passages]
    ld, ln = token_losses(model, doubled), token_losses(model, natural)
    first = [d[: L - 1].mean().item() for d, (_, L) in zip(ld, passages)]
    second = [d[L:].mean().item() for d, (_, L) in zip(ld, passages)]
    nat = [n[L:].mean().item() for n, (_, L) in zip(ln, passages)]
    return {
        "first": interval(first),
        "second": interval(second),
        "natural_second": interval(nat),
        "second_minus_first": interval([b - a for a, b in zip(first, second)]),
        "second_minus_natural": interval([b - n for n, b in zip(nat, second)]),
        "natural_minus_first": interval([n - a for a, n in zip(first, nat)]),
    }


def head_scores(model, val: torch.Tensor, passages: list[tuple[int, int]]) -> dict:
    """(layers, heads) means over the doubled passages: the chapter's three scores, and the copy
    stripe (the attention from each query t of the second copy, but its last, to t - L + 1, the
    token after the earlier occurrence of token t); each with the value of a head that attends
    evenly to the past."""
    sums, base = {}, {}
    for s, L in passages:
        d = torch.cat([val[s : s + L], val[s : s + L]])[None]  # (1, 2L)
        patterns = gpt_attention_patterns(model, d)  # (1, layers, heads, 2L, 2L)
        causal = torch.tril(torch.ones(2 * L, 2 * L))
        uniform = (causal / causal.sum(-1, keepdim=True))[None, None, None]
        t = torch.arange(L, 2 * L - 1)
        found = {**all_scores(patterns, d), "copy_stripe": patterns[0, :, :, t, t - L + 1].mean(-1)}
        flat = {**all_scores(uniform, d), "copy_stripe": uniform[0, :, :, t, t - L + 1].mean(-1)}
        for name in found:
            sums[name] = sums.get(name, 0) + found[name] / len(passages)
            base[name] = base.get(name, 0) + flat[name].item() / len(passages)
    return {
        name: {
            "heads": [[round(v, 4) for v in layer] for layer in sums[name].tolist()],
            "uniform": round(base[name], 4),
        }
        for name in sums
    }


@torch.no_grad()
def head_means(model, windows: torch.Tensor) -> list[torch.Tensor]:
    """Per layer (C,): the heads' outputs side by side (the input of c_proj), averaged over the rows
    and positions of ``windows`` (B, T)."""
    found = []
    handles = [
        b.attn.c_proj.register_forward_pre_hook(lambda m, args: found.append(args[0].mean((0, 1))))
        for b in model.blocks
    ]
    try:
        model(windows)
    finally:
        for h in handles:
            h.remove()
    return found


@contextlib.contextmanager
def mean_ablated(model, layer: int, head: int, means: list[torch.Tensor]):
    """Head ``head`` of ``layer`` writes its mean output (from :func:`head_means`) everywhere."""
    attn = model.blocks[layer].attn
    hs = attn.head_size

    def replace(module, args):  # args[0] (B, T, nh * hs): the heads side by side
        y = args[0].clone()
        y[..., head * hs : (head + 1) * hs] = means[layer][head * hs : (head + 1) * hs]
        return (y,)

    handle = attn.c_proj.register_forward_pre_hook(replace)
    try:
        yield model
    finally:
        handle.remove()


def ablations(model, val, passages, scores, seed: int) -> dict:
    """The head with the highest copy stripe, then each other head of its layer (the controls),
    mean-ablated: the repeat test again."""
    stripe = torch.tensor(scores["copy_stripe"]["heads"])
    layer, head = divmod(int(stripe.argmax()), stripe.shape[1])
    g = torch.Generator().manual_seed(seed)
    T = model.config.block_size
    starts = torch.randint(0, len(val) - T, (32,), generator=g).tolist()
    means = head_means(model, torch.stack([val[s : s + T] for s in starts]))
    out = {"layer": layer, "top_head": head, "heads": {}}
    for h in [head] + [h for h in range(stripe.shape[1]) if h != head]:
        with mean_ablated(model, layer, h, means):
            test = repeat_test(model, val, passages)
        out["heads"][str(h)] = {k: test[k] for k in ("second_minus_first", "second_minus_natural")}
    return out


def examine(model, val: torch.Tensor, passages: list[tuple[int, int]], seed: int) -> dict:
    """The validation loss, the repeat test, the head scores and the ablations on ``passages``."""
    result = {
        "val_sequence_loss": round(sequence_loss(model, val), 4),
        "repeat": repeat_test(model, val, passages),
        "scores": head_scores(model, val, passages),
    }
    result["ablation"] = ablations(model, val, passages, result["scores"], seed)
    return result


def say(name: str, r: dict) -> None:
    print(f"{name}: val loss {r['val_sequence_loss']:.3f} (every window of its context)")
    for part in ("repeat", "short"):
        if part in r:
            d, c = r[part]["second_minus_first"], r[part]["second_minus_natural"]
            print(
                f"  {part}: second copy - first {d['mean']:+.3f} ({d['low']:+.3f} to "
                f"{d['high']:+.3f}); "
                f"second copy - real text {c['mean']:+.3f} ({c['low']:+.3f} to {c['high']:+.3f})"
            )
    for k, s in r["scores"].items():
        print(
            f"  {k}: highest {max(max(layer) for layer in s['heads']):.3f} (uniform "
            f"{s['uniform']:.3f})"
        )
    a = r["ablation"]
    for h, test in a["heads"].items():
        c = test["second_minus_natural"]
        print(
            f"  head {a['layer']}.{h} mean-ablated: second copy - real text {c['mean']:+.3f} "
            f"({c['low']:+.3f} to {c['high']:+.3f})"
            + (" <- highest copy stripe" if int(h) == a["top_head"] else "")
        )


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument(
        "--out", type=Path, default=Path("runs/induction-ctx256"), help="the training run's folder"
    )
    p.add_argument("--block-size", type=count, default=256)
    p.add_argument("--max-iters", type=count, default=2000)
    p.add_argument("--threads", type=threads, default=1, help="training threads (OMP_NUM_THREADS)")
    p.add_argument(
        "--examine-threads", type=threads, default=2, help="threads of the examination (no timing)"
    )
    p.add_argument("--passages", type=count, default=200)
    p.add_argument("--min-length", type=count, default=30)
    p.add_argument("--max-length", type=count, default=100)
    p.add_argument("--seed", type=seed_number, default=7)
    p.add_argument(
        "--examine-only", action="store_true", help="examine the run's checkpoint as it stands"
    )
    add_record_options(p, RECORD)
    args = p.parse_args(argv)
    if not 2 <= args.min_length <= args.max_length:
        p.error(
            f"--min-length {args.min_length} --max-length {args.max_length}: need 2 <= min <= max"
        )
    if 2 * args.max_length > args.block_size:
        p.error(
            f"--max-length {args.max_length} written twice needs a context of "
            f"{2 * args.max_length}, "
            f"more than --block-size {args.block_size}: lower --max-length or raise --block-size"
        )
    if args.examine_only and not (args.out / "ckpt.pt").exists():
        p.error(
            f"--examine-only: {args.out} holds no checkpoint; train it first (leave out "
            "--examine-only)"
        )
    out = record_file(p, args, RECORD)
    if not args.examine_only:
        train(args)
    torch.set_num_threads(args.examine_threads)
    model, ckpt = load_model(args.out / "ckpt.pt")
    tok = load_tokenizer(ckpt)
    _, val = train_val_split(torch.tensor(tok.encode(load_text())))
    timing = args.out / "timing.json"
    sessions = json.loads(timing.read_text()) if timing.exists() else []
    start = time.perf_counter()
    short = choose_passages(val, args.passages, SHORT, SHORT, args.seed)
    long_run = examine(
        model,
        val,
        choose_passages(val, args.passages, args.min_length, args.max_length, args.seed),
        args.seed,
    )
    long_run["short"] = repeat_test(model, val, short)
    shipped, _ = load_pretrained()
    record = dict(
        command=" ".join(
            [
                "OMP_NUM_THREADS=1",
                "python",
                "benchmarks/induction_long_context.py",
                "--block-size",
                str(args.block_size),
                "--max-iters",
                str(args.max_iters),
                "--threads",
                str(args.threads),
                "--passages",
                str(args.passages),
                "--min-length",
                str(args.min_length),
                "--max-length",
                str(args.max_length),
                "--seed",
                str(args.seed),
            ]
            + (["--examine-only"] if args.examine_only else [])
        ),
        train_command=" ".join(train_command(args)[:-3] + ["--out", "DIR", "--resume"]),
        code_commit=code_commit(),
        block_size=args.block_size,
        max_iters=args.max_iters,
        steps=ckpt["step"],
        trainer_val_loss=round(ckpt["history"]["val_loss"][-1], 4),
        train_cpu_minutes=round(sum(s["cpu_s"] for s in sessions) / 60, 2),
        train_wall_minutes=round(sum(s["wall_s"] for s in sessions) / 60, 2),
        sessions=sessions,
        passages=dict(
            count=args.passages,
            long=[args.min_length, args.max_length],
            short=SHORT,
            seed=args.seed,
        ),
        ctx256=long_run,
        shipped=examine(shipped, val, short, args.seed),
        examine_s=round(time.perf_counter() - start, 1),
        loadavg=round(os.getloadavg()[0], 2),
    )
    say(f"context {args.block_size}, {ckpt['step']} steps", long_run)
    say("shipped (context 64)", record["shipped"])
    out.finish(record, say=True)


if __name__ == "__main__":
    wait_passively()
    main()
