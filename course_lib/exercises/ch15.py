"""Checks for chapter 15, Fine-tuning: ``from course_lib.exercises import ch15``.

Each check draws its inputs from its own generator, or runs under ``torch.random.fork_rng``:
the notebook's global random state is left alone."""
from __future__ import annotations

import torch
import torch.nn as nn

from ..lora import LoRALinear
from ..model import GPTConfig
from ..utils import IGNORE_INDEX
from . import as_integer, call, call_with_hints, expect_close, expect_tensor, fail, passed


def check_mask_prompt(fn) -> None:
    """``fn(targets, n_prompt) -> tensor``: ``targets`` (T,) are the next-token targets of one
    example ``prompt + SEP + answer + END`` (its ids shifted by one), ``n_prompt`` the number of
    ids in ``prompt + SEP``. Return a copy with IGNORE_INDEX on every target inside the prompt,
    so that the loss counts the answer (and END) alone; ``targets`` itself stays unchanged."""
    g = torch.Generator().manual_seed(15)
    for n_prompt, n_answer in ((4, 3), (1, 5), (9, 11)):
        ids = torch.randint(0, 50, (n_prompt + n_answer,), generator=g)
        targets = ids[1:].clone()
        kept = targets.clone()
        got = call(fn, targets, n_prompt)
        expect_tensor(got, targets.shape, f"mask_prompt(targets, {n_prompt})",
                      "return a tensor of the same shape as targets", dtype=torch.long,
                      dtype_hint="F.cross_entropy takes targets of dtype torch.long (int64) only: "
                                 "keep targets' dtype (out = targets.clone(), then assign "
                                 "IGNORE_INDEX)")
        if not torch.equal(targets, kept):
            fail("mask_prompt changed the targets you were given.", "work on targets.clone()")
        expected = targets.clone()
        expected[:n_prompt - 1] = IGNORE_INDEX
        if torch.equal(got, expected):
            continue
        n_masked = int((got == IGNORE_INDEX).sum())
        changed = got != targets
        if torch.equal(changed, expected != targets) and n_prompt > 1:
            fail(f"mask_prompt(targets, {n_prompt}) changed the right positions but wrote "
                 f"{got[0].item()} there (got {got.tolist()}).",
                 f"use IGNORE_INDEX ({IGNORE_INDEX}), the value F.cross_entropy skips; any other "
                 "value is trained on")
        if n_masked == n_prompt:
            fail(f"with a prompt of {n_prompt} ids you masked {n_prompt} targets: one too many. "
                 "The target at the separator's position is the answer's first character.",
                 "targets[i] is ids[i + 1]: the prompt's targets are ids[1:n_prompt], i.e. "
                 "targets[:n_prompt - 1]")
        fail(f"mask_prompt(targets, {n_prompt}) masked the wrong positions: {got.tolist()} "
             f"(expected {expected.tolist()}).",
             "targets[i] is the id after position i; mask targets[:n_prompt - 1]")
    passed("only the answer's targets (and the end token) are left for the loss.")


def check_lora_forward(fn) -> None:
    """``fn(x, W, b, A, B, alpha, rank) -> y``: the output of a LoRA layer: x (B, T, in),
    W (out, in) and b (out,) the frozen base, A (rank, in), B (out, rank)."""
    with torch.random.fork_rng():  # nn.Linear and LoRALinear draw their initial weights from it
        _check_lora_forward(fn)
    passed("base output plus the scaled low-rank update.")


