"""Hugging Face's Qwen3.5 in chapter 24's HybridGPT (course_lib/linear_attention/hf_qwen35.py):
tiny random models built offline, of several config shapes (hypothesis draws shapes nobody chose),
their every weight moved off its initial value; equal logits, equal greedy tokens (ours through the
fixed-size state and the KV cache, theirs through their own cache), and each option really used."""
from dataclasses import replace

import pytest
import torch
from hypothesis import given, settings, strategies as st

from course_lib.linear_attention.hf_qwen35 import config_from_hf, from_hf, our_name
from course_lib.linear_attention.hybrid import HybridGPT

transformers = pytest.importorskip("transformers")

V = 61
BASE = dict(vocab_size=V, hidden_size=32, intermediate_size=48, num_hidden_layers=4,
            num_attention_heads=4, num_key_value_heads=2, head_dim=8, linear_key_head_dim=8,
            linear_value_head_dim=6, linear_num_key_heads=2, linear_num_value_heads=4,
            linear_conv_kernel_dim=4, max_position_embeddings=64, tie_word_embeddings=False,
            bos_token_id=0, eos_token_id=None, pad_token_id=0)


def build(seed=0, **overrides):
    """A tiny random Qwen3_5ForCausalLM, every parameter moved by noise (norm gains start at 0 or 1,
    A_log and dt_bias at fixed values: a loader that mixed them up would otherwise pass)."""
    torch.manual_seed(seed)
    model = transformers.Qwen3_5ForCausalLM(
        transformers.Qwen3_5TextConfig(**dict(BASE, **overrides))).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    return model


def ids(B=2, T=40, seed=1):
    return torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(seed))


def logits(hf, ours, x):
    # no cache: transformers 5.24 cannot make one for a model without attention
    with torch.no_grad():
        return hf(x, use_cache=False).logits, ours(x)[0]


VARIANTS = {"3:1": {}, "tied": dict(tie_word_embeddings=True),
            "pattern LALA, mqa": dict(layer_types=["linear_attention", "full_attention"] * 2,
                                      num_key_value_heads=1),
            "one head group": dict(linear_num_key_heads=1, linear_num_value_heads=3,
                                   linear_value_head_dim=4),
            "kernel 2, half rotary": dict(linear_conv_kernel_dim=2, rope_parameters=dict(
                rope_type="default", rope_theta=500.0, partial_rotary_factor=0.5))}


@pytest.fixture(scope="module", params=list(VARIANTS))
def pair(request):
    hf = build(**VARIANTS[request.param])
    return hf, from_hf(hf).eval()


def test_logits_equal_hugging_face(pair):
    hf, ours = pair
    assert sum(p.numel() for p in ours.parameters()) == sum(p.numel() for p in hf.parameters())
    expected, got = logits(*pair, ids(T=70))  # 70 tokens: past one chunk of 64, into the next
    torch.testing.assert_close(got, expected, atol=1e-4,
                               rtol=1e-4)  # float32 in another order: ~1.5e-5 unpinned


def test_greedy_tokens_equal_hugging_face_generate(pair):
    hf, ours = pair
    prompt = ids(B=2, T=6, seed=3)
    with torch.no_grad():
        expected = hf.generate(prompt, attention_mask=torch.ones_like(prompt), do_sample=False,
                               max_new_tokens=25, pad_token_id=0)
    assert torch.equal(ours.generate(prompt, 25), expected)


@pytest.mark.slow
@settings(max_examples=8)
@given(hidden=st.sampled_from([16, 24, 40]), heads=st.sampled_from([1, 2, 4]),
       head_dim=st.sampled_from([4, 8, 12]), k_heads=st.integers(1, 3), groups=st.integers(1, 2),
       dk=st.integers(1, 9), dv=st.integers(1, 9), n_layer=st.integers(1, 5),
       every=st.integers(1, 4), kernel=st.integers(2, 5), tie=st.booleans(), T=st.integers(1, 70))
def test_logits_equal_for_any_config_shape(hidden, heads, head_dim, k_heads, groups, dk, dv,
                                           n_layer, every, kernel, tie, T):
    layer_types = ["full_attention" if (i + 1) % every == 0 else "linear_attention"
                   for i in range(n_layer)]
    hf = build(hidden_size=hidden, num_attention_heads=heads, num_key_value_heads=1,
               head_dim=head_dim, linear_num_key_heads=k_heads,
               linear_num_value_heads=k_heads * groups, linear_key_head_dim=dk,
               linear_value_head_dim=dv, num_hidden_layers=n_layer, layer_types=layer_types,
               linear_conv_kernel_dim=kernel, tie_word_embeddings=tie)
    expected, got = logits(hf, from_hf(hf).eval(), ids(B=1, T=T))
    # float32 in another order: ~1.5e-5 unpinned
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)


def test_each_part_is_really_used():
    """With the decay, the write strength, the convolution, the output gate or the rotary
    fraction changed, the logits differ: the equality above would otherwise hold for a model
    that ignored the part."""
    ours = from_hf(build()).eval()
    x = ids(T=30)
    with torch.no_grad():
        base = ours(x)[0]
        for name in ("mixer.A_log", "mixer.in_proj_b.weight",
                     "mixer.conv1d.weight", "mixer.in_proj_z.weight"):
            other = from_hf(build()).eval()
            getattr_path(other, f"blocks.0.{name}").mul_(1.5)
            assert (other(x)[0] - base).abs().max() > 1e-3, name
        other = HybridGPT(replace(ours.config, rotary_fraction=0.5)).eval()
        other.load_state_dict(ours.state_dict())
        assert (other(x)[0] - base).abs().max() > 1e-3


def getattr_path(module, path):
    for part in path.split("."):
        module = getattr(module, part)
    return module


def test_names_map_and_unsupported_settings_are_named():
    assert our_name("model.layers.3.linear_attn.A_log") == "blocks.3.mixer.A_log"
    assert our_name("model.layers.0.self_attn.q_norm.weight") == "blocks.0.mixer.q_norm.weight"
    assert our_name("model.layers.2.mlp.up_proj.weight") == "blocks.2.mlp.up_proj.weight"
    assert (our_name("model.norm.weight") == "norm.weight"
            and our_name("lm_head.weight") == "lm_head.weight")
    for overrides, message in [(dict(hidden_act="gelu"), "hidden_act"),
                               (dict(attention_bias=True), "attention_bias")]:
        with pytest.raises(ValueError, match=message):
            config_from_hf(transformers.Qwen3_5TextConfig(**dict(BASE, **overrides)))
