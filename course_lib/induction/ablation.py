"""Interventions on heads (chapter 21): zero- and mean-ablation through forward hooks, the cut of
one path between two layers (path patching of one input of later heads), and the composition
scores of Elhage et al. (2021) read from the weights.

Ablating head h of a layer replaces its output z (B, T, nh, hs), before the output projection,
by zeros or by its mean over reference rows at each position (mean-ablation keeps what the head
writes on average and removes only what depends on the row). The hooks live on the model's
``hook_z`` points (:mod:`.model`) and are removed when the ``with`` block ends.

Shapes: B batch, T time, C channels, nh heads, hs head size.
"""
from __future__ import annotations

import contextlib

import torch
import torch.nn as nn
import torch.nn.functional as F

ABLATIONS = ("zero", "mean")


@torch.no_grad()
def head_means(model: nn.Module, rows: torch.Tensor) -> list[torch.Tensor]:
    """Per layer, (T, nh, hs): each head's output z averaged over ``rows`` (B, T) at each
    position."""
    found = []
    handles = [attn.hook_z.register_forward_hook(lambda module, args,
                                                 out: found.append(out.mean(0)))
               for attn in model.attn]
    try:
        model(rows)
    finally:
        for handle in handles:
            handle.remove()
    return found


@contextlib.contextmanager
def ablate(model: nn.Module, layer: int, head: int, how: str = "zero",
           means: list[torch.Tensor] | None = None):
    """Within the block, head ``head`` of layer ``layer`` writes zeros (``how="zero"``) or its mean
    output over reference rows (``how="mean"``, ``means`` from :func:`head_means`) at every
    position."""
    if how not in ABLATIONS:
        raise ValueError(f"how must be one of {ABLATIONS}, got {how!r}")
    n_layer, n_head = len(model.attn), model.attn[0].n_head
    if not (0 <= layer < n_layer and 0 <= head < n_head):
        raise ValueError(f"no head {layer}.{head}: the model has {n_layer} layers of {n_head} "
                         "heads")
    if how == "mean" and means is None:
        raise ValueError("mean-ablation needs the heads' mean outputs: pass "
                         "means=head_means(model, rows)")

    def replace(module, args, z):  # z (B, T, nh, hs)
        z = z.clone()
        z[:, :, head] = 0.0 if how == "zero" else means[layer][:z.shape[1], head]
        return z

    handle = model.attn[layer].hook_z.register_forward_hook(replace)
    try:
        yield model
    finally:
        handle.remove()


PATHS = ("q", "k", "v")


