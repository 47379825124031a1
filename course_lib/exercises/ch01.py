"""Checks for chapter 1, Text and tokens: ``from course_lib.exercises import ch01``."""
from __future__ import annotations

import math
from collections import Counter

import torch

from ..data import get_batch
from ..tokenizers import CharTokenizer
from . import (ExerciseError, as_number, call, describe, expect_close, expect_equal,
               expect_sequence, expect_tensor, fail, passed)

# The last one is not sorted: an answer that numbers the characters of sorted(chars) (Karpathy's
# sorted(set(text)) habit) agrees with the sorted ones and fails only there.
_VOCABULARIES = ["abc", " !,.ehlorw", "\n ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz",
                 "0123456789", "zyx ab"]


def _as_ids(value):
    """encode's answer as a list: a tensor of ids counts as its list (``.tolist()``)."""
    return value.tolist() if isinstance(value, torch.Tensor) else value


def check_encode_decode(encode, decode) -> None:
    """``encode(text, chars) -> list[int]`` and ``decode(ids, chars) -> str`` for a vocabulary
    ``chars`` (a string of distinct characters, in order); an unknown character must raise a
    ValueError that names it."""
    generator = torch.Generator().manual_seed(1)
    for chars in _VOCABULARIES:
        tok = CharTokenizer(chars)
        picks = torch.randint(len(chars), (40,), generator=generator).tolist()
        text = "".join(chars[i] for i in picks)
        ids = _as_ids(call(encode, text, chars))
        if not isinstance(ids, list) or not all(isinstance(i, int) for i in ids):
            fail(f"encode() should return a list of ints, got {describe(ids)}.",
                 "build the list with a comprehension: [stoi[c] for c in text].")
        ordered = "".join(sorted(chars))
        if ordered != chars and ids == CharTokenizer(ordered).encode(text):
            fail(f"encode({text[:12]!r}..., {chars!r}) gave each character its position in "
                 f"sorted(chars) ({ordered!r}), not in chars.",
                 "do not sort the vocabulary: chars is given in its order, and a character's id is "
                 "its position in it, stoi = {c: i for i, c in enumerate(chars)}.")
        if ids != tok.encode(text):
            wrong = next((i for i, (a, b) in enumerate(zip(ids, tok.encode(text))) if a != b),
                         min(len(ids), len(text)))
            fail(f"encode({text[:12]!r}..., {chars[:12]!r}...) is wrong at position {wrong} "
                 f"(got {len(ids)} ids for {len(text)} characters).",
                 "the id of a character is its position in chars: stoi = {c: i for i, c in "
                 "enumerate(chars)}.")
        back = call(decode, tok.encode(text), chars)
        if not isinstance(back, str):
            fail(f"decode() should return a str, got {describe(back)}.",
                 "join the characters: ''.join(itos[i] for i in ids).")
        if ordered != chars and back == CharTokenizer(ordered).decode(tok.encode(text)):
            fail(f"decode() of {len(text)} ids in the vocabulary {chars!r} read each id as a "
                 f"position in sorted(chars) ({ordered!r}), not in chars.",
                 "do not sort the vocabulary: id i is the character chars[i], itos = {i: c for i, "
                 "c in enumerate(chars)}.")
        expect_equal(back, text, f"decode() of {len(text)} ids in the vocabulary {chars[:12]!r}",
                     "itos = {i: c for i, c in enumerate(chars)}, then ''.join(itos[i] for i in "
                     "ids).")
        expect_equal(call(decode, call(encode, text, chars), chars), text, "decode(encode(text))",
                     "the round trip must give back the text exactly.")
    expect_equal(_as_ids(call(encode, "", "abc")), [], "encode('', 'abc')",
                 "an empty text has no ids.")
    expect_equal(call(decode, [], "abc"), "", "decode([], 'abc')", "no ids give the empty string.")
    # An unknown character: a clear ValueError, not a bare KeyError.
    try:
        encode("cab?", "abc")
    except NotImplementedError:
        call(encode, "cab?", "abc")
    except ValueError as e:
        if "?" not in str(e):
            fail(f"encode('cab?', 'abc') raised ValueError({str(e)!r}), which does not name the "
                 "character '?'.",
                 "put the character in the message, e.g. f'unknown character {c!r}'.")
    except KeyError:
        fail("encode('cab?', 'abc') raised a bare KeyError for the unknown character '?'.",
             "check `if c not in stoi:` and raise ValueError(f'unknown character {c!r} ...') that "
             "names it.")
    except Exception as e:
        fail(f"encode('cab?', 'abc') raised {type(e).__name__}: {e}; expected a ValueError naming "
             "'?'.",
             "check `if c not in stoi:` and raise ValueError(f'unknown character {c!r} ...').")
    else:
        fail("encode('cab?', 'abc') returned without an error, but '?' is not in the vocabulary.",
             "an unknown character must raise ValueError: silently skipping or guessing an id "
             "corrupts the data.")
    passed("encode/decode agree with course_lib.tokenizers.CharTokenizer, and the round trip is "
           "exact.")


