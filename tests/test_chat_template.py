"""The chat template: special ids after the base vocabulary, rendering and parsing back, the
assistant-only loss mask, and the rule for a conversation too long for the context."""
import json

import pytest
import torch
from hypothesis import given, settings, strategies as st

from course_lib.chat.template import (ASSISTANT, CALC, CALC_END, CHAT_SPECIALS, END, RESULT,
                                      RESULT_END, USER, ChatTokenizer, ConversationTooLong,
                                      chat_tokenizer, check_conversation, collate,
                                      exchanges, fit_to_context, normalize, parse, render,
                                      render_prompt, training_pair)
from course_lib.data import load_text
from course_lib.tokenizers import CharTokenizer, tokenizer_from_dict, train_tokenizer
from course_lib.utils import IGNORE_INDEX

SHAKESPEARE = load_text("tinyshakespeare")
BASE = CharTokenizer.from_text(SHAKESPEARE)  # the pretrained model's 65 characters
CHAR = chat_tokenizer(BASE, "0123456789+-*/()=")
BPE = ChatTokenizer(train_tokenizer({"type": "bpe", "vocab_size": 300}, SHAKESPEARE[:5000]))
ALPHABET = "".join(CHAR.base.chars)

EXAMPLE = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "What is 2+3?"},
    {"role": "assistant", "content": [{"type": "tool", "text": "2+3"},
                                      {"type": "result", "text": "5"},
                                      {"type": "text", "text": "5"}]},
    {"role": "user", "content": "Thanks"},
    {"role": "assistant", "content": "Welcome."},
]


def test_special_ids_come_after_every_base_id_so_the_pretrained_ids_keep_their_meaning():
    assert CHAR.base.chars[:65] == BASE.chars and CHAR.encode("ROMEO:") == BASE.encode("ROMEO:")
    assert sorted(CHAR.special_ids.values()) == list(range(CHAR.base_vocab_size, CHAR.vocab_size))
    assert CHAR.vocab_size == (65 + len("0123456789+*/()=".replace("3", "").replace("-", ""))
                               + len(CHAT_SPECIALS))
    assert chat_tokenizer(CHAR) is CHAR  # already a chat tokenizer


def test_a_text_never_encodes_to_a_special_token():
    """A user who types '<|assistant|>' writes characters, not the role token."""
    assert not set(CHAR.encode(ALPHABET)) & set(CHAR.special_ids.values())
    ids = BPE.encode(ASSISTANT)
    assert BPE.decode(ids) == ASSISTANT and len(ids) > 1


def test_decode_writes_specials_by_name_or_skips_them():
    ids = render(CHAR, EXAMPLE[1:3])[0]
    assert CHAR.decode(ids) == (f"{USER}What is 2+3?{END}{ASSISTANT}{CALC}2+3{CALC_END}"
                                f"{RESULT}5{RESULT_END}5{END}")
    assert CHAR.decode(ids, skip_special=True) == "What is 2+3?2+355"


def test_the_chat_tokenizer_comes_back_from_its_dict_through_the_registry():
    for tok in (CHAR, BPE):
        back = tokenizer_from_dict(json.loads(json.dumps(tok.to_dict())))
        assert type(back) is ChatTokenizer and back.to_dict() == tok.to_dict()
        assert render(back, EXAMPLE) == render(tok, EXAMPLE)


# --- round trip -----------------------------------------------------------------------------------

def texts(alphabet):
    return st.text(alphabet=alphabet, max_size=12)


def conversations(alphabet):
    part = st.builds(lambda kind, text: {"type": kind, "text": text},
                     st.sampled_from(["text", "tool", "result"]), texts(alphabet))
    assistant = st.one_of(texts(alphabet), st.lists(part, max_size=4))
    exchange = st.tuples(texts(alphabet), assistant).map(
        lambda ua: [{"role": "user", "content": ua[0]}, {"role": "assistant", "content": ua[1]}])

    def build(system, turns, last_user):
        messages = ([{"role": "system", "content": system}] if system is not None else [])
        messages += [m for ex in turns for m in ex]
        if last_user is not None or not turns:
            messages.append({"role": "user", "content": last_user or ""})
        return messages
    return st.builds(build, st.none() | texts(alphabet),
                     st.lists(exchange, max_size=3), st.none() | texts(alphabet))


