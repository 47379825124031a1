"""Tokenizers: text <-> lists of integer ids, behind one small interface.

Every tokenizer has ``encode(str) -> list[int]``, ``decode(ids) -> str``, ``vocab_size``,
``to_dict()`` (a JSON-able description carrying its ``"type"``) and two class methods:
``from_dict(d)`` and ``train(text, **options)`` (build one from a training text).
``@register_tokenizer("name")`` puts a class in the registry, so that checkpoints, the
CLI and ``Trainer.resume`` can rebuild any tokenizer from its dict without knowing its
class: :func:`tokenizer_from_dict` and :func:`train_tokenizer`.

``CharTokenizer`` maps each distinct character to an id (chapter 1); ``course_lib.bpe``
adds byte-level BPE (chapter 9).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Protocol, runtime_checkable


@runtime_checkable
class Tokenizer(Protocol):
    """What the rest of course_lib needs of a tokenizer."""

    @property
    def vocab_size(self) -> int: ...

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids) -> str: ...

    def to_dict(self) -> dict: ...


TOKENIZERS: dict[str, type] = {}  # "type" in to_dict() -> class


def register_tokenizer(name: str):
    """Class decorator: make ``name`` (the ``"type"`` of ``to_dict()``) rebuild this class."""
    def register(cls):
        if name in TOKENIZERS and TOKENIZERS[name] is not cls:
            raise ValueError(f"tokenizer type {name!r} is already registered to {TOKENIZERS[name].__name__}")
        for method in ("encode", "decode", "to_dict", "from_dict", "train"):
            if not callable(getattr(cls, method, None)):
                raise TypeError(f"{cls.__name__} cannot be a tokenizer: it has no {method}()")
        cls.type_name = name
        TOKENIZERS[name] = cls
        return cls
    return register


def _tokenizer_class(name) -> type:
    if name not in TOKENIZERS:
        raise ValueError(f"unknown tokenizer type {name!r}; known types: {', '.join(sorted(TOKENIZERS))}. "
                         "Import the module that registers it (course_lib does so for its own).")
    return TOKENIZERS[name]


def tokenizer_from_dict(d: dict) -> Tokenizer:
    """Rebuild a tokenizer from its ``to_dict()``, whatever its class."""
    if not isinstance(d, dict) or "type" not in d:
        raise ValueError(f"a tokenizer description is a dict with a 'type' key, got {d!r:.80}")
    return _tokenizer_class(d["type"]).from_dict(d)


def train_tokenizer(spec: dict | str, text: str) -> Tokenizer:
    """Build a tokenizer from a training ``text``. ``spec`` is a type name (``"char"``) or a
    dict ``{"type": "bpe", "vocab_size": 512}``: its other keys are passed to ``train``."""
    spec = {"type": spec} if isinstance(spec, str) else dict(spec)
    cls = _tokenizer_class(spec.pop("type", None))
    return cls.train(text, **spec)


def save_tokenizer(tokenizer: Tokenizer, path: str | Path) -> None:
    Path(path).write_text(json.dumps(tokenizer.to_dict(), ensure_ascii=False), encoding="utf-8")


def load_tokenizer(path: str | Path) -> Tokenizer:
    return tokenizer_from_dict(json.loads(Path(path).read_text(encoding="utf-8")))


def check_token_id(i, vocab_size: int) -> int:
    """``i`` as an int if it is a token id in [0, vocab_size), else a ValueError that says why
    (a float such as 1.7 is never silently rounded to an id)."""
    import numbers

    if not isinstance(i, numbers.Integral) or isinstance(i, bool):
        raise ValueError(f"token ids must be integers, got {i!r} of type {type(i).__name__}")
    if not 0 <= i < vocab_size:
        raise ValueError(f"unknown token id {int(i)}: ids run from 0 to {vocab_size - 1} for this tokenizer")
    return int(i)


@register_tokenizer("char")
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

    @classmethod
    def train(cls, text: str) -> "CharTokenizer":
        """The tokenizer interface's name for :meth:`from_text`."""
        return cls.from_text(text)

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
            return "".join(self.itos[i] for i in ids)
        except (KeyError, TypeError):
            for i in ids:
                check_token_id(i, self.vocab_size)
            raise

    def to_dict(self) -> dict:
        return {"type": "char", "chars": "".join(self.chars)}

    @classmethod
    def from_dict(cls, d: dict) -> "CharTokenizer":
        if d.get("type") != "char" or "chars" not in d:
            raise ValueError(f"not a CharTokenizer description: {sorted(d)}")
        return cls(d["chars"])

    def save(self, path: str | Path) -> None:
        save_tokenizer(self, path)

    @classmethod
    def load(cls, path: str | Path) -> "CharTokenizer":
        return cls.from_dict(json.loads(Path(path).read_text(encoding="utf-8")))

    def __repr__(self) -> str:
        return f"CharTokenizer(vocab_size={self.vocab_size})"
