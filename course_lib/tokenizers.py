"""Tokenizers: text <-> lists of integer ids, behind one small interface.

Every tokenizer has ``encode(str) -> list[int]``, ``decode(ids) -> str``, ``vocab_size``,
``to_dict()`` (a JSON-able description carrying its ``"type"``) and two class methods:
``from_dict(d)`` and ``train(text, **options)`` (build one from a training text).
``@register_tokenizer("name")`` puts a class in the registry, so that checkpoints, the
CLI and ``Trainer.resume`` can rebuild any tokenizer from its dict without knowing its
class: :func:`tokenizer_from_dict` and :func:`train_tokenizer`.

``CharTokenizer`` maps each distinct character to an id (chapter 1), after optional special
tokens such as ``<pad>``, ``<bos>``, ``<eos>`` (chapters 10 and 11); ``course_lib.bpe`` adds
byte-level BPE (chapter 9).
"""
from __future__ import annotations

import json
import numbers
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
            raise ValueError(f"tokenizer type {name!r} is already registered to "
                             f"{TOKENIZERS[name].__name__}")
        for method in ("encode", "decode", "to_dict", "from_dict", "train"):
            if not callable(getattr(cls, method, None)):
                raise TypeError(f"{cls.__name__} cannot be a tokenizer: it has no {method}()")
        cls.type_name = name
        TOKENIZERS[name] = cls
        return cls
    return register


def _tokenizer_class(name) -> type:
    if name not in TOKENIZERS:
        raise ValueError(f"unknown tokenizer type {name!r}; known types: "
                         f"{', '.join(sorted(TOKENIZERS))}. Import the module that registers it "
                         "(course_lib does so for its own).")
    return TOKENIZERS[name]


# Types that are gone, still read from older checkpoints: old type -> its description today.
# "seq2seq-char" (chapter 11's dates tokenizer until the tokenizers were merged) is a CharTokenizer
# with the specials <pad>, <s>, </s>: ids 0, 1, 2, then the characters, as it always had.
RENAMED_TYPES = {"seq2seq-char": lambda d: {**d, "type": "char",
                                            "specials": ["<pad>", "<s>", "</s>"]}}


def tokenizer_from_dict(d: dict) -> Tokenizer:
    """Rebuild a tokenizer from its ``to_dict()``, whatever its class."""
    if not isinstance(d, dict) or "type" not in d:
        raise ValueError(f"a tokenizer description is a dict with a 'type' key, got {d!r:.80}")
    if d["type"] in RENAMED_TYPES:
        d = RENAMED_TYPES[d["type"]](d)
    return _tokenizer_class(d["type"]).from_dict(d)


def train_tokenizer(spec: dict | str, text: str) -> Tokenizer:
    """Build a tokenizer from a training ``text``. ``spec`` is a type name (``"char"``) or a
    dict ``{"type": "bpe", "vocab_size": 512}``: its other keys are passed to ``train``."""
    spec = {"type": spec} if isinstance(spec, str) else dict(spec)
    cls = _tokenizer_class(spec.pop("type", None))
    return cls.train(text, **spec)


def save_tokenizer_file(tokenizer: Tokenizer, path: str | Path) -> None:
    """Write ``tokenizer.to_dict()`` to a JSON file (checkpoints store the same dict)."""
    Path(path).write_text(json.dumps(tokenizer.to_dict(), ensure_ascii=False), encoding="utf-8")


def load_tokenizer_file(path: str | Path) -> Tokenizer:
    """The tokenizer in a JSON file written by :func:`save_tokenizer_file`, whatever its type.
    (A checkpoint's tokenizer comes back with ``course_lib.checkpoint.load_tokenizer``.)"""
    return tokenizer_from_dict(json.loads(Path(path).read_text(encoding="utf-8")))


def check_token_id(i, vocab_size: int) -> int:
    """``i`` as an int if it is a token id in [0, vocab_size), else a ValueError that says why
    (a float such as 1.7 is never silently rounded to an id)."""
    if not isinstance(i, numbers.Integral) or isinstance(i, bool):
        raise ValueError(f"token ids must be integers, got {i!r} of type {type(i).__name__}")
    if not 0 <= i < vocab_size:
        raise ValueError(f"unknown token id {int(i)}: ids run from 0 to {vocab_size - 1} for this "
                         "tokenizer")
    return int(i)


def unwritable(tokenizer: Tokenizer, text: str) -> str:
    """The distinct characters of ``text`` that ``tokenizer`` cannot encode, in sorted order (''
    when it encodes them all). Where a fixed text (a task, the chat conversations, held-out
    Shakespeare) meets a model's own tokenizer, the callers say which characters are missing and
    what to do, instead of the encoder's advice to edit a text the user never gave."""
    chars = sorted(set(text))

    def encodes(s: str) -> bool:
        try:
            tokenizer.encode(s)
        except (ValueError, KeyError):
            return False
        return True

    return "" if encodes("".join(chars)) else "".join(c for c in chars if not encodes(c))


