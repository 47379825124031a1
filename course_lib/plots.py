"""Figures used throughout the course (matplotlib). Each function returns the Axes it drew on,
but :func:`tokens_html`, which returns the HTML of a text cut into tokens (chapter 9)."""
from __future__ import annotations

import html

import matplotlib.pyplot as plt
from matplotlib.lines import Line2D
import numpy as np
import torch

from .sizing import format_count


def _axes(ax, figsize=(6, 4)):
    if ax is None:
        _, ax = plt.subplots(figsize=figsize)
    return ax


def _finish(ax, xlabel: str, ylabel: str, title: str):
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    return ax


def running_mean(values, window: int) -> list[float]:
    """Mean of each run of ``window`` consecutive values: ``len(values) - window + 1`` of them."""
    return np.convolve(np.asarray(values, dtype=float), np.ones(window) / window,
                       mode="valid").tolist()


def plot_loss_curves(history: dict, ax=None, title: str = "Loss", smooth: int = 20):
    """Per-step training loss (faint, plus a running mean) and the periodic train/val estimates."""
    ax = _axes(ax)
    steps, losses = history.get("step", []), history.get("loss", [])
    if losses:
        ax.plot(steps, losses, color="tab:blue", alpha=0.25, linewidth=0.8, label="batch loss")
        if len(losses) >= smooth:
            ax.plot(steps[smooth - 1:], running_mean(losses, smooth), color="tab:blue",
                    linewidth=1.2, label=f"batch loss ({smooth}-step mean)")
    if history.get("eval_step"):
        ax.plot(history["eval_step"], history["train_loss"], "o-", color="tab:green",
                label="train (estimate)")
        ax.plot(history["eval_step"], history["val_loss"], "s-", color="tab:red",
                label="val (estimate)")
    return _finish(ax, "step", "cross-entropy loss", title)


def plot_attention(weights, tokens=None, ax=None, title: str = "Attention weights",
                   cmap: str = "viridis", colorbar: bool = True):
    """Heat map of a (T, T) weight matrix: row t is what position t attends to."""
    w = weights.detach().cpu().numpy() if isinstance(weights, torch.Tensor) else np.asarray(weights)
    if w.ndim != 2:
        raise ValueError(f"plot_attention expects a (T, T) matrix, got shape {tuple(w.shape)}; "
                         "pick one batch/head")
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


def plot_attention_heads(weights, tokens=None, titles=None, ncols: int = 4, cell_size: float = 3.2,
                         suptitle: str | None = None, cmap: str = "viridis"):
    """A grid of attention heat maps, one per head: ``weights`` is (nh, T, T) (e.g. one batch
    element of a layer's (B, nh, T, T) weights) or a list of (T, T) matrices. All panels share
    one colour scale from 0 to 1 (a weight is a probability). Returns the array of Axes."""
    if isinstance(weights, torch.Tensor):
        if weights.dim() != 3:
            raise ValueError("plot_attention_heads expects (nh, T, T) weights, got shape "
                             f"{tuple(weights.shape)}; pick one batch element first, e.g. "
                             "weights[0]")
        mats = [w.detach().cpu().float().numpy() for w in weights]
    else:
        mats = [(w.detach().cpu() if isinstance(w, torch.Tensor)
                 else torch.as_tensor(w)).float().numpy()
                for w in weights]
    if not mats:
        raise ValueError("plot_attention_heads needs at least one weight matrix")
    titles = list(titles) if titles is not None else [f"head {h}" for h in range(len(mats))]
    if len(titles) != len(mats):
        raise ValueError(f"{len(titles)} titles for {len(mats)} heads")
    ncols = max(1, min(ncols, len(mats)))
    nrows = (len(mats) + ncols - 1) // ncols
    fig, axes = plt.subplots(nrows, ncols, figsize=(cell_size * ncols, cell_size * nrows),
                             squeeze=False, layout="constrained")
    labels = None
    if tokens is not None:
        labels = [repr(t)[1:-1] if isinstance(t, str) else str(t) for t in tokens]
    image = None
    for i, ax in enumerate(axes.flat):
        if i >= len(mats):
            ax.axis("off")
            continue
        image = ax.imshow(mats[i], cmap=cmap, vmin=0.0, vmax=1.0)
        ax.set_title(titles[i], fontsize=10)
        if labels is not None:
            ax.set_xticks(range(len(labels)), labels, fontsize=7)
            ax.set_yticks(range(len(labels)), labels, fontsize=7)
        else:
            ax.set_xticks([])
            ax.set_yticks([])
    for ax in axes[-1]:
        ax.set_xlabel("key (attended to)", fontsize=8)
    for ax in axes[:, 0]:
        ax.set_ylabel("query", fontsize=8)
    if suptitle:
        fig.suptitle(suptitle)
    fig.colorbar(image, ax=axes.ravel().tolist(), shrink=0.6)
    return axes


