"""Sampling from a trained model: greedy, temperature, top-k, top-p, with the context
cropped to block_size, and an optional KV cache (chapter 8); batches of prompts of different
lengths with left padding, an attention mask and per-row generators (chapter 10).

Shapes: B batch, T time, V vocabulary size.
"""
from __future__ import annotations

import math
import numbers
import time

import torch
import torch.nn.functional as F

from .attention import KVCache
from .data import pad_batch
from .utils import check_seed


# The most tokens one call generates: every token stays in memory (and the command line prints the
# text at the end), so a typo such as --tokens 100000000000 must not run for days.
MAX_NEW_TOKENS = 100_000


def check_sampling_args(temperature: float = 1.0, top_k: int | None = None,
                        top_p: float | None = None, max_new_tokens: int | None = None,
                        names: dict | None = None) -> None:
    """The one check of the sampling arguments (the API and the command line both call it):
    a clear ValueError for a value out of range, NaN or infinity included. ``names``: what to
    call each argument in the message (the command line's options, e.g. ``{"top_k":
    "--top-k"}``)."""
    def name(arg: str) -> str:
        return (names or {}).get(arg, arg)

    if not _is_number(temperature) or not (math.isfinite(temperature) and temperature >= 0):
        raise ValueError(f"{name('temperature')} must be >= 0 (0 means greedy) and finite, got "
                         f"{temperature!r}")
    if (top_k is not None
        and (not isinstance(top_k, numbers.Integral) or isinstance(top_k, bool) or top_k < 1)):
        raise ValueError(f"{name('top_k')} must be an integer >= 1 (or None for no cut-off), got "
                         f"{top_k!r}")
    if top_p is not None and not (_is_number(top_p) and 0.0 < top_p <= 1.0):
        raise ValueError(f"{name('top_p')} must be in (0, 1] (1 keeps every token), got {top_p!r}")
    if max_new_tokens is not None and (not isinstance(max_new_tokens, numbers.Integral)
                                       or isinstance(max_new_tokens, bool) or max_new_tokens < 0):
        raise ValueError(f"{name('max_new_tokens')} must be an integer >= 0 (how many tokens to "
                         f"add), got {max_new_tokens!r}")
    if max_new_tokens is not None and max_new_tokens > MAX_NEW_TOKENS:
        raise ValueError(f"{name('max_new_tokens')} must be at most {MAX_NEW_TOKENS:,} (every "
                         f"token is kept in memory until the end), got {max_new_tokens:,}: "
                         "generate a shorter text, or continue it in several calls")


def _is_number(x) -> bool:
    return isinstance(x, numbers.Real) and not isinstance(x, bool)


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
                top_p: float | None = None,
                generator: torch.Generator | None = None) -> torch.Tensor:
    """(B, V) logits of the last position -> (B, 1) next token ids."""
    if temperature == 0:
        return logits.argmax(dim=-1, keepdim=True)  # greedy: the limit of temperature -> 0
    logits = logits / temperature
    if top_k is not None:
        logits = top_k_filter(logits, top_k)
    if top_p is not None and top_p < 1.0:
        logits = top_p_filter(logits, top_p)
    probs = F.softmax(logits, dim=-1)
    if generator is not None and generator.device != probs.device:
        # A CPU generator (a run's sampling stream, stored in its checkpoint) draws on the CPU for a
        # model on a GPU: the same draws on any device, and a resumed run continues them bit for
        # bit.
        return sample_next(logits.cpu(), 1.0, None, None, generator).to(probs.device)
    try:
        return torch.multinomial(probs, num_samples=1, generator=generator)
    except RuntimeError:  # NaN or inf among the probabilities: say why, not where torch noticed
        if torch.isfinite(probs).all():
            raise
        raise ValueError("the model's next-token probabilities are not finite numbers (NaN or "
                         "inf): its weights are broken (a run that diverged?) or the temperature "
                         "is too close to 0; use temperature=0 for greedy decoding, or another "
                         "checkpoint") from None


