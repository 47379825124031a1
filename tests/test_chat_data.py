"""The conversations made by code: rebuilt into the frozen file's very bytes, checked on load,
answers that are right, splits that share nothing, and every conversation within the context."""
import datetime
import hashlib
import re

import pytest

from course_lib.chat.calculator import calculate
from course_lib.chat.data import (CHAT_PATH, CHAT_SHA256, EXTRA_CHARS, IDENTITY, MAX_TOKENS,
                                  SIZES, SPLITS, CHAT_TASKS, _pair_split, build_conversations,
                                  char_chat_tokenizer, conversations_bytes,
                                  load_conversations, write_conversations)
from course_lib.chat.phrasing import ASK_LETTERS, ASK_SPELLING, in_words, normalized
from course_lib.chat.template import is_follow_up
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


def _pattern(template: str, **groups) -> re.Pattern:
    """A phrasing template as a regex (any case, the last punctuation mark optional: the noise)."""
    text = re.escape(template.rstrip(".?"))
    for name, group in groups.items():
        text = text.replace(re.escape("{" + name + "}"), group)
    return re.compile(text + r"[.?]?", re.IGNORECASE)


LETTERS = [_pattern(t, c="(?P<c>[a-z])", w="(?P<w>[a-z]+)") for t in ASK_LETTERS]
SPELLING = [_pattern(t, w="(?P<w>[a-z]+)") for t in ASK_SPELLING]
FOLLOW = {"Plus": "+", "Minus": "-", "Times": "*"}


def _exchanges(c):
    t = _texts(c)
    return list(zip(t[0::2], t[1::2]))


def _check_exchange(question, answer, before, split):
    """One exchange's answer recomputed from its question (and the exchange before it)."""
    if isinstance(answer, list):  # a calculation
        call, result, text = (p["text"] for p in answer)
        assert ([p["type"] for p in answer] == ["tool", "result", "text"]
                and result == text == calculate(call))
        a, op, b = re.fullmatch(r"(-?[\d.]+)([-+*/])(\d+)", call).groups()
        if is_follow_up(question):
            word, n = re.fullmatch(r"(Plus|Minus|Times) (\d)\?", question).groups()
            assert (a, op, b) == (before[1][2]["text"], FOLLOW[word], n)
        else:  # the numbers, in digits or words, and the operation are in the question
            numbers = [in_words(int(x)) if in_words(int(x)) in question.lower() else x
                       for x in (a, b)]
            assert all(x in question.lower() for x in numbers), (question, call)
            assert _pair_split(int(a), int(b)) == split
    elif re.fullmatch(r"\d{4}-\d\d-\d\d", answer):
        day = datetime.date.fromisoformat(answer)
        assert any(format_date(day, s, k).lower() in question.lower()
                   for s in range(len(DATE_FORMATS))
                   for k in range(3))
    elif question in ("How many letters?", "Its length?"):
        assert answer == str(len(before[1].replace("-", "")))
    elif question in ("Which year?", "Which month?", "Which day?"):
        day = datetime.date.fromisoformat(before[1])
        assert answer == {"Which year?": str(day.year), "Which month?": day.strftime("%B"),
                          "Which day?": str(day.day)}[question]
    elif any(p.fullmatch(question) for p in SPELLING):
        word = next(p.fullmatch(question) for p in SPELLING if p.fullmatch(question))["w"]
        assert answer == "-".join(word.lower())
    elif any(p.fullmatch(question) for p in LETTERS):
        m = next(p.fullmatch(question) for p in LETTERS if p.fullmatch(question))
        assert answer == str(m["w"].lower().count(m["c"].lower()))
    elif answer in {a for _, a in IDENTITY}:
        assert (normalized(question), answer) in {(normalized(q), a) for q, a in IDENTITY}
    else:
        speaker = re.fullmatch(r".*?([A-Z][A-Z ]*[A-Z])\.", question)[1]
        assert f"\n\n{speaker}:\n{answer}\n" in SHAKESPEARE  # a real first line of that speaker


def test_every_answer_is_right():
    for split in SPLITS:
        for c in DATA[split]:
            exchanges = _exchanges(c)
            for k, (question, answer) in enumerate(exchanges):
                _check_exchange(question, answer, exchanges[k - 1] if k else None, split)


def _held_out_things(c):
    """The days, words, number pairs and lines a conversation asks about."""
    things = set()
    for question, answer in _exchanges(c):
        if is_follow_up(question):
            continue
        if isinstance(answer, list):
            things.add(("pair",
                        tuple(map(int, re.split(r"[-+*/]", answer[0]["text"], maxsplit=1)))))
        elif re.fullmatch(r"\d{4}-\d\d-\d\d", answer):
            things.add(("day", answer))
        elif re.fullmatch(r"[a-z](-[a-z])+", answer):
            things.add(("word", answer.replace("-", "")))
        elif any(p.fullmatch(question) for p in LETTERS):
            things.add(("word", next(p.fullmatch(question) for p in LETTERS
                                     if p.fullmatch(question))["w"].lower()))
        elif c["task"] == "speak-as":
            things.add(("line", answer))
    return things


def test_the_splits_share_no_day_word_line_or_pair_of_numbers():
    seen = {s: set().union(*(_held_out_things(c) for c in DATA[s])) for s in SPLITS}
    assert len(seen["test"]) > 200
    assert (not seen["train"] & seen["test"] and not seen["train"] & seen["val"]
            and not seen["val"] & seen["test"])


