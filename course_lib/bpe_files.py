"""Published BPE vocabularies on disk: GPT-2's ``vocab.json`` + ``merges.txt`` and tiktoken's
``.tiktoken`` rank files (chapters 9 and 13). :class:`course_lib.bpe.BPETokenizer` builds a
tokenizer from what these readers return (``from_gpt2_files``, ``from_tiktoken``).
"""
from __future__ import annotations

import binascii
import gzip
import json
import os
from pathlib import Path

import regex

_BASE64 = regex.compile(rb"[A-Za-z0-9+/]*={0,2}")
# cl100k_base's special tokens and their ids: tiktoken keeps them in its code, not in the rank file.
CL100K_SPECIAL_TOKENS = {"<|endoftext|>": 100257, "<|fim_prefix|>": 100258,
                         "<|fim_middle|>": 100259, "<|fim_suffix|>": 100260,
                         "<|endofprompt|>": 100276}


# --- GPT-2's files store bytes as printable characters -----------------------------------------


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible map from the 256 bytes to printable characters (used in its files)."""
    bs = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("¡"), ord("¬") + 1))
        + list(range(ord("®"), ord("ÿ") + 1))
    )
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
        raise ValueError(f"{where}: {token!r} holds the character {e.args[0]!r}, which is not one "
                         "of GPT-2's 256 byte characters: is this a GPT-2 byte-level BPE "
                         "file?") from None


def read_gpt2_files(vocab_json: str | os.PathLike, merges_txt: str | os.PathLike,
                    special_tokens=()):
    """GPT-2's ``vocab.json`` (token -> id) and ``merges.txt`` (one ``left right`` pair a line) ->
    ``(vocab, merges, specials)``: ids -> bytes, the merged pairs of bytes in order, and the
    ``special_tokens`` found in ``vocab.json`` -> their ids (they are left out of ``vocab``)."""
    byte_decoder = {c: b for b, c in bytes_to_unicode().items()}
    try:
        encoder = json.loads(Path(vocab_json).read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ValueError(f"{vocab_json}: not valid JSON (line {e.lineno}, column {e.colno}: "
                         f"{e.msg})") from None
    if not isinstance(encoder, dict):
        raise ValueError(f"{vocab_json}: expected a JSON object mapping tokens to ids")
    specials = {s: encoder[s] for s in special_tokens if s in encoder}
    vocab = {int(i): _gpt2_bytes(t, byte_decoder, f"{vocab_json}") for t,
             i in encoder.items() if t not in specials}
    merges = []
    for lineno, line in enumerate(Path(merges_txt).read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip() or (lineno == 1 and line.startswith("#version")):
            continue
        parts = line.split(" ")
        if len(parts) != 2 or not all(parts):
            raise ValueError(f"{merges_txt}, line {lineno}: expected two tokens separated by one "
                             f"space, got {line!r:.80}")
        merges.append(tuple(_gpt2_bytes(p, byte_decoder, f"{merges_txt}, line {lineno}")
                            for p in parts))
    return vocab, merges, specials


# --- tiktoken's rank files --------------------------------------------------------------------


def read_tiktoken_ranks(path: str | os.PathLike) -> dict[bytes, int]:
    """A ``.tiktoken`` file (``base64(token) rank`` per line, gzipped or not) -> ``{token bytes:
    rank}``."""
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
            raise ValueError(f"{path}, line {lineno}: expected 'base64-token rank', got "
                             f"{line[:80]!r}") from None
    return ranks
