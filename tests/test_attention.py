import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, strategies as st

from course_lib import attention
from course_lib import attention as A


@given(st.integers(1, 4), st.integers(1, 12), st.integers(1, 5), st.integers(0, 10_000))
def test_three_ways_to_average_the_past_agree(B, T, C, seed):
    x = torch.randn(B, T, C, generator=torch.Generator().manual_seed(seed))
    v1 = A.average_past_loops(x)
    assert torch.allclose(v1, A.average_past_matmul(x), atol=1e-6)
    assert torch.allclose(v1, A.average_past_softmax(x), atol=1e-6)
    assert torch.allclose(v1[:, 0], x[:, 0]) and torch.allclose(v1[:, -1], x.mean(1), atol=1e-6)


def test_scaled_dot_product_attention_matches_pytorch():
    q, k, v = torch.randn(3, 2, 2, 7, 8).unbind(0)
    out, weights = A.scaled_dot_product_attention(q, k, v, A.causal_mask(7))
    assert torch.allclose(out, F.scaled_dot_product_attention(q, k, v, is_causal=True), atol=1e-6)
    assert torch.allclose(weights.sum(-1), torch.ones(2, 2, 7))
    assert torch.all(weights.triu(1) == 0)  # nothing on the future


def test_head_list_fused_and_sdpa_agree_with_copied_weights():
    torch.manual_seed(0)
    C, nh, T = 32, 4, 10
    mha = A.MultiHeadAttention(C, nh, block_size=16)
    fused = A.CausalSelfAttention(C, nh, block_size=16).load_from_multihead(mha)
    x = torch.randn(2, T, C)
    expected = mha(x)
    assert torch.allclose(fused(x), expected, atol=1e-6)
    fused.need_weights = True  # the explicit path must agree too
    assert torch.allclose(fused(x), expected, atol=1e-6)
    assert fused.last_weights.shape == (2, nh, T, T)
    # One head by hand with SDPA.
    h = mha.heads[0]
    ref = F.scaled_dot_product_attention(h.query(x), h.key(x), h.value(x), is_causal=True)
    assert torch.allclose(h(x), ref, atol=1e-6)


def test_with_biases_the_copy_is_exact_too():
    mha = A.MultiHeadAttention(12, 3, block_size=8, bias=True)
    fused = A.CausalSelfAttention(12, 3, block_size=8, bias=True).load_from_multihead(mha)
    x = torch.randn(2, 8, 12)
    assert torch.allclose(fused(x), mha(x), atol=1e-6)


def test_heads_must_divide_channels():
    with pytest.raises(ValueError, match=r"n_embd \(10\) must be divisible by n_head \(3\)"):
        A.CausalSelfAttention(10, 3, block_size=8)
    with pytest.raises(ValueError, match="divisible"):
        A.MultiHeadAttention(10, 4, block_size=8)


def test_padding_mask():
    m = A.padding_mask(torch.tensor([2, 4]), 4)
    assert m.tolist() == [[True, True, False, False], [True, True, True, True]]


def test_kv_cache_overflow_is_a_clear_error():
    cache = A.LayerKVCache(capacity=3)
    cache.append(torch.zeros(1, 1, 2, 4), torch.zeros(1, 1, 2, 4))
    with pytest.raises(ValueError, match="KV cache is full"):
        cache.append(torch.zeros(1, 1, 2, 4), torch.zeros(1, 1, 2, 4))


def test_incremental_attention_with_cache_equals_full():
    torch.manual_seed(1)
    attn = A.CausalSelfAttention(16, 4, block_size=12).eval()
    x = torch.randn(2, 9, 16)
    full = attn(x)
    cache = A.LayerKVCache(12)
    parts = ([attn(x[:, :4], cache),
              attn(x[:, 4:6], cache)] + [attn(x[:, t : t + 1], cache) for t in range(6, 9)])
    assert torch.allclose(torch.cat(parts, dim=1), full, atol=1e-5)



def _non_contiguous(layout):
    """F.scaled_dot_product_attention wrapped to return the same values in another memory
    layout, as CUDA's fused kernels do (issue 31): "cuda" keeps the heads and the query axis
    swapped in memory (flash attention's (B, T, H, hs)); "last" swaps the last two axes."""
    real = F.scaled_dot_product_attention

    def sdpa(*args, **kwargs):
        y = real(*args, **kwargs)
        if layout == "cuda":
            out = y.transpose(1, 2).contiguous().transpose(1, 2)
        else:
            out = y.transpose(-2, -1).contiguous().transpose(-2, -1)
        assert torch.equal(out, y)
        return out

    return sdpa


