"""Wider identity questions (issue 54, chapter 17): ``chat-sft --wide-identity``, and a blind set.

An identity question has one fixed answer per group of
:data:`~course_lib.chat.phrasing.IDENTITY_ASKS` ("Who are you?" -> "I am a small GPT that read
Shakespeare."). The shipped conversations train on four or five phrasings a group,
``--more-phrasings`` adds eleven (``chat.variety.IDENTITY_MORE``); every model tried still answered
two of the eight held-out test phrasings of ``chat.json`` with another group's answer.
:data:`IDENTITY_BANK` is 24 more phrasings a group, written by kind (discourse openers "so", "and",
"ok"; other verbs and nouns; statements as requests; short forms), and **split at random**
(:func:`bank_split`, a fixed seed) into 16 for training and 8 held out: the blind set
(:func:`blind_identity_set`), which no run trains on, measures how far the widening carries to
phrasings it never saw.

The bank was written after the two failing test phrasings ("And you are?", "What have you read?")
were known: it holds neither, nor any question of the validation or test split, nor any identity
request of robustness versions 2 and 3 (by form; tests/test_chat_identity.py checks it), and leaves
out the near neighbours of the test phrasings ("What have you studied?"). The in-template identity
score of a model trained with it is still no longer blind, and the chapter says so; the blind half
is the honest measure.

:func:`build_identity_conversations` draws ``n`` training conversations from the training half,
with chat.variety's greetings, courtesies, case and spacing noise; a quarter after one or two
exchanges of other tasks.
"""
from __future__ import annotations

import functools
import hashlib
import json
import random

from .counting import held_out_requests
from .data import _pools
from .phrasing import IDENTITY_ASKS, abstracted, normalized
from .variety import after_other_exchanges, case_and_space, dress, keep_drawing

WIDE_SIZE = 4000  # training conversations added
WIDE_SEED = 5455
SPLIT_SEED = 2026  # the bank's random split into training and blind phrasings
BLIND_PER_GROUP = 8
# the SHA-256 of blind_identity_set() (blind_sha256): the blind set, frozen
BLIND_SHA256 = "76d80e2d2f81f7868cffd98be5a0dd54d15d335235bb5cb16f5cef4f61b2f341"
# the SHA-256 of build_identity_conversations() (variety.more_sha256)
WIDE_SHA256 = "9c387897094df498c46bd21fd930dba857341d0aa6fce81a7f4e6b786808c744"

# 24 phrasings for each answer of phrasing.IDENTITY_ASKS, in its order
IDENTITY_BANK = (
    ("Who are you, then?", "And who might you be?", "Who answers here?",
     "Please introduce yourself.", "Say something about yourself.", "Who is on the other end?",
     "Who's speaking?", "Who do I talk to here?", "Tell me a bit about you.", "Who might you be?",
     "So who are you?", "Well, who are you?", "Ok, who are you?", "Who are you anyway?",
     "Tell me about you.", "Who am I addressing?", "Hi! Who are you?", "Who's there?",
     "Who exactly am I talking to?", "Introduce yourself, please.", "Who am I writing to?",
     "Who is replying?", "Tell me who is answering.", "Who is this speaking?"),
    ("Is this thing a program?", "Am I talking to a machine?", "Is this a person or a program?",
     "Are you a real person?", "What kind of program is this?", "Are you software?",
     "What sort of thing am I talking to?", "Are you a bot?", "Is this an AI?",
     "Are you a language model?", "So what are you?", "And what are you?", "Ok, what are you?",
     "Are you a machine or a man?", "Is there a human here?", "Am I chatting with a computer?",
     "Are you a neural network?", "Are you a living thing?", "Are you just a program?",
     "What kind of AI are you?", "Is this a real human?", "Human or machine?",
     "Is a person typing this?", "What is on the other end, a person?"),
    ("May I ask your name?", "How are you called?", "Under what name do you go?",
     "Is there a name for you?", "Were you given a name?", "What name do you go by?",
     "What do they call you?", "Tell me what your name is.", "Your name, please?",
     "So what's your name?", "So, your name?", "Ok, what is your name?", "Name?",
     "What is your name, please?", "What is this bot called?", "What are you named?",
     "What might your name be?", "What's your name, friend?", "Whats your name again?",
     "What is the name of this bot?", "Which name is yours?", "Say your name.",
     "Does this bot have a name?", "By what name do you go?"),
    ("Who made this bot?", "Who is your maker?", "Who trained this model?", "Who developed you?",
     "Who invented you?", "Who is responsible for you?", "Who are your creators?",
     "Who gave you your training?", "Who set you up?", "Who brought you into being?",
     "So who made you?", "And who built you?", "Ok, who created you?", "Who's your creator?",
     "Whose model are you?", "Who owns you?", "Who engineered you?", "Who produced you?",
     "Who is behind this model?", "Who did the work of making you?", "Who taught you to chat?",
     "Who made this?", "Who put you here?", "Tell me who made you."),
    ("What are you able to answer?", "What tasks can you do?",
     "What kinds of questions do you take?", "What is it you do?", "Which tasks suit you?",
     "How are you useful?", "What can you answer?", "What are you capable of?",
     "What can you do for me?", "So what can you do?", "And what can you do?",
     "Ok, what do you do for people?", "In what ways can you help?", "Tell me what you can do.",
     "Show me what you can do.", "What is your job?", "What can I use you for?",
     "Which questions can you handle?", "What are you good for?", "What do you offer?",
     "What things can you do?", "What tasks do you handle?", "What are you here for?",
     "What should I ask you about?"),
    ("Were you handed tools?", "Is a calculator at hand for you?",
     "Is there a calculator you can use?", "Are you able to use tools?", "Do tools help you?",
     "Have you got tools?", "Can you do sums with a tool?", "Is a calculator one of your tools?",
     "Which tools can you call?", "Are you allowed a calculator?", "Is a calculator part of you?",
     "So, do you use tools?", "And what about tools?", "Ok, can you use tools?",
     "Can you use a tool for maths?", "Are sums done by a calculator for you?",
     "Are there tools you can call?", "Are tools allowed for you?", "Do you compute with tools?",
     "Do you work sums with a calculator?", "Tool use?", "Is tool use possible?",
     "Can you run tools?", "Tell me if you use tools."),
    ("What is your count of parameters?", "What is your parameter count?", "How big is this model?",
     "How many parameters does this model have?", "What size is the model?",
     "How big a model are you?", "How large is your model?", "So how big are you?",
     "And how big are you?", "Ok, how large are you?", "How many numbers are you made of?",
     "Are you a big model?", "What is the size of your model?", "How small is this model?",
     "Is your model large?", "What is your model size?", "How many params?",
     "How much do you weigh in parameters?", "What's your size in parameters?",
     "Roughly how many parameters?", "How big is your network?", "Tell me your size.",
     "How big is this bot?", "Size of the model?"),
    ("What did you train on?", "Which data taught you?", "What text did you read?",
     "Which books did you learn from?", "What was your training data?", "What did you learn on?",
     "What corpus do you come from?", "Which text trained you?", "Which texts are in you?",
     "Where did your knowledge come from?", "So what did you read?", "And what did you read?",
     "Ok, what was your training text?", "What data is in you?", "What writing did you learn from?",
     "Which author did you read?", "What were you fed?", "What is your corpus?",
     "Where does your text come from?", "Which books were you trained on?",
     "What reading did you do?", "What did they feed you?", "Tell me what you read.",
     "Your training text?"),
)


