"""Chapter 20's mixture of experts (course_lib.moe and its hooks in the GPT): routing, the
balancing loss, batched dispatch against a per-token loop, sizes, and the command line."""
from dataclasses import replace

import pytest
import torch
from model_helpers import cli_train_resume_and_sample
import torch.nn.functional as F
from hypothesis import given, settings, strategies as st

from course_lib import GPT, GPTConfig
from course_lib.moe import MoEFeedForward, expert_load, load_balancing_loss, route
from course_lib.sizing import active_parameters, count_parameters, flops_per_token, parameter_breakdown

MOE = GPTConfig(vocab_size=50, block_size=32, n_layer=2, n_head=4, n_embd=32, norm="rmsnorm", rope_theta=10000.0,
                mlp="swiglu", ffn_hidden=24, moe_experts=4, moe_top_k=2)


@settings(max_examples=30, deadline=None)
@given(st.integers(2, 8), st.data())
def test_renormalised_top_k_is_a_softmax_over_the_selected_logits(E, data):
    k = data.draw(st.integers(1, E))
    logits = torch.randn(5, E, generator=torch.Generator().manual_seed(data.draw(st.integers(0, 999))))
    weights, experts = route(logits, k, norm_topk=True)
    torch.testing.assert_close(weights, F.softmax(logits.gather(1, experts), dim=-1))
    assert torch.equal(experts, logits.topk(k, dim=-1).indices)
    torch.testing.assert_close(weights.sum(-1), torch.ones(5))
    kept, _ = route(logits, k, norm_topk=False)  # Qwen3-MoE's norm_topk_prob=False: the softmax's own
    torch.testing.assert_close(kept, F.softmax(logits, -1).topk(k, -1).values)


def test_balancing_loss_is_k_when_balanced_and_k_times_e_when_collapsed():
    E, k = 4, 2
    uniform = torch.zeros(8, E)  # every probability 1/E; top-k picks experts 0 and 1: f = (1, 1, 0, 0)
    assert load_balancing_loss(uniform, k).item() == pytest.approx(k)  # E * (1 + 1) / E
    collapsed = torch.tensor([[30.0, 30.0, 0.0, 0.0]]).repeat(8, 1)  # all tokens, all probability on 0 and 1
    assert load_balancing_loss(collapsed, k).item() == pytest.approx(E * 1.0, rel=1e-4)  # E * (1 * 0.5 * 2)
    spread = torch.eye(E).repeat(2, 1) * 30  # each expert the top-1 of a quarter of the tokens
    assert load_balancing_loss(spread, 1).item() == pytest.approx(1.0, rel=1e-4)
    layers = [torch.randn(6, E), torch.randn(6, E)]  # a list of layers is their tokens together
    torch.testing.assert_close(load_balancing_loss(layers, k), load_balancing_loss(torch.cat(layers), k))


def test_the_pooled_loss_scores_two_unbalanced_layers_as_balanced():
    """The docstring's example (review 20-M3): pooled over layers (Hugging Face's way), two layers that
    each leave half of their 8 experts idle score k, the best score; Switch's per-layer loss does not."""
    pairs = torch.tensor([[0, 1], [2, 3]]).repeat(32, 1)  # (64, 2): each token's two experts, among 0-3
    first = torch.full((64, 8), -20.0).scatter(1, pairs, 5.0)  # layer 0: experts 0-3 only
    second = torch.full((64, 8), -20.0).scatter(1, pairs + 4, 5.0)  # layer 1: experts 4-7 only
    assert load_balancing_loss(first, 2).item() == pytest.approx(4.0)
    assert load_balancing_loss(second, 2).item() == pytest.approx(4.0)
    assert load_balancing_loss([first, second], 2).item() == pytest.approx(2.0)


def test_expert_load_counts_the_slots():
    logits = torch.tensor([[3.0, 2.0, 1.0], [3.0, 1.0, 2.0], [1.0, 2.0, 3.0], [3.0, 2.0, 0.0]])
    torch.testing.assert_close(expert_load(logits, 2), torch.tensor([3, 3, 2]) / 8.0)


def test_dispatch_equals_a_loop_over_tokens_and_skips_idle_experts():
    torch.manual_seed(0)
    for shared in (False, True):
        layer = GPT(replace(MOE, moe_shared_expert=shared)).blocks[0].mlp
        x = torch.randn(3, 7, 32)
        got = layer(x)
        expected = torch.zeros_like(x)
        weights, experts = route(layer.router(x.reshape(-1, 32)), 2)
        for n, token in enumerate(x.reshape(-1, 32)):  # the obvious loop, one token at a time
            y = sum(w * layer.experts[e](token) for w, e in zip(weights[n], experts[n].tolist()))
            if shared:
                y = y + layer.shared_expert(token)
            expected.view(-1, 32)[n] = y
        torch.testing.assert_close(got, expected, atol=1e-6, rtol=1e-5)
    with torch.no_grad():  # a router that never picks expert 3 (for positive inputs): it gets no gradient
        layer.router.weight[3] = -100.0
    layer(x.abs()).sum().backward()
    assert all(p.grad is None for p in layer.experts[3].parameters())
    assert layer.router.weight.grad.abs().sum() > 0  # the router learns through the top-k weights


