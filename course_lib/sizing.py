"""How big a GPT is, from its config alone: parameters (exact, and part by part), FLOPs per
token, training memory, and tables of them (chapter 6). Nothing here builds a model.

Shapes: C = n_embd, T = block_size, V = vocab_size, L = n_layer.
"""
from __future__ import annotations

import torch

from .utils import check_fits_in_memory

# ``GPTConfig`` in the annotations is course_lib.model's, not imported: model imports this module
# (GPT.check_fits), and the annotations are never evaluated (``from __future__ import
# annotations``).


def parameter_breakdown(config: GPTConfig) -> dict[str, int]:
    """Parameters of each part of a :class:`GPT`, from the config alone.

    Per block: attention 4C^2 (q, k, v and output projections), MLP 8C^2
    (C x 4C and 4C x C), so 12C^2, plus 3C + C + 4C + C biases when ``bias``;
    two LayerNorms of C gains (+ C biases). Embeddings: V*C tokens and T*C
    positions. The LM head adds V*C unless it is tied to the token embedding.

    Chapter 14's options: with n_kv key/value heads of hs channels, k and v are C x (n_kv*hs)
    each instead of C x C; an MLP of hidden size H is 2CH (standard) or 3CH (SwiGLU), + biases;
    an RMSNorm has C gains and no bias (its entry is then called "RMSNorms"); RoPE has no
    position table (0) and nothing to learn. A ``head_dim`` of its own makes q C x (nh*hs) and
    the output projection (nh*hs) x C; QK-norm adds two gains of hs per layer (in "attention");
    RoPE scaling and a sliding window add no parameters.

    Chapter 20: with ``moe_experts`` E, "MLP" holds all E experts (and the shared one) and
    "router" the L*C*E weights of the routers. Chapter 22: ``mtp_heads`` D add "MTP heads", D
    matrices of C x C (+ C biases); they share the LM head.
    """
    V, T, C, L = config.vocab_size, config.block_size, config.n_embd, config.n_layer
    b = 1 if config.bias else 0
    q = config.n_head * config.head_size  # channels of q: C unless head_dim is set apart
    kv = config.kv_heads * config.head_size  # channels of k and of v: C for multi-head attention
    H = config.ffn_size  # 4C by default
    rms = config.norm == "rmsnorm"
    norm = C if rms else C + b * C  # a LayerNorm: gain (+ bias); an RMSNorm: gain
    attention = (C * q + b * q) + 2 * (C * kv + b * kv) + (q * C + b * C)  # q, k and v, output
    attention += 2 * config.head_size if config.qk_norm else 0  # the RMSNorm gains of q and k
    if config.mlp == "swiglu":
        mlp = 2 * (C * H + b * H) + (H * C + b * C)  # gate and up, down
    else:
        mlp = (C * H + b * H) + (H * C + b * C)
    final_norm = norm if config.norm_position == "pre" else 0
    moe = {}
    if getattr(config, "moe_experts", None):
        moe = {"router": L * C * config.moe_experts}
        mlp *= config.moe_experts + config.moe_shared_expert
    if getattr(config, "mtp_heads", None):
        moe["MTP heads"] = config.mtp_heads * (C * C + b * C)
    return moe | {
        "token embedding": V * C,
        "position embedding": 0 if config.rope_theta is not None else T * C,
        "attention": L * attention,
        "MLP": L * mlp,
        ("RMSNorms" if rms else "LayerNorms"): L * 2 * norm + final_norm,
        "LM head": 0 if config.tie_weights else V * C,
    }


def count_parameters(config: GPTConfig) -> int:
    """The exact parameter count of ``GPT(config)``, equal to ``sum(p.numel())``."""
    return sum(parameter_breakdown(config).values())


def active_parameters(config: GPTConfig) -> int:
    """The parameters one token goes through: all of them for a dense GPT; for a mixture of experts
    (chapter 20) the k chosen experts of each layer instead of all E (the shared one always)."""
    total = count_parameters(config)
    if not getattr(config, "moe_experts", None):
        return total
    per_expert = parameter_breakdown(config)["MLP"] // (
        config.n_layer * (config.moe_experts + config.moe_shared_expert)
    )
    return total - config.n_layer * (config.moe_experts - config.moe_top_k) * per_expert


