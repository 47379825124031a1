"""Chapter 14's options (RMSNorm, RoPE, SwiGLU, grouped-query attention) and GPT.from_pretrained
for Llama: Hugging Face's LlamaForCausalLM and our GPT give the same logits and the same greedy
tokens (offline, on tiny randomly initialised Llamas; published weights need the network)."""
from dataclasses import replace

import pytest
import torch
from model_helpers import (change_one_token, cli_train_resume_and_sample, logits_of,
                           logits_through_kv_cache)
from hypothesis import given, strategies as st

from course_lib import GPT, GPTConfig
from course_lib.attention import repeat_kv
from course_lib.generate import generate, generate_batch
from course_lib.llama import config_from_hf, weight_map
from course_lib.norms import RMSNorm
from course_lib.rope import apply_rope, rope_cos_sin
from course_lib.sizing import count_parameters, kv_cache_bytes

transformers = pytest.importorskip("transformers")

V, T_MAX = 97, 32


def tiny_hf(seed=0, n_kv=2, tie=False, theta=10000.0, **overrides):
    torch.manual_seed(seed)
    options = dict(vocab_size=V, hidden_size=48, intermediate_size=100, num_hidden_layers=2,
                   num_attention_heads=4, num_key_value_heads=n_kv, max_position_embeddings=T_MAX,
                   rope_theta=theta, tie_word_embeddings=tie, initializer_range=0.1,
                   rms_norm_eps=1e-6, bos_token_id=0, eos_token_id=0, pad_token_id=0)
    options.update(overrides)
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**options)).eval()
    with torch.no_grad():  # Llama initialises its RMSNorm gains to 1: randomise them to test them
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(0.2 * torch.randn_like(p))
    return model


def ids(B=2, T=20, seed=1):
    return torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(seed))


# multi-head, grouped-query and multi-query attention; tied and untied; two RoPE bases
VARIANTS = {"mha": dict(n_kv=4), "gqa": dict(n_kv=2), "mqa-tied": dict(n_kv=1, tie=True),
            "gqa-theta500": dict(n_kv=2, theta=500.0)}
_pairs = {}


@pytest.fixture(params=list(VARIANTS))
def pair(request):
    if request.param not in _pairs:
        hf = tiny_hf(**VARIANTS[request.param])
        _pairs[request.param] = (hf, GPT.from_pretrained(hf))
    return _pairs[request.param]


def test_config_carries_every_llama_setting(pair):
    hf, ours = pair
    c, h = ours.config, hf.config
    assert (c.norm, c.mlp, c.bias, c.norm_position) == ("rmsnorm", "swiglu", False, "pre")
    assert c.rope_theta == h.rope_parameters["rope_theta"] and c.n_kv_head == h.num_key_value_heads
    assert (c.ffn_size == h.intermediate_size and c.norm_eps == h.rms_norm_eps
            and c.tie_weights == h.tie_word_embeddings)
    assert ours.wpe is None and "wpe.weight" not in ours.state_dict()
    assert ours.num_parameters() == sum(p.numel() for p in hf.parameters()) == count_parameters(c)


def test_logits_equal_hugging_face(pair):
    expected, got = logits_of(*pair, ids())
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


def test_logits_equal_with_kv_cache_which_holds_only_the_kv_heads(pair):
    hf, ours = pair
    x = ids(T=24, seed=2)
    expected, _ = logits_of(hf, ours, x)
    cached, cache = logits_through_kv_cache(ours, x, prompt=10)
    torch.testing.assert_close(cached, expected, atol=1e-5, rtol=1e-5)
    c = ours.config
    for layer in cache.layers:  # (B, n_kv, capacity, hs): n_kv heads stored, not n_head
        assert layer.k.shape == layer.v.shape == (2, hf.config.num_key_value_heads, c.block_size,
                                                  c.head_size)
    assert sum(l.k.numel() + l.v.numel()
               for l in cache.layers) * 4 == kv_cache_bytes(c, batch_size=2)


def test_greedy_tokens_equal_hugging_face_generate_with_and_without_cache(pair):
    hf, ours = pair
    prompt = ids(B=1, T=6, seed=3)
    n = T_MAX - 6  # up to the full context, where our generate would start cropping
    with torch.no_grad():  # min_new_tokens: Hugging Face would otherwise stop at the eos id
        expected = hf.generate(prompt, do_sample=False, max_new_tokens=n, min_new_tokens=n)
    assert torch.equal(generate(ours, prompt, n, temperature=0), expected)
    assert torch.equal(generate(ours, prompt, n, temperature=0, use_cache=True), expected)


