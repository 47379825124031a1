"""Exactness against the industrial reference: BPETokenizer loaded with the cl100k ranks and
pattern returns tiktoken's cl100k_base ids. tiktoken is a test dependency only; its encoder
is built offline from the fixture (tests/fixtures/README.md)."""
from pathlib import Path

import pytest
from hypothesis import given, strategies as st

from course_lib.bpe import BPETokenizer
from course_lib.bpe_files import CL100K_SPECIAL_TOKENS, read_tiktoken_ranks
from course_lib.pretokenize import CL100K_PATTERN
from course_lib.data import load_text

tiktoken = pytest.importorskip("tiktoken")
RANKS = Path(__file__).parent / "fixtures" / "cl100k_base.tiktoken.gz"

EXAMPLES = [
    "hello world",
    "Héllo wörld, naïve café, Ærøskøbing, straße, ÉCOLE",
    "你好，世界。日本語のテキストも、한국어도。",
    "Привет, мир! Γειά σου Κόσμε! مرحبا بالعالم! שלום עולם",
    "emoji 🎉🎉🎉 👩‍👩‍👧‍👦 🇫🇷 ❤️",
    "def f(x):\n    return x**2  # square\n\n\tif x != 0:\n\t\tpass\n",
    "numbers 1 12 123 1234 12345 3.14159 1,000,000 2026-11-21 0x1F",
    "spaces   and\ttabs\t\t and\n\n\nnewlines   \n  \r\n trailing   ",
    "I'm, you're, he'll, they've, it's, I'D, WE'LL, 'quoted'",
    "<|endoftext|>between<|fim_prefix|><|fim_middle|><|fim_suffix|><|endofprompt|>",
    "",
    " ",
    "\n",
]


@pytest.fixture(scope="module")
def ours():
    return BPETokenizer.from_tiktoken(RANKS)


@pytest.fixture(scope="module")
def reference():
    return tiktoken.Encoding(name="cl100k_base", pat_str=CL100K_PATTERN,
                             mergeable_ranks=read_tiktoken_ranks(RANKS),
                             special_tokens=CL100K_SPECIAL_TOKENS)


def test_known_ids(ours):
    assert ours.encode("hello world") == [15339, 1917]
    assert ours.vocab_size == 100277


def test_whole_of_tiny_shakespeare(ours, reference):
    text = load_text("tinyshakespeare")
    ids = ours.encode(text)
    assert len(ids) == 301_829
    assert ids == reference.encode_ordinary(text)
    assert ours.decode(ids) == text


@pytest.mark.parametrize("text", EXAMPLES)
def test_several_scripts(ours, reference, text):
    assert ours.encode(text) == reference.encode(text, allowed_special="all")
    assert ours.decode(ours.encode(text)) == text


@given(st.text(max_size=80))
def test_any_string(ours, reference, text):
    for special in CL100K_SPECIAL_TOKENS:  # tiktoken would refuse them without allowed_special
        text = text.replace(special, "")
    assert ours.encode(text) == reference.encode_ordinary(text)


@given(st.lists(st.sampled_from(list(" \t\n\r\u00a0'sdmtlvreA1é你🎉.!,-_") + ["'s", "'LL", "  \n",
                                                                            "123456"]),
                max_size=40))
def test_strings_made_of_the_pattern_edges(ours, reference, pieces):
    text = "".join(pieces)
    assert ours.encode(text) == reference.encode_ordinary(text)


def test_decode_of_tiktoken_ids(ours, reference):
    ids = reference.encode("Unicode: ∀x∈ℝ, 🎉 and 你好")
    assert ours.decode(ids) == reference.decode(ids)
    # a character cut in the middle: U+FFFD
    assert ours.decode(ids[:-1]) == reference.decode(ids[:-1])
