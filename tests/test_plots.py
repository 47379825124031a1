"""course_lib.plots: each figure draws what it claims (axes, series, labels), without a display."""
import matplotlib.legend
import matplotlib.pyplot as plt
import pytest
import torch

from course_lib import plots
from course_lib.model import GPTConfig
from course_lib.plots import plot_token_distributions
from course_lib.sizing import parameter_breakdown


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
    configs = [GPTConfig(vocab_size=100, block_size=16, n_layer=2, n_head=2, n_embd=C)
               for C in (16, 64)]
    breakdowns = {f"C={c.n_embd}": parameter_breakdown(c) for c in configs}
    ax = plots.plot_parameter_shares(breakdowns)
    heights = [0.0, 0.0]
    for patch in ax.patches:
        heights[round(patch.get_x() + patch.get_width() / 2)] += patch.get_height()
    assert heights == pytest.approx([100.0, 100.0])
    assert "LM head" not in [t.get_text() for t in ax.get_legend().get_texts()]  # tied: always zero
    plt.close("all")


def test_plot_attention_heads_grid():
    w = torch.softmax(torch.randn(6, 5, 5), dim=-1)
    axes = plots.plot_attention_heads(w, tokens=list("ab c\n"), ncols=4, suptitle="layer 0")
    assert axes.shape == (2, 4)
    assert axes[0, 0].get_title() == "head 0"
    assert not axes[1, 3].axison  # unused panels are hidden
    labels = [t.get_text() for t in axes[0, 0].get_xticklabels()]
    assert labels == ["a", "b", " ", "c", "\\n"]
    plt.close("all")


def test_plot_attention_heads_list_and_titles():
    mats = [torch.eye(3), torch.ones(3, 3) / 3]
    axes = plots.plot_attention_heads(mats, titles=["self", "uniform"])
    assert axes.shape == (1, 2)
    assert [a.get_title() for a in axes.flat] == ["self", "uniform"]
    plt.close("all")


def test_plot_attention_heads_errors():
    with pytest.raises(ValueError, match=r"\(nh, T, T\)"):
        plots.plot_attention_heads(torch.rand(2, 3, 4, 4))
    with pytest.raises(ValueError, match="titles"):
        plots.plot_attention_heads(torch.rand(2, 4, 4), titles=["one"])
    with pytest.raises(ValueError, match="at least one"):
        plots.plot_attention_heads([])
    plt.close("all")


def test_plot_token_distributions_draws_one_bar_per_token_and_distribution():
    probs = {"t=0.5": torch.tensor([0.7, 0.2, 0.1]), "t=1": [0.5, 0.3, 0.2]}
    ax = plot_token_distributions(probs, ["a", "\n", 3])
    assert len(ax.patches) == 6
    assert [t.get_text() for t in ax.get_xticklabels()] == ["a", "\\n", "3"]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["t=0.5", "t=1"]
    plt.close(ax.figure)
    with pytest.raises(ValueError, match="has 2 entries but there are 3 labels"):
        plot_token_distributions({"bad": [0.5, 0.5]}, ["a", "b", "c"])
    plt.close("all")


def test_plot_eval_losses_one_colour_and_one_legend_entry_per_variant():
    run = lambda *losses: {"eval_step": [0, 10, 20], "val_loss": list(losses)}
    runs = {"a": [run(4, 3, 2), run(4, 3.1, 2.1)], "b": [run(4, 3.5, 3.4)]}
    ax = plots.plot_eval_losses(runs, baseline=3.3473, baseline_label="unigram")
    lines = ax.get_lines()
    assert len(lines) == 4  # three runs and the baseline
    assert lines[0].get_color() == lines[1].get_color() != lines[2].get_color()
    assert list(lines[2].get_xdata()) == [0, 10, 20] and list(lines[2].get_ydata()) == [4, 3.5, 3.4]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels == ["a", "b", "unigram 3.3473"]
    assert ax.get_ylabel() == "validation loss"
    plt.close("all")


def test_plot_eval_losses_run_labels_give_run_j_the_jth_marker_and_a_second_legend():
    run = lambda *losses: {"eval_step": [0, 10, 20], "val_loss": list(losses)}
    runs = {"a": [run(4, 3, 2), run(4, 3.1, 2.1)], "b": [run(4, 3.5, 3.4), run(4, 3.6, 3.3)]}
    ax = plots.plot_eval_losses(runs, baseline=3.3473, run_labels=["seed 1", "seed 2"])
    lines = ax.get_lines()
    # run j of every variant shares a marker, and the two runs of a variant differ
    assert (
        lines[0].get_marker()
        == lines[2].get_marker()
        != lines[1].get_marker()
        == lines[3].get_marker()
    )
    assert lines[0].get_color() == lines[1].get_color() != lines[2].get_color()
    legends = [child for child in ax.get_children() if isinstance(child, matplotlib.legend.Legend)]
    texts = sorted([t.get_text() for t in legend.get_texts()] for legend in legends)
    assert texts == [["a", "b", "baseline 3.3473"], ["seed 1", "seed 2"]]
    plt.close("all")
