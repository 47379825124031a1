import math

import pytest
import torch
from model_helpers import change_one_token
from hypothesis import given, strategies as st

from course_lib.model import GPT, GPTConfig, sinusoidal_position_encoding


@pytest.mark.parametrize("kwargs, message", [
    (dict(n_embd=10, n_head=3),
     r"n_embd \(10\) must be divisible by n_head \(3\).*one of \[1, 2, 5, 10\]"),
    (dict(vocab_size=0), "vocab_size must be an integer >= 1"),
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
    # independent of the inputs (tied weights favour the input token)
    targets = torch.randint(11, (3, 16))
    _, loss = model(idx, targets)
    assert abs(loss.item() - math.log(11)) < 0.1  # small init: nearly uniform predictions


def test_weight_tying_shares_one_matrix(tiny_config):
    model = GPT(tiny_config)
    assert model.lm_head.weight is model.wte.weight
    untied = GPT(GPTConfig(**{**tiny_config.to_dict(), "tie_weights": False}))
    assert untied.num_parameters() == model.num_parameters() + 11 * 16


def test_too_long_context_is_a_clear_error(tiny_config):
    with pytest.raises(ValueError,
                       match=r"sequence length 17 exceeds block_size 16.*Crop the context"):
        GPT(tiny_config)(torch.zeros(1, 17, dtype=torch.long))


def test_out_of_vocabulary_ids_are_a_clear_error(tiny_config):
    with pytest.raises(ValueError, match=r"token ids must lie in \[0, 10\]"):
        GPT(tiny_config)(torch.tensor([[3, 11]]))


_causal_models = {norm: GPT(GPTConfig(vocab_size=11, block_size=16, n_layer=2, n_head=2, n_embd=16,
                                      norm_position=norm)).eval() for norm in ("pre", "post")}


@given(st.lists(st.integers(0, 10), min_size=2, max_size=16), st.data(),
       st.sampled_from(["pre", "post"]))
def test_causality_changing_a_future_token_never_changes_the_past(tokens, data, norm):
    t, a, b = change_one_token(_causal_models[norm], tokens, data)
    assert torch.allclose(a[0, :t], b[0, :t], atol=1e-6)  # positions before t are untouched
    assert not torch.allclose(a[0, t], b[0, t])  # position t itself sees the change


def test_sinusoidal_encoding_values():
    pe = sinusoidal_position_encoding(50, 8)
    assert pe.shape == (50, 8)
    assert (torch.allclose(pe[0, 0::2], torch.zeros(4))
            and torch.allclose(pe[0, 1::2], torch.ones(4)))
    assert pe[3, 0].item() == pytest.approx(math.sin(3))
    assert pe[5, 3].item() == pytest.approx(math.cos(5 / 10000 ** (2 / 8)), rel=1e-5)
    with pytest.raises(ValueError):
        sinusoidal_position_encoding(4, 7)


# --- attention masks and position ids (chapter 10) ---

_masked_model = GPT(GPTConfig(vocab_size=11, block_size=16, n_layer=2, n_head=2, n_embd=16)).eval()


def test_without_mask_and_positions_forward_is_unchanged(tiny_config):
    model = _masked_model
    idx = torch.randint(11, (3, 9))
    with torch.no_grad():
        plain, _ = model(idx)
        full_mask, _ = model(idx, attention_mask=torch.ones(3, 9, dtype=torch.bool))
        explicit, _ = model(idx, position_ids=torch.arange(9))
    assert torch.equal(plain, explicit)
    assert torch.allclose(plain, full_mask, atol=1e-6)


@given(st.lists(st.lists(st.integers(1, 10), min_size=1, max_size=16), min_size=1, max_size=5),
       st.sampled_from(["left", "right"]))
def test_padded_rows_give_the_logits_of_each_sequence_alone(seqs, side):
    from course_lib.data import pad_batch

    ids, mask = pad_batch(seqs, pad_id=0, side=side)
    with torch.no_grad():
        batched, _ = _masked_model(ids, attention_mask=mask)
        for i, s in enumerate(seqs):
            alone, _ = _masked_model(torch.tensor([s]))
            assert torch.allclose(batched[i][mask[i]], alone[0], atol=1e-5)


def test_left_padding_without_the_mask_or_positions_is_wrong():
    from course_lib.data import pad_batch

    ids, mask = pad_batch([[3, 4, 5, 6], [7, 8]], pad_id=0, side="left")
    with torch.no_grad():
        alone, _ = _masked_model(torch.tensor([[7, 8]]))
        right, _ = _masked_model(ids, attention_mask=mask)
        no_mask, _ = _masked_model(ids)
        shifted, _ = _masked_model(ids, attention_mask=mask, position_ids=torch.arange(4))
    assert torch.allclose(right[1, 2:], alone[0], atol=1e-6)
    assert not torch.allclose(no_mask[1, 2:], alone[0], atol=1e-3)  # it sees the pads
    assert not torch.allclose(shifted[1, 2:], alone[0], atol=1e-3)  # positions 2, 3 instead of 0, 1


def test_packed_sequences_with_a_block_diagonal_mask_equal_separate_ones():
    from course_lib.attention import segment_mask
    from course_lib.data import pack_sequences

    seqs = [[1, 2, 3], [4, 5], [6, 7, 8, 9, 10]]
    ids, segments, positions = pack_sequences(seqs, block_size=16, pad_id=0)
    with torch.no_grad():
        packed, _ = _masked_model(ids, attention_mask=segment_mask(segments),
                                  position_ids=positions)
        for s, seq in enumerate(seqs, start=1):
            alone, _ = _masked_model(torch.tensor([seq]))
            assert torch.allclose(packed[0][segments[0] == s], alone[0], atol=1e-5)


def test_padded_targets_are_left_out_of_the_loss():
    from course_lib.data import pad_batch

    seqs = [[1, 2, 3, 4, 5], [6, 7]]
    x, mask = pad_batch([s[:-1] for s in seqs], 0)
    y, _ = pad_batch([s[1:] for s in seqs], -100)
    _, loss = _masked_model(x, y)
    total, count = 0.0, 0
    for s in seqs:
        _, l = _masked_model(torch.tensor([s[:-1]]), torch.tensor([s[1:]]))
        total, count = total + l.item() * (len(s) - 1), count + len(s) - 1
    assert loss.item() == pytest.approx(total / count, rel=1e-5)


@pytest.mark.parametrize("kwargs, message", [
    (dict(attention_mask=torch.ones(2, 5, dtype=torch.bool)),
     r"attention_mask has shape \(2, 5\), expected \(2, 4\)"),
    (dict(attention_mask=torch.ones(4, dtype=torch.bool)), "attention_mask has shape"),
    (dict(position_ids=torch.arange(5)), r"position_ids has shape \(5,\)"),
    (dict(position_ids=torch.arange(4) + 14), r"position_ids must lie in \[0, 15\]"),
])
def test_bad_masks_and_positions_are_clear_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        _masked_model(torch.zeros(2, 4, dtype=torch.long), **kwargs)


def test_a_gpt_larger_than_the_machine_builds_on_the_meta_device_and_check_fits_refuses_it():
    """GPT() itself checks no memory (sizes are checked where they come from outside: a checkpoint's
    config, a run's settings), so shapes of a model far larger than this machine can be inspected
    on the meta device; GPT.check_fits says, in one line, that it would not fit."""
    from course_lib.utils import TooLargeError

    huge = GPTConfig(vocab_size=10**9, n_embd=1024, n_head=16, n_layer=1)  # 4 TB of embedding alone
    with torch.device("meta"):
        model = GPT(huge)
    assert model.wte.weight.shape == (10**9, 1024) and model.wte.weight.is_meta
    with pytest.raises(TooLargeError, match=r"^a GPT of vocab_size 1,000,000,000, n_embd 1,024 and "
                                            r"n_layer 1 needs at least [^\n]*: choose smaller "
                                            r"sizes$"):
        GPT.check_fits(huge)
    GPT.check_fits(GPTConfig(vocab_size=65, n_embd=64, n_head=4, n_layer=2))  # a small one passes


@pytest.mark.parametrize("field, value, needed", [
    # review 2026-11-28 M1, rows 21-26
    ("moe_top_k", 4, "moe_experts"), ("moe_norm_topk", False, "moe_experts"),
    ("moe_shared_expert", True, "moe_experts"), ("moe_aux_coef", 0.5, "moe_experts"),
    # chapter 20's balancing options (moe_bias_rate: test_moe)
    ("moe_balancing", "bias", "moe_experts"),
    ("rope_factor", 8.0, "rope_scaling"), ("rope_original_context", 4, "rope_scaling"),
    ("rope_low_freq_factor", 2.0, "rope_scaling"), ("rope_high_freq_factor", 8.0, "rope_scaling"),
])
def test_a_setting_that_would_take_no_effect_is_refused_naming_the_one_it_needs(field, value,
                                                                                needed):
    base = dict(n_layer=1, n_head=2, n_embd=16, block_size=16, rope_theta=10000.0)
    with pytest.raises(ValueError, match=rf"^{field}={value!r} takes effect only with {needed}: "
                                         rf"set it too \(e.g. {needed}=.*\), or leave {field} at "
                                         r"its default"):
        GPTConfig(**base, **{field: value})
    GPTConfig(**base, **{field: value}, moe_experts=8, rope_scaling="llama3")  # with it: taken
    default = GPTConfig.__dataclass_fields__[field].default
    GPTConfig(**base, **{field: default})  # its default given again: nothing ignored


def test_check_fits_counts_every_size_that_allocates(monkeypatch):
    """Review 2026-11-28 M3 (rows 24, 27-28) and R1: head_dim, ffn_hidden, moe_experts and
    block_size, and a training step's batch, each refused in one line naming it (here on a machine
    of 16 GiB)."""
    from course_lib import utils
    from course_lib.utils import TooLargeError

    monkeypatch.setattr(utils, "available_memory",
                        lambda: (16 * 2**30, "available on this machine"))
    small = dict(n_layer=1, n_head=2, n_embd=16, block_size=16)
    GPT.check_fits(GPTConfig(**small), batch_size=64)
    cases = [(dict(head_dim=10**8), None, r"its attention \(n_head 2 of head size 100,000,000\)"),
             (dict(ffn_hidden=10**9), None, r"its MLPs \(hidden size 1,000,000,000\)"),
             (dict(ffn_hidden=10**6, moe_experts=1024), None,
              r"its MLPs \(hidden size 1,000,000, 1,024 experts\)"),
             (dict(block_size=10**10), None, r"its positions \(block_size 10,000,000,000\)"),
             (dict(rope_theta=1e4, block_size=10**10), None,
              r"its positions \(block_size 10,000,000,000\)"),
             ({}, 10**6, r"a training step's activations \(batch_size 1,000,000 x block_size 16\)")]
    for extra, batch, culprit in cases:
        with pytest.raises(TooLargeError,
                           match=f"^a GPT of vocab_size 65, n_embd 16 and n_layer 1, most of it in "
                                                f"{culprit}, needs at least .* more than the 16.0 "
                                                f"GiB of memory available on this machine"):
            GPT.check_fits(GPTConfig(**{**small, **extra}), batch)
    with pytest.raises(ValueError,
                       match=r"moe_experts must be an integer in \[1, 1024\], got 1000000"):
        # review row 24: refused at once, not after 64 s of building
        GPTConfig(**small, moe_experts=10**6)
