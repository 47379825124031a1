"""Checks for chapter 9, Subword tokenizers: ``from course_lib.exercises import ch09``."""
from __future__ import annotations

import math
import random
from collections import Counter

from ..bpe_train import merge
from . import _RETURN_HINT, as_number, call, describe, expect_callable, fail, passed


def _id_lists():
    rng = random.Random(9)
    cases = [[], [5], [1, 2], [1, 2, 3, 1, 2], [7, 7, 7], [7, 7, 7, 7], list(b"hello hello world")]
    cases += [[rng.randrange(6) for _ in range(rng.randrange(2, 40))] for _ in range(20)]
    return cases


def check_count_pairs(fn) -> None:
    """``fn(ids) -> dict`` mapping each pair of adjacent ids ``(ids[i], ids[i+1])`` to how often it
    occurs."""
    for ids in _id_lists():
        expected = Counter(zip(ids, ids[1:]))
        got = call(fn, list(ids))
        if not isinstance(got, dict):
            fail(f"count_pairs({ids}) returned {describe(got)}; expected a dict (pair -> count).",
                 "build a dict (or collections.Counter) whose keys are tuples (a, b).")
        got = {k: v for k, v in got.items() if v}
        if got == dict(expected):
            continue
        if expected and got == {p: 1 for p in expected}:
            fail(f"count_pairs({ids}): every count is 1, but some pairs occur several times: "
                 f"{dict(expected)}.",
                 "add 1 to a pair's count each time you meet it, instead of just marking it seen.")
        if len(ids) >= 2 and got == dict(Counter(zip(ids, ids[1:-1]))):
            fail(f"count_pairs({ids}) misses the last pair {tuple(ids[-2:])}.",
                 "there are len(ids) - 1 adjacent pairs: zip(ids, ids[1:]) gives them all.")
        if any(not isinstance(k, tuple) for k in got):
            fail(f"count_pairs({ids}): keys must be tuples (a, b), got "
                 f"{next(k for k in got if not isinstance(k, tuple))!r}.",
                 "use the pair itself as the key: counts[(ids[i], ids[i + 1])] += 1.")
        fail(f"count_pairs({ids}) returned {got}; expected {dict(expected)}.",
             "count each (ids[i], ids[i+1]) for i from 0 to len(ids) - 2.")
    passed("your pair counts are right on every list tried.")


def check_apply_merge(fn) -> None:
    """``fn(ids, pair, new_id) -> list``: every occurrence of ``pair``, scanned left to right,
    replaced by ``new_id`` (so [7, 7, 7] with pair (7, 7) becomes [new_id, 7]); ``ids`` itself
    unchanged."""
    for ids in _id_lists():
        pairs = list(dict.fromkeys(zip(ids, ids[1:]))) or [(1, 2)]
        for pair in pairs[:3] + [(9, 9)]:
            before = list(ids)
            got = call(fn, before, pair, 99)
            expected = merge(ids, pair, 99)
            if before != ids:
                fail(f"apply_merge changed its input list {ids} in place.",
                     "build and return a new list.")
            if not isinstance(got, list):
                fail(f"apply_merge({ids}, {pair}, 99) returned {describe(got)}; expected a list.",
                     "build a new list: out = [], append to it as you walk through ids, return "
                     "out.")
            if got == expected:
                continue
            if got == _merge_moving_by_one(ids, pair, 99):
                fail(f"apply_merge({ids}, {pair}, 99) returned {got}; expected {expected}.",
                     "after a merge, move on by TWO (i += 2): the second id of the pair is now "
                     "inside new_id; moving on by one visits it again and copies it (or merges it "
                     "a second time).")
            if pair[0] == pair[1] and got.count(99) > expected.count(99):
                fail(f"apply_merge({ids}, {pair}, 99) returned {got}; expected {expected}.",
                     "occurrences overlap in runs like 7, 7, 7: after a merge, skip both ids (i += "
                     "2), so one id is never used twice.")
            if got == list(ids) and expected != list(ids):
                fail(f"apply_merge({ids}, {pair}, 99) returned {got}; expected {expected}: nothing "
                     "was merged.",
                     "compare a tuple with a tuple: (ids[i], ids[i + 1]) == pair. A slice ids[i:i "
                     "+ 2] is a list, and a list never equals the tuple pair.")
            if got == expected[:-1] or len(got) == len(expected) + 1:
                fail(f"apply_merge({ids}, {pair}, 99) returned {got}; expected {expected}.",
                     "check the last position: a pair can end at the last id, and a lone last id "
                     "must be kept.")
            fail(f"apply_merge({ids}, {pair}, 99) returned {got}; expected {expected}.",
                 "walk i from 0: if (ids[i], ids[i+1]) == pair, append new_id and move 2, else "
                 "append ids[i] and move 1.")
    passed("your merge replaces every occurrence, left to right, without overlaps.")


