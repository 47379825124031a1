"""Chapter 24's layers, written as Qwen3.5 and Qwen3-Next write them (the parameter names are
Hugging Face's, so their weights load by name): a Gated DeltaNet layer, the gated attention the
hybrid keeps one layer in four, the SwiGLU feed-forward and the two RMSNorms they use.

Shapes: x (B, T, C); heads (B, H, T, hs); a Gated DeltaNet state is a dict with "conv" (B, conv_dim,
K - 1), the last K - 1 inputs of the short convolution, and "S" (B, Hv, dk, dv), the matrix memory;
an attention cache is a pair of keys and values (B, n_kv, T, hs) that grows by one position a token.
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..rope import apply_rope
from .rules import gated_delta_rule_chunked, gated_delta_rule_recurrent


def _rms(x: torch.Tensor, eps: float) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)


class ZeroCenteredRMSNorm(nn.Module):
    """RMSNorm whose gain is stored as 1 + weight with weight starting at 0 (Qwen3.5's and
    Qwen3-Next's blocks): weight decay then pulls the gain towards 1, not towards 0."""

    def __init__(self, size: int, eps: float = 1e-6):
        super().__init__()
        self.eps, self.weight = eps, nn.Parameter(torch.zeros(size))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (_rms(x.float(), self.eps) * (1.0 + self.weight.float())).type_as(x)


class GatedRMSNorm(nn.Module):
    """RMSNorm of each head's output, then multiplied by SiLU of a gate z computed from the
    layer's input: the layer decides, channel by channel, how much of what it read to let out."""

    def __init__(self, size: int, eps: float = 1e-6):
        super().__init__()
        self.eps, self.weight = eps, nn.Parameter(torch.ones(size))

    def forward(self, x: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        h = self.weight * _rms(x.float(), self.eps).to(x.dtype)
        return (h * F.silu(z.float())).to(x.dtype)


class SwiGLU(nn.Module):
    """The feed-forward of chapter 14: down(SiLU(gate(x)) * up(x))."""

    def __init__(self, n_embd: int, hidden: int):
        super().__init__()
        self.gate_proj = nn.Linear(n_embd, hidden, bias=False)
        self.up_proj = nn.Linear(n_embd, hidden, bias=False)
        self.down_proj = nn.Linear(hidden, n_embd, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class GatedDeltaNet(nn.Module):
    """A Gated DeltaNet layer (B, T, C) -> (B, T, C), with its fixed-size state.

    One projection gives q, k and v, mixed over the last K tokens by a causal depthwise convolution
    and SiLU; per head a write strength beta = sigmoid(b) and a log decay
    g = -exp(A_log) * softplus(a + dt_bias) (so 0 < exp(g) < 1, learned per head and token). The
    gated delta rule runs chunk by chunk over a prompt and token by token with a state; each
    head's output is RMS-normalised, gated by SiLU(z) and projected back to C."""

    def __init__(self, cfg):
        super().__init__()
        self.hk, self.hv = cfg.linear_k_heads, cfg.linear_v_heads
        self.dk, self.dv = cfg.linear_k_dim, cfg.linear_v_dim
        self.key_dim, self.value_dim = self.hk * self.dk, self.hv * self.dv
        self.conv_dim, self.kernel = 2 * self.key_dim + self.value_dim, cfg.conv_kernel
        self.chunk_size = cfg.chunk_size
        C = cfg.n_embd
        self.in_proj_qkv = nn.Linear(C, self.conv_dim, bias=False)
        self.in_proj_z = nn.Linear(C, self.value_dim, bias=False)
        self.in_proj_b = nn.Linear(C, self.hv, bias=False)
        self.in_proj_a = nn.Linear(C, self.hv, bias=False)
        self.conv1d = nn.Conv1d(self.conv_dim, self.conv_dim, self.kernel, groups=self.conv_dim,
                                bias=False, padding=self.kernel - 1)
        self.dt_bias = nn.Parameter(torch.ones(self.hv))
        self.A_log = nn.Parameter(torch.empty(self.hv).uniform_(0.01, 16).log())  # decay rates
        self.norm = GatedRMSNorm(self.dv, cfg.norm_eps)
        self.out_proj = nn.Linear(self.value_dim, C, bias=False)

    def _convolve(self, mixed: torch.Tensor,
                  state: dict | None) -> tuple[torch.Tensor, torch.Tensor]:
        """mixed (B, conv_dim, T) -> (its causal convolution with SiLU, the last K-1 inputs)."""
        B, _, T = mixed.shape
        past = (mixed.new_zeros(B, self.conv_dim, self.kernel - 1) if state is None
                else state["conv"])
        full = torch.cat([past, mixed], dim=-1)  # the K-1 inputs before this call, then these T
        # depthwise: channel c at t is sum_j w[c, j] full[c, t + j]; written out, since torch's
        # grouped conv1d is slow on small CPU inputs (63 ms a call here for a 4-layer toy model)
        windows = full.unfold(-1, self.kernel, 1)  # (B, conv_dim, T, K)
        out = (windows * self.conv1d.weight[:, None, 0, :]).sum(-1)  # (B, conv_dim, T)
        return F.silu(out), full[:, :, -(self.kernel - 1):]

    def forward(self, x: torch.Tensor, state: dict | None = None) -> tuple[torch.Tensor, dict]:
        """x (B, T, C), state from the previous call or None -> (y (B, T, C), the new state)."""
        B, T, _ = x.shape
        mixed, conv_state = self._convolve(self.in_proj_qkv(x).transpose(1, 2), state)
        q, k, v = mixed.transpose(1, 2).split([self.key_dim, self.key_dim, self.value_dim], dim=-1)
        q = q.reshape(B, T, self.hk, self.dk).transpose(1, 2)  # (B, Hk, T, dk)
        k = k.reshape(B, T, self.hk, self.dk).transpose(1, 2)
        v = v.reshape(B, T, self.hv, self.dv).transpose(1, 2)  # (B, Hv, T, dv)
        if self.hv != self.hk:  # each query/key head serves hv / hk value heads
            q, k = (t.repeat_interleave(self.hv // self.hk, dim=1) for t in (q, k))
        beta = self.in_proj_b(x).sigmoid().transpose(1, 2)  # (B, Hv, T)
        g = -self.A_log.float().exp() * F.softplus(self.in_proj_a(x).float() + self.dt_bias)
        S = None if state is None else state["S"]
        if T == 1 and S is not None:  # one new token: one step of the recurrence
            o, S = gated_delta_rule_recurrent(q, k, v, g.transpose(1, 2), beta, state=S)
        else:
            o, S = gated_delta_rule_chunked(q, k, v, g.transpose(1, 2), beta, self.chunk_size, S)
        o = o.to(x.dtype).transpose(1, 2)  # (B, T, Hv, dv)
        z = self.in_proj_z(x).reshape(B, T, self.hv, self.dv)
        y = self.norm(o, z).reshape(B, T, self.value_dim)
        return self.out_proj(y), {"conv": conv_state, "S": S}


class GatedAttention(nn.Module):
    """Qwen3.5's attention layer: grouped-query attention with QK-norm, RoPE on the first
    ``rotary_dim`` channels of each head only, and a sigmoid gate on the output (the query
    projection is twice as wide: half queries, half gates)."""

    def __init__(self, cfg):
        super().__init__()
        self.nh, self.nkv, self.hs = cfg.n_head, cfg.kv_heads, cfg.head_size
        C = cfg.n_embd
        self.q_proj = nn.Linear(C, self.nh * self.hs * 2, bias=False)
        self.k_proj = nn.Linear(C, self.nkv * self.hs, bias=False)
        self.v_proj = nn.Linear(C, self.nkv * self.hs, bias=False)
        self.o_proj = nn.Linear(self.nh * self.hs, C, bias=False)
        self.q_norm = ZeroCenteredRMSNorm(self.hs, cfg.norm_eps)
        self.k_norm = ZeroCenteredRMSNorm(self.hs, cfg.norm_eps)

    def _rotate(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        r = 2 * cos.shape[-1]  # the rotated channels; the rest pass through
        return torch.cat([apply_rope(x[..., :r], cos, sin), x[..., r:]], dim=-1)

    def forward(self, x, cos, sin, cache=None):
        """x (B, T, C), cos and sin (T, r/2) of these T positions, cache (keys, values) of the
        earlier positions or None -> (y (B, T, C), the cache with these T positions added)."""
        B, T, _ = x.shape
        q, gate = self.q_proj(x).view(B, T, self.nh, 2 * self.hs).chunk(2, dim=-1)
        q = self._rotate(self.q_norm(q).transpose(1, 2), cos, sin)  # (B, nh, T, hs)
        k = self._rotate(self.k_norm(self.k_proj(x).view(B, T, self.nkv, self.hs)).transpose(1, 2),
                         cos, sin)
        v = self.v_proj(x).view(B, T, self.nkv, self.hs).transpose(1, 2)
        if cache is not None:
            k, v = torch.cat([cache[0], k], dim=2), torch.cat([cache[1], v], dim=2)
        rep = self.nh // self.nkv
        ke, ve = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        if cache is None:
            y = F.scaled_dot_product_attention(q, ke, ve, is_causal=True)
        else:  # new queries see every cached position and the causal part of their own
            past = k.shape[2] - T
            mask = torch.ones(T, past + T, dtype=torch.bool, device=x.device).tril(past)
            y = F.scaled_dot_product_attention(q, ke, ve, attn_mask=mask)
        y = (y.transpose(1, 2).reshape(B, T, self.nh * self.hs)
             * torch.sigmoid(gate.reshape(B, T, -1)))
        return self.o_proj(y), (k, v)
