"""Optimizers and learning-rate schedules (chapters 2 and 7; Muon and warm-up/stable/decay for
chapter 14's CPU speedrun).

- ``configure_optimizer``: AdamW with weight decay on matrices only (the default), or Muon for the
  hidden weight matrices with AdamW for everything else (``optimizer="muon"``).
- Schedules: ``constant_lr``, ``cosine_lr`` (linear warm-up, half a cosine), ``transformer_lr``
  (the 2017 paper's), ``wsd_lr`` (warm-up, stable, linear decay); ``lr_at`` picks the one a
  :class:`~course_lib.train.TrainConfig` names, ``set_lr`` writes it into an optimizer.

The config is any object with the fields of :class:`OptimizerSettings` (a ``TrainConfig`` has
them all): this module knows those names, not the Trainer's config, which sits a layer above.
"""
from __future__ import annotations

import math
from typing import Protocol

import torch
import torch.nn as nn


class OptimizerSettings(Protocol):
    """What the optimizers and schedules read of a training config (``TrainConfig`` has these)."""
    max_iters: int
    learning_rate: float
    min_lr: float
    warmup_iters: int
    lr_decay_iters: int | None
    schedule: str
    cooldown_fraction: float
    weight_decay: float
    beta1: float
    beta2: float
    optimizer: str
    muon_lr: float
    muon_momentum: float


OPTIMIZERS = ("adamw", "muon")
SCHEDULES = ("constant", "cosine", "transformer", "wsd")


# --- learning-rate schedules ----------------------------------------------------------------


def constant_lr(step: int, learning_rate: float) -> float:
    return learning_rate


def cosine_lr(step: int, learning_rate: float, min_lr: float, warmup_iters: int,
              decay_iters: int) -> float:
    """Linear warmup from ~0 to ``learning_rate`` over ``warmup_iters`` steps, then a half cosine
    down to ``min_lr`` at ``decay_iters``, then flat."""
    if step < warmup_iters:
        return learning_rate * (step + 1) / (warmup_iters + 1)
    if step >= decay_iters:
        return min_lr
    progress = (step - warmup_iters) / max(1, decay_iters - warmup_iters)  # 0 -> 1
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * progress)) * (learning_rate - min_lr)


def transformer_lr(step: int, n_embd: int, warmup_iters: int, scale: float = 1.0) -> float:
    """The 2017 paper's schedule: lr = C^-0.5 * min(step^-0.5, step * warmup^-1.5), steps from 1.
    It rises linearly for ``warmup_iters`` steps, then decays as 1/sqrt(step)."""
    s = step + 1
    return scale * n_embd**-0.5 * min(s**-0.5, s * warmup_iters**-1.5)


def wsd_lr(step: int, learning_rate: float, min_lr: float, warmup_iters: int, decay_iters: int,
           cooldown_fraction: float) -> float:
    """Warm-up, stable, decay (Hu et al. 2024, "MiniCPM"; the GPU speedrun records' schedule):
    the same linear warm-up as :func:`cosine_lr`, then ``learning_rate`` held flat, then a straight
    line down to ``min_lr`` over the last ``cooldown_fraction`` of the ``decay_iters`` steps,
    then flat at ``min_lr``.

    Why: the loss falls fastest at a high, constant learning rate, and most of the gain of a decay
    comes in a short final anneal; a cosine spends half the run at rates well below the peak."""
    if step < warmup_iters:
        return learning_rate * (step + 1) / (warmup_iters + 1)
    if step >= decay_iters:
        return min_lr
    decay_start = max(warmup_iters, decay_iters - round(cooldown_fraction * decay_iters))
    if step < decay_start:
        return learning_rate
    progress = (step - decay_start) / max(1, decay_iters - decay_start)  # 0 -> 1
    return learning_rate + progress * (min_lr - learning_rate)


def lr_at(step: int, config: OptimizerSettings, n_embd: int | None = None) -> float:
    """The learning rate a :class:`~course_lib.train.Trainer` uses at ``step`` under
    ``config.schedule`` (AdamW's; Muon's matrices get ``config.muon_lr / config.learning_rate``
    times it)."""
    if config.schedule == "constant":
        return constant_lr(step, config.learning_rate)
    if config.schedule == "cosine":
        return cosine_lr(step, config.learning_rate, config.min_lr, config.warmup_iters,
                         config.lr_decay_iters or config.max_iters)
    if config.schedule == "wsd":
        return wsd_lr(step, config.learning_rate, config.min_lr, config.warmup_iters,
                      config.lr_decay_iters or config.max_iters, config.cooldown_fraction)
    if n_embd is None:
        raise ValueError("the 'transformer' schedule needs n_embd")
    return transformer_lr(step, n_embd, max(1, config.warmup_iters))