def bank_split() -> tuple[list[tuple[str, int]], list[tuple[str, int]]]:
    """(training, blind): the bank's (question, group) pairs, each group's 24 shuffled by
    ``random.Random(SPLIT_SEED)`` and cut 16 / 8."""
    rng, train, blind = random.Random(SPLIT_SEED), [], []
    for group, questions in enumerate(IDENTITY_BANK):
        order = list(questions)
        rng.shuffle(order)
        train += [(q, group) for q in order[BLIND_PER_GROUP:]]
        blind += [(q, group) for q in order[:BLIND_PER_GROUP]]
    return train, blind


def blind_identity_set() -> list[dict]:
    """The blind half as robustness-set items (``request``, ``answer``, ``task``): each asked
    once, in a new conversation, and judged by exact match of the fixed answer."""
    return [{"task": "identity", "request": q, "answer": IDENTITY_ASKS[group][0], "rule": "exact"}
            for q, group in bank_split()[1]]


def blind_sha256(items: list[dict]) -> str:
    """The SHA-256 of a set of items (as one JSON text): the blind set is frozen by it."""
    return hashlib.sha256(json.dumps(items, sort_keys=True).encode("utf-8")).hexdigest()


def _identity_exchange(pairs, rng: random.Random) -> tuple[list, list]:
    question, group = rng.choice(pairs)
    text = case_and_space(dress(question, rng, typos=False), rng)
    return ([{"role": "user", "content": text},
             {"role": "assistant", "content": IDENTITY_ASKS[group][0]}], [abstracted(text)])


@functools.lru_cache(maxsize=2)  # a run's start builds them twice (its record, its batches)
def build_identity_conversations(n: int = WIDE_SIZE, seed: int = WIDE_SEED) -> list[dict]:
    """``n`` training conversations (``{"task": "identity", "messages", "forms"}``) asking a
    training-half question of :data:`IDENTITY_BANK`, a quarter after one or two exchanges of other
    tasks (chat.variety's, over chat.data's training pools); drawn again if a user message has
    the form of a held-out request (robustness versions 2, 3 and 4, the validation and test
    messages of chat.json, the blind half) or is longer than ``chat.data.MAX_TOKENS``."""
    pool, rng = _pools(0)["train"], random.Random(seed)
    banned_forms, banned_texts = held_out_requests()
    banned_texts = banned_texts | {normalized(q) for q, _ in bank_split()[1]}
    train = bank_split()[0]
    return keep_drawing(n, lambda i: ("identity", *after_other_exchanges(
        *_identity_exchange(train, rng), pool, rng)), banned_forms, banned_texts)
