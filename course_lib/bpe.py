"""Byte-level byte-pair encoding (BPE): training, encoding, decoding, GPT-2 and tiktoken files.

A text is turned into UTF-8 bytes, so the 256 single bytes form a vocabulary that can
spell any text: no character is ever unknown. Training repeats one step ``vocab_size - 256``
times: find the most frequent pair of adjacent tokens and make it a new token. Pairs are
only counted inside *pre-tokens*, the pieces a regular expression cuts the text into
(GPT-2's pattern by default), so a token never spans a word and the space before it.

- :func:`train_bpe` learns ``(vocab, merges)`` from a text file or a string.
- :class:`BPETokenizer` encodes with those merges (``encode``, ``encode_iterable``) and
  decodes any ids (``decode``); it also loads GPT-2's ``vocab.json``/``merges.txt`` and
  tiktoken's ``.tiktoken`` rank files, and is registered as tokenizer type ``"bpe"``.

Why it is fast enough in pure Python: training counts pairs over the *distinct* pre-tokens
weighted by how often each occurs, and after a merge updates only the counts of the
pre-tokens that contain the merged pair; encoding caches the ids of every pre-token it has
already seen.
"""
from __future__ import annotations

import base64
import binascii
import gc
import gzip
import heapq
import json
import numbers
import os
import re
import sys
from collections import Counter, defaultdict
from itertools import chain, repeat
from pathlib import Path
from typing import Iterable, Iterator

import regex

from .tokenizers import register_tokenizer

# The pre-tokenizer patterns: GPT-2's (2019) and cl100k's (GPT-3.5/GPT-4, as in tiktoken 0.14).
GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
CL100K_PATTERN = (r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+"""
                  r"""|\s++$|\s*[\r\n]|\s+(?!\S)|\s""")
PATTERNS = {"gpt2": GPT2_PATTERN, "cl100k": CL100K_PATTERN}
# The same patterns for ASCII text, where \p{L} is [A-Za-z], \p{N} is [0-9] and \s is [ \t\n\v\f\r]:
# the standard library's re runs them about 1.5x faster than the regex package runs the Unicode ones,
# and they cut any ASCII string exactly as the originals do (tests/test_bpe.py checks it).
ASCII_PATTERNS = {
    GPT2_PATTERN: r"""'s|'t|'re|'ve|'m|'ll|'d| ?[A-Za-z]+| ?[0-9]+| ?[^\sA-Za-z0-9]+|\s+(?!\S)|\s+""",
}
if sys.version_info >= (3, 11):  # possessive quantifiers
    ASCII_PATTERNS[CL100K_PATTERN] = (r"""'(?i:[sdmt]|ll|ve|re)|[^\r\nA-Za-z0-9]?+[A-Za-z]++|[0-9]{1,3}+"""
                                      r"""| ?[^\sA-Za-z0-9]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s""")
ENDOFTEXT = "<|endoftext|>"
_BASE64 = regex.compile(rb"[A-Za-z0-9+/]*={0,2}")
CL100K_SPECIAL_TOKENS = {"<|endoftext|>": 100257, "<|fim_prefix|>": 100258, "<|fim_middle|>": 100259,
                         "<|fim_suffix|>": 100260, "<|endofprompt|>": 100276}


def resolve_pattern(pattern: str) -> str:
    """A pattern name (``"gpt2"``, ``"cl100k"``) or a regular expression -> the expression."""
    return PATTERNS.get(pattern, pattern)


def _special_splitter(special_tokens) -> regex.Pattern | None:
    """A regex that finds special tokens, longest first (so an overlapping shorter one never wins)."""
    if not special_tokens:
        return None
    alternatives = sorted(special_tokens, key=lambda s: (-len(s), s))
    return regex.compile("(" + "|".join(regex.escape(s) for s in alternatives) + ")")


