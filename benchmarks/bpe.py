"""Byte-level BPE on tiny Shakespeare: training and encoding speed, ours against the industrial
ones.

Prints, in one run (the fastest of ``--repeats`` runs of each counts; wall-clock seconds):

- training 256 merges (vocabulary 512, GPT-2 pattern) with ``course_lib.bpe_train.train_bpe``;
- the naive trainer (recount every pair after every merge) on a slice, and its time scaled to
  the whole text (its cost grows with the text's distinct pre-tokens, so the scaling is rough:
  ``--naive-full`` times it on the whole text instead, about a minute or more);
- Hugging Face ``tokenizers``' Rust BPE trainer on the same text and vocabulary size;
- encoding MB/s: ours with the trained 512-token vocabulary (a fresh tokenizer, so its cache starts
  empty, and again with the cache filled), ours with the cl100k ranks, and tiktoken with the same
  ranks (the reference, in Rust), checking that both give the same ids.

On a shared machine, other processes steal time from the wall clock; the CPU time this process
used is steadier, so both are printed (for single-threaded code, CPU time is what an idle machine's
wall clock would show; Hugging Face's trainer runs on several threads, so compare its wall time).

Usage: ``python benchmarks/bpe.py [--repeats 5] [--naive-chars 100000] [--naive-full]``.
Targets of the course: training <= 1.5 s, encoding >= 3 MB/s on 2 cores.
"""
from __future__ import annotations

import argparse
import gc
import time
from pathlib import Path

from bench_args import at_least, count

from course_lib.bpe import BPETokenizer
from course_lib.bpe_files import CL100K_SPECIAL_TOKENS, read_tiktoken_ranks
from course_lib.bpe_train import train_bpe, train_bpe_naive
from course_lib.pretokenize import CL100K_PATTERN, pretoken_counts
from course_lib.data import load_text

RANKS = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "cl100k_base.tiktoken.gz"


CPU = {}  # the fastest CPU time (this process, all its threads) of each timed function, by name