@torch.no_grad()
def generate(model, idx: torch.Tensor, max_new_tokens: int, temperature: float = 1.0,
             top_k: int | None = None, top_p: float | None = None,
             generator: torch.Generator | None = None, use_cache: bool = False,
             **batch_options) -> torch.Tensor:
    """Extend ``idx`` (B, T) by ``max_new_tokens`` sampled tokens; returns (B, T + max_new_tokens).

    ``idx`` may also be a list of prompts of different lengths (lists of token ids): then
    this is :func:`generate_batch` (which takes ``generators``, ``end_id`` and ``pad_id``)
    and returns one list of tokens per prompt.

    The model only ever sees the last ``block_size`` tokens. With ``use_cache`` the keys and
    values of earlier positions are kept, so each step runs the model on one new token
    instead of the whole context; the tokens are the same as without it. Once the text
    is longer than block_size every position shifts, so the cache is refilled from the
    cropped context each step (no saving there: learned positions are absolute, and RoPE's
    cached keys keep the angles of positions that the cropped context renumbers).
    """
    if isinstance(idx, (list, tuple)):
        if generator is not None:
            raise ValueError("with a list of prompts give generators=[one torch.Generator per "
                             "prompt], not generator")
        return generate_batch(model, idx, max_new_tokens, temperature, top_k, top_p,
                              use_cache=use_cache, **batch_options)
    if batch_options:
        raise TypeError(f"{', '.join(sorted(batch_options))}: only for a list of prompts (see "
                        "generate_batch)")
    check_sampling_args(temperature, top_k, top_p, max_new_tokens)
    if idx.dim() != 2 or idx.shape[1] == 0:
        raise ValueError(f"idx must have shape (B, T) with T >= 1, got {tuple(idx.shape)}; "
                         "start from at least one token, e.g. a newline")
    was_training = model.training
    model.eval()
    block_size = model.config.block_size
    cache = None
    for _ in range(max_new_tokens):
        # crop: position embeddings exist for block_size positions only
        context = idx[:, -block_size:]
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


@torch.no_grad()
def generate_batch(model, prompts: list[list[int]], max_new_tokens: int, temperature: float = 1.0,
                   top_k: int | None = None, top_p: float | None = None,
                   generators: list[torch.Generator] | None = None, end_id: int | None = None,
                   pad_id: int = 0, use_cache: bool = False) -> list[list[int]]:
    """Continue several prompts of different lengths at once (chapter 10).

    ``prompts`` is a list of B lists of token ids. They are padded on the **left** to a (B, T)
    batch, so that every row's newest token sits in the last column, and the model gets an
    attention mask (no token sees a pad) and position ids (each row's tokens are at positions
    0, 1, ... as if it were alone). Returns, for each prompt, the prompt followed by its new
    tokens: exactly what generating from that prompt alone returns, with or without the KV cache.

    ``generators``: one ``torch.Generator`` per prompt; row i draws its samples from
    ``generators[i]`` only, so row i equals ``generate_batch(model, [prompts[i]], ...,
    generators=[generators[i]])`` and ``generate(model, torch.tensor([prompts[i]]), ...,
    generator=generators[i])`` seeded the same way. Without them, rows draw in turn from
    PyTorch's global generator. ``end_id``: a row stops after producing this token (which it
    keeps); generation ends when every row has stopped or after ``max_new_tokens``. ``pad_id``
    fills the padding; its value never matters (the mask hides it), but it must be a valid id.

    Floating point: the padded batch runs matrix products of other shapes than a single prompt
    does, so the logits can differ in the last bits (chapter 10 prints 1.4e-06 for its names
    model); masked keys get exactly zero weight. Greedy and sampled tokens are equal unless two
    tokens tie to within that rounding.
    """
    check_sampling_args(temperature, top_k, top_p, max_new_tokens)
    block_size = model.config.block_size
    if not isinstance(prompts, (list, tuple)) or len(prompts) == 0:
        raise ValueError("prompts must be a non-empty list of prompts, each a list of token ids")
    prompts = [list(p.tolist() if isinstance(p, torch.Tensor) else p) for p in prompts]
    for i, p in enumerate(prompts):
        if len(p) == 0:
            raise ValueError(f"prompt {i} is empty: start every prompt with at least one token "
                             "(e.g. a begin token)")
        if len(p) > block_size:
            raise ValueError(f"prompt {i} has {len(p)} tokens, more than block_size {block_size}: "
                             f"crop it to its last {block_size} tokens (prompt[-{block_size}:]) "
                             "before generating")
    if generators is not None and len(generators) != len(prompts):
        raise ValueError(f"give one generator per prompt: {len(prompts)} prompts, "
                         f"{len(generators)} generators")
    if not 0 <= pad_id < model.config.vocab_size:
        raise ValueError(f"pad_id {pad_id} must be a token id in [0, "
                         f"{model.config.vocab_size - 1}] (the pads are embedded, then hidden by "
                         "the mask)")
    device = next(model.parameters()).device
    ids, mask = pad_batch(prompts, pad_id, side="left", check_collision=False)  # (B, T) each
    ids, mask = ids.to(device), mask.to(device)
    B = len(prompts)
    out = [list(p) for p in prompts]
    done = torch.zeros(B, dtype=torch.bool, device=device)
    was_training = model.training
    model.eval()
    cache = None
    for _ in range(max_new_tokens):
        # crop, as generate does
        context, context_mask = ids[:, -block_size:], mask[:, -block_size:]
        if not use_cache:
            logits, _ = model(context, attention_mask=context_mask)
        elif cache is None or cache.length + 1 > block_size or ids.shape[1] > block_size:
            cache = KVCache(model.config.n_layer, block_size)
            logits, _ = model(context, cache=cache, attention_mask=context_mask)  # prefill
        else:  # the newest column only; the mask covers the cached positions too
            logits, _ = model(ids[:, -1:], cache=cache,
                              attention_mask=mask[:, -(cache.length + 1):])
        last = logits[:, -1, :]  # (B, V)
        next_id = torch.full((B, 1), pad_id, dtype=torch.long, device=device)
        for i in range(B):
            if not done[i]:  # row by row, each from its own generator, exactly as alone
                gen = generators[i] if generators is not None else None
                next_id[i] = sample_next(last[i : i + 1], temperature, top_k, top_p, gen)[0]
                out[i].append(int(next_id[i]))
        new_mask = ~done[:, None]  # a finished row gets a pad, hidden from everyone
        if end_id is not None:
            done = done | (next_id[:, 0] == end_id)
        ids = torch.cat([ids, next_id], dim=1)
        mask = torch.cat([mask, new_mask], dim=1)
        if bool(done.all()):
            break
    model.train(was_training)
    return out


