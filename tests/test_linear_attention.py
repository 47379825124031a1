"""Chapter 24's rules from scratch (course_lib/linear_attention/rules.py), each equal to what it
claims: linear attention's running state to its T x T form, Gated DeltaNet's recurrent and chunked
forms to transformers' torch fallbacks (the code Qwen3.5 and Qwen3-Next run without a GPU kernel),
for random inputs of several shapes; then the hybrid model kind's own promises."""
import pytest
import torch
from hypothesis import given, settings, strategies as st

from course_lib.linear_attention.hybrid import HybridConfig, HybridGPT
from course_lib.linear_attention.rules import (causal_linear_attention, delta_rule_recurrent,
                                               gated_delta_rule_chunked, gated_delta_rule_recurrent,
                                               kv_cache_bytes, l2norm, linear_attention_recurrent,
                                               state_bytes, within_chunk_decay)

qwen3_5 = pytest.importorskip("transformers.models.qwen3_5.modeling_qwen3_5")


def inputs(B=2, H=3, T=37, dk=8, dv=5, seed=0, strong_decay=False):
    """Random q, k, v (B, H, T, d), log decays g <= 0 and write strengths beta in (0, 1)."""
    gen = torch.Generator().manual_seed(seed)
    q, k = torch.randn(B, H, T, dk, generator=gen), torch.randn(B, H, T, dk, generator=gen)
    v = torch.randn(B, H, T, dv, generator=gen)
    g = -torch.rand(B, H, T, generator=gen) * (8.0 if strong_decay else 0.5)
    beta = torch.rand(B, H, T, generator=gen)
    return q, k, v, g, beta


def theirs(fn, q, k, v, g, beta, state=None, **kw):
    """transformers' function on our layout: it takes (B, T, H, d) and (B, T, H)."""
    t = lambda x: x.transpose(1, 2)  # noqa: E731
    o, S = fn(t(q), t(k), t(v), t(g), t(beta), initial_state=state, output_final_state=True,
              use_qk_l2norm_in_kernel=True, **kw)
    return t(o), S


def test_the_running_state_gives_linear_attentions_outputs():
    q, k, v, _, _ = inputs()
    o, S = linear_attention_recurrent(q, k, v)
    torch.testing.assert_close(o, causal_linear_attention(q, k, v), atol=1e-4, rtol=1e-5)
    assert S.shape == (2, 3, 8, 5)  # (B, H, dk, dv): the whole past in dk x dv numbers per head


def test_the_delta_rule_stores_a_unit_key_exactly_and_plain_linear_attention_does_not():
    q, k, v, _, _ = inputs(T=2)
    k = l2norm(k)
    k = torch.cat([k[:, :, :1], k[:, :, :1]], dim=2)  # the same key twice, two different values
    _, S = delta_rule_recurrent(q, k, v, torch.ones(2, 3, 2))
    read = (S * k[:, :, 0, :, None]).sum(-2)  # S^T k
    # overwritten by the newest value
    torch.testing.assert_close(read, v[:, :, 1], atol=1e-5, rtol=1e-5)
    _, S_plain = linear_attention_recurrent(q, k, v)
    assert ((S_plain * k[:, :, 0, :, None]).sum(-2) - v[:, :, 1]).abs().max() > 0.1  # a sum of both


