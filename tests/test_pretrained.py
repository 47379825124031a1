"""course_lib.pretrained: the shipped pretrained model loads offline, only with the right
SHA-256."""
import shutil

import pytest
import torch

from course_lib.checkpoint import CheckpointError, load_checkpoint
from course_lib.data import load_text, sha256_of
from course_lib.finetune import text_loss
from course_lib.pretrained import (PRETRAINED_PATH, PRETRAINED_SHA256, load_pretrained,
                                   pretrained_checkpoint)


def test_the_shipped_file_is_small_and_matches_its_checksum():
    assert PRETRAINED_PATH.stat().st_size < 2_000_000
    assert sha256_of(pretrained_checkpoint()) == PRETRAINED_SHA256
    ckpt = load_checkpoint(PRETRAINED_PATH)
    assert ckpt["model"]["wte.weight"].dtype == torch.float16  # stored in half precision ...


def test_the_pretrained_model_knows_shakespeare():
    model, tokenizer = load_pretrained()
    assert model.wte.weight.dtype == torch.float32  # ... used in float32
    assert tokenizer.vocab_size == 65 and model.config.n_layer == 4
    val = load_text("tinyshakespeare")[-100_000:]  # inside the last 10%: the validation split
    # far below ln(65) = 4.17, a model that knows nothing; the preset reaches about 1.9
    assert text_loss(model, tokenizer, val, batches=4, batch_size=16) < 2.1


def test_a_damaged_or_missing_file_is_refused(tmp_path):
    copy = tmp_path / "model.pt"
    shutil.copy(PRETRAINED_PATH, copy)
    data = bytearray(copy.read_bytes())
    data[len(data) // 2] ^= 0xFF
    copy.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="damaged or was replaced"):
        pretrained_checkpoint(copy)
    with pytest.raises(FileNotFoundError, match="missing"):
        pretrained_checkpoint(tmp_path / "nothing.pt")
