"""GPT.from_pretrained: Hugging Face's GPT-2 weights in our GPT give the same logits (offline, on a
tiny randomly initialised GPT2LMHeadModel; the published weights need the network)."""
from dataclasses import replace

import pytest
import torch
from model_helpers import logits_of, logits_through_kv_cache

from course_lib import GPT, GPTConfig
from course_lib.gpt2 import (GPT2_SIZES, PUBLISHED_PARAMETERS, config_from_hf, gpt2_config,
                             weight_map)
from course_lib.sizing import count_parameters

transformers = pytest.importorskip("transformers")


def tiny_hf(seed=0, **overrides):
    torch.manual_seed(seed)
    # weights 5x larger than GPT-2's initialisation: the MLP's inputs then reach the range where the
    # exact and the tanh GELU differ by more than the tolerance (see
    # test_exact_gelu_would_not_match)
    options = dict(vocab_size=97, n_positions=32, n_embd=48, n_layer=3, n_head=4,
                   initializer_range=0.1, bos_token_id=0, eos_token_id=0)
    options.update(overrides)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(**options)).eval()
    # GPT-2 initialises biases and LayerNorms to 0 and 1: randomise them to test them
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "ln_" in name or name.endswith("bias"):
                p.add_(0.1 * torch.randn_like(p))
    return model


def ids(B=2, T=20, V=97, seed=1):
    return torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(seed))


@pytest.fixture(scope="module")
def pair():
    hf = tiny_hf()
    return hf, GPT.from_pretrained(hf)


def test_logits_equal_hugging_face(pair):
    expected, got = logits_of(*pair, ids())
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


def test_logits_equal_with_kv_cache(pair):
    hf, ours = pair
    x = ids(T=24, seed=2)
    expected, _ = logits_of(hf, ours, x)
    torch.testing.assert_close(logits_through_kv_cache(ours, x, prompt=10)[0], expected, atol=1e-5,
                               rtol=1e-5)


def test_exact_gelu_would_not_match(pair):
    hf, ours = pair
    exact = GPT(replace(ours.config, activation="gelu")).eval()
    exact.load_state_dict(ours.state_dict())
    x = ids()
    with torch.no_grad():
        assert (exact(x)[0] - hf(x).logits).abs().max() > 1e-4


def test_config_and_mapping(pair):
    hf, ours = pair
    c = ours.config
    assert (c.vocab_size, c.block_size, c.n_layer, c.n_head, c.n_embd) == (97, 32, 3, 4, 48)
    assert c.bias and c.tie_weights and c.activation == "gelu_tanh" and c.dropout == 0.0
    assert ours.lm_head.weight is ours.wte.weight
    assert ours.num_parameters() == hf.num_parameters() == count_parameters(c)
    # every parameter is mapped once; the Conv1D matrices are transposed
    rows = weight_map(c.n_layer)
    assert {name for name, _, _ in rows} == {n for n, _ in ours.named_parameters()}
    hf_state = hf.state_dict()
    for name, hf_name, transpose in rows:
        w = hf_state[hf_name]
        assert torch.equal(ours.state_dict()[name], w.t() if transpose else w), name
    assert sum(t for _, _, t in rows) == 4 * c.n_layer
    assert not ours.training


def test_untied_head_and_dropout():
    hf = tiny_hf(tie_word_embeddings=False, n_layer=1)
    with torch.no_grad():
        hf.lm_head.weight.add_(1.0)  # now really different from the token embedding
    ours = GPT.from_pretrained(hf, dropout=0.1)
    assert not ours.config.tie_weights and ours.config.dropout == 0.1
    x = ids(seed=3)
    with torch.no_grad():
        torch.testing.assert_close(ours(x)[0], hf(x).logits, atol=1e-5, rtol=1e-5)


def test_gelu_tanh_is_gpt2s_gelu_new_and_default_unchanged():
    x = torch.linspace(-6, 6, 1001)
    gelu_new = transformers.activations.ACT2FN["gelu_new"]
    ours = GPT(GPTConfig(activation="gelu_tanh", n_layer=1)).blocks[0].mlp.act
    torch.testing.assert_close(ours(x), gelu_new(x), atol=1e-6, rtol=1e-6)
    assert GPTConfig().activation == "gelu"
    assert isinstance(GPT(GPTConfig(n_layer=1)).blocks[0].mlp.act, torch.nn.GELU)
    assert GPT(GPTConfig(n_layer=1)).blocks[0].mlp.act.approximate == "none"
    with pytest.raises(ValueError, match="gelu_tanh"):
        GPTConfig(activation="swish")


def test_published_sizes_by_the_formula():
    for name, published in PUBLISHED_PARAMETERS.items():
        n = count_parameters(gpt2_config(name))
        assert round(n / 1e6) == int(published[:-1]), (name, n)
    assert count_parameters(gpt2_config("gpt2")) == 124_439_808
    assert set(GPT2_SIZES) == set(PUBLISHED_PARAMETERS)


def test_unknown_name():
    with pytest.raises(ValueError, match="unknown GPT-2 model 'gpt3'.*gpt2-medium"):
        GPT.from_pretrained("gpt3")
    with pytest.raises(ValueError, match="unknown GPT-2 model"):
        gpt2_config("gpt-2")


def test_other_architecture_rejected():
    bert = transformers.BertForMaskedLM(transformers.BertConfig(
        vocab_size=50, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=64))
    with pytest.raises(ValueError, match="expected a GPT-2 model.*'bert'"):
        GPT.from_pretrained(bert)
    bare = transformers.GPT2Model(transformers.GPT2Config(vocab_size=50, n_positions=8, n_embd=16,
                                                          n_layer=1, n_head=2, bos_token_id=0,
                                                          eos_token_id=0))
    with pytest.raises(ValueError, match="no language-model head"):
        GPT.from_pretrained(bare)
    with pytest.raises(TypeError, match="expected a transformers GPT2LMHeadModel"):
        GPT.from_pretrained(torch.nn.Linear(2, 2))


def test_unsupported_gpt2_settings_rejected():
    for overrides, message in [(dict(n_inner=100), "n_inner"),
                               (dict(activation_function="relu"), "activation"),
                               (dict(layer_norm_epsilon=1e-6), "layer_norm_epsilon"),
                               (dict(scale_attn_by_inverse_layer_idx=True), "inverse_layer_idx")]:
        config = transformers.GPT2Config(vocab_size=50, n_positions=8, n_embd=16, n_layer=1,
                                         n_head=2, **overrides)
        with pytest.raises(ValueError, match=message):
            config_from_hf(config)
