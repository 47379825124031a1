"""Byte-level byte-pair encoding (BPE): :class:`BPETokenizer` encodes text to ids and decodes
any ids (chapter 9).

A text is turned into UTF-8 bytes, so the 256 single bytes form a vocabulary that can spell
any text: no character is ever unknown. The tokenizer cuts a text into pre-tokens
(:mod:`course_lib.pretokenize`) and merges the bytes of each by the priority of the merges
learned by :func:`course_lib.bpe_train.train_bpe`; it also loads GPT-2's and tiktoken's files
(:mod:`course_lib.bpe_files`), and is registered as tokenizer type ``"bpe"``. Encoding caches
the ids of every pre-token it has already seen, which makes it fast enough in pure Python.
"""
from __future__ import annotations

import base64
import gc
import numbers
import os
import re
from itertools import chain, repeat
from typing import Iterable, Iterator

import regex

from .bpe_files import CL100K_SPECIAL_TOKENS, read_gpt2_files, read_tiktoken_ranks
from .bpe_train import train_bpe
from .pretokenize import ASCII_PATTERNS, resolve_pattern, special_splitter
from .tokenizers import register_tokenizer

# GPT-2's token between documents; BPETokenizer.train adds it by default
ENDOFTEXT = "<|endoftext|>"


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
    """Byte-level BPE: ``encode(str) -> list[int]`` and ``decode(ids) -> str`` with a learned
    vocabulary.

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

    def __init__(self, vocab: dict[int, bytes], merges: list[tuple[bytes, bytes]],
                 special_tokens=None, pattern: str = "gpt2", rank_merges: bool = False):
        self.vocab = {int(i): bytes(b) for i, b in vocab.items()}
        self.merges = [(bytes(a), bytes(b)) for a, b in merges]
        self.pattern = resolve_pattern(pattern)
        self.rank_merges = bool(rank_merges)
        self._pat = regex.compile(self.pattern)
        ascii_pattern = ASCII_PATTERNS.get(self.pattern)
        self._ascii_pat = re.compile(ascii_pattern, re.ASCII) if ascii_pattern else None
        if special_tokens is None:
            special_tokens = {}
        # a list: find each in the vocabulary, or append it
        if not isinstance(special_tokens, dict):
            all_ids = {b: i for i, b in sorted(self.vocab.items(), reverse=True)}
            specials = {}
            for st in special_tokens:
                if st not in specials:
                    specials[st] = all_ids.get(st.encode("utf-8"),
                                               max(self.vocab, default=-1) + 1 + len(specials))
            special_tokens = specials
        self.special_tokens = {str(st): int(i) for st, i in special_tokens.items()}
        self._special_ids = set(self.special_tokens.values())
        ids_of = {}  # bytes -> id, special tokens left out (they are never merged)
        # the lowest id wins if two ids hold the same bytes
        for i in sorted(self.vocab, reverse=True):
            if i not in self._special_ids:
                ids_of[self.vocab[i]] = i
        missing = [x for x in range(256) if bytes([x]) not in ids_of]
        if missing:
            raise ValueError("a byte-level vocabulary must hold all 256 single bytes; "
                             f"{len(missing)} are missing (the first: {missing[0]})")
        self._ids_of = ids_of
        self._byte_ids = [ids_of[bytes([x])] for x in range(256)]
        self._identity_bytes = self._byte_ids == list(range(256))
        # (left id, right id) -> merged id (= its priority)
        self._merge_ids: dict[tuple[int, int], int] = {}
        for k, (left, right) in enumerate(self.merges):
            try:
                self._merge_ids[(ids_of[left], ids_of[right])] = ids_of[left + right]
            except KeyError:
                raise ValueError(
                    f"merge {k} ({left!r}, {right!r}): "
                    f"{'the merged token' if left in ids_of and right in ids_of else 'a part'} "
                    "is not in the vocabulary"
                ) from None
        for st, i in self.special_tokens.items():
            self.vocab[i] = st.encode("utf-8")
        self._splitter = special_splitter(self.special_tokens)
        self._special_prefixes = {st[:k] for st in self.special_tokens for k in range(1, len(st))}
        self._cache = _PieceCache(self._encode_piece)  # pre-token -> its ids

    # --- building one --------------------------------------------------------------------

    @classmethod
    def train(cls, text: str, vocab_size: int = 512, special_tokens=(ENDOFTEXT,),
              pattern: str = "gpt2"):
        """Learn a tokenizer from ``text`` (the tokenizer interface; see :func:`train_bpe`)."""
        vocab, merges = train_bpe(text=text, vocab_size=vocab_size, special_tokens=special_tokens,
                                  pattern=pattern)
        return cls(vocab, merges, list(special_tokens), pattern=pattern)

    @classmethod
    def from_gpt2_files(cls, vocab_json: str | os.PathLike, merges_txt: str | os.PathLike,
                        special_tokens=(ENDOFTEXT,)):
        """GPT-2's ``vocab.json`` (token -> id) and ``merges.txt`` (one ``left right`` pair a
        line)."""
        vocab, merges, specials = read_gpt2_files(vocab_json, merges_txt, special_tokens)
        return cls(vocab, merges, specials, pattern="gpt2")

    @classmethod
    def from_tiktoken(cls, path: str | os.PathLike, pattern: str = "cl100k", special_tokens=None):
        """A tiktoken rank file (``base64(token) rank`` per line, optionally gzipped), e.g.
        cl100k_base, with tiktoken's merge rule (``rank_merges``): encoding gives exactly tiktoken's
        ids."""
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
        # ranks[i]: priority of (ids[i], ids[i+1])
        ranks = list(map(get, zip(ids, ids[1:]), repeat(inf)))
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
        # A cache hit is a dict lookup in C; a miss calls _encode_piece (via
        # _PieceCache.__missing__).
        pat = self._ascii_pat if self._ascii_pat is not None and text.isascii() else self._pat
        return list(chain.from_iterable(map(cache.__getitem__, pat.findall(text))))

    def encode(self, text: str) -> list[int]:
        """Text -> ids: special tokens first (longest match), then pre-tokens, each merged by
        priority."""
        if not isinstance(text, str):
            raise TypeError(f"encode takes a str, got {type(text).__name__}")
        if len(text) < 100_000:
            return self._encode(text)
        gc_was_on = gc.isenabled()
        # a long text adds many cache entries; the cycle collector would rescan them all
        gc.disable()
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
        """Ids of the concatenation of ``iterable``'s strings (e.g. a file's lines), lazily: the
        same ids as ``encode`` of the whole text, with memory bounded by the longest pre-token."""
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
        return (f"0 to {n - 1}" if len(self.vocab) == n
                else f"the {len(self.vocab)} ids of its vocabulary (up to {n - 1})")

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