def set_lr(optimizer, lr: float) -> None:
    """Write this step's learning rate into every parameter group. A group with an ``lr_scale``
    (Muon's, see :func:`configure_optimizer`) follows the same schedule at that multiple."""
    for group in optimizer.param_groups:
        group["lr"] = lr * group["lr_scale"] if "lr_scale" in group else lr


# --- optimizers -------------------------------------------------------------------------------


def configure_optimizer(model: nn.Module, config: OptimizerSettings):
    """The optimizer ``config.optimizer`` names for ``model``'s trainable parameters.

    ``"adamw"``: AdamW where only matrices (embeddings, Linear weights) are decayed; biases and
    LayerNorm gains are not, since shrinking them toward 0 has no regularising meaning.
    ``"muon"``: a :class:`MuonWithAdamW` (see :func:`muon_param_groups` for which parameter goes
    where)."""
    if config.optimizer == "muon":
        return MuonWithAdamW(model, config)
    params = [p for p in model.parameters() if p.requires_grad]  # a tied matrix appears once
    return adamw([p for p in params if p.dim() >= 2], [p for p in params if p.dim() < 2], config)


def adamw(matrices: list, vectors: list, config: OptimizerSettings) -> torch.optim.AdamW:
    """AdamW with ``config.weight_decay`` on ``matrices`` and none on ``vectors`` (biases,
    gains)."""
    groups = [{"params": matrices, "weight_decay": config.weight_decay},
              {"params": vectors, "weight_decay": 0.0}]
    params = matrices + vectors
    # one kernel for all parameters on a GPU
    fused = bool(params) and all(p.is_cuda for p in params)
    return torch.optim.AdamW(groups, lr=config.learning_rate, betas=(config.beta1, config.beta2),
                             fused=fused)


def muon_param_groups(model: nn.Module, head_name: str = "lm_head") -> tuple[list, list, list]:
    """Split ``model``'s trainable parameters as the GPU speedrun records do:
    (hidden matrices for Muon, other matrices for AdamW with decay, vectors for AdamW without).

    Hidden matrices are the weights of ``nn.Linear`` layers inside the network: they map one
    hidden vector to another, and Muon's orthogonalised update suits exactly those. The token
    and position embeddings are lookup tables (each step updates only the rows it saw) and the
    output head (the module named ``head_name``, or a matrix tied to an embedding) maps to
    logits: both stay with AdamW, as do gains and biases (Muon takes only 2-D tensors)."""
    embeddings = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    head = {id(m.weight) for name, m in model.named_modules()
            if isinstance(m, nn.Linear) and name.split(".")[-1] == head_name}
    linear = {id(m.weight) for m in model.modules() if isinstance(m, nn.Linear)}
    hidden, other, vectors = [], [], []
    for p in model.parameters():  # each tensor once, even when tied
        if not p.requires_grad:
            continue
        if p.dim() < 2:
            vectors.append(p)
        elif id(p) in linear and id(p) not in embeddings and id(p) not in head:
            hidden.append(p)
        else:
            other.append(p)
    return hidden, other, vectors


