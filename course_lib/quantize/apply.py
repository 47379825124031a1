"""A whole GPT quantized, weighed and scored (chapter 23).

Every linear layer (the LM head included) is quantized at the working setting; the two embedding
tables as ``embeddings`` says (:mod:`.embeddings`: int8 per row by default, float16, or "same": at
the working setting); the 1-D weights (the norms' gains, biases if any) stay in float16, as the
shipped model stores them. A quantized model is
an ordinary GPT whose weights hold the dequantized values (what a kernel that dequantizes before
multiplying computes), together with the :class:`QuantizedTensor` of each weight, whose bytes are
what the model stores. Bits per character: the mean cross-entropy in nats over fixed validation
windows, divided by ln 2; intervals by the bootstrap over the windows.

Shapes: data (N,) token ids; windows (n, T); per-window losses (n,).
"""
from __future__ import annotations

import copy
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from .embeddings import embedding_config, embedding_weights
from .gptq import BLOCK_SIZE, DAMP, Hessian, gptq_quantize
from .rtn import QuantConfig, QuantizedTensor, quantize

FLOAT_BYTES = 2  # what is not quantized is stored in float16, like the shipped model


def weight_modules(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """The modules whose 2-D ``weight`` is quantized: embeddings and linear layers, in model order;
    a weight shared by two modules (tied embeddings) only under its first (it is stored once)."""
    seen, out = set(), []
    for name, m in model.named_modules():
        if (isinstance(m, (nn.Linear, nn.Embedding)) and m.weight.dim() == 2
                and id(m.weight) not in seen):
            seen.add(id(m.weight))
            out.append((name, m))
    return out


@torch.no_grad()
def store_embedding(m: nn.Module, config: QuantConfig, embeddings: str) -> QuantizedTensor | None:
    """Round an embedding table as ``embeddings`` says (in place) and return what it stores
    (None: float16, counted by :func:`stored_bytes` with the other float weights)."""
    emb_config = embedding_config(config, embeddings)
    if emb_config is None:
        m.weight.copy_(m.weight.to(torch.float16).float())
        return None
    qt = quantize(m.weight, emb_config)
    m.weight.copy_(qt.dequantize())
    return qt


def quantize_rtn(model: nn.Module, config: QuantConfig, embeddings: str = "int8"
                 ) -> tuple[nn.Module, dict[str, QuantizedTensor]]:
    """A copy of ``model`` with every linear layer rounded to nearest by ``config``, the embeddings
    as ``embeddings`` says, and what each stores (a float16 table: not in the dict)."""
    embedding_config(config, embeddings)  # checked before any work
    model = copy.deepcopy(model)
    tables, stored = embedding_weights(model), {}
    with torch.no_grad():
        for name, m in weight_modules(model):
            if id(m.weight) in tables:
                if (qt := store_embedding(m, config, embeddings)) is not None:
                    stored[name] = qt
                continue
            stored[name] = quantize(m.weight, config)
            m.weight.copy_(stored[name].dequantize())
    return model, stored


class _Reached(Exception):
    """Raised by the calibration hook once the layer's input is collected."""


@torch.no_grad()
def layer_hessian(model: nn.Module, layer: nn.Linear, calibration: torch.Tensor,
                  batch_size: int = 64) -> torch.Tensor:
    """H = 2 X X^T / N of ``layer``'s inputs when ``model`` reads the calibration windows (n, T).
    The forward pass stops at the layer (nothing after it is needed)."""
    h = Hessian(layer.in_features)

    def collect(mod, args):
        h.add(args[0])
        raise _Reached

    handle = layer.register_forward_pre_hook(collect)
    try:
        for i in range(0, len(calibration), batch_size):
            try:
                model(calibration[i:i + batch_size])
            except _Reached:
                pass
    finally:
        handle.remove()
    return h.matrix


def quantize_gptq(model: nn.Module, config: QuantConfig, calibration: torch.Tensor,
                  damp: float = DAMP, block_size: int = BLOCK_SIZE,
                  embeddings: str = "int8") -> tuple[nn.Module, dict[str, QuantizedTensor]]:
    """A copy of ``model`` with every linear layer quantized by GPTQ, one after the other in model
    order, each calibrated on the inputs it gets from the layers already quantized before it (the
    paper's sequential order); the embeddings, which have no input to calibrate on, as
    ``embeddings`` says (int8 per row, float16, or "same": RTN at ``config``)."""
    embedding_config(config, embeddings)  # checked before any work
    model = copy.deepcopy(model).eval()
    tables, stored = embedding_weights(model), {}
    with torch.no_grad():
        for name, m in weight_modules(model):
            if id(m.weight) in tables:
                if (qt := store_embedding(m, config, embeddings)) is not None:
                    stored[name] = qt
                continue
            H = layer_hessian(model, m, calibration)
            stored[name] = gptq_quantize(m.weight, H, config, damp, block_size)
            m.weight.copy_(stored[name].dequantize())
    return model, stored


def stored_bytes(model: nn.Module, stored: dict[str, QuantizedTensor] | None = None) -> int:
    """The bytes of every tensor a model writes: each quantized weight's codes, scales and zero
    points, and every other parameter in float16. ``stored=None``: the whole model in float16."""
    stored = stored or {}
    quantized = {f"{name}.weight" for name in stored}
    rest = sum(p.numel() * FLOAT_BYTES for n, p in model.named_parameters() if n not in quantized)
    return rest + sum(q.nbytes() for q in stored.values())


def windows(data: torch.Tensor, block_size: int, limit: int
            | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``(x, y)``, each (n, T): the consecutive full windows of ``data`` (the first ``limit``)."""
    n = (len(data) - 1) // block_size
    n = n if limit is None else min(n, limit)
    x = data[:n * block_size].view(n, block_size)
    y = data[1:n * block_size + 1].view(n, block_size)
    return x, y


@torch.no_grad()
def window_losses(model: nn.Module, x: torch.Tensor, y: torch.Tensor,
                  batch_size: int = 128) -> torch.Tensor:
    """The mean cross-entropy (nats per character) of each window (n,), in eval mode."""
    was_training = model.training
    model.eval()
    out = []
    for i in range(0, len(x), batch_size):
        logits = model(x[i:i + batch_size])[0]  # (B, T, V)
        loss = F.cross_entropy(logits.transpose(1, 2), y[i:i + batch_size],
                               reduction="none")  # (B, T)
        out.append(loss.mean(1))
    model.train(was_training)
    return torch.cat(out)


def bits_per_char(losses: torch.Tensor) -> float:
    """Mean nats per character -> bits per character."""
    return losses.double().mean().item() / math.log(2)


def bootstrap_interval(losses: torch.Tensor, reps: int = 1000, seed: int = 0, level: float = 0.95
                       ) -> tuple[float, float]:
    """The percentile bootstrap interval of the mean of per-window values, in bits (windows
    resampled with replacement; a paired difference is passed as the per-window differences)."""
    g = torch.Generator().manual_seed(seed)
    idx = torch.randint(0, len(losses), (reps, len(losses)), generator=g)
    means = losses.double()[idx].mean(1) / math.log(2)  # (reps,)
    lo, hi = torch.quantile(means,
                            torch.tensor([(1 - level) / 2, (1 + level) / 2], dtype=torch.float64))
    return lo.item(), hi.item()


@torch.no_grad()
def layer_errors(model: nn.Module, stored: dict[str, QuantizedTensor]) -> dict[str, float]:
    """For each quantized weight, ||W - W_hat|| / ||W||: where the rounding hurts most."""
    mods = dict(weight_modules(model))
    return {name: ((mods[name].weight - q.dequantize()).norm() / mods[name].weight.norm()).item()
            for name, q in stored.items()}
