import hashlib

import pytest
import torch

from course_lib import data


def test_bundled_corpora_match_their_checksums_and_facts():
    text = data.load_text("tinyshakespeare")
    assert len(text) == 1_115_394
    assert len(set(text)) == 65
    names = data.load_names()
    assert len(names) == 32_033 and names[0] == "emma"


def test_checksum_matches_shared_sums():
    # The SHA-256 kept in code is the one of the file shipped in the package.
    for corpus in data.CORPORA.values():
        digest = hashlib.sha256(data.corpus_path(corpus.name).read_bytes()).hexdigest()
        assert digest == corpus.sha256
        assert corpus.url.startswith("https://")


def test_corrupt_corpus_is_a_clear_error(tmp_path):
    bad = tmp_path / "input.txt"
    bad.write_text("not shakespeare")
    with pytest.raises(data.CorpusChecksumError, match="SHA-256.*corrupt.*download"):
        data.load_text("tinyshakespeare", path=bad)


def test_missing_corpus_file_and_unknown_name(tmp_path):
    with pytest.raises(FileNotFoundError, match="download"):
        data.load_text("tinyshakespeare", path=tmp_path / "nope.txt")
    with pytest.raises(ValueError, match="unknown corpus 'wiki'.*names"):
        data.load_text("wiki")


def test_train_val_split_is_contiguous_90_10():
    d = torch.arange(100)
    train, val = data.train_val_split(d)
    assert len(train) == 90 and len(val) == 10
    assert torch.equal(torch.cat([train, val]), d)
    with pytest.raises(ValueError):
        data.train_val_split(d, 1.5)


def test_get_batch_targets_are_inputs_shifted_by_one_and_reproducible():
    d = torch.arange(1000)
    x, y = data.get_batch(d, block_size=8, batch_size=4, generator=torch.Generator().manual_seed(1))
    assert x.shape == y.shape == (4, 8)
    assert torch.equal(y, x + 1)  # for arange, "next token" is +1
    x2, _ = data.get_batch(d, 8, 4, generator=torch.Generator().manual_seed(1))
    assert torch.equal(x, x2)
    with pytest.raises(ValueError, match="block_size"):
        data.get_batch(torch.arange(5), block_size=8, batch_size=2)


def test_strided_windows_tile_the_data():
    d = torch.arange(50)
    ds = data.StridedWindows(d, block_size=8)
    assert len(ds) == 6  # starts 0, 8, ..., 40 (41 + 8 <= 50)
    x, y = ds[1]
    assert torch.equal(x, torch.arange(8, 16)) and torch.equal(y, torch.arange(9, 17))
    last_x, last_y = ds[len(ds) - 1]
    assert last_y[-1] <= 49
    overlapping = data.StridedWindows(d, block_size=8, stride=1)
    assert len(overlapping) == 50 - 8
    with pytest.raises(IndexError):
        ds[len(ds)]