def flops_per_token(config: GPTConfig, training: bool = True) -> int:
    """Approximate floating-point operations per token at full context.

    A matmul with N weights costs 2N FLOPs per token forward (a multiply and an
    add); the attention scores and the weighted sum of values add 2 * 2 * T * C
    per layer. Backward costs about twice forward, so training is about 3x:
    6N + 12 L T C (the estimate of the PaLM paper, used by nanoGPT). N leaves out
    the position embedding, which is a lookup, not a matmul; the token
    embedding counts once, as the LM head's matmul. Every option of chapter 14 is
    covered: grouped-query attention and SwiGLU change N (every query head still
    scores all T keys, so 12 L T C stays), RoPE's rotations and RMSNorm are a few
    element-wise operations per channel, left out like LayerNorm's. With a ``head_dim`` of its
    own the attention term is 12 L T nh hs; with a ``sliding_window`` shorter than T each query
    scores only the window, so T becomes the window there. A mixture of experts counts its active
    parameters (:func:`active_parameters`): the router, and k experts per layer, not E.
    """
    N = active_parameters(config) - parameter_breakdown(config)["position embedding"]
    if not config.tie_weights:
        N -= config.vocab_size * config.n_embd  # the input embedding is a lookup too
    # keys each query scores
    span = min(config.block_size, config.sliding_window or config.block_size)
    forward = 2 * N + 4 * config.n_layer * span * config.n_head * config.head_size
    return 3 * forward if training else forward


# Peak dense bf16/fp16 tensor-core FLOP/s of common GPUs, from NVIDIA's data sheets (no sparsity).
# MFU is quoted against this peak whatever the dtype trained in, as nanoGPT and the PaLM paper do.
GPU_PEAK_FLOPS = {
    "H100 PCIe": 756e12, "H100": 989e12, "H200": 989e12, "A100": 312e12, "L4": 121e12,
    "A10": 125e12, "V100": 125e12, "T4": 65e12,
}


def gpu_peak_flops(device) -> float | None:
    """The peak FLOP/s of the CUDA GPU ``device``, or None when it is not a CUDA GPU of the
    table."""
    device = torch.device(device)
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    return next((peak for key, peak in GPU_PEAK_FLOPS.items() if key in name), None)


def model_flops_utilization(flops_per_token: int | None, tokens_per_s: float, device,
                            n_devices: int = 1) -> float | None:
    """Model FLOPs utilisation: the FLOP/s that training at ``tokens_per_s`` needs
    (``flops_per_token`` training FLOPs each, e.g. :func:`flops_per_token` of a GPT config or
    ``GPT.flops_per_token()``) over the peak of ``n_devices`` GPUs like ``device``. None where the
    peak is unknown (a CPU, an unlisted GPU) or the model cannot count its FLOPs
    (``flops_per_token`` None)."""
    peak = gpu_peak_flops(device)
    if peak is None or flops_per_token is None:
        return None
    return flops_per_token * tokens_per_s / (peak * n_devices)


def kv_cache_bytes(config: GPTConfig, batch_size: int = 1, context: int | None = None,
                   bytes_per_value: int = 4) -> int:
    """Bytes of a full KV cache: keys and values (2) of every layer (L), sequence (B), position
    (T, default block_size), key/value head (n_kv) and channel (hs): 2 L B T n_kv hs values of
    ``bytes_per_value`` bytes (4 for float32, 2 for bf16/fp16). Grouped-query attention divides
    it by n_head / n_kv_head; multi-query attention (n_kv_head = 1) by n_head. With a
    ``sliding_window`` the cache keeps only the last window - 1 positions (the next query brings
    its own key): T is at most that, whatever the context."""
    T = config.block_size if context is None else context
    if config.sliding_window is not None:
        T = min(T, config.sliding_window - 1)
    return (
        2 * config.n_layer * batch_size * T * config.kv_heads * config.head_size * bytes_per_value
    )


def training_memory_bytes(config: GPTConfig) -> dict[str, int]:
    """fp32 memory for weights, gradients and AdamW's two moments (activations not included)."""
    n = count_parameters(config)
    return {"weights": 4 * n, "gradients": 4 * n, "AdamW state": 8 * n, "total": 16 * n}