def plot_lr_schedule(lrs: dict[str, list[float]], ax=None, title: str = "Learning-rate schedules"):
    """One line per named schedule: {name: [lr at step 0, 1, ...]}."""
    ax = _axes(ax)
    for name, values in lrs.items():
        ax.plot(range(len(values)), values, label=name)
    return _finish(ax, "step", "learning rate", title)


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


def plot_loss_comparison(histories: dict[str, dict], ax=None, title: str = "Training loss",
                         smooth: int = 20):
    """Several runs on one plot: per run, the per-step batch loss (faint) and its running mean over
    ``smooth`` steps, in one colour per run. ``histories``: {label: Trainer history}."""
    ax = _axes(ax)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, (label, history) in enumerate(histories.items()):
        color = colors[i % len(colors)]
        steps, losses = history.get("step", []), history.get("loss", [])
        ax.plot(steps, losses, color=color, alpha=0.2, linewidth=0.8)
        if len(losses) >= smooth:
            ax.plot(steps[smooth - 1:], running_mean(losses, smooth), color=color, linewidth=1.5,
                    label=f"{label} ({smooth}-step mean)")
        else:
            ax.plot(steps, losses, color=color, linewidth=1.5, label=label)
    return _finish(ax, "step", "cross-entropy loss", title)


def plot_gradient_norms(norms: dict[str, list[float]], ax=None,
                        title: str = "Gradient norm per layer",
                        xlabel: str = "layer (1 = nearest the input)", log: bool = True):
    """One line per named run: {label: [norm of layer 1, layer 2, ...]}, on a log y axis by default
    (vanishing gradients span many orders of magnitude)."""
    ax = _axes(ax)
    for label, values in norms.items():
        ax.plot(range(1, len(values) + 1), values, "o-", label=label)
    if log:
        ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("gradient norm" + (" (log scale)" if log else ""))
    ax.set_title(title)
    ax.grid(alpha=0.3, which="both" if log else "major")
    ax.legend()
    return ax


def plot_parameter_shares(breakdowns: dict[str, dict[str, int]], ax=None,
                          title: str = "Where the parameters live"):
    """Stacked bars, one per named model, of each part's share of the parameters (in %), with
    the total written above each bar. ``breakdowns``: {label:
    course_lib.sizing.parameter_breakdown(config)}."""
    ax = _axes(ax, figsize=(8, 4.5))
    labels = list(breakdowns)
    parts = [p for p in next(iter(breakdowns.values()))
             if any(b.get(p, 0) for b in breakdowns.values())]
    bottoms = [0.0] * len(labels)
    for part in parts:
        shares = [100.0 * breakdowns[m].get(part, 0) / sum(breakdowns[m].values()) for m in labels]
        ax.bar(labels, shares, bottom=bottoms, label=part)
        bottoms = [b + s for b, s in zip(bottoms, shares)]
    for i, m in enumerate(labels):
        ax.text(i, 101, format_count(sum(breakdowns[m].values())), ha="center", va="bottom",
                fontsize=8)
    ax.set_ylim(0, 112)
    ax.set_ylabel("share of all parameters (%)")
    ax.set_title(title)
    handles, names = ax.get_legend_handles_labels()  # legend top-down in the order the bars stack
    ax.legend(handles[::-1], names[::-1], loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8)
    return ax


