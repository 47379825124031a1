"""More training conversations, in wider phrasings and noisier typing (issue 54, chapter 17).

The shipped conversations (:mod:`course_lib.chat.data`) ask for each task in a dozen phrasings with
light noise, and the model fine-tuned on them answers about half of the held-out test set
(``tasks/chat_robustness_v2.json``): it fails on what those phrasings never do. These conversations
add, to the **training** split only (``chat-sft --more-phrasings``; the validation and test splits,
and so the in-template scores, stay those of ``chat.json``):

- many more phrasings of every request, each optionally opened by a greeting ("hi, ", "ok so ") and
  closed by a courtesy (" please", " thanks"), with typos in the phrasing's own words (a letter
  dropped, doubled or swapped; "u" for "you"), case and spacing noise;
- operands of one to three digits, numbers in words up to 999, "x" for times, short word problems;
- words to spell or count in from the training word list and random strings of 3 to 12 letters;
- dates in more ways of writing them (ordinals without a comma, "Sept", day.month.year);
- eleven more questions for each identity answer, and follow-ups in other words.

Values come from the training pools of :func:`course_lib.chat.data._pools` only (days, words,
number pairs by the same rule), so nothing of the validation or test splits enters. Every user
message's :func:`~course_lib.chat.phrasing.abstracted` form (its slots known here, so abstracted
exactly) is kept with its conversation (``"forms"``), and a conversation with a form of the held-out
test set is drawn again: version 2 stays held out (tests/test_chat_variety.py checks both).

These phrasings were written after the test set's failures were read (its kinds of variety:
typos, three-digit operands, numbers in words, other verbs), never from its requests: version 2
measures requests held out as whole forms, not kinds of variety never seen.
"""
from __future__ import annotations

import calendar
import datetime
import functools
import hashlib
import json
import random
import re

from ..dates import FIRST_DAY
from .calculator import calculate
from .data import MAX_TOKENS, _pair_split, _pools, _word, char_chat_tokenizer
from .phrasing import IDENTITY_ASKS, abstracted, in_words, normalized
from .robustness import load_robustness_set_v2, request_form
from .template import render

MORE_SIZE = 24000  # training conversations added
MORE_SEED = 54
# the SHA-256 of the conversations build_more_conversations() makes (more_sha256): a change to the
# generator changes it, and with it what the shipped chat model was trained on
MORE_SHA256 = "4abdd5d790b94eedba6081569aeea4c1d30fadc5b1eb3ffaca2d66e1eb63072d"

GREETINGS = ("hi, ", "hi ", "hey, ", "hello ", "ok so ", "ok, ", "so ", "hmm, ", "hey there, ",
             "good day. ", "yo ", "excuse me, ", "one more: ", "next: ", "now ")
COURTESIES = (" please", " pls", " plz", ", thanks", " thank you", " for me", " for me please",
              " thx", ", cheers", " now", " quickly", "?!", "??", " ?", "...")

# {e}: the expression; {a}, {b}: the operands (digits or words)
ASK_EXPR = ("what is {e}", "what's {e}", "whats {e}", "how much is {e}", "how much's {e}",
            "calculate {e}", "compute {e}", "{e}", "{e} =", "{e} = ?", "{e}=?", "{e} is?",
            "what does {e} give", "what does {e} come to", "solve {e}", "work out {e}",
            "figure out {e}", "do {e}", "can you do {e}", "could you calculate {e}",
            "tell me {e}", "answer {e}", "find {e}", "what is the value of {e}",
            "what would {e} be", "what do you get for {e}", "and {e}", "how about {e}",
            "math: {e}", "sum: {e}", "i want to know {e}", "what comes out of {e}",
            "help me with {e}", "do the math: {e}", "you know {e}?", "{e}, what is it",
            "what's the answer to {e}", "tell me the result of {e}", "check {e}",
            "can you calculate {e}", "how much would {e} be", "is {e} what")
SIGNS = {"+": ("+", "plus", "and", "add"), "-": ("-", "minus", "less", "take away"),
         "*": ("*", "x", "times", "multiplied by"), "/": ("/", "divided by", "over")}
