"""Hugging Face's Mixtral and Qwen3-MoE in our :class:`~course_lib.model.GPT` (chapter 20).

Both are a Llama (:mod:`course_lib.llama`) whose MLPs are mixtures of experts
(:mod:`course_lib.moe`): ``moe_experts`` SwiGLU experts, a bias-free linear router, top-k.

- Mixtral (Jiang et al. 2024): 8 experts, top-2, the two weights renormalised (``moe_norm_topk``);
  its sliding-window attention is chapter 14's ``sliding_window``.
- Qwen3-MoE (Qwen team 2025): top-k with ``norm_topk_prob`` choosing the renormalisation, and
  QK-norm (an RMSNorm over each head's queries and keys, our ``qk_norm``); every layer sparse.

The weights copy over with new names and one split: Hugging Face stores each layer's experts as
two stacked tensors, ``gate_up_proj`` (E, 2H, C: the gate's H rows, then up's) and ``down_proj``
(E, C, H); ours are E separate SwiGLU modules (``c_gate``, ``c_fc``, ``c_proj``). The router is
``mlp.gate`` there, ``mlp.router`` here.

Shapes: C = hidden_size, H = the experts' intermediate size, E = experts, L = layers.
"""
from __future__ import annotations

import torch
import torch.nn as nn

from .llama import _rope_settings, weight_map as llama_weight_map
from .model import GPT, GPTConfig
from .registry import register_pretrained


def config_from_hf(hf_config, dropout: float = 0.0) -> GPTConfig:
    """Our :class:`GPTConfig` for a Hugging Face ``MixtralConfig`` or ``Qwen3MoeConfig``; raises
    ``ValueError`` naming every setting our GPT does not implement."""
    model_type = getattr(hf_config, "model_type", None)
    if model_type not in ("mixtral", "qwen3_moe"):
        raise ValueError(f"expected a Mixtral or Qwen3-MoE model, got model_type {model_type!r}")
    C, nh = hf_config.hidden_size, hf_config.num_attention_heads
    theta, rope = _rope_settings(hf_config)
    rope_type = rope["rope_type"]
    qwen = model_type == "qwen3_moe"
    unsupported = []
    head_dim = getattr(hf_config, "head_dim", None) or C // nh
    if hf_config.hidden_act != "silu":
        unsupported.append(f"hidden_act={hf_config.hidden_act!r} (SwiGLU's gate is SiLU)")
    if rope_type != "default":
        unsupported.append(f"rope_type={rope_type!r} (we implement plain RoPE)")
    if getattr(hf_config, "attention_bias", False):
        unsupported.append("attention_bias=True")
    window = getattr(hf_config, "sliding_window", None)
    if qwen and window is not None and hf_config.use_sliding_window:
        unsupported.append(f"use_sliding_window with sliding_window={window} (Qwen3-MoE windows "
                           "some layers only)")
    # Mixtral: every layer sees the same window (our sliding_window)
    window = None if qwen else window
    if getattr(hf_config, "router_jitter_noise", 0.0):
        unsupported.append(f"router_jitter_noise={hf_config.router_jitter_noise}")
    if qwen and (hf_config.decoder_sparse_step != 1 or hf_config.mlp_only_layers):
        unsupported.append("dense layers among the sparse ones (decoder_sparse_step != 1 or "
                           "mlp_only_layers)")
    if unsupported:
        raise ValueError(f"this {model_type} config uses settings course_lib's GPT does not "
                         "implement: "
                         + "; ".join(unsupported))
    return GPTConfig(
        vocab_size=hf_config.vocab_size, block_size=hf_config.max_position_embeddings,
        n_layer=hf_config.num_hidden_layers, n_head=nh, n_embd=C, dropout=dropout, bias=False,
        tie_weights=bool(getattr(hf_config, "tie_word_embeddings", False)), norm="rmsnorm",
        norm_eps=float(hf_config.rms_norm_eps), rope_theta=theta, mlp="swiglu",
        ffn_hidden=hf_config.moe_intermediate_size if qwen else hf_config.intermediate_size,
        n_kv_head=hf_config.num_key_value_heads,
        moe_experts=hf_config.num_experts if qwen else hf_config.num_local_experts,
        moe_top_k=hf_config.num_experts_per_tok,
        moe_norm_topk=bool(hf_config.norm_topk_prob) if qwen else True,
        moe_aux_coef=float(hf_config.router_aux_loss_coef), qk_norm=qwen,
        head_dim=None if head_dim * nh == C else head_dim, sliding_window=window,
    )


