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
is a step function). With k = 1 and ``norm_topk`` every weight is p/p = 1: the router gets no
gradient from the language-model loss at all, so top-1 routing keeps the softmax's own p (the Switch
Transformer's gate) and the config refuses the other (:func:`check_moe_options`).

Three ways to spread the tokens over the experts (``moe_balancing``):
- "pooled": the load-balancing loss (:func:`load_balancing_loss`) over the tokens of all layers
  together, as Hugging Face's Mixtral and Qwen3-MoE compute it;
- "per-layer": the same loss on each layer's logits alone, averaged over the layers
  (:func:`per_layer_balancing_loss`; the Switch Transformer sums them: see there);
- "bias": no auxiliary loss. A per-expert bias, added to the router's probabilities for the
  selection only (never to the weights), is nudged after each training forward by +u when the
  expert got fewer slots than the mean and -u when it got more (auxiliary-loss-free balancing,
  Wang et al. 2024; DeepSeek-V3). The bias is a buffer: checkpoints save and resume it.

An optional shared expert sees every token (DeepSpeed-MoE's residual expert, DeepSeek-MoE).

Shapes: B batch, T time, C channels, N = B*T tokens, E experts, k experts per token.
"""
from __future__ import annotations

from typing import Callable, Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F


BALANCINGS = ("pooled", "per-layer", "bias")  # GPTConfig.moe_balancing (see the module's docstring)


def check_moe_options(config) -> None:
    """Refuse, in one line naming the fix, the MoE settings that cannot work (GPTConfig calls
    it)."""
    if config.moe_experts is None:
        return  # gpt_config.NEEDS_ANOTHER refuses any MoE option set without experts
    if config.moe_top_k > config.moe_experts:
        raise ValueError(f"moe_top_k ({config.moe_top_k}) cannot exceed moe_experts "
                         f"({config.moe_experts}): each token picks k different experts. Lower "
                         "moe_top_k or add experts.")
    if config.moe_top_k == 1 and config.moe_norm_topk:
        raise ValueError("moe_top_k=1 with moe_norm_topk=True gives every token the weight p/p = "
                         "1, so the router gets no gradient from the loss: set moe_norm_topk=False "
                         "(the Switch Transformer's gate p)")
    if config.moe_balancing != "bias" and config.moe_bias_rate != 1e-3:
        raise ValueError(f"moe_bias_rate={config.moe_bias_rate!r} takes effect only with "
                         "moe_balancing='bias': set it too, or leave moe_bias_rate at its default "
                         "0.001")
    if config.moe_balancing == "bias" and config.moe_aux_coef not in (0.0, 0.01):
        raise ValueError(f"moe_aux_coef={config.moe_aux_coef!r} does nothing with "
                         "moe_balancing='bias' (no auxiliary loss): leave it at its default, or "
                         "choose moe_balancing='pooled' or 'per-layer'")


def route(router_logits: torch.Tensor, top_k: int, norm_topk: bool = True,
          bias: torch.Tensor | None = None
          ) -> tuple[torch.Tensor, torch.Tensor]:
    """(weights, experts), each (N, k): the k experts each token goes to, best first, and the
    weight of each. Softmax over all E in float32 (as both references), top-k, then divided by the
    selected probabilities' sum when ``norm_topk``. (N, E) -> (N, k), (N, k).

    ``bias`` (E,), when given, is added to the probabilities to choose the experts only: the
    weights stay the chosen experts' own probabilities (auxiliary-loss-free balancing)."""
    probs = F.softmax(router_logits, dim=-1, dtype=torch.float32)  # (N, E)
    if bias is None:
        # (N, k): the gradient flows through weights only
        weights, experts = torch.topk(probs, top_k, dim=-1)
    else:  # the bias moves the choice; it carries no gradient and is not in the weights
        experts = torch.topk(probs.detach() + bias, top_k, dim=-1).indices  # (N, k)
        weights = probs.gather(-1, experts)
    if norm_topk:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    return weights.to(router_logits.dtype), experts


def expert_load(router_logits: torch.Tensor, top_k: int) -> torch.Tensor:
    """(E,) the fraction of the N*k routing slots each expert receives (sums to 1; 1/E for all
    when balanced). ``router_logits`` (N, E), or (L, N, E) to count every layer together."""
    E = router_logits.shape[-1]
    # softmax keeps the order
    experts = torch.topk(router_logits.reshape(-1, E), top_k, dim=-1).indices
    return torch.bincount(experts.reshape(-1), minlength=E).float() / experts.numel()


def slot_shares(experts: torch.Tensor, n_experts: int) -> torch.Tensor:
    """(E,) the fraction of routing slots each expert got, from the chosen experts (N, k)."""
    return torch.bincount(experts.reshape(-1), minlength=n_experts).float() / experts.numel()


def load_balancing_loss(router_logits: torch.Tensor | Sequence[torch.Tensor],
                        top_k: int) -> torch.Tensor:
    """The load-balancing loss as Hugging Face's Mixtral and Qwen3-MoE compute it: E * sum_e f_e *
    P_e, with f_e the number of top-k slots expert e receives per token and P_e its mean router
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
    # f, sums to k
    tokens_per_expert = torch.bincount(experts.reshape(-1), minlength=E).float() / logits.shape[0]
    prob_per_expert = probs.mean(dim=0)  # P, sums to 1
    return E * (tokens_per_expert * prob_per_expert).sum()


def per_layer_balancing_loss(router_logits: Sequence[torch.Tensor], top_k: int) -> torch.Tensor:
    """The balancing loss of each layer's (N, E) logits alone, averaged over the L layers.

    The Switch Transformer adds the loss of every MoE layer (a sum). We average, so that the value
    stays between k and E whatever the depth, and a coefficient means the same as for the pooled
    loss: ``moe_aux_coef`` alpha here is L times Switch's alpha (our 0.01 averaged over 2 layers is
    Switch's sum at 0.005). Each router's gradient is then about as strong as under the pooled loss
    at the same alpha, and only what is counted together differs."""
    return torch.stack([load_balancing_loss(r, top_k) for r in router_logits]).mean()


def balancing_loss(router_logits: Sequence[torch.Tensor], top_k: int,
                   balancing: str = "pooled") -> torch.Tensor:
    """The auxiliary loss ``moe_balancing`` asks for: pooled, per layer, or none (0.0 for
    "bias")."""
    if balancing == "bias":
        return router_logits[0].new_zeros((), dtype=torch.float32)
    fn = load_balancing_loss if balancing == "pooled" else per_layer_balancing_loss
    return fn(router_logits, top_k)


class MoEFeedForward(nn.Module):
    """E experts and a router in place of one MLP: (B, T, C) -> (B, T, C).

    ``make_expert()`` builds one expert (the config's MLP: SwiGLU or the standard one, hidden size
    ``config.ffn_size``), so this module does not depend on the model's. The router is a linear map
    C -> E with no bias. Dispatch is batched: the N*k (token, expert) slots are sorted by expert and
    each expert runs once on all its tokens, a loop over the E experts, never over tokens.

    After each forward, ``router_logits`` holds this call's (N, E) logits (the model adds the
    balancing loss from them) and ``chosen`` its (N, k) experts, read by :func:`slot_shares`. With
    ``moe_balancing="bias"`` the buffer ``selection_bias`` (E,) steers the choice, and each forward
    in training mode moves it by ``moe_bias_rate`` toward an even load.
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
        self.chosen: torch.Tensor | None = None
        self.bias_rate = config.moe_bias_rate if config.moe_balancing == "bias" else None
        if self.bias_rate is not None:  # a buffer, not a parameter: the optimizer never sees it
            self.register_buffer("selection_bias", torch.zeros(self.n_experts))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        tokens = x.reshape(B * T, C)  # (N, C)
        logits = self.router(tokens)  # (N, E)
        self.router_logits = logits
        bias = self.selection_bias if self.bias_rate is not None else None
        weights, experts = route(logits, self.top_k, self.norm_topk, bias)  # (N, k) each
        self.chosen = experts
        flat_experts = experts.reshape(-1)  # (N*k,): slot s belongs to token s // k
        order = torch.argsort(flat_experts, stable=True)  # the slots grouped by expert
        token_of_slot = order // self.top_k  # (N*k,)
        weight_of_slot = weights.reshape(-1)[order]  # (N*k,)
        slots = torch.bincount(flat_experts, minlength=self.n_experts)  # (E,) slots per expert
        # after the choice: the next forward's choice changes
        if bias is not None and self.training:
            with torch.no_grad():  # +u below the mean load, -u above it (0 exactly at it)
                bias += self.bias_rate * torch.sign(slots.float().mean() - slots.float())
        counts = slots.tolist()
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