@pytest.mark.parametrize("layout", ["cuda", "last"])
@pytest.mark.parametrize("n_kv_head", [2, 1], ids=["gqa", "mqa"])
def test_kv_cache_generation_survives_a_non_contiguous_attention_output(monkeypatch, layout,
                                                                        n_kv_head):
    """Regression (issue 31): the one-token cached path of grouped-query attention called .view
    on SDPA's output, which CUDA returns non-contiguous, so sampling a GQA model on a GPU raised
    "view size is not compatible". Generation with the cache must equal generation without it."""
    from course_lib.generate import generate
    from course_lib.model import GPT, GPTConfig

    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=13, block_size=12, n_layer=2, n_head=4, n_kv_head=n_kv_head,
                          n_embd=32)).eval()
    monkeypatch.setattr(F, "scaled_dot_product_attention", _non_contiguous(layout))
    idx = torch.randint(13, (2, 3), generator=torch.Generator().manual_seed(1))
    plain = generate(model, idx, 15, temperature=0)
    cached = generate(model, idx, 15, temperature=0, use_cache=True)
    assert torch.equal(plain, cached)
    sampled = [generate(model, idx, 15, generator=torch.Generator().manual_seed(2), use_cache=c)
               for c in (False, True)]
    assert torch.equal(*sampled)


# --- score variance (chapter 3) ---


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


def test_padding_mask_left():
    m = A.padding_mask(torch.tensor([2, 4]), 4, side="left")
    assert m.tolist() == [[False, False, True, True], [True, True, True, True]]
    with pytest.raises(ValueError, match="side"):
        A.padding_mask(torch.tensor([1]), 2, side="up")


def test_causal_padding_mask_combines_by_broadcasting():
    # right, left padded
    real = torch.tensor([[True, True, True, False], [False, True, True, True]])
    m = A.causal_padding_mask(real)
    assert m.shape == (2, 1, 4, 4)
    causal = A.causal_mask(4)
    eye = torch.eye(4, dtype=torch.bool)
    assert torch.equal(m[:, 0], (causal & real[:, None, :]) | eye)
    # the last 2 queries only (a KV cache with 2 past positions)
    assert torch.equal(A.causal_padding_mask(real, 2), m[:, :, 2:])
    # no query row is empty, so the softmax never sees only -inf
    assert m.any(-1).all()


def test_segment_mask_is_block_diagonal():
    seg = torch.tensor([[1, 1, 2, 2, 2, 0]])
    m = A.segment_mask(seg)[0].int()
    assert m.tolist() == [[1, 1, 0, 0, 0, 0], [1, 1, 0, 0, 0, 0], [0, 0, 1, 1, 1, 0],
                          [0, 0, 1, 1, 1, 0], [0, 0, 1, 1, 1, 0], [0, 0, 0, 0, 0, 0]]


def test_check_attention_mask_shapes_and_dtypes():
    assert A.check_attention_mask(torch.tensor([[1, 0]]), 1, 2).dtype == torch.bool
    with pytest.raises(ValueError, match=r"attention_mask has shape \(2, 3\), expected \(2, 4\)"):
        A.check_attention_mask(torch.ones(2, 3, dtype=torch.bool), 2, 4)
    with pytest.raises(ValueError, match="booleans"):
        A.check_attention_mask(torch.full((1, 2), 0.5), 1, 2)
    with pytest.raises(TypeError, match="tensor"):
        A.check_attention_mask([[1, 1]], 1, 2)


def test_masked_attention_ignores_padded_keys_and_matches_the_written_out_path():
    torch.manual_seed(2)
    attn = A.CausalSelfAttention(16, 4, block_size=12).eval()
    x = torch.randn(2, 6, 16)
    real = torch.tensor([[True] * 6, [False, False, True, True, True, True]])
    mask = A.causal_padding_mask(real)
    y = attn(x, mask=mask)
    # row 1 with its pads dropped is the same as its 4 real tokens alone
    assert torch.allclose(y[1, 2:], attn(x[1:, 2:])[0], atol=1e-6)
    assert torch.allclose(y[0], attn(x[:1])[0], atol=1e-6)
    attn.need_weights = True
    assert torch.allclose(attn(x, mask=mask), y, atol=1e-6)
    # real queries put exactly zero weight on pads
    assert (attn.last_weights[1, :, 2:, :2] == 0).all()
    attn.need_weights = False
    # with a cache: the mask covers past + new keys
    cache = A.LayerKVCache(12)
    parts = [attn(x[:, :4], cache, A.causal_padding_mask(real[:, :4])),
             attn(x[:, 4:], cache, A.causal_padding_mask(real, 2))]
    assert torch.allclose(torch.cat(parts, 1)[1, 2:], y[1, 2:], atol=1e-5)
    with pytest.raises(ValueError, match="attention mask ends in shape"):
        attn(x, mask=A.causal_padding_mask(real[:, :5]))
