"""A chat model tried as a new user would (issue 54): requests for each checkable chat task in forms
the training conversations never use, each asked in a new conversation and scored by what a right
reply must contain. Chapter 16's standard error and bootstrap interval per task and over all.

**Version 2** (:func:`build_robustness_set_v2`, frozen in
``course_lib/tasks/chat_robustness_v2.json`` with its SHA-256, :data:`ROBUSTNESS_V2_SHA256`; review
R17-B1) was written as the test set and is now the **development** set (its failures steered the
``--more-phrasings`` conversations, re-review 4's 17-B1): 71 requests written as a reader might type
them (other verbs and phrasings, word orders, politeness, typos, numbers in words, operands of one
to three digits, words in and out of the training list, new date forms), and **every** one is held
out from every user message of both files of conversations (``chat.json`` and ``chat_v1.json``, all
splits) under :func:`course_lib.chat.phrasing.abstracted`: lower case, letters and digits only,
numbers and the slot values (word, letter, date) abstracted (tests/test_chat_robustness.py checks
it, and that the check catches a training form). Each item keeps its form and its slots, and where
its word is in the conversations' word lists (``word_pool``).

**Version 1** (:func:`build_robustness_set`, ``tasks/chat_robustness.json``, 61 requests) was
frozen before the training phrasings were rewritten, which then used most of its forms: it is no
longer held out (review R17-B1) and it chose the shipped checkpoint (R17-M2), so it is kept only as
that model's **validation** set, for its records (``records/chat_model_runs.json``) and because the
conversations' generator avoids its forms (``phrasing.held_out_forms``: changing it would change
``chat.json``). :func:`template_seen` splits it into requests whose form training used and the rest.

**Version 3** (``course_lib/tasks/chat_robustness_v3.json``, :data:`ROBUSTNESS_V3_SHA256`,
:func:`load_robustness_set_v3`) is the blind test set: 85 requests written by hand, after the
shipped model, by someone who had read neither the conversations' generators (``phrasing``,
``variety``, ``data``) nor version 2 (``variety``'s phrasings were written after reading version 2's
failures). Each is held out like version 2's, from the ``--more-phrasings`` conversations too: 44 of
the first draft's 85 natural phrasings had a training form and were rewritten, blind, until none had
(11, then 1, then 0; two more for a character the tokenizer lacks and the first model's 64-token
context). So version 3 is 85 requests a new user would type, those that had a training form
rewritten until none had: it measures the phrasings a new user types that training does not cover.
Its identity requests are scored against the eight fixed answers, read without their questions. No
builder makes it: the frozen file is the set.

**Version 4** (``course_lib/tasks/chat_robustness_v4.json``, :data:`ROBUSTNESS_V4_SHA256`,
:func:`load_robustness_set_v4`): version 3 was read for many runs and the shipping decision was
taken with its scores known, so it is a development set now. Version 4 was written blind on
2026-11-29, after chat-char-cpu-5 shipped, by someone who had read none of the generators nor
versions 1-3, and frozen before any model was scored on it: 85 requests by hand (24 arithmetic, 8
in words; 15 spelling, 16 letters, 15 dates, 15 identity). 27 of the first draft's had the form of
a training message (``--more-phrasings``, ``--count-first`` worked, ``--wide-identity`` too) and
were rewritten blind (27, then 2, then 0); none equals a request of versions 2 or 3 or the blind
identity set (0 in every round). It is not on the report card; no model has been scored on it.

Rules (on the text the assistant writes, not its calculator calls), :func:`is_right`:

- ``last-number`` (arithmetic, letters): the last integer in the reply is the answer;
- ``spelled`` (spelling; version 1's ``contains`` on spelling too): the reply holds exactly one run
  of letters joined by "-", and it is the word's, nothing more (``s-w-e-e-t-e`` is wrong, R17-B2);
- ``iso-date`` (dates; version 1's ``contains`` on dates too): exactly one ISO date, the right one,
  bounded (``1999-03-3`` holds none);
- ``exact`` (identity, version 2): the reply is the fixed answer of the question's own group (case
  and spaces at the ends aside); version 1's ``contains`` keeps its key words.

An empty reply (the model ends its turn at once) is wrong. :func:`best_constant` is a task's best
constant answer on a set (the letters task's "always 1"), the baseline a score must beat.
"""
from __future__ import annotations

import datetime
import hashlib
import json
import random
import re
from pathlib import Path

