"""course_lib.sizing: exact parameter counts (for every config), FLOPs, memory, and tables."""

import pytest
from hypothesis import given, strategies as st

from course_lib.model import GPT, GPTConfig
from course_lib.presets import PRESETS
from course_lib.sizing import (count_parameters, flops_per_token, format_count, format_table, parameter_breakdown,
                               parameter_table, training_memory_bytes)

configs = st.builds(
    lambda V, T, L, nh, hs, bias, tie, norm, act: GPTConfig(
        vocab_size=V, block_size=T, n_layer=L, n_head=nh, n_embd=nh * hs, bias=bias, tie_weights=tie,
        norm_position=norm, activation=act),
    st.integers(1, 70), st.integers(1, 40), st.integers(1, 4), st.integers(1, 4), st.integers(1, 8),
    st.booleans(), st.booleans(), st.sampled_from(["pre", "post"]), st.sampled_from(["gelu", "relu"]),
)


@given(configs)
def test_parameter_formula_equals_numel_for_every_config(config):
    model = GPT(config)
    assert count_parameters(config) == sum(p.numel() for p in model.parameters()) == model.num_parameters()


def test_breakdown_matches_the_modules():
    config = GPTConfig(vocab_size=65, block_size=64, n_layer=4, n_head=4, n_embd=128, bias=True, tie_weights=False)
    model = GPT(config)
    parts = parameter_breakdown(config)
    count = lambda mods: sum(p.numel() for m in mods for p in m.parameters())
    assert parts["token embedding"] == model.wte.weight.numel()
    assert parts["position embedding"] == model.wpe.weight.numel()
    assert parts["attention"] == count(b.attn for b in model.blocks)
    assert parts["MLP"] == count(b.mlp for b in model.blocks)
    assert parts["LayerNorms"] == count([b.ln_1 for b in model.blocks] + [b.ln_2 for b in model.blocks] + [model.ln_f])
    assert parts["LM head"] == model.lm_head.weight.numel()
    # 12 C^2 per block, without biases.
    no_bias = parameter_breakdown(GPTConfig(n_embd=128, bias=False))
    assert no_bias["attention"] + no_bias["MLP"] == 4 * 12 * 128**2


def test_gpt2_small_has_124_439_808_parameters():
    assert count_parameters(PRESETS["gpt2-small"].model) == 124_439_808


def test_gpt3_non_embedding_weights_are_about_174_billion():
    gpt3 = GPTConfig(vocab_size=50257, block_size=2048, n_layer=96, n_head=96, n_embd=12288, bias=True)
    parts = parameter_breakdown(gpt3)
    assert parts["attention"] + parts["MLP"] == pytest.approx(96 * 12 * 12288**2, rel=1e-4)
    assert 174e9 < count_parameters(gpt3) < 176e9


def test_flops_and_memory():
    c = PRESETS["gpt2-small"].model
    n = count_parameters(c) - c.block_size * c.n_embd
    assert flops_per_token(c) == 6 * n + 12 * c.n_layer * c.block_size * c.n_embd
    assert flops_per_token(c, training=False) * 3 == flops_per_token(c)
    assert training_memory_bytes(c)["total"] == 16 * count_parameters(c)


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
    configs = {name: p.model for name, p in PRESETS.items()}
    text = parameter_table(configs)
    assert "124,439,808" in text and "124.4M" in text
    assert len(text.splitlines()) == 2 + len(configs)
    for name, c in configs.items():
        assert f"{count_parameters(c):,}" in text
    assert parameter_table(configs, markdown=True).startswith("| model | L | heads |")


def test_count_parameters_matches_a_built_model_for_the_course_presets():
    c = PRESETS["shakespeare-char-cpu"].model
    assert count_parameters(c) == sum(p.numel() for p in GPT(c).parameters())


# Chapter 14's options, alone and together: RMSNorm, RoPE, SwiGLU (default or any hidden size), n_kv_head.
modern_configs = st.builds(
    lambda V, T, L, n_kv, groups, hs, bias, tie, norm, rope, mlp, hidden: GPTConfig(
        vocab_size=V, block_size=T, n_layer=L, n_head=n_kv * groups, n_kv_head=n_kv, n_embd=n_kv * groups * hs,
        bias=bias, tie_weights=tie, norm=norm, rope_theta=rope, mlp=mlp, ffn_hidden=hidden),
    st.integers(1, 70), st.integers(1, 40), st.integers(1, 3), st.integers(1, 3), st.integers(1, 3),
    st.sampled_from([2, 4, 6]), st.booleans(), st.booleans(), st.sampled_from(["layernorm", "rmsnorm"]),
    st.sampled_from([None, 10000.0]), st.sampled_from(["standard", "swiglu"]), st.one_of(st.none(), st.integers(1, 50)),
)


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
    # FLOPs: 6 N + 12 L T C, N counting every matmul weight (not the lookups)
    lookups = model.wte.weight.numel() * (not config.tie_weights) + parts["position embedding"]
    assert flops_per_token(config) == 6 * (model.num_parameters() - lookups) + 12 * config.n_layer * \
        config.block_size * config.n_embd
    assert training_memory_bytes(config)["total"] == 16 * model.num_parameters()


def test_swiglu_with_the_8_3_rule_keeps_the_mlp_weights():
    for C in (128, 768, 4096):
        standard, swiglu = GPTConfig(n_embd=C, n_head=8), GPTConfig(n_embd=C, n_head=8, mlp="swiglu")
        assert swiglu.ffn_size % 32 == 0 and 0 <= swiglu.ffn_size - 8 * C / 3 < 32
        ratio = parameter_breakdown(swiglu)["MLP"] / parameter_breakdown(standard)["MLP"]
        assert 1.0 <= ratio < 1 + 3 * 32 / (8 * C)  # only the rounding up adds weights


def test_kv_cache_bytes_shrink_by_the_group_size():
    from course_lib.sizing import kv_cache_bytes

    mha = GPTConfig(vocab_size=50257, block_size=1024, n_layer=12, n_head=12, n_embd=768)
    # 2 (k and v) x 12 layers x 1024 positions x 768 channels x 4 bytes
    assert kv_cache_bytes(mha) == 2 * 12 * 1024 * 768 * 4
    for n_kv in (1, 2, 3, 4, 6, 12):
        gqa = GPTConfig(**{**mha.to_dict(), "n_kv_head": n_kv})
        assert kv_cache_bytes(gqa, batch_size=3, bytes_per_value=2) * (12 // n_kv) == kv_cache_bytes(
            mha, batch_size=3, bytes_per_value=2)
