"""GPT.from_pretrained for Mixtral and Qwen3-MoE (course_lib.hf_moe): on tiny random models built
offline, Hugging Face's logits and ours agree within 1e-5, greedy tokens are the same with and
without our KV cache, and the load-balancing loss equals Hugging Face's on the same router
logits."""
import pytest
import torch
from model_helpers import logits_of, logits_through_kv_cache

from course_lib import GPT
from course_lib.generate import generate
from course_lib.hf_moe import config_from_hf
from course_lib.moe import load_balancing_loss
from course_lib.sizing import active_parameters, count_parameters

transformers = pytest.importorskip("transformers")

V, T_MAX = 97, 32
COMMON = dict(vocab_size=V, hidden_size=48, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=T_MAX, rms_norm_eps=1e-6,
              initializer_range=0.1, bos_token_id=None, eos_token_id=None, pad_token_id=None,
              num_experts_per_tok=2, router_aux_loss_coef=0.02)


def tiny_hf(kind: str, seed=0, **overrides):
    torch.manual_seed(seed)
    if kind.startswith("mixtral"):  # "-sw": a window of 8, shorter than the test sequences
        options = dict(COMMON, intermediate_size=40, num_local_experts=4,
                       sliding_window=8 if kind.endswith("-sw") else None)
        config = transformers.MixtralConfig(**(options | overrides))
        model = transformers.MixtralForCausalLM(config)
    else:  # every layer sparse; "-hd": a head_dim of its own (16, not hidden_size / heads = 12)
        options = dict(COMMON, intermediate_size=64, moe_intermediate_size=40, num_experts=6,
                       head_dim=16 if kind.endswith("-hd") else 12,
                       norm_topk_prob=kind == "qwen3_moe-norm")
        model = transformers.Qwen3MoeForCausalLM(
            transformers.Qwen3MoeConfig(**(options | overrides))
        )
    with torch.no_grad():  # norms start at 1 and the router near 0: randomise them to test them
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(0.2 * torch.randn_like(p))
            if name.endswith("mlp.gate.weight"):
                p.normal_(0.0, 0.5)
    return model.eval()


def ids(B=2, T=20, seed=1):
    return torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(seed))


# Qwen3-MoE: norm_topk_prob False, True; head_dim
KINDS = ["mixtral", "mixtral-sw", "qwen3_moe", "qwen3_moe-norm", "qwen3_moe-hd"]
_pairs = {}


@pytest.fixture(params=KINDS)
def pair(request):
    if request.param not in _pairs:
        hf = tiny_hf(request.param)
        _pairs[request.param] = (hf, GPT.from_pretrained(hf))
    return _pairs[request.param]


def test_config_carries_every_setting(pair):
    hf, ours = pair
    c, h = ours.config, hf.config
    qwen = h.model_type == "qwen3_moe"
    assert (c.moe_experts == (h.num_experts if qwen else h.num_local_experts)
            and c.moe_top_k == h.num_experts_per_tok)
    assert c.moe_norm_topk == (h.norm_topk_prob if qwen else True) and c.qk_norm == qwen
    assert (c.ffn_size == (h.moe_intermediate_size if qwen else h.intermediate_size)
            and c.moe_aux_coef == 0.02)
    assert ours.num_parameters() == sum(p.numel() for p in hf.parameters()) == count_parameters(c)
    assert active_parameters(c) < count_parameters(c)


def test_logits_equal_hugging_face(pair):
    expected, got = logits_of(*pair, ids())
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


def test_logits_equal_through_our_kv_cache(pair):
    hf, ours = pair
    x = ids(T=24, seed=2)
    expected, _ = logits_of(hf, ours, x)
    cached, _ = logits_through_kv_cache(ours, x, prompt=10)
    torch.testing.assert_close(cached, expected, atol=1e-5, rtol=1e-5)


def test_greedy_tokens_equal_hugging_face_generate_with_and_without_cache(pair):
    hf, ours = pair
    prompt = ids(B=1, T=6, seed=3)
    n = T_MAX - 6
    # no end-of-text id (min_new_tokens would forbid it where ours may pick it)
    with torch.no_grad():
        expected = hf.generate(prompt, do_sample=False, max_new_tokens=n, pad_token_id=None,
                               attention_mask=torch.ones_like(prompt))
    assert torch.equal(generate(ours, prompt, n, temperature=0), expected)
    assert torch.equal(generate(ours, prompt, n, temperature=0, use_cache=True), expected)


def test_balancing_loss_equals_hugging_face(pair):
    hf, ours = pair
    x = ids(seed=4)
    with torch.no_grad():
        out = hf(x, output_router_logits=True)
        ours(x)
    for theirs, mine in zip(out.router_logits, ours.router_logits()):  # the same router logits
        torch.testing.assert_close(mine, theirs, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ours.balancing_loss(), out.aux_loss, atol=1e-6, rtol=1e-6)
    from transformers.models.mixtral.modeling_mixtral import load_balancing_loss_func

    # any logits, any layers
    logits = tuple(torch.randn(30, ours.config.moe_experts) for _ in range(3))
    torch.testing.assert_close(load_balancing_loss(logits, 2),
                               load_balancing_loss_func(logits, logits[0].shape[1], 2))


def test_training_loss_is_hugging_faces_with_labels():
    hf = tiny_hf("mixtral")
    ours = GPT.from_pretrained(hf).train()  # dropout is 0: train mode only adds the balancing loss
    x = ids(seed=5)
    with torch.no_grad():
        # HF shifts its labels
        expected = hf(x[:, :-1], labels=x[:, :-1], output_router_logits=True)
        _, loss = ours(x[:, :-2], x[:, 1:-1])  # ours predicts targets given next to the inputs
    # HF's router logits cover one more position (the last, which has no label): compare the parts
    ce = expected.loss - 0.02 * expected.aux_loss
    with torch.no_grad():
        ours.eval()
        _, our_ce = ours(x[:, :-2], x[:, 1:-1])
    torch.testing.assert_close(our_ce, ce, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(loss - our_ce, 0.02 * ours.balancing_loss(), atol=1e-6, rtol=1e-6)


def test_unsupported_settings_rejected():
    for kind, overrides, phrase in [("qwen3_moe", dict(sliding_window=16, use_sliding_window=True),
                                     "sliding"),
                                    ("mixtral", dict(hidden_act="gelu"), "hidden_act"),
                                    ("qwen3_moe", dict(decoder_sparse_step=2), "dense layers")]:
        with pytest.raises(ValueError, match=phrase):
            config_from_hf(tiny_hf(kind, **overrides).config)
    with pytest.raises(ValueError, match="Mixtral or Qwen3-MoE"):
        config_from_hf(transformers.LlamaConfig())
