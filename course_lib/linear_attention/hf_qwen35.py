"""Hugging Face's Qwen3.5 (text) weights in chapter 24's ``HybridGPT``: the config map and the
weights by name (our layers keep Hugging Face's parameter names, only the paths differ).

Built offline in the tests from a random-initialised ``transformers.Qwen3_5ForCausalLM`` of any
config shape, whose logits and greedy tokens ours must equal
(``tests/test_linear_attention_hf.py``).
"""
from __future__ import annotations

import re

import torch

from .hybrid import HybridConfig, HybridGPT

LAYER_LETTER = {"linear_attention": "L", "full_attention": "A"}


def config_from_hf(hf_config) -> HybridConfig:
    """A ``HybridConfig`` from a ``Qwen3_5TextConfig``; one ValueError listing every setting we
    do not build (rather than a model that silently differs)."""
    rope = dict(getattr(hf_config, "rope_parameters", None) or {})
    unsupported = []
    if hf_config.hidden_act != "silu":
        unsupported.append(f"hidden_act={hf_config.hidden_act!r}")
    if getattr(hf_config, "attention_bias", False):
        unsupported.append("attention_bias=True")
    if rope.get("rope_type", "default") != "default":
        unsupported.append(f"rope_type={rope['rope_type']!r}")
    unknown = sorted(set(hf_config.layer_types) - set(LAYER_LETTER))
    if unknown:
        unsupported.append(f"layer_types {unknown}")
    if unsupported:
        raise ValueError("HybridGPT does not build these Qwen3.5 settings: "
                         f"{', '.join(unsupported)}")
    return HybridConfig(
        vocab_size=hf_config.vocab_size, block_size=hf_config.max_position_embeddings,
        n_layer=hf_config.num_hidden_layers, n_embd=hf_config.hidden_size,
        n_head=hf_config.num_attention_heads, n_kv_head=hf_config.num_key_value_heads,
        head_dim=hf_config.head_dim, layers="".join(LAYER_LETTER[t] for t in hf_config.layer_types),
        linear_k_heads=hf_config.linear_num_key_heads,
        linear_v_heads=hf_config.linear_num_value_heads,
        linear_k_dim=hf_config.linear_key_head_dim, linear_v_dim=hf_config.linear_value_head_dim,
        conv_kernel=hf_config.linear_conv_kernel_dim, ffn_hidden=hf_config.intermediate_size,
        rope_theta=float(rope.get("rope_theta", 10000.0)),
        rotary_fraction=float(rope.get("partial_rotary_factor", 0.25)),
        norm_eps=float(hf_config.rms_norm_eps), tie_weights=bool(hf_config.tie_word_embeddings))


def our_name(hf_name: str) -> str:
    """Hugging Face's parameter path -> ours: model.layers.3.linear_attn.A_log ->
    blocks.3.mixer.A_log."""
    name = re.sub(r"^model\.layers\.(\d+)\.(linear_attn|self_attn)\.", r"blocks.\1.mixer.", hf_name)
    name = re.sub(r"^model\.layers\.", "blocks.", name)
    return re.sub(r"^model\.", "", name)


def from_hf(hf_model) -> HybridGPT:
    """Our ``HybridGPT`` holding a ``Qwen3_5ForCausalLM``'s weights (every tensor copied once; a
    missing or extra name is an error, not a silently random weight)."""
    model = HybridGPT(config_from_hf(hf_model.config))
    ours = model.state_dict()
    theirs = {our_name(k): v for k, v in hf_model.state_dict().items()}
    if model.config.tie_weights:
        theirs.pop("lm_head.weight", None)
        ours = {k: v for k, v in ours.items() if k != "lm_head.weight"}
    missing, extra = sorted(set(ours) - set(theirs)), sorted(set(theirs) - set(ours))
    if missing or extra:
        raise ValueError(f"weights that do not match by name: missing {missing[:5]}, "
                         f"extra {extra[:5]}")
    with torch.no_grad():
        for name, tensor in theirs.items():
            ours[name].copy_(tensor)
    return model