def test_left_padded_batch_rows_equal_each_prompt_alone():
    ours = GPT.from_pretrained(tiny_hf(n_kv=2))  # RoPE with per-row position ids (B, T)
    prompts = [[5, 6, 7, 8, 9, 10], [11, 12], [13, 14, 15]]
    for use_cache in (False, True):
        batch = generate_batch(ours, prompts, 8, temperature=0, use_cache=use_cache)
        alone = [generate(ours, torch.tensor([p]), 8, temperature=0)[0].tolist() for p in prompts]
        assert batch == alone


def test_weight_map_covers_every_parameter_once():
    for tie in (False, True):
        ours = GPT.from_pretrained(tiny_hf(n_kv=2, tie=tie))
        hf_names = [n for _, names in weight_map(2, tie) for n in names]
        assert sorted(name for name,
                      _ in weight_map(2, tie)) == sorted(n for n, _ in ours.named_parameters())
        assert len(hf_names) == len(set(hf_names)) == len(tiny_hf(n_kv=2,
                                                                  tie=tie).state_dict()) - tie


def test_unsupported_llama_settings_rejected():
    base = dict(vocab_size=50, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                num_attention_heads=2)
    for overrides, message in [
        (dict(attention_bias=True), "attention_bias"),
        (dict(mlp_bias=True), "mlp_bias"),
        (dict(hidden_act="gelu"), "hidden_act"),
        (
            dict(rope_parameters={"rope_type": "dynamic", "factor": 2.0, "rope_theta": 1e4}),
            "rope_type",
        ),
    ]:
        with pytest.raises(ValueError, match=message):
            config_from_hf(transformers.LlamaConfig(**base, **overrides))
    bare = transformers.LlamaModel(transformers.LlamaConfig(**base))
    with pytest.raises(ValueError, match="no language-model head"):
        GPT.from_pretrained(bare)


# --- the options one by one ----------------------------------------------------------------------


def test_rmsnorm_equals_torch():
    torch.manual_seed(0)
    x = torch.randn(3, 5, 24) * 3 + 1
    for eps in (1e-5, 1e-6, 0.1):
        ours, ref = RMSNorm(24, eps), torch.nn.RMSNorm(24, eps=eps)
        with torch.no_grad():
            ours.weight.normal_()
            ref.weight.copy_(ours.weight)
        torch.testing.assert_close(ours(x), ref(x), atol=1e-6, rtol=1e-6)


def test_rope_keeps_norms_and_scores_depend_on_the_offset_only():
    torch.manual_seed(0)
    q, k = torch.randn(16), torch.randn(16)
    cos, sin = rope_cos_sin(torch.arange(40), 16)  # (40, 8) each

    def rot(v, pos):  # v (hs,) at position pos
        return apply_rope(v[None, None, None], cos[pos:pos + 1], sin[pos:pos + 1])[0, 0, 0]

    torch.testing.assert_close(rot(q, 7).norm(), q.norm())  # a rotation keeps lengths
    torch.testing.assert_close(rot(q, 0), q)  # position 0: no rotation
    for m, n in [(5, 2), (20, 17), (39, 36)]:  # the same offset 3 everywhere gives the same score
        torch.testing.assert_close(rot(q, m) @ rot(k, n), rot(q, 3) @ rot(k, 0), atol=1e-5,
                                   rtol=1e-5)


