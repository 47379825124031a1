"""Library helpers added for chapters 5 and 6: gradient norms per layer, count formatting,
parameter tables, and their plots."""
import math

import matplotlib.pyplot as plt
import pytest
import torch
import torch.nn as nn

from course_lib import plots
from course_lib.model import GPT, GPTConfig
from course_lib.sizing import count_parameters, format_count, format_table, parameter_breakdown, parameter_table
from course_lib.train import parameter_gradient_norms
from course_lib.presets import PRESETS


def test_parameter_gradient_norms_match_a_manual_norm():
    layers = nn.ModuleList([nn.Linear(4, 4), nn.Linear(4, 4), nn.Linear(4, 2)])
    x = torch.randn(3, 4)
    for layer in layers:
        x = layer(x)
    x.pow(2).sum().backward()
    norms = parameter_gradient_norms(layers)
    assert len(norms) == 3
    for layer, norm in zip(layers, norms):
        manual = torch.cat([p.grad.flatten() for p in layer.parameters()]).norm().item()
        assert math.isclose(norm, manual, rel_tol=1e-5)


def test_parameter_gradient_norms_zero_without_gradients_and_tiny_values_survive():
    a, b = nn.Linear(3, 3, bias=False), nn.Linear(3, 3, bias=False)
    a.weight.grad = torch.full((3, 3), 1e-25)  # its float32 square underflows to 0
    assert parameter_gradient_norms([a, b]) == pytest.approx([3e-25, 0.0], rel=1e-4)


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


def test_plot_loss_comparison_one_colour_per_run():
    h1 = {"step": list(range(1, 51)), "loss": [4 - i / 50 for i in range(50)]}
    h2 = {"step": list(range(1, 6)), "loss": [4.0, 3.9, 3.8, 3.7, 3.6]}
    ax = plots.plot_loss_comparison({"a": h1, "b": h2}, smooth=10)
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels == ["a (10-step mean)", "b"]
    plt.close("all")


def test_plot_gradient_norms_uses_a_log_axis():
    ax = plots.plot_gradient_norms({"with": [1.0, 0.5], "without": [1e-20, 1e-3]})
    assert ax.get_yscale() == "log" and len(ax.get_lines()) == 2
    assert list(ax.get_lines()[0].get_xdata()) == [1, 2]
    plt.close("all")


def test_plot_parameter_shares_stack_to_100_percent():
    configs = [GPTConfig(vocab_size=100, block_size=16, n_layer=2, n_head=2, n_embd=C) for C in (16, 64)]
    breakdowns = {f"C={c.n_embd}": parameter_breakdown(c) for c in configs}
    ax = plots.plot_parameter_shares(breakdowns)
    heights = [0.0, 0.0]
    for patch in ax.patches:
        heights[round(patch.get_x() + patch.get_width() / 2)] += patch.get_height()
    assert heights == pytest.approx([100.0, 100.0])
    assert "LM head" not in [t.get_text() for t in ax.get_legend().get_texts()]  # tied: always zero
    plt.close("all")


def test_count_parameters_matches_a_built_model_for_the_course_presets():
    c = PRESETS["shakespeare-char-cpu"].model
    assert count_parameters(c) == sum(p.numel() for p in GPT(c).parameters())
