"""Learning a byte-level BPE vocabulary (chapter 9): :func:`train_bpe`, and the straightforward
algorithm it must agree with, :func:`train_bpe_naive`.

A text is turned into UTF-8 bytes, so the 256 single bytes form a vocabulary that can spell
any text. Training repeats one step ``vocab_size - 256`` times: find the most frequent pair of
adjacent tokens within pre-tokens (:mod:`course_lib.pretokenize`) and make it a new token.

Why it is fast enough in pure Python: it counts pairs over the *distinct* pre-tokens weighted
by how often each occurs, and after a merge updates only the counts of the pre-tokens that
contain the merged pair, finding the next best pair in a heap.
"""
from __future__ import annotations

import gc
import heapq
import numbers
import os
from collections import Counter, defaultdict

from .data import read_text_file  # the one text reader: clear errors for what is not UTF-8 text
from .pretokenize import check_special_tokens, pretoken_counts


def _read_source(source, text) -> str:
    if (source is None) == (text is None):
        raise TypeError("pass either a path to a UTF-8 text file (source) or text=..., not both "
                        "and not neither")
    if text is None:
        if not isinstance(source, (str, os.PathLike)):
            raise TypeError("source must be a path (str or os.PathLike), got "
                            f"{type(source).__name__}; to train on a string, pass text=...")
        text = read_text_file(source)
    return text


class _Greatest:
    """A heap key that puts the lexicographically greatest pair of byte strings first."""
    __slots__ = ("pair",)

    def __init__(self, left: bytes, right: bytes):
        self.pair = (left, right)

    def __lt__(self, other: "_Greatest") -> bool:
        return self.pair > other.pair


def train_bpe(source: str | os.PathLike | None = None, vocab_size: int = 512, special_tokens=(), *,
              text: str | None = None,
              pattern: str = "gpt2") -> tuple[dict[int, bytes], list[tuple[bytes, bytes]]]:
    """Learn a byte-level BPE vocabulary from a UTF-8 text file ``source`` (or ``text=``).

    Returns ``(vocab, merges)``: ``vocab`` maps ids to bytes (ids 0-255 are the single bytes,
    then one id per merge in the order learned, then the special tokens); ``merges`` lists the
    merged pairs ``(left bytes, right bytes)`` in the order learned. Each step merges the most
    frequent adjacent pair within pre-tokens; ties go to the lexicographically greatest pair
    ``(left bytes, right bytes)``. Fewer merges are learned if the text runs out of pairs.
    """
    special_tokens = check_special_tokens(special_tokens)
    minimum = 256 + len(special_tokens)
    if not isinstance(vocab_size, numbers.Integral) or isinstance(vocab_size, bool):
        raise ValueError(f"vocab_size must be an integer, got {vocab_size!r} of type "
                         f"{type(vocab_size).__name__}")
    vocab_size = int(vocab_size)
    if vocab_size < minimum:
        raise ValueError(f"vocab_size must be at least {minimum} (256 bytes + "
                         f"{len(special_tokens)} special tokens), got {vocab_size!r}")
    text = _read_source(source, text)
    gc_was_on = gc.isenabled()
    gc.disable()  # the loop makes millions of small tuples; the cycle collector only slows it down
    try:
        return _train_bpe(text, vocab_size, special_tokens, pattern)
    finally:
        if gc_was_on:
            gc.enable()