def generate_text(model, tokenizer, prompt: str = "\n", max_new_tokens: int = 200,
                  seed: int | None = None, **kwargs) -> str:
    """Encode ``prompt``, sample, decode: the prompt followed by the continuation. It runs where
    the model is (the device of its parameters)."""
    if not (callable(getattr(tokenizer, "encode", None))
            and callable(getattr(tokenizer, "decode", None))):
        raise TypeError("tokenizer must be a tokenizer with encode and decode methods (e.g. the "
                        "one load_tokenizer returns for a checkpoint), got "
                        f"{type(tokenizer).__name__}")
    if not isinstance(prompt, str):
        raise TypeError("prompt must be a string (the text to continue), got "
                        f"{type(prompt).__name__}")
    if not prompt:
        raise ValueError("prompt is empty: give at least one character, e.g. '\\n'")
    device = next(model.parameters()).device
    idx = torch.tensor([tokenizer.encode(prompt)], dtype=torch.long, device=device)
    generator = None
    if seed is not None:
        generator = torch.Generator(device=device).manual_seed(check_seed(seed))
    out = generate(model, idx, max_new_tokens, generator=generator, **kwargs)
    return tokenizer.decode(out[0].tolist())


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def compare_cache_speed(model, idx: torch.Tensor, max_new_tokens: int, repeats: int = 1,
                        seed: int = 1337, **sampling) -> dict:
    """Time :func:`generate` with and without the KV cache on the same prompt and seed.

    The two ways run alternately ``repeats`` times each (so a busy machine slows both
    alike) and the fastest run of each counts. Returns a dict with ``no_cache`` and
    ``cache`` (new tokens per second), ``speedup`` (their ratio) and ``same_tokens``
    (whether both produced exactly the same tokens).
    """
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
            outputs[use_cache] = generate(model, idx, max_new_tokens, generator=generator,
                                          use_cache=use_cache, **sampling)
            _synchronize(device)
            best[use_cache] = min(best[use_cache], time.perf_counter() - start)
    no_cache, cache = max_new_tokens / best[False], max_new_tokens / best[True]
    return {"no_cache": no_cache, "cache": cache, "speedup": cache / no_cache,
            "same_tokens": bool(torch.equal(outputs[False], outputs[True]))}
