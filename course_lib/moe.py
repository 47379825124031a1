"""A mixture-of-experts feed-forward layer (chapter 20): a router, top-k experts, load balancing.

A dense block sends every token through one MLP. A mixture of experts (Shazeer et al. 2017;
Switch Transformer, Fedus et al. 2021; Mixtral, Jiang et al. 2024) holds E MLPs, the experts,
and a linear router that scores them per token; each token goes through its top k experts only,
and their outputs are summed with the router's weights. The model then holds about E/k times the
MLP weights of a dense one at the same FLOPs per token.

Routing, as both references do it: the router's logits (N, E) go through a softmax over all E
experts, the k largest probabilities are kept, and, when ``norm_topk`` is True, divided by their
sum (Mixtral always; Qwen3-MoE when ``norm_topk_prob``). Renormalised top-k probabilities equal a
softmax over the k selected logits, so "softmax after the selection" is ``norm_topk=True`` and
"softmax before the selection, weights kept" is ``norm_topk=False``.

The gradient reaches the router only through the weights of the chosen experts (top-k itself
is a step function); the load-balancing loss (:func:`load_balancing_loss`) pushes it to spread
tokens over all experts. An optional shared expert sees every token (DeepSeek-MoE's idea).

Shapes: B batch, T time, C channels, N = B*T tokens, E experts, k experts per token.
"""
from __future__ import annotations

from typing import Callable, Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F


def route(router_logits: torch.Tensor, top_k: int, norm_topk: bool = True
          ) -> tuple[torch.Tensor, torch.Tensor]:
    """(weights, experts), each (N, k): the k experts each token goes to, best first, and the
    weight of each. Softmax over all E in float32 (as both references), top-k, then divided by the
    selected probabilities' sum when ``norm_topk``. (N, E) -> (N, k), (N, k)."""
    probs = F.softmax(router_logits, dim=-1, dtype=torch.float32)  # (N, E)
    weights, experts = torch.topk(probs, top_k, dim=-1)  # (N, k): the gradient flows through weights only
    if norm_topk:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    return weights.to(router_logits.dtype), experts


def expert_load(router_logits: torch.Tensor, top_k: int) -> torch.Tensor:
    """(E,) the fraction of the N*k routing slots each expert receives (sums to 1; 1/E for all
    when balanced). ``router_logits`` (N, E), or (L, N, E) to count every layer together."""
    E = router_logits.shape[-1]
    experts = torch.topk(router_logits.reshape(-1, E), top_k, dim=-1).indices  # softmax keeps the order
    return torch.bincount(experts.reshape(-1), minlength=E).float() / experts.numel()


def load_balancing_loss(router_logits: torch.Tensor | Sequence[torch.Tensor], top_k: int) -> torch.Tensor:
    """The load-balancing loss as Hugging Face's Mixtral and Qwen3-MoE compute it: E * sum_e f_e * P_e,
    with f_e the number of top-k slots expert e receives per token and P_e its mean router
    probability, over all the tokens of all the layers given together (pooled).

    Pooled, this is not the Switch Transformer's loss (eq. 4-6), which is computed per MoE layer
    and summed. Pooling adds the counts and probabilities of experts that share an index in
    different layers, though they are unrelated, so one layer's imbalance can cancel another's:
    with E = 8 and k = 2, a layer that sends every token to experts 0-3 only and another that sends
    every token to experts 4-7 only score 4.0 each, and 2.0 (= k, the best score) pooled, while each
    leaves half its experts idle. Switch's per-layer loss is this function called on each layer's
    (N, E) logits alone, summed over the layers.

    f carries no gradient (counting is not differentiable); P does, and the loss is smallest when
    the probabilities are spread as evenly as the counts: k when every expert gets N*k/E slots,
    up to E, its maximum, when every token picks the same k experts. ``router_logits`` is one
    (N, E) tensor or a sequence of them (one per layer, same E)."""
    if isinstance(router_logits, torch.Tensor):
        router_logits = [router_logits]
    logits = torch.cat([r.reshape(-1, r.shape[-1]) for r in router_logits])  # (L*N, E)
    E = logits.shape[-1]
    probs = F.softmax(logits, dim=-1, dtype=torch.float32)  # (L*N, E)
    experts = torch.topk(probs, top_k, dim=-1).indices  # (L*N, k)
    tokens_per_expert = torch.bincount(experts.reshape(-1), minlength=E).float() / logits.shape[0]  # f, sums to k
    prob_per_expert = probs.mean(dim=0)  # P, sums to 1
    return E * (tokens_per_expert * prob_per_expert).sum()


class MoEFeedForward(nn.Module):
    """E experts and a router in place of one MLP: (B, T, C) -> (B, T, C).

    ``make_expert()`` builds one expert (the config's MLP: SwiGLU or the standard one, hidden size
    ``config.ffn_size``), so this module does not depend on the model's. The router is a linear map
    C -> E with no bias. Dispatch is batched: the N*k (token, expert) slots are sorted by expert and
    each expert runs once on all its tokens, a loop over the E experts, never over tokens.

    After each forward, ``router_logits`` holds this call's (N, E) logits: the model adds the
    balancing loss from them, and :func:`expert_load` reads the load from them.
    """

    def __init__(self, config, make_expert: Callable[[], nn.Module]):
        super().__init__()
        self.n_experts = config.moe_experts
        self.top_k = config.moe_top_k
        self.norm_topk = config.moe_norm_topk
        self.router = nn.Linear(config.n_embd, self.n_experts, bias=False)
        self.experts = nn.ModuleList(make_expert() for _ in range(self.n_experts))
        self.shared_expert = make_expert() if config.moe_shared_expert else None
        self.router_logits: torch.Tensor | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        tokens = x.reshape(B * T, C)  # (N, C)
        logits = self.router(tokens)  # (N, E)
        self.router_logits = logits
        weights, experts = route(logits, self.top_k, self.norm_topk)  # (N, k) each
        flat_experts = experts.reshape(-1)  # (N*k,): slot s belongs to token s // k
        order = torch.argsort(flat_experts, stable=True)  # the slots grouped by expert
        token_of_slot = order // self.top_k  # (N*k,)
        weight_of_slot = weights.reshape(-1)[order]  # (N*k,)
        counts = torch.bincount(flat_experts, minlength=self.n_experts).tolist()  # slots per expert
        out = torch.zeros_like(tokens)
        start = 0
        for expert, count in zip(self.experts, counts):
            if count:  # an expert no token chose does no work (and gets no gradient)
                idx = token_of_slot[start:start + count]
                y = expert(tokens[idx]) * weight_of_slot[start:start + count, None]  # (count, C)
                out.index_add_(0, idx, y)  # a token's k expert outputs add up
            start += count
        if self.shared_expert is not None:
            out = out + self.shared_expert(tokens)
        return out.view(B, T, C)