def _merge_moving_by_one(ids, pair, new_id):
    """The slip the merge exercise is about: after replacing a pair, step forward by one id only."""
    out, i = [], 0
    while i < len(ids):
        out.append(new_id if i + 1 < len(ids) and (ids[i], ids[i + 1]) == pair else ids[i])
        i += 1
    return out


def _encode_reference(text: str, merges) -> list[int]:
    ids = list(text.encode("utf-8"))
    rank = {pair: k for k, pair in enumerate(merges)}
    while len(ids) > 1:
        pairs = set(zip(ids, ids[1:]))
        best = min(pairs, key=lambda p: rank.get(p, math.inf))
        if best not in rank:
            break
        ids = merge(ids, best, 256 + rank[best])
    return ids


def check_encode_with_merges(fn) -> None:
    """``fn(text, merges) -> list[int]``: the UTF-8 bytes of ``text``, then merges applied by
    priority: ``merges[k]`` is a pair of ids that becomes id ``256 + k``, and an earlier merge
    always goes first."""
    from ..bpe_train import train_bpe

    corpus = "the theme of the thesis: then, there, these. " * 3 + "naïve café"
    vocab, merges_bytes = train_bpe(text=corpus, vocab_size=290)
    ids_of = {b: i for i, b in vocab.items()}
    merges = [(ids_of[a], ids_of[b]) for a, b in merges_bytes]
    texts = ["the", "the theme", "thesis then there", "these are the themes", "café naïve", "", "x",
             corpus]
    cases = [(text, merges) for text in texts]
    # On that corpus the order of the merges never changes the result; here it does: "bc" is
    # merge 0 (id 256) and "ab" merge 1 (id 257). By priority "abc" -> [97, 256] ("a", "bc");
    # merging the leftmost pair that is any merge would give [257, 99] ("ab", "c").
    cases.append(("abc", [(98, 99), (97, 98)]))
    # Two more cases in which the classic wrong rules part ways, so that each gets its own hint:
    # with "ab" learned before "bc", merging the LATEST merge first gives [97, 257] where the others
    # give [256, 99]; with "bc", "a"+"bc" and then "ab", greedy longest match finds "abc" (id 257)
    # as merge replay does, while leftmost-first and latest-first stop at "ab", "c" ([258, 99]).
    cases.append(("abc", [(97, 98), (98, 99)]))
    cases.append(("abc", [(98, 99), (97, 256), (97, 98)]))
    answers = []
    for text, text_merges in cases:
        got = call(fn, text, [tuple(m) for m in text_merges])
        if not isinstance(got, list) or not all(isinstance(i, int) for i in got):
            fail(f"encode({text!r}) returned {describe(got)}; expected a list of ints.",
                 "start from list(text.encode('utf-8')) and return that list after the merges.")
        answers.append(got)
    wrong = [(t, m, g, _encode_reference(t, m)) for (t, m),
             g in zip(cases, answers) if g != _encode_reference(t, m)]
    if not wrong:
        passed("your encoder applies the merges in priority order, like BPETokenizer.encode.")
        return
    text, text_merges, got, expected = wrong[0]
    what = f"encode({text!r}) returned {got}; expected {expected}."
    if all(g == list(t.encode("utf-8")) for (t, _), g in zip(cases, answers)):
        fail(what, "no merge was applied: after text.encode('utf-8'), merge k turns its pair into "
                   "id 256 + k.")
    if all(g == _reversed(t, m) for (t, m), g in zip(cases, answers)):
        fail(what, "the merges are in priority order: merges[0] first. A later merge can only "
                   "apply after the merges that made its parts.")
    if all(g == _one_merge(t, m) for (t, m), g in zip(cases, answers)):
        fail(what, "keep merging until no adjacent pair is a merge; one merge is not the end.")
    if all(g == _by_priority(_code_points(t), m, first=min) for (t, m), g in zip(cases, answers)):
        fail(what, "start from the UTF-8 bytes, list(text.encode('utf-8')), not from code points: "
                   "ord('é') is 233, one code point, but é is two bytes (195, 169), and the merges "
                   "are pairs of byte ids.")
    if all(g == _by_priority(list(t.encode("utf-8")), m, first=max) for (t, m),
           g in zip(cases, answers)):
        fail(f"{what[:-1]} with merges {text_merges[:3]}{'...' if len(text_merges) > 3 else ''}.",
             "you applied the merge learned LAST first; apply the merge learned FIRST (the lowest "
             "index in merges): it is the one training built first, and later merges are built "
             "from its result.")
    if all(g == _longest_match(t, m) for (t, m), g in zip(cases, answers)):
        fail(what, "that is greedy longest match, WordPiece's rule (the chapter's WordPiece "
                   "section): BPE instead replays its merges, the lowest merge index first, "
                   "wherever the pair is in the text.")
    if got == _leftmost_first(text, text_merges):
        fail(f"{what[:-1]} with merges {text_merges[:3]}{'...' if len(text_merges) > 3 else ''}.",
             "you merged the leftmost pair that is a merge; apply the merge LEARNED first (the "
             "lowest index in merges) wherever it is in the text. With merges [(98, 99), (97, "
             "98)], 'abc' is [97, 256]: 'bc' (merge 0) goes before 'ab' (merge 1), although 'ab' "
             "comes first in the text.")
    spelled = _spelled(got, text_merges)
    if spelled is not None and spelled != text.encode("utf-8"):
        if len(spelled) < len(text.encode("utf-8")):
            fail(f"{what} Those ids spell {spelled!r}: part of the text is missing.",
                 "every byte of the text must end up in some id. Did a regular expression match "
                 "only its start (re.match finds one chunk; re.findall finds them all), or only "
                 "its words (\\w+ drops the spaces and the punctuation)? Pre-tokenize with a "
                 "pattern whose chunks cover the whole text, or merge the whole text at once.")
        fail(f"{what} Those ids spell {spelled!r}, not the text {text.encode('utf-8')!r}.",
             "the ids, read back through the merges, must give the text's bytes exactly: start "
             "from list(text.encode('utf-8')) and only replace pairs by their merge id.")
    if len(got) > len(expected):
        fail(what, "some merges were missed: keep merging until no adjacent pair is a merge (one "
                   "pass over the merges in order also works, if each pass replaces every "
                   "occurrence).")
    fail(what, "repeatedly find the adjacent pair with the lowest merge index, replace it with 256 "
               "+ index; stop when no adjacent pair is a merge.")