def best_of(fn, repeats: int, name: str | None = None):
    """(fastest wall time in seconds, result of the last call); the fastest CPU time goes to
    CPU[name]."""
    best, best_cpu, out = float("inf"), float("inf"), None
    for _ in range(repeats):
        gc.collect()
        c0, t0 = time.process_time(), time.perf_counter()
        out = fn()
        best, best_cpu = min(best,
                             time.perf_counter() - t0), min(best_cpu, time.process_time() - c0)
    if name:
        CPU[name] = best_cpu
    return best, out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=count, default=5)
    parser.add_argument("--vocab-size", type=at_least(257), default=512,
                        help="256 bytes plus at least one merge")
    parser.add_argument("--naive-chars", type=count, default=100_000,
                        help="the slice the naive trainer runs on")
    parser.add_argument("--naive-full", action="store_true",
                        help="time the naive trainer on the whole text")
    args = parser.parse_args(argv)

    text = load_text("tinyshakespeare")
    n_bytes = len(text.encode("utf-8"))
    merges_wanted = args.vocab_size - 256
    print(f"tiny Shakespeare: {len(text):,} characters, {n_bytes:,} bytes, "
          f"{len(pretoken_counts(text)):,} distinct GPT-2 pre-tokens; vocabulary {args.vocab_size}")
    rows = []

    t_ours, (vocab, merges) = best_of(lambda: train_bpe(text=text, vocab_size=args.vocab_size,
                                                        special_tokens=()),
                                      args.repeats, "train")
    assert len(merges) == merges_wanted
    t_pre, _ = best_of(lambda: pretoken_counts(text), args.repeats, "pre")
    rows.append(("train: course_lib.bpe_train.train_bpe",
                 f"{t_ours:.2f} s wall, {CPU['train']:.2f} s CPU for "
                 f"{len(merges)} merges (pre-tokenizing: {t_pre:.2f} s wall, {CPU['pre']:.2f} s "
                 "CPU)"))

    naive_text = text if args.naive_full else text[:args.naive_chars]
    c0, t0 = time.process_time(), time.perf_counter()
    naive = train_bpe_naive(naive_text, args.vocab_size)
    t_naive, c_naive = time.perf_counter() - t0, time.process_time() - c0
    assert naive == train_bpe(text=naive_text,
                              vocab_size=args.vocab_size), "the two trainers disagree"
    if args.naive_full:
        rows.append(("train: naive (recount after every merge)",
                     f"{t_naive:.1f} s wall, {c_naive:.1f} s CPU: {c_naive / CPU['train']:.0f}x "
                     "ours"))
    else:
        best_of(lambda: train_bpe(text=naive_text, vocab_size=args.vocab_size), args.repeats,
                "slice")
        rows.append((f"train: naive (recount after every merge), first {len(naive_text):,} "
                     "characters",
                     f"{t_naive:.1f} s wall, {c_naive:.1f} s CPU: {c_naive / CPU['slice']:.0f}x "
                     f"ours on the same slice ({CPU['slice']:.2f} s CPU)"))

    try:
        from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    except ImportError:
        rows.append(("train: Hugging Face tokenizers", "not installed"))
    else:
        def hf_train():
            tok = Tokenizer(models.BPE())
            tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
            trainer = trainers.BpeTrainer(vocab_size=args.vocab_size, show_progress=False,
                                          initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
            tok.train_from_iterator([text], trainer=trainer)
            return tok
        t_hf, hf = best_of(hf_train, args.repeats, "hf")
        rows.append(("train: Hugging Face tokenizers (Rust, multi-threaded)",
                     f"{t_hf:.2f} s wall, {CPU['hf']:.2f} s CPU (all threads) for vocabulary "
                     f"{hf.get_vocab_size()}; ours takes {t_ours / t_hf:.1f}x its wall time"))

    def encode_fresh():
        tok = BPETokenizer(vocab, merges)
        return tok, tok.encode(text)

    best_of(lambda: BPETokenizer(vocab, merges), args.repeats, "build")
    best_of(encode_fresh, args.repeats, "cold")
    c_cold = CPU["cold"] - CPU["build"]  # building the tokenizer is not encoding
    tok, ids = encode_fresh()
    assert tok.decode(ids) == text
    t_warm, _ = best_of(lambda: tok.encode(text), args.repeats, "warm")
    rows.append((f"encode: ours, vocabulary {args.vocab_size}, empty cache",
                 f"{n_bytes / c_cold / 1e6:.1f} MB/s by CPU time ({len(ids):,} tokens, "
                 f"{len(text) / len(ids):.2f} characters per token)"))
    rows.append((f"encode: ours, vocabulary {args.vocab_size}, cache filled",
                 f"{n_bytes / CPU['warm'] / 1e6:.1f} MB/s by CPU time, "
                 f"{n_bytes / t_warm / 1e6:.1f} MB/s wall"))

    cl100k = BPETokenizer.from_tiktoken(RANKS)
    c0 = time.process_time()
    cl_ids = cl100k.encode(text)  # fills the cache
    c_cl = time.process_time() - c0
    t_cl_warm, _ = best_of(lambda: cl100k.encode(text), args.repeats, "cl_warm")
    rows.append(("encode: ours, cl100k ranks", f"{n_bytes / c_cl / 1e6:.1f} MB/s empty cache, "
                 f"{n_bytes / CPU['cl_warm'] / 1e6:.1f} MB/s cache filled, by CPU time "
                 f"({len(cl_ids):,} tokens)"))
    try:
        import tiktoken
    except ImportError:
        rows.append(("encode: tiktoken cl100k", "not installed"))
    else:
        enc = tiktoken.Encoding(name="cl100k_base", pat_str=CL100K_PATTERN,
                                mergeable_ranks=read_tiktoken_ranks(RANKS),
                                special_tokens=CL100K_SPECIAL_TOKENS)
        t_tt, tt_ids = best_of(lambda: enc.encode_ordinary(text), args.repeats, "tt")
        same = "identical ids" if tt_ids == cl_ids else "DIFFERENT ids"
        rows.append(("encode: tiktoken cl100k (Rust)",
                     f"{n_bytes / CPU['tt'] / 1e6:.1f} MB/s by CPU time, {same}; "
                     f"ours (cache filled) runs at {CPU['tt'] / CPU['cl_warm']:.2f}x its speed"))

    width = max(len(r[0]) for r in rows)
    for name, result in rows:
        print(f"{name:<{width}}  {result}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