def plot_token_distributions(dists: dict, labels, ax=None, title: str = "Next-token distributions",
                             ylabel: str = "probability"):
    """Grouped bars: one group per token (``labels``, length V), one bar per named
    distribution in ``dists`` ({name: (V,) probabilities}), e.g. one per temperature."""
    labels = [repr(t)[1:-1] if isinstance(t, str) else str(t) for t in labels]
    rows = {name: (p.detach().cpu().tolist() if isinstance(p, torch.Tensor) else list(p)) for name,
            p in dists.items()}
    for name, values in rows.items():
        if len(values) != len(labels):
            raise ValueError(f"distribution {name!r} has {len(values)} entries but there are "
                             f"{len(labels)} labels")
    ax = _axes(ax, figsize=(8, 3.5))
    n = max(1, len(rows))
    width = 0.8 / n
    for i, (name, values) in enumerate(rows.items()):
        ax.bar([j + (i - (n - 1) / 2) * width for j in range(len(labels))], values, width=width,
               label=str(name))
    ax.set_xticks(range(len(labels)), labels)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3, axis="y")
    ax.legend()
    return ax


def plot_eval_losses(runs: dict[str, list[dict]], ax=None, title: str = "Validation loss",
                     key: str = "val_loss", baseline: float | None = None,
                     baseline_label: str = "baseline", run_labels: list[str] | None = None):
    """Many runs of a few variants on one plot: ``runs`` is {variant: [Trainer history, ...]}
    (e.g. one history per seed). Each run is a line of ``history[key]`` against
    ``history["eval_step"]``, in one colour per variant, with one legend entry per variant.
    ``baseline``: a dashed horizontal line to compare with (e.g. the unigram loss).
    ``run_labels``: a name for the j-th run of every variant (e.g. its seed); run j then gets the
    j-th marker, and a second legend, in grey, names the markers."""
    ax = _axes(ax)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    markers = "os^vDPX*"  # run j's marker when the runs are labelled
    marker = lambda j: markers[j % len(markers)] if run_labels else "o"  # noqa: E731
    for i, (variant, histories) in enumerate(runs.items()):
        for j, history in enumerate(histories):
            ax.plot(history["eval_step"], history[key], linestyle="-", marker=marker(j),
                    color=colors[i % len(colors)], markersize=4 if run_labels else 3, linewidth=1.2,
                    alpha=0.8, label=variant if j == 0 else None)
    if baseline is not None:
        ax.axhline(baseline, color="gray", linestyle="--", linewidth=1,
                   label=f"{baseline_label} {baseline:.4f}")
    _finish(ax, "step", "validation loss" if key == "val_loss" else key, title)
    if run_labels:
        variants_legend = ax.get_legend()
        handles = [Line2D([], [], color="gray", marker=marker(j), markersize=4, linestyle="-",
                          label=label)
                   for j, label in enumerate(run_labels)]
        ax.legend(handles=handles, loc="lower left")
        ax.add_artist(variants_legend)  # a second ax.legend() replaces the first: keep it
    return ax


# --- tokens (chapter 9) ------------------------------------------------------------------------

TOKEN_PALETTE = ["#fde2e4", "#cde7f0", "#e2f0cb", "#fff1c1", "#e4d8f5", "#ffd8be", "#d0f4de",
                 "#f1e3d3"]


def tokens_html(tokenizer, text: str) -> str:
    """HTML that shows how ``tokenizer`` cuts ``text``: one coloured span per token (for notebooks:
    ``IPython.display.HTML(tokens_html(tok, text))``). A token that holds part of a character's
    bytes shows as U+FFFD; hover over a span to see its id."""
    spans = []
    for k, i in enumerate(tokenizer.encode(text)):
        piece = html.escape(tokenizer.decode([i])).replace("\n", "\u21b5<br>")
        spans.append(
            f'<span title="{i}" '
            f'style="background:{TOKEN_PALETTE[k % len(TOKEN_PALETTE)]};'
            f'border-radius:3px;padding:1px 0">{piece}</span>'
        )
    return (
        '<div style="font-family:monospace;white-space:pre-wrap;line-height:1.8">'
        + "".join(spans)
        + "</div>"
    )
