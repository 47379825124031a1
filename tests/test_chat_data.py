"""The conversations made by code: rebuilt into the frozen file's very bytes, checked on load,
answers that are right, splits that share nothing, and every conversation within the context."""
import datetime
import hashlib
import re

import pytest

from course_lib.chat.calculator import calculate
from course_lib.chat.data import (CHAT_PATH, CHAT_SHA256, EXTRA_CHARS, IDENTITY, MAX_TOKENS, SIZES, SPLITS, CHAT_TASKS,
                                  build_conversations, char_chat_tokenizer, conversations_bytes, load_conversations,
                                  write_conversations)
from course_lib.chat.template import check_conversation, render
from course_lib.data import load_text
from course_lib.dates import DATE_FORMATS, format_date

DATA = load_conversations()
SHAKESPEARE = load_text("tinyshakespeare")


def test_the_code_rebuilds_the_frozen_file_byte_for_byte(tmp_path):
    assert write_conversations(tmp_path / "chat.json") == CHAT_SHA256
    assert (tmp_path / "chat.json").read_bytes() == CHAT_PATH.read_bytes()
    assert hashlib.sha256(CHAT_PATH.read_bytes()).hexdigest() == CHAT_SHA256


def test_another_seed_makes_other_conversations():
    small = {"train": 14, "val": 7, "test": 7}
    assert build_conversations(1, small) == build_conversations(1, small)
    assert build_conversations(1, small) != build_conversations(2, small)


def test_a_damaged_or_missing_file_is_refused(tmp_path):
    bad = tmp_path / "chat.json"
    bad.write_bytes(CHAT_PATH.read_bytes().replace(b"Spell", b"Smell", 1))
    with pytest.raises(ValueError, match="damaged or was edited"):
        load_conversations(path=bad)
    with pytest.raises(FileNotFoundError, match="missing"):
        load_conversations(path=tmp_path / "none.json")
    with pytest.raises(ValueError, match="unknown split"):
        load_conversations("dev")
    assert load_conversations("test") == DATA["test"]


def test_sizes_and_every_task_in_every_split():
    for split in SPLITS:
        assert len(DATA[split]) == SIZES[split]
        assert {c["task"] for c in DATA[split]} == set(CHAT_TASKS)


def test_every_conversation_is_well_formed_fits_the_context_and_uses_known_characters():
    tokenizer, alphabet = char_chat_tokenizer(), set(SHAKESPEARE) | set(EXTRA_CHARS)
    assert tokenizer.base.chars[:65] == sorted(set(SHAKESPEARE))  # the pretrained model's ids first
    for split in SPLITS:
        for c in DATA[split]:
            check_conversation(c["messages"])
            assert len(render(tokenizer, c["messages"])[0]) <= MAX_TOKENS
            assert set(str(c["messages"])) - set("{}[]'\":,\\") <= alphabet | set("{}")


def _texts(c):
    return [m["content"] for m in c["messages"]]


def _check(c):
    """The answer of a conversation recomputed from its question."""
    t = _texts(c)
    if c["task"] == "dates" or (c["task"] == "follow-up" and "ISO" in t[0]):
        day = datetime.date.fromisoformat(t[1])
        assert any(format_date(day, s, k) in t[0] for s in range(len(DATE_FORMATS)) for k in range(3))
        if len(t) > 2:
            expect = {"Which year?": str(day.year), "Which month?": day.strftime("%B"), "Which day?": str(day.day)}
            assert t[3] == expect[t[2]]
    elif c["task"] in ("arithmetic", "follow-up") and isinstance(t[1], list):
        for answer in t[1::2]:
            call, result, text = (p["text"] for p in answer)
            assert [p["type"] for p in answer] == ["tool", "result", "text"] and result == text == calculate(call)
        if len(t) > 2:
            n = re.fullmatch(r"(Plus|Minus|Times) (\d)\?", t[2])
            op = {"Plus": "+", "Minus": "-", "Times": "*"}[n[1]]
            assert t[3][0]["text"] == f"{t[1][2]['text']}{op}{n[2]}"
    elif c["task"] in ("spelling", "follow-up"):
        word = re.search(r"spell (?:the word )?([a-z]+)", t[0], flags=re.I)[1]
        assert t[1] == "-".join(word) and word in SHAKESPEARE
        if len(t) > 2:
            assert t[3] == str(len(word))
    elif c["task"] == "letters":
        letter, word = re.fullmatch(r"(?:How many|Count the) ([a-z]) in ([a-z]+)[?.]", t[0]).groups()
        assert t[1] == str(word.count(letter))
    elif c["task"] == "identity":
        assert (t[0], t[1]) in IDENTITY
    else:
        speaker = re.fullmatch(r"(?:Speak as|Say a line as|Be) ([A-Z ]+)\.", t[0])[1]
        assert f"\n\n{speaker}:\n{t[1]}\n" in SHAKESPEARE  # a real first line of that speaker


