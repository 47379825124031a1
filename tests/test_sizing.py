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
