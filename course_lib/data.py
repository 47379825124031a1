"""The bundled corpora, train/val splits and batches.

The corpora ship inside the package (``course_lib/corpora``), so the course
works offline. Each is verified against its SHA-256 on load; the download URL
is kept for readers who want a fresh copy (:func:`download`).

Shapes: B batch size, T block size (context length).
"""
from __future__ import annotations

import hashlib
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import torch

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
        url="https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt",
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
            "or was edited. Reinstall course_lib (pip install --force-reinstall course_lib) "
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


def read_text_file(path: str | Path) -> str:
    """Your own training text: a UTF-8 file, read whole. Clear errors for a missing file, an
    empty one, and bytes that are not UTF-8 (with where they are)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no such text file: {path}" + (" (it is a folder)" if path.is_dir() else ""))
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        column = e.start - (raw.rfind(b"\n", 0, e.start) + 1) + 1
        raise ValueError(
            f"{path} is not UTF-8 text: byte 0x{raw[e.start]:02x} at offset {e.start} (line {line}, column "
            f"{column}) cannot be decoded. Save the file as UTF-8 (e.g. iconv -f latin1 -t utf-8)."
        ) from None
    if not text.strip():
        raise ValueError(f"{path} is empty: give a text to train on")
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


def train_val_split(data: torch.Tensor, train_fraction: float = 0.9) -> tuple[torch.Tensor, torch.Tensor]:
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
            raise ValueError(f"data has {len(data)} tokens, fewer than block_size + 1 = {block_size + 1}")

    def __len__(self) -> int:
        return (len(self.data) - self.block_size - 1) // self.stride + 1

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        if not 0 <= i < len(self):
            raise IndexError(i)
        start = i * self.stride
        chunk = self.data[start : start + self.block_size + 1]
        return chunk[:-1], chunk[1:]