def _read_source(source, text) -> str:
    if (source is None) == (text is None):
        raise TypeError("pass either a path to a UTF-8 text file (source) or text=..., not both and not neither")
    if text is None:
        if not isinstance(source, (str, os.PathLike)):
            raise TypeError(f"source must be a path (str or os.PathLike), got {type(source).__name__}; "
                            "to train on a string, pass text=...")
        from .data import read_text_file  # the one text reader: clear errors for what is not UTF-8 text

        text = read_text_file(source)
    return text


def pretoken_counts(text: str, special_tokens=(), pattern: str = "gpt2") -> Counter:
    """How often each pre-token occurs in ``text`` (special tokens are cut out first and not counted)."""
    pat = regex.compile(resolve_pattern(pattern))
    splitter = _special_splitter(special_tokens)
    segments = splitter.split(text)[::2] if splitter else [text]  # [::2]: drop the special tokens themselves
    counts = Counter()
    for segment in segments:
        counts.update(pat.findall(segment))
    return counts


class _Greatest:
    """A heap key that puts the lexicographically greatest pair of byte strings first."""
    __slots__ = ("pair",)

    def __init__(self, left: bytes, right: bytes):
        self.pair = (left, right)

    def __lt__(self, other: "_Greatest") -> bool:
        return self.pair > other.pair


def check_special_tokens(special_tokens) -> list[str]:
    """The special tokens as a list without repeats; each must be a non-empty string (an empty
    one would match between every two bytes)."""
    if isinstance(special_tokens, str):
        raise ValueError(f"special_tokens must be a list of strings, got the string {special_tokens!r}: "
                         f"write [{special_tokens!r}]")
    special_tokens = list(dict.fromkeys(special_tokens))
    for st in special_tokens:
        if not isinstance(st, str) or not st:
            raise ValueError(f"special tokens must be non-empty strings, got {st!r}")
    return special_tokens


def train_bpe(source: str | os.PathLike | None = None, vocab_size: int = 512, special_tokens=(), *,
              text: str | None = None, pattern: str = "gpt2") -> tuple[dict[int, bytes], list[tuple[bytes, bytes]]]:
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
        raise ValueError(f"vocab_size must be an integer, got {vocab_size!r} of type {type(vocab_size).__name__}")
    vocab_size = int(vocab_size)
    if vocab_size < minimum:
        raise ValueError(f"vocab_size must be at least {minimum} (256 bytes + {len(special_tokens)} special "
                         f"tokens), got {vocab_size!r}")
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
        raise ValueError("the training text holds nothing but special tokens: there is nothing to learn merges from")

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
            # Only the pairs next to a merge change. Pairs of neither a nor b are the same before and
            # after, so: add the new word's pairs that hold a, b or new_id, remove the old word's that
            # hold a or b (adding first, so that a pair the word keeps never reaches zero).
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
                heapq.heappush(heap, (-pair_counts[pair], _Greatest(vocab[pair[0]], vocab[pair[1]]), pair))
    for s in special_tokens:
        vocab[len(vocab)] = s.encode("utf-8")
    return vocab, merges


def train_bpe_naive(text: str, vocab_size: int, special_tokens=(), pattern: str = "gpt2"):
    """The straightforward algorithm, for comparison: recount every pair of every distinct pre-token
    after every merge. Same ``(vocab, merges)`` as :func:`train_bpe`, many times slower."""
    special_tokens = check_special_tokens(special_tokens)
    if vocab_size < 256 + len(special_tokens):
        raise ValueError(f"vocab_size must be at least {256 + len(special_tokens)}, got {vocab_size}")
    words = {tuple(w.encode("utf-8")): f for w, f in pretoken_counts(text, special_tokens, pattern).items()}
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


# --- GPT-2's files store bytes as printable characters ----------------------------------------


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible map from the 256 bytes to printable characters (used in its files)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def _gpt2_bytes(token: str, byte_decoder: dict[str, int], where: str) -> bytes:
    try:
        return bytes(byte_decoder[c] for c in token)
    except KeyError as e:
        raise ValueError(f"{where}: {token!r} holds the character {e.args[0]!r}, which is not one of GPT-2's "
                         "256 byte characters: is this a GPT-2 byte-level BPE file?") from None


