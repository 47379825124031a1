"""The checks of chapter 1's exercises: right answers pass, plausible wrong ones fail with a
hint."""
import math
from collections import Counter

import pytest
import torch

from course_lib.exercises import ExerciseError, ch01
from exercise_helpers import assert_correct, assert_not_done, not_done


# --- encode / decode ---


def encode(text, chars):
    stoi = {c: i for i, c in enumerate(chars)}
    for c in text:
        if c not in stoi:
            raise ValueError(f"unknown character {c!r}")
    return [stoi[c] for c in text]


def decode(ids, chars):
    return "".join(chars[i] for i in ids)


def test_encode_decode_correct(capsys):
    ch01.check_encode_decode(encode, decode)
    assert_correct(capsys)


def test_encode_decode_not_done():
    assert_not_done(ch01.check_encode_decode, not_done, decode)
    assert_not_done(ch01.check_encode_decode, encode, not_done)


def test_encode_off_by_one_fails():
    def encode_from_one(text, chars):
        return [chars.index(c) + 1 for c in text]

    with pytest.raises(ExerciseError, match="wrong at position"):
        ch01.check_encode_decode(encode_from_one, decode)


def test_encode_with_bare_keyerror_fails():
    def encode_keyerror(text, chars):
        stoi = {c: i for i, c in enumerate(chars)}
        return [stoi[c] for c in text]

    with pytest.raises(ExerciseError, match="bare KeyError"):
        ch01.check_encode_decode(encode_keyerror, decode)


def test_encode_that_skips_unknown_characters_fails():
    def encode_skip(text, chars):
        return [chars.index(c) for c in text if c in chars]

    with pytest.raises(ExerciseError, match="without an error"):
        ch01.check_encode_decode(encode_skip, decode)


def test_decode_returning_a_list_fails():
    with pytest.raises(ExerciseError, match="should return a str"):
        ch01.check_encode_decode(encode, lambda ids, chars: [chars[i] for i in ids])


# 01-m1 (review 2026-11-28): every test vocabulary was sorted, so ids taken from sorted(chars)
# passed, although the exercise says "a character's id is its position in chars".


def encode_sorted(text, chars):
    stoi = {c: i for i, c in enumerate(sorted(chars))}
    for c in text:
        if c not in stoi:
            raise ValueError(f"unknown character {c!r}")
    return [stoi[c] for c in text]


def decode_sorted(ids, chars):
    itos = dict(enumerate(sorted(chars)))
    return "".join(itos[i] for i in ids)


def test_encode_with_sorted_vocabulary_fails():
    with pytest.raises(ExerciseError,
                       match="(?s)position in sorted\\(chars\\).*Hint: do not sort the vocabulary"):
        ch01.check_encode_decode(encode_sorted, decode_sorted)


def test_decode_with_sorted_vocabulary_fails():
    with pytest.raises(ExerciseError, match="(?s)decode\\(\\).*sorted\\(chars\\).*Hint: do not "
                                            "sort the vocabulary"):
        ch01.check_encode_decode(encode, decode_sorted)


# 01-m2 (review 2026-11-28): an encoder returning a tensor of ids passed every case but the empty
# text, where it failed with "an empty text has no ids" although it had returned none. A tensor is
# read as its list everywhere now.


def test_encode_returning_a_tensor_passes(capsys):
    ch01.check_encode_decode(lambda text,
                             chars: torch.tensor(encode(text, chars), dtype=torch.long), decode)
    assert_correct(capsys)


# --- get_batch ---


def get_batch(data, block_size, batch_size, generator):
    ix = torch.randint(len(data) - block_size, (batch_size,), generator=generator)
    x = torch.stack([data[i:i + block_size] for i in ix])
    y = torch.stack([data[i + 1:i + block_size + 1] for i in ix])
    return x, y


def test_get_batch_correct(capsys):
    ch01.check_get_batch(get_batch)
    assert "identical to course_lib.data.get_batch" in capsys.readouterr().out


def test_get_batch_different_but_valid_sampling_passes(capsys):
    def get_batch_other_order(data, block_size, batch_size, generator):
        ix = torch.randint(len(data) - block_size, (batch_size,), generator=generator).flip(0)
        return (torch.stack([data[i:i + block_size] for i in ix]),
                torch.stack([data[i + 1:i + block_size + 1] for i in ix]))

    ch01.check_get_batch(get_batch_other_order)
    out = capsys.readouterr().out
    assert "Correct!" in out and "identical" not in out


def test_get_batch_not_done():
    assert_not_done(ch01.check_get_batch, not_done)


def test_get_batch_unshifted_target_fails():
    def get_batch_same(data, block_size, batch_size, generator):
        x, _ = get_batch(data, block_size, batch_size, generator)
        return x, x.clone()

    with pytest.raises(ExerciseError, match="NEXT token"):
        ch01.check_get_batch(get_batch_same)


def test_get_batch_global_rng_fails():
    def get_batch_global(data, block_size, batch_size, generator):
        return get_batch(data, block_size, batch_size, None)

    with pytest.raises(ExerciseError, match="seeded alike"):
        ch01.check_get_batch(get_batch_global)


def test_get_batch_never_uses_last_window_fails():
    def get_batch_short(data, block_size, batch_size, generator):
        ix = torch.randint(len(data) - block_size - 1, (batch_size,), generator=generator)
        return (torch.stack([data[i:i + block_size] for i in ix]),
                torch.stack([data[i + 1:i + block_size + 1] for i in ix]))

    with pytest.raises(ExerciseError, match="never at"):
        ch01.check_get_batch(get_batch_short)


def test_get_batch_transposed_fails():
    def get_batch_transposed(data, block_size, batch_size, generator):
        x, y = get_batch(data, block_size, batch_size, generator)
        return x.T, y.T

    with pytest.raises(ExerciseError, match="shape"):
        ch01.check_get_batch(get_batch_transposed)


# --- unigram entropy ---


def entropy_bits(text):
    n = len(text)
    return -sum(c / n * math.log2(c / n) for c in Counter(text).values())


def test_entropy_correct(capsys):
    ch01.check_unigram_entropy_bits(entropy_bits)
    assert_correct(capsys)


def test_entropy_not_done():
    assert_not_done(ch01.check_unigram_entropy_bits, not_done)


def test_entropy_in_nats_fails():
    with pytest.raises(ExerciseError, match="nats"):
        ch01.check_unigram_entropy_bits(lambda text: entropy_bits(text) * math.log(2))


def test_entropy_missing_minus_fails():
    with pytest.raises(ExerciseError, match="negative"):
        ch01.check_unigram_entropy_bits(lambda text: -entropy_bits(text))


def test_entropy_over_vocabulary_not_frequencies_fails():
    with pytest.raises(ExerciseError, match="not the expected value"):
        ch01.check_unigram_entropy_bits(lambda text: math.log2(len(set(text))))


def test_get_batch_with_float_windows_fails_with_a_dtype_hint():
    # Issue 22: float windows used to crash the check with an IndexError (it indexes with x).
    def get_batch_float(data, block_size, batch_size, generator):
        x, y = get_batch(data, block_size, batch_size, generator)
        return x.float(), y.float()

    with pytest.raises(ExerciseError, match="(?s)expected torch.int64, got dtype "
                                            "torch.float32.*Hint: the windows"):
        ch01.check_get_batch(get_batch_float)
