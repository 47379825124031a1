"""course_lib.sizing: exact parameter counts (for every config), FLOPs, memory, and tables.

Every expected number is measured on a built model (its parameters, the matmul FLOPs torch counts,
what AdamW and the KV cache allocate) or published (GPT-2's and Llama's parameter counts), never
recomputed with the formulas under test.
"""

import pytest
import torch
from hypothesis import given, settings, strategies as st
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from course_lib.model import GPT, GPTConfig
from course_lib.presets import PRESETS
from course_lib.sizing import (count_parameters, flops_per_token, format_count, format_table,
                               kv_cache_bytes, parameter_breakdown, parameter_table,
                               training_memory_bytes)
from model_helpers import logits_through_kv_cache

configs = st.builds(
    lambda V, T, L, nh, hs, bias, tie, norm, act: GPTConfig(
        vocab_size=V, block_size=T, n_layer=L, n_head=nh, n_embd=nh * hs, bias=bias,
        tie_weights=tie, norm_position=norm, activation=act),
    st.integers(1, 70), st.integers(1, 40), st.integers(1, 4), st.integers(1, 4), st.integers(1, 8),
    st.booleans(), st.booleans(), st.sampled_from(["pre", "post"]),
    st.sampled_from(["gelu", "relu"]),
)

# Chapter 14's options, alone and together: RMSNorm, RoPE, SwiGLU (default or any hidden size),
# n_kv_head.
modern_configs = st.builds(
    lambda V, T, L, n_kv, groups, hs, bias, tie, norm, rope, mlp, hidden: GPTConfig(
        vocab_size=V, block_size=T, n_layer=L, n_head=n_kv * groups, n_kv_head=n_kv,
        n_embd=n_kv * groups * hs, bias=bias, tie_weights=tie, norm=norm, rope_theta=rope, mlp=mlp,
        ffn_hidden=hidden),
    st.integers(1, 70), st.integers(1, 40), st.integers(1, 3), st.integers(1, 3), st.integers(1, 3),
    st.sampled_from([2, 4, 6]), st.booleans(), st.booleans(),
    st.sampled_from(["layernorm", "rmsnorm"]), st.sampled_from([None, 10000.0]),
    st.sampled_from(["standard", "swiglu"]), st.one_of(st.none(), st.integers(1, 50)),
)


@given(configs)
def test_parameter_formula_equals_numel_for_every_config(config):
    model = GPT(config)
    assert count_parameters(config) == sum(p.numel()
                                           for p in model.parameters()) == model.num_parameters()


def test_breakdown_matches_the_modules():
    config = GPTConfig(vocab_size=65, block_size=64, n_layer=4, n_head=4, n_embd=128, bias=True,
                       tie_weights=False)
    model = GPT(config)
    parts = parameter_breakdown(config)
    count = lambda mods: sum(p.numel() for m in mods for p in m.parameters())
    assert parts["token embedding"] == model.wte.weight.numel()
    assert parts["position embedding"] == model.wpe.weight.numel()
    assert parts["attention"] == count(b.attn for b in model.blocks)
    assert parts["MLP"] == count(b.mlp for b in model.blocks)
    assert parts["LayerNorms"] == count(
        [b.ln_1 for b in model.blocks] + [b.ln_2 for b in model.blocks] + [model.ln_f]
    )
    assert parts["LM head"] == model.lm_head.weight.numel()
    # Chapter 6's rule, 12 C^2 per block without biases: the weights of the blocks' Linear layers
    blocks = GPT(GPTConfig(n_embd=128, bias=False)).blocks
    weights = sum(m.weight.numel() for m in blocks.modules() if isinstance(m, nn.Linear))
    no_bias = parameter_breakdown(GPTConfig(n_embd=128, bias=False))
    assert no_bias["attention"] + no_bias["MLP"] == weights == len(blocks) * 12 * 128**2


def gpt2(n_layer, n_head, n_embd) -> GPTConfig:
    return GPTConfig(vocab_size=50257, block_size=1024, n_layer=n_layer, n_head=n_head,
                     n_embd=n_embd, bias=True)