def _train_bpe(text: str, vocab_size: int, special_tokens: list[str], pattern: str):
    if not text:
        raise ValueError("cannot train BPE on an empty text: pass the training corpus")
    counts = pretoken_counts(text, special_tokens, pattern)
    if not counts:
        raise ValueError("the training text holds nothing but special tokens: there is nothing to "
                         "learn merges from")

    vocab = {i: bytes([i]) for i in range(256)}
    words = [list(w.encode("utf-8")) for w in counts]   # each distinct pre-token as a list of ids
    freqs = list(counts.values())                        # how often it occurs
    pair_counts: dict[tuple[int, int], int] = defaultdict(int)
    where: dict[tuple[int, int], set[int]] = defaultdict(set)  # pair -> the words that contain it
    for i, (word, f) in enumerate(zip(words, freqs)):
        for pair in zip(word, word[1:]):
            pair_counts[pair] += f
            where[pair].add(i)
    # A max-heap of (count, pair) with ties to the greatest pair. Entries go stale when counts
    # drop; a stale entry is fixed when it reaches the top (counts only rise for new pairs,
    # which get a fresh entry), so each step costs a few heap operations, not a scan of all pairs.
    heap = [(-c, _Greatest(vocab[p[0]], vocab[p[1]]), p) for p, c in pair_counts.items()]
    heapq.heapify(heap)

    merges: list[tuple[bytes, bytes]] = []
    for new_id in range(256, vocab_size - len(special_tokens)):
        best = None
        while heap:
            neg, key, pair = heapq.heappop(heap)
            c = pair_counts.get(pair, 0)
            if c == -neg:
                best = pair
                break
            if c:  # stale: the count dropped since this entry was pushed
                heapq.heappush(heap, (-c, key, pair))
        if best is None:
            break  # no pair left: every pre-token is a single token
        a, b = best
        vocab[new_id] = vocab[a] + vocab[b]
        merges.append((vocab[a], vocab[b]))
        touched = set()
        for i in where.pop(best):
            word = words[i]
            merged, j, n = [], 0, len(word)
            while j < n:
                if word[j] == a and j < n - 1 and word[j + 1] == b:
                    merged.append(new_id)
                    j += 2
                else:
                    merged.append(word[j])
                    j += 1
            if len(merged) == n:
                continue  # a stale entry of where: this word no longer holds the pair
            f = freqs[i]
            # Only the pairs next to a merge change. Pairs of neither a nor b are the same before
            # and after, so: add the new word's pairs that hold a, b or new_id, remove the old
            # word's that hold a or b (adding first, so that a pair the word keeps never reaches
            # zero).
            for pair in zip(merged, merged[1:]):
                x, y = pair
                if x == new_id or y == new_id or x == a or x == b or y == a or y == b:
                    pair_counts[pair] += f
                    where[pair].add(i)
                    if new_id in pair:
                        touched.add(pair)
            for pair in zip(word, word[1:]):
                x, y = pair
                if x == a or x == b or y == a or y == b:
                    c = pair_counts[pair] - f
                    if c:
                        pair_counts[pair] = c
                    else:
                        del pair_counts[pair]
                        where.pop(pair, None)
            words[i] = merged
        for pair in touched:  # the new pairs enter the heap with their full counts
            if pair in pair_counts:
                heapq.heappush(heap, (-pair_counts[pair], _Greatest(vocab[pair[0]], vocab[pair[1]]),
                                      pair))
    for s in special_tokens:
        vocab[len(vocab)] = s.encode("utf-8")
    return vocab, merges


def train_bpe_naive(text: str, vocab_size: int, special_tokens=(), pattern: str = "gpt2"):
    """The straightforward algorithm, for comparison: recount every pair of every distinct pre-token
    after every merge. Same ``(vocab, merges)`` as :func:`train_bpe`, many times slower."""
    special_tokens = check_special_tokens(special_tokens)
    if vocab_size < 256 + len(special_tokens):
        raise ValueError(f"vocab_size must be at least {256 + len(special_tokens)}, got "
                         f"{vocab_size}")
    words = {tuple(w.encode("utf-8")): f for w,
             f in pretoken_counts(text, special_tokens, pattern).items()}
    vocab = {i: bytes([i]) for i in range(256)}
    merges = []
    for new_id in range(256, vocab_size - len(special_tokens)):
        counts = Counter()
        for word, f in words.items():
            for pair in zip(word, word[1:]):
                counts[pair] += f
        if not counts:
            break
        a, b = max(counts, key=lambda p: (counts[p], vocab[p[0]], vocab[p[1]]))
        vocab[new_id] = vocab[a] + vocab[b]
        merges.append((vocab[a], vocab[b]))
        words = {tuple(merge(list(w), (a, b), new_id)): f for w, f in words.items()}
    for s in special_tokens:
        vocab[len(vocab)] = s.encode("utf-8")
    return vocab, merges


def merge(ids: list[int], pair: tuple[int, int], new_id: int) -> list[int]:
    """Replace every occurrence of ``pair`` in ``ids`` (left to right) with ``new_id``."""
    out, i = [], 0
    while i < len(ids):
        if i < len(ids) - 1 and (ids[i], ids[i + 1]) == pair:
            out.append(new_id)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out
