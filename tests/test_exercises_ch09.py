"""The checks of chapter 9's exercises: right answers pass, plausible wrong ones fail with a
hint."""
import math
from collections import Counter

import pytest

from course_lib.bpe_train import merge
from course_lib.exercises import ExerciseError, ch09


def not_done(*args):
    raise NotImplementedError()


# --- count pairs ---


def test_count_pairs(capsys):
    ch09.check_count_pairs(lambda ids: Counter(zip(ids, ids[1:])))
    assert "Correct!" in capsys.readouterr().out


@pytest.mark.parametrize("wrong, hint", [
    (lambda ids: {p: 1 for p in zip(ids, ids[1:])}, "add 1"),
    (lambda ids: dict(Counter(zip(ids, ids[1:-1]))), "last pair"),
    (lambda ids: list(zip(ids, ids[1:])), "dict"),
    (lambda ids: Counter(zip(ids, ids[2:])), "adjacent pairs"),
])
def test_count_pairs_wrong(wrong, hint):
    with pytest.raises(ExerciseError, match=hint):
        ch09.check_count_pairs(wrong)


def test_count_pairs_not_done():
    with pytest.raises(ExerciseError, match="Not done yet"):
        ch09.check_count_pairs(not_done)


# --- apply one merge ---


def test_apply_merge(capsys):
    ch09.check_apply_merge(merge)
    assert "Correct!" in capsys.readouterr().out


def overlapping(ids, pair, new_id):
    out = []
    for i, x in enumerate(ids):
        if i + 1 < len(ids) and (x, ids[i + 1]) == pair:
            out.append(new_id)
        elif i and (ids[i - 1], x) == pair:
            continue
        else:
            out.append(x)
    return out


def in_place(ids, pair, new_id):
    ids[:] = merge(ids, pair, new_id)
    return ids


def drops_last(ids, pair, new_id):
    out, i = [], 0
    while i < len(ids) - 1:
        if (ids[i], ids[i + 1]) == pair:
            out.append(new_id)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


@pytest.mark.parametrize("wrong, hint",
                         [(overlapping, "overlap"), (in_place, "in place"), (drops_last, "last")])
def test_apply_merge_wrong(wrong, hint):
    with pytest.raises(ExerciseError, match=hint):
        ch09.check_apply_merge(wrong)


def test_apply_merge_not_done():
    with pytest.raises(ExerciseError, match="Not done yet"):
        ch09.check_apply_merge(not_done)


# --- encode with merges ---


def encode_sequential(text, merges):
    ids = list(text.encode("utf-8"))
    for k, pair in enumerate(merges):
        ids = merge(ids, pair, 256 + k)
    return ids


def encode_by_rank(text, merges):
    rank = {p: k for k, p in enumerate(merges)}
    ids = list(text.encode("utf-8"))
    while len(ids) > 1:
        best = min(zip(ids, ids[1:]), key=lambda p: rank.get(p, math.inf))
        if best not in rank:
            break
        ids = merge(ids, best, 256 + rank[best])
    return ids


@pytest.mark.parametrize("right", [encode_sequential, encode_by_rank])
def test_encode_with_merges(right, capsys):
    ch09.check_encode_with_merges(right)
    assert "Correct!" in capsys.readouterr().out


def encode_reversed(text, merges):
    ids = list(text.encode("utf-8"))
    for k in reversed(range(len(merges))):
        ids = merge(ids, merges[k], 256 + k)
    return ids


def encode_one_step(text, merges):
    ids = list(text.encode("utf-8"))
    rank = {p: k for k, p in enumerate(merges)}
    pairs = [p for p in zip(ids, ids[1:]) if p in rank]
    if pairs:
        best = min(pairs, key=rank.get)
        ids = merge(ids, best, 256 + rank[best])
    return ids


@pytest.mark.parametrize("wrong, hint", [
    (lambda text, merges: list(text.encode("utf-8")), "no merge"),
    (encode_reversed, "priority order"),
    (encode_one_step, "keep merging"),
])
def test_encode_with_merges_wrong(wrong, hint):
    with pytest.raises(ExerciseError, match=hint):
        ch09.check_encode_with_merges(wrong)


