"""Hugging Face's Llama, Mistral and Qwen3 in our :class:`~course_lib.model.GPT` (chapter 14).

Mistral is a Llama with ``sliding_window``; Qwen3 a Llama with ``qk_norm`` and a ``head_dim``
of its own; Llama 3.1 on scales RoPE (``rope_scaling="llama3"``). Each maps onto a GPTConfig
option of the same name, and the weights onto the same names (Qwen3's q_norm and k_norm too).

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

from .model import GPT, GPTConfig
from .registry import load_hub_model, register_pretrained


# The Llama-family model types this module loads, and what each adds to the Llama 2 recipe.
FAMILIES = {"llama": "Llama 2 and 3 (rope_type llama3 for 3.1 on)",
            "mistral": "sliding-window attention", "qwen3": "QK-norm and a head_dim of its own"}


def _rope_settings(hf_config) -> tuple[float, dict]:
    """(theta, the rope scaling of Hugging Face's config): transformers 5 keeps both in
    ``rope_parameters``, 4.x in ``rope_theta`` and ``rope_scaling``."""
    params = dict(getattr(hf_config, "rope_parameters", None) or {})
    params.update({k: v for k, v in (getattr(hf_config, "rope_scaling", None) or {}).items()
                   if k not in params})
    theta = params.get("rope_theta", getattr(hf_config, "rope_theta", 10000.0))
    params.setdefault("rope_type", params.get("type", "default"))
    return float(theta), params


def config_from_hf(hf_config, dropout: float = 0.0) -> GPTConfig:
    """Our :class:`GPTConfig` for a Hugging Face ``LlamaConfig``, ``MistralConfig`` or
    ``Qwen3Config``; raises ``ValueError`` for any setting our GPT does not implement (biases,
    another activation, a RoPE scaling other than linear and llama3, windows on some layers
    only)."""
    model_type = getattr(hf_config, "model_type", None)
    if model_type not in FAMILIES:
        raise ValueError("expected a Llama, Mistral or Qwen3 model (config.model_type one of "
                         f"{sorted(FAMILIES)}), got model_type {model_type!r}")
    C, nh = hf_config.hidden_size, hf_config.num_attention_heads
    theta, rope = _rope_settings(hf_config)
    unsupported = []
    head_dim = getattr(hf_config, "head_dim", None) or C // nh
    if hf_config.hidden_act != "silu":
        unsupported.append(f"hidden_act={hf_config.hidden_act!r} (SwiGLU's gate is SiLU)")
    if rope["rope_type"] not in ("default", "linear", "llama3"):
        unsupported.append(f"rope_type={rope['rope_type']!r} (we implement 'default', 'linear' and "
                           "'llama3')")
    if rope.get("partial_rotary_factor", 1.0) != 1.0:
        unsupported.append(f"partial_rotary_factor={rope['partial_rotary_factor']} (we rotate "
                           "every channel)")
    for flag in ("attention_bias", "mlp_bias"):
        if getattr(hf_config, flag, False):
            unsupported.append(f"{flag}=True (a Llama has no biases; ours has none when "
                               "bias=False)")
    if getattr(hf_config, "pretraining_tp", 1) != 1:
        unsupported.append(f"pretraining_tp={hf_config.pretraining_tp}")
    window = getattr(hf_config, "sliding_window", None)
    if model_type == "qwen3":  # Qwen3 may window some layers only (layer_types); off by default
        kinds = set(getattr(hf_config, "layer_types", None) or ["full_attention"])
        if kinds != {"full_attention"} and kinds != {"sliding_attention"}:
            unsupported.append(f"layer_types mixing {sorted(kinds)} (our window is the same in "
                               "every layer)")
        window = window if kinds == {"sliding_attention"} else None
    if unsupported:
        raise ValueError(f"this {model_type} config uses settings course_lib's GPT does not "
                         "implement: "
                         + "; ".join(unsupported))
    scaling = {} if rope["rope_type"] == "default" else dict(
        rope_scaling=rope["rope_type"], rope_factor=float(rope["factor"]),
        rope_low_freq_factor=float(rope.get("low_freq_factor", 1.0)),
        rope_high_freq_factor=float(rope.get("high_freq_factor", 4.0)),
        rope_original_context=rope.get("original_max_position_embeddings"))
    return GPTConfig(
        vocab_size=hf_config.vocab_size, block_size=hf_config.max_position_embeddings,
        n_layer=hf_config.num_hidden_layers, n_head=nh, n_embd=C, dropout=dropout, bias=False,
        tie_weights=bool(getattr(hf_config, "tie_word_embeddings", False)), norm_position="pre",
        norm="rmsnorm", norm_eps=float(hf_config.rms_norm_eps), rope_theta=theta, mlp="swiglu",
        ffn_hidden=hf_config.intermediate_size,
        n_kv_head=getattr(hf_config, "num_key_value_heads", None) or nh,
        head_dim=None if head_dim * nh == C else head_dim, qk_norm=model_type == "qwen3",
        sliding_window=window, **scaling,
    )


def weight_map(n_layer: int, tie_weights: bool = False,
               qk_norm: bool = False) -> list[tuple[str, list[str]]]:
    """``(our name, [Hugging Face names])`` for every parameter of a Llama of ``n_layer`` blocks
    (Mistral's are named alike; Qwen3 adds ``qk_norm``'s two gains per layer); several names are
    stacked along dim 0 (rows), in that order. A tied LM head is not listed."""
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
        if qk_norm:
            rows += [(f"blocks.{i}.attn.{n}_norm.weight", [hf + f"self_attn.{n}_norm.weight"])
                     for n in "qk"]
    rows.append(("ln_f.weight", ["model.norm.weight"]))
    if not tie_weights:
        rows.append(("lm_head.weight", ["lm_head.weight"]))
    return rows


@torch.no_grad()
def load_hf_state_dict(model: GPT, hf_state: dict[str, torch.Tensor]) -> GPT:
    """Copy a Llama ``state_dict`` (Hugging Face names) into ``model`` in place; every
    parameter of ``model`` is written and every shape checked."""
    ours = model.state_dict()
    rows = weight_map(model.config.n_layer, model.config.tie_weights, model.config.qk_norm)
    missing = [name for _, names in rows for name in names if name not in hf_state]
    if missing:
        raise ValueError(f"the Llama state dict lacks {len(missing)} weights, e.g. {missing[:3]}: "
                         "is it a Llama, Mistral or Qwen3 ForCausalLM of the same number of "
                         "layers?")
    for name, hf_names in rows:
        w = torch.cat([hf_state[n] for n in hf_names], dim=0)  # q, k, v rows stacked into c_attn
        if w.shape != ours[name].shape:
            raise ValueError(f"{' + '.join(hf_names)}: shape {tuple(w.shape)} does not fit our "
                             f"{name} {tuple(ours[name].shape)}")
        ours[name].copy_(w)
    return model


def _load_hf_model(name: str):
    return load_hub_model(name, "AutoModelForCausalLM", "a Llama", "LlamaForCausalLM")


@register_pretrained("qwen3")
@register_pretrained("mistral")
@register_pretrained("llama")
def from_pretrained(model_or_name, dropout: float = 0.0) -> GPT:
    """Our :class:`GPT` holding a Llama's weights (``GPT.from_pretrained`` calls this for Llama).

    ``model_or_name``: a Hugging Face ``LlamaForCausalLM``, ``MistralForCausalLM`` or
    ``Qwen3ForCausalLM`` (any size, e.g. a tiny random one built from its config), or a Hub name
    such as ``"HuggingFaceTB/SmolLM2-135M"`` downloaded through ``transformers`` (needs the
    network); a name that turns out to hold another architecture goes on to that architecture's
    loader. The returned model is in eval mode, on the CPU, in float32.
    """
    hf_model = model_or_name
    if isinstance(model_or_name, str):
        hf_model = _load_hf_model(model_or_name)
        # e.g. "openai-community/gpt2"
        if getattr(hf_model.config, "model_type", None) not in FAMILIES:
            return GPT.from_pretrained(hf_model, dropout=dropout)  # to the loader of its model_type
    if not isinstance(hf_model, nn.Module) or not hasattr(hf_model, "config"):
        raise TypeError("expected a transformers LlamaForCausalLM or a model name, got "
                        f"{type(hf_model).__name__}")
    config = config_from_hf(hf_model.config, dropout=dropout)  # rejects other architectures
    if not (hasattr(hf_model, "model") and hasattr(hf_model, "lm_head")):
        raise ValueError(f"{type(hf_model).__name__} has no language-model head: pass a "
                         "LlamaForCausalLM (or Mistral/Qwen3ForCausalLM; LlamaModel, the bare "
                         "transformer, cannot predict tokens)")
    model = GPT(config)
    hf_state = {k: v.detach().float().cpu() for k, v in hf_model.state_dict().items()}
    return load_hf_state_dict(model, hf_state).eval()
