"""The tokenizer interface and its registry (course_lib.tokenizers): CharTokenizer with and without
special tokens, and one interface test run over every registered tokenizer type."""
import json

import pytest
from hypothesis import given, settings, strategies as st

from course_lib.data import load_text
from course_lib.tokenizers import (TOKENIZERS, CharTokenizer, Tokenizer, load_tokenizer_file,
                                   register_tokenizer, save_tokenizer_file, tokenizer_from_dict,
                                   train_tokenizer)

SHAKESPEARE = load_text("tinyshakespeare")
TOK = CharTokenizer.from_text(SHAKESPEARE)


def test_vocabulary_is_sorted_distinct_characters():
    assert TOK.vocab_size == 65
    assert TOK.chars == sorted(set(SHAKESPEARE))
    assert TOK.encode("\n") == [0]
    assert TOK.decode(TOK.encode("hii there")) == "hii there"


@given(st.text(alphabet=sorted(set(SHAKESPEARE))))
def test_round_trip_on_any_text_of_the_vocabulary(text):
    assert TOK.decode(TOK.encode(text)) == text


@given(st.text(min_size=1))
def test_round_trip_when_built_from_the_text_itself(text):
    tok = CharTokenizer.from_text(text)
    ids = tok.encode(text)
    assert tok.decode(ids) == text
    assert all(0 <= i < tok.vocab_size for i in ids)


def test_unknown_character_names_it_and_the_fix():
    with pytest.raises(ValueError, match=r"unknown character 'é' \(U\+00E9\) at position 3.*build "
                                         r"the tokenizer"):
        TOK.encode("caf\u00e9")


def test_empty_text_is_a_clear_error():
    with pytest.raises(ValueError, match="empty"):
        CharTokenizer.from_text("")


def test_unknown_id_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown token id 65"):
        TOK.decode([1, 65])
    # not the last entry, as a list would read it
    with pytest.raises(ValueError, match="unknown token id -1"):
        TOK.decode([-1])
    with pytest.raises(ValueError, match="must be integers, got 1.5"):
        TOK.decode([1.5])


def test_save_and_load_json(tmp_path):
    path = tmp_path / "tok.json"
    TOK.save(path)
    loaded = CharTokenizer.load(path)
    assert loaded.chars == TOK.chars
    assert loaded.encode("To be") == TOK.encode("To be")
    with pytest.raises(ValueError, match="not a CharTokenizer"):
        CharTokenizer.from_dict({"type": "bpe"})


def test_tokenizers_come_back_from_their_dict_through_the_registry():
    assert TOKENIZERS["char"] is CharTokenizer and isinstance(TOK, Tokenizer)
    back = tokenizer_from_dict(TOK.to_dict())
    assert type(back) is CharTokenizer and back.chars == TOK.chars
    built = train_tokenizer("char", "hello")
    assert (built.chars == ["e", "h", "l", "o"]
            and train_tokenizer({"type": "char"}, "hello").chars == built.chars)
    with pytest.raises(ValueError,
                       match="unknown tokenizer type 'sentencepiece'; known types: .*char"):
        tokenizer_from_dict({"type": "sentencepiece"})
    with pytest.raises(ValueError, match="a dict with a 'type' key"):
        tokenizer_from_dict({"chars": "abc"})


def test_registering_a_tokenizer_checks_the_interface():
    class Half:
        def encode(self, text):
            return []

    with pytest.raises(TypeError, match="Half cannot be a tokenizer: it has no decode"):
        register_tokenizer("half")(Half)
    assert "half" not in TOKENIZERS


# --- special tokens ------------------------------------------------------------------------------

SPECIALS = ("<pad>", "<bos>", "<eos>")


def test_specials_come_first_then_the_characters():
    """The documented rule: special token k has id k; character c has id len(specials) + its
    rank."""
    tok = CharTokenizer.from_text("hello", specials=SPECIALS)
    assert tok.chars == ["e", "h", "l", "o"] and tok.itos == list(SPECIALS) + tok.chars
    assert tok.special_ids == {"<pad>": 0, "<bos>": 1, "<eos>": 2} and tok.vocab_size == 3 + 4
    assert tok.encode("hello") == [3 + "ehlo".index(c) for c in "hello"]
    assert tok.decode([1] + tok.encode("hell") + [2, 0]) == "<bos>hell<eos><pad>"
    assert tok.decode([1] + tok.encode("hell") + [2, 0], skip_special=True) == "hell"
    # the characters keep their ids relative to each other: the same text without specials, shifted
    # by 3
    assert tok.encode("hello") == [i + 3 for i in CharTokenizer.from_text("hello").encode("hello")]


