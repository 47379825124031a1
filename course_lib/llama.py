"""Hugging Face's Llama in our :class:`~course_lib.model.GPT` (chapter 14).

A Llama is our GPT with chapter 14's four options switched on: ``norm="rmsnorm"``,
``rope_theta`` (rotary positions, no position table), ``mlp="swiglu"`` and ``n_kv_head``
(grouped-query attention), with no biases and pre-norm blocks. The weights copy over with
new names and one join:

- Hugging Face keeps q_proj (nh*hs, C), k_proj and v_proj (n_kv*hs, C) apart; our ``c_attn``
  is the three stacked, (C + 2*n_kv*hs, C);
- gate_proj, up_proj, down_proj are our ``c_gate``, ``c_fc``, ``c_proj``;
- input_layernorm and post_attention_layernorm are ``ln_1`` and ``ln_2``, model.norm is ``ln_f``.

Hugging Face's Llama rotates the channel pairs (j, j + hs/2), as :mod:`course_lib.rope` does,
so no permutation of the query/key rows is needed (Meta's original checkpoints pair neighbours;
Hugging Face's conversion script permutes them once, chapter 14 shows why that is the same).

``transformers`` is needed only to download a model by name, or to hand us a
``LlamaForCausalLM`` you already have; ``course_lib`` never imports it at import time.

Shapes: C = hidden_size, hs = head_dim, nh = heads, n_kv = key/value heads, L = layers.
"""
from __future__ import annotations

import torch
import torch.nn as nn

from .model import GPT, GPTConfig, load_hub_model, register_pretrained


def _rope_theta(hf_config) -> tuple[float, str]:
    """(theta, rope type): transformers 5 keeps them in ``rope_parameters``, 4.x in ``rope_theta``
    and ``rope_scaling``."""
    params = getattr(hf_config, "rope_parameters", None) or {}
    scaling = getattr(hf_config, "rope_scaling", None) or {}
    theta = params.get("rope_theta", getattr(hf_config, "rope_theta", 10000.0))
    kind = params.get("rope_type", scaling.get("rope_type", scaling.get("type", "default")))
    return float(theta), kind


def config_from_hf(hf_config, dropout: float = 0.0) -> GPTConfig:
    """Our :class:`GPTConfig` for a Hugging Face ``LlamaConfig``; raises ``ValueError`` for any
    setting our GPT does not implement (biases, another activation or head size, scaled RoPE)."""
    model_type = getattr(hf_config, "model_type", None)
    if model_type != "llama":
        raise ValueError(f"expected a Llama model (config.model_type 'llama'), got model_type {model_type!r}")
    C, nh = hf_config.hidden_size, hf_config.num_attention_heads
    theta, rope_type = _rope_theta(hf_config)
    unsupported = []
    head_dim = getattr(hf_config, "head_dim", None) or C // nh
    if head_dim * nh != C:
        unsupported.append(f"head_dim={head_dim} (ours is hidden_size / num_attention_heads = {C // nh})")
    if hf_config.hidden_act != "silu":
        unsupported.append(f"hidden_act={hf_config.hidden_act!r} (SwiGLU's gate is SiLU)")
    if rope_type != "default":
        unsupported.append(f"rope_type={rope_type!r} (we implement plain RoPE, rope_type 'default')")
    for flag in ("attention_bias", "mlp_bias"):
        if getattr(hf_config, flag, False):
            unsupported.append(f"{flag}=True (a Llama has no biases; ours has none when bias=False)")
    if getattr(hf_config, "pretraining_tp", 1) != 1:
        unsupported.append(f"pretraining_tp={hf_config.pretraining_tp}")
    if unsupported:
        raise ValueError("this Llama config uses settings course_lib's GPT does not implement: " + "; ".join(unsupported))
    return GPTConfig(
        vocab_size=hf_config.vocab_size, block_size=hf_config.max_position_embeddings,
        n_layer=hf_config.num_hidden_layers, n_head=nh, n_embd=C, dropout=dropout, bias=False,
        tie_weights=bool(getattr(hf_config, "tie_word_embeddings", False)), norm_position="pre",
        norm="rmsnorm", norm_eps=float(hf_config.rms_norm_eps), rope_theta=theta, mlp="swiglu",
        ffn_hidden=hf_config.intermediate_size, n_kv_head=getattr(hf_config, "num_key_value_heads", None) or nh,
    )


