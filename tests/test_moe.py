"""Chapter 20's mixture of experts (course_lib.moe and its hooks in the GPT): routing, the
balancing loss, batched dispatch against a per-token loop, sizes, and the command line."""
from dataclasses import replace

import pytest
import torch
from model_helpers import cli_train_resume_and_sample
import torch.nn.functional as F
from hypothesis import given, settings, strategies as st

from course_lib import GPT, GPTConfig
from course_lib.moe import (MoEFeedForward, expert_load, load_balancing_loss,
                            per_layer_balancing_loss, route, slot_shares)
from course_lib.sizing import (active_parameters, count_parameters, flops_per_token,
                               parameter_breakdown)

MOE = GPTConfig(vocab_size=50, block_size=32, n_layer=2, n_head=4, n_embd=32, norm="rmsnorm",
                rope_theta=10000.0, mlp="swiglu", ffn_hidden=24, moe_experts=4, moe_top_k=2)


@settings(max_examples=30, deadline=None)
@given(st.integers(2, 8), st.data())
def test_renormalised_top_k_is_a_softmax_over_the_selected_logits(E, data):
    k = data.draw(st.integers(1, E))
    logits = torch.randn(5, E,
                         generator=torch.Generator().manual_seed(data.draw(st.integers(0, 999))))
    weights, experts = route(logits, k, norm_topk=True)
    torch.testing.assert_close(weights, F.softmax(logits.gather(1, experts), dim=-1))
    assert torch.equal(experts, logits.topk(k, dim=-1).indices)
    torch.testing.assert_close(weights.sum(-1), torch.ones(5))
    # Qwen3-MoE's norm_topk_prob=False: the softmax's own
    kept, _ = route(logits, k, norm_topk=False)
    torch.testing.assert_close(kept, F.softmax(logits, -1).topk(k, -1).values)


def test_balancing_loss_is_k_when_balanced_and_k_times_e_when_collapsed():
    E, k = 4, 2
    # every probability 1/E; top-k picks experts 0 and 1: f = (1, 1, 0, 0)
    uniform = torch.zeros(8, E)
    assert load_balancing_loss(uniform, k).item() == pytest.approx(k)  # E * (1 + 1) / E
    # all tokens, all probability on 0 and 1
    collapsed = torch.tensor([[30.0, 30.0, 0.0, 0.0]]).repeat(8, 1)
    # E * (1 * 0.5 * 2)
    assert load_balancing_loss(collapsed, k).item() == pytest.approx(E * 1.0, rel=1e-4)
    spread = torch.eye(E).repeat(2, 1) * 30  # each expert the top-1 of a quarter of the tokens
    assert load_balancing_loss(spread, 1).item() == pytest.approx(1.0, rel=1e-4)
    layers = [torch.randn(6, E), torch.randn(6, E)]  # a list of layers is their tokens together
    torch.testing.assert_close(load_balancing_loss(layers, k),
                               load_balancing_loss(torch.cat(layers), k))


def test_the_pooled_loss_scores_two_unbalanced_layers_as_balanced():
    """The docstring's example (review 20-M3): pooled over layers (Hugging Face's way), two layers
    that each leave half of their 8 experts idle score k, the best score; Switch's per-layer loss
    does not."""
    # (64, 2): each token's two experts, among 0-3
    pairs = torch.tensor([[0, 1], [2, 3]]).repeat(32, 1)
    first = torch.full((64, 8), -20.0).scatter(1, pairs, 5.0)  # layer 0: experts 0-3 only
    second = torch.full((64, 8), -20.0).scatter(1, pairs + 4, 5.0)  # layer 1: experts 4-7 only
    assert load_balancing_loss(first, 2).item() == pytest.approx(4.0)
    assert load_balancing_loss(second, 2).item() == pytest.approx(4.0)
    assert load_balancing_loss([first, second], 2).item() == pytest.approx(2.0)
    # each layer's own 4.0
    assert per_layer_balancing_loss([first, second], 2).item() == pytest.approx(4.0)


def test_per_layer_loss_is_the_mean_of_single_layer_calls_and_the_model_trains_with_the_one_asked():
    layers = [torch.randn(10, 4, generator=torch.Generator().manual_seed(i)) * 2 for i in range(3)]
    single = [load_balancing_loss(r, 2) for r in layers]
    # Switch sums: 3x this
    torch.testing.assert_close(per_layer_balancing_loss(layers, 2), sum(single) / 3)
    x = torch.randint(0, 50, (2, 16), generator=torch.Generator().manual_seed(0))
    for balancing, fn in (("pooled", load_balancing_loss), ("per-layer", per_layer_balancing_loss)):
        torch.manual_seed(0)
        model = GPT(replace(MOE, moe_balancing=balancing, moe_aux_coef=0.5))
        _, loss = model(x, x)
        aux = fn(model.router_logits(), 2)
        model.eval()
        torch.testing.assert_close(loss, model(x, x)[1] + 0.5 * aux)
        assert model.balancing_loss().item() == pytest.approx(aux.item())