def llama(vocab, context, n_layer, n_head, n_kv_head, n_embd, hidden) -> GPTConfig:
    return GPTConfig(vocab_size=vocab, block_size=context, n_layer=n_layer, n_head=n_head,
                     n_kv_head=n_kv_head, n_embd=n_embd, ffn_hidden=hidden, norm="rmsnorm",
                     rope_theta=10000.0, mlp="swiglu", bias=False, tie_weights=False)


# Published exact counts: what Hugging Face's models report (model.num_parameters()) for the
# checkpoints named, with their published configs (GPT-2: the tied LM head counted once).
PUBLISHED = {
    "gpt2": (gpt2(12, 12, 768), 124_439_808),
    "gpt2-medium": (gpt2(24, 16, 1024), 354_823_168),
    "gpt2-large": (gpt2(36, 20, 1280), 774_030_080),
    "gpt2-xl": (gpt2(48, 25, 1600), 1_557_611_200),
    "meta-llama/Llama-2-7b-hf": (llama(32000, 4096, 32, 32, 32, 4096, 11008), 6_738_415_616),
    "TinyLlama/TinyLlama-1.1B (grouped-query)": (llama(32000, 2048, 22, 32, 4, 2048, 5632),
                                                 1_100_048_384),
}


@pytest.mark.parametrize("name", PUBLISHED)
def test_counts_equal_the_published_ones_and_a_built_model(name):
    config, published = PUBLISHED[name]
    # shapes without memory: even GPT-2 XL builds in a fraction of a second
    with torch.device("meta"):
        built = sum(p.numel() for p in GPT(config).parameters())
    assert count_parameters(config) == built == published


def test_the_gpt2_small_preset_is_gpt2():
    assert PRESETS["gpt2-small"].model == PUBLISHED["gpt2"][0]


def test_gpt3_has_about_175_billion_parameters():
    """The GPT-3 paper (Brown et al. 2020, table 2.1) gives 175.0B for 96 layers, C = 12288,
    context 2048, and no exact count; with GPT-2's vocabulary and layout ours is 174.6B, within
    0.3%."""
    gpt3 = GPTConfig(vocab_size=50257, block_size=2048, n_layer=96, n_head=96, n_embd=12288,
                     bias=True)
    with torch.device("meta"):
        built = sum(p.numel() for p in GPT(gpt3).parameters())
    assert count_parameters(gpt3) == built == pytest.approx(175.0e9, rel=3e-3)


def elementwise_parameters(model: GPT) -> int:
    """Parameters that enter no matmul: norm gains and biases (the weights of the Linear layers
    are matmuls; the token and position embeddings are lookups, unless the LM head reuses wte)."""
    lookups = {id(model.wte.weight)} | ({id(model.wpe.weight)} if model.wpe is not None else set())
    matmuls = {id(m.weight) for m in model.modules() if isinstance(m, nn.Linear)}
    return sum(p.numel() for p in model.parameters() if id(p) not in lookups | matmuls)


@settings(max_examples=15)
@given(st.one_of(configs, modern_configs))
def test_flops_per_token_equal_the_matmul_flops_torch_counts(config):
    """torch's FlopCounterMode counts every matmul of a forward pass at full context (attention in
    its plain math form, T x T scores, so that its matmuls are counted too), then of forward plus
    backward. flops_per_token is PaLM's estimate 6N + 12LTC: it counts every parameter but the
    lookups as a matmul weight, so it exceeds the count by exactly 2 (forward) or 6 (training)
    FLOPs per token for each norm gain and bias, and by nothing else."""
    model = GPT(config)
    B, T = 2, config.block_size
    x = torch.randint(0, config.vocab_size, (B, T))
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as forward:
        model(x, x)
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as training:
        _, loss = model(x, x)
        loss.backward()
    extra = elementwise_parameters(model)
    assert (flops_per_token(config,
                            training=False) == forward.get_total_flops() / (B * T) + 2 * extra)
    assert flops_per_token(config) == training.get_total_flops() / (B * T) + 6 * extra


