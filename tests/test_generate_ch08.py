"""Library pieces added for chapter 8: the KV-cache timing helper, its benchmark script, and the
token-distribution plot."""
import subprocess
import sys
from pathlib import Path

import matplotlib.pyplot as plt
import pytest
import torch

from course_lib.generate import compare_cache_speed, generate
from course_lib.model import GPT, GPTConfig
from course_lib.plots import plot_token_distributions

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def model():
    torch.manual_seed(0)
    return GPT(GPTConfig(vocab_size=12, block_size=16, n_layer=2, n_head=2, n_embd=16)).eval()


def test_compare_cache_speed_reports_both_speeds_and_equal_tokens(model):
    idx = torch.randint(12, (2, 5), generator=torch.Generator().manual_seed(1))
    result = compare_cache_speed(model, idx, 20, repeats=2, temperature=0.8, top_k=5)
    assert set(result) == {"no_cache", "cache", "speedup", "same_tokens"}
    assert result["same_tokens"] is True
    assert result["no_cache"] > 0 and result["cache"] > 0
    assert result["speedup"] == pytest.approx(result["cache"] / result["no_cache"])


def test_compare_cache_speed_uses_the_seed_like_generate(model):
    # The tokens it compares are the ones generate() gives for that seed: nothing else draws from it.
    idx = torch.zeros(1, 1, dtype=torch.long)
    expected = generate(model, idx, 10, generator=torch.Generator().manual_seed(5))
    assert compare_cache_speed(model, idx, 10, seed=5)["same_tokens"]
    assert torch.equal(expected, generate(model, idx, 10, generator=torch.Generator().manual_seed(5), use_cache=True))


def test_compare_cache_speed_rejects_zero_repeats(model):
    with pytest.raises(ValueError, match="repeats must be >= 1"):
        compare_cache_speed(model, torch.zeros(1, 1, dtype=torch.long), 3, repeats=0)


def test_kv_cache_benchmark_script_runs_and_checks_equal_tokens():
    # The CPU preset (block_size 64) with a 60-token prompt: 4 new tokens, a quick smoke test.
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "kv_cache.py"), "--preset", "shakespeare-char-cpu",
                          "--prompt-len", "60", "--repeats", "1", "--threads", "1"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "without KV cache:" in out.stdout and "with KV cache:" in out.stdout
    assert "same tokens: True" in out.stdout and "speed-up:" in out.stdout


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