def test_the_top1_trap_no_router_gradient_when_the_single_weight_is_renormalised():
    """Review 20-M4: with k = 1 and moe_norm_topk every weight is p/p = 1 and the router learns
    nothing from the loss; GPTConfig refuses it, naming the fix (Switch's un-normalised gate)."""
    logits = torch.randn(6, 4, requires_grad=True)
    weights, _ = route(logits, 1, norm_topk=True)
    assert torch.equal(weights, torch.ones(6, 1))
    (weights * torch.randn(6, 1)).sum().backward()
    assert logits.grad.abs().max() < 1e-6  # 0 up to rounding
    logits.grad = None
    (route(logits, 1, norm_topk=False)[0] * torch.randn(6, 1)).sum().backward()
    assert logits.grad.abs().max() > 1e-3
    with pytest.raises(ValueError,
                       match=r"^moe_top_k=1 with moe_norm_topk=True .* set moe_norm_topk=False"):
        replace(MOE, moe_top_k=1)
    replace(MOE, moe_top_k=1, moe_norm_topk=False)  # the Switch Transformer's gate: accepted


def test_the_selection_bias_moves_the_choice_only_never_the_weights_or_their_gradient():
    logits = torch.randn(12, 6, generator=torch.Generator().manual_seed(1), requires_grad=True)
    bias = torch.tensor([0.3, -0.2, 0.0, 0.1, -0.4, 0.25])
    weights, experts = route(logits, 2, norm_topk=False, bias=bias)
    probs = F.softmax(logits, -1)
    assert torch.equal(experts, (probs.detach() + bias).topk(2, -1).indices)  # the bias chose
    # the weights are the plain probabilities
    torch.testing.assert_close(weights, probs.gather(1, experts))
    cot = torch.randn(12, 2)
    (grad,) = torch.autograd.grad((weights * cot).sum(), logits)
    (expected,) = torch.autograd.grad((F.softmax(logits, -1).gather(1, experts) * cot).sum(),
                                      logits)
    torch.testing.assert_close(grad, expected)  # the bias adds no term to the gradient
    # only differences between experts matter
    shifted = route(logits, 2, norm_topk=False, bias=bias + 5.0)
    assert torch.equal(shifted[1], experts) and torch.equal(shifted[0], weights)
    # zero bias: no change
    assert torch.equal(route(logits, 2, bias=torch.zeros(6))[1], route(logits, 2)[1])


def test_the_bias_moves_a_skewed_router_toward_balance_in_training_only():
    torch.manual_seed(0)
    layer = GPT(replace(MOE, moe_balancing="bias", moe_bias_rate=0.01)).blocks[0].mlp
    with torch.no_grad():
        layer.router.weight.normal_(0.0, 0.3)
        layer.router.weight[0] += 0.05  # positive inputs lean towards expert 0
    x = torch.rand(2, 16, 32)
    layer.eval()
    layer(x)
    assert torch.equal(layer.selection_bias, torch.zeros(4))  # evaluation does not move it
    before = slot_shares(layer.chosen, 4)
    assert before.max() > 0.45 and before.min() < 0.05  # two experts take nearly every slot
    layer.train()
    layer(x)
    busiest, idlest = before.argmax(), before.argmin()
    assert layer.selection_bias[busiest] == pytest.approx(-0.01)  # over-used: lowered by u
    assert layer.selection_bias[idlest] == pytest.approx(0.01)  # under-used: raised by u
    with torch.no_grad():
        for _ in range(100):
            layer(x)
    layer.eval()
    layer(x)
    after = slot_shares(layer.chosen, 4)
    assert after.max() < 0.3 and after.min() > 0.2  # near the even 0.25
    # the optimizer never sees it
    assert not any(n == "selection_bias" for n, _ in layer.named_parameters())
    assert "selection_bias" in layer.state_dict()  # but checkpoints do


