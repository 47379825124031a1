"""The decoders of 2025-26 (chapter 14), each equal to Hugging Face's within 1e-5 on tiny random
models built offline: Qwen3 (QK-norm, a head_dim that is not hidden_size / heads), Llama 3.1
(a base of 500,000 and rope_type "llama3") and Mistral (a sliding window shorter than the test
sequence); logits, logits through our KV cache, and greedy tokens with and without it. Then
the options one by one: the window's mask and cache, RoPE scaling, sizing, --set / resume /
sample."""
from dataclasses import replace

import pytest
import torch
from model_helpers import (change_one_token, cli_train_resume_and_sample, logits_of,
                           logits_through_kv_cache)
from hypothesis import given, settings, strategies as st

from course_lib import GPT, GPTConfig
from course_lib.attention import causal_mask, sliding_window_mask
from course_lib.generate import generate, generate_batch
from course_lib.llama import config_from_hf, weight_map
from course_lib.rope import rope_frequencies, scale_frequencies
from course_lib.sizing import count_parameters, flops_per_token, kv_cache_bytes

transformers = pytest.importorskip("transformers")

V, T_MAX, WINDOW = 97, 48, 7
COMMON = dict(vocab_size=V, hidden_size=48, intermediate_size=100, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=T_MAX,
              initializer_range=0.1, rms_norm_eps=1e-6,
              # no end token: greedy runs the full length
              bos_token_id=0, eos_token_id=None, pad_token_id=0)
LLAMA3_ROPE = dict(rope_type="llama3", rope_theta=500000.0, factor=8.0, low_freq_factor=1.0,
                   high_freq_factor=4.0, original_max_position_embeddings=16)


def build(family, seed=0, tie=False, **overrides):
    """A tiny random Hugging Face model of ``family``, its norm gains randomised (they start at
    1)."""
    config_class, model_class = {"qwen3": ("Qwen3Config", "Qwen3ForCausalLM"),
                                 "mistral": ("MistralConfig", "MistralForCausalLM"),
                                 "llama3": ("LlamaConfig", "LlamaForCausalLM")}[family]
    options = dict(COMMON, tie_word_embeddings=tie)
    options.update({"qwen3": dict(head_dim=16), "mistral": dict(sliding_window=WINDOW),
                    "llama3": dict(rope_parameters=LLAMA3_ROPE)}[family])
    options.update(overrides)
    torch.manual_seed(seed)
    model = getattr(transformers,
                    model_class)(getattr(transformers, config_class)(**options)).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(0.2 * torch.randn_like(p))
    return model


VARIANTS = {"qwen3": ("qwen3", {}),
            "qwen3-tied-mqa": ("qwen3", dict(tie=True, num_key_value_heads=1)),
            "qwen3-head32": ("qwen3", dict(head_dim=32)), "mistral": ("mistral", {}),
            "mistral-tied-window2": ("mistral", dict(tie=True, sliding_window=2)),
            "llama3": ("llama3", {}), "llama3-tied": ("llama3", dict(tie=True))}
_pairs = {}


@pytest.fixture(params=list(VARIANTS))
def pair(request):
    if request.param not in _pairs:
        family, options = VARIANTS[request.param]
        hf = build(family, **options)
        _pairs[request.param] = (hf, GPT.from_pretrained(hf))
    return _pairs[request.param]


def ids(B=2, T=40, seed=1):
    return torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(seed))


