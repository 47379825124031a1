"""OpenAI's GPT-2 weights in our :class:`~course_lib.model.GPT` (chapter 13).

GPT-2 is the model our GPT was written to match: pre-LN blocks, learned positions, biases
everywhere, a tied LM head and GELU in its tanh approximation. Only two things differ from a
plain copy of the weights:

- the names: Hugging Face's ``transformer.h.{i}.attn.c_attn.weight`` is our
  ``blocks.{i}.attn.c_attn.weight`` (see :func:`weight_map`);
- the layout: GPT-2's attention and MLP matrices are ``Conv1D`` layers stored (in, out),
  while ``nn.Linear`` stores (out, in), so those four matrices per block are transposed.

``transformers`` is needed only to download the published weights, or to hand us a
``GPT2LMHeadModel`` you already have; ``course_lib`` itself never imports it at import time.

Shapes: C = n_embd, V = vocab_size, T = block_size, L = n_layer.
"""
from __future__ import annotations

import torch
import torch.nn as nn

from .model import GPT, GPTConfig
from .registry import load_hub_model, register_pretrained

# The four published sizes: (layers, heads, C). All share V = 50257 and T = 1024.
GPT2_SIZES = {
    "gpt2": (12, 12, 768),
    "gpt2-medium": (24, 16, 1024),
    "gpt2-large": (36, 20, 1280),
    "gpt2-xl": (48, 25, 1600),
}
# The sizes OpenAI's released models are named by (github.com/openai/gpt-2; the paper's Table 2 said
# 117M, 345M, 762M and 1542M, a count OpenAI later corrected). Chapter 13 compares them with
# course_lib.sizing.count_parameters.
PUBLISHED_PARAMETERS = {"gpt2": "124M", "gpt2-medium": "355M", "gpt2-large": "774M",
                        "gpt2-xl": "1558M"}

# GPT-2's activation names in transformers for GELU's tanh approximation.
_TANH_GELU = ("gelu_new", "gelu_pytorch_tanh", "gelu_fast")
# Conv1D weights, stored (in, out): transpose into nn.Linear's (out, in).
_CONV1D = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")
_BLOCK_PARAMS = ("ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
                 "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias",
                 "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias")


def gpt2_config(name: str = "gpt2", dropout: float = 0.0) -> GPTConfig:
    """Our config for a published GPT-2 size, e.g. ``gpt2_config("gpt2-medium")``."""
    if name not in GPT2_SIZES:
        raise ValueError(f"unknown GPT-2 model {name!r}; choose one of: {', '.join(GPT2_SIZES)}")
    n_layer, n_head, n_embd = GPT2_SIZES[name]
    return GPTConfig(vocab_size=50257, block_size=1024, n_layer=n_layer, n_head=n_head,
                     n_embd=n_embd, dropout=dropout, bias=True, tie_weights=True,
                     norm_position="pre", activation="gelu_tanh")


def config_from_hf(hf_config, dropout: float = 0.0) -> GPTConfig:
    """Our :class:`GPTConfig` for a Hugging Face ``GPT2Config``; raises ``ValueError`` for any
    setting our GPT does not implement (another architecture, MLP width, activation, ...)."""
    model_type = getattr(hf_config, "model_type", None)
    if model_type != "gpt2":
        raise ValueError("expected a GPT-2 model (config.model_type 'gpt2'), got model_type "
                         f"{model_type!r}: GPT.from_pretrained maps GPT-2 ('gpt2', chapter 13) and "
                         "Llama ('llama', chapter 14) models onto course_lib's GPT, and a "
                         f"{model_type!r} model's architecture differs from both")
    C = hf_config.n_embd
    unsupported = []
    if hf_config.n_inner not in (None, 4 * C):
        unsupported.append(f"n_inner={hf_config.n_inner} (our MLP is 4 * n_embd = {4 * C} wide)")
    if hf_config.activation_function not in _TANH_GELU:
        unsupported.append(f"activation_function={hf_config.activation_function!r} (we implement "
                           f"{_TANH_GELU[0]!r})")
    if abs(hf_config.layer_norm_epsilon - 1e-5) > 1e-12:
        unsupported.append(f"layer_norm_epsilon={hf_config.layer_norm_epsilon} (ours is 1e-5)")
    for flag in ("scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn",
                 "add_cross_attention"):
        if getattr(hf_config, flag, False):
            unsupported.append(f"{flag}=True")
    if not getattr(hf_config, "scale_attn_weights", True):
        unsupported.append("scale_attn_weights=False (we always scale by 1/sqrt(head size))")
    if unsupported:
        raise ValueError("this GPT-2 config uses settings course_lib's GPT does not "
                         "implement: " + "; ".join(unsupported))
    return GPTConfig(vocab_size=hf_config.vocab_size, block_size=hf_config.n_positions,
                     n_layer=hf_config.n_layer, n_head=hf_config.n_head, n_embd=C, dropout=dropout,
                     bias=True, tie_weights=bool(getattr(hf_config, "tie_word_embeddings", True)),
                     norm_position="pre", activation="gelu_tanh")


