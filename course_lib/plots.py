"""Figures used throughout the course (matplotlib). Each function returns the Axes it drew on."""
from __future__ import annotations

import matplotlib.pyplot as plt
import torch


def _axes(ax, figsize=(6, 4)):
    if ax is None:
        _, ax = plt.subplots(figsize=figsize)
    return ax


def plot_loss_curves(history: dict, ax=None, title: str = "Loss", smooth: int = 20):
    """Per-step training loss (faint, plus a running mean) and the periodic train/val estimates."""
    ax = _axes(ax)
    steps, losses = history.get("step", []), history.get("loss", [])
    if losses:
        ax.plot(steps, losses, color="tab:blue", alpha=0.25, linewidth=0.8, label="batch loss")
        if len(losses) >= smooth:
            kernel = torch.ones(smooth) / smooth
            running = torch.nn.functional.conv1d(torch.tensor(losses)[None, None], kernel[None, None])[0, 0]
            ax.plot(steps[smooth - 1:], running.tolist(), color="tab:blue", linewidth=1.2,
                    label=f"batch loss ({smooth}-step mean)")
    if history.get("eval_step"):
        ax.plot(history["eval_step"], history["train_loss"], "o-", color="tab:green", label="train (estimate)")
        ax.plot(history["eval_step"], history["val_loss"], "s-", color="tab:red", label="val (estimate)")
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy loss")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    return ax


def plot_attention(weights, tokens=None, ax=None, title: str = "Attention weights", cmap: str = "viridis",
                   colorbar: bool = True):
    """Heat map of a (T, T) weight matrix: row t is what position t attends to."""
    w = weights.detach().cpu() if isinstance(weights, torch.Tensor) else torch.as_tensor(weights)
    if w.dim() != 2:
        raise ValueError(f"plot_attention expects a (T, T) matrix, got shape {tuple(w.shape)}; pick one batch/head")
    ax = _axes(ax, figsize=(4.5, 4))
    image = ax.imshow(w, cmap=cmap, vmin=0.0)
    if tokens is not None:
        labels = [repr(t)[1:-1] if isinstance(t, str) else str(t) for t in tokens]
        ax.set_xticks(range(len(labels)), labels, fontsize=8)
        ax.set_yticks(range(len(labels)), labels, fontsize=8)
    ax.set_xlabel("key position (attended to)")
    ax.set_ylabel("query position")
    ax.set_title(title)
    if colorbar:
        ax.figure.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    return ax


def plot_lr_schedule(lrs: dict[str, list[float]], ax=None, title: str = "Learning-rate schedules"):
    """One line per named schedule: {name: [lr at step 0, 1, ...]}."""
    ax = _axes(ax)
    for name, values in lrs.items():
        ax.plot(range(len(values)), values, label=name)
    ax.set_xlabel("step")
    ax.set_ylabel("learning rate")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    return ax


def plot_positional_encoding(pe, ax=None, title: str = "Sinusoidal position encoding"):
    """Heat map of a (positions, C) encoding matrix."""
    pe = pe.detach().cpu() if isinstance(pe, torch.Tensor) else torch.as_tensor(pe)
    ax = _axes(ax, figsize=(7, 4))
    image = ax.imshow(pe, cmap="RdBu", aspect="auto", vmin=-1, vmax=1)
    ax.set_xlabel("channel")
    ax.set_ylabel("position")
    ax.set_title(title)
    ax.figure.colorbar(image, ax=ax)
    return ax