def test_bias_balancing_adds_no_auxiliary_loss_and_its_options_need_each_other():
    torch.manual_seed(0)
    model = GPT(replace(MOE, moe_balancing="bias"))
    x = torch.randint(0, 50, (2, 16))
    logits, loss = model(x, x)
    torch.testing.assert_close(loss, F.cross_entropy(logits.view(-1, 50), x.view(-1)))
    with pytest.raises(ValueError,
                       match=r"^moe_bias_rate=0.01 takes effect only with moe_balancing='bias'"):
        replace(MOE, moe_bias_rate=0.01)
    with pytest.raises(ValueError,
                       match=r"^moe_aux_coef=0.5 does nothing with moe_balancing='bias'"):
        replace(MOE, moe_balancing="bias", moe_aux_coef=0.5)
    with pytest.raises(ValueError,
                       match="moe_balancing must be one of 'pooled', 'per-layer', 'bias'"):
        replace(MOE, moe_balancing="switch")
    with pytest.raises(ValueError, match="moe_bias_rate"):
        replace(MOE, moe_balancing="bias", moe_bias_rate=0.0)
    assert ("selection_bias" not in str(list(GPT(MOE).state_dict()))
            and MOE.moe_balancing == "pooled")


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
    # a router that never picks expert 3 (for positive inputs): it gets no gradient
    with torch.no_grad():
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
    assert (GPTConfig().moe_experts is None
            and not any(isinstance(b.mlp, MoEFeedForward) for b in GPT(GPTConfig()).blocks))
    with pytest.raises(ValueError, match="moe_top_k"):
        GPTConfig(moe_experts=2, moe_top_k=3)
    with pytest.raises(ValueError, match="moe_experts"):
        GPTConfig(moe_experts=0)
    with pytest.raises(ValueError, match="moe_aux_coef"):
        GPTConfig(moe_experts=2, moe_aux_coef=-1.0)


@pytest.mark.parametrize(
    "options",
    [
        dict(),
        dict(moe_shared_expert=True, moe_top_k=1, moe_norm_topk=False),
        dict(mlp="standard", bias=True),
        dict(tie_weights=False, rope_theta=None),
    ],
)
def test_sizing_knows_total_and_active_parameters(options):
    c = replace(MOE, **options)
    model = GPT(c)
    assert count_parameters(c) == model.num_parameters() == sum(p.numel()
                                                                for p in model.parameters())
    expert = sum(p.numel() for p in model.blocks[0].mlp.experts[0].parameters())
    assert (
        active_parameters(c)
        == count_parameters(c) - c.n_layer * (c.moe_experts - c.moe_top_k) * expert
    )
    assert (flops_per_token(c) == model.flops_per_token()
            and flops_per_token(c, False) == model.flops_per_token(False))
    assert parameter_breakdown(c)["router"] == c.n_layer * c.n_embd * c.moe_experts


def test_same_active_parameters_as_the_dense_model_when_k_experts_hold_its_hidden_size():
    dense = replace(MOE, moe_experts=None, ffn_hidden=48)
    sparse = replace(MOE, ffn_hidden=24, moe_experts=8, moe_top_k=2)
    router = sparse.n_layer * sparse.n_embd * 8
    assert (
        active_parameters(sparse)
        == active_parameters(dense) + router
        == count_parameters(dense) + router
    )
    assert (
        count_parameters(sparse) - router - count_parameters(dense)
        == 3 * parameter_breakdown(dense)["MLP"]
    )


# --- the command line: train, resume bitwise, sample ----------------------------------------------

MOE_SET = ["--set", "norm=rmsnorm", "--set", "rope_theta=10000", "--set", "mlp=swiglu", "--set",
           "moe_experts=4", "--set", "moe_top_k=2", "--set", "ffn_hidden=32", "--set",
           "moe_shared_expert=true", "--set", "n_layer=2", "--set", "n_head=4", "--set",
           "n_embd=32", "--set", "block_size=32", "--set", "batch_size=4", "--set",
           "eval_interval=3", "--set", "eval_iters=2", "--device", "cpu"]


def test_cli_trains_resumes_bitwise_and_samples_an_moe_model(tmp_path, capsys):
    a = cli_train_resume_and_sample(tmp_path, capsys, MOE_SET)
    config = GPTConfig.from_dict(a["model_config"])
    assert (config.moe_experts, config.moe_top_k, config.moe_shared_expert) == (4, 2, True)
    assert ("blocks.1.mlp.experts.3.c_gate.weight" in a["model"]
            and "blocks.0.mlp.router.weight" in a["model"])


def test_cli_resumes_the_selection_bias_bitwise(tmp_path, capsys):
    a = cli_train_resume_and_sample(tmp_path, capsys, [*MOE_SET, "--set", "moe_balancing=bias",
                                                       "--set", "moe_bias_rate=0.01"])
    # it moved, and resumed bit for bit
    assert a["model"]["blocks.0.mlp.selection_bias"].abs().sum() > 0


def test_repr_shows_the_moe_options_only_when_set():  # earlier chapters print GPTConfig()
    assert "moe" not in repr(GPTConfig()) and "qk_norm" not in repr(GPTConfig())
    assert repr(GPTConfig()).endswith("ffn_hidden=None, n_kv_head=None)")
    assert repr(MOE).endswith("n_kv_head=None, moe_experts=4)")
    assert eval(repr(MOE)) == MOE
