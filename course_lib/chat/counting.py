"""Letter-counting conversations drawn count first (issue 54, chapter 17): ``chat-sft
--count-first``.

The shipped conversations (and ``--more-phrasings``') draw a letters request word first: a word,
then a letter of it (or "e", "a", "z"), and the answer is whatever the count comes to. Words of 4 to
9 letters rarely hold a letter three times, so the answers are nearly all 0, 1 or 2 (42 of 5,143
training answers above 2) and a model can score well by the prior ("1" is right 60% of the time
in-template) without counting. Here the **answer is drawn first**: the count k takes each value of
0..:data:`MAX_COUNT` in turn (a fifth each), then a letter and a word with exactly k of it:

- half the time a word of the training list (``chat.data``'s training pool) that holds the letter
  exactly k times (for k = 0, a letter the word lacks);
- otherwise a string of letters that is no word of any split (``chat.data``'s rule for the skill,
  not a list), 3 to 12 letters long, with the letter at k random places and other letters elsewhere.

``MAX_COUNT`` is 4: no word of the course's list (4 to 9 letters, tiny Shakespeare) holds a letter
more than 4 times (8 words do 4 times: "senseless", "possessed"...), and the words a reader asks
about ("banana", "strawberry", "tomorrow") hold theirs 3 times.

The reply is the bare number, as in the shipped conversations, or (``worked=True``) a worked
reply (:func:`worked_reply`, ``s-t-r1-a-w-b-e-r2-r3-y: 3``): the word spelled out, each hit marked
with the count so far, then the count, as nanochat's spelling-bee task writes its answers. Both
are judged by the last number in the reply, in the robustness sets and (since issue 54's counting
runs) in template (``chat.scores``).

``--count-first worked-all`` also rewrites the last reply of every letters conversation of the
training split, the shipped conversations' and ``--more-phrasings``' (:func:`worked_everywhere`):
with ``--count-first worked`` alone, the shipped phrasings are answered bare (the shipped
conversations) and worked (the added ones), and a model often answers them bare, by the prior. A
count asked in an earlier turn of a longer conversation (of any task) keeps its bare answer:
:func:`letters_answers` counts them, about one in seven of the counts worked-all trains on. The word
and letter of a stored conversation are read back from its request (:func:`letters_slots`); the few
requests that read two ways or none are left out.

The phrasings are the shipped ones (``phrasing.ASK_LETTERS``) and ``chat.variety``'s (with its
greetings, courtesies, typos, case and spacing noise). A conversation whose request has the
abstracted form of a request of robustness version 2 or 3 (the development and the blind test
set, compared by form only: nothing is read from them) or is a validation or test request of
``chat.json`` is drawn again.
"""
from __future__ import annotations

import functools
import random
import re
from collections import Counter

from .data import MAX_TOKENS, _pools, char_chat_tokenizer, load_conversations
from .phrasing import ASK_LETTERS, abstracted, normalized
from .robustness import load_robustness_set_v3, load_robustness_set_v4, request_form
from .template import render
from .variety import (ASK_COUNT, COURTESIES, GREETINGS, case_and_space, dress, held_out_v2_forms,
                      more_sha256)

COUNT_SIZE = 6000  # training conversations added
COUNT_SEED = 5454
MAX_COUNT = 4  # the answers are 0..MAX_COUNT, each a fifth
WORD_SHARE = 0.5  # of the conversations about a real word (else a string of letters)
LONGEST = 12  # letters in a string that is no word
# the SHA-256 of build_count_conversations() (variety.more_sha256): a change to the generator
# changes it, and with it what a --count-first run trained on
COUNT_SHA256 = "fa95bd174e6c8b03537206e46f66bbcc2a924167a5aef4bdb8d66aab73e714e9"
# the same with worked=True
COUNT_WORKED_SHA256 = "c360f0352771ac22ec8ff863df020744eb1552e1258146845193310c47df250d"
ALPHABET = "abcdefghijklmnopqrstuvwxyz"


def pairs_by_count(words: list[str]) -> dict[int, list[tuple[str, str]]]:
    """For each k in 1..MAX_COUNT, the (word, letter) pairs of ``words`` whose letter the word holds
    exactly k times."""
    out: dict[int, list[tuple[str, str]]] = {k: [] for k in range(1, MAX_COUNT + 1)}
    for word in words:
        for letter, k in sorted(Counter(word).items()):
            if k <= MAX_COUNT:
                out[k].append((word, letter))
    return out


