"""Checks for chapter 6, The full GPT and counting its parameters:
``from course_lib.exercises import ch06``."""
from __future__ import annotations

import torch

from ..model import GPT, GPTConfig
from ..sizing import count_parameters
from . import as_integer, call, describe, expect_tensor, fail, passed

# The configs the counting check tries: small ones are built and counted with sum(p.numel()),
# large ones are compared with the formula only.
_SMALL = [
    GPTConfig(vocab_size=65, block_size=32, n_layer=2, n_head=4, n_embd=32),
    GPTConfig(vocab_size=50, block_size=20, n_layer=3, n_head=2, n_embd=24, bias=True),
    GPTConfig(vocab_size=11, block_size=8, n_layer=1, n_head=1, n_embd=16, tie_weights=False),
    GPTConfig(vocab_size=30, block_size=12, n_layer=2, n_head=2, n_embd=8, bias=True,
              tie_weights=False, norm_position="post"),
    GPTConfig(vocab_size=7, block_size=5, n_layer=4, n_head=3, n_embd=12, norm_position="post"),
]
_LARGE = [
    # GPT-2 small
    GPTConfig(vocab_size=50257, block_size=1024, n_layer=12, n_head=12, n_embd=768, bias=True),
    GPTConfig(vocab_size=50257, block_size=1024, n_layer=48, n_head=25, n_embd=1600, bias=True,
              tie_weights=False),
    # GPT-3
    GPTConfig(vocab_size=50257, block_size=2048, n_layer=96, n_head=96, n_embd=12288, bias=True),
]


def _describe(c: GPTConfig) -> str:
    return (f"GPTConfig(vocab_size={c.vocab_size}, block_size={c.block_size}, n_layer={c.n_layer}, "
            f"n_head={c.n_head}, n_embd={c.n_embd}, bias={c.bias}, tie_weights={c.tie_weights}, "
            f"norm_position={c.norm_position!r})")


def _diagnose(diff: int, c: GPTConfig) -> str | None:
    """A hint for a count that is off by ``diff`` (got - expected), when the gap is one part."""
    V, T, C, L = c.vocab_size, c.block_size, c.n_embd, c.n_layer
    b = 1 if c.bias else 0
    norm = C + b * C
    candidates = [
        (V * C, "the LM head: V·C extra when tie_weights=False, nothing when it is tied to the "
                "token embedding"),
        (T * C, "the position embedding: block_size · n_embd"),
        (norm, "the final LayerNorm: it exists with norm_position='pre' only (post-LN blocks "
               "already end in one)"),
        (2 * L * norm,
         "the two LayerNorms of every block: C gains each (+ C biases when bias=True)"),
        (2 * L * norm + (norm if c.norm_position == "pre" else 0),
         "the LayerNorms (two per block, plus the final one)"),
        (L * b * 9 * C,
         "the biases of the Linear layers: 3C + C in attention, 4C + C in the MLP, per block"),
        (L * b * 11 * C,
         "the biases: Linear layers 9C per block, LayerNorms C each (only when bias=True)"),
        (L * 4 * C * C,
         "the attention projections: q, k, v (3C²) plus the output projection (C²) per block"),
        (L * 8 * C * C, "the MLP: C x 4C and 4C x C, so 8C² per block"),
    ]
    for amount, what in candidates:
        if amount and abs(diff) == amount:
            return (f"your count is {'too high' if diff > 0 else 'too low'} by exactly {amount:,}: "
                    f"check {what}.")
    return None


def check_count_parameters(fn) -> None:
    """``fn(config) -> int``: the exact number of parameters of ``GPT(config)`` from the config
    alone, for any vocab_size, block_size, n_layer, n_embd, bias, tie_weights and norm_position."""
    for c in _SMALL + _LARGE:
        # An exact whole number: a float with a fraction, NaN or a string fails here, with its hint.
        got = as_integer(call(fn, c), f"for {_describe(c)}", "return the count as a Python int.")
        if c in _SMALL:
            expected = sum(p.numel() for p in GPT(c).parameters())
        else:
            expected = count_parameters(c)
        if got != expected:
            hint = _diagnose(got - expected, c) or (
                "per block: attention 4C² (+ 4C biases), MLP 8C² (+ 5C biases), two LayerNorms; "
                "embeddings V·C + T·C; a final LayerNorm with pre-LN; the LM head V·C unless tied.")
            fail(f"for {_describe(c)} you counted {got:,}, but the model has {expected:,} "
                 "parameters.", hint)
    passed("your count equals sum(p.numel()) on small models and course_lib's formula up to GPT-3 "
           f"({count_parameters(_LARGE[-1]):,}).")


# --- the largest model under a budget ---------------------------------------------------------

BUDGET_VOCAB_SIZE = 65
BUDGET_BLOCK_SIZE = 256
BUDGET_HEAD_SIZE = 64
BUDGET_LAYERS = range(1, 17)  # n_layer from 1 to 16
BUDGET_WIDTHS = range(64, 1025, 64)  # n_embd from 64 to 1024 in steps of 64