@settings(max_examples=150, deadline=None)
@given(messages=conversations(ALPHABET))
def test_render_then_parse_gives_the_conversation_back_char(messages):
    ids, trained = render(CHAR, messages)
    assert len(ids) == len(trained) and all(0 <= i < CHAR.vocab_size for i in ids)
    assert parse(CHAR, ids) == normalize(messages)
    assert normalize(normalize(messages)) == normalize(messages)


@settings(max_examples=60, deadline=None)
@given(messages=conversations(st.characters(codec="utf-8", exclude_categories=("Cs",))))
def test_render_then_parse_gives_the_conversation_back_bpe_any_text(messages):
    ids, _ = render(BPE, messages)
    assert parse(BPE, ids) == normalize(messages)


# --- the assistant-only mask ----------------------------------------------------------------------

def test_the_mask_of_an_example_token_by_token():
    ids, trained = render(CHAR, EXAMPLE)
    pieces = [(CHAR.decode([i]), t) for i, t in zip(ids, trained)]
    learned = "".join(p for p, t in pieces if t)
    # what the assistant writes, in both of its turns: the call and its text, and each <|end|>
    assert learned == f"{CALC}2+3{CALC_END}5{END}Welcome.{END}"
    assert "".join(p for p, t in pieces if not t) == (
        f"<|system|>Be brief.{END}{USER}What is 2+3?{END}{ASSISTANT}{RESULT}5{RESULT_END}"
        f"{USER}Thanks{END}{ASSISTANT}")


@settings(max_examples=100, deadline=None)
@given(messages=conversations(ALPHABET))
def test_the_trained_tokens_are_exactly_what_the_assistant_writes(messages):
    """The rule, stated on the conversation: in every assistant turn its text, its calculator calls
    with their two tokens and its <|end|>; nothing of the system, the user or the results."""
    ids, trained = render(CHAR, messages)
    expected = []
    for m in normalize(messages):
        if m["role"] != "assistant":
            continue
        parts = ([{"type": "text", "text": m["content"]}] if isinstance(m["content"], str)
                 else m["content"])
        for p in parts:
            expected += (CHAR.encode(p["text"]) if p["type"] == "text" else
                         [CHAR.special_ids[CALC]] + CHAR.encode(p["text"])
                         + [CHAR.special_ids[CALC_END]]
                         if p["type"] == "tool" else [])
        expected.append(CHAR.special_ids[END])
    assert [i for i, t in zip(ids, trained) if t] == expected


def test_training_pair_shifts_and_ignores_every_target_that_is_not_the_assistants():
    ids, trained = render(CHAR, EXAMPLE)
    x, y = training_pair(ids, trained)
    assert x.tolist() == ids[:-1] and len(y) == len(ids) - 1
    for t in range(len(y)):
        assert y[t].item() == (ids[t + 1] if trained[t + 1] else IGNORE_INDEX)
    xb, yb = collate([(x, y), training_pair(*render(CHAR, EXAMPLE[1:3]))], pad_id=0)
    assert xb.shape == yb.shape == (2, len(x))
    short = len(render(CHAR, EXAMPLE[1:3])[0]) - 1
    assert (yb[1, short:] == IGNORE_INDEX).all() and (xb[1, short:] == 0).all()
    with pytest.raises(ValueError, match="length >= 2"):
        training_pair([1], [True])


def test_render_prompt_ends_with_the_assistant_token():
    ids = render_prompt(CHAR, EXAMPLE[:4])
    assert ids == render(CHAR, EXAMPLE[:4])[0] + [CHAR.special_ids[ASSISTANT]]
    with pytest.raises(ValueError, match="ends with the user"):
        render_prompt(CHAR, EXAMPLE)


