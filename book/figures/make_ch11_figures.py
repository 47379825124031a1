"""Draw chapter 11's figure: the encoder-decoder Transformer, as book/figures/ch11_encoder_decoder.svg.

Run from the repository root: ``python book/figures/make_ch11_figures.py``. The figure has a
transparent background, boxes filled with light colours and dark text, and mid-grey arrows, so
it reads in the light and the dark theme of the website alike.
"""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch  # noqa: E402

HERE = Path(__file__).resolve().parent
GREY = "#8a8a8a"  # readable on white and on near-black
INK = "#1a1a1a"  # text inside the light boxes
COLOURS = {"attn": "#f6c89f", "cross": "#f4a6a6", "ff": "#a8d5ba", "norm": "#f3e79b", "embed": "#bcd4f0",
           "out": "#d3c0eb"}


def box(ax, x, y, w, h, text, kind, fontsize=9):
    ax.add_patch(FancyBboxPatch((x - w / 2, y - h / 2), w, h, boxstyle="round,pad=0.02,rounding_size=0.08",
                                facecolor=COLOURS[kind], edgecolor=GREY, linewidth=1.0))
    ax.text(x, y, text, ha="center", va="center", fontsize=fontsize, color=INK)


def arrow(ax, start, end, rad=0.0, style="-|>"):
    ax.add_patch(FancyArrowPatch(start, end, arrowstyle=style, mutation_scale=10, color=GREY, linewidth=1.2,
                                 connectionstyle=f"arc3,rad={rad}", shrinkA=0, shrinkB=0))


def label(ax, x, y, text, fontsize=9, **kw):
    ax.text(x, y, text, color=GREY, fontsize=fontsize, **kw)


def encoder_decoder(path: Path) -> Path:
    plt.rcParams["svg.hashsalt"] = "ch11"  # stable ids: the same SVG on every run
    fig, ax = plt.subplots(figsize=(7.2, 7.6))
    ax.set_xlim(0, 10)
    ax.set_ylim(0, 11)
    ax.axis("off")
    w, h = 3.2, 0.5
    ex, dx = 2.6, 7.4  # centres of the encoder and decoder columns

    # inputs
    label(ax, ex, 0.25, 'source ids (B, S)\n"March 3rd, 2021"', ha="center", va="center")
    label(ax, dx, 0.25, "decoder input (B, T)\n<s> 2 0 2 1 - 0 3 ...", ha="center", va="center")
    box(ax, ex, 1.2, w, h, r"embed $\times\sqrt{C}$ + sin/cos positions", "embed", 8)
    box(ax, dx, 1.2, w, h, r"embed $\times\sqrt{C}$ + sin/cos positions", "embed", 8)
    arrow(ax, (ex, 0.6), (ex, 0.95))
    arrow(ax, (dx, 0.6), (dx, 0.95))

    # encoder layer (x N)
    ax.add_patch(FancyBboxPatch((ex - 1.8, 1.8), 3.6, 3.4, boxstyle="round,pad=0.02,rounding_size=0.15",
                                facecolor="none", edgecolor=GREY, linewidth=1.0, linestyle="--"))
    label(ax, ex - 1.75, 5.0, r"encoder layer $\times N$", va="center")
    box(ax, ex, 2.4, w, h, "self-attention (all positions,\nsource padding masked)", "attn", 8)
    box(ax, ex, 3.1, w, 0.35, "add & norm", "norm", 8)
    box(ax, ex, 3.8, w, h, "feed-forward  C -> 4C -> C", "ff", 8)
    box(ax, ex, 4.5, w, 0.35, "add & norm", "norm", 8)
    arrow(ax, (ex, 1.45), (ex, 2.15))
    arrow(ax, (ex, 2.65), (ex, 2.92))
    arrow(ax, (ex, 3.28), (ex, 3.55))
    arrow(ax, (ex, 4.05), (ex, 4.32))
    box(ax, ex, 5.9, w, 0.35, "final LayerNorm", "norm", 8)
    arrow(ax, (ex, 4.68), (ex, 5.72))
    label(ax, ex, 6.45, "memory (B, S, C)", ha="center", va="center")

    # decoder layer (x N)
    ax.add_patch(FancyBboxPatch((dx - 1.8, 1.8), 3.6, 5.0, boxstyle="round,pad=0.02,rounding_size=0.15",
                                facecolor="none", edgecolor=GREY, linewidth=1.0, linestyle="--"))
    label(ax, dx + 1.75, 6.6, r"decoder layer $\times N$", ha="right", va="center")
    box(ax, dx, 2.4, w, h, "causal self-attention\n(no peeking ahead)", "attn", 8)
    box(ax, dx, 3.1, w, 0.35, "add & norm", "norm", 8)
    box(ax, dx, 3.9, w, h, "cross-attention: queries here,\nkeys & values from memory", "cross", 8)
    box(ax, dx, 4.6, w, 0.35, "add & norm", "norm", 8)
    box(ax, dx, 5.35, w, h, "feed-forward  C -> 4C -> C", "ff", 8)
    box(ax, dx, 6.05, w, 0.35, "add & norm", "norm", 8)
    arrow(ax, (dx, 1.45), (dx, 2.15))
    arrow(ax, (dx, 2.65), (dx, 2.92))
    arrow(ax, (dx, 3.28), (dx, 3.65))
    arrow(ax, (dx, 4.15), (dx, 4.42))
    arrow(ax, (dx, 4.78), (dx, 5.1))
    arrow(ax, (dx, 5.6), (dx, 5.87))
    # memory -> cross-attention
    arrow(ax, (ex + 0.9, 6.3), (dx - 1.5, 3.95), rad=-0.25)
    label(ax, 4.7, 4.5, "keys,\nvalues", ha="left", va="center", fontsize=8.5)

    box(ax, dx, 7.5, w, 0.35, "final LayerNorm", "norm", 8)
    box(ax, dx, 8.3, w, h, "linear (tied to embedding)\n-> logits (B, T, V)", "out", 8)
    box(ax, dx, 9.1, w, 0.35, "softmax", "out", 8)
    arrow(ax, (dx, 6.23), (dx, 7.32))
    arrow(ax, (dx, 7.68), (dx, 8.05))
    arrow(ax, (dx, 8.55), (dx, 8.92))
    label(ax, dx, 9.75, "next-character probabilities\n-> 2021-03-03</s>", ha="center", va="center")
    label(ax, ex, 9.0, "Residual connections wrap\nevery sub-layer: add & norm\nis LN(x + sublayer(x))",
          ha="center", va="center", fontsize=8.5)
    fig.savefig(path, format=path.suffix[1:], transparent=True, bbox_inches="tight",
                metadata={"Date": None} if path.suffix == ".svg" else None)
    plt.close(fig)
    return path


if __name__ == "__main__":
    print(encoder_decoder(HERE / "ch11_encoder_decoder.svg"))