def test_repeat_kv_gives_each_group_its_head():
    kv = torch.arange(2 * 3 * 4 * 5, dtype=torch.float32).view(2, 3, 4, 5)  # (B, n_kv=3, T, hs)
    out = repeat_kv(kv, 2)  # (B, 6, T, hs): query heads 2j and 2j + 1 read key/value head j
    assert out.shape == (2, 6, 4, 5)
    for h in range(6):
        assert torch.equal(out[:, h], kv[:, h // 2])


def test_default_config_keeps_gpt2_block_and_new_options_change_only_their_part(tiny_config):
    base = GPT(tiny_config).state_dict()
    assert (tiny_config.ffn_size == 4 * tiny_config.n_embd
            and tiny_config.kv_heads == tiny_config.n_head)
    rope = GPT(replace(tiny_config, rope_theta=10000.0)).state_dict()
    # the angles are no parameter
    assert set(base) - set(rope) == {"wpe.weight"} and set(rope) <= set(base)
    rms = GPT(replace(tiny_config, norm="rmsnorm", bias=True)).state_dict()
    assert not any(k.endswith("ln_1.bias") for k in rms)  # RMSNorm has a gain only
    gqa = GPT(replace(tiny_config, n_kv_head=1)).state_dict()
    C, hs = tiny_config.n_embd, tiny_config.head_size
    # q: C rows; k and v: one head each
    assert gqa["blocks.0.attn.c_attn.weight"].shape == (C + 2 * hs, C)
    swiglu = GPT(replace(tiny_config, mlp="swiglu"))
    # 8/3 C = 42.7 rounded up to a multiple of 32
    assert swiglu.blocks[0].mlp.c_gate.weight.shape == (64, C)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(norm="batchnorm"), "norm must be one of"),
        (dict(norm_eps=0.0), "norm_eps must be a finite number > 0, got 0.0"),
        (dict(rope_theta=-1.0), "rope_theta must be a finite number >= 1, got -1.0"),
        (dict(n_embd=12, n_head=4, rope_theta=1e4), "must be even"),
        (dict(mlp="geglu"), "mlp must be one of"),
        (dict(ffn_hidden=0), "ffn_hidden must be an integer >= 1, got 0"),
        (dict(n_head=4, n_kv_head=3), r"n_kv_head \(3\) must divide n_head \(4\).*\[1, 2, 4\]"),
    ],
)
def test_bad_new_options_are_clear_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        GPTConfig(**kwargs)


OPTIONS = {"rmsnorm": dict(norm="rmsnorm"), "rope": dict(rope_theta=10000.0),
           "swiglu": dict(mlp="swiglu"), "gqa": dict(n_kv_head=1),
           "all": dict(norm="rmsnorm", rope_theta=10000.0, mlp="swiglu", n_kv_head=1)}
_causal = {name: GPT(GPTConfig(vocab_size=11, block_size=16, n_layer=2, n_head=2, n_embd=16,
                               **o)).eval()
           for name, o in OPTIONS.items()}


@given(st.lists(st.integers(0, 10), min_size=2, max_size=16), st.data(),
       st.sampled_from(list(OPTIONS)))
def test_causality_with_the_new_options(tokens, data, option):
    t, a, b = change_one_token(_causal[option], tokens, data)
    assert torch.equal(a[0, :t], b[0, :t])  # the past never sees the future
    assert not torch.allclose(a[0, t], b[0, t])  # but position t sees its own token


# --- the command line: train, resume, sample ------------------------------------------------------

LLAMA_SET = ["--set", "norm=rmsnorm", "--set", "rope_theta=10000", "--set", "n_kv_head=2", "--set",
             "mlp=swiglu", "--set", "n_layer=2", "--set", "n_head=4", "--set", "n_embd=32", "--set",
             "block_size=32", "--set", "batch_size=4", "--set", "eval_interval=3", "--set",
             "eval_iters=2", "--device", "cpu"]


def test_cli_trains_resumes_and_samples_a_llama_style_model(tmp_path, capsys):
    a = cli_train_resume_and_sample(tmp_path, capsys, LLAMA_SET)
    config = GPTConfig.from_dict(a["model_config"])
    assert (config.norm, config.rope_theta, config.n_kv_head,
            config.mlp) == ("rmsnorm", 10000.0, 2, "swiglu")
    assert "wpe.weight" not in a["model"]


def test_a_hub_name_goes_to_the_loader_of_the_model_type_it_holds(monkeypatch):
    """Names with a slash are Hub names: downloaded (here: faked offline), then dispatched by
    model_type."""
    import course_lib.llama as llama

    gpt2 = transformers.GPT2LMHeadModel(transformers.GPT2Config(vocab_size=50, n_positions=8,
                                                                n_embd=16, n_layer=1, n_head=2,
                                                                bos_token_id=0, eos_token_id=0))
    llama_model = tiny_hf(n_kv=2)
    hub = {"someone/tiny-llama": llama_model, "openai-community/gpt2": gpt2}
    monkeypatch.setattr(llama, "_load_hf_model", lambda name: hub[name])
    assert GPT.from_pretrained("someone/tiny-llama").config.norm == "rmsnorm"
    assert GPT.from_pretrained("openai-community/gpt2").config.activation == "gelu_tanh"