from ..dates import format_date
from .engine import ChatEngine
from .phrasing import (ASK_LETTERS, IDENTITY_ASKS as FIXED_ANSWERS,
                       NUMBER_WORDS as ALL_NUMBER_WORDS, ROBUSTNESS_PATH, letters_patterns,
                       abstracted, exchange_slots, in_words, load_robustness_set, user_forms)
# version 1's, re-exported: its home is phrasing
from .phrasing import ROBUSTNESS_SHA256  # noqa: F401
from .scores import last_number, reply_text, summarize

# --- version 1 (the validation set; see the module docstring) -------------------------------------
NUMBER_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
# Words to spell: some are in the training conversations' spelling list, some are not (the set
# records which), so the score tells a learnt list from spelling.
SPELL_WORDS = ("upon", "king", "night", "sweet", "crown", "honour",
               "father", "heaven", "blood", "gentle", "sword", "mother")
ARITHMETIC_FORMS = ("what is {a} + {b}", "What is {a} + {b}?", "how much is {a}+{b}",
                    "{a} + {b} = ?", "Compute {a} + {b}", "what is {a} minus {b}?",
                    "What's {a} times {b}?", "{a}*{b}?")
WORD_FORMS = ("What is {wa} plus {wb}?", "what is {wa} times {wb}")
SPELL_FORMS = ("Spell {w}.", "spell the word {w}", "How do you spell {w}?", "Please spell {w}.")
LETTER_FORMS = ("how many {c} in {w}", "How many times does {c} appear in {w}?",
                "Count the letter {c} in {w}.")
DATE_FORMS = ("{d} in iso form", "Convert {d} to ISO.",
              "What is {d} in ISO form?", "{d} as an ISO date?")
# (request, what a right reply contains: alternatives joined by "|"); the fixed answers of the
# training conversations say "I am a small GPT...", "A small language model.", "I have no name...",
# "...a course on GPTs."
IDENTITY_ASKS = (("who are you", "gpt|language model"), ("Who are you", "gpt|language model"),
                 ("what is your name", "no name"), ("What's your name?", "no name"),
                 ("who made you", "course"), ("what are you", "gpt|language model"),
                 ("What are you", "gpt|language model"), ("who made you?", "course"))


def build_robustness_set(seed: int = 0) -> list[dict]:
    """The requests, each ``{"task", "request", "answer", "rule"}``, drawn with ``seed``."""
    rng = random.Random(seed)
    items = []
    for i, form in enumerate(ARITHMETIC_FORMS * 2):
        a, b = rng.randint(2, 99 if i % 3 else 9), rng.randint(2, 99 if i % 2 else 9)
        op = "*" if "times" in form or "*" in form else "-" if "minus" in form else "+"
        answer = a * b if op == "*" else a - b if op == "-" else a + b
        items.append(dict(task="arithmetic", request=form.format(a=a, b=b),
                          answer=str(answer), rule="last-number"))
    for form in WORD_FORMS * 2:
        a, b = rng.randint(1, 9), rng.randint(1, 9)
        answer = a * b if "times" in form else a + b
        items.append(dict(task="arithmetic",
                          request=form.format(wa=NUMBER_WORDS[a], wb=NUMBER_WORDS[b]),
                          answer=str(answer), rule="last-number"))
    for i, word in enumerate(SPELL_WORDS):
        items.append(dict(task="spelling", request=SPELL_FORMS[i % len(SPELL_FORMS)].format(w=word),
                          answer="-".join(word), rule="contains"))
    for i, word in enumerate(rng.sample(SPELL_WORDS, 9)):
        letter = rng.choice(sorted(set(word)) + ["e"])
        items.append(dict(task="letters",
                          request=LETTER_FORMS[i % len(LETTER_FORMS)].format(c=letter, w=word),
                          answer=str(word.count(letter)), rule="last-number"))
    for i in range(12):
        day = datetime.date(1950, 1, 1) + datetime.timedelta(days=rng.randrange(365 * 70))
        text = format_date(day, rng.randrange(7), rng.randrange(2))
        items.append(dict(task="dates", request=DATE_FORMS[i % len(DATE_FORMS)].format(d=text),
                          answer=day.isoformat(), rule="contains"))
    for ask, key in IDENTITY_ASKS:
        items.append(dict(task="identity", request=ask, answer=key, rule="contains"))
    return items


