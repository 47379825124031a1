import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings, strategies as st

from course_lib.generate import (compare_cache_speed, generate, generate_batch, generate_text,
                                 sample_next, top_k_filter, top_p_filter)
from course_lib.model import GPT, GPTConfig
from course_lib.tokenizers import CharTokenizer

ROOT = Path(__file__).resolve().parent.parent

torch.manual_seed(0)
MODEL = GPT(GPTConfig(vocab_size=12, block_size=10, n_layer=2, n_head=2, n_embd=16)).eval()


@pytest.mark.parametrize("kwargs", [dict(), dict(temperature=0.7, top_k=5), dict(top_p=0.8),
                                    dict(temperature=0)])
def test_kv_cache_gives_the_same_tokens_as_recomputation(kwargs):
    idx = torch.randint(12, (3, 4), generator=torch.Generator().manual_seed(1))
    # 25 new tokens: past block_size 10, so cropping and cache refills are exercised too.
    a = generate(MODEL, idx, 25, generator=torch.Generator().manual_seed(2), **kwargs)
    b = generate(MODEL, idx, 25, generator=torch.Generator().manual_seed(2), use_cache=True,
                 **kwargs)
    assert a.shape == (3, 29) and torch.equal(a, b)
    assert torch.equal(a[:, :4], idx)


def test_generation_crops_the_context_and_is_reproducible():
    idx = torch.zeros(1, 30, dtype=torch.long)  # longer than block_size: must be cropped, not crash
    a = generate(MODEL, idx, 5, generator=torch.Generator().manual_seed(3))
    b = generate(MODEL, idx, 5, generator=torch.Generator().manual_seed(3))
    assert torch.equal(a, b) and a.shape == (1, 35)


def test_greedy_is_argmax():
    logits = torch.tensor([[0.1, 2.0, -1.0], [3.0, 0.0, 0.0]])
    assert sample_next(logits, temperature=0).tolist() == [[1], [0]]


def test_top_k_keeps_k_most_likely():
    logits = torch.tensor([[1.0, 4.0, 3.0, 2.0]])
    kept = top_k_filter(logits, 2)
    assert torch.isfinite(kept).tolist() == [[False, True, True, False]]
    assert torch.equal(top_k_filter(logits, 10), logits)


@given(st.lists(st.floats(-5, 5), min_size=2, max_size=20), st.floats(0.05, 1.0))
def test_top_p_keeps_the_smallest_nucleus_reaching_p(values, p):
    logits = torch.tensor([values])
    kept = torch.isfinite(top_p_filter(logits, p))[0]
    probs = torch.softmax(logits, -1)[0]
    assert kept[probs == probs.max()].any()  # a most likely token always survives (ties: any one)
    assert probs[kept].sum() >= p - 1e-5  # the nucleus reaches p ...
    # ... and is minimal: dropping its least likely member falls below p.
    smallest = probs[kept].min()
    assert probs[kept].sum() - smallest < p + 1e-5


@pytest.mark.parametrize("kwargs, message", [
    (dict(temperature=-0.5), "temperature must be >= 0"),
    (dict(top_k=0), "top_k must be an integer >= 1"),
    (dict(top_p=0.0), r"top_p must be in \(0, 1\]"),
    (dict(top_p=1.5), r"top_p must be in \(0, 1\]"),
])
def test_bad_sampling_arguments_are_clear_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        generate(MODEL, torch.zeros(1, 1, dtype=torch.long), 3, **kwargs)


def test_generate_text_round_trips_the_prompt():
    tok = CharTokenizer("abcdefghijkl")
    text = generate_text(MODEL, tok, "abc", 10, seed=0)
    assert text.startswith("abc") and len(text) == 13
    with pytest.raises(ValueError, match="prompt is empty"):
        generate_text(MODEL, tok, "", 3)
    with pytest.raises(ValueError, match="unknown character 'z'"):
        generate_text(MODEL, tok, "z", 3)


# --- measuring the KV cache (chapter 8) ---


@pytest.fixture
def model(tiny_model):
    return tiny_model(vocab_size=12).eval()


def test_compare_cache_speed_reports_both_speeds_and_equal_tokens(model):
    idx = torch.randint(12, (2, 5), generator=torch.Generator().manual_seed(1))
    result = compare_cache_speed(model, idx, 20, repeats=2, temperature=0.8, top_k=5)
    assert set(result) == {"no_cache", "cache", "speedup", "same_tokens"}
    assert result["same_tokens"] is True
    assert result["no_cache"] > 0 and result["cache"] > 0
    assert result["speedup"] == pytest.approx(result["cache"] / result["no_cache"])


