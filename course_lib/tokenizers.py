"""Tokenizers: text <-> lists of integer ids.

``CharTokenizer`` maps each distinct character to an id (chapter 1).
"""
from __future__ import annotations

import json
from pathlib import Path


class CharTokenizer:
    """A character-level tokenizer: one id per distinct character, in sorted order.

    >>> tok = CharTokenizer.from_text("hello")
    >>> tok.encode("hell")
    [1, 0, 2, 2]
    >>> tok.decode([1, 0, 2, 2, 3])
    'hello'
    """

    def __init__(self, chars: list[str] | str):
        chars = list(chars)
        if not chars:
            raise ValueError("a tokenizer needs at least one character; the text was empty")
        if len(set(chars)) != len(chars):
            raise ValueError("characters must be distinct")
        if any(len(c) != 1 for c in chars):
            raise ValueError("every vocabulary entry must be a single character")
        self.chars = chars
        self.stoi = {c: i for i, c in enumerate(chars)}  # string -> int
        self.itos = {i: c for i, c in enumerate(chars)}  # int -> string

    @classmethod
    def from_text(cls, text: str) -> "CharTokenizer":
        """Build the vocabulary from every distinct character of ``text``."""
        if not text:
            raise ValueError("cannot build a tokenizer from empty text: pass the training corpus")
        return cls(sorted(set(text)))

    @property
    def vocab_size(self) -> int:
        return len(self.chars)

    def encode(self, text: str) -> list[int]:
        try:
            return [self.stoi[c] for c in text]
        except KeyError:
            pos = next(i for i, c in enumerate(text) if c not in self.stoi)
            raise ValueError(
                f"unknown character {text[pos]!r} (U+{ord(text[pos]):04X}) at position {pos}: "
                "it is not in this tokenizer's vocabulary. Remove it from the text, or build "
                "the tokenizer from a text that contains it."
            ) from None

    def decode(self, ids) -> str:
        ids = ids.tolist() if hasattr(ids, "tolist") else list(ids)
        try:
            return "".join(self.itos[int(i)] for i in ids)
        except KeyError:
            bad = next(int(i) for i in ids if int(i) not in self.itos)
            raise ValueError(
                f"unknown token id {bad}: ids run from 0 to {self.vocab_size - 1} for this tokenizer"
            ) from None

    def to_dict(self) -> dict:
        return {"type": "char", "chars": "".join(self.chars)}

    @classmethod
    def from_dict(cls, d: dict) -> "CharTokenizer":
        if d.get("type") != "char" or "chars" not in d:
            raise ValueError(f"not a CharTokenizer description: {sorted(d)}")
        return cls(d["chars"])

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), ensure_ascii=False), encoding="utf-8")

    @classmethod
    def load(cls, path: str | Path) -> "CharTokenizer":
        return cls.from_dict(json.loads(Path(path).read_text(encoding="utf-8")))

    def __repr__(self) -> str:
        return f"CharTokenizer(vocab_size={self.vocab_size})"