def write_robustness_set(path: str | Path = ROBUSTNESS_PATH) -> str:
    """Write the set as JSON (one request a line) and
    return its SHA-256 (for ``ROBUSTNESS_SHA256``)."""
    text = "".join(json.dumps(item, sort_keys=True) + "\n" for item in build_robustness_set())
    Path(path).write_text(text, encoding="utf-8")
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


# --- version 2, the test set (review R17-B1) ------------------------------------------------------
ROBUSTNESS_V2_PATH = ROBUSTNESS_PATH.with_name("chat_robustness_v2.json")
ROBUSTNESS_V2_SHA256 = "3f191c0fea86169c8deef2bf99c125cb56ea22230c1e682221f7b936594bc0a5"
# Every request fits a 64-token context alone (at most 53 characters), so that the shipped models
# can be asked. (form, a, operator, b): other verbs and word orders, politeness, typos, "x" for
# times, operands of one to three digits (training: 0-99)
ARITHMETIC_V2 = (
    ("hey, what's {a}+{b}", 7, "+", 5), ("I need {a} + {b}", 38, "+", 4),
    ("{a} plus {b} equals what?", 26, "+", 59),
    ("what do you get if you add {a} and {b}", 214, "+", 67), ("quick question: {a} * {b}?",
                                                               12, "*", 11),
    ("could you work out {a} - {b} for me", 93, "-", 47), ("{a} times {b} is?", 6, "*", 9),
    ("sum of {a} and {b} please", 145, "+", 230), ("how much do {a} and {b} make?", 8, "+", 15),
    ("Give me the answer to {a} - {b}.", 500, "-", 123), ("what is {a} multiplied with {b}?",
                                                          23, "*", 4),
    ("evaluate {a}*{b}", 123, "*", 45), ("can u do {a} + {b}", 66, "+", 77),
    ("{a} minus {b}, how much is that?", 81, "-", 19), ("Result of {a}+{b}?", 9, "+", 9),
    ("whats {a} x {b}", 7, "*", 8))
# the same, the numbers written in words (a row of their own in the scores)
ARITHMETIC_WORDS_V2 = (
    ("how much is {a} and {b} together", 9, "+", 4), ("add up {a} and {b} for me", 6, "+", 8),
    ("Tell me what {a} minus {b} is.", 12, "-", 5), ("please work out {a} times {b}", 3, "*", 7),
    ("{a} plus {b} equals?", 11, "+", 22), ("what number is {a} times {b}", 4, "*", 6),
    ("{a} minus {b}, please", 60, "-", 25), ("I have {a} apples and eat {b}. How many left?",
                                             8, "-", 3))
# (form, word): words of the training list, of the test list, and of none (python, banana, laptop,
# strawberry: ten letters, longer than any training word)
SPELLING_V2 = (
    ("how do I spell {w}", "castle"), ("spell {w} for me please", "kitchen"),
    ("what's the spelling of {w}?", "sweet"),
    ("can you spell out the word {w}", "dragon"), ("spel the word {w}", "upon"),
    ("letter by letter, {w}", "father"),
    ("how's {w} spelt?", "python"), ("could u spell {w} pls", "garden"),
    ("I'd like {w} spelled out", "tomorrow"),
    ("Give me the letters in {w}.", "banana"), ("write {w} with dashes between the letters",
                                                "crown"),
    ("break {w} into letters", "laptop"), ("Spelling of {w}, please.", "strawberry"),
    ("what letters make up {w}?", "winter"))
# (form, letter, word): three requests for each count 0, 1, 2 and 3, so that no constant answer
# scores above 0.25 (version 1: "1" was right on 7 of 9, review R17-M1)
LETTERS_V2 = (
    ("how many {c}'s are there in {w}?", "r", "strawberry"), ("count the number of {c}'s in {w}",
                                                              "a", "banana"),
    ("how many times does the letter {c} appear in {w}", "o", "tomorrow"),
    ("in the word {w}, how many {c}'s are there?", "z", "castle"),
    ("tell me how many {c} letters {w} has", "e", "sweet"),
    ("number of times {c} shows up in {w}", "g", "garden"), ("{w}: count the {c}'s", "t", "letter"),
    ("what's the count of {c} in {w}?", "e", "dragon"), ("how many {c} are in the word {w}",
                                                         "p", "apple"),
    ("hw many {c} in the word {w}", "y", "python"), ("does {w} have any {c}? how many?",
                                                     "a", "kitchen"),
    ("Count every {c} in {w}, please.", "w", "sweet"))
