"""Draw the course's architecture diagrams as SVG files next to this script.

    python3 book/figures/make_figures.py          (or: make figures)

Every figure is drawn with matplotlib and written deterministically (fixed hash salt, no date, text
kept as text), so running the script again reproduces the committed files byte for byte with the same
matplotlib version; tests/test_figures.py checks that. Each drawing sits on a white rounded panel on a
transparent page, so it reads the same in the book's light and dark themes.
"""
from __future__ import annotations

import sys
from pathlib import Path

import matplotlib

matplotlib.use("svg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch, Rectangle  # noqa: E402

HERE = Path(__file__).resolve().parent

# mid-tone colours that print and read well on white
BLUE, ORANGE, GREEN, RED, PURPLE, GREY, TEAL = (
    "#4C78A8", "#F58518", "#54A24B", "#E45756", "#B279A2", "#9D9D9D", "#72B7B2")
LIGHT = {BLUE: "#D6E2F0", ORANGE: "#FDE3C8", GREEN: "#D9EDD5", RED: "#F8D5D4",
         PURPLE: "#EEDFEA", GREY: "#E6E6E6", TEAL: "#DCEFEE"}
INK = "#222222"

RC = {
    "svg.hashsalt": "build-a-gpt-figures",  # stable ids inside the SVG
    "svg.fonttype": "none",  # text stays text: small files, no font outlines
    "font.family": "sans-serif",
    "font.size": 11,
}
METADATA = {"Date": None, "Creator": f"book/figures/make_figures.py (matplotlib {matplotlib.__version__})"}

FIGURES = {}


def figure(name):
    """Register a drawing function under its file name (without .svg)."""
    def register(draw):
        FIGURES[name] = draw
        return draw
    return register


def canvas(width, height):
    """A figure of width x height inches with axes in data units = inches and a white rounded panel."""
    fig = plt.figure(figsize=(width, height))
    fig.patch.set_alpha(0.0)
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(0, width)
    ax.set_ylim(0, height)
    ax.set_aspect("equal")
    ax.axis("off")
    ax.add_patch(FancyBboxPatch((0.06, 0.06), width - 0.12, height - 0.12,
                                boxstyle="round,pad=0,rounding_size=0.18",
                                facecolor="white", edgecolor="#BBBBBB", linewidth=1.0, zorder=0))
    return fig, ax


def box(ax, x, y, w, h, text, color=BLUE, fontsize=10.5, fill=None, bold=False):
    """A rounded box centred at (x, y)."""
    ax.add_patch(FancyBboxPatch((x - w / 2, y - h / 2), w, h, boxstyle="round,pad=0,rounding_size=0.08",
                                facecolor=fill or LIGHT.get(color, "white"), edgecolor=color,
                                linewidth=1.5, zorder=2))
    ax.text(x, y, text, ha="center", va="center", fontsize=fontsize, color=INK, zorder=3,
            fontweight="bold" if bold else "normal")


def arrow(ax, x0, y0, x1, y1, color=INK, style="-|>", lw=1.3, rad=0.0):
    ax.add_patch(FancyArrowPatch((x0, y0), (x1, y1), arrowstyle=style, mutation_scale=12,
                                 color=color, linewidth=lw, zorder=1,
                                 connectionstyle=f"arc3,rad={rad}"))


def label(ax, x, y, text, fontsize=9.5, color="#444444", ha="center", va="center", **kw):
    ax.text(x, y, text, ha=ha, va=va, fontsize=fontsize, color=color, zorder=3, **kw)


def grid(ax, x, y, rows, cols, cell, colors, edge="white", values=None, fontsize=8):
    """A matrix drawn as rows x cols squares; (x, y) is its top-left corner; colors[r][c] a colour or None."""
    for r in range(rows):
        for c in range(cols):
            color = colors[r][c]
            ax.add_patch(Rectangle((x + c * cell, y - (r + 1) * cell), cell, cell,
                                   facecolor=color or "white", edgecolor=edge if color else "#CCCCCC",
                                   linewidth=0.8, zorder=2))
            if values is not None and values[r][c] is not None:
                ax.text(x + (c + 0.5) * cell, y - (r + 0.5) * cell, values[r][c], ha="center", va="center",
                        fontsize=fontsize, color=INK, zorder=3)


# --------------------------------------------------------------------------------------------------
@figure("gpt_data_path")
def gpt_data_path():
    fig, ax = canvas(7.6, 8.4)
    cx = 3.5
    box(ax, cx, 7.8, 3.4, 0.5, "token ids  idx  (B, T)", GREY)
    box(ax, 1.9, 6.85, 2.7, 0.62, "token embedding\nwte: (V, C) lookup", BLUE, fontsize=9.5)
    box(ax, 5.1, 6.85, 2.7, 0.62, "position embedding\nwpe: (block_size, C)", PURPLE, fontsize=9.5)
    arrow(ax, cx - 0.6, 7.55, 1.9, 7.17)
    label(ax, 6.85, 7.55, "positions 0 .. T-1", fontsize=8.5)
    arrow(ax, 6.3, 7.4, 5.4, 7.17)
    box(ax, cx, 5.95, 0.45, 0.45, "+", GREY, fontsize=13)
    arrow(ax, 1.9, 6.54, cx - 0.25, 6.05)
    arrow(ax, 5.1, 6.54, cx + 0.25, 6.05)
    label(ax, cx + 1.35, 5.95, "x  (B, T, C)", fontsize=9.5, ha="left")
    # the stack of blocks
    ax.add_patch(FancyBboxPatch((1.0, 2.22), 5.0, 3.23, boxstyle="round,pad=0,rounding_size=0.12",
                                facecolor="none", edgecolor=ORANGE, linewidth=1.5, linestyle="--", zorder=1))
    label(ax, 6.1, 4.1, "N blocks\n(n_layer)", fontsize=9.5, color=ORANGE, ha="left")
    arrow(ax, cx, 5.72, cx, 5.18)
    box(ax, cx, 4.9, 3.6, 0.5, "LayerNorm  ->  causal self-attention", ORANGE, fontsize=9.5)
    box(ax, cx, 4.05, 0.4, 0.4, "+", GREY, fontsize=12)
    box(ax, cx, 3.25, 3.6, 0.5, "LayerNorm  ->  MLP (C -> 4C -> C)", ORANGE, fontsize=9.5)
    arrow(ax, cx, 4.65, cx, 4.25)
    arrow(ax, cx, 3.85, cx, 3.5)
    # residual paths
    ax.plot([cx, 1.35, 1.35], [5.4, 5.4, 4.05], color=GREY, linewidth=1.2, zorder=1)
    arrow(ax, 1.35, 4.05, cx - 0.2, 4.05, color=GREY, lw=1.2)
    label(ax, 1.45, 4.3, "residual", fontsize=8, color="#777777", ha="left")
    box(ax, cx, 2.5, 0.4, 0.4, "+", GREY, fontsize=12)
    arrow(ax, cx, 3.0, cx, 2.7)
    ax.plot([cx, 1.35, 1.35], [3.72, 3.72, 2.5], color=GREY, linewidth=1.2, zorder=1)
    arrow(ax, 1.35, 2.5, cx - 0.2, 2.5, color=GREY, lw=1.2)
    arrow(ax, cx, 2.3, cx, 1.98)
    box(ax, cx, 1.75, 3.0, 0.45, "final LayerNorm  ln_f", TEAL, fontsize=9.5)
    arrow(ax, cx, 1.52, cx, 1.25)
    box(ax, cx, 1.0, 3.6, 0.48, "LM head: (C, V) linear -> logits (B, T, V)", GREEN, fontsize=9.5)
    label(ax, cx, 0.45, "softmax over V: P(next token);  with targets: cross-entropy loss",
          fontsize=8.5)
    label(ax, 6.1, 1.0, "weights tied\nwith wte", fontsize=8, color=BLUE, ha="left")
    return fig


# --------------------------------------------------------------------------------------------------
@figure("attention_head")
def attention_head():
    fig, ax = canvas(10.6, 5.4)
    T = 5
    cell = 0.24
    label(ax, 0.7, 4.2, "x  (T, C)", fontsize=10)
    grid(ax, 0.3, 3.95, T, 3, cell, [[GREY] * 3 for _ in range(T)])
    ys = {"q": 4.3, "k": 2.85, "v": 1.4}
    cols = {"q": BLUE, "k": ORANGE, "v": GREEN}
    h = T * cell * 0.9
    for name, y in ys.items():
        arrow(ax, 1.1, 3.35, 1.75, y)
        box(ax, 2.3, y, 1.05, 0.42, f"W_{name}: (C, hs)", cols[name], fontsize=8.5)
        arrow(ax, 2.85, y, 3.2, y)
        grid(ax, 3.25, y + h / 2, T, 2, cell * 0.9, [[cols[name]] * 2 for _ in range(T)])
        label(ax, 3.9, y + h / 2 - 0.1, f"{name}\n(T, hs)", fontsize=8.5, ha="left", va="top")
    # scores = q k^T / sqrt(hs)
    sy = 3.6
    arrow(ax, 3.8, 4.3, 4.75, sy + 0.1)
    arrow(ax, 3.8, 2.85, 4.75, sy - 0.1)
    box(ax, 5.3, sy, 1.05, 0.55, "q @ k.T\n/ sqrt(hs)", PURPLE, fontsize=8.5)
    arrow(ax, 5.85, sy, 6.1, sy)
    grid(ax, 6.15, sy + T * cell / 2, T, T, cell, [[PURPLE] * T for _ in range(T)])
    label(ax, 6.15 + T * cell / 2, sy + T * cell / 2 + 0.18, "scores (T, T)", fontsize=8.5)
    # mask
    arrow(ax, 6.15 + T * cell + 0.05, sy, 7.75, sy)
    label(ax, 7.6, sy + 0.2, "mask", fontsize=8.5)
    masked = [[PURPLE if c <= r else RED for c in range(T)] for r in range(T)]
    vals = [[None if c <= r else "-inf" for c in range(T)] for r in range(T)]
    grid(ax, 7.8, sy + T * cell / 2, T, T, cell, masked, values=vals, fontsize=5)
    label(ax, 7.8 + T * cell / 2, sy + T * cell / 2 + 0.18, "future = -inf", fontsize=8.5)
    # softmax
    wy = 1.4
    arrow(ax, 7.8 + T * cell / 2, sy - T * cell / 2 - 0.05, 7.8 + T * cell / 2, wy + T * cell / 2 + 0.05)
    label(ax, 7.8 + T * cell + 0.1, (sy + wy) / 2, "softmax\n(each row)", fontsize=8.5, ha="left")
    shade = ["#C9B3D9", "#A98BC4", "#8E6BB0", "#7A569E"]
    wei = [[(shade[min(r, 3)] if c <= r else "#FFFFFF") for c in range(T)] for r in range(T)]
    wv = [[(f"{1 / (r + 1):.2f}".lstrip("0") if c <= r else "0") for c in range(T)] for r in range(T)]
    grid(ax, 7.8, wy + T * cell / 2, T, T, cell, wei, values=wv, fontsize=5.5, edge="#DDDDDD")
    label(ax, 7.8 + T * cell / 2, wy - T * cell / 2 - 0.2, "weights (T, T)\n(e.g. uniform)", fontsize=8.5)
    # weighted sum with v
    arrow(ax, 4.6, 1.4, 7.7, 1.4, color=GREEN)
    label(ax, 6.2, 1.58, "v", fontsize=9, color=GREEN)
    arrow(ax, 7.8 + T * cell + 0.05, wy, 9.5, wy)
    label(ax, 9.1, wy - 0.22, "weights\n@ v", fontsize=8.5)
    grid(ax, 9.55, wy + h / 2, T, 2, cell * 0.9, [[TEAL] * 2 for _ in range(T)])
    label(ax, 9.77, wy - h / 2 - 0.15, "out (T, hs)", fontsize=8.5)
    label(ax, 5.3, 0.3, "Row t of the output mixes the values of positions 0..t, weighted by how well "
          "query t matches each key.", fontsize=9)
    return fig


# --------------------------------------------------------------------------------------------------
@figure("heads_split_merge")
def heads_split_merge():
    fig, ax = canvas(10.0, 4.2)
    heads = [BLUE, ORANGE, GREEN, PURPLE]
    cell = 0.22
    T, C = 4, 8

    def strip(x, y, colors_per_col, rows=T):
        grid(ax, x, y, rows, len(colors_per_col), cell, [list(colors_per_col) for _ in range(rows)])

    label(ax, 1.15, 3.7, "q, k, v: each (B, T, C)", fontsize=9.5)
    strip(0.3, 3.45, [c for c in heads for _ in range(2)])
    label(ax, 1.15, 2.3, "C = n_head x hs\n(here 4 x 2)", fontsize=8.5)
    arrow(ax, 2.2, 3.0, 2.9, 3.0)
    label(ax, 2.55, 3.25, ".view", fontsize=8.5)
    label(ax, 3.85, 3.7, "(B, T, n_head, hs)", fontsize=9)
    for h, color in enumerate(heads):
        strip(3.0 + h * 0.5, 3.45, [color] * 2)
    arrow(ax, 5.05, 3.0, 5.7, 3.0)
    label(ax, 5.38, 2.75, ".transpose\n(1, 2)", fontsize=8)
    label(ax, 7.15, 3.7, "(B, n_head, T, hs): one attention per head", fontsize=9)
    for h, color in enumerate(heads):
        strip(5.9 + h * 0.95, 3.45, [color] * 2)
        label(ax, 5.9 + h * 0.95 + cell, 2.4, f"head {h}", fontsize=8)
    ax.add_patch(FancyBboxPatch((5.8, 2.2), 3.8, 1.4, boxstyle="round,pad=0,rounding_size=0.08",
                                facecolor="none", edgecolor=GREY, linestyle="--", linewidth=1.0))
    label(ax, 7.7, 2.0, "softmax(q k^T / sqrt(hs) + mask) v, all heads in one batched matmul", fontsize=8.5)
    arrow(ax, 7.7, 1.8, 7.7, 1.35)
    label(ax, 5.6, 1.05, ".transpose(1, 2).contiguous().view(B, T, C)", fontsize=8.5, ha="right")
    strip(6.8, 1.3, [c for c in heads for _ in range(2)], rows=T)
    label(ax, 7.7, 0.22, "heads side by side again (B, T, C)", fontsize=8.5)
    arrow(ax, 8.65, 0.85, 9.1, 0.85)
    box(ax, 9.45, 0.85, 0.6, 0.45, "proj", TEAL, fontsize=9)
    label(ax, 9.45, 1.35, "(C, C)", fontsize=8)
    return fig


# --------------------------------------------------------------------------------------------------
@figure("tril_averaging")
def tril_averaging():
    fig, ax = canvas(9.4, 3.5)
    T, C, cell = 4, 2, 0.48
    shade = ["#4C78A8", "#7FA1C6", "#A3BCD8", "#C3D3E6"]
    vals = [[(f"{1 / (r + 1):.2f}" if c <= r else "0") for c in range(T)] for r in range(T)]
    cols = [[(shade[r] if c <= r else None) for c in range(T)] for r in range(T)]
    grid(ax, 0.5, 2.85, T, T, cell, cols, values=vals, fontsize=9, edge="#FFFFFF")
    label(ax, 0.5 + T * cell / 2, 3.1, "wei (T, T)", fontsize=10)
    label(ax, 0.5 + T * cell / 2, 0.75, "tril(ones), rows\nnormalised to sum 1", fontsize=8.5)
    label(ax, 2.75, 1.9, "@", fontsize=16)
    xs = [["x0", "x0"], ["x1", "x1"], ["x2", "x2"], ["x3", "x3"]]
    xcol = [[GREEN, "#86BE7F"] for _ in range(T)]
    grid(ax, 3.1, 2.85, T, C, cell, xcol, values=[[f"{r}a", f"{r}b"] for r in range(T)], fontsize=8.5)
    label(ax, 3.1 + C * cell / 2, 3.1, "x (T, C)", fontsize=10)
    label(ax, 4.45, 1.9, "=", fontsize=16)
    outs = ["x0", "(x0+x1)/2", "(x0+x1+x2)/3", "(x0+..+x3)/4"]
    for r, text in enumerate(outs):
        ax.add_patch(Rectangle((4.85, 2.85 - (r + 1) * cell), 1.7, cell, facecolor=LIGHT[ORANGE],
                               edgecolor="white", linewidth=0.8, zorder=2))
        label(ax, 5.7, 2.85 - (r + 0.5) * cell, text, fontsize=8.5, color=INK)
    label(ax, 5.7, 3.1, "out (T, C)", fontsize=10)
    label(ax, 7.9, 2.3, "row t = mean of\nthe rows 0..t of x", fontsize=9)
    label(ax, 7.9, 1.35, "the same wei from\nsoftmax(masked zeros):\n0 -> 1/(t+1),\n-inf -> 0",
          fontsize=8.5, color="#555555")
    label(ax, 4.7, 0.3, "Batched: (T, T) @ (B, T, C) broadcasts over B and gives (B, T, C).", fontsize=9)
    return fig


# --------------------------------------------------------------------------------------------------
@figure("block_pre_post_ln")
def block_pre_post_ln():
    fig, ax = canvas(8.2, 6.4)

    def column(x, title, steps, skips, note):
        label(ax, x, 6.0, title, fontsize=11, color=INK, fontweight="bold")
        y = 5.5
        box(ax, x, y, 1.4, 0.4, "x", GREY)
        bottoms, centres = [y - 0.2], [y]
        for kind, text in steps:
            if kind == "add":
                y -= 0.62
                arrow(ax, x, bottoms[-1], x, y + 0.2)
                box(ax, x, y, 0.4, 0.4, "+", GREY, fontsize=12)
                bottoms.append(y - 0.2)
            else:
                y -= 0.68
                arrow(ax, x, bottoms[-1], x, y + 0.22)
                box(ax, x, y, 1.8, 0.44, text, {"ln": TEAL, "attn": ORANGE, "mlp": GREEN}[kind],
                    fontsize=9.5)
                bottoms.append(y - 0.22)
            centres.append(y)
        for src, add in skips:  # residual: from just below element src to the "+" at index add
            ys = bottoms[src] - 0.12
            xl = x - 1.15
            ax.plot([x, xl, xl], [ys, ys, centres[add]], color=RED, linewidth=1.5, zorder=1)
            arrow(ax, xl, centres[add], x - 0.2, centres[add], color=RED, lw=1.5)
        label(ax, x, 0.5, note, fontsize=8.5)

    pre = [("ln", "LayerNorm"), ("attn", "self-attention"), ("add", ""),
           ("ln", "LayerNorm"), ("mlp", "MLP"), ("add", "")]
    post = [("attn", "self-attention"), ("add", ""), ("ln", "LayerNorm"),
            ("mlp", "MLP"), ("add", ""), ("ln", "LayerNorm")]
    column(2.3, "pre-LN (GPT-2, this course)", pre, [(0, 3), (3, 6)],
           "x + f(LN(x)): the residual path from\ninput to output passes no LayerNorm")
    column(6.0, "post-LN (2017 paper)", post, [(0, 2), (3, 5)],
           "LN(x + f(x)): every sub-layer ends by\nnormalising the residual stream")
    label(ax, 4.15, 1.05, "red: residual (skip) connections", fontsize=8.5, color=RED)
    return fig


# --------------------------------------------------------------------------------------------------
@figure("teacher_forcing")
def teacher_forcing():
    fig, ax = canvas(9.0, 4.1)
    chunk = "First Cit"
    cell = 0.62
    x0 = 1.6
    label(ax, 0.85, 3.35, "chunk", fontsize=9.5, ha="center")
    for i, ch in enumerate(chunk):
        color = GREY
        ax.add_patch(Rectangle((x0 + i * cell, 3.05), cell, cell * 0.9, facecolor=LIGHT[color],
                               edgecolor="white", linewidth=1.2, zorder=2))
        label(ax, x0 + (i + 0.5) * cell, 3.05 + cell * 0.45, repr(ch)[1:-1] if ch != " " else "␣",
              fontsize=11, color=INK)
    label(ax, 0.85, 2.35, "input x", fontsize=9.5, color=BLUE)
    label(ax, 0.85, 1.55, "target y", fontsize=9.5, color=GREEN)
    for i in range(len(chunk) - 1):
        ax.add_patch(Rectangle((x0 + i * cell, 2.1), cell, cell * 0.8, facecolor=LIGHT[BLUE],
                               edgecolor="white", linewidth=1.2, zorder=2))
        label(ax, x0 + (i + 0.5) * cell, 2.1 + cell * 0.4, chunk[i] if chunk[i] != " " else "␣",
              fontsize=11, color=INK)
        ax.add_patch(Rectangle((x0 + i * cell, 1.3), cell, cell * 0.8, facecolor=LIGHT[GREEN],
                               edgecolor="white", linewidth=1.2, zorder=2))
        label(ax, x0 + (i + 0.5) * cell, 1.3 + cell * 0.4, chunk[i + 1] if chunk[i + 1] != " " else "␣",
              fontsize=11, color=INK)
        arrow(ax, x0 + (i + 0.5) * cell, 2.08, x0 + (i + 0.5) * cell, 1.82, color="#777777", lw=1.0)
    T = len(chunk) - 1
    label(ax, x0 + T * cell + 0.25, 2.35, "= chunk[:-1]", fontsize=9, ha="left", color=BLUE)
    label(ax, x0 + T * cell + 0.25, 1.55, "= chunk[1:]", fontsize=9, ha="left", color=GREEN)
    # bracket for one example
    t = 3
    ax.add_patch(Rectangle((x0, 2.02), (t + 1) * cell, cell * 0.96, facecolor="none", edgecolor=ORANGE,
                           linewidth=2.0, zorder=3))
    label(ax, x0 + (t + 0.5) * cell, 0.95, f"position t = {t}: context 'Firs' -> target 't'",
          fontsize=9, color=ORANGE)
    label(ax, 4.5, 0.45, "One chunk of T + 1 tokens gives T training examples at once, "
          "each predicting the true next token.", fontsize=9)
    return fig


# --------------------------------------------------------------------------------------------------
@figure("kv_cache")
def kv_cache():
    fig, ax = canvas(9.6, 4.4)
    cell = 0.3
    t = 5  # tokens already processed
    ry = 1.25  # the row of the newest token
    ids = ["F", "i", "r", "s", "t", " "]
    for i, ch in enumerate(ids):
        new = i == t
        ax.add_patch(Rectangle((0.4 + i * 0.42, ry - 0.19), 0.38, 0.38, facecolor=LIGHT[ORANGE if new else GREY],
                               edgecolor=ORANGE if new else "white", linewidth=1.2, zorder=2))
        label(ax, 0.59 + i * 0.42, ry, ch if ch != " " else "␣", fontsize=10, color=INK)
    label(ax, 1.6, ry - 0.4, "tokens 0..t; only token t = 5 is new", fontsize=8.5)
    arrow(ax, 2.9, ry, 3.3, ry)
    box(ax, 3.95, ry, 1.15, 0.5, "k_t, v_t (and q_t)\nof the new token", ORANGE, fontsize=8)

    def stack(x, name, color):
        rows = [[GREY] * 3 for _ in range(t)] + [[color] * 3]
        top = ry - cell / 2 + (t + 1) * cell
        grid(ax, x, top, t + 1, 3, cell, rows)
        label(ax, x + 1.5 * cell, top + 0.18, name, fontsize=9.5)

    stack(4.9, "K cache (t+1, hs)", ORANGE)
    stack(6.5, "V cache (t+1, hs)", GREEN)
    arrow(ax, 4.55, ry, 4.88, ry, color=ORANGE)
    arrow(ax, 4.3, ry - 0.26, 6.48, ry - 0.1, color=GREEN, rad=0.35)
    label(ax, 5.7, 0.3, "grey rows: computed at earlier steps and reused; coloured row: appended now",
          fontsize=8.5)
    label(ax, 8.65, 2.3, "q_t (1, hs)\n@ K.T -> (1, t+1)\nsoftmax\n@ V -> (1, hs)", fontsize=9)
    label(ax, 1.8, 3.2, "Step t feeds only the newest token\nthrough the model. Without a cache it\n"
          "would recompute k and v for all\nt+1 tokens in every layer.", fontsize=8.5, color="#555555")
    return fig


# --------------------------------------------------------------------------------------------------
@figure("param_count")
def param_count():
    fig, ax = canvas(10.0, 6.0)
    u = 0.75  # inches for one C

    def mat(x, top, rows, cols, color, name, shape, count, inside=True):
        ax.add_patch(Rectangle((x, top - rows * u), cols * u, rows * u, facecolor=LIGHT[color], edgecolor=color,
                               linewidth=1.4, zorder=2))
        if inside:
            label(ax, x + cols * u / 2, top - rows * u / 2, name, fontsize=9, color=INK)
        else:
            label(ax, x + cols * u + 0.1, top - rows * u / 2, name, fontsize=9, color=INK, ha="left")
        label(ax, x + cols * u / 2, top - rows * u - 0.18, shape, fontsize=8.5)
        if count:
            label(ax, x + cols * u / 2, top - rows * u - 0.4, count, fontsize=8.5, color=color)

    label(ax, 5.0, 5.6, "One block: 4C^2 weights in attention + 8C^2 in the MLP = 12C^2 "
          "(plus biases and LayerNorms)", fontsize=10, color=INK)
    top = 5.1
    mat(0.4, top, 1, 3, ORANGE, "attn c_attn\nq, k, v", "(C, 3C)", "3C^2")
    mat(2.9, top, 1, 1, ORANGE, "attn\nc_proj", "(C, C)", "C^2")
    mat(3.9, top, 1, 4, GREEN, "MLP c_fc", "(C, 4C)", "4C^2")
    mat(7.15, top, 4, 1, GREEN, "MLP\nc_proj", "(4C, C)", "4C^2", inside=False)
    # embeddings, to scale for the CPU preset (V = 65, block_size = 64, C = 128)
    label(ax, 3.2, 3.1, "Once per model; to scale for V = 65, block_size = 64, C = 128:", fontsize=8.5)
    mat(0.6, 2.75, 65 / 128, 1, BLUE, "", "wte (V, C)", "V C")
    mat(2.4, 2.75, 64 / 128, 1, PURPLE, "", "wpe (block_size, C)", "block_size C")
    label(ax, 4.9, 2.45, "LM head (C, V): tied to wte,\nno new weights", fontsize=8.5, color=BLUE,
          ha="left")
    label(ax, 5.0, 0.45, "total  =  n_layer x 12C^2  +  V C  +  block_size C  +  (biases, LayerNorms)",
          fontsize=9.5, color=INK)
    return fig


# --------------------------------------------------------------------------------------------------
@figure("ch11_encoder_decoder")
def encoder_decoder():
    fig, ax = canvas(10.0, 10.0)
    w = 3.2
    ex, dx = 2.6, 7.4  # centres of the encoder and decoder columns
    attn, cross, ff, norm = ORANGE, RED, GREEN, TEAL

    def stack(x, bottom, layers, gap=0.28):
        """Boxes (height, text, colour) from the bottom up, each joined to the next by an arrow;
        returns the top of the last one."""
        for i, (h, text, color) in enumerate(layers):
            if i:
                arrow(ax, x, bottom, x, bottom + gap)
                bottom += gap
            box(ax, x, bottom + h / 2, w, h, text, color, fontsize=9.5)
            bottom += h
        return bottom

    def layer_frame(x, top, title, ha):
        ax.add_patch(FancyBboxPatch((x - 1.8, 1.85), 3.6, top - 1.85, boxstyle="round,pad=0,rounding_size=0.15",
                                    facecolor="none", edgecolor=GREY, linewidth=1.0, linestyle="--", zorder=1))
        label(ax, x - 1.75 if ha == "left" else x + 1.75, top - 0.2, title, ha=ha)

    embed = [(0.5, r"embed $\times\sqrt{C}$ + sin/cos positions", BLUE)]
    label(ax, ex, 0.45, 'source ids (B, S)\n"March 3rd, 2021"')
    label(ax, dx, 0.45, "decoder input (B, T)\n<s> 2 0 2 1 - 0 3 ...")
    for x in (ex, dx):
        arrow(ax, x, 0.75, x, 1.0)
        arrow(ax, x, stack(x, 1.0, embed), x, 2.15)

    # encoder layer (x N), its final LayerNorm and the memory it hands to the decoder
    top = stack(ex, 2.15, [(0.5, "self-attention (all positions,\nsource padding masked)", attn),
                           (0.35, "add & norm", norm), (0.5, "feed-forward  C -> 4C -> C", ff),
                           (0.35, "add & norm", norm)])
    layer_frame(ex, 5.25, r"encoder layer $\times N$", "left")
    arrow(ax, ex, top, ex, 5.7)
    arrow(ax, ex, stack(ex, 5.7, [(0.35, "final LayerNorm", norm)]), ex, 6.27)
    label(ax, ex, 6.45, "memory (B, S, C)")

    # decoder layer (x N), then the output head
    top = stack(dx, 2.15, [(0.5, "causal self-attention\n(no peeking ahead)", attn), (0.35, "add & norm", norm),
                           (0.5, "cross-attention: queries here,\nkeys & values from memory", cross),
                           (0.35, "add & norm", norm), (0.5, "feed-forward  C -> 4C -> C", ff),
                           (0.35, "add & norm", norm)])
    layer_frame(dx, 6.85, r"decoder layer $\times N$", "right")
    arrow(ax, dx, top, dx, 7.2)
    stack(dx, 7.2, [(0.35, "final LayerNorm", norm),
                    (0.5, "linear (tied to embedding)\n-> logits (B, T, V)", PURPLE), (0.35, "softmax", PURPLE)])
    label(ax, dx, 9.45, "next-character probabilities\n-> 2021-03-03</s>")

    arrow(ax, ex + 1.0, 6.35, dx - 1.6, 3.85, rad=-0.25)  # memory -> cross-attention
    label(ax, 4.75, 4.9, "keys,\nvalues", ha="left", fontsize=8.5)
    label(ax, ex, 8.3, "Residual connections wrap\nevery sub-layer: add & norm\nis LN(x + sublayer(x))",
          fontsize=8.5)
    return fig


# --------------------------------------------------------------------------------------------------
@figure("ch12_data_parallel")
def data_parallel():
    """DDP with W = 3 processes: each copy of the model gets its own micro-batch, computes its own
    gradient, the all-reduce leaves every process with the mean, and the same step keeps the copies equal."""
    fig, ax = canvas(10.0, 6.4)
    xs = (1.9, 5.0, 8.1)
    label(ax, 5.0, 6.0, "One step of data parallelism (DDP) with W = 3 processes, one per GPU",
          fontsize=10.5, color=INK)
    for r, x in enumerate(xs):
        box(ax, x, 5.3, 2.5, 0.5, f"micro-batch {r}  (B, T)", GREY, fontsize=9.5)
        arrow(ax, x, 5.05, x, 4.75)
        box(ax, x, 4.35, 2.5, 0.7, f"process {r}: its own copy\nof the model (same weights)", BLUE,
            fontsize=9.5)
        arrow(ax, x, 4.0, x, 3.7)
        box(ax, x, 3.35, 2.5, 0.6, f"forward + backward\n-> its gradient $g_{r}$", ORANGE, fontsize=9.5)
        arrow(ax, x, 3.05, x, 2.62)
        arrow(ax, x, 1.98, x, 1.6)
        box(ax, x, 1.25, 2.5, 0.6, "the same AdamW step\n-> the same new weights", GREEN, fontsize=9.5)
    ax.add_patch(FancyBboxPatch((0.55, 2.0), 8.9, 0.6, boxstyle="round,pad=0,rounding_size=0.08",
                                facecolor=LIGHT[RED], edgecolor=RED, linewidth=1.5, zorder=2))
    label(ax, 5.0, 2.3, r"all-reduce (mean): every process receives $\bar g = (g_0 + g_1 + g_2)\,/\,3$"
          ", during backward, bucket by bucket", fontsize=9.5, color=INK)
    label(ax, 5.0, 0.5, "The global batch is the W micro-batches: the mean gradient equals one process "
          "accumulating all of them.", fontsize=9, color="#444444")
    return fig


# --------------------------------------------------------------------------------------------------
@figure("ch13_gpt2_weight_map")
def gpt2_weight_map():
    """Hugging Face's GPT-2 state dict on the left, ours on the right: the same names inside a block,
    other prefixes, and the four Conv1D matrices transposed."""
    fig, ax = canvas(10.4, 6.6)
    left, right, w, h = 2.6, 7.8, 4.1, 0.36
    label(ax, left, 6.15, "Hugging Face GPT2LMHeadModel", fontsize=10.5, color=INK)
    label(ax, right, 6.15, "our GPT", fontsize=10.5, color=INK)
    rows = [("transformer.wte.weight  (V, C)", "wte.weight  (V, C)", False),
            ("transformer.wpe.weight  (T, C)", "wpe.weight  (T, C)", False),
            ("transformer.h.{i}.ln_1.weight, .bias  (C,)", "blocks.{i}.ln_1.weight, .bias  (C,)", False),
            ("transformer.h.{i}.attn.c_attn.weight  (C, 3C)", "blocks.{i}.attn.c_attn.weight  (3C, C)", True),
            ("transformer.h.{i}.attn.c_proj.weight  (C, C)", "blocks.{i}.attn.c_proj.weight  (C, C)", True),
            ("transformer.h.{i}.ln_2.weight, .bias  (C,)", "blocks.{i}.ln_2.weight, .bias  (C,)", False),
            ("transformer.h.{i}.mlp.c_fc.weight  (C, 4C)", "blocks.{i}.mlp.c_fc.weight  (4C, C)", True),
            ("transformer.h.{i}.mlp.c_proj.weight  (4C, C)", "blocks.{i}.mlp.c_proj.weight  (C, 4C)", True),
            ("transformer.ln_f.weight, .bias", "ln_f.weight, .bias", False),
            ("lm_head.weight = wte.weight", "lm_head.weight = wte.weight", False)]
    for k, (hf, ours, transposed) in enumerate(rows):
        y = 5.6 - 0.5 * k
        color = RED if transposed else BLUE
        box(ax, left, y, w, h, hf, color, fontsize=8.5)
        box(ax, right, y, w, h, ours, color, fontsize=8.5)
        arrow(ax, left + w / 2 + 0.05, y, right - w / 2 - 0.05, y, color=color)
        label(ax, 5.2, y + 0.13, ".t()" if transposed else "as it is", fontsize=8, color=color)
    label(ax, 5.2, 0.45, "Red: GPT-2's Conv1D stores (in, out) and computes x W + b; nn.Linear stores "
          "(out, in) and computes x W^T + b.\nThe biases of every linear layer (c_attn.bias, ...) "
          "copy as they are; the tied LM head needs nothing.", fontsize=8.5, color="#444444")
    return fig


# --------------------------------------------------------------------------------------------------
@figure("ch14_rope_clock")
def ch14_rope_clock():
    """RoPE's pairs as clock hands: a fast pair (theta_0 = 1 radian per position) and a slow pair
    (theta = 10000^(-30/32), about 1/5,623 radian per position), at positions 0 .. 4."""
    import math

    fig, ax = canvas(9.6, 4.6)
    radius = 1.35
    for cx, title, step, color, note in (
            (2.4, "fast pair i = 0: 1 radian per position", 1.0, ORANGE,
             "a full turn every 6.3 positions: tells\nneighbours apart, repeats itself"),
            (7.0, "slow pair i = 15 (hs = 32): 1/5,623 radian per position", 1 / 5623, BLUE,
             "position 4 has turned 0.04 degrees: barely moved;\nit tells far-apart positions apart")):
        cy = 2.45
        ax.add_patch(matplotlib.patches.Circle((cx, cy), radius, facecolor="none", edgecolor="#BBBBBB", lw=1.0))
        label(ax, cx, cy + radius + 0.35, title, fontsize=9.5, color=INK)
        for m in range(5):
            angle = m * step if step == 1.0 else m * step * 500  # the slow hands drawn 500x wider to be visible
            x, y = cx + radius * 0.92 * math.cos(angle), cy + radius * 0.92 * math.sin(angle)
            arrow(ax, cx, cy, x, y, color=color, lw=1.6 - 0.2 * m)
            label(ax, cx + (radius + 0.2) * math.cos(angle), cy + (radius + 0.2) * math.sin(angle), f"m={m}",
                  fontsize=8, color=color)
        label(ax, cx, 0.62, note, fontsize=8.5)
    label(ax, 4.8, 0.2, "pair i of a query at position m turns by m theta_i, of a key at n by n theta_i: "
          "their dot product depends on m - n only", fontsize=8.5, color="#444444")
    label(ax, 8.35, 1.25, "(slow hands drawn\n500x spread out)", fontsize=7.5, color="#777777")
    return fig


@figure("ch14_grouped_query")
def ch14_grouped_query():
    """Multi-head, grouped-query and multi-query attention: 8 query heads on 8, 2 or 1 key/value heads."""
    fig, ax = canvas(10.4, 4.2)
    for col, (title, n_kv) in enumerate((("multi-head: 8 kv heads", 8), ("grouped-query: 2 kv heads", 2),
                                         ("multi-query: 1 kv head", 1))):
        x0 = 0.45 + col * 3.4
        label(ax, x0 + 1.45, 3.85, title, fontsize=10, color=INK)
        qx = [x0 + 0.05 + i * 0.37 for i in range(8)]
        for i, x in enumerate(qx):
            box(ax, x + 0.15, 3.1, 0.3, 0.45, "q", ORANGE, fontsize=8)
        width = 2.9 / n_kv
        for j in range(n_kv):
            kx = x0 + 0.05 + j * width + width / 2
            box(ax, kx, 1.3, min(0.9 * width, 1.0), 0.5, "k v" if n_kv < 8 else "kv", GREEN, fontsize=8)
            group = 8 // n_kv
            for i in range(j * group, (j + 1) * group):
                arrow(ax, qx[i] + 0.15, 2.85, kx, 1.58, color=GREY, style="-", lw=1.0)
        cache = {8: "cache: 8 heads", 2: "cache: 2 heads (1/4)", 1: "cache: 1 head (1/8)"}[n_kv]
        label(ax, x0 + 1.45, 0.65, cache, fontsize=9)
    label(ax, 5.2, 0.28, "every query head still scores its own way; n_h / n_kv query heads share one key/value "
          "head, and the KV cache stores only the n_kv heads", fontsize=8.5, color="#444444")
    return fig


@figure("ch14_swiglu")
def ch14_swiglu():
    """The SwiGLU block next to GPT-2's MLP."""
    fig, ax = canvas(9.6, 4.8)
    # GPT-2's MLP
    label(ax, 1.9, 4.35, "GPT-2 MLP: 2 matrices", fontsize=10, color=INK)
    box(ax, 1.9, 0.75, 1.3, 0.45, "x (B, T, C)", GREY, fontsize=9)
    box(ax, 1.9, 1.7, 1.9, 0.5, "c_fc: C -> 4C", BLUE, fontsize=9)
    box(ax, 1.9, 2.6, 1.9, 0.5, "GELU", PURPLE, fontsize=9)
    box(ax, 1.9, 3.5, 1.9, 0.5, "c_proj: 4C -> C", BLUE, fontsize=9)
    for y0, y1 in ((0.98, 1.45), (1.95, 2.35), (2.85, 3.25)):
        arrow(ax, 1.9, y0, 1.9, y1)
    # SwiGLU
    label(ax, 6.4, 4.35, "SwiGLU: 3 matrices, H = 8C/3", fontsize=10, color=INK)
    box(ax, 6.4, 0.75, 1.3, 0.45, "x (B, T, C)", GREY, fontsize=9)
    box(ax, 5.1, 1.7, 2.0, 0.5, "c_gate: C -> H\n(gate_proj)", ORANGE, fontsize=8.5)
    box(ax, 7.7, 1.7, 2.0, 0.5, "c_fc: C -> H\n(up_proj)", BLUE, fontsize=8.5)
    box(ax, 5.1, 2.6, 1.5, 0.45, "SiLU", PURPLE, fontsize=9)
    box(ax, 6.4, 3.0, 0.55, 0.45, "×", RED, fontsize=12)
    box(ax, 6.4, 3.85, 2.2, 0.45, "c_proj: H -> C (down_proj)", BLUE, fontsize=8.5)
    arrow(ax, 6.2, 0.98, 5.2, 1.45)
    arrow(ax, 6.6, 0.98, 7.6, 1.45)
    arrow(ax, 5.1, 1.95, 5.1, 2.37)
    arrow(ax, 5.6, 2.75, 6.12, 2.98)
    arrow(ax, 7.7, 1.95, 6.68, 2.95)
    arrow(ax, 6.4, 3.23, 6.4, 3.62)
    label(ax, 8.35, 2.75, "element-wise product:\nthe gate decides how much\nof each hidden feature passes",
          fontsize=8, color="#444444")
    label(ax, 4.2, 0.25, "weights: 2 x 4C x C = 8C^2  vs  3 x (8C/3) x C = 8C^2", fontsize=8.5, color="#444444")
    return fig


@figure("ch15_lora_layer")
def lora_layer():
    """A LoRA layer: the frozen W (out, in) beside the thin trainable A (r, in) and B (out, r); the two
    paths add. Shapes for the chapter's c_attn (in = C = 128, out = 3C = 384) at rank r = 8."""
    fig, ax = canvas(8.6, 4.9)
    label(ax, 4.3, 4.5, "y = x W^T + b  +  (alpha / r) · (x A^T) B^T", fontsize=11, color=INK)
    box(ax, 1.2, 2.4, 1.5, 0.55, "x  (B, T, in)", GREY, fontsize=9.5)
    # the frozen path
    box(ax, 3.7, 3.45, 2.0, 1.35, "W  (out, in)\nfrozen\n384 x 128 = 49,152", BLUE, fontsize=9.5)
    label(ax, 3.7, 2.6, "pretrained: no gradient, no optimizer state", fontsize=8, color=BLUE)
    # the adapter path: A thin and wide, B tall and thin
    box(ax, 3.2, 1.25, 1.7, 0.38, "A  (r, in) = 8 x 128", ORANGE, fontsize=9)
    box(ax, 5.25, 1.25, 0.75, 1.1, "B\n(out, r)\n384 x 8", ORANGE, fontsize=9)
    label(ax, 3.2, 0.78, "Kaiming-uniform at start", fontsize=8, color=ORANGE)
    label(ax, 5.25, 0.5, "zero at start", fontsize=8, color=ORANGE)
    label(ax, 4.22, 1.52, "(B, T, r)", fontsize=8, color="#666666")
    arrow(ax, 1.95, 2.55, 2.7, 3.2)
    arrow(ax, 1.95, 2.25, 2.35, 1.35)
    arrow(ax, 4.05, 1.25, 4.85, 1.25)
    box(ax, 6.45, 1.25, 0.7, 0.42, "x alpha/r", ORANGE, fontsize=8.5)
    arrow(ax, 5.63, 1.25, 6.1, 1.25)
    box(ax, 7.35, 2.4, 0.45, 0.45, "+", GREY, fontsize=13)
    arrow(ax, 4.7, 3.45, 7.15, 2.55)
    arrow(ax, 6.8, 1.25, 7.25, 2.18)
    label(ax, 7.35, 3.0, "y (B, T, out)", fontsize=9)
    label(ax, 4.3, 0.22, "trained: r (in + out) = 8 x 512 = 4,096 numbers instead of 49,152;  "
          "merged after training: W + (alpha / r) B A", fontsize=8.5)
    return fig


# --------------------------------------------------------------------------------------------------
@figure("ch15_prompt_mask")
def prompt_mask():
    """The prompt mask: the ids of prompt + '=' + answer + newline, the inputs and the shifted targets,
    and the targets inside the prompt set to IGNORE_INDEX; the target at '=' (the answer's first
    character) is kept."""
    fig, ax = canvas(10.4, 3.6)
    text = "3.5.21=2021-05-03\n"
    n_prompt = len("3.5.21=")
    cell, x0 = 0.5, 1.55
    show = lambda c: "\\n" if c == "\n" else c
    label(ax, 0.8, 2.95, "ids", fontsize=9.5)
    label(ax, 0.8, 2.2, "input x", fontsize=9.5, color=BLUE)
    label(ax, 0.8, 1.45, "target y", fontsize=9.5, color=GREEN)
    for i, ch in enumerate(text):
        color = PURPLE if i < n_prompt else GREEN
        ax.add_patch(Rectangle((x0 + i * cell, 2.72), cell, 0.45, facecolor=LIGHT[color], edgecolor="white",
                               linewidth=1.2, zorder=2))
        label(ax, x0 + (i + 0.5) * cell, 2.95, show(ch), fontsize=10, color=INK)
    for i in range(len(text) - 1):
        ax.add_patch(Rectangle((x0 + i * cell, 1.97), cell, 0.45, facecolor=LIGHT[BLUE], edgecolor="white",
                               linewidth=1.2, zorder=2))
        label(ax, x0 + (i + 0.5) * cell, 2.2, show(text[i]), fontsize=10, color=INK)
        masked = i < n_prompt - 1
        ax.add_patch(Rectangle((x0 + i * cell, 1.22), cell, 0.45, facecolor=LIGHT[GREY] if masked else LIGHT[GREEN],
                               edgecolor="white", linewidth=1.2, zorder=2))
        label(ax, x0 + (i + 0.5) * cell, 1.45, "-100" if masked else show(text[i + 1]),
              fontsize=7.5 if masked else 10, color="#888888" if masked else INK)
    sep = n_prompt - 1
    ax.add_patch(Rectangle((x0 + sep * cell, 1.2), cell, 1.24, facecolor="none", edgecolor=ORANGE, linewidth=2.0,
                           zorder=3))
    label(ax, x0 + (sep + 0.5) * cell, 0.82, "at '=' the target is the answer's first character: kept",
          fontsize=8.5, color=ORANGE)
    label(ax, x0 + (n_prompt - 1) * cell / 2, 3.38, f"prompt + '=' ({n_prompt} ids)", fontsize=8.5, color=PURPLE)
    label(ax, x0 + (n_prompt + (len(text) - n_prompt) / 2) * cell, 3.38, "answer + end", fontsize=8.5, color=GREEN)
    label(ax, 5.2, 0.4, "targets 0 .. n_prompt - 2 lie inside the prompt: IGNORE_INDEX (-100), "
          "which F.cross_entropy skips", fontsize=8.5)
    return fig


@figure("ch18_dpo_grpo")
def dpo_grpo():
    """Where DPO and GRPO get their signal: DPO from pairs sampled once from the base model, GRPO from
    groups sampled from the current policy at every step, both rewarded by code."""
    fig, ax = canvas(10.6, 5.4)
    label(ax, 5.3, 5.05, "Learning from the model's own answers: DPO (pairs, sampled once) and GRPO "
          "(groups, sampled every step)", fontsize=10.5, color=INK)
    # DPO: top row
    label(ax, 0.55, 3.75, "DPO", fontsize=11, color=BLUE, fontweight="bold")
    box(ax, 1.75, 3.75, 1.5, 0.75, "prompt\n\"64+91=\"", GREY, fontsize=9)
    box(ax, 3.65, 3.75, 1.75, 0.95, "base model\nsamples G answers\n(once, at the start)", BLUE, fontsize=8.5)
    box(ax, 5.65, 3.75, 1.6, 0.95, "reward by code\n155 right: 1\n145 wrong: 0", ORANGE, fontsize=8.5)
    box(ax, 7.45, 3.75, 1.45, 0.95, "pair\nchosen 155\nrejected 145", GREEN, fontsize=8.5)
    box(ax, 9.35, 3.75, 1.85, 0.95, "-log sigmoid(beta x\nmargin of log-ratios\nto the reference)", PURPLE,
        fontsize=8.5)
    for x0, x1 in ((2.5, 2.77), (4.52, 4.85), (6.45, 6.72), (8.18, 8.42)):
        arrow(ax, x0, 3.75, x1, 3.75)
    label(ax, 9.35, 3.0, "policy and frozen reference\nscore both answers", fontsize=8)
    # GRPO: bottom row
    label(ax, 0.55, 1.55, "GRPO", fontsize=11, color=RED, fontweight="bold")
    box(ax, 1.75, 1.55, 1.5, 0.75, "prompt\n\"64+91=\"", GREY, fontsize=9)
    box(ax, 3.65, 1.55, 1.75, 0.95, "current policy\nsamples G answers\n(every step)", RED, fontsize=8.5)
    box(ax, 5.65, 1.55, 1.6, 0.95, "rewards by code\nr = 1 0 0 1 0 0 0 0", ORANGE, fontsize=8.5)
    box(ax, 7.45, 1.55, 1.45, 0.95, "advantages\n(r - mean)\n/ std of the group", GREEN, fontsize=8.5)
    box(ax, 9.35, 1.55, 1.85, 0.95, "clipped ratio\nobjective\n(+ beta KL to ref.)", PURPLE, fontsize=8.5)
    for x0, x1 in ((2.5, 2.77), (4.52, 4.85), (6.45, 6.72), (8.18, 8.42)):
        arrow(ax, x0, 1.55, x1, 1.55)
    arrow(ax, 9.35, 1.06, 3.65, 1.06, color=RED, rad=-0.12)
    label(ax, 6.5, 0.42, "one step, then the updated policy samples the next groups: the group is its own "
          "baseline (no value network)", fontsize=8.5, color=RED)
    return fig


@figure("ch20_moe_layer")
def moe_layer():
    """One token through a mixture-of-experts layer with E = 8 experts and top-2 routing: the router
    scores the experts, two run, their outputs are summed with the renormalised weights."""
    fig, ax = canvas(10.0, 5.6)
    label(ax, 5.0, 5.2, "A mixture-of-experts feed-forward: E = 8 experts, top-2 routing, one token",
          fontsize=10.5, color=INK)
    box(ax, 1.3, 3.0, 1.7, 0.6, "token x  (C,)", GREY, fontsize=9.5)
    box(ax, 1.3, 1.55, 1.7, 0.9, "router\nW_r (E, C)\nsoftmax, top-2", ORANGE, fontsize=9)
    arrow(ax, 1.3, 2.7, 1.3, 2.0)
    probs = (0.05, 0.46, 0.04, 0.09, 0.03, 0.27, 0.02, 0.04)
    chosen = (1, 5)
    for e, p in enumerate(probs):
        x = 2.9 + 0.7 * e
        on = e in chosen
        box(ax, x, 3.0, 0.55, 1.1, f"E{e}", GREEN if on else GREY, fontsize=9.5, bold=on)
        ax.add_patch(Rectangle((x - 0.2, 0.7), 0.4, 1.5 * p, facecolor=ORANGE if on else GREY,
                               edgecolor="none", zorder=2))
        label(ax, x, 0.55, f"{p:.2f}", fontsize=8, color=INK if on else "#777777")
    label(ax, 5.35, 1.95, "router probabilities p_e", fontsize=8.5)
    arrow(ax, 2.15, 3.0, 2.55, 3.0)
    arrow(ax, 2.15, 1.3, 2.6, 1.3, color=ORANGE)
    for e in chosen:
        x = 2.9 + 0.7 * e
        arrow(ax, x, 3.55, 9.0, 3.85, color=GREEN, rad=-0.12 if e == 1 else -0.25)
    box(ax, 9.05, 3.0, 1.4, 1.6, "y =\n0.63 E1(x)\n+ 0.37 E5(x)", GREEN, fontsize=9)
    label(ax, 5.35, 4.55, "only the 2 chosen experts run: 2 of 8 MLPs per token", fontsize=9, color=GREEN)
    label(ax, 9.05, 1.6, "weights renormalised:\n0.46 / 0.73, 0.27 / 0.73", fontsize=8.5)
    return fig


@figure("ch17_chat_turns")
def chat_turns():
    """One exchange as the chat model reads it: role tokens, the calculator call and its result,
    the end-of-turn token, and which tokens fine-tuning trains (the assistant-only mask)."""
    fig, ax = canvas(11.0, 4.6)
    label(ax, 5.5, 4.25, "A conversation is one sequence of tokens: the roles marked, the assistant's tokens trained",
          fontsize=10.5, color=INK)
    pieces = [("<|user|>", PURPLE, False), ("What is 12+7?", GREY, False), ("<|end|>", PURPLE, False),
              ("<|assistant|>", PURPLE, False), ("<|calc|>", ORANGE, True), ("12+7", GREEN, True),
              ("<|/calc|>", ORANGE, True), ("<|result|>", TEAL, False), ("19", TEAL, False),
              ("<|/result|>", TEAL, False), ("19", GREEN, True), ("<|end|>", GREEN, True)]
    widths = [0.8, 1.35, 0.68, 1.05, 0.72, 0.55, 0.78, 0.86, 0.4, 0.92, 0.4, 0.68]
    x = 0.35
    centres = []
    for (text, color, trained), w in zip(pieces, widths):
        box(ax, x + w / 2, 2.9, w - 0.06, 0.55, text, color, fontsize=8.5, bold=trained)
        box(ax, x + w / 2, 2.05, w - 0.06, 0.38, "yes" if trained else "no", GREEN if trained else GREY,
            fontsize=7.5)
        centres.append(x + w / 2)
        x += w
    label(ax, 0.3, 2.48, "trained (the loss mask)?", fontsize=8.5, ha="left")
    label(ax, (centres[0] + centres[2]) / 2, 3.45, "the user writes", fontsize=8.5, color=PURPLE)
    label(ax, (centres[4] + centres[6]) / 2, 3.45, "the model writes a call", fontsize=8.5, color=ORANGE)
    label(ax, (centres[7] + centres[9]) / 2, 3.45, "the calculator answers", fontsize=8.5, color=TEAL)
    label(ax, (centres[10] + centres[11]) / 2, 3.45, "the model answers", fontsize=8.5, color=GREEN)
    box(ax, (centres[6] + centres[7]) / 2, 0.8, 2.3, 0.6, "calculator (no eval)\n12+7 -> 19", TEAL, fontsize=8.5)
    arrow(ax, centres[6], 2.6, (centres[6] + centres[7]) / 2 - 0.5, 1.12, color=ORANGE, rad=0.2)
    arrow(ax, (centres[6] + centres[7]) / 2 + 0.5, 1.12, centres[8], 2.6, color=TEAL, rad=0.2)
    label(ax, 0.35, 1.25, "the engine writes <|assistant|> itself and stops\nat <|end|>: the model learns to stop, "
          "not to start", fontsize=8.5, ha="left")
    label(ax, 10.7, 1.25, "the result is read, never trained:\nthe tool writes it, not the model", fontsize=8.5,
          ha="right")
    return fig


def main(out_dir: Path = HERE) -> list[Path]:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    with plt.rc_context(RC):
        for name, draw in FIGURES.items():
            fig = draw()
            path = out_dir / f"{name}.svg"
            fig.savefig(path, format="svg", metadata=METADATA, transparent=True)
            plt.close(fig)
            written.append(path)
    return written


if __name__ == "__main__":
    for path in main(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE):
        print(path)