# --- too long for the context ---------------------------------------------------------------------

def test_a_conversation_that_fits_is_kept_whole():
    n = len(render(CHAR, EXAMPLE)[0])
    assert fit_to_context(CHAR, EXAMPLE, n) == (EXAMPLE, 0)
    assert fit_to_context(CHAR, EXAMPLE, n, policy="refuse") == (EXAMPLE, 0)


def test_the_oldest_exchanges_go_first_and_the_system_message_stays():
    n = len(render(CHAR, EXAMPLE)[0])
    kept, dropped = fit_to_context(CHAR, EXAMPLE, n - 1)
    assert dropped == 1 and kept == [EXAMPLE[0]] + EXAMPLE[3:]
    with pytest.raises(ConversationTooLong, match="the conversation takes"):
        fit_to_context(CHAR, EXAMPLE, n - 1, policy="refuse")
    last = len(render(CHAR, [EXAMPLE[0]] + EXAMPLE[3:])[0])
    with pytest.raises(ConversationTooLong, match="newest exchange alone takes"):
        fit_to_context(CHAR, EXAMPLE, last - 1)
    kept, dropped = fit_to_context(CHAR, EXAMPLE[:4], 30, reserve=5)  # room kept free for a reply
    assert dropped == 1 and len(render(CHAR, kept)[0]) <= 25


@settings(max_examples=100, deadline=None)
@given(messages=conversations(ALPHABET), limit=st.integers(1, 80))
def test_whatever_fits_is_the_system_message_and_the_newest_whole_exchanges(messages, limit):
    system, turns = exchanges(messages)
    try:
        kept, dropped = fit_to_context(CHAR, messages, limit)
    except ConversationTooLong:
        assert len(render(CHAR, system + turns[-1])[0]) > limit
        return
    assert len(render(CHAR, kept)[0]) <= limit
    assert kept == system + [m for ex in turns[dropped:] for m in ex]
    if dropped:  # it dropped no more than it had to
        assert len(render(CHAR, system + [m for ex in turns[dropped - 1:] for m in ex])[0]) > limit


def test_bad_conversations_are_refused_with_the_reason():
    cases = [([], "non-empty list"), ([{"role": "assistant", "content": "hi"}], "'user' is due"),
             ([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}],
              "'assistant' is due"),
             ([{"role": "user", "content": ["x"]}], "bad part"),
             ([{"role": "user", "content": "a"},
               {"role": "assistant", "content": [{"type": "code", "text": "1"}]}],
              "bad part"),
             ([{"role": "user", "text": "a"}], "keys 'role' and 'content'")]
    for messages, message in cases:
        with pytest.raises(ValueError, match=message):
            check_conversation(messages)
    with pytest.raises(ValueError, match="policy"):
        fit_to_context(CHAR, EXAMPLE, 100, policy="cut")


def test_parse_refuses_ids_that_are_not_a_rendered_conversation():
    ids = render(CHAR, EXAMPLE[1:3])[0]
    with pytest.raises(ValueError, match="role token"):
        parse(CHAR, ids[1:])
    with pytest.raises(ValueError, match="not closed by <\\|end\\|>"):
        parse(CHAR, ids[:-1])
    with pytest.raises(ValueError, match="not closed by <\\|/calc\\|>"):
        parse(CHAR, ids[:-7] + [CHAR.special_ids[END]])
    with pytest.raises(ValueError, match="calculator part"):
        parse(CHAR, [CHAR.special_ids[USER], CHAR.special_ids[CALC],
                     CHAR.special_ids[CALC_END], CHAR.special_ids[END]])


def test_a_char_chat_tokenizer_names_an_unknown_character():
    with pytest.raises(ValueError, match="unknown character"):
        render(CHAR, [{"role": "user", "content": "caf\u00e9"}])
    assert isinstance(training_pair(*render(CHAR, EXAMPLE))[0], torch.Tensor)