# (form, day, how the date is written: a format of chapter 11's (its index) or a user's own)
DATES_V2 = (
    ("convert {d} to ISO 8601", (1976, 7, 4), "{M} {o} {y}"), ("what's the ISO date for {d}?",
                                                               (1969, 7, 20), 0),
    ("please give me {d} as yyyy-mm-dd", (2001, 9, 11), "Sept {day}, {y}"),
    ("how do I write {d} in ISO format", (1989, 11, 9), 2), ("Format {d} the ISO way.",
                                                             (2024, 2, 29), "{day} {m}, {y}"),
    ("{d} in year-month-day form?", (1995, 12, 25), 8), ("can you turn {d} into an ISO date",
                                                         (1963, 5, 22), "the {o} of {M} {y}"),
    ("ISO format for {d}, please", (2010, 5, 17), 4), ("I was born on {d}. What is that in ISO?",
                                                       (1987, 3, 14), 5),
    ("change {d} to ISO 8601 format", (2030, 1, 31), "{y}.{mm}.{dd}"),
    ("normalize {d} to ISO", (1958, 8, 16), 1),
    ("write the date {d} the ISO way", (2049, 10, 30), "{M} the {o}, {y}"))
# (question, the index of its group in phrasing.IDENTITY_ASKS):
# a right reply is that group's fixed answer
IDENTITY_V2 = (
    ("hi, who am I chatting with?", 0), ("what's your name, assistant?", 2),
    ("do you go by any name?", 2),
    ("which people made you?", 3), ("are you a chatbot or a person?", 1),
    ("what tasks can you help me with?", 4),
    ("how many parameters are in you?", 6), ("what text were you trained with?", 7),
    ("can you use a calculator?", 5))


def _date_text(day: datetime.date, how) -> str:
    if isinstance(how, int):
        return format_date(day, how)
    ordinal = str(day.day) + ("th" if 11 <= day.day <= 13
                              else {1: "st", 2: "nd", 3: "rd"}.get(day.day % 10, "th"))
    return how.format(M=day.strftime("%B"), m=day.strftime("%b").lower(), o=ordinal, y=day.year,
                      day=day.day, mm=f"{day.month:02d}", dd=f"{day.day:02d}")


def _word_pool(word: str, pools: dict) -> str:
    return next((split for split in ("train", "val", "test") if word in pools[split]["words"]),
                "none")


def build_robustness_set_v2() -> list[dict]:
    """Version 2's requests, each ``{"task", "request", "answer", "rule", "form", "slots"}``, with
    ``numbers`` ("digits" or "words") for arithmetic and ``word_pool`` (the conversations' word list
    that holds the word: train, val, test or none) for spelling and letters."""
    # the conversations' module imports this package's phrasing: here, not at the top
    from .data import _pools

    pools, items = _pools(0), []
    for numbers, table in (("digits", ARITHMETIC_V2), ("words", ARITHMETIC_WORDS_V2)):
        for form, a, op, b in table:
            x, y = (in_words(a), in_words(b)) if numbers == "words" else (a, b)
            answer = a * b if op == "*" else a - b if op == "-" else a + b
            items.append(dict(task="arithmetic", request=form.format(a=x, b=y), answer=str(answer),
                              rule="last-number", form=form, slots={}, numbers=numbers))
    for form, word in SPELLING_V2:
        items.append(dict(task="spelling", request=form.format(w=word), answer="-".join(word),
                          rule="spelled", form=form, slots={"word": word},
                          word_pool=_word_pool(word, pools)))
    for form, letter, word in LETTERS_V2:
        items.append(dict(task="letters", request=form.format(c=letter, w=word),
                          answer=str(word.count(letter)), rule="last-number", form=form,
                          slots={"letter": letter, "word": word},
                          word_pool=_word_pool(word, pools)))
    for form, ymd, how in DATES_V2:
        day = datetime.date(*ymd)
        text = _date_text(day, how)
        items.append(dict(task="dates", request=form.format(d=text), answer=day.isoformat(),
                          rule="iso-date", form=form, slots={"date": text}))
    for question, group in IDENTITY_V2:
        items.append(dict(task="identity", request=question, answer=FIXED_ANSWERS[group][0],
                          rule="exact", form=question, slots={}))
    return items