def _check_lora_forward(fn) -> None:
    g = torch.Generator().manual_seed(150)
    for rank, alpha in ((4, 8.0), (2, 2.0), (8, 32.0)):
        base = nn.Linear(12, 20)
        layer = LoRALinear(base, rank, alpha)
        with torch.no_grad():
            base.weight.copy_(torch.randn(20, 12, generator=g))
            base.bias.copy_(torch.randn(20, generator=g))
            layer.lora_A.copy_(torch.randn(rank, 12, generator=g))
            layer.lora_B.copy_(torch.randn(20, rank, generator=g))
        x = torch.randn(3, 5, 12, generator=g)
        with torch.no_grad():
            expected = layer(x)
            got = call_with_hints(fn, {"cannot be multiplied": "A is (rank, in) and B (out, rank): "
                                                               "the update is "
                                       "x @ A.T @ B.T, or x @ (B @ A).T; A @ B does not fit these "
                                       "shapes"},
                                  x, base.weight.clone(), base.bias.clone(), layer.lora_A.clone(),
                                  layer.lora_B.clone(), alpha, rank,
                                  context=f"(x is {tuple(x.shape)}, W {tuple(base.weight.shape)}, "
                                          f"A {tuple(layer.lora_A.shape)}, B "
                                          f"{tuple(layer.lora_B.shape)}) ")
            expect_tensor(got, expected.shape, "lora_forward(...)",
                          "x (B, T, in) @ W.T gives (B, T, out); the update is x @ A.T @ B.T",
                          dtype=expected.dtype,
                          dtype_hint="x, W, b, A and B are float32, and so is the "
                          "layer's output: build no tensor in another dtype (no .double(), no "
                          ".half())")
            no_scale = base(x) + x @ layer.lora_A.t() @ layer.lora_B.t()
            inverse = base(x) + (rank / alpha) * x @ layer.lora_A.t() @ layer.lora_B.t()
        if alpha != rank and torch.allclose(got, no_scale, atol=1e-4):
            fail("your update is not scaled: it is x A^T B^T, without alpha / rank.",
                 "multiply it by alpha / rank")
        if alpha != rank and torch.allclose(got, inverse, atol=1e-4):
            fail("you scaled the update by rank / alpha: it is alpha / rank.",
                 "scaling = alpha / rank")
        expect_close(got, expected, "lora_forward(...)", "y = x W^T + b + (alpha / rank) x A^T B^T",
                     atol=1e-4)


def check_merge(fn) -> None:
    """``fn(W, A, B, alpha, rank) -> W_merged`` (out, in): the weight of one plain linear layer
    that computes what the LoRA layer computes."""
    g = torch.Generator().manual_seed(1500)
    for rank, alpha in ((3, 6.0), (5, 1.0)):
        W, A, B = (
            torch.randn(7, 11, generator=g),
            torch.randn(rank, 11, generator=g),
            torch.randn(7, rank, generator=g),
        )
        got = call_with_hints(fn, {"cannot be multiplied": "B @ A is (out, r) @ (r, in) = (out, "
                                                           "in), like W; "
                                   "A @ B (or A.T @ B.T) does not fit these shapes",
                                   "must match the size": "A.T @ B.T is (in, r) @ (r, out) = (in, "
                                                          "out), the "
                                   "transpose of W's (out, in), so it cannot be added to W: the "
                                   "update is B @ A, (out, r) @ (r, in)"},
                              W.clone(), A, B, alpha, rank,
                              context=f"(W is {tuple(W.shape)}, A {tuple(A.shape)}, B "
                                      f"{tuple(B.shape)}) ")
        if isinstance(got, nn.Module):
            fail("merge returned a module; return the merged weight tensor (out, in).",
                 "return W + (alpha / rank) * B @ A, a tensor")
        expect_tensor(got, W.shape, "merge(W, A, B, alpha, rank)",
                      "B @ A is (out, in), like W; A @ B is not")
        expect_close(got, W + (alpha / rank) * B @ A, "merge(W, A, B, alpha, rank)",
                     "W + (alpha / rank) * B @ A", atol=1e-4)
    passed("one matrix, W + (alpha / r) B A: the merged model is as fast as the original.")


def check_lora_count(fn) -> None:
    """``fn(config, rank) -> int``: trainable parameters of LoRA on the attention projections
    (c_attn: C -> 3C, c_proj: C -> C) of every block of a GPT with ``config``."""
    for C, L, r in ((128, 4, 8), (768, 12, 4), (64, 2, 1)):
        config = GPTConfig(vocab_size=65, block_size=64, n_layer=L, n_head=4, n_embd=C)
        got = as_integer(call(fn, config, r), f"lora_count(C={C}, n_layer={L}, rank={r})")
        expected = L * (r * (C + 3 * C) + r * (C + C))
        if got == L * r * 2 * C * 2:
            fail(f"for C={C}, {L} layers, rank {r}: {got}; c_attn maps C to 3C, not C to C.",
                 "a wrapped layer trains r * (in + out): c_attn has in = C, out = 3C")
        if got != expected:  # the expected count is not printed: it would give the answer away
            fail(f"lora_count(C={C}, n_layer={L}, rank={r}) returned {got:,}, which is not the "
                 "count.",
                 "a wrapped layer trains r * (in + out); add it up for c_attn and c_proj, per "
                 "block, over n_layer blocks")
    passed("6 r C per block: a tiny share of the 12 C^2 each block holds.")