def test_encode_with_merges_not_done():
    with pytest.raises(ExerciseError, match="Not done yet"):
        ch09.check_encode_with_merges(not_done)


# --- bits per character ---


def test_bits_per_char(capsys):
    ch09.check_bits_per_char(lambda loss, n_tokens,
                             n_chars: loss * n_tokens / n_chars / math.log(2))
    assert "Correct!" in capsys.readouterr().out


@pytest.mark.parametrize("wrong, hint", [
    (lambda loss, t, c: loss * t / c, "nats"),
    (lambda loss, t, c: loss * c / t / math.log(2), "upside down"),
    (lambda loss, t, c: loss / math.log(2), "bits per token"),
    (lambda loss, t, c: loss * t / c / math.log(10), "base 2"),
])
def test_bits_per_char_wrong(wrong, hint):
    with pytest.raises(ExerciseError, match=hint):
        ch09.check_bits_per_char(wrong)


def test_bits_per_char_not_done():
    with pytest.raises(ExerciseError, match="Not done yet"):
        ch09.check_bits_per_char(not_done)


# --- spot the bug: decoding token by token ---


def test_decode_bytes(capsys):
    ch09.check_decode_bytes(lambda vocab,
                            ids: b"".join(vocab[i] for i in ids).decode("utf-8", errors="replace"))
    assert "Correct!" in capsys.readouterr().out


@pytest.mark.parametrize("wrong, hint", [
    (lambda vocab, ids: "".join(vocab[i].decode("utf-8", errors="replace") for i in ids),
     "token by token"),
    (lambda vocab, ids: b"".join(vocab[i] for i in ids).decode("utf-8"), "errors='replace'"),
    (lambda vocab, ids: b"".join(vocab[i] for i in ids).decode("utf-8", errors="ignore"),
     "b''.join"),
])
def test_decode_bytes_wrong(wrong, hint):
    with pytest.raises(ExerciseError, match=hint):
        ch09.check_decode_bytes(wrong)


def test_decode_bytes_not_done():
    with pytest.raises(ExerciseError, match="Not done yet"):
        ch09.check_decode_bytes(not_done)


# --- issue 22: wrong answers that used to pass, or got a hint pointing elsewhere ---


def moves_by_one(ids, pair, new_id):
    out, i = [], 0
    while i < len(ids):
        if i + 1 < len(ids) and (ids[i], ids[i + 1]) == pair:
            out.append(new_id)
        else:
            out.append(ids[i])
        i += 1  # the slip: after a merge the second id of the pair is visited again
    return out


def test_apply_merge_moving_on_by_one_gets_the_step_hint():
    # It used to be told "check the last position".
    with pytest.raises(ExerciseError, match="(?s)Hint: after a merge, move on by TWO"):
        ch09.check_apply_merge(moves_by_one)


def encode_leftmost_first(text, merges):
    """Merges the first adjacent pair in text order that is any merge, whatever its rank."""
    rank = {p: k for k, p in enumerate(merges)}
    ids = list(text.encode("utf-8"))
    while True:
        i = next((i for i in range(len(ids) - 1) if (ids[i], ids[i + 1]) in rank), None)
        if i is None:
            return ids
        ids = ids[:i] + [256 + rank[(ids[i], ids[i + 1])]] + ids[i + 2:]


def test_encode_leftmost_first_fails_where_merge_order_matters():
    # It used to pass: on the check's corpus the order never changes the result. With merges
    # [(98, 99), (97, 98)] it does: "bc" (merge 0) before "ab" (merge 1), so "abc" is a + bc.
    assert encode_leftmost_first("abc", [(98, 99), (97, 98)]) == [257, 99]
    assert encode_by_rank("abc", [(98, 99), (97, 98)]) == [97, 256]
    with pytest.raises(ExerciseError,
                       match="(?s)returned \\[257, 99\\]; expected \\[97, 256\\].*LEARNED first"):
        ch09.check_encode_with_merges(encode_leftmost_first)