def write_robustness_set_v2(path: str | Path = ROBUSTNESS_V2_PATH) -> str:
    """Write version 2 as JSON (one request a line) and
    return its SHA-256 (for ``ROBUSTNESS_V2_SHA256``)."""
    text = "".join(json.dumps(item, sort_keys=True) + "\n" for item in build_robustness_set_v2())
    Path(path).write_text(text, encoding="utf-8")
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def load_robustness_set_v2(path: str | Path = ROBUSTNESS_V2_PATH) -> list[dict]:
    """Version 2's frozen requests, after checking the file's SHA-256."""
    return load_robustness_set(path, ROBUSTNESS_V2_SHA256)


# --- version 3, written blind (issue 54): the frozen file is the set ----------------------------
ROBUSTNESS_V3_PATH = ROBUSTNESS_PATH.with_name("chat_robustness_v3.json")
ROBUSTNESS_V3_SHA256 = "ceed3d647016d9b836825650c783b8bf31620bed5b7e1d21f0f89045d38139b0"


def load_robustness_set_v3(path: str | Path = ROBUSTNESS_V3_PATH) -> list[dict]:
    """Version 3's frozen requests (written by hand, blind), after checking the file's SHA-256."""
    return load_robustness_set(path, ROBUSTNESS_V3_SHA256)


# --- version 4, written blind after chat-char-cpu-5 shipped (issue 54): the frozen file is the set
ROBUSTNESS_V4_PATH = ROBUSTNESS_PATH.with_name("chat_robustness_v4.json")
ROBUSTNESS_V4_SHA256 = "3f7b3d6c5774963cbea87d775e50ee6bc7b35de1a343071692a6efe0010517ab"


def load_robustness_set_v4(path: str | Path = ROBUSTNESS_V4_PATH) -> list[dict]:
    """Version 4's frozen requests (written by hand, blind), after checking the file's SHA-256."""
    return load_robustness_set(path, ROBUSTNESS_V4_SHA256)


def training_forms(splits=("train", "val", "test"), v1: bool = True) -> set[str]:
    """The :func:`~course_lib.chat.phrasing.abstracted` forms of every user message of ``splits`` of
    the conversations (``chat.json``, and with ``v1`` also ``chat_v1.json``, which the first model
    read)."""
    from .data import CHAT_V1_PATH, CHAT_V1_SHA256, load_conversations

    files = ([load_conversations()] + ([load_conversations(path=CHAT_V1_PATH,
                                                           sha256=CHAT_V1_SHA256)] if v1 else []))
    return user_forms([c for data in files for split in splits for c in data[split]])


V1_LETTERS_PATTERNS = letters_patterns(ASK_LETTERS + LETTER_FORMS)


def request_form(item: dict) -> str:
    """A request's abstracted form: with its own slots (version 2), or the slots read from its
    answer as for a training exchange (version 1, whose items do not store them)."""
    slots = item.get("slots")
    if slots is None:
        slots = exchange_slots(item["request"], item["answer"], V1_LETTERS_PATTERNS)
    return abstracted(item["request"], **slots)


def template_seen(items: list[dict], forms: set[str]) -> list[bool]:
    """For each item, whether its :func:`request_form`
    is one of ``forms`` (a training message's)."""
    return [request_form(item) in forms for item in items]


def numbers_in_words(item: dict) -> bool:
    """Whether an arithmetic request writes its numbers in words: its ``numbers`` where it says
    (version 3's "quick one: 15-7" is in digits), else whether it holds a number word
    (version 1)."""
    if "numbers" in item:
        return item["numbers"] == "words"
    return any(w in ALL_NUMBER_WORDS for w in re.findall(r"[a-z]+", item["request"].lower()))


def row_keys(item: dict) -> list[str]:
    """The rows of the scores an item counts in: its task's, and for arithmetic digits or words."""
    if item["task"] != "arithmetic":
        return [item["task"]]
    return ["arithmetic",
            "arithmetic, numbers in words" if numbers_in_words(item) else "arithmetic, digits"]



def spellings(reply: str) -> list[str]:
    """The runs of single letters joined by "-" in ``reply``
    (lower case), each bounded by no letter or "-"."""
    return re.findall(r"(?<![a-z-])[a-z](?:-[a-z])+(?![a-z-])", reply.lower())