def letter_string(k: int, letter: str, rng: random.Random, words: set[str]) -> str:
    """A string of 3 to LONGEST letters (at least k + 1) that is no word of ``words``, holding
    ``letter`` at exactly k random places."""
    while True:
        n = rng.randint(max(3, k + 1), LONGEST)
        others = ALPHABET.replace(letter, "")
        chars = [rng.choice(others) for _ in range(n)]
        for i in rng.sample(range(n), k):
            chars[i] = letter
        text = "".join(chars)
        if text not in words:
            return text


def draw_item(k: int, pool: dict, pairs: dict, rng: random.Random) -> tuple[str, str]:
    """(word, letter) with ``word.count(letter) == k``: a training word or a string of letters."""
    if rng.random() < WORD_SHARE:
        if k == 0:
            word = rng.choice(pool["words"])
            return word, rng.choice(sorted(set(ALPHABET) - set(word)))
        return rng.choice(pairs[k])
    letter = rng.choice(ALPHABET)
    return letter_string(k, letter, rng, pool["pseudo"]), letter


def request(word: str, letter: str, rng: random.Random) -> str:
    """A letters request as a user types it: a shipped phrasing (a third of the time) or one of
    chat.variety's, dressed with its noise."""
    template = (rng.choice(ASK_LETTERS) if rng.random() < 1 / 3
                else dress(rng.choice(ASK_COUNT), rng))
    return case_and_space(template.format(c=letter, w=word), rng)


def worked_reply(word: str, letter: str) -> str:
    """The word spelled with "-", each ``letter`` followed by the count so far, then ": " and the
    count: ``worked_reply("strawberry", "r") == "s-t-r1-a-w-b-e-r2-r3-y: 3"``."""
    seen, out = 0, []
    for char in word.lower():
        seen += char == letter.lower()
        out.append(f"{char}{seen}" if char == letter.lower() else char)
    return "-".join(out) + f": {seen}"


def held_out_requests() -> tuple[set[str], set[str]]:
    """(the abstracted forms of robustness versions 2, 3 and 4, the normalized validation and test
    user messages of chat.json): what no added request may be. Version 4 came after the
    --count-first and --wide-identity conversations were drawn; none of them has its forms
    (tested), so adding it changed none of them (their SHA-256s are the same)."""
    forms = held_out_v2_forms() | {request_form(item) for item in
                                   load_robustness_set_v3() + load_robustness_set_v4()}
    data = load_conversations()
    texts = {normalized(m["content"]) for split in ("val", "test") for c in data[split]
             for m in c["messages"] if m["role"] == "user" and isinstance(m["content"], str)}
    return forms, texts


@functools.lru_cache(maxsize=2)  # a run's start builds them twice (its record, its batches)
def build_count_conversations(n: int = COUNT_SIZE, seed: int = COUNT_SEED,
                              worked: bool = False) -> list[dict]:
    """``n`` one-exchange letters conversations (``{"task", "messages", "forms"}``) drawn count
    first from ``random.Random(seed)`` over chat.data's training pool: the i-th answers
    ``i % (MAX_COUNT + 1)``, as the bare number or (``worked``) as :func:`worked_reply`."""
    pool, rng, tokenizer = _pools(0)["train"], random.Random(seed), char_chat_tokenizer()
    pairs = pairs_by_count(pool["words"])
    forms, texts = held_out_requests()
    out = []
    while len(out) < n:
        k = len(out) % (MAX_COUNT + 1)
        word, letter = draw_item(k, pool, pairs, rng)
        text = request(word, letter, rng)
        form = abstracted(text, word=word, letter=letter)
        if form in forms or normalized(text) in texts:
            continue
        messages = [{"role": "user", "content": text},
                    {"role": "assistant", "content": (worked_reply(word, letter) if worked
                                                      else str(word.count(letter)))}]
        if len(render(tokenizer, messages)[0]) <= MAX_TOKENS:
            out.append({"task": "letters", "messages": messages, "forms": [form]})
    return out


def count_sha256(conversations: list[dict]) -> str:
    """The SHA-256 of the conversations (variety's :func:`more_sha256`)."""
    return more_sha256(conversations)