def test_compare_cache_speed_uses_the_seed_like_generate(model):
    # The tokens it compares are the ones generate() gives for that seed: nothing else draws from
    # it.
    idx = torch.zeros(1, 1, dtype=torch.long)
    expected = generate(model, idx, 10, generator=torch.Generator().manual_seed(5))
    assert compare_cache_speed(model, idx, 10, seed=5)["same_tokens"]
    assert torch.equal(
        expected,
        generate(model, idx, 10, generator=torch.Generator().manual_seed(5), use_cache=True),
    )


def test_compare_cache_speed_rejects_zero_repeats(model):
    with pytest.raises(ValueError, match="repeats must be >= 1"):
        compare_cache_speed(model, torch.zeros(1, 1, dtype=torch.long), 3, repeats=0)


@pytest.mark.slow  # starts a benchmark script in a fresh process
def test_kv_cache_benchmark_script_runs_and_checks_equal_tokens():
    # The CPU preset (block_size 64) with a 60-token prompt: 4 new tokens, a quick smoke test.
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "kv_cache.py"), "--preset",
                          "shakespeare-char-cpu", "--prompt-len", "60", "--repeats", "1",
                          "--threads", "1"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "without KV cache:" in out.stdout and "with KV cache:" in out.stdout
    assert "same tokens: True" in out.stdout and "speed-up:" in out.stdout


# --- batched generation from prompts of different lengths (chapter 10) ---

SAMPLERS = [dict(temperature=0), dict(), dict(temperature=0.8, top_k=5), dict(top_p=0.9)]


def _alone(prompt, n, seed, use_cache, end_id=None, **kwargs):
    """One prompt on its own, through the plain tensor path of generate, cut after end_id."""
    out = generate(MODEL, torch.tensor([prompt]), n, generator=torch.Generator().manual_seed(seed),
                   use_cache=use_cache, **kwargs)[0].tolist()
    if end_id is not None and end_id in out[len(prompt):]:
        out = out[: out.index(end_id, len(prompt)) + 1]
    return out


@settings(max_examples=25)
@given(st.lists(st.lists(st.integers(0, 11), min_size=1, max_size=10), min_size=1, max_size=4),
       st.integers(0, 14), st.sampled_from(range(len(SAMPLERS))), st.booleans(),
       st.sampled_from([None, 3]))
def test_batched_generation_equals_one_prompt_at_a_time(prompts, n, sampler, use_cache, end_id):
    kwargs = SAMPLERS[sampler]
    gens = [torch.Generator().manual_seed(100 + i) for i in range(len(prompts))]
    batched = generate_batch(MODEL, prompts, n, generators=gens, use_cache=use_cache, end_id=end_id,
                             **kwargs)
    expected = [_alone(p, n, 100 + i, use_cache, end_id, **kwargs) for i, p in enumerate(prompts)]
    assert batched == expected


def test_generate_accepts_a_list_of_prompts_and_stops_rows_at_the_end_token():
    prompts = [[1, 2, 3], [4], [5, 6, 7, 8, 9, 10, 11]]
    gens = [torch.Generator().manual_seed(i) for i in range(3)]
    out = generate(MODEL, prompts, 20, generators=gens, end_id=0, use_cache=True)
    assert [o[: len(p)] for o, p in zip(out, prompts)] == prompts
    for o, p in zip(out, prompts):
        new = o[len(p):]
        assert 0 not in new[:-1] and (new[-1] == 0 or len(new) == 20)
    greedy = generate_batch(MODEL, prompts, 5, temperature=0)
    assert greedy == [generate(MODEL, torch.tensor([p]), 5, temperature=0)[0].tolist()
                      for p in prompts]


@pytest.mark.parametrize("prompts, kwargs, message", [
    ([], {}, "non-empty list of prompts"),
    ([[1], []], {}, "prompt 1 is empty"),
    ([[1] * 11], {}, "prompt 0 has 11 tokens, more than block_size 10"),
    ([[1], [2]], dict(generators=[torch.Generator()]),
     "one generator per prompt: 2 prompts, 1 generators"),
    ([[1]], dict(pad_id=12), "pad_id 12 must be a token id"),
    ([[1]], dict(top_k=0), "top_k must be"),
])
def test_batched_generation_bad_input_is_a_clear_error(prompts, kwargs, message):
    with pytest.raises(ValueError, match=message):
        generate_batch(MODEL, prompts, 3, **kwargs)


def test_list_of_prompts_with_a_single_generator_is_refused():
    with pytest.raises(ValueError, match="generators="):
        generate(MODEL, [[1], [2]], 3, generator=torch.Generator())
    with pytest.raises(TypeError, match="only for a list of prompts"):
        generate(MODEL, torch.zeros(1, 1, dtype=torch.long), 3, end_id=0)
