"""The bundled corpora, train/val splits and batches.

The corpora ship inside the package (``course_lib/corpora``), so the course
works offline. Each is verified against its SHA-256 on load; the download URL
is kept for readers who want a fresh copy (:func:`download`).

Shapes: B batch size, T block size (context length).
"""
from __future__ import annotations

import hashlib
import re
import sys
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import torch

from .tokenizers import CharTokenizer
from .utils import DEFAULT_SEED, IGNORE_INDEX

CORPUS_DIR = Path(__file__).resolve().parent / "corpora"


@dataclass(frozen=True)
class Corpus:
    name: str
    filename: str
    url: str
    sha256: str
    credit: str


CORPORA = {
    "tinyshakespeare": Corpus(
        name="tinyshakespeare",
        filename="tinyshakespeare.txt",
        url="https://raw.githubusercontent.com/karpathy/char-rnn/master/data/"
            "tinyshakespeare/input.txt",
        sha256="86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed",
        credit="Shakespeare's plays (public domain), as collected in karpathy/char-rnn (MIT)",
    ),
    "names": Corpus(
        name="names",
        filename="names.txt",
        url="https://raw.githubusercontent.com/karpathy/makemore/master/names.txt",
        sha256="0a30b5557f192f32ab962680889aac5f6fda0f4cecf40a6d0b5694f58ea8cc4d",
        credit="32,033 common US baby names of 2018, from karpathy/makemore (MIT)",
    ),
}


class CorpusChecksumError(ValueError):
    """A corpus file's bytes do not match the SHA-256 the course was written against."""


def _corpus(name: str) -> Corpus:
    if name not in CORPORA:
        raise ValueError(f"unknown corpus {name!r}; choose one of {sorted(CORPORA)}")
    return CORPORA[name]


