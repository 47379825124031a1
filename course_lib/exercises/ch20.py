"""Checks for chapter 20, Mixture of experts: ``from course_lib.exercises import ch20``."""
from __future__ import annotations

from dataclasses import replace

import torch
import torch.nn.functional as F

from ..model import GPTConfig
from ..moe import load_balancing_loss, route
from ..sizing import active_parameters, count_parameters
from . import (as_integer, as_number, call, call_with_hints, describe, expect_close,
               expect_sequence, expect_tensor, fail, passed)


def _logits_with_grad(logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(leaf, input): a leaf that requires grad, and the copy of it handed to the answer (not a
    leaf, so that an answer which works in place on its input still runs); the gradient arrives in
    leaf."""
    leaf = logits.clone().requires_grad_(True)
    return leaf, leaf.clone()


def _gradient(output: torch.Tensor, leaf: torch.Tensor, cotangent: torch.Tensor | None = None):
    """d(sum(output * cotangent))/d(leaf), zeros where the output does not depend on leaf."""
    (grad,) = torch.autograd.grad(output, leaf, grad_outputs=cotangent, allow_unused=True)
    return torch.zeros_like(leaf) if grad is None else grad


def check_top_k_weights(fn) -> None:
    """``fn(router_logits, k) -> (weights, experts)``: for router logits (N, E), the k experts of
    each token (N, k), best first, and their weights (N, k) as Mixtral computes them: a softmax over
    all E experts, the k largest probabilities kept, divided by their sum."""
    g = torch.Generator().manual_seed(20)
    g_cotangent = torch.Generator().manual_seed(21)
    for N, E, k in ((5, 4, 2), (7, 8, 2), (3, 6, 3)):
        logits = torch.randn(N, E, generator=g) * 2
        leaf, given = _logits_with_grad(logits)
        with torch.enable_grad():
            got = call(fn, given, k)
        weights, experts = expect_sequence(got, 2, f"top_k_weights(logits, {k})",
                                           "return (weights, experts)")
        expected_w, expected_e = route(logits, k, norm_topk=True)
        expect_tensor(experts, (N, k), "experts",
                      "torch.topk(..., k, dim=-1) picks k per token (the last dim)")
        if not torch.equal(experts.long(), expected_e):
            fail("experts are not each token's k highest-scoring experts, best first.",
                 "torch.topk(probs, k, dim=-1).indices")
        expect_tensor(weights, (N, k), "weights")
        if torch.allclose(weights.double(), F.softmax(logits, -1).topk(k, -1).values.double(),
                          atol=1e-5):
            fail("your weights are the softmax's probabilities over all E experts: the k of a "
                 "token sum to less than 1.",
                 "Mixtral divides the k kept probabilities by their sum")
        if torch.allclose(weights.double(), logits.topk(k, -1).values.double(), atol=1e-5):
            fail("your weights are the raw logits of the chosen experts.",
                 "softmax first, then top-k, then renormalise")
        expect_close(weights, expected_w, "weights",
                     "softmax over E, top-k, divide by the sum of the k")
        # The router learns only through these weights: they must carry the gradient back to the
        # logits.
        if not weights.requires_grad:
            fail("your weights have the right values but carry no gradient (they are detached from "
                 "router_logits): the router would never learn, since it learns only through these "
                 "weights.",
                 "compute them from router_logits with torch operations (softmax, topk, division), "
                 "without .detach(), .item()/.tolist(), torch.no_grad() or a new torch.tensor(...)")
        cotangent = torch.randn(N, k, generator=g_cotangent)
        with torch.enable_grad():
            got_grad = _gradient(weights.double(), leaf, cotangent.double())
            ref_leaf = logits.clone().requires_grad_(True)
            ref_grad = _gradient(route(ref_leaf, k, norm_topk=True)[0], ref_leaf, cotangent)
        if not torch.allclose(got_grad.double(), ref_grad.double(), atol=1e-5, rtol=1e-4):
            fail("your weights have the right values, but their gradient with respect to "
                 "router_logits is not that of softmax, top-k and renormalisation: part of the "
                 "computation is detached.",
                 "keep every step differentiable: probs = F.softmax(router_logits, -1); weights, "
                 "experts = probs.topk(k, -1); weights / weights.sum(-1, keepdim=True)")
    passed("each token's k experts and weights that sum to 1, as Mixtral routes.")


_MINLENGTH_HINT = ("torch.bincount returns max(id) + 1 counts, so when the last experts get no "
                   "token (a collapsed router, the case the loss exists for) f is shorter than P: "
                   "pass minlength=E")


def check_balancing_loss(fn) -> None:
    """``fn(router_logits, k) -> loss``: the Switch Transformer's load-balancing loss for router
    logits (N, E): E * sum_e f_e * P_e, f_e the number of top-k choices of expert e per token,
    P_e the mean router probability of expert e. The loss must carry P's gradient back to the
    logits (f, a count, carries none). The last case is a collapsed router, whose last experts
    get no token."""
    g = torch.Generator().manual_seed(200)
    # all want 0 and 1
    collapsed = (torch.tensor([[5.0, 5.0] + [-5.0] * 6]).repeat(16, 1)
                 + 0.1 * torch.randn(16, 8, generator=torch.Generator().manual_seed(201)))
    cases = [(torch.randn(N, E, generator=g) * 3, k, None) for N, E,
             k in ((16, 4, 2), (30, 8, 2), (12, 4, 1))]
    cases.append((collapsed, 2,
                  "On a collapsed router (16 tokens that all choose experts 0 and 1 of 8): "))
    for logits, k, context in cases:
        N, E = logits.shape
        leaf, given = _logits_with_grad(logits)
        with torch.enable_grad():
            if context is None:
                answer = call(fn, given, k)
            else:
                answer = call_with_hints(fn, {"must match the size": _MINLENGTH_HINT,
                                              "shape mismatch": _MINLENGTH_HINT}, given, k,
                                         context=context)
        what = f"balancing_loss(logits, {k})" + (" on a collapsed router" if context else "")
        got = as_number(answer, what)
        expected = load_balancing_loss(logits, k).item()
        probs = F.softmax(logits, -1)
        P = probs.mean(0)
        chosen = probs.topk(k, -1).indices
        if abs(got - expected) >= 1e-4:
            if abs(got - expected / E) < 1e-4:
                fail("your loss is E times too small.",
                     "multiply sum_e f_e P_e by the number of experts E, so "
                     "that a balanced router scores k whatever E")
            if abs(got - E * (P * P).sum().item()) < 1e-4:
                fail("you used the mean probability for f_e too: f_e counts the top-k choices.",
                     "f_e = (number of tokens that chose e among their k) / N; it carries no "
                     "gradient")
            if k > 1 and abs(got - expected / k) < 1e-4:
                fail(f"your loss is k = {k} times too small: you divided the counts by N * k, so f "
                     "sums to 1.",
                     "divide the counts by N (not N * k): f_e is the number of top-k slots expert "
                     "e receives per token and sums to k, so that an even router scores k, as "
                     "Hugging Face's Mixtral does")
            first = torch.bincount(chosen[:, 0], minlength=E).float() / N
            if k > 1 and abs(got - E * (first * P).sum().item()) < 1e-4:
                fail("you counted only each token's first choice: f_e counts all k of its choices.",
                     "count every expert among the k chosen: torch.bincount(chosen.flatten(), "
                     "minlength=E) / N")
            expect_close(got, expected, what, "E * sum_e f_e * P_e", atol=1e-4)
        # P carries the gradient: without it the loss balances nothing in training.
        if not (isinstance(answer, torch.Tensor) and answer.requires_grad):
            got_what = describe(answer) if not isinstance(answer, torch.Tensor) else \
                "a tensor detached from router_logits"
            fail(
                f"{what}: your loss has the right value but carries no gradient (got {got_what}): "
                "added to the training loss it would change nothing, and the router would not "
                "balance.",
                "f is a count and carries no gradient, but P must: compute P = "
                "F.softmax(router_logits, -1).mean(0) with torch operations and return the tensor, "
                "without .detach(), .item(), float(), torch.no_grad() or a new torch.tensor(...)",
            )
        with torch.enable_grad():
            got_grad = _gradient(answer.reshape(()), leaf)
            ref_leaf = logits.clone().requires_grad_(True)
            ref_grad = _gradient(load_balancing_loss(ref_leaf, k), ref_leaf)
        if not torch.allclose(got_grad.double(), ref_grad.double(), atol=1e-5, rtol=1e-4):
            fail(f"{what}: your loss has the right value, but its gradient with respect to "
                 "router_logits is not E * sum_e f_e dP_e: the gradient must flow through P only, "
                 "all of it.",
                 "f = torch.bincount(chosen.flatten(), minlength=E).float() / N is a count (no "
                 "gradient); P = F.softmax(router_logits, -1).mean(0) must not be detached")
    passed("E * sum f_e P_e: k when the router spreads tokens evenly, more when it favours a few "
           "experts.")


def check_active_parameters(fn) -> None:
    """``fn(config) -> int``: the parameters one token goes through in ``GPT(config)``, a GPTConfig
    with ``moe_experts`` E and ``moe_top_k`` k: everything but the (E - k) unchosen experts per
    layer."""
    base = GPTConfig(vocab_size=65, block_size=64, n_layer=4, n_head=4, n_embd=128, norm="rmsnorm",
                     rope_theta=10000.0, mlp="swiglu", tie_weights=False)
    for options in (dict(moe_experts=8, moe_top_k=2, ffn_hidden=176),
                    dict(moe_experts=4, moe_top_k=1, moe_norm_topk=False),
                    dict(moe_experts=16, moe_top_k=4, ffn_hidden=64, n_layer=2)):
        c = replace(base, **options)
        got = as_integer(call_with_hints(fn, {"NoneType": "config.ffn_hidden is None when the "
                                                          "config does not set it; config.ffn_size "
                                                          "is the hidden size actually used"}, c),
                         "active_parameters(config)")
        expected = active_parameters(c)
        if got == count_parameters(c):
            fail("that is the total: every token goes through k of the E experts, not all E.",
                 "subtract the (E - k) experts a token does not use, in every layer")
        if got == expected - c.n_layer * c.n_embd * c.moe_experts:
            fail("you left out the routers: every token goes through its layer's router (C x E "
                 "weights).")
        skipped = expected - count_parameters(c)  # minus the unused experts of all the layers
        if c.n_layer > 1 and got == count_parameters(c) + skipped // c.n_layer:
            fail(f"for a model of {c.n_layer} layers you subtracted the unused experts of one "
                 "layer only.",
                 "every layer has its own E experts, of which a token skips E - k: multiply by "
                 "config.n_layer")
        if got != expected:  # the expected count is not printed: it would give the answer away
            fail(f"active_parameters gave {got:,}, which is not the count.",
                 "one expert is a SwiGLU MLP: 3 * C * H weights (H = config.ffn_size)")
    passed("the active parameters: the model minus the experts a token skips.")