def test_training_memory_is_what_adamw_allocates():
    """Weights, gradients and AdamW's two moments, measured on a model after one step (AdamW's
    per-tensor step counters, a few scalars, are left out, as the estimate leaves them out)."""
    for config in (GPTConfig(vocab_size=11, block_size=8, n_layer=2, n_head=2, n_embd=16,
                             bias=True),
                   GPTConfig(vocab_size=11, block_size=8, n_layer=1, n_head=4, n_kv_head=2,
                             n_embd=16, tie_weights=False, norm="rmsnorm", mlp="swiglu")):
        model = GPT(config)
        optimizer = torch.optim.AdamW(model.parameters())
        x = torch.randint(0, config.vocab_size, (2, config.block_size))
        model(x, x)[1].backward()
        optimizer.step()
        params = list(model.parameters())  # each shared tensor once (a tied LM head)
        state = [t for p in params for key, t in optimizer.state[p].items() if key != "step"]
        measured = {"weights": sum(p.nbytes for p in params),
                    "gradients": sum(p.grad.nbytes for p in params),
                    "AdamW state": sum(t.nbytes for t in state)}
        assert training_memory_bytes(config) == {**measured, "total": sum(measured.values())}


def test_format_count():
    assert format_count(804096) == "804.1K"
    assert format_count(124439808) == "124.4M"
    assert format_count(174604259328) == "174.6B"
    assert format_count(999) == "999"
    assert format_count(3.14e23) == "3.14e+23"


def test_format_table_aligns_and_makes_markdown():
    text = format_table(["name", "n"], [["a", 1000], ["bbb", 5]])
    lines = text.splitlines()
    assert lines[0].split() == ["name", "n"] and set(lines[1].replace(" ", "")) == {"-"}
    assert lines[2] == "a     1,000" and lines[3] == "bbb       5"
    md = format_table(["name", "n"], [["a", 1000]], markdown=True)
    assert md.splitlines() == ["| name | n |", "|:---|---:|", "| a | 1,000 |"]
    with pytest.raises(ValueError, match="2 values"):
        format_table(["name", "n"], [["a"]])


def test_parameter_table_has_exact_counts():
    # GPT sizes
    configs = {name: p.model for name, p in PRESETS.items() if isinstance(p.model, GPTConfig)}
    text = parameter_table(configs)
    assert "124,439,808" in text and "124.4M" in text
    assert len(text.splitlines()) == 2 + len(configs)
    for name, c in configs.items():
        assert f"{count_parameters(c):,}" in text
    assert parameter_table(configs, markdown=True).startswith("| model | L | heads |")


@given(modern_configs)
def test_parameter_formula_equals_numel_with_the_modern_options(config):
    model = GPT(config)
    assert count_parameters(config) == model.num_parameters()
    parts = parameter_breakdown(config)
    count = lambda mods: sum(p.numel() for m in mods for p in m.parameters())
    assert parts["attention"] == count(b.attn for b in model.blocks)
    assert parts["MLP"] == count(b.mlp for b in model.blocks)
    assert parts["position embedding"] == (0 if model.wpe is None else model.wpe.weight.numel())
    norms = [b.ln_1 for b in model.blocks] + [b.ln_2 for b in model.blocks] + [model.ln_f]
    assert parts["RMSNorms" if config.norm == "rmsnorm" else "LayerNorms"] == count(norms)


def test_swiglu_with_the_8_3_rule_keeps_the_mlp_weights():
    for C in (128, 768, 4096):
        standard, swiglu = GPTConfig(n_embd=C,
                                     n_head=8), GPTConfig(n_embd=C, n_head=8, mlp="swiglu")
        assert swiglu.ffn_size % 32 == 0 and 0 <= swiglu.ffn_size - 8 * C / 3 < 32
        ratio = parameter_breakdown(swiglu)["MLP"] / parameter_breakdown(standard)["MLP"]
        assert 1.0 <= ratio < 1 + 3 * 32 / (8 * C)  # only the rounding up adds weights