def test_decode_bytes_given_something_else_than_a_function():
    with pytest.raises(ExerciseError,
                       match="(?s)expected your function, got None.*Hint: pass the function"):
        ch09.check_decode_bytes(None)


# --- review of issue 32: each classic wrong rule gets the hint that names it ---


# The right merge replay is the library's own (ch09._by_priority with first=min): each wrong
# answer below changes exactly one thing about it.


def encode_latest_merge_first(text, merges):
    # wrong: highest rank first
    return ch09._by_priority(list(text.encode("utf-8")), merges, first=max)


def encode_from_code_points(text, merges):
    # wrong: starts from code points, not bytes
    return ch09._by_priority([ord(c) for c in text], merges)


def encode_longest_match(text, merges):
    pieces = {i: bytes([i]) for i in range(256)}
    for k, (a, b) in enumerate(merges):
        pieces[256 + k] = pieces[a] + pieces[b]
    ids_of = {}
    for i, piece in pieces.items():
        ids_of.setdefault(piece, i)
    data, out, start = text.encode("utf-8"), [], 0
    while start < len(data):
        end = max(e for e in range(start + 1, len(data) + 1) if data[start:e] in ids_of)
        out.append(ids_of[data[start:end]])
        start = end
    return out


@pytest.mark.parametrize("wrong, hint", [
    (encode_latest_merge_first, "learned LAST first"),
    (encode_from_code_points, "not from code points"),
    (encode_longest_match, "greedy longest match"),
])
def test_encode_with_merges_other_wrong_rules_get_their_own_hint(wrong, hint):
    with pytest.raises(ExerciseError, match=hint) as error:
        ch09.check_encode_with_merges(wrong)
    assert "leftmost pair" not in str(error.value)


# 09-m1 (review 2026-11-28): a pre-tokenizer that keeps only part of the text got a hint about
# merging ("some merges were missed" for \\w+); the fault is the lost text, and the hint now says
# so.


def encode_first_chunk_only(text, merges):  # re.match finds one chunk, the first
    import re
    found = re.match(r" ?\w+| ?[^\s\w]+|\s+", text)
    return encode_sequential(found.group() if found else "", merges)


def encode_words_only(text, merges):  # \w+ drops the spaces and the punctuation
    import re
    return [i for word in re.findall(r"\w+", text) for i in encode_sequential(word, merges)]


# a pre-tokenizer whose chunks cover the whole text: still right here
def encode_each_chunk(text, merges):
    import re
    return [i for chunk in re.findall(r".+", text, re.S) for i in encode_sequential(chunk, merges)]


@pytest.mark.parametrize("wrong", [encode_first_chunk_only, encode_words_only])
def test_encode_with_merges_lost_text_is_named(wrong):
    with pytest.raises(ExerciseError, match="(?s)part of the text is missing.*Hint: every byte of "
                                            "the text") as error:
        ch09.check_encode_with_merges(wrong)
    assert "merges were missed" not in str(error.value)


def test_encode_with_merges_chunked_but_complete_passes(capsys):
    ch09.check_encode_with_merges(encode_each_chunk)
    assert "Correct!" in capsys.readouterr().out


def test_apply_merge_comparing_a_list_with_a_tuple_gets_the_nothing_merged_hint():
    def list_against_tuple(ids, pair, new_id):
        # the right merge, but its pair compared as a list (a slice ids[i:i + 2] is one):
        # a list never equals a tuple, so nothing is ever merged
        return merge(ids, list(pair), new_id)
    with pytest.raises(ExerciseError, match="nothing was merged") as error:
        ch09.check_apply_merge(list_against_tuple)
    assert "compare a tuple with a tuple" in str(error.value)


def test_decode_bytes_forgetting_return_gets_the_return_hint():
    def forgets_return(vocab, ids):
        b"".join(vocab[i] for i in ids).decode("utf-8", errors="replace")
    with pytest.raises(ExerciseError, match="returned None") as error:
        ch09.check_decode_bytes(forgets_return)
    assert "return" in str(error.value).split("Hint:")[1]