ASK_OP = {"+": ("add {a} and {b}", "add {a} to {b}", "the sum of {a} and {b}",
                "what's the sum of {a} and {b}", "{a} and {b} added together",
                "put {a} and {b} together", "total of {a} and {b}", "sum {a} and {b}",
                "{a} with {b} added", "increase {a} by {b}", "{a} more than {b}"),
          "-": ("subtract {b} from {a}", "take {b} away from {a}", "{a} take away {b}",
                "the difference between {a} and {b}", "{b} less than {a}",
                "reduce {a} by {b}", "{a} subtract {b}", "remove {b} from {a}"),
          "*": ("multiply {a} by {b}", "multiply {a} and {b}", "the product of {a} and {b}",
                "{a} multiplied by {b}", "{a} lots of {b}", "{a} groups of {b}",
                "what's {a} multiplied by {b}", "times {a} by {b}"),
          "/": ("divide {a} by {b}", "{a} divided by {b}", "split {a} into {b}",
                "how many times does {b} go into {a}", "the quotient of {a} and {b}")}
STORIES = {"+": ("there are {a} cats and {b} dogs. how many animals?",
                 "a box holds {a} pens and another {b}. how many pens in all?",
                 "tom had {a} coins and found {b} more. how many coins now?",
                 "we sold {a} books today and {b} yesterday. total?"),
           "-": ("{a} birds sit on a wall and {b} fly off. how many are still there?",
                 "a shop had {a} hats and sold {b}. how many hats remain?",
                 "she had {a} coins and spent {b}. what is left?",
                 "from {a} cards i give away {b}. how many do i keep?"),
           "*": ("{a} boxes with {b} pens each. how many pens?",
                 "{a} rows of {b} chairs. how many chairs?")}
ASK_SPELL = ("spell {w}", "spell the word {w}", "how do you spell {w}", "how do i spell {w}",
             "can you spell {w}", "can u spell {w}", "please spell {w}", "spell out {w}",
             "spell out the word {w}", "spelling of {w}", "the spelling of {w}",
             "{w}, letter by letter", "{w} letter by letter", "give me {w} letter by letter",
             "how is {w} spelt", "how is {w} spelled", "how do you write {w}",
             "write out {w} letter by letter", "{w} spelled out", "split {w} into letters",
             "what letters are in {w}", "the letters of {w}", "spell {w} with dashes",
             "spell it: {w}", "spell this word: {w}", "{w}: spell it", "i want {w} spelled",
             "spell {w} for me", "could you spell out {w}", "what is the spelling of {w}",
             "letters in the word {w}", "show me how {w} is spelled")
ASK_COUNT = ("how many {c}'s in {w}", "how many {c}s are in {w}", "how many {c} are in {w}",
             "how many times does {c} appear in {w}", "how many times is {c} in {w}",
             "how many times does the letter {c} occur in {w}", "count the {c}'s in {w}",
             "count {c} in the word {w}", "number of {c}'s in {w}", "number of {c} in the word {w}",
             "how many {c} does the word {w} have", "in the word {w} how many {c}",
             "{w}: how many {c}?", "how often is {c} in {w}", "count how often {c} occurs in {w}",
             "how many letter {c} in {w}", "what is the count of {c} in {w}",
             "how many {c}'s does {w} contain", "count the letter {c} in {w}",
             "in {w}, count the {c}'s", "how many of the letter {c} in {w}",
             "tell me the number of {c}'s in {w}", "count {c}'s in {w}",
             "how many {c} can you find in {w}", "{c} in {w}: how many times")
ASK_DATE = ("convert {d} to iso", "convert {d} to ISO format", "{d} in ISO 8601",
            "{d} as an ISO date", "{d} as YYYY-MM-DD", "write {d} as yyyy-mm-dd",
            "give me {d} in iso", "format {d} as iso", "normalise {d}", "change {d} into ISO",
            "iso of {d}", "turn {d} into an iso date", "what's {d} in iso format",
            "what is {d} in ISO 8601", "ISO 8601 for {d}", "iso date for {d}",
            "please put {d} in iso format", "can you make {d} an ISO date",
            "rewrite {d} as an iso date", "the ISO form of {d}", "{d}, in iso format",
            "express {d} in iso form", "date {d} in ISO")