def newton_schulz(update: torch.Tensor, coefficients: tuple[float, float, float], steps: int,
                  eps: float, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The nearest semi-orthogonal matrix to ``update`` (R, K), approximately: Muon's quintic
    Newton-Schulz iteration X <- a X + (b A + c A^2) X with A = X X^T, from X = update / |update|_F
    (so that every singular value starts at most 1; the iteration pushes each towards 1).
    Computed on the wide orientation (the Gram matrix A is min(R, K) square) in ``dtype``.

    torch.optim.Muon computes it in bfloat16, which is fast on a GPU; on a CPU without native
    bfloat16 matmuls (AVX2) it is about 20x slower than float32, so we default to float32."""
    a, b, c = coefficients
    x = update.to(dtype)
    tall = update.size(0) > update.size(1)
    if tall:
        x = x.T
    x.div_(x.norm().clamp(min=eps))
    for _ in range(steps):
        gram = x @ x.T  # (r, r), r = min(R, K)
        x = torch.addmm(x, torch.addmm(gram, gram, gram, beta=b, alpha=c), x, beta=a)
    return x.T if tall else x


def muon_lr_ratio(shape: torch.Size, adjust_lr_fn: str | None) -> float:
    """How torch.optim.Muon scales the learning rate of a (R, K) matrix: sqrt(max(1, R / K))
    ("original", Keller Jordan's), or 0.2 sqrt(max(R, K)) ("match_rms_adamw", Moonshot's, which
    gives the update the RMS of an AdamW update)."""
    rows, cols = shape[:2]
    if adjust_lr_fn is None or adjust_lr_fn == "original":
        return math.sqrt(max(1, rows / cols))
    if adjust_lr_fn == "match_rms_adamw":
        return 0.2 * math.sqrt(max(rows, cols))
    return 1.0


class Muon(torch.optim.Muon):
    """``torch.optim.Muon`` (same arguments, same state, same update) with the Newton-Schulz
    iteration in ``ns_dtype``: float32 by default, where torch's computes in bfloat16 (see
    :func:`newton_schulz`). With ``ns_dtype=torch.bfloat16`` it equals torch's, bit for bit
    (tests/test_optim.py).

    One step, for each matrix W with gradient G and momentum buffer B (0 at first):
    B <- mu B + (1 - mu) G;  U = G + mu (B - G) (Nesterov) or B;  O = NS(U);
    W <- (1 - lr wd) W - lr * ratio * O, with ``ratio`` from :func:`muon_lr_ratio`."""

    def __init__(self, params, *, ns_dtype: torch.dtype = torch.float32, **kwargs):
        super().__init__(params, **kwargs)
        self.ns_dtype = ns_dtype

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            lr, momentum = group["lr"], group["momentum"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if "momentum_buffer" not in state:
                    state["momentum_buffer"] = torch.zeros_like(p.grad,
                                                                memory_format=torch.preserve_format)
                buf = state["momentum_buffer"]
                buf.lerp_(p.grad, 1 - momentum)
                update = p.grad.lerp(buf, momentum) if group["nesterov"] else buf
                update = newton_schulz(update, group["ns_coefficients"], group["ns_steps"],
                                       group["eps"], self.ns_dtype)
                p.mul_(1 - lr * group["weight_decay"])
                p.add_(update, alpha=-lr * muon_lr_ratio(p.shape, group["adjust_lr_fn"]))
        return loss


class MuonWithAdamW:
    """Two optimizers stepped as one: ``torch.optim.Muon`` for the hidden matrices and AdamW for
    the rest (:func:`muon_param_groups`), with the interface the Trainer and the checkpoint use:
    ``param_groups`` (Muon's group first), ``zero_grad``, ``step``, ``state_dict`` and
    ``load_state_dict`` (both optimizers' states, Muon's momentum buffers included, so a resumed
    run continues bit for bit).

    Muon (Jordan et al. 2024) keeps one momentum buffer per matrix and replaces the update by
    its nearest semi-orthogonal matrix (5 Newton-Schulz iterations): every direction of the
    matrix moves by the same amount, whatever the scale of its gradient. Its learning rate is
    ``config.muon_lr``, scaled by ``sqrt(max(1, rows / cols))`` (torch's "original" adjustment:
    the update's RMS stays the same for tall matrices); the schedule multiplies it like AdamW's
    (the group's ``lr_scale`` is ``muon_lr / learning_rate``)."""

    def __init__(self, model: nn.Module, config: OptimizerSettings):
        hidden, other, vectors = muon_param_groups(model)
        if not hidden:
            raise ValueError("optimizer 'muon' found no hidden weight matrices (nn.Linear weights "
                             "other than the head) in this model: use optimizer 'adamw'")
        # bfloat16 Newton-Schulz pays on a GPU only (newton_schulz)
        on_gpu = all(p.is_cuda for p in hidden)
        self.muon = Muon(
            [{"params": hidden, "lr_scale": config.muon_lr / config.learning_rate}],
            lr=config.muon_lr, weight_decay=config.weight_decay, momentum=config.muon_momentum,
            nesterov=True, adjust_lr_fn="original",
            ns_dtype=torch.bfloat16 if on_gpu else torch.float32)
        self.adamw = adamw(other, vectors, config)

    @property
    def param_groups(self) -> list[dict]:
        return self.muon.param_groups + self.adamw.param_groups

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.muon.zero_grad(set_to_none=set_to_none)
        self.adamw.zero_grad(set_to_none=set_to_none)

    @torch.no_grad()
    def step(self, closure=None) -> None:
        if closure is not None:
            raise ValueError("MuonWithAdamW.step takes no closure")
        self.muon.step()
        self.adamw.step()

    def state_dict(self) -> dict:
        return {"muon": self.muon.state_dict(), "adamw": self.adamw.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        if set(state) != {"muon", "adamw"}:
            raise ValueError("expected the state of a Muon + AdamW optimizer (keys 'muon', "
                             f"'adamw'), got keys {sorted(state)[:6]}: the checkpoint was trained "
                             "with another optimizer")
        self.muon.load_state_dict(state["muon"])
        self.adamw.load_state_dict(state["adamw"])
