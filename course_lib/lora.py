"""LoRA, low-rank adaptation, from scratch (chapter 15; Hu et al. 2021).

Fine-tuning changes a pretrained weight W (out, in) by some dW. LoRA bets that a useful dW has
low rank and writes it as a product of two thin matrices, trained while W stays frozen:

    y = x W^T + (alpha / r) * x A^T B^T        A: (r, in), B: (out, r), r << min(in, out)

- B starts at zero, so the adapted model starts *exactly* equal to the pretrained one;
- A starts random (Kaiming-uniform with a = sqrt(5), nn.Linear's own initialisation, as in
  the ``peft`` library), so that B's gradient, which is (alpha / r) * dy^T (x A^T), is not zero;
- ``alpha / r``: Hu et al. chose it to spare re-tuning the learning rate when r changes, but it
  does not keep the update's size fixed: at initialisation one Adam step on B moves W like
  sqrt(r) at alpha = r, and like 1 / sqrt(r) at a fixed alpha; only rsLoRA's alpha / sqrt(r)
  keeps it constant (chapter 15 measures it).

A wrapped layer trains ``r * (in + out)`` numbers instead of ``in * out``; after training,
:func:`merge_lora` folds ``W + (alpha / r) B A`` back into a plain ``nn.Linear``, so the
fine-tuned model runs exactly as fast as the original.

``tests/test_lora.py`` proves :func:`add_lora` equal to ``peft``'s LoRA on a GPT-2.

Shapes: B batch, T time, in/out the features of a wrapped ``nn.Linear``, r the rank.
"""
from __future__ import annotations

import math
import re

import torch
import torch.nn as nn

# Our GPT's attention projections (course_lib/attention.py CausalSelfAttention): the fused
# query/key/value projection and the output projection. "attn.c_proj" and not "c_proj": the
# MLP's second layer is also called c_proj (course_lib/model.py FeedForward).
DEFAULT_TARGETS = ("attn.c_attn", "attn.c_proj")


class LoRALinear(nn.Module):
    """A frozen ``nn.Linear`` plus a trainable low-rank update: (B, T, in) -> (B, T, out).

    ``forward(x) = base(x) + (alpha / rank) * dropout(x) @ A^T @ B^T`` with ``lora_A`` (r, in)
    random and ``lora_B`` (out, r) zero at the start.
    """

    def __init__(self, base: nn.Linear, rank: int, alpha: float, dropout: float = 0.0):
        super().__init__()
        if not isinstance(base, nn.Linear):
            raise TypeError(f"LoRALinear wraps an nn.Linear, got {type(base).__name__}")
        check_rank(rank, alpha)
        self.base = base.requires_grad_(False)
        self.rank, self.alpha = rank, alpha
        self.scaling = alpha / rank
        w = base.weight
        self.lora_A = nn.Parameter(torch.empty(rank, base.in_features, device=w.device,
                                               dtype=w.dtype))
        self.lora_B = nn.Parameter(torch.zeros(base.out_features, rank, device=w.device,
                                               dtype=w.dtype))
        nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))  # what nn.Linear (and peft) use
        self.dropout = nn.Dropout(dropout) if dropout > 0 else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Two thin products, (.., in) -> (.., r) -> (.., out): never the (out, in) matrix B A.
        update = (self.dropout(x) @ self.lora_A.t()) @ self.lora_B.t()
        return self.base(x) + self.scaling * update

    def delta_weight(self) -> torch.Tensor:
        """The update this adapter adds to the weight: (alpha / r) * B @ A, shape (out, in)."""
        return self.scaling * (self.lora_B @ self.lora_A)

    def merged(self) -> nn.Linear:
        """A plain ``nn.Linear`` computing the same function (up to float rounding)."""
        base = self.base
        out = nn.Linear(base.in_features, base.out_features, bias=base.bias is not None,
                        device=base.weight.device, dtype=base.weight.dtype)
        with torch.no_grad():
            out.weight.copy_(base.weight + self.delta_weight())
            if base.bias is not None:
                out.bias.copy_(base.bias)
        return out.requires_grad_(base.weight.requires_grad)

    def extra_repr(self) -> str:
        return f"rank={self.rank}, alpha={self.alpha}, scaling={self.scaling:g}"


def check_rank(rank, alpha) -> None:
    if not isinstance(rank, int) or isinstance(rank, bool) or rank < 1:
        raise ValueError(f"LoRA rank must be a positive integer, got {rank!r}")
    if (not isinstance(alpha, (int, float)) or isinstance(alpha, bool) or not math.isfinite(alpha)
        or not alpha > 0):
        raise ValueError("LoRA alpha must be a positive finite number (the update is scaled by "
                         f"alpha / rank), got {alpha!r}")


def check_rank_fits(rank: int, layers: dict[str, nn.Linear]) -> None:
    """A rank above min(in, out) of a layer adds nothing a full matrix could not (B A is then any
    matrix) and only costs memory: refused before A and B are allocated."""
    name, layer = min(layers.items(),
                      key=lambda item: min(item[1].in_features, item[1].out_features))
    most = min(layer.in_features, layer.out_features)
    if rank > most:
        raise ValueError(f"LoRA rank {rank:,} is larger than {name} allows: at most min(in "
                         f"{layer.in_features}, out {layer.out_features}) = {most}, where B A is "
                         f"already a full matrix; choose a rank <= {most} (ranks of 4 to 16 are "
                         "usual)")