def check_get_batch(get_batch_fn) -> None:
    """``get_batch_fn(data, block_size, batch_size, generator) -> (x, y)``: random windows of
    the 1-D tensor ``data``, ``x`` and ``y`` of shape (B, T), ``y`` shifted left by one."""
    # Distinct ids, so every window's start position can be read off its first token.
    for n, T, B, seed in [(50, 4, 8, 0), (200, 16, 5, 1), (1000, 8, 32, 3)]:
        data = torch.randperm(n, generator=torch.Generator().manual_seed(100 + seed))
        where = torch.empty(n, dtype=torch.long)
        where[data] = torch.arange(n)
        out = call(get_batch_fn, data, T, B, torch.Generator().manual_seed(seed))
        x, y = expect_sequence(out, 2, "get_batch should return a pair (x, y)", "return x, y")
        for name, t in (("x", x), ("y", y)):
            if not isinstance(t, torch.Tensor):
                fail(f"{name} should be a tensor, got {describe(t)}.", "torch.stack the windows.")
            if tuple(t.shape) != (B, T):
                fail(f"with batch_size={B}, block_size={T}, {name} has shape {tuple(t.shape)}; "
                     f"expected ({B}, {T}).",
                     "stack batch_size windows of block_size tokens: torch.stack([data[i:i + "
                     "block_size] for i in ix]).")
            expect_tensor(t, (B, T), name, dtype=data.dtype,
                          dtype_hint="the windows are slices of data and keep its dtype (token "
                                     "ids, torch.long): take data[i:i + block_size] as it is, "
                                     "without .float() or torch.tensor(..., dtype=...).")
        for b in range(B):
            start = int(where[x[b, 0]])
            if start + T > n or not torch.equal(x[b], data[start:start + T]):
                fail(f"row {b} of x is not a contiguous window of data.",
                     "x[b] must be data[i:i + block_size].")
            if start + T + 1 > n:
                fail(f"row {b} of x starts at {start}, so its target would run past the end of "
                     f"data (length {n}).",
                     "draw starts from torch.randint(len(data) - block_size, ...) so that y fits "
                     "too.")
            if not torch.equal(y[b], data[start + 1:start + T + 1]):
                if torch.equal(y[b], x[b]):
                    hint = "y must be x shifted by one: y[b] = data[i + 1:i + block_size + 1]."
                    fail("y equals x: the target of each position must be the NEXT token.", hint)
                fail(f"row {b} of y is not row {b} of x shifted left by one token.",
                     "y[b] = data[i + 1:i + block_size + 1] for the same start i as x[b].")
    # Reproducible with the same generator seed, and it really uses the generator.
    data = torch.arange(500)
    x1, _ = call(get_batch_fn, data, 8, 16, torch.Generator().manual_seed(7))
    x2, _ = call(get_batch_fn, data, 8, 16, torch.Generator().manual_seed(7))
    x3, _ = call(get_batch_fn, data, 8, 16, torch.Generator().manual_seed(8))
    if not torch.equal(x1, x2):
        fail("two calls with generators seeded alike gave different batches.",
             "draw the starts with torch.randint(..., generator=generator), not from the global "
             "RNG.")
    if torch.equal(x1, x3):
        fail("generators seeded differently gave the same batch: the starts are not random.",
             "draw the starts with torch.randint(len(data) - block_size, (batch_size,), "
             "generator=generator).")
    # Every start from 0 to len(data) - block_size - 1 must be possible (no off-by-one).
    data = torch.arange(10)
    x, _ = call(get_batch_fn, data, 4, 400, torch.Generator().manual_seed(0))
    starts = set(x[:, 0].tolist())
    if starts != set(range(10 - 4)):
        missing = sorted(set(range(10 - 4)) - starts)
        fail(f"on a text of 10 tokens with block_size 4, windows start at {sorted(starts)}; "
             f"never at {missing}.",
             "the last window that still has a target starts at len(data) - block_size - 1, so use "
             "torch.randint(len(data) - block_size, ...) (its upper bound is exclusive).")
    # The edge case of a single possible window: block_size = len(data) - 1.
    x, y = call(get_batch_fn, torch.arange(12), 11, 3, torch.Generator().manual_seed(2))
    if not (torch.equal(x, torch.arange(11).expand(3, 11))
            and torch.equal(y, torch.arange(1, 12).expand(3, 11))):
        fail("with len(data) = block_size + 1 there is exactly one window, data[:-1] -> data[1:]; "
             "your batch differs.", "draw starts with torch.randint(len(data) - block_size, ...).")
    same = torch.equal(call(get_batch_fn, torch.arange(300), 8, 4,
                            torch.Generator().manual_seed(5))[0],
                       get_batch(torch.arange(300), 8, 4, torch.Generator().manual_seed(5))[0])
    passed("windows, targets shifted by one, reproducible with a seeded generator"
           + (" (and identical to course_lib.data.get_batch)." if same else "."))