def _spelled(ids, merges) -> bytes | None:
    """The bytes that ``ids`` stand for under ``merges`` (None when an id is not in that
    vocabulary)."""
    pieces = {i: bytes([i]) for i in range(256)}
    for k, (a, b) in enumerate(merges):
        if a in pieces and b in pieces:
            pieces[256 + k] = pieces[a] + pieces[b]
    try:
        return b"".join(pieces[i] for i in ids)
    except KeyError:
        return None


def _leftmost_first(text, merges):
    """The classic wrong encoder: repeatedly merge the first adjacent pair, in text order, that is
    any merge, whatever its rank."""
    ids = list(text.encode("utf-8"))
    rank = {pair: k for k, pair in enumerate(merges)}
    while True:
        i = next((i for i in range(len(ids) - 1) if (ids[i], ids[i + 1]) in rank), None)
        if i is None:
            return ids
        ids = ids[:i] + [256 + rank[(ids[i], ids[i + 1])]] + ids[i + 2:]


def _code_points(text: str) -> list[int]:
    """The classic slip of starting from Unicode code points instead of UTF-8 bytes."""
    return [ord(c) for c in text]


def _by_priority(ids: list[int], merges, first=min) -> list[int]:
    """Merge replay from ``ids``: repeatedly the adjacent pair of lowest merge index (``first=min``,
    the right rule) or of highest (``first=max``, the reversed priority)."""
    rank = {pair: k for k, pair in enumerate(merges)}
    while True:
        candidates = [p for p in zip(ids, ids[1:]) if p in rank]
        if not candidates:
            return ids
        best = first(candidates, key=rank.get)
        ids = merge(ids, best, 256 + rank[best])


def _longest_match(text: str, merges) -> list[int]:
    """Greedy longest match over the merged vocabulary (WordPiece's encoding rule, on bytes)."""
    pieces = {i: bytes([i]) for i in range(256)}
    for k, (a, b) in enumerate(merges):
        pieces[256 + k] = pieces.get(a, b"") + pieces.get(b, b"")
    # the lowest id wins a tie
    by_bytes = {piece: i for i, piece in sorted(pieces.items(), reverse=True)}
    data, ids, start = text.encode("utf-8"), [], 0
    while start < len(data):
        end = next(e for e in range(len(data), start, -1) if data[start:e] in by_bytes)
        ids.append(by_bytes[data[start:end]])
        start = end
    return ids