def test_gating_with_no_decay_is_the_delta_rule():
    q, k, v, g, beta = inputs()
    ours, _ = gated_delta_rule_recurrent(q, k, v, torch.zeros_like(g), beta)
    qn, kn = l2norm(q) * 8 ** -0.5, l2norm(k)
    plain, _ = delta_rule_recurrent(qn, kn, v, beta)
    torch.testing.assert_close(ours, plain, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("B,H,T,dk,dv", [(2, 4, 256, 32, 32), (1, 3, 37, 8, 5), (3, 1, 1, 16, 4),
                                         (2, 2, 64, 4, 12)])
def test_recurrent_form_equals_transformers(B, H, T, dk, dv):
    q, k, v, g, beta = inputs(B, H, T, dk, dv)
    ours, S = gated_delta_rule_recurrent(q, k, v, g, beta)
    expected, S_expected = theirs(qwen3_5.torch_recurrent_gated_delta_rule, q, k, v, g, beta)
    torch.testing.assert_close(ours, expected, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(S, S_expected, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("B,H,T,dk,dv,C", [(2, 4, 256, 32, 32, 64), (1, 3, 37, 8, 5, 16),
                                           (2, 2, 64, 4, 12, 64), (1, 2, 50, 8, 8, 1)])
def test_chunked_form_equals_transformers_and_our_recurrent_form(B, H, T, dk, dv, C):
    q, k, v, g, beta = inputs(B, H, T, dk, dv, seed=1)
    ours, S = gated_delta_rule_chunked(q, k, v, g, beta, chunk_size=C)
    expected, S_expected = theirs(qwen3_5.torch_chunk_gated_delta_rule, q, k, v, g, beta,
                                  chunk_size=C)
    torch.testing.assert_close(ours, expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(S, S_expected, atol=1e-5, rtol=1e-5)
    recurrent, S_rec = gated_delta_rule_recurrent(q, k, v, g, beta)
    torch.testing.assert_close(ours, recurrent, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(S, S_rec, atol=1e-5, rtol=1e-5)


@settings(max_examples=25)
@given(B=st.integers(1, 2), H=st.integers(1, 3), T=st.integers(1, 40), dk=st.integers(1, 9),
       dv=st.integers(1, 9), C=st.integers(1, 17), seed=st.integers(0, 10**6), strong=st.booleans(),
       with_state=st.booleans())
def test_both_forms_equal_transformers_for_any_shape_chunk_and_starting_state(B, H, T, dk, dv, C,
                                                                              seed, strong,
                                                                              with_state):
    q, k, v, g, beta = inputs(B, H, T, dk, dv, seed, strong_decay=strong)
    state = (torch.randn(B, H, dk, dv, generator=torch.Generator().manual_seed(seed))
             if with_state else None)
    rec, S_rec = gated_delta_rule_recurrent(q, k, v, g, beta, state=state)
    chk, S_chk = gated_delta_rule_chunked(q, k, v, g, beta, chunk_size=C, state=state)
    expected, S_expected = theirs(qwen3_5.torch_recurrent_gated_delta_rule, q, k, v, g, beta, state)
    for o, S in ((rec, S_rec), (chk, S_chk)):
        torch.testing.assert_close(o, expected, atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(S, S_expected, atol=1e-5, rtol=1e-4)


def test_a_prompt_in_two_pieces_carries_the_state_across():
    q, k, v, g, beta = inputs(T=30)
    whole, S_whole = gated_delta_rule_chunked(q, k, v, g, beta, chunk_size=8)
    first, S = gated_delta_rule_chunked(*(x[:, :, :13] for x in (q, k, v, g, beta)), chunk_size=8)
    second, S = gated_delta_rule_recurrent(*(x[:, :, 13:] for x in (q, k, v, g, beta)), state=S)
    torch.testing.assert_close(torch.cat([first, second], dim=2), whole, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(S, S_whole, atol=1e-5, rtol=1e-5)


def test_within_chunk_decay_is_one_on_the_diagonal_and_zero_in_the_future():
    g = torch.tensor([-0.1, -0.2, -0.3])
    D = within_chunk_decay(g)
    expected = torch.tensor([[1.0, 0.0, 0.0], [0.2, 1.0, 0.0], [0.5, 0.3, 1.0]]).neg().exp()
    expected = torch.where(torch.ones(3, 3, dtype=torch.bool).tril(), expected, torch.zeros(3, 3))
    expected.fill_diagonal_(1.0)
    torch.testing.assert_close(D, expected)


def test_the_state_is_the_same_size_whatever_the_length_and_the_kv_cache_grows():
    assert state_bytes(2, 4, 32, 32) == 2 * 16384  # the 16,384 bytes per layer per sequence
    assert kv_cache_bytes(1, 4, 32, 1) == 1024  # a KV cache of the same heads: 1,024 bytes a token
    for T in (10, 100):
        q, k, v, g, beta = inputs(B=1, H=4, T=T, dk=32, dv=32)
        _, S = gated_delta_rule_chunked(q, k, v, g, beta)
        assert S.nbytes == state_bytes(1, 4, 32, 32)


# --- the hybrid model kind ------------------------------------------------------------------------

SMALL = dict(vocab_size=31, block_size=64, n_layer=4, n_embd=32, n_head=2, chunk_size=8)


@pytest.mark.parametrize("layers", ["LLLA", "L", "A", "AL"])
def test_generation_with_the_state_gives_the_tokens_of_rereading_the_whole_text(layers):
    torch.manual_seed(0)
    model = HybridGPT(HybridConfig(**SMALL, layers=layers)).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.3 * torch.randn_like(p))  # beyond the init, so that every token differs
    prompt = torch.randint(0, 31, (2, 11), generator=torch.Generator().manual_seed(1))
    fast = model.generate(prompt, 12)
    slow = prompt
    with torch.no_grad():
        for _ in range(12):
            slow = torch.cat([slow, model(slow)[0][:, -1:].argmax(-1)], dim=1)
    assert torch.equal(fast, slow)


def test_the_layer_pattern_is_cycled_and_each_block_has_its_kind():
    model = HybridGPT(HybridConfig(**dict(SMALL, n_layer=6)))
    assert model.config.layer_kinds == "LLLALL"
    assert [type(b.mixer).__name__ for b in model.blocks] == (["GatedDeltaNet"] * 3
                                                              + ["GatedAttention"]
                                                              + ["GatedDeltaNet"] * 2)


@pytest.mark.parametrize("kwargs,message", [
    (dict(layers="LLXA"), "letters L"), (dict(layers=""), "letters L"),
    (dict(n_head=3), "divisible"), (dict(n_kv_head=3, n_head=4), "must divide n_head"),
    (dict(linear_k_heads=3, linear_v_heads=4), "divide"),
(dict(conv_kernel=1), "conv_kernel"), (dict(chunk_size=0), "chunk_size")])
def test_bad_settings_are_refused_in_one_line(kwargs, message):
    with pytest.raises(ValueError, match=message) as refused:
        HybridConfig(**dict(SMALL, **kwargs))
    assert "\n" not in str(refused.value)


def test_flops_per_token_counts_attentions_context_and_the_states_updates():
    a, l = (HybridGPT(HybridConfig(**SMALL, layers=x)) for x in ("A", "L"))
    assert a.flops_per_token(context=128) > a.flops_per_token(context=64)  # attention grows with T
    assert l.flops_per_token(context=128) == l.flops_per_token(context=64)  # the state does not


# --- the probes -----------------------------------------------------------------------------------


def test_recall_batch_asks_for_the_value_that_followed_each_key():
    from course_lib.linear_attention.probes import IGNORE, recall_batch
    x, y = recall_batch(4, pairs=5, questions=3, keys=10, values=7,
                        generator=torch.Generator().manual_seed(0))
    assert x.shape == y.shape == (4, 2 * 5 + 2 * 3 - 1)
    for row_x, row_y in zip(x.tolist(), y.tolist()):
        stored = dict(zip(row_x[0:10:2], row_x[1:10:2]))  # key -> value of the context
        assert len(stored) == 5 and all(k < 10 <= v < 17 for k, v in stored.items())
        asked = [(t, target) for t, target in enumerate(row_y) if target != IGNORE]
        assert len(asked) == 3 and all(target == stored[row_x[t]] for t, target in asked)
    with pytest.raises(ValueError, match="questions <= pairs <= keys"):
        recall_batch(1, pairs=11, questions=1, keys=10, values=3)


def test_a_fixed_state_recalls_worse_as_it_fills_and_softmax_attention_does_not():
    from course_lib.linear_attention.probes import state_capacity
    few, many = state_capacity(16, 4), state_capacity(16, 64)
    assert few["delta rule"] > 0.9 > 0.5 > many["delta rule"]
    assert min(few["softmax attention"], many["softmax attention"]) > 0.99
    assert state_capacity(64, 64)["delta rule"] > many["delta rule"]  # a larger state holds more