def budget_config(n_layer: int, n_embd: int) -> GPTConfig:
    """A config of the exercise's search space: V=65, T=256, head size 64, no biases, tied."""
    return GPTConfig(vocab_size=BUDGET_VOCAB_SIZE, block_size=BUDGET_BLOCK_SIZE, n_layer=n_layer,
                     n_head=n_embd // BUDGET_HEAD_SIZE, n_embd=n_embd)


def _best_under(budget: int) -> int | None:
    counts = [count_parameters(budget_config(L, C)) for L in BUDGET_LAYERS for C in BUDGET_WIDTHS]
    fitting = [n for n in counts if n <= budget]
    return max(fitting) if fitting else None


def check_best_config(fn) -> None:
    """``fn(budget) -> GPTConfig | None``: among n_layer in 1..16 and n_embd in 64, 128, ..., 1024
    (n_head = n_embd // 64, vocab_size 65, block_size 256, other fields at their defaults), the
    config with the most parameters that does not exceed ``budget``; None if none fits."""
    exact = count_parameters(budget_config(6, 384))  # a budget met exactly: <= budget, not < budget
    for budget in (1_000_000, exact, 10_000_000, 100_000, 45_000_000, 10**9, 50_000):
        best = _best_under(budget)
        got = call(fn, budget, none_ok=True)  # None is the answer when nothing fits
        if best is None:
            if got is not None:
                fail(f"with a budget of {budget:,} no config fits (the smallest has "
                     f"{count_parameters(budget_config(1, 64)):,} parameters), but you returned "
                     f"{got!r}.",
                     "return None when nothing fits the budget.")
            continue
        if got is None:
            fail(f"with a budget of {budget:,} your function returned None, but a config with "
                 f"{best:,} parameters fits.",
                 "return None only when nothing fits; otherwise did you forget the `return` "
                 "statement?")
        if not isinstance(got, GPTConfig):
            fail(f"with a budget of {budget:,} expected a GPTConfig, got {describe(got)}.",
                 "return the winning config, e.g. budget_config(n_layer, n_embd).")
        if (got.vocab_size, got.block_size) != (BUDGET_VOCAB_SIZE, BUDGET_BLOCK_SIZE) \
                or got.n_layer not in BUDGET_LAYERS or got.n_embd not in BUDGET_WIDTHS \
                or got.n_embd != got.n_head * BUDGET_HEAD_SIZE or got.bias or not got.tie_weights \
                or got.norm_position != "pre":
            fail(f"with a budget of {budget:,} you returned {_describe(got)}, which is outside the "
                 "search space.",
                 "only n_layer (1..16) and n_embd (64, 128, ..., 1024, with n_head = n_embd // 64) "
                 "vary; build candidates with course_lib.exercises.ch06.budget_config(n_layer, "
                 "n_embd).")
        n = count_parameters(got)
        if n > budget:
            fail(f"with a budget of {budget:,} your config has {n:,} parameters: over the budget.",
                 "keep only the configs whose count is <= budget, then take the largest.")
        if n < best:
            hint = ("the budget can be met exactly: keep counts <= budget, not < budget."
                    if best == budget else
                    "try every (n_layer, n_embd) pair: the largest model under a budget is not "
                    "always the deepest or the widest one.")
            fail(f"with a budget of {budget:,} your config has {n:,} parameters, but one with "
                 f"{best:,} fits.", hint)
    passed("you found the largest model under every budget (and None when nothing fits).")


def _logits_without_ln_f(model, idx):
    T = idx.shape[1]
    x = model.wte(idx) + model.wpe(torch.arange(T, device=idx.device))
    for block in model.blocks:
        x = block(x)
    return model.lm_head(x)


def check_gpt_logits(fn) -> None:
    """Spot the bug: ``fn(model, idx) -> logits (B, T, V)``, the GPT's forward pass written out
    (embeddings, blocks, final LayerNorm, LM head), equal to ``model(idx)[0]``."""
    for seed in (0, 1):
        torch.manual_seed(seed)
        model = GPT(GPTConfig(vocab_size=13, block_size=8, n_layer=2, n_head=2, n_embd=16,
                              bias=True)).eval()
        with torch.no_grad():  # a LayerNorm that is far from the identity, as after training
            model.ln_f.weight.uniform_(0.5, 2.0)
            model.ln_f.bias.normal_(0.0, 0.5)
        idx = torch.randint(13, (3, 8), generator=torch.Generator().manual_seed(seed))
        with torch.no_grad():
            got = call(fn, model, idx)
            expected = model(idx)[0]
            if isinstance(got, torch.Tensor) and got.shape == expected.shape:
                expect_tensor(got, expected.shape, "your logits", dtype=expected.dtype,
                              dtype_hint="the LM head returns float32 logits: return them as they "
                                         "are.")
            if isinstance(got, torch.Tensor) and got.shape == expected.shape and torch.allclose(
                    got, _logits_without_ln_f(model, idx), atol=1e-5):
                fail("your logits equal those of a model without its final LayerNorm.",
                     "`self.ln_f` is created in __init__ but never applied: normalise x after the "
                     "last block, before the LM head.")
        if not isinstance(got, torch.Tensor) or got.shape != expected.shape:
            fail(f"expected logits of shape {tuple(expected.shape)}, got "
                 f"{tuple(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__}.",
                 "return the LM head's output, (B, T, V).")
        if not torch.allclose(got, expected, atol=1e-5):
            fail("your logits differ from model(idx)[0].",
                 "embeddings wte(idx) + wpe(positions), every block in order, ln_f, then lm_head.")
    passed("the final LayerNorm is applied: your logits equal the model's.")
