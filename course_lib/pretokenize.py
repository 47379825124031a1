"""Pre-tokenization: the pieces a regular expression cuts a text into before byte-pair encoding.

BPE counts pairs and applies merges only inside these *pre-tokens*, so a token never spans a
word and the space before it (chapter 9). Special tokens such as ``<|endoftext|>`` are cut out
first and never split. Both training (:mod:`course_lib.bpe_train`) and encoding
(:class:`course_lib.bpe.BPETokenizer`) cut the text here, so they always agree.
"""
from __future__ import annotations

import sys
from collections import Counter

import regex

# The pre-tokenizer patterns: GPT-2's (2019) and cl100k's (GPT-3.5/GPT-4, as in tiktoken 0.14).
GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
CL100K_PATTERN = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+"""
    r"""|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
)
PATTERNS = {"gpt2": GPT2_PATTERN, "cl100k": CL100K_PATTERN}
# The same patterns for ASCII text, where \p{L} is [A-Za-z], \p{N} is [0-9] and \s is [ \t\n\v\f\r]:
# the standard library's re runs them about 1.5x faster than the regex package runs the Unicode
# ones, and they cut any ASCII string exactly as the originals do (tests/test_bpe.py checks it).
ASCII_PATTERNS = {
    GPT2_PATTERN: r"""'s|'t|'re|'ve|'m|'ll|'d| ?[A-Za-z]+| ?[0-9]+| ?[^\sA-Za-z0-9]+"""
                  r"""|\s+(?!\S)|\s+""",
}
if sys.version_info >= (3, 11):  # possessive quantifiers
    ASCII_PATTERNS[CL100K_PATTERN] = (
        r"""'(?i:[sdmt]|ll|ve|re)|[^\r\nA-Za-z0-9]?+[A-Za-z]++|[0-9]{1,3}+"""
        r"""| ?[^\sA-Za-z0-9]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
    )


def resolve_pattern(pattern: str) -> str:
    """A pattern name (``"gpt2"``, ``"cl100k"``) or a regular expression -> the expression."""
    return PATTERNS.get(pattern, pattern)


def special_splitter(special_tokens) -> regex.Pattern | None:
    """A regex that finds special tokens, longest first (so an overlapping shorter one never
    wins)."""
    if not special_tokens:
        return None
    alternatives = sorted(special_tokens, key=lambda s: (-len(s), s))
    return regex.compile("(" + "|".join(regex.escape(s) for s in alternatives) + ")")


def check_special_tokens(special_tokens) -> list[str]:
    """The special tokens as a list without repeats; each must be a non-empty string (an empty
    one would match between every two bytes)."""
    if isinstance(special_tokens, str):
        raise ValueError("special_tokens must be a list of strings, got the string "
                         f"{special_tokens!r}: write [{special_tokens!r}]")
    special_tokens = list(dict.fromkeys(special_tokens))
    for st in special_tokens:
        if not isinstance(st, str) or not st:
            raise ValueError(f"special tokens must be non-empty strings, got {st!r}")
    return special_tokens


def pretoken_counts(text: str, special_tokens=(), pattern: str = "gpt2") -> Counter:
    """How often each pre-token occurs in ``text`` (special tokens are cut out first and not
    counted)."""
    pat = regex.compile(resolve_pattern(pattern))
    splitter = special_splitter(special_tokens)
    # [::2]: drop the special tokens themselves
    segments = splitter.split(text)[::2] if splitter else [text]
    counts = Counter()
    for segment in segments:
        counts.update(pat.findall(segment))
    return counts
