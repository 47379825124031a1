"""Sampling from a trained model: greedy, temperature, top-k, top-p, with the context
cropped to block_size, and an optional KV cache (chapter 8).

Shapes: B batch, T time, V vocabulary size.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from .attention import KVCache


def check_sampling_args(temperature: float = 1.0, top_k: int | None = None, top_p: float | None = None) -> None:
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0 (0 means greedy), got {temperature}")
    if top_k is not None and (int(top_k) != top_k or top_k < 1):
        raise ValueError(f"top_k must be an integer >= 1 (or None for no cut-off), got {top_k}")
    if top_p is not None and not 0.0 < top_p <= 1.0:
        raise ValueError(f"top_p must be in (0, 1] (1 keeps every token), got {top_p}")


def top_k_filter(logits: torch.Tensor, k: int) -> torch.Tensor:
    """(..., V): keep the k largest logits, set the rest to -inf."""
    k = min(k, logits.shape[-1])
    kth = torch.topk(logits, k, dim=-1).values[..., -1:]
    return logits.masked_fill(logits < kth, float("-inf"))


def top_p_filter(logits: torch.Tensor, p: float) -> torch.Tensor:
    """(..., V): keep the smallest set of most likely tokens whose probabilities sum to at
    least p (the nucleus), set the rest to -inf. The most likely token is always kept."""
    sorted_logits, order = torch.sort(logits, descending=True, dim=-1)
    cumulative = F.softmax(sorted_logits, dim=-1).cumsum(dim=-1)
    # Drop a token when the tokens before it already reach p.
    drop_sorted = (cumulative - F.softmax(sorted_logits, dim=-1)) >= p
    drop = drop_sorted.scatter(-1, order, drop_sorted)
    return logits.masked_fill(drop, float("-inf"))


def sample_next(logits: torch.Tensor, temperature: float = 1.0, top_k: int | None = None,
                top_p: float | None = None, generator: torch.Generator | None = None) -> torch.Tensor:
    """(B, V) logits of the last position -> (B, 1) next token ids."""
    if temperature == 0:
        return logits.argmax(dim=-1, keepdim=True)  # greedy: the limit of temperature -> 0
    logits = logits / temperature
    if top_k is not None:
        logits = top_k_filter(logits, top_k)
    if top_p is not None and top_p < 1.0:
        logits = top_p_filter(logits, top_p)
    probs = F.softmax(logits, dim=-1)
    return torch.multinomial(probs, num_samples=1, generator=generator)


@torch.no_grad()
def generate(model, idx: torch.Tensor, max_new_tokens: int, temperature: float = 1.0, top_k: int | None = None,
             top_p: float | None = None, generator: torch.Generator | None = None,
             use_cache: bool = False) -> torch.Tensor:
    """Extend ``idx`` (B, T) by ``max_new_tokens`` sampled tokens; returns (B, T + max_new_tokens).

    The model only ever sees the last ``block_size`` tokens. With ``use_cache`` the keys and
    values of earlier positions are kept, so each step runs the model on one new token
    instead of the whole context; the tokens are the same as without it. Once the text
    is longer than block_size every position shifts, so the cache is refilled from the
    cropped context each step (no saving there: learned positions are absolute).
    """
    check_sampling_args(temperature, top_k, top_p)
    if idx.dim() != 2 or idx.shape[1] == 0:
        raise ValueError(f"idx must have shape (B, T) with T >= 1, got {tuple(idx.shape)}; "
                         "start from at least one token, e.g. a newline")
    was_training = model.training
    model.eval()
    block_size = model.config.block_size
    cache = None
    for _ in range(max_new_tokens):
        context = idx[:, -block_size:]  # crop: position embeddings exist for block_size positions only
        if not use_cache:
            logits, _ = model(context)
        else:
            full = cache is not None and cache.length + 1 > block_size
            if cache is None or full or idx.shape[1] > block_size:
                cache = KVCache(model.config.n_layer, block_size)
                logits, _ = model(context, cache=cache)  # prefill
            else:
                logits, _ = model(idx[:, -1:], cache=cache)  # just the newest token
        next_id = sample_next(logits[:, -1, :], temperature, top_k, top_p, generator)  # (B, 1)
        idx = torch.cat([idx, next_id], dim=1)
    model.train(was_training)
    return idx


def generate_text(model, tokenizer, prompt: str = "\n", max_new_tokens: int = 200, seed: int | None = None,
                  device=None, **kwargs) -> str:
    """Encode ``prompt``, sample, decode: the prompt followed by the continuation."""
    device = device or next(model.parameters()).device
    if not prompt:
        raise ValueError("prompt is empty: give at least one character, e.g. '\\n'")
    idx = torch.tensor([tokenizer.encode(prompt)], dtype=torch.long, device=device)
    generator = None
    if seed is not None:
        generator = torch.Generator(device=device).manual_seed(seed)
    out = generate(model, idx, max_new_tokens, generator=generator, **kwargs)
    return tokenizer.decode(out[0].tolist())


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def compare_cache_speed(model, idx: torch.Tensor, max_new_tokens: int, repeats: int = 1, seed: int = 1337,
                        **sampling) -> dict:
    """Time :func:`generate` with and without the KV cache on the same prompt and seed.

    The two ways run alternately ``repeats`` times each (so a busy machine slows both
    alike) and the fastest run of each counts. Returns a dict with ``no_cache`` and
    ``cache`` (new tokens per second), ``speedup`` (their ratio) and ``same_tokens``
    (whether both produced exactly the same tokens).
    """
    import time

    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    device = idx.device
    best = {False: float("inf"), True: float("inf")}
    outputs = {}
    for _ in range(repeats):
        for use_cache in (False, True):
            generator = torch.Generator(device=device).manual_seed(seed)
            _synchronize(device)
            start = time.perf_counter()
            outputs[use_cache] = generate(model, idx, max_new_tokens, generator=generator, use_cache=use_cache,
                                          **sampling)
            _synchronize(device)
            best[use_cache] = min(best[use_cache], time.perf_counter() - start)
    no_cache, cache = max_new_tokens / best[False], max_new_tokens / best[True]
    return {"no_cache": no_cache, "cache": cache, "speedup": cache / no_cache,
            "same_tokens": bool(torch.equal(outputs[False], outputs[True]))}