def test_special_token_names_are_never_read_from_text():
    # the characters < b o s > are ordinary ones
    tok = CharTokenizer.from_text("<bos>", specials=SPECIALS)
    assert (tok.encode("<bos>") == [tok.stoi[c] for c in "<bos>"]
            and tok.special_ids["<bos>"] not in tok.encode("<bos>"))


@pytest.mark.parametrize("chars, specials, message", [
    ("ab", ("<pad>", "<pad>"), "distinct"),
    ("ab", ("a",), "none may be one of the characters"),
    ("ab", ("",), "non-empty strings"),
    ("ab", "<pad>", "got the string '<pad>'"),
])
def test_bad_specials_are_a_clear_error(chars, specials, message):
    with pytest.raises(ValueError, match=message):
        CharTokenizer(chars, specials=specials)


def test_specials_survive_dict_file_and_train_spec(tmp_path):
    tok = CharTokenizer("ab", specials=SPECIALS)
    assert tok.to_dict() == {"type": "char", "chars": "ab", "specials": list(SPECIALS)}
    # what checkpoints always stored
    assert CharTokenizer("ab").to_dict() == {"type": "char", "chars": "ab"}
    save_tokenizer_file(tok, tmp_path / "tok.json")
    back = load_tokenizer_file(tmp_path / "tok.json")
    assert back.itos == tok.itos and back.specials == tok.specials
    built = train_tokenizer({"type": "char", "specials": list(SPECIALS)}, "ba")
    assert built.itos == tok.itos


# --- one interface test, run over every registered tokenizer type -------------------------------
# Parametrized from the registry, so a new type (registered on import of course_lib) is covered
# without touching this file. Each is built through the interface itself: train_tokenizer(name,
# text).

SAMPLE = SHAKESPEARE[:3000]
ALPHABET = sorted(set(SAMPLE))


@pytest.fixture(scope="module", params=sorted(TOKENIZERS))
def registered(request):
    return request.param, train_tokenizer(request.param, SAMPLE)


def test_every_type_is_found_by_its_name(registered):
    name, tok = registered
    assert TOKENIZERS[name] is type(tok) and type(tok).type_name == name
    assert tok.to_dict()["type"] == name and isinstance(tok, Tokenizer)


@settings(max_examples=50, deadline=None)
@given(text=st.text(alphabet=ALPHABET))
def test_every_type_round_trips_text_over_its_alphabet(registered, text):
    _, tok = registered
    ids = tok.encode(text)
    assert all(isinstance(i, int) and 0 <= i < tok.vocab_size for i in ids)
    assert tok.decode(ids) == text


def test_every_type_comes_back_equal_from_its_dict_and_file(registered, tmp_path):
    _, tok = registered
    d = json.loads(json.dumps(tok.to_dict()))  # what a checkpoint or a file holds: JSON
    back = tokenizer_from_dict(d)
    assert (type(back) is type(tok) and back.to_dict() == tok.to_dict()
            and back.vocab_size == tok.vocab_size)
    assert back.encode(SAMPLE) == tok.encode(SAMPLE)
    save_tokenizer_file(tok, tmp_path / "tok.json")
    assert load_tokenizer_file(tmp_path / "tok.json").to_dict() == tok.to_dict()


def test_every_type_handles_an_unseen_character_and_a_bad_id_clearly(registered):
    """A character the training text lacks either encodes losslessly (byte-level BPE spells any
    text) or is refused by a ValueError that names it; an id outside the vocabulary is a
    ValueError."""
    _, tok = registered
    unseen = "caf\u00e9 \u4e2d"
    assert {"\u00e9", "\u4e2d"}.isdisjoint(SAMPLE)  # é and 中 are not in the training text
    try:
        ids = tok.encode(unseen)
    except ValueError as e:
        assert "'é'" in str(e) and "unknown character" in str(e)
    else:
        assert tok.decode(ids) == unseen
    with pytest.raises(ValueError, match=f"unknown token id {tok.vocab_size}"):
        tok.decode([0, tok.vocab_size])
