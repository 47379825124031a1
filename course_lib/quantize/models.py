"""Chapter 23's two model kinds, GPTs whose matrices are quantized.

- ``gpt-int4`` (:class:`QuantizedGPT`): what ``python -m course_lib quantize`` writes. Every
  linear layer (the LM head included) is stored in 4 bits per group of ``group_size`` weights of
  a row, symmetric or with zero points (:mod:`.int4`), and multiplies with PyTorch's packed CPU
  kernel; the two embedding tables as ``embeddings`` says (:mod:`.embeddings`: int8 per row by
  default, float16, or "same": 4 bits like the rest), dequantizing the rows they look up; the
  norms' gains (and biases, if any) stay float. ``sample``, ``eval`` and ``chat`` load it
  like any other kind.
- ``gpt-qat`` (:class:`QATGPT`): a GPT whose forward pass reads every matrix through a fake
  quantizer (the straight-through estimator; the embeddings' at their own ``embeddings``
  setting), what quantization-aware training trains
  (``python -m course_lib qat``); its float weights are then rounded by ``quantize``.

Both configs are a :class:`GPTConfig` (every field of a GPT) plus the quantization settings, so
a model of either kind is built, like a GPT, from its config alone: its matrices initialised as a
GPT's, then quantized (a checkpoint then loads its stored tensors into it).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.utils.parametrize as parametrize

from ..config import Rule, check_fields
from ..model import GPT, GPTConfig
from ..registry import register_model
from .embeddings import (EMBEDDINGS, INT8_ROWS, TiedHead, WideEmbedding,
                         embedding_config, embedding_weights)
from .int4 import KERNEL_GROUP_SIZES, Int4Embedding, Int4Linear
from .rtn import QuantConfig, QuantizedTensor, fake_quantize, quantize


def in_sizes(config: GPTConfig) -> list[int]:
    """The input sizes of a GPT's matrices: the rows that
    groups cut (C, the attention's heads, the MLP)."""
    return sorted({config.n_embd, config.n_head * config.head_size, config.ffn_size})


def check_quantizable(config: GPTConfig, group_size: int | None, what: str) -> None:
    if config.moe_experts is not None:
        raise ValueError(f"{what} quantizes dense GPTs: a mixture of experts keeps its experts "
                         "outside nn.Linear layers; use moe_experts=None")
    if group_size is not None:
        bad = [n for n in in_sizes(config) if n % group_size]
        if bad:
            raise ValueError(f"group_size {group_size} must divide every matrix's row (sizes "
                             f"{in_sizes(config)}), not {bad[0]}: pick a divisor of {bad[0]}")


QUANTIZED_RULES = {"group_size": Rule(int, choices=KERNEL_GROUP_SIZES), "symmetric": Rule(bool),
                   "embeddings": Rule(str, choices=EMBEDDINGS)}


@dataclass
class QuantizedGPTConfig(GPTConfig):
    """A GPT's config, its linear layers in 4 bits per group of ``group_size`` (the kernel's sizes:
    32, 64, 128 or 256), ``symmetric`` or with a zero point per group; its embedding tables
    ``embeddings``: "int8" per row, "fp16", or "same" (4 bits like the rest)."""
    group_size: int = 32
    symmetric: bool = True
    embeddings: str = "int8"

    def __post_init__(self):
        super().__post_init__()
        if self.group_size not in KERNEL_GROUP_SIZES:  # a clearer line than the rule's
            raise ValueError(f"QuantizedGPTConfig.group_size must be one of {KERNEL_GROUP_SIZES} "
                             "(the group sizes "
                             f"PyTorch's 4-bit CPU kernel multiplies), got {self.group_size!r}")
        check_fields(self, QUANTIZED_RULES)
        check_quantizable(self, self.group_size, "the gpt-int4 kind")

    def __repr__(self) -> str:
        return (f"QuantizedGPTConfig({GPTConfig.__repr__(self)[10:-1]}, "
                f"group_size={self.group_size}, symmetric={self.symmetric}, "
                f"embeddings={self.embeddings!r})")

    def quant_config(self) -> QuantConfig:
        return QuantConfig(bits=4, granularity="group",
                           group_size=self.group_size, symmetric=self.symmetric)


def gpt_config(config: GPTConfig) -> GPTConfig:
    """The plain GPT config inside a quantized kind's config."""
    return GPTConfig.from_dict({k: v for k, v in config.to_dict().items()
                                if k in GPTConfig.__dataclass_fields__})


@register_model("gpt-int4", QuantizedGPTConfig)
class QuantizedGPT(GPT):
    """A GPT whose linear layers are 4-bit (:mod:`.int4`): built as a GPT of the same config, then
    each ``nn.Linear`` replaced by an :class:`Int4Linear` and each ``nn.Embedding`` by a
    :class:`WideEmbedding` (int8 or float16; a tied LM head by its :class:`TiedHead`) or, with
    ``embeddings="same"``, an :class:`Int4Embedding`, holding its round-to-nearest codes.
    :meth:`from_quantized` puts in the codes of a quantized model instead (RTN or GPTQ)."""

    def __init__(self, config: QuantizedGPTConfig):
        super().__init__(config)
        qc = config.quant_config()
        wide = config.embeddings != "same"
        tied_head = config.tie_weights and wide  # the head is the int8 / float16 token table
        with torch.no_grad():
            for name, module in list(self.named_modules()):
                if isinstance(module, nn.Linear) and not (tied_head and name == "lm_head"):
                    bias = module.bias.detach() if module.bias is not None else None
                    self.set_submodule(name,
                                       Int4Linear.from_quantized(quantize(module.weight, qc), bias))
            for name in ("wte", "wpe"):
                emb = getattr(self, name)
                if not isinstance(emb, nn.Embedding):
                    continue
                if wide:
                    new = WideEmbedding(*emb.weight.shape, config.embeddings)
                    new.load(emb.weight, quantize(emb.weight, INT8_ROWS)
                             if config.embeddings == "int8" else None)
                    if name == "wte" and tied_head:
                        self.lm_head = TiedHead(new)
                else:
                    tied = self.lm_head if name == "wte" and config.tie_weights else None
                    new = Int4Embedding(*emb.weight.shape, config.group_size,
                                        config.symmetric, tied)
                    if tied is None:
                        new.load_quantized(quantize(emb.weight, qc))
                setattr(self, name, new)

    @classmethod
    def from_quantized(cls, model: GPT, stored: dict[str, QuantizedTensor], group_size: int,
                       symmetric: bool = True, embeddings: str = "int8") -> "QuantizedGPT":
        """The gpt-int4 model of a GPT whose matrices were quantized (``stored``: module name -> its
        4-bit per-group tensor, the embeddings' as ``embeddings`` says, as
        ``quantize.apply.quantize_rtn``/``quantize_gptq`` return them with the same setting; a
        float16 table is not in ``stored`` and is read from ``model``); the norms and biases copied
        from ``model``."""
        config = QuantizedGPTConfig(**model.config.to_dict(), group_size=group_size,
                                    symmetric=symmetric, embeddings=embeddings)
        new = cls(config)
        modules = dict(new.named_modules())
        # one matrix, stored once
        if config.tie_weights and embeddings == "same" and "lm_head" not in stored:
            stored = {**stored,
                      # (under wte): the head loads it last, packed for the kernel
                      "lm_head": stored["wte"]}
        missing = [n for n, m in modules.items() if isinstance(m, Int4Linear) and n not in stored]
        if missing:
            raise ValueError(f"no quantized weight given for {missing[0]}")
        sources = dict(model.named_modules())
        with torch.no_grad():
            for name, m in modules.items():
                if isinstance(m, WideEmbedding):
                    m.load(sources[name].weight, stored.get(name))
            for name, qt in stored.items():
                if not isinstance(modules[name], WideEmbedding):
                    modules[name].load_quantized(qt)
            # norms' gains, biases
            floats = {n: p for n, p in model.named_parameters() if p.dim() == 1}
            for name, p in new.named_parameters():
                p.copy_(floats[name])
        return new

    def num_parameters(self) -> int:
        """The weights the model stands for (codes count as weights, norms' gains as parameters)."""
        n = sum(p.numel() for p in self.parameters())
        matrices = {id(m.codes): m.codes.numel() * 2 for m in self.modules()
                    if isinstance(m, (Int4Linear, Int4Embedding))}
        matrices |= {id(m.codes): m.codes.numel() for m in self.modules()
                     if isinstance(m, (WideEmbedding, TiedHead))}
        return n + sum(matrices.values())

    def stored_bytes(self) -> int:
        """The bytes of every tensor the checkpoint holds for the model (a tied matrix once)."""
        tensors = {id(t): t for t in self.state_dict(keep_vars=True).values()}
        return sum(t.numel() * t.element_size() for t in tensors.values())


class FakeQuantize(nn.Module):
    """A parametrization: the weight as quantized in the forward pass, the identity backward
    (the straight-through estimator: ``W + (fake_quantize(W) - W).detach()``)."""

    def __init__(self, config: QuantConfig):
        super().__init__()
        self.config = config

    def forward(self, w: torch.Tensor) -> torch.Tensor:
        return w + (fake_quantize(w, self.config) - w).detach()


QAT_RULES = {"bits": Rule(int, 2, 8), "group_size": Rule(int, 1), "symmetric": Rule(bool),
             "embeddings": Rule(str, choices=EMBEDDINGS)}


@dataclass
class QATGPTConfig(GPTConfig):
    """A GPT's config, trained with its linear layers fake-quantized to ``bits`` per group of
    ``group_size`` weights of a row (None: one scale per row), ``symmetric`` or not, and its
    embedding tables as they will be stored (``embeddings``: "int8" per row, "fp16": not rounded,
    or "same" as the linear layers)."""
    bits: int = 4
    group_size: int | None = None
    symmetric: bool = True
    embeddings: str = "int8"

    def __post_init__(self):
        super().__post_init__()
        check_fields(self, QAT_RULES)
        check_quantizable(self, self.group_size, "quantization-aware training")

    def __repr__(self) -> str:
        return (f"QATGPTConfig({GPTConfig.__repr__(self)[10:-1]}, bits={self.bits}, "
                f"group_size={self.group_size}, symmetric={self.symmetric}, "
                f"embeddings={self.embeddings!r})")

    def quant_config(self) -> QuantConfig:
        return QuantConfig(bits=self.bits,
                           granularity="row" if self.group_size is None else "group",
                           group_size=self.group_size or 32, symmetric=self.symmetric)


def add_fake_quantizers(model: nn.Module, config: QuantConfig, embeddings: str) -> nn.Module:
    """Read every matrix of ``model`` through a :class:`FakeQuantize` (in place): the linear layers
    at ``config``, the embedding tables (a tied LM head with them: one matrix) as ``embeddings``
    says (float16 ones are not rounded: the float32 model reads them within float16 rounding)."""
    tables = embedding_weights(model)
    emb_config = embedding_config(config, embeddings)
    for m in [m for m in model.modules() if isinstance(m, (nn.Linear, nn.Embedding))]:
        c = emb_config if id(m.weight) in tables else config
        if c is not None:
            parametrize.register_parametrization(m, "weight", FakeQuantize(c))
    return model


@register_model("gpt-qat", QATGPTConfig)
class QATGPT(GPT):
    """A GPT whose every matrix is read through a :class:`FakeQuantize`: the forward pass is the
    quantized model's, the gradient reaches the float weights
    (``x.parametrizations.weight.original`` in the state dict)."""

    def __init__(self, config: QATGPTConfig):
        super().__init__(config)
        add_fake_quantizers(self, config.quant_config(), config.embeddings)

    @classmethod
    def from_gpt(cls, model: GPT, bits: int, group_size: int | None, symmetric: bool = True,
                 embeddings: str = "int8") -> "QATGPT":
        """A QAT model starting from ``model``'s weights."""
        new = cls(QATGPTConfig(**model.config.to_dict(), bits=bits, group_size=group_size,
                               symmetric=symmetric, embeddings=embeddings))
        params = dict(model.named_parameters(remove_duplicate=False))
        with torch.no_grad():
            for name, p in new.named_parameters(remove_duplicate=False):
                p.copy_(params[name.replace("parametrizations.weight.original", "weight")])
        return new

    def float_gpt(self) -> GPT:
        """The plain GPT of the trained float weights (not rounded: ``quantize`` rounds them)."""
        gpt = GPT(gpt_config(self.config))
        params = dict(self.named_parameters(remove_duplicate=False))
        with torch.no_grad():
            for name, p in gpt.named_parameters(remove_duplicate=False):
                original = (name[:-len("weight")] + "parametrizations.weight.original"
                            if name.endswith(".weight") else name)
                p.copy_(params.get(original, params.get(name)))
        return gpt.to(next(self.parameters()).device)