def sha256_of(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def verify(path: str | Path, expected_sha256: str) -> None:
    """Raise :class:`CorpusChecksumError` if the file's SHA-256 is not the expected one."""
    actual = sha256_of(path)
    if actual != expected_sha256:
        raise CorpusChecksumError(
            f"{path} has SHA-256 {actual}, expected {expected_sha256}: the file is corrupt "
            "or was edited. Reinstall course_lib from the course's repository, as the chapters' "
            "setup cell does (pip install --force-reinstall git+<the course repository's URL>), "
            "or fetch a fresh copy with course_lib.data.download(name, path)."
        )


def corpus_path(name: str = "tinyshakespeare") -> Path:
    return CORPUS_DIR / _corpus(name).filename


def load_text(name: str = "tinyshakespeare", path: str | Path | None = None) -> str:
    """Return a bundled corpus as one string, after checking its SHA-256.

    ``path`` reads the corpus from another file (e.g. a fresh download) and
    checks it against the same checksum.
    """
    corpus = _corpus(name)
    path = Path(path) if path is not None else corpus_path(name)
    if not path.exists():
        raise FileNotFoundError(
            f"corpus file {path} is missing; reinstall course_lib or run "
            f"course_lib.data.download({name!r}, {str(path)!r})"
        )
    verify(path, corpus.sha256)
    return path.read_text(encoding="utf-8")


# Byte-order marks of the encodings a text editor may save in; UTF-32's come first, since
# UTF-32-LE's begins with UTF-16-LE's.
BOMS = [(b"\xff\xfe\x00\x00", "UTF-32-LE"), (b"\x00\x00\xfe\xff", "UTF-32-BE"),
        (b"\xff\xfe", "UTF-16-LE"), (b"\xfe\xff", "UTF-16-BE")]
# Control characters other than those plain text uses (tab, newline, vertical tab, form feed,
# carriage return).
STRAY_CONTROL = re.compile("[\x00-\x08\x0e-\x1f\x7f]")
MAX_CONTROL_SHARE = 0.001  # more stray control characters than 1 in 1,000: not a text


# The largest text read whole into memory: 1 GiB (tiny Shakespeare is 1 MB). Tokenized, a text
# takes about 8 bytes per token more (int64 ids), so a larger one would exhaust a laptop's memory.
MAX_TEXT_BYTES = 2**30
READ_CHUNK = 2**20


def _too_large(name: str) -> ValueError:
    return ValueError(f"{name} is larger than {MAX_TEXT_BYTES / 2**30:g} GiB, the limit of a "
                      "training text (it is read whole into memory, and its token ids take 8 bytes "
                      "each): train on a part of it, e.g. head -c 500M big.txt > part.txt")


def read_bounded(f, name: str) -> bytes:
    """The bytes of ``f`` (a file, a pipe, a device) read in chunks: a ValueError as soon as they
    pass :data:`MAX_TEXT_BYTES`, or hold a NUL byte (binary data: an endless device such as
    /dev/zero is refused at its first chunk instead of filling the memory)."""
    chunks, size = [], 0
    while chunk := f.read(READ_CHUNK):
        chunks.append(chunk)
        size += len(chunk)
        if b"\x00" in chunk:
            # raises: not text (counting the NUL bytes read so far)
            decode_text(b"".join(chunks), name)
        if size > MAX_TEXT_BYTES:
            raise _too_large(name)
    return b"".join(chunks)


def read_text_file(path: str | Path) -> str:
    """Your own training text: a UTF-8 file read whole, or standard input for ``"-"`` (a pipe,
    e.g. ``cat a.txt b.txt | python -m course_lib train --text -``). Clear errors for a missing
    file, an empty one, another encoding (UTF-16 and UTF-32 are named by their byte-order mark),
    binary data and bytes that are not UTF-8 (with where they are), and a text over
    :data:`MAX_TEXT_BYTES` (checked before reading it, or while reading a pipe or device)."""
    if str(path) == "-":
        return decode_text(read_bounded(sys.stdin.buffer, "standard input"), "standard input")
    path = Path(path)
    if path.is_dir():
        raise FileNotFoundError(f"no such text file: {path} (it is a folder)")
    if not path.exists():
        raise FileNotFoundError(f"no such text file: {path}")
    if path.is_file() and path.stat().st_size > MAX_TEXT_BYTES:
        raise _too_large(str(path))
    with open(path, "rb") as f:  # a pipe such as /dev/stdin, or a device, is read in bounded chunks
        raw = f.read(MAX_TEXT_BYTES + 1) if path.is_file() else read_bounded(f, str(path))
    if len(raw) > MAX_TEXT_BYTES:  # a file that grew since its size was checked
        raise _too_large(str(path))
    return decode_text(raw, str(path))


def _where(raw: bytes, offset: int) -> str:
    line = raw.count(b"\n", 0, offset) + 1
    column = offset - (raw.rfind(b"\n", 0, offset) + 1) + 1
    return f"offset {offset} (line {line}, column {column})"


def decode_text(raw: bytes, name: str) -> str:
    """The text of ``raw`` (the bytes of ``name``), or a ValueError that says what was found
    instead of UTF-8 text, and where."""
    for bom, encoding in BOMS:
        if raw.startswith(bom):
            raise ValueError(f"{name} is {encoding} text (it starts with the {encoding} byte-order "
                             f"mark), not UTF-8: convert it, e.g. iconv -f {encoding[:6]} -t UTF-8 "
                             "in.txt > out.txt")
    nul, nuls = raw.find(b"\x00"), raw.count(b"\x00")
    if nul >= 0:
        raise ValueError(f"{name} is not text: it holds {nuls:,} NUL bytes, the first at "
                         f"{_where(raw, nul)}; it looks like a binary file (an archive, an image, "
                         "a program) or UTF-16 text without a byte-order mark. Give a plain UTF-8 "
                         "text file")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(
            f"{name} is not UTF-8 text: byte 0x{raw[e.start]:02x} at {_where(raw, e.start)} cannot "
            "be decoded. Save the file as UTF-8 (e.g. iconv -f latin1 -t utf-8 for a Latin-1 "
            "file)."
        ) from None
    if not text.strip():
        raise ValueError(f"{name} is empty: give a text to train on")
    controls = len(STRAY_CONTROL.findall(text))
    if controls > MAX_CONTROL_SHARE * len(text):
        first = STRAY_CONTROL.search(text).start()
        raise ValueError(f"{name} is not text: {controls:,} of its {len(text):,} characters are "
                         f"control characters, the first {text[first]!r} at character {first} "
                         f"(line {text.count(chr(10), 0, first) + 1}). Give a plain UTF-8 text "
                         "file")
    return text


def load_names() -> list[str]:
    """The names corpus as a list of lowercase names."""
    return load_text("names").split()


def download(name: str, dest: str | Path) -> Path:
    """Download a fresh copy of a corpus to ``dest`` and verify its checksum (needs a network)."""
    corpus = _corpus(name)
    dest = Path(dest)
    tmp = dest.with_name(dest.name + ".part")
    urllib.request.urlretrieve(corpus.url, tmp)
    verify(tmp, corpus.sha256)
    tmp.replace(dest)
    return dest


def train_val_split(data: torch.Tensor,
                    train_fraction: float = 0.9) -> tuple[torch.Tensor, torch.Tensor]:
    """Split a 1-D token tensor into its first ``train_fraction`` and the rest (no shuffling:
    the validation text is a contiguous, unseen stretch)."""
    if not 0.0 < train_fraction < 1.0:
        raise ValueError(f"train_fraction must be in (0, 1), got {train_fraction}")
    n = int(train_fraction * len(data))
    return data[:n], data[n:]


def get_batch(
    data: torch.Tensor,
    block_size: int,
    batch_size: int,
    generator: torch.Generator | None = None,
    device: str | torch.device = "cpu",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Random windows of a 1-D token tensor.

    Returns ``x`` (B, T) and ``y`` (B, T) where ``y`` is ``x`` shifted left by
    one: ``y[b, t]`` is the token that follows ``x[b, :t+1]`` (teacher forcing).
    Drawing from ``generator`` makes the batches reproducible.
    """
    if len(data) <= block_size:
        raise ValueError(
            f"data has {len(data)} tokens but a window needs block_size + 1 = {block_size + 1}; "
            "use a smaller block_size or more text"
        )
    starts = torch.randint(len(data) - block_size, (batch_size,), generator=generator)
    x = torch.stack([data[i : i + block_size] for i in starts.tolist()])
    y = torch.stack([data[i + 1 : i + 1 + block_size] for i in starts.tolist()])
    return x.to(device), y.to(device)


class StridedWindows(torch.utils.data.Dataset):
    """Fixed windows over a 1-D token tensor, every ``stride`` tokens.

    Item ``i`` is ``(x, y)``, each of shape (T,), taken from position
    ``i * stride``. With ``stride == block_size`` the windows tile the text
    without overlap: every token is seen exactly once per epoch.
    """

    def __init__(self, data: torch.Tensor, block_size: int, stride: int | None = None):
        self.data = data
        self.block_size = block_size
        self.stride = stride or block_size
        if self.stride < 1:
            raise ValueError(f"stride must be >= 1, got {self.stride}")
        if len(data) <= block_size:
            raise ValueError(f"data has {len(data)} tokens, fewer than block_size + 1 = "
                             f"{block_size + 1}")

    def __len__(self) -> int:
        return (len(self.data) - self.block_size - 1) // self.stride + 1

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        if not 0 <= i < len(self):
            raise IndexError(i)
        start = i * self.stride
        chunk = self.data[start : start + self.block_size + 1]
        return chunk[:-1], chunk[1:]


# --- sequences of different lengths (chapter 10) ---------------------------------------------


def pad_batch(seqs, pad_id: int, side: str = "right", length: int | None = None,
              check_collision: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """Stack sequences of different lengths into one (B, T) batch.

    ``seqs`` is a list of B sequences of token ids (lists or 1-D tensors). Each is padded with
    ``pad_id`` to ``length`` (default: the longest one), after its tokens (``side="right"``,
    for training) or before them (``side="left"``, for generation: every row then ends in the
    last column). Returns ``ids`` (B, T), a long tensor, and ``mask`` (B, T), a bool tensor that
    is True on real tokens and False on pads.

    A ``pad_id`` that is also a real token of some sequence is refused (``check_collision``):
    anything that later finds the pads by their value would drop that token too. Pad targets
    with ``IGNORE_INDEX`` (-100), which is never a token.
    """
    if side not in ("right", "left"):
        raise ValueError(f"side must be 'right' (training) or 'left' (generation), got {side!r}")
    if seqs is None or len(seqs) == 0:
        raise ValueError("pad_batch got an empty list of sequences: a batch needs at least one "
                         "sequence")
    rows = [s.tolist() if isinstance(s, torch.Tensor) else list(s) for s in seqs]
    for i, row in enumerate(rows):
        if len(row) == 0:
            raise ValueError(f"sequence {i} is empty: every sequence needs at least one token "
                             "(e.g. a begin token); drop empty ones before padding")
        if check_collision and pad_id in row:
            raise ValueError(f"pad_id {pad_id} is also a real token of sequence {i} (at position "
                             f"{row.index(pad_id)}): choose a pad id that no sequence uses, e.g. a "
                             "dedicated <pad> token, or IGNORE_INDEX (-100) for targets")
    longest = max(len(r) for r in rows)
    T = longest if length is None else length
    if T < longest:
        raise ValueError(f"length {T} is shorter than the longest sequence ({longest} tokens)")
    ids = torch.full((len(rows), T), pad_id, dtype=torch.long)
    mask = torch.zeros(len(rows), T, dtype=torch.bool)
    for i, row in enumerate(rows):
        where = slice(0, len(row)) if side == "right" else slice(T - len(row), T)
        ids[i, where] = torch.tensor(row, dtype=torch.long)
        mask[i, where] = True
    return ids, mask


def pack_sequences(seqs, block_size: int,
                   pad_id: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Pack whole sequences one after another into windows of ``block_size`` tokens, the
    alternative to padding each one: a window is filled with sequences, in order, until the
    next one does not fit, then padded.

    Returns ``ids`` (B, T), ``segments`` (B, T) (1, 2, ... for the sequences of a window, 0 on
    pads) and ``positions`` (B, T) (restarting at 0 in every sequence). The block-diagonal mask
    ``attention.segment_mask(segments)`` keeps each sequence from seeing its neighbours.
    """
    if seqs is None or len(seqs) == 0:
        raise ValueError("pack_sequences got an empty list of sequences")
    rows = [s.tolist() if isinstance(s, torch.Tensor) else list(s) for s in seqs]
    windows: list[list[list[int]]] = [[]]
    for i, row in enumerate(rows):
        if not 0 < len(row) <= block_size:
            raise ValueError(f"sequence {i} has {len(row)} tokens; each must have 1 to block_size "
                             f"({block_size})")
        if sum(map(len, windows[-1])) + len(row) > block_size:
            windows.append([])
        windows[-1].append(row)
    ids = torch.full((len(windows), block_size), pad_id, dtype=torch.long)
    segments = torch.zeros(len(windows), block_size, dtype=torch.long)
    positions = torch.zeros(len(windows), block_size, dtype=torch.long)
    for b, window in enumerate(windows):
        start = 0
        for s, row in enumerate(window, start=1):
            ids[b, start : start + len(row)] = torch.tensor(row)
            segments[b, start : start + len(row)] = s
            positions[b, start : start + len(row)] = torch.arange(len(row))
            start += len(row)
    return ids, segments, positions


class NamesDataset:
    """The names corpus as one sequence per name: ``<bos> e m m a <eos>``.

    Its tokenizer is a :class:`~course_lib.tokenizers.CharTokenizer` with three special tokens:
    ids 0 ``<pad>``, 1 ``<bos>`` (begin), 2 ``<eos>`` (end), then the letters in alphabetical
    order. The names are shuffled (with ``seed``) and split into train and validation names.
    :meth:`batch` draws random names and pads them into (x, y) where ``y`` is ``x`` shifted by
    one, with ``IGNORE_INDEX`` at padded targets so the loss skips them.
    """

    PAD, BOS, EOS = "<pad>", "<bos>", "<eos>"

    def __init__(self, names: list[str] | None = None, train_fraction: float = 0.9,
                 seed: int = DEFAULT_SEED):
        names = load_names() if names is None else list(names)
        if not names:
            raise ValueError("NamesDataset needs at least one name")
        if not 0.0 < train_fraction < 1.0:
            raise ValueError(f"train_fraction must be in (0, 1), got {train_fraction}")
        self.tokenizer = CharTokenizer.from_text("".join(names),
                                                 specials=(self.PAD, self.BOS, self.EOS))
        # the letters; id -> token
        self.chars, self.itos = self.tokenizer.chars, self.tokenizer.itos
        self.pad_id, self.bos_id, self.eos_id = (self.tokenizer.special_ids[s]
                                                 for s in (self.PAD, self.BOS, self.EOS))
        order = torch.randperm(len(names), generator=torch.Generator().manual_seed(seed)).tolist()
        shuffled = [names[i] for i in order]
        n = max(1, int(train_fraction * len(names)))
        self.names = {"train": shuffled[:n], "val": shuffled[n:] or shuffled[:1]}
        self.max_len = max(len(name) for name in names) + 2  # with <bos> and <eos>

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.vocab_size

    def encode(self, name: str) -> list[int]:
        """'emma' -> [<bos>, e, m, m, a, <eos>] as ids."""
        return [self.bos_id] + self.tokenizer.encode(name) + [self.eos_id]

    def decode(self, ids) -> str:
        """Ids -> the name: the begin and pad tokens are skipped, and the name ends at <eos>."""
        ids = ids.tolist() if isinstance(ids, torch.Tensor) else list(ids)
        if self.eos_id in ids:
            ids = ids[: ids.index(self.eos_id)]
        return self.tokenizer.decode(ids, skip_special=True)

    def batch(self, split: str, batch_size: int, generator: torch.Generator | None = None,
              device: str | torch.device = "cpu") -> tuple[torch.Tensor, torch.Tensor,
                                                           torch.Tensor]:
        """``batch_size`` random names of ``split`` -> ``x`` (B, T), ``y`` (B, T), ``mask`` (B, T),
        right-padded to the longest name drawn, T = its length + 1. ``y[b, t]`` is the token after
        ``x[b, :t+1]``, and ``IGNORE_INDEX`` where ``x[b, t]`` is a pad; ``mask`` is True on real
        inputs."""
        if split not in self.names:
            raise ValueError(f"split must be 'train' or 'val', got {split!r}")
        names = self.names[split]
        picks = torch.randint(len(names), (batch_size,), generator=generator).tolist()
        seqs = [self.encode(names[i]) for i in picks]
        x, mask = pad_batch([s[:-1] for s in seqs], self.pad_id)
        y, _ = pad_batch([s[1:] for s in seqs], IGNORE_INDEX)
        return x.to(device), y.to(device), mask.to(device)

    def batch_fn(self, batch_size: int, device: str | torch.device = "cpu"):
        """A ``batch_fn(split, generator) -> (x, y)`` for :class:`course_lib.train.Trainer`."""
        return lambda split, generator: self.batch(split, batch_size, generator, device)[:2]