def memory_parts(config: GPTConfig, batch_size: int | None = None) -> list[tuple[int, str, str]]:
    """What a GPT of ``config`` holds in memory, part by part: ``(numbers, what, the settings that
    lower it)``. Every size that allocates counts (:func:`parameter_breakdown`: the vocabulary,
    the position table, the attention's heads and ``head_dim``, the MLPs' ``ffn_hidden`` times
    ``moe_experts``), and RoPE's angles (``block_size`` x hs). With ``batch_size``, a training
    step on ``batch_size`` sequences of ``block_size`` tokens: every weight's gradient, and what
    backward keeps of each token (the inputs of every layer's matmuls, the hidden sizes of the
    experts it goes through, the logits and their softmax). A lower estimate: attention scores
    and the optimizer's state are left out, so what it refuses surely does not fit."""
    c, parts = config, parameter_breakdown(config)
    hs, q, kv = c.head_size, c.n_head * c.head_size, c.kv_heads * c.head_size
    experts = f", {c.moe_experts:,} experts" if c.moe_experts else ""
    out = [(parts["token embedding"] + parts["LM head"], "", "smaller sizes"),
           (parts["position embedding"] + (c.block_size * hs if c.rope_theta is not None else 0),
            f"its positions (block_size {c.block_size:,})", "a smaller block_size"),
           (parts["attention"], f"its attention (n_head {c.n_head:,} of head size {hs:,})",
            "a smaller n_embd, n_head or head_dim"),
           (parts["MLP"] + parts.get("router", 0),
            f"its MLPs (hidden size {c.ffn_size:,}{experts})",
            "a smaller ffn_hidden, n_embd or moe_experts")]
    if batch_size is None:
        return out
    # the experts a token goes through
    chosen = c.moe_top_k + c.moe_shared_expert if c.moe_experts else 1
    hidden = (3 if c.mlp == "swiglu" else 2) * c.ffn_size * chosen
    per_token = c.n_layer * (4 * c.n_embd + 2 * q + 2 * kv + hidden) + 2 * c.vocab_size
    return [(2 * n, what, fix) for n, what, fix in out] + [  # each weight and its gradient
        (batch_size * c.block_size * per_token,
         f"a training step's activations (batch_size {batch_size:,} x block_size {c.block_size:,})",
         "a smaller batch_size (grad_accum_steps=N with a batch_size N times smaller takes the "
         "same step)")]


def check_gpt_fits(config: GPTConfig, batch_size: int | None = None) -> None:
    """A :class:`course_lib.utils.TooLargeError`, before anything is allocated, when a GPT of
    ``config`` (with ``batch_size``: and a training step, see :func:`memory_parts`) needs more
    than this machine's memory; it names the largest part and the settings that lower it. The
    model alone is checked first: when it does not fit, no batch size would help."""
    for batch in (None,) if batch_size is None else (None, batch_size):
        parts = memory_parts(config, batch)
        _, what, fix = max(parts, key=lambda part: part[0])
        check_fits_in_memory(sum(n for n, _, _ in parts),
                             f"a GPT of vocab_size {config.vocab_size:,}, n_embd {config.n_embd:,} "
                             f"and n_layer {config.n_layer:,}" + (f", most of it in {what}," if what
                                                                  else ""), f"choose {fix}")


def format_count(n: int | float) -> str:
    """A parameter (or FLOP, or byte) count in short form: 804096 -> '804.1K', 124439808 ->
    '124.4M', 174604259328 -> '174.6B'; from 1e18 on, scientific notation ('3.14e+23')."""
    if abs(n) >= 1e18:
        return f"{n:.2e}"
    for value, suffix in ((1e15, "P"), (1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if abs(n) >= value:
            return f"{n / value:.1f}{suffix}"
    return f"{n:g}" if isinstance(n, float) else str(n)


def format_table(header: list[str], rows: list[list], markdown: bool = False) -> str:
    """Rows of values as an aligned plain-text table (first column left-aligned, the others
    right-aligned; ints get thousands separators), or as a Markdown table."""
    def cell(v):
        return f"{v:,}" if isinstance(v, int) and not isinstance(v, bool) else str(v)

    table = [[str(h) for h in header]] + [[cell(v) for v in row] for row in rows]
    if any(len(row) != len(header) for row in table):
        raise ValueError(f"every row needs {len(header)} values, one per column of {header}")
    if markdown:
        lines = ["| " + " | ".join(table[0]) + " |",
                 "|" + "|".join([":---"] + ["---:"] * (len(header) - 1)) + "|"]
        lines += ["| " + " | ".join(row) + " |" for row in table[1:]]
        return "\n".join(lines)
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    lines = []
    for k, row in enumerate(table):
        lines.append("  ".join(v.ljust(w) if i == 0 else v.rjust(w) for i,
                               (v, w) in enumerate(zip(row, widths))))
        if k == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(line.rstrip() for line in lines)


def parameter_table(configs: dict[str, GPTConfig], markdown: bool = False) -> str:
    """One row per named config: layers L, heads, C, T, V, the 12·L·C² weights of the blocks'
    matrices, the embeddings (V·C + T·C), the exact total (:func:`count_parameters`) and that
    total in short form. Computed from the configs alone: nothing is instantiated."""
    header = ["model", "L", "heads", "C", "T", "V", "12·L·C²", "embeddings", "total", "≈"]
    rows = []
    for name, c in configs.items():
        total = count_parameters(c)
        parts = parameter_breakdown(c)
        embeddings = parts["token embedding"] + parts["position embedding"]
        rows.append([name, c.n_layer, c.n_head, c.n_embd, c.block_size, c.vocab_size,
                     12 * c.n_layer * c.n_embd**2, embeddings, total, format_count(total)])
    return format_table(header, rows, markdown)