def weight_map(n_layer: int, tie_weights: bool = True) -> list[tuple[str, str, bool]]:
    """``(our name, Hugging Face name, transpose?)`` for every parameter of a GPT-2 of ``n_layer``
    blocks. With tied weights the LM head is the token embedding, so it is not listed."""
    rows = [("wte.weight", "transformer.wte.weight", False),
            ("wpe.weight", "transformer.wpe.weight", False)]
    for i in range(n_layer):
        rows += [(f"blocks.{i}.{p}", f"transformer.h.{i}.{p}", p in _CONV1D) for p in _BLOCK_PARAMS]
    rows += [("ln_f.weight", "transformer.ln_f.weight", False),
             ("ln_f.bias", "transformer.ln_f.bias", False)]
    if not tie_weights:
        rows.append(("lm_head.weight", "lm_head.weight", False))
    return rows


@torch.no_grad()
def load_hf_state_dict(model: GPT, hf_state: dict[str, torch.Tensor]) -> GPT:
    """Copy a GPT-2 ``state_dict`` (Hugging Face names, Conv1D layout) into ``model`` in place;
    every parameter of ``model`` is written and every shape checked."""
    ours = model.state_dict()
    rows = weight_map(model.config.n_layer, model.config.tie_weights)
    missing = [hf for _, hf, _ in rows if hf not in hf_state]
    if missing:
        raise ValueError(f"the GPT-2 state dict lacks {len(missing)} weights, e.g. {missing[:3]}: "
                         "is it a GPT2LMHeadModel of the same number of layers?")
    for name, hf_name, transpose in rows:
        w = hf_state[hf_name]
        w = w.t() if transpose else w
        if w.shape != ours[name].shape:
            raise ValueError(f"{hf_name}: shape {tuple(hf_state[hf_name].shape)}"
                             f"{' transposed' if transpose else ''} does not fit our {name} "
                             f"{tuple(ours[name].shape)}")
        ours[name].copy_(w)
    return model


def _load_hf_model(name: str):
    return load_hub_model(name, "GPT2LMHeadModel", "GPT-2", "GPT2LMHeadModel")


@register_pretrained("gpt2")
def from_pretrained(model_or_name, dropout: float = 0.0) -> GPT:
    """Our :class:`GPT` holding GPT-2's weights (``GPT.from_pretrained`` calls this for GPT-2).

    ``model_or_name``: a Hugging Face ``GPT2LMHeadModel`` instance (any size, e.g. a tiny random
    one built from a ``GPT2Config``), or one of the published names ``gpt2``, ``gpt2-medium``,
    ``gpt2-large``, ``gpt2-xl``, downloaded through ``transformers`` (needs the network).
    ``dropout`` is for fine-tuning (GPT-2 was trained with 0.1); 0 gives the published logits.
    The returned model is in eval mode, on the CPU, in float32.
    """
    if isinstance(model_or_name, str):
        if model_or_name not in GPT2_SIZES:
            raise ValueError(f"unknown GPT-2 model {model_or_name!r}; choose one of: "
                             f"{', '.join(GPT2_SIZES)}, or pass a transformers GPT2LMHeadModel "
                             "instance")
        hf_model = _load_hf_model(model_or_name)
    else:
        hf_model = model_or_name
    if not isinstance(hf_model, nn.Module) or not hasattr(hf_model, "config"):
        raise TypeError("expected a transformers GPT2LMHeadModel or a model name, got "
                        f"{type(hf_model).__name__}")
    config = config_from_hf(hf_model.config, dropout=dropout)  # rejects other architectures
    if not (hasattr(hf_model, "transformer") and hasattr(hf_model, "lm_head")):
        raise ValueError(f"{type(hf_model).__name__} has no language-model head: pass a "
                         "GPT2LMHeadModel (GPT2Model, the bare transformer, cannot predict tokens)")
    model = GPT(config)
    hf_state = {k: v.detach().float().cpu() for k, v in hf_model.state_dict().items()}
    return load_hf_state_dict(model, hf_state).eval()
