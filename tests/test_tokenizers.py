import pytest
from hypothesis import given, strategies as st

from course_lib.data import load_text
from course_lib.tokenizers import (TOKENIZERS, CharTokenizer, Tokenizer, register_tokenizer, tokenizer_from_dict,
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
    with pytest.raises(ValueError, match=r"unknown character 'é' \(U\+00E9\) at position 3.*build the tokenizer"):
        TOK.encode("caf\u00e9")


def test_empty_text_is_a_clear_error():
    with pytest.raises(ValueError, match="empty"):
        CharTokenizer.from_text("")


def test_unknown_id_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown token id 65"):
        TOK.decode([1, 65])


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
    assert built.chars == ["e", "h", "l", "o"] and train_tokenizer({"type": "char"}, "hello").chars == built.chars
    with pytest.raises(ValueError, match="unknown tokenizer type 'sentencepiece'; known types: .*char"):
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
