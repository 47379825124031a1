"""Library additions for chapters 3-4: attention.score_variance and plots.plot_attention_heads."""
import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import pytest
import torch

from course_lib import attention, plots


def test_score_variance_matches_the_definition():
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(8, 64, 16, generator=gen)
    k = torch.randn(8, 64, 16, generator=gen)
    scores = q @ k.transpose(-2, -1)
    got = attention.score_variance(16, generator=torch.Generator().manual_seed(0))
    assert got == pytest.approx(scores.var().item(), rel=1e-6)
    got = attention.score_variance(16, scaled=True, generator=torch.Generator().manual_seed(0))
    assert got == pytest.approx((scores / 4).var().item(), rel=1e-6)


@pytest.mark.parametrize("hs", [4, 64, 512])
def test_score_variance_is_about_head_size_then_one(hs):
    gen = torch.Generator().manual_seed(1)
    assert attention.score_variance(hs, generator=gen) == pytest.approx(hs, rel=0.15)
    assert attention.score_variance(hs, scaled=True, generator=gen) == pytest.approx(1.0, rel=0.15)


def test_score_variance_uses_the_global_rng_without_generator():
    torch.manual_seed(3)
    a = attention.score_variance(8, batch=2, T=4)
    torch.manual_seed(3)
    assert attention.score_variance(8, batch=2, T=4) == a


def test_score_variance_rejects_bad_head_size():
    with pytest.raises(ValueError, match="head_size"):
        attention.score_variance(0)


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