def short_name(name: str) -> str:
    """A layer's name without its block number: "blocks.3.attn.c_attn" -> "attn.c_attn"."""
    return re.sub(r"^blocks\.\d+\.", "", name)


def matches(name: str, targets) -> bool:
    """Does module ``name`` match one of ``targets``? A target is a full name or the tail of
    one after a dot (peft's rule): "attn.c_attn" matches "blocks.0.attn.c_attn"."""
    return any(name == t or name.endswith("." + t) for t in targets)


def target_layers(model: nn.Module, targets=DEFAULT_TARGETS) -> dict[str, nn.Linear]:
    """``{name: layer}`` for the ``nn.Linear`` layers of ``model`` that ``targets`` name. A
    target naming nothing, or something other than an ``nn.Linear``, is an error."""
    if isinstance(targets, str):
        targets = (targets,)
    targets = tuple(targets)
    if not targets:
        raise ValueError("LoRA targets is empty: name at least one nn.Linear layer, e.g. "
                         f"targets={DEFAULT_TARGETS!r} (the default)")
    blank = [t for t in targets if not isinstance(t, str) or not t.strip()]
    if blank:
        raise ValueError(f"LoRA targets must be layer names, got {blank[0]!r} among "
                         f"{list(targets)!r}; e.g. {', '.join(DEFAULT_TARGETS)}")
    found = {name: m for name, m in model.named_modules() if name and matches(name, targets)}
    for name, m in found.items():
        if isinstance(m, LoRALinear):
            raise ValueError(f"{name} already has a LoRA adapter: merge_lora(model) first, or "
                             "add_lora once")
        if not isinstance(m, nn.Linear):
            raise ValueError(f"LoRA target {name} is a {type(m).__name__}; targets must name "
                             "nn.Linear layers")
    unused = [t for t in targets if not any(matches(name, (t,)) for name in found)]
    if unused:
        linear = sorted({short_name(n) for n,
                         m in model.named_modules() if isinstance(m, nn.Linear)})
        raise ValueError(f"LoRA target(s) {', '.join(map(repr, unused))} match no layer of this "
                         f"model; its nn.Linear layers are named like: {', '.join(linear)}")
    return found


def _set_module(model: nn.Module, name: str, module: nn.Module) -> None:
    parent_name, _, child = name.rpartition(".")
    setattr(model.get_submodule(parent_name) if parent_name else model, child, module)


def add_lora(model: nn.Module, rank: int = 8, alpha: float = 8.0, targets=DEFAULT_TARGETS,
             dropout: float = 0.0) -> nn.Module:
    """Freeze every parameter of ``model`` and wrap the ``nn.Linear`` layers named by
    ``targets`` (default: the attention projections) in :class:`LoRALinear` adapters, in place.
    Returns ``model``, whose only trainable parameters are now the adapters' A and B.

    Right after this call the model computes exactly what it computed before (B = 0). Called
    again on other targets, it adds adapters there and the earlier ones stay trainable.
    """
    check_rank(rank, alpha)
    layers = target_layers(model, targets)
    check_rank_fits(rank, layers)
    earlier = [p for adapter in lora_layers(model).values()
               for p in (adapter.lora_A, adapter.lora_B)]
    trainable = [p.requires_grad for p in earlier]
    model.requires_grad_(False)
    # freezing the base must not freeze the adapters already there
    for p, was in zip(earlier, trainable):
        p.requires_grad_(was)
    for name, layer in layers.items():
        _set_module(model, name, LoRALinear(layer, rank, alpha, dropout))
    return model


def lora_layers(model: nn.Module) -> dict[str, LoRALinear]:
    return {name: m for name, m in model.named_modules() if isinstance(m, LoRALinear)}


def merge_lora(model: nn.Module) -> nn.Module:
    """Replace every :class:`LoRALinear` of ``model`` by a plain ``nn.Linear`` holding
    ``W + (alpha / r) B A``, in place; returns ``model``. The logits stay the same up to float
    rounding (tests/test_lora.py: within 1e-5 on small models; chapter 15 bounds the difference
    relative to the largest logit of a trained model). Other parameters keep their
    ``requires_grad``: call ``model.requires_grad_(True)`` to train the merged model fully."""
    layers = lora_layers(model)
    if not layers:
        raise ValueError("this model has no LoRA adapters to merge (add_lora adds them)")
    for name, layer in layers.items():
        _set_module(model, name, layer.merged())
    return model


def lora_parameter_count(model: nn.Module, rank: int, targets=DEFAULT_TARGETS) -> int:
    """The formula: ``sum over wrapped layers of rank * (in + out)`` (A is (r, in), B is
    (out, r)), for ``model`` *before* :func:`add_lora`. For our GPT with the default targets,
    per block c_attn (C -> 3C) gives 4rC and c_proj (C -> C) 2rC: 6 r C n_layer in all."""
    check_rank(rank, 1.0)
    layers = target_layers(model, targets)
    check_rank_fits(rank, layers)
    return sum(rank * (m.in_features + m.out_features) for m in layers.values())


def trainable_parameters(model: nn.Module) -> int:
    """How many numbers the optimizer updates: parameters with ``requires_grad`` (a tied matrix
    once)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def lora_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """Only the adapters' A and B, by name: all a LoRA fine-tune needs besides its base model."""
    return {k: v for k,
            v in model.state_dict().items() if k.rsplit(".", 1)[-1] in ("lora_A", "lora_B")}
