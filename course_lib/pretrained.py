"""A pretrained starting point that needs no network (chapter 15).

Fine-tuning starts from a pretrained model. The course ships one, small enough to live in the
package: the ``shakespeare-char-cpu`` preset (4 layers, C=128, 0.8M parameters) trained for its
full 2000 steps on tiny Shakespeare, stored in float16 (1.6 MB instead of 3.2 MB; the model is
float32 again once loaded). :func:`pretrained_checkpoint` checks its SHA-256 before anything uses
it, so a damaged or swapped file is an error, not a silently different model.

The file is produced by ``python -m course_lib.tools pretrained``
(:func:`course_lib.tools.pretrained.train_pretrained`), deterministically: the same seed, data,
AVX2 kernels (the pinned numeric environment of ``course_lib.tools.numerics``) and one thread give
the same bytes on one host, every time; another CPU vendor computes other last bits under the same
pin (``course_lib.tools.op_fingerprints``), so the shipped file, not a re-run, is what every
chapter loads.
Measured: 1,678,351 bytes, about 2 CPU-minutes to make. It is the preset's run with seed 1337: its
validation loss on the whole validation split (``course_lib.losses.sequence_loss``, float16 weights
computed in float32) is 1.864, the one figure the book quotes for this run,
``course_lib.presets.CPU_PRESET_VAL_LOSS`` (tests/test_quoted_figures.py recomputes it).
:func:`course_lib.tools.pretrained.train_pretrained` reports a 50-batch estimate instead (1.860 when
the file was made), and chapter 15's ``course_lib.forgetting.vocab_split_loss`` averages 20 random
batches of 32 windows. A reader can train the same model with
``python -m course_lib train --preset shakespeare-char-cpu --out runs/cpu`` (in float32).
"""
from __future__ import annotations

from pathlib import Path

import torch

from .checkpoint import CheckpointError, load_model, load_tokenizer
from .data import sha256_of

PRESET = "shakespeare-char-cpu"
PRETRAINED_PATH = Path(__file__).parent / "weights" / "shakespeare-char-cpu.pt"
# The SHA-256 of the file written by `python -m course_lib.tools pretrained` (update both together).
PRETRAINED_SHA256 = "c9fbcf3c29cf3c6ce02e55dca56dc0eda18996f71b435d4fa707bfa74f624ed5"
# the thread count the file was produced with (sums depend on it); 1 is also fastest on a busy
# machine
THREADS = 1


def pretrained_checkpoint(path: str | Path = PRETRAINED_PATH,
                          sha256: str = PRETRAINED_SHA256) -> Path:
    """The path of the shipped pretrained checkpoint, after checking its SHA-256."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"the pretrained model {path} is missing from this installation of "
                                "course_lib: reinstall it, or make the file with `python -m "
                                "course_lib.tools pretrained`")
    actual = sha256_of(path)
    if actual != sha256:
        raise CheckpointError(f"{path} has SHA-256 {actual}, not the {sha256} this course_lib was "
                              "released with: the file is damaged or was replaced. Reinstall "
                              "course_lib, or make it again with `python -m course_lib.tools "
                              "pretrained` and update PRETRAINED_SHA256")
    return path


def load_pretrained(device: str | torch.device = "cpu"):
    """``(model, tokenizer)``: the shipped pretrained GPT (float32, eval mode) and its
    character tokenizer (the 65 characters of tiny Shakespeare)."""
    path = pretrained_checkpoint()
    model, ckpt = load_model(path, device)
    return model, load_tokenizer(ckpt, path)