def iso_dates(reply: str) -> list[str]:
    """The ISO dates in ``reply``, each bounded by no digit or "-"."""
    return re.findall(r"(?<![0-9-])[0-9]{4}-[0-9]{2}-[0-9]{2}(?![0-9-])", reply)


def is_right(item: dict, reply: str) -> bool:
    """Whether ``reply`` (the assistant's text) answers
    ``item`` by its rule (module docstring); empty is wrong."""
    reply, rule, answer = reply.strip(), item["rule"], item["answer"]
    if not reply:
        return False
    if rule == "last-number":
        return last_number(reply) == answer
    if rule == "spelled" or (rule == "contains" and item.get("task") == "spelling"):
        return spellings(reply) == [answer.lower()]
    if rule == "iso-date" or (rule == "contains" and item.get("task") == "dates"):
        return iso_dates(reply) == [answer]
    if rule == "exact":
        return reply.lower() == answer.lower()
    if rule == "contains":
        return any(alternative in reply.lower() for alternative in answer.lower().split("|"))
    raise ValueError(f"unknown rule {rule!r}: "
                     "use last-number, spelled, iso-date, exact or contains")


def best_constant(items: list[dict], task: str | None = None) -> dict:
    """The best constant reply for ``task`` on ``items`` (every task when None): each of the
    answers tried as the reply to every request (by the items' own rules); the one right most
    often, its score and n."""
    mine = [i for i in items if task is None or i["task"] == task]
    if not mine:
        raise ValueError(f"no {task} request in the set: choose from "
                         f"{', '.join(dict.fromkeys(i['task'] for i in items))}")
    answers = sorted({i["answer"] for i in mine})
    scores = {a: sum(is_right(i, a) for i in mine) / len(mine) for a in answers}
    best = max(answers, key=lambda a: (scores[a], -answers.index(a)))
    return {"answer": best, "score": scores[best], "n": len(mine)}


def score_robustness(model, tokenizer, items: list[dict] | None = None, seed: int = 0,
                     progress: bool = False) -> dict:
    """Each request asked greedily in a new conversation (the calculator on); overall, per task, and
    arithmetic in digits and in words apart (:func:`row_keys`): the share right with its standard
    error and bootstrap interval, and every reply. ``items``: version 2 by default."""
    from tqdm.auto import tqdm
    items = items if items is not None else load_robustness_set_v2()
    engine = ChatEngine(model, tokenizer, temperature=0.0, max_reply_tokens=48)
    rows = []
    for item in tqdm(items, desc="requests", disable=not progress, leave=False):
        engine.reset()
        reply = reply_text(list(engine.stream(item["request"])))
        rows.append({**item, "reply": reply, "right": is_right(item, reply)})
    out = {"all": summarize([float(r["right"]) for r in rows], seed)}
    for key in dict.fromkeys(k for r in rows for k in row_keys(r)):
        out[key] = summarize([float(r["right"]) for r in rows if key in row_keys(r)], seed)
    out["rows"] = rows
    return out


CARD_SETS = {  # report-card name -> (loader, what it asks)
    "chat-v2": (load_robustness_set_v2, "chapter 17's development set: requests as readers type "
                "them, in no training form"),
    "chat-v3": (load_robustness_set_v3, "chapter 17's blind test set: requests written blind to "
                "the training phrasings"),
}


def card_rows(model, tokenizer, limit: int | None = None, progress: bool = False) -> list[dict]:
    """The robustness sets as rows of chapter 16's report card (``python -m course_lib eval`` on a
    chat checkpoint): each set's first ``limit`` requests, the share answered right with its
    standard error and 95% bootstrap interval, and as its baseline the best single constant reply
    (one answer given to every request, judged by each request's rule). No rows for a model whose
    tokenizer is not a chat tokenizer."""
    from .template import ChatTokenizer
    if not isinstance(tokenizer, ChatTokenizer):
        return []
    rows = []
    for name, (load, description) in CARD_SETS.items():
        items = load()[:limit] if limit else load()
        scored = score_robustness(model, tokenizer, items, progress=progress)
        right = [float(r["right"]) for r in scored["rows"]]
        rows.append({"task": name, "kind": "generate", "metric": "right", "n": len(items),
                     "chance": best_constant(items)["score"], "baseline": "constant",
                     "description": description,
                     **{k: scored["all"][k] for k in ("score", "stderr", "interval")},
                     "per_item": right, "replies": [r["reply"] for r in scored["rows"]]})
    return rows
