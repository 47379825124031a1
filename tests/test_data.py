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


# --- padding, packing, names (chapter 10) ---


def test_pad_batch_right_and_left():
    ids, mask = data.pad_batch([[5, 6, 7], [8]], pad_id=0)
    assert ids.tolist() == [[5, 6, 7], [8, 0, 0]] and ids.dtype == torch.long
    assert mask.tolist() == [[True, True, True], [True, False, False]] and mask.dtype == torch.bool
    ids, mask = data.pad_batch([torch.tensor([5, 6, 7]), torch.tensor([8])], pad_id=0, side="left")
    assert ids.tolist() == [[5, 6, 7], [0, 0, 8]]
    assert mask.tolist() == [[True, True, True], [False, False, True]]
    ids, _ = data.pad_batch([[1]], pad_id=-100, length=3)
    assert ids.tolist() == [[1, -100, -100]]


def test_pad_batch_mask_agrees_with_attention_padding_mask():
    from course_lib.attention import padding_mask

    seqs = [[1, 2], [3, 4, 5, 6], [7]]
    lengths = torch.tensor([len(s) for s in seqs])
    for side in ("right", "left"):
        _, mask = data.pad_batch(seqs, 0, side=side)
        assert torch.equal(mask, padding_mask(lengths, 4, side=side))


@pytest.mark.parametrize("seqs, kwargs, message", [
    ([], {}, "empty list of sequences"),
    ([[1, 2], []], {}, "sequence 1 is empty"),
    ([[1, 2], [3, 0]], {}, r"pad_id 0 is also a real token of sequence 1 \(at position 1\)"),
    ([[1, 2]], dict(side="middle"), "side must be 'right'"),
    ([[1, 2, 3]], dict(length=2), "shorter than the longest"),
])
def test_pad_batch_bad_input_is_a_clear_error(seqs, kwargs, message):
    with pytest.raises(ValueError, match=message):
        data.pad_batch(seqs, 0, **kwargs)


def test_pack_sequences_fills_windows_in_order():
    ids, segments, positions = data.pack_sequences([[1, 2], [3, 4, 5], [6, 7, 8, 9]], block_size=6,
                                                   pad_id=0)
    assert ids.tolist() == [[1, 2, 3, 4, 5, 0], [6, 7, 8, 9, 0, 0]]
    assert segments.tolist() == [[1, 1, 2, 2, 2, 0], [1, 1, 1, 1, 0, 0]]
    assert positions.tolist() == [[0, 1, 0, 1, 2, 0], [0, 1, 2, 3, 0, 0]]
    with pytest.raises(ValueError, match="sequence 0 has 7 tokens"):
        data.pack_sequences([[1] * 7], block_size=6, pad_id=0)
    with pytest.raises(ValueError, match="empty list"):
        data.pack_sequences([], 6, 0)


def test_names_dataset_ids_follow_the_documented_rule():
    """Chapter 10's numbers depend on the ids, so derive them from the rule the dataset has always
    documented: 0 <pad>, 1 <bos>, 2 <eos>, then the letters in alphabetical order from 3, for every
    name of the corpus (26 letters: a vocabulary of 29)."""
    ds = data.NamesDataset()
    names = data.load_names()
    letters = sorted(set("".join(names)))
    assert (ds.itos == ["<pad>", "<bos>", "<eos>"] + letters
            and ds.vocab_size == 3 + len(letters) == 29)
    assert (ds.pad_id, ds.bos_id, ds.eos_id) == (0, 1, 2)
    rule = {c: 3 + k for k, c in enumerate(letters)}
    for name in names:
        assert ds.encode(name) == [1] + [rule[c] for c in name] + [2]
    # e is the 5th letter, m the 13th, a the 1st
    assert ds.encode("emma") == [1, 3 + 4, 3 + 12, 3 + 12, 3 + 0, 2]
    assert ds.tokenizer.to_dict() == {"type": "char", "chars": "".join(letters),
                                      "specials": ["<pad>", "<bos>", "<eos>"]}


def test_names_dataset_tokens_and_batches():
    ds = data.NamesDataset()
    assert ds.decode(ds.encode("emma")) == "emma" and ds.decode([1, 3, 2, 4]) == "a"
    # a shuffled split
    assert sorted(ds.names["train"] + ds.names["val"]) == sorted(data.load_names())
    assert len(ds.names["train"]) == 28_829
    x, y, mask = ds.batch("train", 8, torch.Generator().manual_seed(0))
    assert x.shape == y.shape == mask.shape
    assert torch.equal(mask, x != ds.pad_id)  # letters and <bos> are never the pad id
    assert torch.equal(y == -100, ~mask)  # padded targets are left out of the loss
    assert (x[:, 0] == ds.bos_id).all()
    assert ((y == ds.eos_id).sum(1) == 1).all()  # one end per name
    assert torch.equal(y[:, :-1][mask[:, 1:]], x[:, 1:][mask[:, 1:]])  # y is x shifted by one
    x2, _, _ = ds.batch("train", 8, torch.Generator().manual_seed(0))
    assert torch.equal(x, x2)
    with pytest.raises(ValueError, match="unknown character 'é'"):
        ds.encode("émile")
    with pytest.raises(ValueError, match="split"):
        ds.batch("test", 2)
