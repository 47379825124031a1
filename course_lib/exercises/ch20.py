"""Checks for chapter 20, Mixture of experts: ``from course_lib.exercises import ch20``."""
from __future__ import annotations

from dataclasses import replace

import torch
import torch.nn.functional as F

from ..model import GPTConfig
from ..moe import load_balancing_loss, route
from ..sizing import active_parameters, count_parameters
from . import as_integer, as_number, call, expect_close, expect_sequence, expect_tensor, fail, passed


def check_top_k_weights(fn) -> None:
    """``fn(router_logits, k) -> (weights, experts)``: for router logits (N, E), the k experts of
    each token (N, k), best first, and their weights (N, k) as Mixtral computes them: a softmax over
    all E experts, the k largest probabilities kept, divided by their sum."""
    g = torch.Generator().manual_seed(20)
    for N, E, k in ((5, 4, 2), (7, 8, 2), (3, 6, 3)):
        logits = torch.randn(N, E, generator=g) * 2
        got = call(fn, logits.clone(), k)
        weights, experts = expect_sequence(got, 2, f"top_k_weights(logits, {k})", "return (weights, experts)")
        expected_w, expected_e = route(logits, k, norm_topk=True)
        expect_tensor(experts, (N, k), "experts", "torch.topk(..., k, dim=-1) picks k per token (the last dim)")
        if not torch.equal(experts.long(), expected_e):
            fail("experts are not each token's k highest-scoring experts, best first.",
                 "torch.topk(probs, k, dim=-1).indices")
        expect_tensor(weights, (N, k), "weights")
        if torch.allclose(weights.double(), F.softmax(logits, -1).topk(k, -1).values.double(), atol=1e-5):
            fail("your weights are the softmax's probabilities over all E experts: the k of a token sum to "
                 "less than 1.", "Mixtral divides the k kept probabilities by their sum")
        if torch.allclose(weights.double(), logits.topk(k, -1).values.double(), atol=1e-5):
            fail("your weights are the raw logits of the chosen experts.", "softmax first, then top-k, then renormalise")
        expect_close(weights, expected_w, "weights", "softmax over E, top-k, divide by the sum of the k")
    passed("each token's k experts and weights that sum to 1, as Mixtral routes.")


def check_balancing_loss(fn) -> None:
    """``fn(router_logits, k) -> loss``: the Switch Transformer's load-balancing loss for router
    logits (N, E): E * sum_e f_e * P_e, f_e the number of top-k choices of expert e per token,
    P_e the mean router probability of expert e."""
    g = torch.Generator().manual_seed(200)
    for N, E, k in ((16, 4, 2), (30, 8, 2), (12, 4, 1)):
        logits = torch.randn(N, E, generator=g) * 3
        got = as_number(call(fn, logits.clone(), k), f"balancing_loss(logits, {k})")
        expected = load_balancing_loss(logits, k).item()
        probs = F.softmax(logits, -1)
        P = probs.mean(0)
        if abs(got - expected) < 1e-4:
            continue
        if abs(got - expected / E) < 1e-4:
            fail("your loss is E times too small.", "multiply sum_e f_e P_e by the number of experts E, so that "
                 "a balanced router scores k whatever E")
        if abs(got - E * (P * P).sum().item()) < 1e-4:
            fail("you used the mean probability for f_e too: f_e counts the top-k choices.",
                 "f_e = (number of tokens that chose e among their k) / N; it carries no gradient")
        expect_close(got, expected, f"balancing_loss(logits, {k})", "E * sum_e f_e * P_e", atol=1e-4)
    passed("E * sum f_e P_e: k when the router spreads tokens evenly, more when it favours a few experts.")


def check_active_parameters(fn) -> None:
    """``fn(config) -> int``: the parameters one token goes through in ``GPT(config)``, a GPTConfig
    with ``moe_experts`` E and ``moe_top_k`` k: everything but the (E - k) unchosen experts per layer."""
    base = GPTConfig(vocab_size=65, block_size=64, n_layer=4, n_head=4, n_embd=128, norm="rmsnorm",
                     rope_theta=10000.0, mlp="swiglu", tie_weights=False)
    for options in (dict(moe_experts=8, moe_top_k=2, ffn_hidden=176), dict(moe_experts=4, moe_top_k=1),
                    dict(moe_experts=16, moe_top_k=4, ffn_hidden=64, n_layer=2)):
        c = replace(base, **options)
        got = as_integer(call(fn, c), "active_parameters(config)")
        expected = active_parameters(c)
        if got == count_parameters(c):
            fail("that is the total: every token goes through k of the E experts, not all E.",
                 "subtract the (E - k) experts a token does not use, in every layer")
        if got == expected - c.n_layer * c.n_embd * c.moe_experts:
            fail("you left out the routers: every token goes through its layer's router (C x E weights).")
        if got != expected:
            fail(f"active_parameters gave {got:,}, expected {expected:,}.",
                 "one expert is a SwiGLU MLP: 3 * C * H weights (H = config.ffn_size)")
    passed("the active parameters: the model minus the experts a token skips.")
