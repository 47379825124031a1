"""Training throughput (tokens/s) of the GPT with fused attention vs the same GPT with
list-of-heads attention, at the `shakespeare-char-cpu` config, measured side by side.

The two models are timed in alternating rounds in one process, so machine noise hits
both alike; the script prints each median and their ratio. Usage:

    python benchmarks/attention_throughput.py [--rounds 5] [--steps 30] [--device cpu]
"""
import argparse
import statistics
import time
from dataclasses import replace

import torch
import torch.nn as nn
from bench_args import count, device

from course_lib.attention import MultiHeadAttention
from course_lib.data import get_batch, load_text, train_val_split
from course_lib.model import GPT
from course_lib.presets import get_preset
from course_lib.tokenizers import CharTokenizer
from course_lib.optim import configure_optimizer


class ListOfHeads(nn.Module):
    """MultiHeadAttention (one module per head) behind the fused layer's interface."""

    def __init__(self, fused, block_size):
        super().__init__()
        self.mha = MultiHeadAttention(fused.n_embd, fused.n_head, block_size, fused.dropout,
                                      fused.c_attn.bias is not None)

    def forward(self, x, cache=None, mask=None, rope=None):
        """Block's call, ``attn(x, cache, mask, rope)``; the preset's GPT has no KV cache in
        training, no window mask and learned positions, which is all MultiHeadAttention does."""
        if cache is not None or mask is not None or rope is not None:
            raise ValueError("list-of-heads attention is plain causal attention: no KV cache, "
                             "window or RoPE")
        return self.mha(x)


def build(kind, config):
    torch.manual_seed(0)
    model = GPT(config)
    if kind == "list of heads":
        for block in model.blocks:
            block.attn = ListOfHeads(block.attn, config.block_size)
    return model


def time_steps(model, optimizer, batches):
    start = time.perf_counter()
    for x, y in batches:
        _, loss = model(x, y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return time.perf_counter() - start


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=count, default=5)
    parser.add_argument("--steps", type=count, default=30,
                        help="training steps per round and model")
    parser.add_argument("--device", type=device, default="cpu")
    args = parser.parse_args(argv)

    preset = get_preset("shakespeare-char-cpu")
    text = load_text()
    tok = CharTokenizer.from_text(text)
    train, _ = train_val_split(torch.tensor(tok.encode(text)))
    config = replace(preset.model, vocab_size=tok.vocab_size)
    B = preset.train.batch_size
    g = torch.Generator().manual_seed(0)
    batches = [get_batch(train, config.block_size, B, g, args.device) for _ in range(args.steps)]

    models = {kind: build(kind, config).to(args.device) for kind in ("fused", "list of heads")}
    assert models["fused"].num_parameters() == models["list of heads"].num_parameters()
    optimizers = {k: configure_optimizer(m, preset.train) for k, m in models.items()}
    for k in models:  # warm-up
        time_steps(models[k], optimizers[k], batches[:3])
    times = {k: [] for k in models}
    for _ in range(args.rounds):
        for k in models:
            times[k].append(time_steps(models[k], optimizers[k], batches))
    tokens = args.steps * B * config.block_size
    rate = {k: tokens / statistics.median(v) for k, v in times.items()}
    print(f"shakespeare-char-cpu model ({models['fused'].num_parameters():,} parameters), B={B}, "
          f"T={config.block_size}, {args.device}, {torch.get_num_threads()} threads, {args.rounds} "
          f"rounds x {args.steps} steps")
    for k, r in rate.items():
        print(f"  {k:>14}: {r:,.0f} tokens/s (median)")
    print(f"fused / list-of-heads throughput ratio: {rate['fused'] / rate['list of heads']:.2f}x")


if __name__ == "__main__":
    main()