def _entropy_bits(text: str) -> float:
    counts = Counter(text)
    n = len(text)
    return -sum(c / n * math.log2(c / n) for c in counts.values())


def check_unigram_entropy_bits(fn) -> None:
    """``fn(text) -> float``: the entropy in bits of the distribution of characters of ``text``."""
    cases = [("aaaa", 0.0), ("ab", 1.0), ("abcd" * 3, 2.0), ("aab", None),
             ("hello, world!\n" * 2, None),
             ("First Citizen:\nBefore we proceed any further, hear me speak.", None)]
    for text, known in cases:
        expected = _entropy_bits(text) if known is None else known
        got = as_number(call(fn, text), f"unigram entropy of {text[:20]!r}", "return a float")
        if expected > 0 and math.isclose(got, expected * math.log(2), rel_tol=1e-4):
            fail(f"the entropy of {text[:20]!r} came out in nats ({got:.4f}), not bits "
                 f"({expected:.4f}).",
                 "use math.log2 (or divide the natural-log result by math.log(2)).")
        if expected > 0 and math.isclose(got, -expected, rel_tol=1e-4):
            fail(f"the entropy of {text[:20]!r} is negative ({got:.4f}).",
                 "H = -sum p log2 p: log2 p is negative for p < 1, so the minus sign makes H "
                 "positive.")
        expect_close(got, expected, f"unigram entropy of {text[:20]!r}",
                     "p(c) = count(c) / len(text) for each distinct character c, then H = -sum "
                     "p(c) log2 p(c).",
                     atol=1e-6)
    passed("your entropies (in bits) match: 0 for one repeated character, 1 for two equally likely "
           "ones.")


__all__ = ["check_encode_decode", "check_get_batch", "check_unigram_entropy_bits", "ExerciseError"]
