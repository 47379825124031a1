"""The many ways a user asks for the same thing, for the conversations made by code (chapter 17).

A model fine-tuned on one or two phrasings of each request answers those and little else (issue 54:
"What is 7+5?" right, "What is 7 + 5?" an empty reply). So each request of
:mod:`course_lib.chat.data` is written in one of several phrasings, its numbers in digits or in
words, its operator as a sign (with or without spaces) or a word, and the training split's messages
get **noise** (:func:`noisy`):
lower case, a capital, the last punctuation mark left out. The validation and test splits keep the
phrasings clean, so their scores are in-template scores.

The phrasings were written as a user might type them, not copied from the first robustness set
(``course_lib/tasks/chat_robustness.json``, version 1), and a message that has the form of one of
its requests exactly, digits aside, is left out of every split (:func:`held_out_forms`). That check
is weak: it keeps case and marks, and version 1's requests mostly differ from training messages only
in those and the values.

Identity questions and speak-as requests are cut by phrasing (:data:`IDENTITY_ASKS`,
:func:`speak_as_split`): a test split's question is never a training question.

**The hold-out check** (review R17-B1). That first set (version 1) stopped being held out when the
training phrasings and noise were written: most of its requests differ from a training message only
in case, a mark and the values. Version 2 (``course_lib.chat.robustness``) is checked under a strict
normalisation, :func:`abstracted`: lower case, letters and digits only, every number (digits or
number words) one ``#``, and the task's slot values (the word to spell ``W``, the letter to count
``C``, the date ``D``) abstracted, so that "Spell the word upon." and "spell the word KING" are one
form. :func:`user_forms` gives the forms of every user message of a file of conversations, each
exchange's slots read from its own answer (:func:`exchange_slots`).
"""
from __future__ import annotations

import datetime
import hashlib
import json
import random
import re
from pathlib import Path

from ..dates import DATE_FORMATS, format_date

# The held-out robustness set (course_lib.chat.robustness builds and scores it; here, since the
# conversations must avoid its forms and
# course_lib.chat.robustness imports the conversations' module)
ROBUSTNESS_PATH = Path(__file__).parent.parent / "tasks" / "chat_robustness.json"
ROBUSTNESS_SHA256 = "34a9e071a47185d4412b6e47b482a1614af45ac9afe86d502a99be9f4baebc24"
ONES = ("zero", "one", "two", "three", "four", "five", "six", "seven",
        "eight", "nine", "ten", "eleven", "twelve", "thirteen", "fourteen",
        "fifteen", "sixteen", "seventeen", "eighteen", "nineteen")