def _norm_without_hooks(norm: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """The target layer's norm applied to ``x`` without calling the module, so that no hook on it
    (the stream-keeping hook of another open :func:`cut_path`) sees this recomputation."""
    if isinstance(norm, nn.LayerNorm):
        return F.layer_norm(x, norm.normalized_shape, norm.weight, norm.bias, norm.eps)
    if isinstance(norm, nn.Identity):
        return x
    raise TypeError(f"cut_path knows LayerNorm and no norm, not {type(norm).__name__}")


@contextlib.contextmanager
def cut_path(model: nn.Module, source: tuple[int, list[int]], target: tuple[int, list[int]],
             path: str = "k", how: str = "mean", means: list[torch.Tensor] | None = None):
    """Within the block, the output of the ``source`` heads ``(layer, [heads])`` is removed from one
    input only, ``path`` (their queries, keys or values), of the ``target`` heads ``(layer,
    [heads])`` of a later layer: those heads compute that input from the residual stream with the
    source heads' direct contribution replaced by zeros (``how="zero"``) or by its mean over
    reference rows (``how="mean"``, ``means`` from :func:`head_means`); their other inputs, every
    other head and the unembedding still see the full stream. The key-path cut of a previous-token
    head into an induction head is the causal test of K-composition. Only the direct path is cut:
    with layers between the two, what the source heads wrote reaches the target also through
    them."""
    (s_layer, s_heads), (t_layer, t_heads) = source, target
    if path not in PATHS:
        raise ValueError(f"path must be one of {PATHS} (the input of the target heads to cut), got "
                         f"{path!r}")
    if how not in ABLATIONS:
        raise ValueError(f"how must be one of {ABLATIONS}, got {how!r}")
    n_layer, n_head = len(model.attn), model.attn[0].n_head
    if not 0 <= s_layer < t_layer < n_layer:
        raise ValueError(f"a path runs from an earlier layer to a later one of the {n_layer}: "
                         f"got source layer {s_layer}, target layer {t_layer}")
    if not s_heads or not t_heads or not all(0 <= h < n_head for h in [*s_heads, *t_heads]):
        raise ValueError(f"source and target need heads among 0..{n_head - 1}, got {s_heads} and "
                         f"{t_heads}")
    if how == "mean" and means is None:
        raise ValueError("a mean cut needs the heads' mean outputs: pass means=head_means(model, "
                         "rows)")
    attn, norm = model.attn[t_layer], model.ln[t_layer]
    hs = attn.head_size
    # (nh, hs, C): what each head writes
    W_O = model.attn[s_layer].c_proj.weight.T.reshape(n_head, hs, -1)
    seen = {}

    def keep_z(module, args, z):  # z (B, T, nh, hs) of the source layer
        seen["z"] = z

    def keep_stream(module, args):  # the residual stream (B, T, C) the target layer reads
        seen["stream"] = args[0]

    def replace(module, args, t):  # t (B, nh, T, hs): the target layer's q, k or v
        z, stream = seen.pop("z"), seen.pop("stream")
        B, T = z.shape[:2]
        heads = list(s_heads)
        kept = (torch.zeros_like(z[:, :, heads]) if how == "zero"
                else means[s_layer][:T, heads].expand(B, T, -1, -1))
        delta = torch.einsum("bthd,hdc->btc", z[:, :, heads] - kept, W_O[heads])  # (B, T, C)
        C = stream.shape[-1]
        which = PATHS.index(path)
        W, b = (
            attn.c_attn.weight[which * C : (which + 1) * C],
            attn.c_attn.bias[which * C : (which + 1) * C],
        )
        normed = _norm_without_hooks(norm, stream - delta)  # another open cut's hooks must not fire
        cut = F.linear(normed, W, b).view(B, T, n_head, hs).transpose(1, 2)  # (B, nh, T, hs)
        t = t.clone()
        t[:, t_heads] = cut[:, t_heads]
        return t

    handles = [model.attn[s_layer].hook_z.register_forward_hook(keep_z),
               norm.register_forward_pre_hook(keep_stream),
               getattr(attn, f"hook_{path}").register_forward_hook(replace)]
    try:
        yield model
    finally:
        for handle in handles:
            handle.remove()


def head_matrices(model: nn.Module, layer: int, fold_norm: bool = True) -> dict[str, torch.Tensor]:
    """Per head, the two C x C maps of one layer, for row vectors x of the residual stream:
    ``qk`` (nh, C, C) with scores q.k = x_q W_QK x_k^T, and ``ov`` (nh, C, C) with the head's
    output x W_OV. ``fold_norm`` multiplies in the gain of the LayerNorm the layer reads through
    (its bias and centring are left out, as in ARENA's composition scores)."""
    attn = model.attn[layer]
    C, nh, hs = attn.c_proj.weight.shape[0], attn.n_head, attn.head_size
    W = attn.c_attn.weight.detach()  # (3C, C): rows of q, then k, then v
    # (nh, C, hs)
    W_Q, W_K, W_V = (W[i * C:(i + 1) * C].T.reshape(C, nh, hs).permute(1, 0, 2) for i in range(3))
    W_O = attn.c_proj.weight.detach().T.reshape(nh, hs, C)  # (nh, hs, C)
    norm = model.ln[layer]
    if fold_norm and isinstance(norm, nn.LayerNorm):
        gain = norm.weight.detach()[None, :, None]  # (1, C, 1)
        W_Q, W_K, W_V = W_Q * gain, W_K * gain, W_V * gain
    return {"qk": W_Q @ W_K.transpose(1, 2), "ov": W_V @ W_O}


def composition_score(W_A: torch.Tensor, W_B: torch.Tensor) -> torch.Tensor:
    """||W_A W_B||_F / (||W_A||_F ||W_B||_F): how much of what W_A writes W_B reads (0 to 1)."""
    return torch.linalg.matrix_norm(W_A @ W_B) / (
        torch.linalg.matrix_norm(W_A) * torch.linalg.matrix_norm(W_B)
    )


def k_composition(model: nn.Module) -> torch.Tensor:
    """(nh, nh): K-composition of each layer-0 head (row) into each layer-1 head (column), ARENA's
    ``get_comp_score(W_OV[0, i], W_QK[1, j].T)``: how much layer-1 head j's keys read what layer-0
    head i writes."""
    ov0, qk1 = head_matrices(model, 0)["ov"], head_matrices(model, 1)["qk"]
    return torch.stack([torch.stack([composition_score(ov0[i], qk1[j].T) for j in range(len(qk1))])
                        for i in range(len(ov0))])


def random_composition_baseline(C: int, hs: int, samples: int = 200, seed: int = 0) -> float:
    """The mean composition score of random Gaussian rank-hs maps of the same shapes: what
    "no composition" looks like at this size."""
    g = torch.Generator().manual_seed(seed)
    scores = []
    for _ in range(samples):
        A = torch.randn(C, hs, generator=g) @ torch.randn(hs, C, generator=g)
        B = torch.randn(C, hs, generator=g) @ torch.randn(hs, C, generator=g)
        scores.append(composition_score(A, B).item())
    return sum(scores) / samples