def test_config_carries_each_familys_setting(pair):
    hf, ours = pair
    c, h = ours.config, hf.config
    assert c.qk_norm == (h.model_type == "qwen3")
    assert c.head_size == (getattr(h, "head_dim", None) or h.hidden_size // h.num_attention_heads)
    assert c.sliding_window == (h.sliding_window if h.model_type == "mistral" else None)
    assert c.rope_scaling == ("llama3" if h.model_type == "llama" else None)
    assert c.tie_weights == h.tie_word_embeddings
    assert ours.num_parameters() == sum(p.numel() for p in hf.parameters()) == count_parameters(c)


def test_logits_equal_hugging_face(pair):
    x = ids()  # 40 tokens: past Mistral's window of 7, and past Llama 3's original context of 16
    expected, got = logits_of(*pair, x)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


def test_logits_through_our_kv_cache_equal_hugging_face(pair):
    hf, ours = pair
    x = ids(T=36, seed=2)
    expected, _ = logits_of(hf, ours, x)
    cached, cache = logits_through_kv_cache(ours, x, prompt=10)
    torch.testing.assert_close(cached, expected, atol=1e-5, rtol=1e-5)
    assert cache.length == 36
    window = ours.config.sliding_window
    # a window's cache keeps its last window - 1 positions
    kept = 36 if window is None else window - 1
    for layer in cache.layers:
        assert layer.k.shape[2] >= kept and (window is None or layer.k.shape[2] == kept)


def test_greedy_tokens_equal_hugging_face_generate_with_and_without_cache(pair):
    hf, ours = pair
    prompt = ids(B=1, T=5, seed=3)
    n = T_MAX - 5
    with torch.no_grad():
        expected = hf.generate(prompt, attention_mask=torch.ones_like(prompt), do_sample=False,
                               max_new_tokens=n, pad_token_id=0)
    assert expected.shape == (1, T_MAX)
    assert torch.equal(generate(ours, prompt, n, temperature=0), expected)
    assert torch.equal(generate(ours, prompt, n, temperature=0, use_cache=True), expected)


def test_window_of_one_equals_hugging_face_without_its_cache():
    """A window of 1 (each token sees itself only): Hugging Face's own sliding cache disagrees with
    its uncached generate here (transformers 5.24); ours agrees with the uncached one either way."""
    hf = build("mistral", tie=True, sliding_window=1)
    ours, prompt = GPT.from_pretrained(hf), ids(B=1, T=5, seed=3)
    with torch.no_grad():
        expected = hf.generate(prompt, attention_mask=torch.ones_like(prompt), do_sample=False,
                               max_new_tokens=20, pad_token_id=0, use_cache=False)
    for use_cache in (False, True):
        assert torch.equal(generate(ours, prompt, 20, temperature=0, use_cache=use_cache), expected)


def test_weight_map_lists_qwen3s_qk_norm_gains_and_every_parameter_once():
    for tie in (False, True):
        hf = build("qwen3", tie=tie)
        ours = GPT.from_pretrained(hf)
        rows = weight_map(2, tie, qk_norm=True)
        assert sorted(name for name, _ in rows) == sorted(n for n, _ in ours.named_parameters())
        assert len({n for _, names in rows for n in names}) == len(hf.state_dict()) - tie


def test_each_option_is_really_used():
    """Without QK-norm, the window or the llama3 scaling, each model's logits differ: the tests
    above would otherwise pass for a loader that ignored the option."""
    x = ids()
    # without the scaling, its factors go back to their defaults too (GPTConfig refuses them alone:
    # ignored)
    unscaled = {name: GPTConfig.__dataclass_fields__[name].default for name in
                ("rope_factor", "rope_low_freq_factor", "rope_high_freq_factor",
                 "rope_original_context")}
    for family, field, off in (("qwen3", "qk_norm", {}), ("mistral", "sliding_window", {}),
                               ("llama3", "rope_scaling", unscaled)):
        ours = GPT.from_pretrained(build(family))
        plain = GPT(replace(ours.config, **{field: None if field != "qk_norm" else False}, **off))
        plain.load_state_dict(ours.state_dict(), strict=False)
        with torch.no_grad():
            assert (plain(x)[0] - ours(x)[0]).abs().max() > 1e-3, field


def test_unsupported_settings_are_named():
    for family, overrides, message in [
            ("qwen3",
             dict(layer_types=["full_attention", "sliding_attention"], use_sliding_window=True,
                           sliding_window=4, max_window_layers=1), "layer_types"),
            ("llama3", dict(rope_parameters=dict(LLAMA3_ROPE, rope_type="yarn")), "rope_type"),
            ("mistral", dict(hidden_act="gelu"), "hidden_act")]:
        with pytest.raises(ValueError, match=message):
            config_from_hf(build(family, **overrides).config)


# --- sliding-window attention ------------------------------------------------------------------


def test_window_mask_is_causal_and_banded():
    T, W = 9, 3
    m = sliding_window_mask(T, T, W)
    t, s = torch.meshgrid(torch.arange(T), torch.arange(T), indexing="ij")
    assert torch.equal(m, (s <= t) & (t - s < W))
    # a window as long as T: causal
    assert torch.equal(sliding_window_mask(T, T, T), causal_mask(T))
    # the last 2 queries
    assert torch.equal(sliding_window_mask(2, 6, 3), sliding_window_mask(6, 6, 3)[4:])


WINDOWED = dict(vocab_size=11, block_size=24, n_layer=2, n_head=2, n_embd=16, rope_theta=1e4,
                sliding_window=4)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(0, 10), min_size=6, max_size=24), st.data())
def test_a_token_outside_every_window_changes_nothing(tokens, data):
    """With L layers of window W a token reaches L * (W - 1) positions ahead, no further."""
    model = _windowed()
    t, a, b = change_one_token(model, tokens, data)
    reach = model.config.n_layer * (model.config.sliding_window - 1)
    assert torch.equal(a[0, :t], b[0, :t])
    assert torch.allclose(a[0, t + reach + 1:], b[0, t + reach + 1:], atol=1e-6)


_model = {}


def _windowed():
    if "w" not in _model:
        torch.manual_seed(0)
        _model["w"] = GPT(GPTConfig(**WINDOWED)).eval()
    return _model["w"]


def test_window_cache_keeps_window_minus_one_positions_and_its_bytes_stop_growing():
    model = _windowed()
    c = model.config
    x = torch.randint(0, 11, (3, 24), generator=torch.Generator().manual_seed(0))
    cached, cache = logits_through_kv_cache(model, x, prompt=5)
    with torch.no_grad():
        torch.testing.assert_close(cached, model(x)[0], atol=1e-5, rtol=1e-5)
    assert (
        cache.nbytes
        == kv_cache_bytes(c, batch_size=3)
        == 2 * c.n_layer * 3 * (c.sliding_window - 1) * c.n_embd * 4
    )
    full = replace(c, sliding_window=None)
    assert kv_cache_bytes(full, batch_size=3) / cache.nbytes == 24 / 3