@torch.no_grad()
def load_hf_state_dict(model: GPT, hf_state: dict[str, torch.Tensor]) -> GPT:
    """Copy a Mixtral or Qwen3-MoE ``state_dict`` (Hugging Face names) into ``model`` in place;
    every parameter of ``model`` is written and every shape checked."""
    c = model.config
    ours = model.state_dict()
    pairs = []  # (our name, the Hugging Face tensor)
    for name, hf_names in llama_weight_map(c.n_layer, c.tie_weights):
        if ".mlp." not in name:  # the attention, norms, embeddings and head are a Llama's
            pairs.append((name, [hf_state.get(n) for n in hf_names], hf_names))
    for i in range(c.n_layer):
        hf, we = f"model.layers.{i}.", f"blocks.{i}."
        pairs.append((we + "mlp.router.weight", [hf_state.get(hf + "mlp.gate.weight")],
                      [hf + "mlp.gate.weight"]))
        if c.qk_norm:
            for q in "qk":
                pairs.append((we + f"attn.{q}_norm.weight",
                              [hf_state.get(hf + f"self_attn.{q}_norm.weight")],
                              [hf + f"self_attn.{q}_norm.weight"]))
        gate_up, down = (
            hf_state.get(hf + "mlp.experts.gate_up_proj"),
            hf_state.get(hf + "mlp.experts.down_proj"),
        )
        H = c.ffn_size
        for e in range(c.moe_experts):
            ex = we + f"mlp.experts.{e}."
            names = [hf + "mlp.experts.gate_up_proj"]
            pairs.append((ex + "c_gate.weight", [None if gate_up is None else gate_up[e, :H]],
                          names))
            pairs.append((ex + "c_fc.weight", [None if gate_up is None else gate_up[e, H:]], names))
            pairs.append((ex + "c_proj.weight", [None if down is None else down[e]],
                          [hf + "mlp.experts.down_proj"]))
    missing = sorted({n for _, ws, names in pairs for w, n in zip(ws, names) if w is None})
    if missing:
        raise ValueError(f"the state dict lacks {len(missing)} weights, e.g. {missing[:3]}: is it "
                         "a MixtralForCausalLM or Qwen3MoeForCausalLM of the same shape?")
    written = set()
    for name, ws, names in pairs:
        w = torch.cat(ws, dim=0)  # q, k, v rows stacked into c_attn
        if w.shape != ours[name].shape:
            raise ValueError(f"{' + '.join(names)}: shape {tuple(w.shape)} does not fit our {name} "
                             f"{tuple(ours[name].shape)}")
        ours[name].copy_(w)
        written.add(name)
    unwritten = set(ours) - written - ({"lm_head.weight"} if c.tie_weights else set())
    assert not unwritten, f"not loaded: {sorted(unwritten)[:3]}"  # a bug here, not bad input
    return model


def from_pretrained(model_or_name, dropout: float = 0.0) -> GPT:
    """Our :class:`GPT` holding a ``MixtralForCausalLM`` or ``Qwen3MoeForCausalLM`` (any size, e.g.
    a tiny random one built from its config offline). ``GPT.from_pretrained`` calls this for both. A
    Hub name goes through ``transformers.AutoModelForCausalLM`` (needs the network). The returned
    model is in eval mode, on the CPU, in float32."""
    hf_model = model_or_name
    if isinstance(model_or_name, str):
        import transformers  # only to download by name

        hf_model = transformers.AutoModelForCausalLM.from_pretrained(model_or_name)
    if not isinstance(hf_model, nn.Module) or not hasattr(hf_model, "config"):
        raise TypeError(f"expected a transformers MixtralForCausalLM or Qwen3MoeForCausalLM, got "
                        f"{type(hf_model).__name__}")
    config = config_from_hf(hf_model.config, dropout=dropout)
    if not hasattr(hf_model, "lm_head"):
        raise ValueError(f"{type(hf_model).__name__} has no language-model head: pass a "
                         "...ForCausalLM")
    hf_state = {k: v.detach().float().cpu() for k, v in hf_model.state_dict().items()}
    return load_hf_state_dict(GPT(config), hf_state).eval()


register_pretrained("mixtral")(from_pretrained)
register_pretrained("qwen3_moe")(from_pretrained)