@pytest.mark.parametrize("task", CHAT_TASKS)
def test_no_test_or_validation_conversation_or_question_occurs_in_training(task):
    """Review 17-B1: the user turns compared normalised (lower case, letters and digits only). No
    validation or test conversation is a training conversation, and none of their questions (every
    user turn but a follow-up's "Plus 5?", "Which year?"...)
    is a user turn of any training conversation."""
    def users(c):
        return tuple(normalized(m["content"]) for m in c["messages"] if m["role"] == "user")

    train_conversations = {users(c) for c in DATA["train"]}
    train_turns = {u for c in DATA["train"] for u in users(c)}
    for split in ("val", "test"):
        mine = [c for c in DATA[split] if c["task"] == task]
        assert mine
        for c in mine:
            assert users(c) not in train_conversations, (split, c)
            questions = [normalized(m["content"]) for m in c["messages"] if m["role"] == "user"
                         and not is_follow_up(m["content"])]
            assert not set(questions) & train_turns, (split, c)


def test_noise_is_in_training_only_and_phrasings_vary():
    first = {s: [c["messages"][0]["content"] for c in DATA[s]] for s in SPLITS}
    lower = {s: sum(q == q.lower() and q != q.upper() for q in first[s]) / len(first[s])
             for s in SPLITS}
    assert lower["train"] > 0.2  # the noise: many messages all in lower case
    arithmetic = {c["messages"][0]["content"] for c in DATA["train"] if c["task"] == "arithmetic"}
    assert any(" plus " in q for q in arithmetic) and any(" + " in q for q in arithmetic)
    assert (any(re.search(r"\d[-+*/]\d", q) for q in arithmetic)
            and any(" seven " in f" {q} " for q in arithmetic))
    # conversations go on
    assert sum(len(_exchanges(c)) > 1 and c["task"] != "follow-up" for c in DATA["test"]) > 50


def test_conversations_bytes_is_one_conversation_per_line():
    small = build_conversations(0, {"train": 7, "val": 7, "test": 7})
    assert conversations_bytes(small).count(b"\n") == 21


# --- batches for the chat fine-tune ---------------------------------------------------------------

def test_batches_hold_the_assistant_only_targets_and_follow_the_generator():
    import torch

    from course_lib.chat.data import chat_batch_fn, rendered_pairs
    from course_lib.utils import IGNORE_INDEX

    tokenizer = char_chat_tokenizer()
    small = {"train": DATA["train"][:50], "val": DATA["val"][:20]}
    batch_fn = chat_batch_fn(tokenizer, 8, 256, data=small)
    x, y = batch_fn("train", torch.Generator().manual_seed(0))
    x2, y2 = batch_fn("train", torch.Generator().manual_seed(0))
    assert (torch.equal(x, x2) and torch.equal(y, y2) and x.shape == y.shape and x.shape[0] == 8
            and x.shape[1] <= 256)
    pairs, left_out = rendered_pairs(tokenizer, small["train"], 256)
    assert left_out == 0 and len(pairs) == 50
    for row in range(8):  # each row is one conversation's pair, padded with IGNORE_INDEX targets
        match = [p for p in pairs if torch.equal(p[0], x[row, :len(p[0])])
                 and torch.equal(p[1], y[row, :len(p[1])])]
        assert match and (y[row, len(match[0][1]):] == IGNORE_INDEX).all()
    # too long for 20 tokens: left out, never cut
    assert rendered_pairs(tokenizer, small["train"], 20)[1] > 0
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
            expected = ([False, True] if conversation["task"] == "follow-up"
                        else [False] * len(users))
            assert [is_follow_up(u) for u in users] == expected, users
    assert (is_follow_up(" plus 7 ") and not is_follow_up("Plus 5? And then?")
            and not is_follow_up("What is 2+3?"))


def test_packed_batches_fill_every_row_with_whole_conversations_in_turn():
    """``pack``: rows of exactly block_size tokens, conversations one after another, the token
    after each one's <|end|> (the next <|user|>) never
    a target; the same generator, the same rows."""
    import torch

    from course_lib.chat.data import chat_batch_fn
    from course_lib.chat.template import USER
    from course_lib.utils import IGNORE_INDEX

    tokenizer = char_chat_tokenizer()
    small = {"train": DATA["train"][:50], "val": DATA["val"][:20]}
    batch_fn = chat_batch_fn(tokenizer, 4, 128, data=small, pack=True)
    x, y = batch_fn("train", torch.Generator().manual_seed(0))
    x2, y2 = batch_fn("train", torch.Generator().manual_seed(0))
    assert x.shape == y.shape == (4, 128) and torch.equal(x, x2) and torch.equal(y, y2)
    user = tokenizer.special_ids[USER]
    # every row: several conversations
    assert (x[:, 0] == user).all() and (x == user).sum(1).min() >= 2
    starts = (x[:, 1:] == user)
    # the next conversation's <|user|> is not a target
    assert (y[:, :-1][starts] == IGNORE_INDEX).all()
    trained = y != IGNORE_INDEX
    # y is x shifted by one
    assert torch.equal(x[:, 1:][trained[:, :-1]], y[:, :-1][trained[:, :-1]])