def check_lora_init(make_layer) -> None:
    """Spot the bug: ``make_layer(base, rank, alpha) -> nn.Module``, a LoRA layer around the
    ``nn.Linear`` ``base`` that starts *exactly* as ``base`` and still learns from the first step:
    the whole base (weight and bias) frozen, only a rank-``rank`` adapter trainable."""
    # the student's layer draws from the global generator: not the notebook's
    with torch.random.fork_rng():
        torch.manual_seed(0)
        _check_lora_init(make_layer)


def _check_lora_init(make_layer, d_in: int = 16, d_out: int = 24, rank: int = 4) -> None:
    base = nn.Linear(d_in, d_out)
    layer = call(make_layer, base, rank, 8.0)
    if not isinstance(layer, nn.Module):
        fail(f"make_layer returned a {type(layer).__name__}, not a module.",
             "return the LoRA layer itself: an nn.Module whose forward adds (x A^T B^T) * alpha / "
             "r to base(x)")
    x = torch.randn(2, 5, d_in)
    with torch.no_grad():
        out = call(layer, x)
    expect_tensor(out, (2, 5, d_out), "the layer's output for x (2, 5, 16)",
                  "a LoRA layer maps (B, T, in) to (B, T, out) like its base: base(x) + scale * (x "
                  "@ A.T) @ B.T")
    trainable = {n: p for n, p in layer.named_parameters() if p.requires_grad}
    for which in ("weight", "bias"):
        if any(p is getattr(base, which) for p in trainable.values()):
            fail(f"the base layer's {which} is still trainable.",
                 "freeze the whole base layer, weight and bias: base.requires_grad_(False)")
    copies = [n for n, p in trainable.items() if p.shape == base.weight.shape
              or (p.shape == base.bias.shape and torch.equal(p.detach(), base.bias.detach()))]
    extras = [n for n, p in trainable.items() if p.shape == base.bias.shape and n not in copies]
    if extras and not copies:
        fail(f"the layer also trains {', '.join(extras)}, a vector of {d_out} numbers (one per "
             "output, like a gain or a second bias) besides the adapter: LoRA trains the low-rank "
             "matrices A and B only.",
             "drop the extra parameter (or freeze it): train only A (r, in) and B (out, r)")
    if copies:
        fail(f"the layer trains {', '.join(copies)}, of the base layer's own shape: a trainable "
             "copy of the base is full fine-tuning of this layer, not LoRA.",
             "keep self.base as the (frozen) base layer you are given; train only A (r, in) and B "
             "(out, r)")
    budget = rank * (d_in + d_out)
    if sum(p.numel() for p in trainable.values()) > budget:
        fail(f"the layer trains {sum(p.numel() for p in trainable.values())} numbers; a "
             f"rank-{rank} adapter trains r (in + out) = {budget}.",
             "train A (r, in) and B (out, r) only")
    if not torch.equal(out, base(x).detach()):
        fail("the new layer does not start as the base layer: its update is not zero at the start, "
             "so fine-tuning begins from a damaged model.", "start B at zero (and A random)")
    if not trainable:
        fail("nothing in this layer trains: no parameter has requires_grad.",
             "make A and B nn.Parameter (trainable) and freeze only the base")
    layer(x).pow(2).sum().backward()
    if any(p.grad is not None and p.grad.abs().sum() > 0 for p in trainable.values()):
        a_zero = all(not t.any() for n, t in _tensors(layer) if t.shape == (rank, d_in))
        passed("A = 0 with B random also starts exact and learns (A's gradient is B^T dy x, not "
               "zero); the convention (Hu et al. 2021, peft) is the other way round, B = 0 and A "
               "random." if a_zero else
               "B = 0 makes the start exact; a random A lets B learn at once.")
        return
    buffers = [n for n, t in layer.named_buffers() if t.shape in ((rank, d_in), (d_out, rank))]
    if buffers:
        fail(f"{', '.join(buffers)} is a buffer, not a parameter: it never trains, and with B = 0 "
             "fixed no gradient reaches the rest.", "register A and B with nn.Parameter(...)")
    if all(not t.any() for n, t in _tensors(layer) if t.shape in ((rank, d_in), (d_out, rank))):
        fail("no adapter parameter gets a gradient: with A and B both zero, each blocks the "
             "other's gradient and training never starts.",
             "keep A random: B's gradient is (x A^T)^T dy")
    fail("no trainable parameter gets a gradient at the first step.",
         "the update (alpha / r) x A^T B^T must be computed from trainable A and B in forward")


def _tensors(module: nn.Module):
    return [*module.named_parameters(), *module.named_buffers()]