def test_training_loss_adds_the_balancing_loss_and_validation_does_not():
    torch.manual_seed(0)
    model = GPT(replace(MOE, moe_aux_coef=0.5))
    x = torch.randint(0, 50, (2, 16))
    model.train()
    _, train_loss = model(x, x)
    aux = model.balancing_loss()
    model.eval()
    logits, val_loss = model(x, x)
    torch.testing.assert_close(val_loss, F.cross_entropy(logits.view(-1, 50), x.view(-1)))
    torch.testing.assert_close(train_loss, val_loss + 0.5 * aux)
    train_loss.backward()  # the router also gets the balancing loss's gradient
    assert model.blocks[0].mlp.router.weight.grad is not None


def test_dense_default_is_unchanged_and_bad_options_are_clear():
    assert GPTConfig().moe_experts is None and not any(isinstance(b.mlp, MoEFeedForward) for b in GPT(GPTConfig()).blocks)
    with pytest.raises(ValueError, match="moe_top_k"):
        GPTConfig(moe_experts=2, moe_top_k=3)
    with pytest.raises(ValueError, match="moe_experts"):
        GPTConfig(moe_experts=0)
    with pytest.raises(ValueError, match="moe_aux_coef"):
        GPTConfig(moe_experts=2, moe_aux_coef=-1.0)


@pytest.mark.parametrize("options", [dict(), dict(moe_shared_expert=True, moe_top_k=1), dict(mlp="standard", bias=True),
                                     dict(tie_weights=False, rope_theta=None)])
def test_sizing_knows_total_and_active_parameters(options):
    c = replace(MOE, **options)
    model = GPT(c)
    assert count_parameters(c) == model.num_parameters() == sum(p.numel() for p in model.parameters())
    expert = sum(p.numel() for p in model.blocks[0].mlp.experts[0].parameters())
    assert active_parameters(c) == count_parameters(c) - c.n_layer * (c.moe_experts - c.moe_top_k) * expert
    assert flops_per_token(c) == model.flops_per_token() and flops_per_token(c, False) == model.flops_per_token(False)
    assert parameter_breakdown(c)["router"] == c.n_layer * c.n_embd * c.moe_experts


def test_same_active_parameters_as_the_dense_model_when_k_experts_hold_its_hidden_size():
    dense = replace(MOE, moe_experts=None, ffn_hidden=48)
    sparse = replace(MOE, ffn_hidden=24, moe_experts=8, moe_top_k=2)
    router = sparse.n_layer * sparse.n_embd * 8
    assert active_parameters(sparse) == active_parameters(dense) + router == count_parameters(dense) + router
    assert count_parameters(sparse) - router - count_parameters(dense) == 3 * parameter_breakdown(dense)["MLP"]


# --- the command line: train, resume bitwise, sample ------------------------------------------------

MOE_SET = ["--set", "norm=rmsnorm", "--set", "rope_theta=10000", "--set", "mlp=swiglu", "--set", "moe_experts=4",
           "--set", "moe_top_k=2", "--set", "ffn_hidden=32", "--set", "moe_shared_expert=true",
           "--set", "n_layer=2", "--set", "n_head=4", "--set", "n_embd=32", "--set", "block_size=32",
           "--set", "batch_size=4", "--set", "eval_interval=3", "--set", "eval_iters=2", "--device", "cpu"]


def test_cli_trains_resumes_bitwise_and_samples_an_moe_model(tmp_path, capsys):
    a = cli_train_resume_and_sample(tmp_path, capsys, MOE_SET)
    config = GPTConfig.from_dict(a["model_config"])
    assert (config.moe_experts, config.moe_top_k, config.moe_shared_expert) == (4, 2, True)
    assert "blocks.1.mlp.experts.3.c_gate.weight" in a["model"] and "blocks.0.mlp.router.weight" in a["model"]


def test_repr_shows_the_moe_options_only_when_set():  # earlier chapters print GPTConfig()
    assert "moe" not in repr(GPTConfig()) and "qk_norm" not in repr(GPTConfig())
    assert repr(GPTConfig()).endswith("ffn_hidden=None, n_kv_head=None)")
    assert repr(MOE).endswith("n_kv_head=None, moe_experts=4)")
    assert eval(repr(MOE)) == MOE