def test_every_answer_is_right():
    for split in SPLITS:
        for c in DATA[split]:
            _check(c)


def _held_out_things(c):
    t = _texts(c)
    if c["task"] in ("dates", "spelling", "letters", "speak-as") or c["task"] == "follow-up":
        if c["task"] == "speak-as":
            return {("line", t[1])}
        if c["task"] in ("dates",) or (c["task"] == "follow-up" and "ISO" in t[0]):
            return {("day", t[1])}
        if c["task"] == "follow-up" and isinstance(t[1], list):
            return {("pair", tuple(map(int, re.split(r"[-+*/]", t[1][0]["text"], maxsplit=1))))}
        word = re.findall(r"[a-z]+", t[0].split(" in ")[-1] if c["task"] == "letters" else t[0].lower())[-1]
        return {("word", word)}
    if c["task"] == "arithmetic":
        return {("pair", tuple(map(int, re.split(r"[-+*/]", t[1][0]["text"], maxsplit=1))))}
    return set()


def test_the_splits_share_no_day_word_line_or_pair_of_numbers():
    seen = {s: set().union(*(_held_out_things(c) for c in DATA[s])) for s in SPLITS}
    assert len(seen["test"]) > 200
    assert not seen["train"] & seen["test"] and not seen["train"] & seen["val"] and not seen["val"] & seen["test"]


def test_conversations_bytes_is_one_conversation_per_line():
    small = build_conversations(0, {"train": 7, "val": 7, "test": 7})
    assert conversations_bytes(small).count(b"\n") == 21


# --- batches for the chat fine-tune --------------------------------------------------------------------------

def test_batches_hold_the_assistant_only_targets_and_follow_the_generator():
    import torch

    from course_lib.chat.data import chat_batch_fn, rendered_pairs
    from course_lib.utils import IGNORE_INDEX

    tokenizer = char_chat_tokenizer()
    small = {"train": DATA["train"][:50], "val": DATA["val"][:20]}
    batch_fn = chat_batch_fn(tokenizer, 8, 64, data=small)
    x, y = batch_fn("train", torch.Generator().manual_seed(0))
    x2, y2 = batch_fn("train", torch.Generator().manual_seed(0))
    assert torch.equal(x, x2) and torch.equal(y, y2) and x.shape == y.shape and x.shape[0] == 8 and x.shape[1] <= 64
    pairs, left_out = rendered_pairs(tokenizer, small["train"], 64)
    assert left_out == 0 and len(pairs) == 50
    for row in range(8):  # each row is one conversation's pair, padded with IGNORE_INDEX targets
        match = [p for p in pairs if torch.equal(p[0], x[row, :len(p[0])]) and torch.equal(p[1], y[row, :len(p[1])])]
        assert match and (y[row, len(match[0][1]):] == IGNORE_INDEX).all()
    assert rendered_pairs(tokenizer, small["train"], 20)[1] > 0  # too long for 20 tokens: left out, never cut
    with pytest.raises(ValueError, match="no train conversation fits"):
        chat_batch_fn(tokenizer, 8, 5, data=small)


def test_is_follow_up_knows_exactly_the_follow_up_questions():
    """The chat engine drops a follow-up with the exchange it follows (review 17-M3): its test is
    right on every conversation of every split (the second message of each follow-up, no other)."""
    from course_lib.chat.data import load_conversations
    from course_lib.chat.template import is_follow_up
    for split in SPLITS:
        for conversation in load_conversations(split):
            users = [m["content"] for m in conversation["messages"] if m["role"] == "user"]
            assert [is_follow_up(u) for u in users] == [False] + [True] * (len(users) - 1), users
    assert is_follow_up(" plus 7 ") and not is_follow_up("Plus 5? And then?") and not is_follow_up("What is 2+3?")