# how a user writes a date, beyond chapter 11's formats (the day, the month's name or
# abbreviation, its number, the year)
DATE_WAYS = ("{M} {o} {y}", "{M} {o}, {y}", "{m} {o} {y}", "{o} of {M} {y}", "{o} of {M}, {y}",
             "the {o} of {M} {y}", "{M} the {o}, {y}", "{d} {M}, {y}", "{m}. {d}, {y}",
             "{d}.{mm}.{y}", "{y}.{mm}.{dd}", "{dd}.{mm}.{y}", "{d}/{mm}/{y}", "{y}-{mm}-{dd}",
             "{d} {m}. {y}", "{S} {d}, {y}", "{d} {S} {y}")
SEPT = {9: "Sept", 6: "June", 7: "July"}
# identity: more questions for each group of phrasing.IDENTITY_ASKS (the same fixed answers)
IDENTITY_MORE = (
    ("who am i speaking to", "who are u", "who is there", "who's this", "and who are you",
     "tell me about yourself", "may i know who you are", "say who you are", "who are you exactly",
     "whom am i talking with", "who is answering me"),
    ("are you a robot", "are you a machine", "are you real", "is this a bot", "are you an ai",
     "what type of thing are you", "are you a human or a program", "r u human",
     "what is this thing", "are you alive", "are you a computer program"),
    ("what's your name", "whats ur name", "name please", "have you a name", "tell me what you are "
     "called", "what do people call you", "how should i address you", "got a name",
     "what name do you have", "do you have any name", "what's your name then"),
    ("who made u", "who built this", "who programmed you", "who are your makers",
     "who designed you", "who is your creator", "where did you come from", "who taught you",
     "who's behind you", "who put you together", "who coded you"),
    ("what can u do", "what do you do", "what are you for", "what can you help with",
     "how can you help me", "what are your abilities", "what questions can you answer",
     "what should i ask you", "what jobs can you do", "what are you able to do",
     "what is your purpose"),
    ("can you use tools", "do you use tools", "have you got a calculator", "do you have a tool",
     "can you call a calculator", "what tools do you have", "any calculator",
     "do you compute with a tool", "can you run a calculator", "are you allowed tools",
     "do you have access to a calculator"),
    ("how big is your model", "how many weights are in you", "what size are you",
     "parameter count", "how many parameters", "how many numbers make you up", "your size",
     "how large is this model", "how tiny are you", "number of parameters please",
     "how heavy is your model"),
    ("what did you learn from", "what data did you read", "what were you taught on",
     "what was your training text", "which books did you read", "what text did you learn",
     "what have you been trained on", "what did they train you on", "your training data",
     "what corpus did you read", "what did you study"),
)
FOLLOW_SUM = {"+": ("plus {n}?", "and plus {n}", "add {n}", "add {n} to that", "now add {n}",
                    "+ {n}", "and {n} more?"),
              "-": ("minus {n}?", "take away {n}", "subtract {n}", "now minus {n}", "- {n}",
                    "less {n}?"),
              "*": ("times {n}?", "multiply that by {n}", "now times {n}", "x {n}",
                    "* {n}", "and times {n}")}
FOLLOW_SPELL = ("how many letters", "how many letters is that", "how long is it",
                "its length", "and how many letters?", "how many letters does it have",
                "length?", "count the letters")
FOLLOW_DATE = {"year": ("which year", "what year", "the year?", "and the year", "year?"),
               "month": ("which month", "what month", "the month?", "and the month", "month?"),
               "day": ("which day", "what day of the month", "the day?", "and the day", "day?")}