@pytest.mark.parametrize("n_kv_head", [1, 2, 4])  # multi-query, grouped-query, multi-head
def test_kv_cache_bytes_are_what_a_full_cache_holds(n_kv_head):
    """The bytes of keys and values a KV cache holds once the model has read a full context."""
    config = GPTConfig(vocab_size=11, block_size=12, n_layer=3, n_head=4, n_kv_head=n_kv_head,
                       n_embd=16)
    x = torch.randint(0, config.vocab_size, (5, config.block_size))
    _, cache = logits_through_kv_cache(GPT(config).eval(), x, prompt=4)
    held = sum(layer.k.nbytes + layer.v.nbytes for layer in cache.layers)
    assert kv_cache_bytes(config, batch_size=5) == held  # float32: 4 bytes per value
    assert kv_cache_bytes(config, batch_size=5, bytes_per_value=2) * 2 == held


def test_kv_cache_bytes_shrink_by_the_group_size():
    mha = GPTConfig(vocab_size=50257, block_size=1024, n_layer=12, n_head=12, n_embd=768)
    for n_kv in (1, 2, 3, 4, 6, 12):
        gqa = GPTConfig(**{**mha.to_dict(), "n_kv_head": n_kv})
        assert kv_cache_bytes(gqa, batch_size=3,
                              bytes_per_value=2) * (12 // n_kv) == kv_cache_bytes(
            mha, batch_size=3, bytes_per_value=2)


def test_memory_parts_hold_the_weights_and_a_lower_estimate_of_what_backward_keeps():
    """The parts of a model (every size that allocates) add up to its parameters and RoPE's angles,
    less the norms' gains; a training step's activations are at most what autograd saves for
    backward."""
    from course_lib.sizing import memory_parts

    config = GPTConfig(vocab_size=50, block_size=24, n_layer=2, n_head=4, n_kv_head=2, n_embd=32,
                       head_dim=12, rope_theta=1e4, mlp="swiglu", ffn_hidden=40, moe_experts=4,
                       moe_top_k=2, moe_shared_expert=True)
    model = GPT(config)
    held = sum(p.numel() for p in model.parameters()) + sum(b.numel() for b in model.buffers())
    norms = sum(p.numel() for n, p in model.named_parameters() if "ln" in n or "norm" in n)
    assert sum(n for n, _, _ in memory_parts(config)) == held - norms
    weights = {p.data_ptr() for p in model.parameters()}
    saved = {}

    def pack(t):
        if t.data_ptr() not in weights:
            saved[t.data_ptr()] = t.numel()
        return t

    B = 3
    x = torch.randint(0, 50, (B, 24))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(x, x)[1].backward()
    activations = memory_parts(config, B)[-1][0]
    assert 0 < activations <= sum(saved.values())
    assert memory_parts(config, 2 * B)[-1][0] == 2 * activations


def test_a_training_batch_over_the_memory_is_refused_and_the_presets_fit(monkeypatch):
    """Review 2026-11-28 row 9: chat-sft's model (vocabulary 88) with batch_size 100,000 needs about
    200 GiB; the GPU preset's step (batch 64) fits in a 12 GiB Colab."""
    from course_lib import utils
    from course_lib.sizing import check_gpt_fits
    from course_lib.utils import TooLargeError

    monkeypatch.setattr(utils, "available_memory",
                        lambda: (12 * 2**30, "available on this machine"))
    chat = GPTConfig(vocab_size=88, block_size=64, n_layer=4, n_head=4, n_embd=128,
                     tie_weights=False)
    with pytest.raises(TooLargeError,
                       match=r"batch_size 100,000 x block_size 64\), needs at least .*: choose a "
                                            r"smaller batch_size \(grad_accum_steps=N"):
        check_gpt_fits(chat, 100_000)
    for name in ("shakespeare-char-cpu", "shakespeare-char-gpu"):
        check_gpt_fits(PRESETS[name].model, PRESETS[name].train.batch_size)