def weight_map(n_layer: int, tie_weights: bool = False) -> list[tuple[str, list[str]]]:
    """``(our name, [Hugging Face names])`` for every parameter of a Llama of ``n_layer`` blocks;
    several names are stacked along dim 0 (rows), in that order. A tied LM head is not listed."""
    rows = [("wte.weight", ["model.embed_tokens.weight"])]
    for i in range(n_layer):
        hf = f"model.layers.{i}."
        rows += [
            (f"blocks.{i}.ln_1.weight", [hf + "input_layernorm.weight"]),
            (f"blocks.{i}.attn.c_attn.weight", [hf + f"self_attn.{p}_proj.weight" for p in "qkv"]),
            (f"blocks.{i}.attn.c_proj.weight", [hf + "self_attn.o_proj.weight"]),
            (f"blocks.{i}.ln_2.weight", [hf + "post_attention_layernorm.weight"]),
            (f"blocks.{i}.mlp.c_gate.weight", [hf + "mlp.gate_proj.weight"]),
            (f"blocks.{i}.mlp.c_fc.weight", [hf + "mlp.up_proj.weight"]),
            (f"blocks.{i}.mlp.c_proj.weight", [hf + "mlp.down_proj.weight"]),
        ]
    rows.append(("ln_f.weight", ["model.norm.weight"]))
    if not tie_weights:
        rows.append(("lm_head.weight", ["lm_head.weight"]))
    return rows


@torch.no_grad()
def load_hf_state_dict(model: GPT, hf_state: dict[str, torch.Tensor]) -> GPT:
    """Copy a Llama ``state_dict`` (Hugging Face names) into ``model`` in place; every
    parameter of ``model`` is written and every shape checked."""
    ours = model.state_dict()
    rows = weight_map(model.config.n_layer, model.config.tie_weights)
    missing = [name for _, names in rows for name in names if name not in hf_state]
    if missing:
        raise ValueError(f"the Llama state dict lacks {len(missing)} weights, e.g. {missing[:3]}: "
                         "is it a LlamaForCausalLM of the same number of layers?")
    for name, hf_names in rows:
        w = torch.cat([hf_state[n] for n in hf_names], dim=0)  # q, k, v rows stacked into c_attn
        if w.shape != ours[name].shape:
            raise ValueError(f"{' + '.join(hf_names)}: shape {tuple(w.shape)} does not fit our {name} "
                             f"{tuple(ours[name].shape)}")
        ours[name].copy_(w)
    return model


def _load_hf_model(name: str):
    return load_hub_model(name, "AutoModelForCausalLM", "a Llama", "LlamaForCausalLM")


@register_pretrained("llama")
def from_pretrained(model_or_name, dropout: float = 0.0) -> GPT:
    """Our :class:`GPT` holding a Llama's weights (``GPT.from_pretrained`` calls this for Llama).

    ``model_or_name``: a Hugging Face ``LlamaForCausalLM`` (any size, e.g. a tiny random one
    built from a ``LlamaConfig``), or a Hub name such as ``"HuggingFaceTB/SmolLM2-135M"``
    downloaded through ``transformers`` (needs the network); a name that turns out to hold
    another architecture goes on to that architecture's loader. The returned model is in eval
    mode, on the CPU, in float32.
    """
    hf_model = model_or_name
    if isinstance(model_or_name, str):
        hf_model = _load_hf_model(model_or_name)
        if getattr(hf_model.config, "model_type", None) != "llama":  # e.g. "openai-community/gpt2"
            return GPT.from_pretrained(hf_model, dropout=dropout)  # to the loader of its model_type
    if not isinstance(hf_model, nn.Module) or not hasattr(hf_model, "config"):
        raise TypeError(f"expected a transformers LlamaForCausalLM or a model name, got {type(hf_model).__name__}")
    config = config_from_hf(hf_model.config, dropout=dropout)  # rejects other architectures
    if not (hasattr(hf_model, "model") and hasattr(hf_model, "lm_head")):
        raise ValueError(f"{type(hf_model).__name__} has no language-model head: pass a LlamaForCausalLM "
                         "(LlamaModel, the bare transformer, cannot predict tokens)")
    model = GPT(config)
    hf_state = {k: v.detach().float().cpu() for k, v in hf_model.state_dict().items()}
    return load_hf_state_dict(model, hf_state).eval()