TYPO_WORDS = {"you": "u", "your": "ur", "are": "r", "please": "pls", "what's": "whats",
              "what is": "whats", "how many": "hw many", "letters": "leters", "spell": "spel",
              "the": "teh", "number": "nmber", "convert": "convrt", "calculate": "calcualte",
              "multiply": "multipy"}


def words_big(n: int, rng: random.Random) -> str:
    """``n`` (0 to 999) in English words, "and" after the hundreds or not: "two hundred (and)
    fourteen"."""
    if n < 100:
        return in_words(n)
    head = in_words(n // 100) + " hundred"
    if n % 100 == 0:
        return head
    return head + rng.choice((" and ", " ")) + in_words(n % 100)


def typo(template: str, rng: random.Random) -> str:
    """One typo in a phrasing's own words (never in a slot such as ``{w}``): a common shortening,
    or a letter dropped, doubled or two swapped."""
    if rng.random() < 0.4:
        found = [k for k in TYPO_WORDS
                 if re.search(rf"(?<![a-z{{']){re.escape(k)}(?![a-z}}'])", template)]
        if found:
            k = rng.choice(found)
            return re.sub(rf"(?<![a-z{{']){re.escape(k)}(?![a-z}}'])", TYPO_WORDS[k], template,
                          count=1)
    # letters outside the slots, with a letter on each side (so a slot is never touched)
    slots = [range(m.start(), m.end()) for m in re.finditer(r"\{[a-z]+\}", template)]
    spots = [i for i in range(1, len(template) - 1)
             if template[i - 1:i + 2].isalpha() and not any(i in r for r in slots)
             and not any(i - 1 in r or i + 1 in r for r in slots)]
    if not spots:
        return template
    i, kind = rng.choice(spots), rng.randrange(3)
    if kind == 0:
        return template[:i] + template[i + 1:]
    if kind == 1:
        return template[:i] + template[i] + template[i:]
    return template[:i] + template[i + 1] + template[i] + template[i + 2:]


def dress(template: str, rng: random.Random, typos: bool = True) -> str:
    """A phrasing as a user types it: maybe a greeting, a courtesy, a typo; before its slots are
    filled, so the values stay intact."""
    if typos and rng.random() < 0.3:
        template = typo(template, rng)
    if rng.random() < 0.2:
        template = rng.choice(GREETINGS) + template
    if rng.random() < 0.2:
        template = template + rng.choice(COURTESIES)
    elif rng.random() < 0.5:
        template = template + rng.choice(("?", ".", "", "", "!"))
    return template


def case_and_space(text: str, rng: random.Random) -> str:
    """Case noise (a capital first, rarely all upper: the phrasings are lower case) and spacing
    noise (a doubled space, a space before the last mark, one before the message)."""
    r = rng.random()
    text = (text[:1].upper() + text[1:] if r < 0.4 else text.upper() if r < 0.45 else text)
    r = rng.random()
    if r < 0.1:
        text = text.replace(" ", "  ", 1)
    elif r < 0.15:
        text = re.sub(r" ?([?.!])$", r" \1", text)
    elif r < 0.2:
        text = " " + text
    return text


def _ordinal(n: int) -> str:
    return str(n) + ("th" if 11 <= n <= 13 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th"))


def date_text(day: datetime.date, rng: random.Random) -> str:
    """``day`` written in one of :data:`DATE_WAYS`, month names in any case."""
    M, m = calendar.month_name[day.month], calendar.month_abbr[day.month]
    case = rng.randrange(3)
    M, m = (M, m) if case == 0 else (M.lower(), m.lower()) if case == 1 else (M.upper(), m.upper())
    text = rng.choice(DATE_WAYS).format(M=M, m=m, o=_ordinal(day.day), y=day.year, d=day.day,
                                        mm=f"{day.month:02d}", dd=f"{day.day:02d}",
                                        S=SEPT.get(day.month, m))
    return text


def _numbers(rng, pair_split):
    """Two operands of one to three digits, a pair of the training split (data's rule)."""
    while True:
        a, b = (rng.choice((rng.randint(0, 9), rng.randint(10, 99), rng.randint(100, 999)))
                for _ in range(2))
        if b and pair_split(a, b) == "train":
            return a, b


def arithmetic(rng, pair_split):
    """(request, the calculator's expression, slots)."""
    a, b = _numbers(rng, pair_split)
    op = rng.choice("+-*/" if rng.random() < 0.1 else "+-*")
    words = rng.random() < 0.3 and max(a, b) < 1000
    x, y = (words_big(a, rng), words_big(b, rng)) if words else (str(a), str(b))
    r = rng.random()
    if r < 0.08 and op in STORIES and a < 100 and b < 100 and (op != "-" or a >= b):
        template = rng.choice(STORIES[op])
    elif r < 0.3:
        template = rng.choice(ASK_OP[op])
    else:
        sign = rng.choice(SIGNS[op][1:] if words else SIGNS[op])
        if sign == "add":
            sign = "plus"
        e = f"{{a}}{sign}{{b}}" if len(sign) == 1 and rng.random() < 0.4 else f"{{a}} {sign} {{b}}"
        template = rng.choice(ASK_EXPR).replace("{e}", e)
    return dress(template, rng).format(a=x, b=y), f"{a}{op}{b}"


def word_of(pool, rng):
    """A word of the training list, or (45% of the time) a string of 3 to 12 letters that is no
    word: chat.data's rule, with a larger share and longer strings."""
    return _word(pool, rng, share=0.45, longest=12)


def _user(text: str) -> dict:
    return {"role": "user", "content": text}


def _calc(expression: str) -> dict:
    """The assistant's message for a calculation (as chat.data writes it)."""
    result = calculate(expression)
    return {"role": "assistant", "content": [{"type": "tool", "text": expression},
                                             {"type": "result", "text": result},
                                             {"type": "text", "text": result}]}


def _exchange(task: str, pool: dict, rng: random.Random, pair_split) -> tuple[list, list]:
    """One exchange of ``task``: (messages, the abstracted form of its user message)."""
    if task == "arithmetic":
        text, expression = arithmetic(rng, pair_split)
        text = case_and_space(text, rng)
        return [_user(text), _calc(expression)], [abstracted(text)]
    if task in ("spelling", "letters"):
        word = word_of(pool, rng)
        if task == "spelling":
            text = case_and_space(dress(rng.choice(ASK_SPELL), rng).format(w=word), rng)
            return ([_user(text), {"role": "assistant", "content": "-".join(word)}],
                    [abstracted(text, word=word)])
        letter = rng.choice(sorted(set(word)) + list("eaoz"))
        text = case_and_space(dress(rng.choice(ASK_COUNT), rng).format(c=letter, w=word), rng)
        return ([_user(text), {"role": "assistant", "content": str(word.count(letter))}],
                [abstracted(text, word=word, letter=letter)])
    if task == "dates":
        day = FIRST_DAY + datetime.timedelta(days=rng.choice(pool["days"]))
        written = date_text(day, rng)
        text = case_and_space(dress(rng.choice(ASK_DATE), rng).format(d=written), rng)
        if text.isupper():
            written = written.upper()
        return ([_user(text), {"role": "assistant", "content": day.isoformat()}],
                [abstracted(text, date=written)])
    group = rng.randrange(len(IDENTITY_MORE))
    text = case_and_space(dress(rng.choice(IDENTITY_MORE[group]), rng, typos=False), rng)
    return ([_user(text), {"role": "assistant", "content": IDENTITY_ASKS[group][0]}],
            [abstracted(text)])


def _follow_up(pool, rng, pair_split):
    """A request and a follow-up that needs its answer, the follow-up in other words."""
    kind = rng.choice(("sum", "spell", "date"))
    if kind == "sum":
        first, forms = _exchange("arithmetic", pool, rng, pair_split)
        value, op, n = first[1]["content"][-1]["text"], rng.choice("+-*"), rng.randint(2, 12)
        text = case_and_space(rng.choice(FOLLOW_SUM[op]).format(n=n), rng)
        return first + [_user(text), _calc(f"{value}{op}{n}")], forms + [abstracted(text)]
    if kind == "spell":
        first, forms = _exchange("spelling", pool, rng, pair_split)
        text = case_and_space(dress(rng.choice(FOLLOW_SPELL), rng, typos=False), rng)
        length = len(first[1]["content"].replace("-", ""))
        return (first + [_user(text), {"role": "assistant", "content": str(length)}],
                forms + [abstracted(text)])
    first, forms = _exchange("dates", pool, rng, pair_split)
    day = datetime.date.fromisoformat(first[1]["content"])
    part = rng.choice(("year", "month", "day"))
    answer = {"year": day.year, "month": calendar.month_name[day.month], "day": day.day}[part]
    text = case_and_space(dress(rng.choice(FOLLOW_DATE[part]), rng, typos=False), rng)
    return (first + [_user(text), {"role": "assistant", "content": str(answer)}],
            forms + [abstracted(text)])


MORE_TASKS = ("arithmetic", "arithmetic", "spelling", "letters", "dates", "identity",
              "follow-up")


def after_other_exchanges(messages: list, forms: list, pool: dict, rng: random.Random):
    """(messages, forms), a quarter of the time after one or two exchanges of other tasks (not
    follow-ups): a longer conversation, as a reader's often is."""
    if rng.random() < 0.25:
        for _ in range(rng.randint(1, 2)):
            m, f = _exchange(rng.choice(MORE_TASKS[:-1]), pool, rng, _pair_split)
            messages, forms = m + messages, f + forms
    return messages, forms


def held_out_v2_forms() -> set[str]:
    """The abstracted forms of the held-out test set's requests (which no conversation may have)."""
    return {request_form(item) for item in load_robustness_set_v2()}


def keep_drawing(n: int, draw, banned_forms: set[str], banned_texts: set[str]) -> list[dict]:
    """``n`` conversations ``{"task", "messages", "forms"}`` from ``draw(i)`` -> (task, messages,
    forms), ``i`` the number kept so far; one is drawn again if a user message has a banned form
    (a held-out request's) or a banned normalized text, or is longer than ``chat.data.MAX_TOKENS``.
    The loop of chat.variety's, chat.identity's and chat.anywhere's added conversations
    (chat.counting draws its own, count first)."""
    tokenizer, out = char_chat_tokenizer(), []
    while len(out) < n:
        task, messages, forms = draw(len(out))
        users = [normalized(m["content"]) for m in messages if m["role"] == "user"]
        if any(f in banned_forms for f in forms) or any(u in banned_texts for u in users):
            continue
        if len(render(tokenizer, messages)[0]) <= MAX_TOKENS:
            out.append({"task": task, "messages": messages, "forms": forms})
    return out


@functools.lru_cache(maxsize=2)  # a run's start builds them twice (its record, its batches)
def build_more_conversations(n: int = MORE_SIZE, seed: int = MORE_SEED) -> list[dict]:
    """``n`` training conversations (``{"task", "messages", "forms"}``), drawn from
    ``random.Random(seed)`` over the training pools of ``chat.data``; a quarter come after one or
    two exchanges of other tasks. A conversation with a user message in a held-out form (version 2
    of the robustness set, or a validation or test identity question) is drawn again; one longer
    than ``chat.data.MAX_TOKENS`` too."""
    pool, rng = _pools(0)["train"], random.Random(seed)
    held_questions = {normalized(q) for answer, questions in IDENTITY_ASKS
                      for q in questions[-2:]}

    def draw(i):
        task = MORE_TASKS[i % len(MORE_TASKS)]
        if task == "follow-up":
            return (task, *_follow_up(pool, rng, _pair_split))
        return (task, *after_other_exchanges(*_exchange(task, pool, rng, _pair_split), pool, rng))

    return keep_drawing(n, draw, held_out_v2_forms(), held_questions)


def more_sha256(conversations: list[dict]) -> str:
    """The SHA-256 of the conversations (as one JSON text): what a run records it trained on."""
    text = json.dumps([c["messages"] for c in conversations], sort_keys=True)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