# --- each letters conversation's last reply worked (--count-first worked-all) ---------------------

# the words of the letters phrasings, greetings and courtesies: what a request's word is not
PHRASING_WORDS = frozenset(w for t in ASK_LETTERS + ASK_COUNT + GREETINGS + COURTESIES
                           for w in re.findall(r"[a-z]+", re.sub(r"{[cw]}", " ", t.lower())))


def one_typo_apart(a: str, b: str) -> bool:
    """Whether ``a`` is ``b`` or ``b`` with one of chat.variety's typos: a letter dropped, doubled,
    changed, or two neighbours swapped."""
    if a == b:
        return True
    if len(a) == len(b):
        diff = [i for i in range(len(a)) if a[i] != b[i]]
        return len(diff) == 1 or (len(diff) == 2 and diff[1] == diff[0] + 1
                                  and a[diff[0]] == b[diff[1]] and a[diff[1]] == b[diff[0]])
    short, long = sorted((a, b), key=len)
    return len(long) == len(short) + 1 and any(long[:i] + long[i + 1:] == short
                                               for i in range(len(long)))


def letters_slots(request: str, count: int) -> set[tuple[str, str]]:
    """The (letter, word) pairs ``request`` can be asking about, given the answer ``count``: a
    letter written alone (or as "e's", "es"), a word of 3 letters or more that holds it ``count``
    times; words that are a phrasing's (even with a typo) are tried only if no other word fits.
    One pair: the request is read; none or several: it is not. Of the 5,123 requests --count-first
    worked-all reads, one is misread ("nmber of z in the word contain please": the typo, not the
    phrasing word "contain", taken for the word; its count, 0, is right either way); the reading is
    kept as it is so that the recorded runs' training split stays the one they trained on."""
    low = request.lower()
    letters = {m.group(1) for m in re.finditer(r"(?<![a-z])([a-z])('s|s)?(?![a-z])", low)
               if not (m.group(2) == "s" and m.group(0) in PHRASING_WORDS)}  # "is" is no "i"
    tokens = [w for w in re.findall(r"[a-z]+", low) if len(w) >= 3]
    for words in ([w for w in tokens if not any(one_typo_apart(w, p) for p in PHRASING_WORDS
                                                if len(p) >= 3)],
                  [w for w in tokens if w not in PHRASING_WORDS], tokens):
        pairs = {(c, w) for c in letters for w in words if w.count(c) == count}
        if pairs:
            return pairs
    return set()


def worked_everywhere(conversations: list[dict]) -> tuple[list[dict], int]:
    """``(conversations, left_out)``: each letters conversation whose last reply is a bare count
    with that reply (not an earlier turn's) worked (:func:`worked_reply`), read from its last
    request (:func:`letters_slots`); those whose request reads none or two ways are left out
    (counted); the other tasks' conversations as they are."""
    out, left_out = [], 0
    for c in conversations:
        reply = c["messages"][-1]["content"]
        if c["task"] != "letters" or not isinstance(reply, str) or not reply.isdigit():
            out.append(c)
            continue
        pairs = letters_slots(c["messages"][-2]["content"], int(reply))
        if len(pairs) != 1:
            left_out += 1
            continue
        (letter, word), = pairs
        last = {"role": "assistant", "content": worked_reply(word, letter)}
        out.append({**c, "messages": c["messages"][:-1] + [last]})
    return out, left_out


def letters_answers(conversations: list[dict]) -> Counter:
    """How the letter counts of ``conversations`` are answered, every assistant turn read:
    ``"worked"`` (a reply ``spelled: N``), ``"bare"`` (a number answering a request that reads as
    a letters request, :func:`letters_slots`: approximate for earlier turns, whose task is not
    stored; a length asked after a spelling names no letter and does not count)."""
    kinds = Counter()
    for c in conversations:
        for ask, answer in zip(c["messages"][0::2], c["messages"][1::2]):
            reply = answer["content"]
            if not isinstance(reply, str):
                continue
            if re.fullmatch(r"[a-z0-9-]+: \d+", reply):
                kinds["worked"] += 1
            elif reply.isdigit() and letters_slots(ask["content"], int(reply)):
                kinds["bare"] += 1
    return kinds
