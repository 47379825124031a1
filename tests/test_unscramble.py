"""course_lib.unscramble: held-out words never reach training, scrambles keep the letters, batches
mask the prompt."""
import itertools
import math
import random

import torch
from hypothesis import given
from hypothesis import strategies as st

from course_lib.finetune import SEP, END, extend_tokenizer
from course_lib.pretrained import load_pretrained
from course_lib.unscramble import (N_TEST_WORDS, arrangements, guessing_baseline, scramble,
                                   scrambled_pairs, unscramble_batch_fn, unscramble_test_pairs,
                                   word_split)
from course_lib.utils import IGNORE_INDEX


def test_word_split_is_fixed_and_disjoint():
    a, b = word_split(), word_split()
    assert a == b and len(a["val"]) == N_TEST_WORDS and not set(a["train"]) & set(a["val"])
    assert all(5 <= len(w) <= 9 and w.isalpha() and w.islower() for w in a["train"] + a["val"])


@given(st.text("abcdefghij", min_size=5, max_size=9), st.integers(0, 1000))
def test_scramble_keeps_the_ends_and_the_letters(word, seed):
    s = scramble(word, random.Random(seed))
    assert s[0] == word[0] and s[-1] == word[-1] and sorted(s) == sorted(word)
    assert s != word or len(set(word[1:-1])) < 2


def test_training_pairs_never_hold_a_test_word():
    split = word_split()
    pairs = scrambled_pairs(split["train"], 500, torch.Generator().manual_seed(0))
    assert not {w for _, w in pairs} & set(split["val"])
    test = unscramble_test_pairs(50)
    assert [w for _, w in test] == split["val"][:50] and test == unscramble_test_pairs(50)


def test_batches_mask_the_prompt():
    _, tok0 = load_pretrained()
    tok = extend_tokenizer(tok0, SEP + END)
    assert tok.vocab_size == tok0.vocab_size + 1  # only "=" is new
    x, y = unscramble_batch_fn(tok, 4)("train", torch.Generator().manual_seed(0))
    for row_x, row_y in zip(x, y):
        sep = row_x.tolist().index(tok.encode(SEP)[0])
        assert (row_y[:sep] == IGNORE_INDEX).all() and row_y[sep] != IGNORE_INDEX


@given(st.text("aabbc", min_size=0, max_size=6))
def test_arrangements_counts_distinct_orders(letters):
    assert arrangements(letters) == len(set(itertools.permutations(letters)))


def test_guessing_baseline_is_the_exact_expectation():
    pairs = [("hlelo", "hello"), ("abcd", "acbd"), ("gooot", "gooot")]  # M = 3, 2, 1
    got = guessing_baseline(pairs)
    assert math.isclose(got["random_order"], (1 / 3 + 1 / 2 + 1) / 3)
    assert math.isclose(got["other_order"], (1 / 2 + 1 + 1) / 3)
    # a sampled guesser agrees with the expectation on the real test words
    test = unscramble_test_pairs(100)
    rng = random.Random(0)
    hits = 0
    for _ in range(20):
        for s, w in test:
            inner = list(s[1:-1])
            rng.shuffle(inner)
            hits += s[0] + "".join(inner) + s[-1] == w
    exact = guessing_baseline(test)["random_order"]
    assert abs(hits / 2000 - exact) < 4 * math.sqrt(exact * (1 - exact) / 2000)