TENS = ("", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety")

# An arithmetic request: a phrasing of the expression {e} (digits or words, a sign or a word), or a
# sentence that names the operation
ASK_EXPRESSION = ("What is {e}?", "Compute {e}.", "{e} =?", "How much is {e}?",
                  "What's {e}?", "Calculate {e}.", "Work out {e}.", "{e}", "{e}=",
                  "Please compute {e}.", "Tell me {e}.", "Solve {e}.",
                  "Can you compute {e}?", "What does {e} make?", "Find {e}.", "And {e}?")
OPERATOR_WORDS = {"+": ("plus", "and"), "-": ("minus", "take away"),
                  "*": ("times", "multiplied by"), "/": ("divided by", "over")}
ASK_OPERATION = {"+": ("Add {a} and {b}.", "The sum of {a} and {b}?", "Add {b} to {a}."),
                 "-": ("Subtract {b} from {a}.", "Take {b} from {a}.",
                       "The difference of {a} and {b}?"),
                 "*": ("Multiply {a} by {b}.", "The product of {a} and {b}?",
                       "Multiply {a} and {b}."),
                 "/": ("Divide {a} by {b}.", "The quotient of {a} and {b}?", "Split {a} by {b}.")}
ASK_SPELLING = ("Spell {w}.", "How do you spell {w}?", "Spell the word {w}.", "Can you spell {w}?",
                "Spell out {w}.", "How is {w} spelled?", "Spell {w} for me.",
                "What are the letters of {w}?", "Spell the word: {w}.", "Letters of {w}?",
                "Could you spell {w}?", "I need {w} spelled.")
ASK_LETTERS = ("How many {c} in {w}?", "Count the {c} in {w}.", "How many {c}'s in {w}?",
               "How often does {c} occur in {w}?", "Number of {c} in {w}?",
               "In {w}, how many {c}?", "How many letters {c} are in {w}?",
               "Count {c} in {w}.", "How many {c} does {w} have?",
               "How many times is {c} in {w}?", "Count how many {c} in {w}.")
ASK_DATE = ("{d} in ISO form?", "ISO date of {d}?", "Write {d} as ISO.", "Rewrite {d} in ISO form.",
            "What is the ISO form of {d}?", "Put {d} in ISO form.", "{d} in ISO?",
            "ISO form of {d}?", "Give {d} in ISO form.", "Turn {d} into ISO.", "{d} to ISO",
            "What's {d} in ISO?", "Please write {d} as ISO.", "{d}, ISO please.")
# Identity: (the assistant's fixed answer, its questions); the first questions of each go to the
# training split, the second last to validation, the last to test (cut by phrasing)
IDENTITY_ASKS = (
    ("I am a small GPT that read Shakespeare.",
     ("Who are you?", "Tell me who you are.", "Introduce yourself.", "Who am I talking to?",
      "Who is this?", "Identify yourself.", "And you are?")),
    ("A small language model.",
     ("What are you?", "What kind of thing are you?", "What sort of program are you?",
      "Are you a person?", "Are you human?", "What exactly are you?")),
    ("I have no name. I am a small GPT.",
     ("What is your name?", "Do you have a name?", "What are you called?", "Tell me your name.",
      "Your name?", "What should I call you?", "Have you got a name?")),
    ("The readers of a course on GPTs.",
     ("Who made you?", "Who built you?", "Who created you?", "Where do you come from?",
      "Who trained you?", "Who wrote you?")),
    ("Dates, sums, spelling, and Shakespeare.",
     ("What can you do?", "What are you good at?", "How can you help?", "What can I ask you?",
      "What do you know?", "What are your skills?")),
    ("Yes: a calculator for sums.",
     ("Can you use tools?", "Do you have tools?", "Do you use a calculator?",
      "Can you call a tool?", "Any tools?", "Do you have a calculator?")),
    ("Under two million parameters.",
     ("How big are you?", "How many parameters do you have?", "How large are you?",
      "What is your size?", "How small are you?", "How many weights do you have?")),
    ("Tiny Shakespeare, one million letters.",
     ("What did you read?", "What were you trained on?", "What is your training data?",
      "Which text did you learn from?", "What books do you know?", "What have you read?")),
)
ASK_SPEAK_AS = ("Speak as {s}.", "Say a line as {s}.", "Be {s}.", "Talk like {s}.",
                "A line of {s}.", "Give me a line by {s}.", "Quote {s}.", "Play {s}.",
                "Now speak as {s}.", "Answer as {s}.")


def in_words(n: int) -> str:
    """A number from 0 to 99 in English words ("forty-two")."""
    if not 0 <= n <= 99:
        raise ValueError(f"in_words takes 0 to 99, got {n}")
    if n < 20:
        return ONES[n]
    return TENS[n // 10] + ("" if n % 10 == 0 else "-" + ONES[n % 10])


def arithmetic_request(a: int, op: str, b: int, rng: random.Random) -> str:
    """A user's request for ``a op b``, in one of many phrasings."""
    words = rng.random() < 0.2
    x, y = (in_words(a), in_words(b)) if words else (str(a), str(b))
    if rng.random() < 0.15:
        return rng.choice(ASK_OPERATION[op]).format(a=x, b=y)
    sign = rng.choice(OPERATOR_WORDS[op]) if words or rng.random() < 0.3 else op
    expression = (f"{x} {sign} {y}" if words or len(sign) > 1 or rng.random() < 0.5
                  else f"{x}{sign}{y}")
    return rng.choice(ASK_EXPRESSION).format(e=expression)


def identity_split(split: str) -> list[tuple[str, str]]:
    """The (question, answer) pairs of one split: each answer's questions cut by phrasing."""
    cut = {"train": slice(0, -2), "val": slice(-2, -1), "test": slice(-1, None)}[split]
    return [(q, answer) for answer, questions in IDENTITY_ASKS for q in questions[cut]]


def speak_as_split(speaker_index: int, form_index: int) -> str:
    """The split of one (speaker, phrasing) pair: every speaker has one test and one validation
    phrasing of the ten, and eight for training."""
    r = (speaker_index + form_index) % len(ASK_SPEAK_AS)
    return "test" if r == 0 else "val" if r == 1 else "train"


def noisy(text: str, rng: random.Random) -> str:
    """The training split's noise on a user's message: sometimes all lower case or a capital
    first, sometimes the last punctuation mark left out."""
    r = rng.random()
    if r < 0.25:
        text = text.lower()
    elif r < 0.35:
        text = text[:1].upper() + text[1:]
    if rng.random() < 0.3 and len(text) > 1 and text[-1] in ".?":
        text = text[:-1]
    return text


def form(text: str) -> str:
    """A message's form: its digits replaced by N (the robustness set's test of held-out forms)."""
    return re.sub(r"\d+", "N", text)


def load_robustness_set(path: str | Path = ROBUSTNESS_PATH, sha256: str
                        | None = None) -> list[dict]:
    """The frozen requests of the robustness set, after checking the file's SHA-256."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"the robustness set {path} is missing from this installation: "
                                "reinstall course_lib")
    data = path.read_bytes()
    digest, expected = hashlib.sha256(data).hexdigest(), sha256 or ROBUSTNESS_SHA256
    if digest != expected:
        raise ValueError(f"{path} has SHA-256 {digest}, not the {expected} this course_lib was "
                         "released with: the file is damaged or was edited. Reinstall course_lib")
    return [json.loads(line) for line in data.decode("utf-8").splitlines()]


def held_out_forms() -> set[str]:
    """The forms of the robustness set's requests, which no conversation may have."""
    return {form(item["request"]) for item in load_robustness_set()}


def normalized(text: str) -> str:
    """A message compared across splits: lower case, letters and digits only ("What is 7 + 5?"
    and "what is 7+5" are one question)."""
    return re.sub(r"[^a-z0-9]", "", text.lower())


# --- the hold-out check of the robustness set, version 2 (review R17-B1) --------------------------

NUMBER_WORDS = frozenset(ONES + TENS[2:] + ("hundred", "thousand", "million"))
ISO_DATE = re.compile(r"\d{4}-\d\d-\d\d")
SPELLED = re.compile(r"[a-z](?:-[a-z])+")


def abstracted(text: str, word: str | None = None, letter: str | None = None,
               date: str | None = None) -> str:
    """``text``'s form: lower case; the slot values given (the date's text, the word, the letter, as
    whole words) replaced by ``D``, ``W``, ``C``; every number, in digits or words ("42",
    "forty-two"), by ``#`` (a run of them, "7 + 5", is one ``#``); then letters, digits and those
    marks only. ``abstracted("How many e's in sweet?", word="sweet", letter="e") ==
    "howmanyCsinW"``."""
    text = text.lower()
    if date:
        text = text.replace(date.lower(), " D ")
    for value, mark in ((word, " W "), (letter, " C ")):
        if value:
            text = re.sub(rf"(?<![a-z]){re.escape(value.lower())}(?![a-z])", mark, text)
    text = re.sub(r"\d+", "#", text)
    text = re.sub(r"[a-z]+", lambda m: "#" if m.group() in NUMBER_WORDS else m.group(), text)
    return re.sub("#+", "#", re.sub(r"[^a-z0-9#WCD]", "", text))


def letters_patterns(forms) -> list[re.Pattern]:
    """Letter-count phrasings as regexes: any case, the last mark optional (the training noise)."""
    out = []
    for template in forms:
        text = re.escape(template.rstrip(".?"))
        text = (text.replace(re.escape("{c}"), "(?P<c>[a-z])")
                .replace(re.escape("{w}"), "(?P<w>[a-z]+)"))
        out.append(re.compile(text + r"[.?]?", re.IGNORECASE))
    return out


LETTERS_PATTERNS = letters_patterns(ASK_LETTERS)


def exchange_slots(question: str, answer, letters_patterns=LETTERS_PATTERNS) -> dict:
    """The slot values of one exchange, read from its answer: an ISO date -> the date's text in the
    question (any of chapter 11's formats and cases); letters joined by "-" -> the word spelled; a
    count -> the letter and word of a letter-count phrasing. ``{}`` for other exchanges."""
    if not isinstance(answer, str):
        return {}
    if ISO_DATE.fullmatch(answer):
        day, low = datetime.date.fromisoformat(answer), question.lower()
        texts = [format_date(day, s, k) for s in range(len(DATE_FORMATS)) for k in range(3)]
        found = sorted((t for t in texts if t.lower() in low), key=len)
        return {"date": found[-1]} if found else {}
    if SPELLED.fullmatch(answer):
        return {"word": answer.replace("-", "")}
    if answer.isdigit():
        for pattern in letters_patterns:
            m = pattern.fullmatch(question)
            if m:
                return {"letter": m["c"], "word": m["w"]}
    return {}


def user_forms(conversations: list[dict]) -> set[str]:
    """The :func:`abstracted` form of every user message of ``conversations``, each with the slots
    of its own exchange (:func:`exchange_slots`)."""
    forms = set()
    for c in conversations:
        messages = c["messages"]
        for question, answer in zip(messages[0::2], messages[1::2]):
            forms.add(abstracted(question["content"],
                                 **exchange_slots(question["content"], answer["content"])))
    return forms
