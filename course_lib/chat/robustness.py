"""A chat model tried as a new user would (issue 54): requests for each checkable chat task in forms
the shipped conversations never use (spaces around operators, lower case, no question mark, other
verbs and phrasings, numbers in words, words in and out of the training list), each asked in a new
conversation and scored by what a right reply must contain. Frozen in
``course_lib/tasks/chat_robustness.json`` with its SHA-256, held out from every split of the
conversations (tests/test_chat_robustness.py checks both).

Rules (on the text the assistant writes, not its calculator calls):

- ``arithmetic`` and ``letters``: the last integer in the reply is the answer;
- ``spelling``: the reply contains the letters joined by "-" (the data's own form);
- ``dates``: the reply contains the ISO date;
- ``identity``: the reply contains the key words of one of the assistant's fixed answers to it.

An empty reply (the model ends its turn at once) is wrong. Scores come with chapter 16's standard
error and bootstrap interval, per task and over all requests.
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
from .phrasing import ROBUSTNESS_PATH, ROBUSTNESS_SHA256, load_robustness_set  # noqa: F401 (the set's home)
from .scores import reply_text, summarize

NUMBER_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
# Words to spell: some are in the training conversations' spelling list, some are not (the set
# records which), so the score tells a learnt list from spelling.
SPELL_WORDS = ("upon", "king", "night", "sweet", "crown", "honour", "father", "heaven", "blood", "gentle",
               "sword", "mother")
ARITHMETIC_FORMS = ("what is {a} + {b}", "What is {a} + {b}?", "how much is {a}+{b}", "{a} + {b} = ?",
                    "Compute {a} + {b}", "what is {a} minus {b}?", "What's {a} times {b}?", "{a}*{b}?")
WORD_FORMS = ("What is {wa} plus {wb}?", "what is {wa} times {wb}")
SPELL_FORMS = ("Spell {w}.", "spell the word {w}", "How do you spell {w}?", "Please spell {w}.")
LETTER_FORMS = ("how many {c} in {w}", "How many times does {c} appear in {w}?", "Count the letter {c} in {w}.")
DATE_FORMS = ("{d} in iso form", "Convert {d} to ISO.", "What is {d} in ISO form?", "{d} as an ISO date?")
# (request, what a right reply contains: alternatives joined by "|"); the fixed answers of the training
# conversations say "I am a small GPT...", "A small language model.", "I have no name...", "...a course on GPTs."
IDENTITY_ASKS = (("who are you", "gpt|language model"), ("Who are you", "gpt|language model"),
                 ("what is your name", "no name"), ("What's your name?", "no name"), ("who made you", "course"),
                 ("what are you", "gpt|language model"), ("What are you", "gpt|language model"),
                 ("who made you?", "course"))


def build_robustness_set(seed: int = 0) -> list[dict]:
    """The requests, each ``{"task", "request", "answer", "rule"}``, drawn with ``seed``."""
    rng = random.Random(seed)
    items = []
    for i, form in enumerate(ARITHMETIC_FORMS * 2):
        a, b = rng.randint(2, 99 if i % 3 else 9), rng.randint(2, 99 if i % 2 else 9)
        op = "*" if "times" in form or "*" in form else "-" if "minus" in form else "+"
        answer = a * b if op == "*" else a - b if op == "-" else a + b
        items.append(dict(task="arithmetic", request=form.format(a=a, b=b), answer=str(answer), rule="last-number"))
    for form in WORD_FORMS * 2:
        a, b = rng.randint(1, 9), rng.randint(1, 9)
        answer = a * b if "times" in form else a + b
        items.append(dict(task="arithmetic", request=form.format(wa=NUMBER_WORDS[a], wb=NUMBER_WORDS[b]),
                          answer=str(answer), rule="last-number"))
    for i, word in enumerate(SPELL_WORDS):
        items.append(dict(task="spelling", request=SPELL_FORMS[i % len(SPELL_FORMS)].format(w=word),
                          answer="-".join(word), rule="contains"))
    for i, word in enumerate(rng.sample(SPELL_WORDS, 9)):
        letter = rng.choice(sorted(set(word)) + ["e"])
        items.append(dict(task="letters", request=LETTER_FORMS[i % len(LETTER_FORMS)].format(c=letter, w=word),
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
    """Write the set as JSON (one request a line) and return its SHA-256 (for ``ROBUSTNESS_SHA256``)."""
    text = "".join(json.dumps(item, sort_keys=True) + "\n" for item in build_robustness_set())
    Path(path).write_text(text, encoding="utf-8")
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def is_right(item: dict, reply: str) -> bool:
    """Whether ``reply`` (the assistant's text) answers ``item`` by its rule; empty is wrong."""
    reply = reply.strip()
    if not reply:
        return False
    if item["rule"] == "last-number":
        numbers = re.findall(r"-?\d+", reply)
        return bool(numbers) and numbers[-1] == item["answer"]
    return any(alternative in reply.lower() for alternative in item["answer"].lower().split("|"))


def score_robustness(model, tokenizer, items: list[dict] | None = None, seed: int = 0) -> dict:
    """Each request asked greedily in a new conversation (the calculator on); per task and overall:
    the share right with its standard error and bootstrap interval, and every reply."""
    items = items if items is not None else load_robustness_set()
    engine = ChatEngine(model, tokenizer, temperature=0.0, max_reply_tokens=48)
    rows = []
    for item in items:
        engine.reset()
        reply = reply_text(list(engine.stream(item["request"])))
        rows.append({**item, "reply": reply, "right": is_right(item, reply)})
    out = {"all": summarize([float(r["right"]) for r in rows], seed)}
    for task in dict.fromkeys(r["task"] for r in rows):
        out[task] = summarize([float(r["right"]) for r in rows if r["task"] == task], seed)
    out["rows"] = rows
    return out