def test_left_padded_batch_with_a_window_equals_each_prompt_alone():
    model = _windowed()
    prompts = [[1, 2, 3, 4, 5, 6, 7, 8], [9, 10], [3, 4, 5]]
    for use_cache in (False, True):
        batch = generate_batch(model, prompts, 8, temperature=0, use_cache=use_cache)
        alone = [generate(model, torch.tensor([p]), 8, temperature=0)[0].tolist() for p in prompts]
        assert batch == alone


# --- RoPE scaling ---------------------------------------------------------------------------------


def test_linear_scaling_divides_every_frequency_and_llama3_keeps_the_fast_pairs():
    plain = rope_frequencies(64, 500000.0)
    torch.testing.assert_close(rope_frequencies(64, 500000.0, "linear", 4.0), plain / 4)
    scaled = rope_frequencies(64, 500000.0, "llama3", 8.0, 1.0, 4.0, 8192)
    wavelength = 2 * torch.pi / plain
    fast, slow = wavelength < 8192 / 4, wavelength > 8192
    assert torch.equal(scaled[fast], plain[fast]) and torch.allclose(scaled[slow], plain[slow] / 8)
    middle = ~fast & ~slow
    assert (middle.any() and torch.all(scaled[middle] < plain[middle])
            and torch.all(scaled[middle] > plain[middle] / 8))
    with pytest.raises(ValueError, match="original_context"):
        scale_frequencies(plain, "llama3", 8.0)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(rope_scaling="llama3"), "set rope_theta"),
        (dict(rope_theta=1e4, rope_scaling="ntk"), "rope_scaling must be one of"),
        (
            dict(rope_theta=1e4, rope_scaling="llama3", rope_low_freq_factor=4.0),
            "rope_high_freq_factor",
        ),
        (dict(rope_factor=0.5), "rope_factor must be a finite number >= 1"),
        (dict(sliding_window=0), "sliding_window must be"),
        (dict(head_dim=0), "head_dim must be"),
        (dict(rope_theta=1e4, head_dim=7, n_embd=12, n_head=4), "must be even"),
    ],
)
def test_bad_new_options_are_clear_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        GPTConfig(**kwargs)


# --- sizing, and the command line ----------------------------------------------------------------

SIZES = [dict(), dict(qk_norm=True), dict(head_dim=24, n_kv_head=2),
         dict(head_dim=8, qk_norm=True, bias=True), dict(sliding_window=5),
         dict(rope_theta=1e4, rope_scaling="llama3", rope_factor=4.0)]


@pytest.mark.parametrize("options", SIZES)
def test_sizing_counts_every_new_option(options):
    c = GPTConfig(vocab_size=11, block_size=16, n_layer=2, n_head=4, n_embd=32, **options)
    model = GPT(c)
    assert count_parameters(c) == model.num_parameters() == sum(p.numel()
                                                                for p in model.parameters())
    assert flops_per_token(c) == model.flops_per_token()
    if c.sliding_window:  # each query scores 5 keys, not 16
        assert (
            flops_per_token(replace(c, sliding_window=None)) - flops_per_token(c)
            == 3 * 4 * 2 * (16 - 5) * 32
        )


NEW_SET = ["--set", "norm=rmsnorm", "--set", "rope_theta=10000", "--set", "n_kv_head=2", "--set",
           "mlp=swiglu", "--set", "qk_norm=true", "--set", "head_dim=12", "--set",
           "sliding_window=8", "--set", "rope_scaling=llama3", "--set", "rope_factor=4", "--set",
           "rope_original_context=8", "--set", "n_layer=2", "--set", "n_head=4", "--set",
           "n_embd=32", "--set", "block_size=32", "--set", "batch_size=4", "--set",
           "eval_interval=3", "--set", "eval_iters=2", "--device", "cpu"]


def test_cli_sets_saves_resumes_bitwise_and_samples_every_new_option(tmp_path, capsys):
    a = cli_train_resume_and_sample(tmp_path, capsys, NEW_SET, tokens=40)
    config = GPTConfig.from_dict(a["model_config"])
    assert (config.qk_norm, config.head_dim, config.sliding_window, config.rope_scaling,
            config.rope_factor, config.rope_original_context) == (True, 12, 8, "llama3", 4.0, 8)
    assert "blocks.0.attn.q_norm.weight" in a["model"]


def test_repr_shows_the_new_options_only_when_set():
    """Configs printed by chapters 4-13 read as before these options existed."""
    plain = repr(GPTConfig())
    assert plain.endswith("ffn_hidden=None, n_kv_head=None)") and "qk_norm" not in plain
    assert repr(GPTConfig(qk_norm=True, sliding_window=4)).endswith("n_kv_head=None, qk_norm=True, "
                                                                    "sliding_window=4)")
