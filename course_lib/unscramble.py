"""A task that needs what the model learned from Shakespeare: unscramble a word (chapter 15).

The dates task needs no English: in chapter 15's runs a model trained from scratch learns it
no slower than the pretrained one. This task does need English. The prompt is a word of tiny
Shakespeare with its inner letters shuffled (first and last kept, as in "Shakespaere"), the answer
the word::

    "hnoour" "=" "honour" "\\n"

The test words are **held out**: no fine-tuning example contains them, so a model can only
answer them from what it knows of English spelling, which a model trained from scratch learns
only from the training words. Words come from the training 90% of the text
(``data.train_val_split``'s cut), lower case, 5 to 9 letters, seen at least three times; the split
of words is fixed.

Only one new character ("=") enters the vocabulary ("\\n" is already Shakespeare's).
"""
from __future__ import annotations

import math
import random
import re
from collections import Counter

import torch

from .data import load_text
from .finetune import encode_examples

MIN_LEN, MAX_LEN, MIN_COUNT = 5, 9, 3
N_TEST_WORDS = 300  # held-out words


def word_split(seed: int = 0) -> dict[str, list[str]]:
    """``{"train": words, "val": held-out words}``: Shakespeare's words of 5 to 9 lower-case
    letters seen at least 3 times in the training 90% of the text, shuffled with ``seed``."""
    text = load_text("tinyshakespeare")
    counts = Counter(re.findall(r"[a-z]+", text[:int(0.9 * len(text))]))
    words = sorted(w for w, c in counts.items() if MIN_LEN <= len(w) <= MAX_LEN and c >= MIN_COUNT)
    random.Random(seed).shuffle(words)
    return {"train": words[N_TEST_WORDS:], "val": words[:N_TEST_WORDS]}


def scramble(word: str, rng: random.Random) -> str:
    """``word`` with its inner letters shuffled, first and last kept; a different spelling
    whenever the inner letters allow one (not "moon" -> "moon")."""
    inner = list(word[1:-1])
    if len(set(inner)) < 2:
        return word
    while True:
        rng.shuffle(inner)
        if "".join(inner) != word[1:-1]:
            return word[0] + "".join(inner) + word[-1]


def scrambled_pairs(words: list[str], n: int, generator: torch.Generator) -> list[tuple[str, str]]:
    """``n`` (scrambled, word) pairs: random words of ``words``, all randomness from
    ``generator``."""
    idx = torch.randint(len(words), (n,), generator=generator).tolist()
    rng = random.Random(int(torch.randint(2 ** 31, (1,), generator=generator)))
    return [(scramble(words[i], rng), words[i]) for i in idx]


def unscramble_batch_fn(tokenizer, batch_size: int, mask_prompt: bool = True, seed: int = 0,
                        device="cpu"):
    """A ``Trainer`` batch_fn: "train" from the training words, "val" from the held-out ones."""
    split = word_split(seed)

    def batch_fn(name: str, generator: torch.Generator):
        return encode_examples(tokenizer, scrambled_pairs(split[name], batch_size, generator),
                               mask_prompt, device)

    return batch_fn


def unscramble_test_pairs(n: int = 200, seed: int = 0) -> list[tuple[str, str]]:
    """``n`` held-out (scrambled, word) pairs, the same for every model: ``n`` distinct words."""
    words = word_split(seed)["val"][:n]
    rng = random.Random(seed + 1)
    return [(scramble(w, rng), w) for w in words]


def arrangements(letters: str) -> int:
    """How many distinct strings the letters of ``letters`` spell: n! / (c_1! c_2! ...), c the
    count of each letter ("ee" has 1, "abc" 6)."""
    count = math.factorial(len(letters))
    for c in Counter(letters).values():
        count //= math.factorial(c)
    return count


def guessing_baseline(pairs: list[tuple[str, str]]) -> dict[str, float]:
    """The exact match of two guessers that know the task's rules but no English, computed
    exactly (an expectation over their random choices, not a sample), on (scrambled, word) pairs:

    - ``random_order``: first and last letters kept, the inner letters in a uniformly random
      distinct order: right with probability 1 / M, M = ``arrangements(inner letters)``;
    - ``other_order``: the same, but never the order it was given (``scramble`` always changes the
      word when it can): 1 / (M - 1), or 1 when M = 1 (the word could not be scrambled).
    """
    random_order = other_order = 0.0
    for scrambled, word in pairs:
        m = arrangements(scrambled[1:-1])
        random_order += 1 / m
        other_order += 1.0 if m == 1 else 1 / (m - 1)
    return {"random_order": random_order / len(pairs), "other_order": other_order / len(pairs)}