def _one_merge(text, merges):
    ids = list(text.encode("utf-8"))
    rank = {pair: k for k, pair in enumerate(merges)}
    pairs = [p for p in zip(ids, ids[1:]) if p in rank]
    if pairs:
        best = min(pairs, key=rank.get)
        ids = merge(ids, best, 256 + rank[best])
    return ids




def _reversed(text, merges):
    ids = list(text.encode("utf-8"))
    for k in reversed(range(len(merges))):
        ids = merge(ids, merges[k], 256 + k)
    return ids


def check_bits_per_char(fn) -> None:
    """``fn(loss, n_tokens, n_chars) -> float``: a mean cross-entropy of ``loss`` nats per token
    over a text of ``n_tokens`` tokens and ``n_chars`` characters, in bits per character."""
    cases = [(1.0, 100, 100), (1.2, 1000, 1000), (3.5, 575, 1115), (2.7, 50, 200),
             (math.log(2), 10, 10)]
    for loss, n_tokens, n_chars in cases:
        expected = loss * n_tokens / n_chars / math.log(2)
        got = as_number(call(fn, loss, n_tokens, n_chars),
                        f"bits_per_char({loss}, {n_tokens}, {n_chars})")
        if math.isclose(got, expected, rel_tol=1e-6):
            continue
        what = (f"bits_per_char(loss={loss}, n_tokens={n_tokens}, n_chars={n_chars}) = {got:.4f}; "
                f"expected {expected:.4f}.")
        if math.isclose(got, loss * n_tokens / n_chars, rel_tol=1e-6):
            fail(what, "the loss is in nats (natural log): divide by ln 2 to get bits.")
        if math.isclose(got, loss * n_chars / n_tokens / math.log(2), rel_tol=1e-6):
            fail(what, "the ratio is upside down: total bits = loss x n_tokens / ln 2, then divide "
                       "by n_chars.")
        if math.isclose(got, loss / math.log(2), rel_tol=1e-6):
            fail(what,
                 "that is bits per token: a token holds n_chars / n_tokens characters on average.")
        if math.isclose(got, loss * n_tokens / n_chars / math.log(10), rel_tol=1e-6):
            fail(what, "bits use log base 2: divide by ln 2, not ln 10.")
        fail(what, "total information = loss x n_tokens nats = loss x n_tokens / ln 2 bits; share "
                   "it over n_chars.")
    passed("losses per token in nats become bits per character; models with different tokenizers "
           "can now be compared.")


def check_decode_bytes(fn) -> None:
    """``fn(vocab, ids) -> str``: join the tokens' bytes, then decode UTF-8 once, with U+FFFD for
    bytes that are not valid UTF-8 (``errors="replace"``), never an exception."""
    vocab = {i: bytes([i]) for i in range(256)}
    vocab.update({256: "é".encode()[:1], 257: "é".encode()[1:] + b"t", 258: "你".encode()[:2],
                  259: b" caf"})
    cases = [[104, 105], [259, 256, 257], [258, "你".encode()[2]], [256], [0xFF, 104], [259, 256],
             []]
    expect_callable(fn)
    for ids in cases:
        expected = b"".join(vocab[i] for i in ids).decode("utf-8", errors="replace")
        try:
            got = fn(vocab, list(ids))
        except UnicodeDecodeError:
            fail(f"decode({ids}) raised UnicodeDecodeError.",
                 "arbitrary ids may not form valid UTF-8: decode with errors='replace', which "
                 "writes U+FFFD.")
        except NotImplementedError:
            call(fn, vocab, ids)
        except Exception as e:
            fail(f"decode({ids}) raised {type(e).__name__}: {e}",
                 "read the error above; try your function on vocab and [104, 105] ('hi') by hand "
                 "first.")
        if got == expected:
            continue
        if got is None:
            fail(f"decode({ids}) returned None; expected a str.", _RETURN_HINT)
        if not isinstance(got, str):
            fail(f"decode({ids}) returned {describe(got)}; expected a str.",
                 "join the bytes, then decode them once: b''.join(...).decode('utf-8', "
                 "errors='replace').")
        separate = "".join(vocab[i].decode("utf-8", errors="replace") for i in ids)
        if got == separate:
            fail(f"decode({ids}) returned {got!r}; expected {expected!r}.",
                 "a character's bytes can be split between two tokens (here é and 你): decoding "
                 "token by token breaks it. Join all the bytes first, then decode once.")
        fail(f"decode({ids}) returned {got!r}; expected {expected!r}.",
             "b''.join(vocab[i] for i in ids).decode('utf-8', errors='replace').")
    passed("multi-byte characters split between tokens come back whole, and broken bytes become "
           "U+FFFD.")