def describe_chars(chars: str, most: int = 12) -> str:
    """``chars`` for a message, whole: ``'G', 'K' and 'Q'``, the first ``most`` then how many
    more."""
    shown = [repr(c) for c in chars[:most]]
    if len(chars) > most:
        return ", ".join(shown) + f" and {len(chars) - most} more"
    return shown[0] if len(shown) == 1 else ", ".join(shown[:-1]) + " and " + shown[-1]


@register_tokenizer("char")
class CharTokenizer:
    """A character-level tokenizer: one id per character, plus optional special tokens.

    The ids follow one rule: the special tokens first, in the order given (ids 0, 1, ...),
    then the characters in the order given (``from_text`` sorts them). ``encode`` maps
    characters only, so a special token never comes out of a text (the code that builds a
    sequence adds ``<bos>``, ``<eos>`` or padding itself); ``decode`` writes a special token
    by its name, or leaves it out with ``skip_special=True``.

    >>> tok = CharTokenizer.from_text("hello")
    >>> tok.encode("hell")
    [1, 0, 2, 2]
    >>> tok.decode([1, 0, 2, 2, 3])
    'hello'
    >>> tok = CharTokenizer("ab", specials=("<pad>", "<bos>", "<eos>"))
    >>> tok.encode("ba"), tok.decode([1, 3, 4, 2]), tok.decode([1, 3, 4, 2], skip_special=True)
    ([4, 3], '<bos>ab<eos>', 'ab')
    """

    def __init__(self, chars: list[str] | str, specials: tuple[str, ...] | list[str] = ()):
        # a string is a sequence of characters: "<pad>" would be 5 specials
        if isinstance(specials, str):
            raise ValueError("specials must be a list of non-empty strings such as ('<pad>', "
                             f"'<bos>'), got the string {specials!r}: write ({specials!r},)")
        chars, specials = list(chars), tuple(specials)
        if any(not isinstance(s, str) or not s for s in specials):
            raise ValueError("specials must be a list of non-empty strings such as ('<pad>', "
                             f"'<bos>'), got {specials!r}")
        if not chars:
            raise ValueError("a tokenizer needs at least one character; the text was empty")
        if any(not isinstance(c, str) or len(c) != 1 for c in chars):
            raise ValueError("every vocabulary entry must be a single character")
        if len(set(chars)) != len(chars):
            raise ValueError("characters must be distinct")
        if len(set(specials)) != len(specials) or set(specials) & set(chars):
            raise ValueError("special tokens must be distinct and none may be one of the "
                             f"characters, got {specials!r}")
        self.chars = chars  # the characters alone, without the special tokens
        self.specials = specials
        self.special_ids = {s: i for i, s in enumerate(specials)}  # special token -> id
        # id -> its string (a special token's name or a character)
        self.itos = list(specials) + chars
        self.stoi = {c: i for i, c in enumerate(chars, start=len(specials))}  # character -> id

    @classmethod
    def from_text(cls, text: str, specials=()) -> "CharTokenizer":
        """Build the vocabulary from every distinct character of ``text``, in sorted order."""
        if not text:
            raise ValueError("cannot build a tokenizer from empty text: pass the training corpus")
        return cls(sorted(set(text)), specials)

    @classmethod
    def train(cls, text: str, specials=()) -> "CharTokenizer":
        """The tokenizer interface's name for :meth:`from_text`."""
        return cls.from_text(text, specials)

    @property
    def vocab_size(self) -> int:
        return len(self.itos)

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

    def decode(self, ids, skip_special: bool = False) -> str:
        ids = ids.tolist() if hasattr(ids, "tolist") else list(ids)
        first = len(self.specials) if skip_special else 0
        try:
            if min(ids, default=0) >= 0:  # a negative id would silently index the list from its end
                return "".join([self.itos[i] for i in ids if i >= first])
        except (IndexError, TypeError):
            pass
        for i in ids:  # find the bad id and say what is wrong with it
            check_token_id(i, self.vocab_size)
        raise ValueError(f"cannot decode {ids!r:.80}")

    def to_dict(self) -> dict:
        d = {"type": "char", "chars": "".join(self.chars)}
        # without specials the dict is what it always was: old checkpoints stay equal
        if self.specials:
            d["specials"] = list(self.specials)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "CharTokenizer":
        if d.get("type") != "char" or "chars" not in d:
            raise ValueError(f"not a CharTokenizer description: {sorted(d)}")
        return cls(d["chars"], d.get("specials", ()))

    def save(self, path: str | Path) -> None:
        save_tokenizer_file(self, path)

    @classmethod
    def load(cls, path: str | Path) -> "CharTokenizer":
        return cls.from_dict(json.loads(Path(path).read_text(encoding="utf-8")))

    def __repr__(self) -> str:
        specials = f", specials={self.specials}" if self.specials else ""
        return f"CharTokenizer(vocab_size={self.vocab_size}{specials})"