class _PieceCache(dict):
    """pre-token -> ids; a missing pre-token is encoded once and remembered."""

    def __init__(self, encode_piece):
        super().__init__()
        self.encode_piece = encode_piece

    def __missing__(self, piece: str) -> tuple[int, ...]:
        ids = self[piece] = self.encode_piece(piece)
        return ids


@register_tokenizer("bpe")
class BPETokenizer:
    """Byte-level BPE: ``encode(str) -> list[int]`` and ``decode(ids) -> str`` with a learned vocabulary.

    ``vocab`` maps ids to bytes and must hold the 256 single bytes; ``merges`` lists pairs of
    byte strings in priority order (the order they were learned); ``special_tokens`` is a list
    of strings (looked up in ``vocab``, or given new ids after it) or a dict string -> id.
    A merge's priority is the id of the token it makes: the ids of merged tokens follow the
    order of the merges, as in GPT-2, tiktoken and :func:`train_bpe`.

    ``rank_merges=True`` applies tiktoken's rule instead of a list of merges (pass ``merges=[]``):
    any two adjacent tokens whose concatenation is a token merge, lowest id (rank) first, and a
    pre-token that is itself a token is taken whole. :meth:`from_tiktoken` uses it, so that
    encoding with a ``.tiktoken`` file gives exactly tiktoken's ids.

    >>> vocab, merges = train_bpe(text="low lower lowest", vocab_size=260)
    >>> tok = BPETokenizer(vocab, merges)
    >>> tok.decode(tok.encode("lowly")) == "lowly"
    True
    """

    def __init__(self, vocab: dict[int, bytes], merges: list[tuple[bytes, bytes]], special_tokens=None,
                 pattern: str = "gpt2", rank_merges: bool = False):
        self.vocab = {int(i): bytes(b) for i, b in vocab.items()}
        self.merges = [(bytes(a), bytes(b)) for a, b in merges]
        self.pattern = resolve_pattern(pattern)
        self.rank_merges = bool(rank_merges)
        self._pat = regex.compile(self.pattern)
        ascii_pattern = ASCII_PATTERNS.get(self.pattern)
        self._ascii_pat = re.compile(ascii_pattern, re.ASCII) if ascii_pattern else None
        if special_tokens is None:
            special_tokens = {}
        if not isinstance(special_tokens, dict):  # a list: find each in the vocabulary, or append it
            all_ids = {b: i for i, b in sorted(self.vocab.items(), reverse=True)}
            specials = {}
            for st in special_tokens:
                if st not in specials:
                    specials[st] = all_ids.get(st.encode("utf-8"), max(self.vocab, default=-1) + 1 + len(specials))
            special_tokens = specials
        self.special_tokens = {str(st): int(i) for st, i in special_tokens.items()}
        self._special_ids = set(self.special_tokens.values())
        ids_of = {}  # bytes -> id, special tokens left out (they are never merged)
        for i in sorted(self.vocab, reverse=True):  # the lowest id wins if two ids hold the same bytes
            if i not in self._special_ids:
                ids_of[self.vocab[i]] = i
        missing = [x for x in range(256) if bytes([x]) not in ids_of]
        if missing:
            raise ValueError(f"a byte-level vocabulary must hold all 256 single bytes; {len(missing)} are missing "
                             f"(the first: {missing[0]})")
        self._ids_of = ids_of
        self._byte_ids = [ids_of[bytes([x])] for x in range(256)]
        self._identity_bytes = self._byte_ids == list(range(256))
        self._merge_ids: dict[tuple[int, int], int] = {}  # (left id, right id) -> merged id (= its priority)
        for k, (left, right) in enumerate(self.merges):
            try:
                self._merge_ids[(ids_of[left], ids_of[right])] = ids_of[left + right]
            except KeyError:
                raise ValueError(f"merge {k} ({left!r}, {right!r}): "
                                 f"{'the merged token' if left in ids_of and right in ids_of else 'a part'} "
                                 "is not in the vocabulary") from None
        for st, i in self.special_tokens.items():
            self.vocab[i] = st.encode("utf-8")
        self._splitter = _special_splitter(self.special_tokens)
        self._special_prefixes = {st[:k] for st in self.special_tokens for k in range(1, len(st))}
        self._cache = _PieceCache(self._encode_piece)  # pre-token -> its ids

    # --- building one --------------------------------------------------------------------

    @classmethod
    def train(cls, text: str, vocab_size: int = 512, special_tokens=(ENDOFTEXT,), pattern: str = "gpt2"):
        """Learn a tokenizer from ``text`` (the tokenizer interface; see :func:`train_bpe`)."""
        vocab, merges = train_bpe(text=text, vocab_size=vocab_size, special_tokens=special_tokens, pattern=pattern)
        return cls(vocab, merges, list(special_tokens), pattern=pattern)

    @classmethod
    def from_gpt2_files(cls, vocab_json: str | os.PathLike, merges_txt: str | os.PathLike,
                        special_tokens=(ENDOFTEXT,)):
        """GPT-2's ``vocab.json`` (token -> id) and ``merges.txt`` (one ``left right`` pair a line)."""
        byte_decoder = {c: b for b, c in bytes_to_unicode().items()}
        try:
            encoder = json.loads(Path(vocab_json).read_text(encoding="utf-8"))
        except json.JSONDecodeError as e:
            raise ValueError(f"{vocab_json}: not valid JSON (line {e.lineno}, column {e.colno}: {e.msg})") from None
        if not isinstance(encoder, dict):
            raise ValueError(f"{vocab_json}: expected a JSON object mapping tokens to ids")
        specials = {s: encoder[s] for s in special_tokens if s in encoder}
        vocab = {int(i): _gpt2_bytes(t, byte_decoder, f"{vocab_json}") for t, i in encoder.items() if t not in specials}
        merges = []
        for lineno, line in enumerate(Path(merges_txt).read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip() or (lineno == 1 and line.startswith("#version")):
                continue
            parts = line.split(" ")
            if len(parts) != 2 or not all(parts):
                raise ValueError(f"{merges_txt}, line {lineno}: expected two tokens separated by one space, "
                                 f"got {line!r:.80}")
            merges.append(tuple(_gpt2_bytes(p, byte_decoder, f"{merges_txt}, line {lineno}") for p in parts))
        return cls(vocab, merges, specials, pattern="gpt2")

    @classmethod
    def from_tiktoken(cls, path: str | os.PathLike, pattern: str = "cl100k", special_tokens=None):
        """A tiktoken rank file (``base64(token) rank`` per line, optionally gzipped), e.g. cl100k_base,
        with tiktoken's merge rule (``rank_merges``): encoding gives exactly tiktoken's ids."""
        if special_tokens is None:
            special_tokens = CL100K_SPECIAL_TOKENS if pattern == "cl100k" else {}
        vocab = {rank: token for token, rank in read_tiktoken_ranks(path).items()}
        return cls(vocab, [], special_tokens, pattern=pattern, rank_merges=True)

    # --- the tokenizer interface ---------------------------------------------------------

    @property
    def vocab_size(self) -> int:
        return max(self.vocab) + 1

    def _encode_piece(self, piece: str) -> tuple[int, ...]:
        """The ids of one pre-token: its bytes, then the best-ranked merge until none applies."""
        data = piece.encode("utf-8")
        if self.rank_merges:
            return self._encode_piece_by_ranks(data)
        ids = list(data) if self._identity_bytes else [self._byte_ids[b] for b in data]
        if len(ids) < 2:
            return tuple(ids)
        get, inf = self._merge_ids.get, float("inf")
        ranks = list(map(get, zip(ids, ids[1:]), repeat(inf)))  # ranks[i]: priority of (ids[i], ids[i+1])
        while True:
            best = min(ranks)
            if best == inf:
                break
            i = ranks.index(best)  # the leftmost of equal ranks, as tiktoken does
            ids[i:i + 2] = [best]  # the merged token's id is its priority
            del ranks[i]
            if not ranks:
                break
            if i:  # only the two pairs around the new token change
                ranks[i - 1] = get((ids[i - 1], best), inf)
            if i < len(ranks):
                ranks[i] = get((best, ids[i + 1]), inf)
        return tuple(ids)

    def _encode_piece_by_ranks(self, data: bytes) -> tuple[int, ...]:
        """Tiktoken's rule: merge the adjacent pair whose concatenation has the lowest rank."""
        get, inf = self._ids_of.get, float("inf")
        whole = get(data)
        if whole is not None:
            return (whole,)
        parts = [data[i:i + 1] for i in range(len(data))]
        ranks = [get(x + y, inf) for x, y in zip(parts, parts[1:])]
        while ranks:
            best = min(ranks)
            if best == inf:
                break
            i = ranks.index(best)
            parts[i:i + 2] = [parts[i] + parts[i + 1]]
            del ranks[i]
            if i:
                ranks[i - 1] = get(parts[i - 1] + parts[i], inf)
            if i < len(ranks):
                ranks[i] = get(parts[i] + parts[i + 1], inf)
        return tuple(self._ids_of[x] for x in parts)

    def _encode_ordinary(self, text: str) -> list[int]:
        cache = self._cache
        if len(cache) > 200_000:  # bound the memory an endless stream of new words can take
            cache.clear()
        # A cache hit is a dict lookup in C; a miss calls _encode_piece (via _PieceCache.__missing__).
        pat = self._ascii_pat if self._ascii_pat is not None and text.isascii() else self._pat
        return list(chain.from_iterable(map(cache.__getitem__, pat.findall(text))))

    def encode(self, text: str) -> list[int]:
        """Text -> ids: special tokens first (longest match), then pre-tokens, each merged by priority."""
        if not isinstance(text, str):
            raise TypeError(f"encode takes a str, got {type(text).__name__}")
        if len(text) < 100_000:
            return self._encode(text)
        gc_was_on = gc.isenabled()
        gc.disable()  # a long text adds many cache entries; the cycle collector would rescan them all
        try:
            return self._encode(text)
        finally:
            if gc_was_on:
                gc.enable()

    def _encode(self, text: str) -> list[int]:
        if self._splitter is None:
            return self._encode_ordinary(text)
        ids = []
        for k, segment in enumerate(self._splitter.split(text)):
            if k % 2:
                ids.append(self.special_tokens[segment])
            elif segment:
                ids.extend(self._encode_ordinary(segment))
        return ids

    def _safe_cut(self, buffer: str) -> int:
        """How much of ``buffer`` can be encoded now without changing any id when more text follows:
        everything before its last pre-token and before a possible start of a special token."""
        start = 0
        if self._splitter is not None:
            for m in self._splitter.finditer(buffer):
                start = m.end()
        cut = start
        for m in self._pat.finditer(buffer, start):  # (the Unicode pattern cuts ASCII the same way)
            cut = m.start()
        for k in range(min(len(buffer), max(map(len, self._special_prefixes), default=0)), 0, -1):
            if buffer[-k:] in self._special_prefixes:
                cut = min(cut, len(buffer) - k)
                break
        return cut

    def encode_iterable(self, iterable: Iterable[str]) -> Iterator[int]:
        """Ids of the concatenation of ``iterable``'s strings (e.g. a file's lines), lazily: the same
        ids as ``encode`` of the whole text, with memory bounded by the longest pre-token."""
        buffer = ""
        for chunk in iterable:
            buffer += chunk
            cut = self._safe_cut(buffer)
            if cut:
                yield from self.encode(buffer[:cut])
                buffer = buffer[cut:]
        if buffer:
            yield from self.encode(buffer)

    def token_bytes(self, i: int) -> bytes:
        if not isinstance(i, numbers.Integral) or isinstance(i, bool):
            raise ValueError(f"token ids must be integers, got {i!r} of type {type(i).__name__}")
        try:
            return self.vocab[int(i)]
        except KeyError:
            raise ValueError(f"unknown token id {int(i)}: this tokenizer's ids are "
                             f"{self._id_ranges()}") from None

    def _id_ranges(self) -> str:
        n = max(self.vocab) + 1
        return f"0 to {n - 1}" if len(self.vocab) == n else f"the {len(self.vocab)} ids of its vocabulary (up to {n - 1})"

    def decode_bytes(self, ids) -> bytes:
        ids = ids.tolist() if hasattr(ids, "tolist") else list(ids)
        vocab = self.vocab
        try:
            return b"".join([vocab[i] for i in ids])
        except (KeyError, TypeError):
            for i in ids:
                self.token_bytes(i)
            raise

    def decode(self, ids) -> str:
        """Ids -> text. Byte sequences that are not valid UTF-8 (a character cut between tokens, or
        arbitrary ids) become U+FFFD, the replacement character; an unknown id is an error."""
        return self.decode_bytes(ids).decode("utf-8", errors="replace")

    # --- storing it ----------------------------------------------------------------------

    def to_dict(self) -> dict:
        """A JSON-able description (bytes as base64); checkpoints store it."""
        b64 = lambda b: base64.b64encode(b).decode("ascii")  # noqa: E731
        return {
            "type": "bpe",
            "vocab": {str(i): b64(b) for i, b in self.vocab.items() if i not in self._special_ids},
            "merges": [[b64(a), b64(b)] for a, b in self.merges],
            "special_tokens": dict(self.special_tokens),
            "pattern": self.pattern,
            "rank_merges": self.rank_merges,
        }

    @classmethod
    def from_dict(cls, d: dict) -> "BPETokenizer":
        if d.get("type") != "bpe" or "vocab" not in d or "merges" not in d:
            raise ValueError(f"not a BPETokenizer description: {sorted(d)}")
        vocab = {int(i): base64.b64decode(b) for i, b in d["vocab"].items()}
        merges = [(base64.b64decode(a), base64.b64decode(b)) for a, b in d["merges"]]
        return cls(vocab, merges, d.get("special_tokens") or {}, pattern=d.get("pattern", "gpt2"),
                   rank_merges=d.get("rank_merges", False))

    def __repr__(self) -> str:
        return (f"BPETokenizer(vocab_size={self.vocab_size}, merges={len(self.merges)}, "
                f"special_tokens={list(self.special_tokens)})")


def read_tiktoken_ranks(path: str | os.PathLike) -> dict[bytes, int]:
    """A ``.tiktoken`` file (``base64(token) rank`` per line, gzipped or not) -> ``{token bytes: rank}``."""
    path = Path(path)
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":  # the gzip magic number
        raw = gzip.decompress(raw)
    ranks = {}
    for lineno, line in enumerate(raw.splitlines(), 1):
        parts = line.split()
        if not parts:
            continue
        try:
            if len(parts) != 2 or not _BASE64.fullmatch(parts[0]):
                raise ValueError
            ranks[binascii.a2b_base64(parts[0])] = int(parts[1])
        except (ValueError, binascii.Error):
            raise ValueError(f"{path}, line {lineno}: expected 'base64-token rank', got {line[:80]!r}") from None
    return ranks


PALETTE = ["#fde2e4", "#cde7f0", "#e2f0cb", "#fff1c1", "#e4d8f5", "#ffd8be", "#d0f4de", "#f1e3d3"]


def tokens_html(tokenizer, text: str) -> str:
    """HTML that shows how ``tokenizer`` cuts ``text``: one coloured span per token (for notebooks:
    ``IPython.display.HTML(tokens_html(tok, text))``). A token that holds part of a character's bytes
    shows as U+FFFD; hover over a span to see its id."""
    import html

    spans = []
    for k, i in enumerate(tokenizer.encode(text)):
        piece = html.escape(tokenizer.decode([i])).replace("\n", "\u21b5<br>")
        spans.append(f'<span title="{i}" style="background:{PALETTE[k % len(PALETTE)]};border-radius:3px;'
                     f'padding:1px 0">{piece}</span>')
    return '<div style="font-family:monospace;white-space:pre-wrap;line-height:1.8">' + "".join(spans) + "</div>"
