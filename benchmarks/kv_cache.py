"""Tokens per second of sampling with and without the KV cache, at context 256 on CPU.

The model has the ``shakespeare-char-gpu`` preset's architecture (6 layers, 6 heads,
C = 384, block_size 256, 10.7M parameters), untrained: the speed does not depend on
the weights. Both ways start from the same prompt, generate until the context holds
block_size = 256 tokens, use the same seed, and must produce the same tokens. They
run alternately and the fastest of ``--repeats`` runs of each counts. Usage:

    python benchmarks/kv_cache.py [--prompt-len 1] [--repeats 3] [--threads N]

Without the cache, the step that produces token t runs the model on all t tokens of
the context; with it, on the newest token only (plus one pass over the prompt).

On a busy machine, OpenMP threads that spin while they wait for each other slow the
cached path's many tiny operations far more than the big matmuls of full recomputation,
so this script asks for passive waiting (``OMP_WAIT_POLICY=PASSIVE``, with
``course_lib.tools.numerics.wait_passively``) unless the environment already sets a
policy. On an idle machine it makes little difference.
"""
from __future__ import annotations

import argparse
import os

import torch
from bench_args import count, device, preset, threads

from course_lib.generate import compare_cache_speed
from course_lib.model import GPT
from course_lib.presets import get_preset
from course_lib.tools.numerics import wait_passively


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", type=preset, default="shakespeare-char-gpu",
                        help="whose architecture to time")
    parser.add_argument("--prompt-len", type=int, default=1,
                        help="prompt tokens; the rest of the context (block_size - prompt-len "
                             "tokens) is generated")
    parser.add_argument("--repeats", type=count, default=3,
                        help="timed runs of each way; the fastest counts")
    parser.add_argument("--threads", type=threads, default=None,
                        help="torch.set_num_threads (default: torch's choice)")
    parser.add_argument("--device", type=device, default="cpu")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)

    torch.manual_seed(1337)
    config = get_preset(args.preset).model
    if not 1 <= args.prompt_len < config.block_size:
        parser.error(f"--prompt-len must be in [1, {config.block_size - 1}]")
    model = GPT(config).to(args.device).eval()
    new_tokens = config.block_size - args.prompt_len
    prompt = torch.randint(config.vocab_size, (1, args.prompt_len),
                           generator=torch.Generator().manual_seed(0))
    prompt = prompt.to(args.device)
    compare_cache_speed(model, prompt, 8)  # warm-up

    result = compare_cache_speed(model, prompt, new_tokens, repeats=args.repeats)
    print(f"model: {args.preset} architecture, {model.num_parameters():,} parameters (untrained), "
          f"on {args.device}; {torch.get_num_threads()} threads, "
          f"OMP_WAIT_POLICY={os.environ['OMP_WAIT_POLICY']}")
    print(f"prompt {args.prompt_len} token(s), {new_tokens} new tokens: the context grows to "
          f"{config.block_size}")
    print(f"without KV cache: {result['no_cache']:8.1f} tokens/s")
    print(f"with KV cache:    {result['cache']:8.1f} tokens/s")
    print(f"speed-up: {result['speedup']:.1f}x   same tokens: {result['same_tokens']}")
    return 0 if result["same_tokens"] else 1


if __name__ == "__main__":
    wait_passively()
    raise SystemExit(main())
