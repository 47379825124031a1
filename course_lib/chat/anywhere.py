"""Spelling and letter counts with the word anywhere in the request (issue 54, chapter 17):
``chat-sft --word-anywhere``.

Of the shipped chat model's misses on the development sets (robustness versions 2 and 3), most
spelling and letters misses have one of two kinds: the model spells or counts in **another word of
the request** than the one asked about, when the word comes first or sits among words of the
request ("banana, can you spell it" -> ``i-t``), or it loses its place in a word with **repeated
letters** (``mississippi``, ``tomorrow``). These conversations add to the training split:

- requests in :data:`SPELL_ANYWHERE` and :data:`COUNT_ANYWHERE`, phrasings with the word first, in
  the middle, or beside words such as "letter", "word", "out", "it" that the model must not take
  for it, dressed with chat.variety's greetings, courtesies, typos, case and spacing noise;
- the words: a third from the training word list, a third random strings of letters, a third
  strings of a few letters repeated and doubled (:func:`patterned`, "sissippis" kind);
- the letters replies **worked** (``chat.counting.worked_reply``), as ``--count-first
  worked-all`` (the shipped model's recipe, which this option needs) writes them; a quarter after
  one or two exchanges of other tasks.

The phrasings were written after the development sets' misses were read (their kinds), not from
version 4, the blind set, whose requests the writer has not read: a conversation with the form of a
held-out request (versions 2, 3 and 4, chat.json's validation and test messages) is drawn again, so
that version 4 stays held out as whole forms (its forms are compared, never read).
"""
from __future__ import annotations

import functools
import random

from .counting import ALPHABET, held_out_requests, worked_reply
from .data import _pools
from .phrasing import abstracted
from .variety import after_other_exchanges, case_and_space, dress, keep_drawing, word_of

ANYWHERE_SIZE = 4000  # training conversations added, half spelling, half letters
ANYWHERE_SEED = 5456
# the SHA-256 of build_anywhere_conversations() (variety.more_sha256)
ANYWHERE_SHA256 = "3fdccfd03c9e7bd3311a02c220adbe98d08a04af2c635f7a1bfdace09abf604f"

# {w}: the word
SPELL_ANYWHERE = (
    "{w}, spell it", "{w} - spell it", "{w}: can you spell it", "{w}. spell that",
    "{w}, how is it spelled", "{w}? spell it out", "{w}, letters please", "{w} - the letters?",
    "the word is {w}. spell it", "my word is {w}, spell it out", "take {w} and spell it",
    "here is a word: {w}. spell it", "write the word {w} out in letters",
    "put {w} into letters", "turn {w} into letters with dashes", "cut {w} into its letters",
    "spell {w} out one letter at a time", "spell {w} out with a dash between letters",
    "give the letters of the word {w}", "list the letters of {w}", "list each letter in {w}",
    "show {w} one letter at a time", "which letters is {w} made of", "what letters form {w}",
    "i want the word {w} spelled out", "i need {w} spelt out please",
    "could you write out {w} in letters", "type out {w} letter by letter",
    "go through {w} letter by letter", "letters of {w}, in order", "in letters: {w}",
    "spell out this word for me: {w}", "word to spell: {w}", "how is the word {w} written out",
)
# {w}: the word, {c}: the letter
COUNT_ANYWHERE = (
    "{w}: how many {c}'s", "{w} - how many {c}s", "{w}, how many {c}'s in it",
    "{w}. count the {c}'s", "{w}? how many times {c}", "the word is {w}. how many {c}'s",
    "take {w}. how many {c}'s does it have", "{w} has how many {c}'s",
    "in {w} how many letters are {c}", "how many {c} letters does {w} have",
    "how many letters {c} are in the word {w}", "count every {c} in {w}",
    "count up the letter {c} in the word {w}", "the letter {c}: how many in {w}",
    "how many times does the word {w} use {c}", "how many {c}'s does the word {w} hold",
    "find each {c} in {w} and count them", "{c}'s in {w}, how many",
    "tell me the number of {c} letters in {w}", "what is the number of {c}'s in {w}",
    "how many times is the letter {c} written in {w}", "in the word {w}, count the {c}",
    "{w} contains how many {c}'s", "word: {w}. letter: {c}. how many?",
)


def patterned(rng: random.Random, words: set[str]) -> str:
    """A string of 5 to 11 letters drawn from two to four letters (not always all of them), each
    placed once or twice in a row, so that letters repeat as in "mississippi"; never a word of
    ``words``."""
    while True:
        letters = rng.sample(ALPHABET, rng.randint(2, 4))
        length, out = rng.randint(5, 11), ""
        while len(out) < length:
            out += rng.choice(letters) * rng.choice((1, 1, 2))
        out = out[:length]
        if out not in words:
            return out


def _word(pool: dict, rng: random.Random) -> str:
    """A third patterned strings; else chat.variety's draw (training words, random strings)."""
    return patterned(rng, pool["pseudo"]) if rng.random() < 1 / 3 else word_of(pool, rng)


def _anywhere_exchange(task: str, pool: dict, rng: random.Random) -> tuple[list, list]:
    """One spelling or letters exchange: (messages, the abstracted form of its user message)."""
    word = _word(pool, rng)
    if task == "spelling":
        text = case_and_space(dress(rng.choice(SPELL_ANYWHERE), rng).format(w=word), rng)
        return ([{"role": "user", "content": text},
                 {"role": "assistant", "content": "-".join(word)}], [abstracted(text, word=word)])
    letter = rng.choice(sorted(set(word)) * 3 + list("eaoz"))  # mostly a letter of the word
    text = case_and_space(dress(rng.choice(COUNT_ANYWHERE), rng).format(w=word, c=letter), rng)
    return ([{"role": "user", "content": text},
             {"role": "assistant", "content": worked_reply(word, letter)}],
            [abstracted(text, word=word, letter=letter)])


@functools.lru_cache(maxsize=2)  # a run's start builds them twice (its record, its batches)
def build_anywhere_conversations(n: int = ANYWHERE_SIZE,
                                 seed: int = ANYWHERE_SEED) -> list[dict]:
    """``n`` training conversations (``{"task", "messages", "forms"}``), spelling and letters in
    turn, a quarter after one or two exchanges of other tasks; drawn again if a user message has
    the form of a held-out request (robustness versions 2, 3 and 4, chat.json's validation and test
    messages) or is longer than ``chat.data.MAX_TOKENS``."""
    pool, rng = _pools(0)["train"], random.Random(seed)
    banned_forms, banned_texts = held_out_requests()

    def draw(i):
        task = ("spelling", "letters")[i % 2]
        return (task, *after_other_exchanges(*_anywhere_exchange(task, pool, rng), pool, rng))

    return keep_drawing(n, draw, banned_forms, banned_texts)
