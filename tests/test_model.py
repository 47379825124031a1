import math

import pytest
import torch
from hypothesis import given, strategies as st

from course_lib.model import GPT, GPTConfig, sinusoidal_position_encoding


@pytest.mark.parametrize("kwargs, message", [
    (dict(n_embd=10, n_head=3), r"n_embd \(10\) must be divisible by n_head \(3\).*one of \[1, 2, 5, 10\]"),
    (dict(vocab_size=0), "vocab_size must be a positive integer"),
    (dict(dropout=1.0), "dropout"),
    (dict(norm_position="middle"), "norm_position"),
    (dict(activation="tanh"), "activation"),
])
def test_bad_config_is_a_clear_error(kwargs, message):
    with pytest.raises(ValueError, match=message):
        GPTConfig(**kwargs)


def test_forward_shapes_and_untrained_loss_near_ln_v(tiny_config):
    model = GPT(tiny_config)
    idx = torch.randint(11, (3, 16))
    logits, loss = model(idx)
    assert logits.shape == (3, 16, 11) and loss is None
    targets = torch.randint(11, (3, 16))  # independent of the inputs (tied weights favour the input token)
    _, loss = model(idx, targets)
    assert abs(loss.item() - math.log(11)) < 0.1  # small init: nearly uniform predictions


def test_weight_tying_shares_one_matrix(tiny_config):
    model = GPT(tiny_config)
    assert model.lm_head.weight is model.wte.weight
    untied = GPT(GPTConfig(**{**tiny_config.to_dict(), "tie_weights": False}))
    assert untied.num_parameters() == model.num_parameters() + 11 * 16


def test_too_long_context_is_a_clear_error(tiny_config):
    with pytest.raises(ValueError, match=r"sequence length 17 exceeds block_size 16.*Crop the context"):
        GPT(tiny_config)(torch.zeros(1, 17, dtype=torch.long))


def test_out_of_vocabulary_ids_are_a_clear_error(tiny_config):
    with pytest.raises(ValueError, match=r"token ids must lie in \[0, 10\]"):
        GPT(tiny_config)(torch.tensor([[3, 11]]))


_causal_models = {norm: GPT(GPTConfig(vocab_size=11, block_size=16, n_layer=2, n_head=2, n_embd=16,
                                      norm_position=norm)).eval() for norm in ("pre", "post")}


@given(st.lists(st.integers(0, 10), min_size=2, max_size=16), st.data(), st.sampled_from(["pre", "post"]))
def test_causality_changing_a_future_token_never_changes_the_past(tokens, data, norm):
    model = _causal_models[norm]
    t = data.draw(st.integers(1, len(tokens) - 1), label="changed position")
    new = data.draw(st.integers(0, 10).filter(lambda v: v != tokens[t]), label="new token")
    changed = tokens.copy()
    changed[t] = new
    with torch.no_grad():
        a, _ = model(torch.tensor([tokens]))
        b, _ = model(torch.tensor([changed]))
    assert torch.allclose(a[0, :t], b[0, :t], atol=1e-6)  # positions before t are untouched
    assert not torch.allclose(a[0, t], b[0, t])  # position t itself sees the change


def test_sinusoidal_encoding_values():
    pe = sinusoidal_position_encoding(50, 8)
    assert pe.shape == (50, 8)
    assert torch.allclose(pe[0, 0::2], torch.zeros(4)) and torch.allclose(pe[0, 1::2], torch.ones(4))
    assert pe[3, 0].item() == pytest.approx(math.sin(3))
    assert pe[5, 3].item() == pytest.approx(math.cos(5 / 10000 ** (2 / 8)), rel=1e-5)
    with pytest.raises(ValueError):
        sinusoidal_position_encoding(4, 7)
