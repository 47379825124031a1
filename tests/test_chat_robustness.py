"""course_lib.chat.robustness (issue 54): the frozen sets of requests (version 2, the test set, held
out from every user message of the conversations under phrasing.abstracted, review R17-B1; version
1, the validation set), their rules (exact spellings and dates, R17-B2; an empty reply is wrong),
the best constant answer, and the scoring."""
import datetime
import json
import functools
import re
from pathlib import Path

import pytest
import torch

from course_lib.chat import robustness as rb
from course_lib.chat.calculator import calculate
from course_lib.chat.data import load_conversations
from course_lib.chat.phrasing import abstracted, exchange_slots
from course_lib.chat.engine import load_chat_model
from course_lib.chat.template import chat_tokenizer
from course_lib.chat.data import EXTRA_CHARS
from course_lib.model import GPT, GPTConfig
from course_lib.tokenizers import CharTokenizer

ITEMS = rb.load_robustness_set()
V2 = rb.load_robustness_set_v2()


@functools.cache
def all_forms():
    """The abstracted forms of every user message of both files of conversations, every split."""
    return rb.training_forms(("train", "val", "test"), v1=True)


def test_the_frozen_file_is_what_the_builder_makes_and_its_sha256_is_checked(tmp_path):
    assert ITEMS == rb.build_robustness_set()
    assert {i["task"] for i in ITEMS} == {"arithmetic", "spelling", "letters", "dates", "identity"}
    edited = tmp_path / "edited.json"
    edited.write_bytes(rb.ROBUSTNESS_PATH.read_bytes().replace(b"upon", b"upom"))
    with pytest.raises(ValueError, match="damaged or was edited"):
        rb.load_robustness_set(edited)


def test_every_request_is_held_out_from_the_conversations_and_in_another_form():
    """Version 1, the generator's weak guarantee: no request is a user message of any split, and
    none has the form, digits aside, of one (data.build_conversations draws again; the strict check
    is version 2's)."""
    asked = [m["content"] for split in load_conversations().values() for c in split
             for m in c["messages"]
             if m["role"] == "user"]
    form = lambda text: re.sub(r"\d+", "N", text)
    forms = {form(a) for a in asked}
    assert not {i["request"] for i in ITEMS} & set(asked)
    assert not {form(i["request"]) for i in ITEMS} & forms


def test_every_request_is_in_the_chat_tokenizers_characters_and_fits_the_shipped_context():
    """Every version 2 request fits alone in the context of the first chat model (64 tokens), so
    that every shipped model, the first included, can be asked it."""
    from course_lib.chat.engine import CHAT_V1_MODEL_PATH
    for path in (None, CHAT_V1_MODEL_PATH):
        model, tokenizer = load_chat_model(path) if path else load_chat_model()
        for item in ITEMS + V2:
            assert tokenizer.decode(tokenizer.encode(item["request"])) == item["request"]
        engine = rb.ChatEngine(model, tokenizer)
        assert engine.block_size >= 64
        for item in V2:
            engine.check_message(item["request"])  # raises if it does not fit the context alone
    assert engine.block_size == 64  # the first model's


@pytest.mark.parametrize("item, reply, right", [
    ({"rule": "last-number", "answer": "16"}, "16", True),
    ({"rule": "last-number", "answer": "16"}, "8+8 is 16", True),
    ({"rule": "last-number", "answer": "16"}, "116", False),  # a number that contains the answer
    ({"rule": "last-number", "answer": "16"}, "16 or 17", False),  # the last number answers
    ({"rule": "last-number", "answer": "-10"}, "-10", True),
    ({"rule": "last-number", "answer": "-10"}, "10", False),
    ({"rule": "contains", "task": "spelling", "answer": "u-p-o-n"}, "U-p-o-n", True),
    ({"rule": "contains", "task": "spelling", "answer": "u-p-o-n"}, "u-n-d-p-o-n", False),
    # review R17-B2: a letter too many is wrong, in version 1 (contains) and 2 (spelled)
    ({"rule": "contains", "task": "spelling", "answer": "u-p-o-n"}, "u-p-o-n-e", False),
    ({"rule": "contains", "task": "spelling", "answer": "s-w-e-e-t"}, "s-w-e-e-t-e", False),
    ({"rule": "spelled", "answer": "f-a-t-h-e-r"}, "f-a-t-h-e-r-e", False),
    ({"rule": "spelled", "answer": "m-o-t-h-e-r"}, "m-o-t-h-e-r-e", False),
    ({"rule": "spelled", "answer": "m-o-t-h-e-r"}, "m-o-t-h-e-r-t", False),
    ({"rule": "spelled", "answer": "m-o-t-h-e-r"}, "e-m-o-t-h-e-r", False),
    # nothing more
    ({"rule": "spelled", "answer": "m-o-t-h-e-r"}, "m-o-t-h-e-r m-o-t-h-e-r-s", False),
    ({"rule": "spelled", "answer": "m-o-t-h-e-r"}, "mother", False),
    ({"rule": "spelled", "answer": "m-o-t-h-e-r"}, "m-o-t-h-e-r", True),
    ({"rule": "spelled", "answer": "m-o-t-h-e-r"}, "Mother: M-o-t-h-e-r.", True),
    # dates, bounded the same way
    ({"rule": "contains", "task": "dates", "answer": "1999-03-03"}, "1999-03-03", True),
    ({"rule": "iso-date", "answer": "1999-03-03"}, "1999-03-3", False),
    ({"rule": "iso-date", "answer": "1999-03-03"}, "1999-03-031", False),
    ({"rule": "iso-date", "answer": "1999-03-03"}, "11999-03-03", False),
    ({"rule": "iso-date", "answer": "1999-03-03"}, "1999-03-03-1", False),
    ({"rule": "iso-date", "answer": "1999-03-03"}, "1999-03-03 or 1999-04-03", False),
    ({"rule": "iso-date", "answer": "1976-07-04"}, "1976-06-04", False),
    ({"rule": "iso-date", "answer": "1999-03-03"}, "It is 1999-03-03.", True),
    # identity (version 2): the group's own fixed answer only
    ({"rule": "exact", "answer": "I am a small GPT that read Shakespeare."},
     "I have no name. I am a small GPT.", False),
    ({"rule": "exact", "answer": "I am a small GPT that read Shakespeare."},
     " I am a small GPT that read Shakespeare. ", True),
    ({"rule": "contains", "answer": "gpt|language model"}, "A small language model.", True),
    ({"rule": "contains", "answer": "gpt|language model"}, "I read Shakespeare.", False),
    ({"rule": "contains", "answer": "no name"}, "   ", False),  # an empty reply is wrong
])
def test_the_rules(item, reply, right):
    assert rb.is_right(item, reply) is right


def test_an_unknown_rule_is_refused():
    with pytest.raises(ValueError, match="unknown rule"):
        rb.is_right({"rule": "nearly", "answer": "1"}, "1")


# --- version 2 ------------------------------------------------------------------------------------


def test_version_2_is_the_builders_its_sha256_is_checked_and_it_is_no_smaller_than_v1(tmp_path):
    assert V2 == rb.build_robustness_set_v2()
    edited = tmp_path / "edited.json"
    edited.write_bytes(rb.ROBUSTNESS_V2_PATH.read_bytes().replace(b"castle", b"castel"))
    with pytest.raises(ValueError, match="damaged or was edited"):
        rb.load_robustness_set(edited, rb.ROBUSTNESS_V2_SHA256)
    for task in {i["task"] for i in ITEMS}:
        assert sum(i["task"] == task for i in V2) >= sum(i["task"] == task for i in ITEMS), task
    assert len({i["request"] for i in V2}) == len(V2) >= 61
    assert sum(rb.numbers_in_words(i) for i in V2 if i["task"] == "arithmetic") >= 8
    assert {i["word_pool"] for i in V2 if "word_pool" in i} >= {"train", "test", "none"}


def test_abstracted_is_the_strict_normalisation():
    assert (abstracted("What is 7 + 5?") == abstracted("what is 12")
            == abstracted("WHAT IS SEVEN+FIVE") == "whatis#")
    assert (abstracted("what is forty-two plus one") == abstracted("What is 3 plus 9?")
            == "whatis#plus#")
    assert (abstracted("Spell the word upon.", word="upon")
            == abstracted("spell the word KING", word="king"))
    assert abstracted("How many e's in sweet?", word="sweet", letter="e") == "howmanyCsinW"
    assert abstracted("Convert 3 March 1999 to ISO.", date="3 March 1999") == "convertDtoiso"
    assert abstracted("someone often") == "someoneoften"  # number words only as whole words


def test_every_slot_of_version_2_is_in_its_request_and_every_answer_is_right():
    other = {"word": "zyzzyva", "letter": "q", "date": "1 January 2000"}
    for item in V2:
        slots = item["slots"]
        filled = item["form"].format(w=other["word"], c=other["letter"], d=other["date"], a=1, b=2)
        assert rb.request_form(item) == abstracted(filled, **{k: other[k] for k in slots}), (
            item["request"])
        assert all(v.lower() in item["request"].lower() for v in slots.values())
        if item["task"] == "spelling":
            assert item["answer"] == "-".join(slots["word"])
        elif item["task"] == "letters":
            assert item["answer"] == str(slots["word"].count(slots["letter"]))
        elif item["task"] == "dates":
            assert datetime.date.fromisoformat(item["answer"])
        elif item["task"] == "arithmetic":
            a, b = [int(x) for x in re.findall(r"\d+", item["request"])] or [None, None]
            if a is not None:
                op = ("*" if re.search(r"[*x]|times|multiplied", item["request"])
                      else "-" if re.search(r" - |minus", item["request"]) else "+")
                assert calculate(f"{a}{op}{b}") == item["answer"], item["request"]


def test_every_version_2_request_is_held_out_from_every_user_message_of_the_conversations():
    """R17-B1: 0 collisions against every user message of chat.json and chat_v1.json, every split,
    under phrasing.abstracted (the slots of each training exchange read from its answer)."""
    forms = all_forms()
    # slots were abstracted
    assert len(forms) > 500 and "spelltheW" not in forms and "spellW" in forms
    assert [i["request"] for i, seen in zip(V2, rb.template_seen(V2, forms)) if seen] == []


@pytest.mark.parametrize("request_, slots", [
    ("Spell the word kitchen.", {"word": "kitchen"}),  # a training phrasing, another word
    ("how many z in sweet", {"letter": "z", "word": "sweet"}),  # with the training noise
    ("WHAT IS SEVEN PLUS FIVE", {}),  # numbers in words, upper case
    ("What is 123 + 456?", {}),  # other operand sizes
    ("march 3rd, 1999 in ISO form?", {"date": "march 3rd, 1999"}),
    ("Who are you", {}),
])
def test_the_hold_out_check_catches_a_training_form(request_, slots):
    """The check can fail: a training phrasing put in the set, with other values, is caught."""
    item = {"task": "x", "request": request_, "answer": "", "rule": "exact", "slots": slots}
    assert rb.template_seen([item], all_forms()) == [True]


def test_training_slots_are_read_from_each_exchange_answer():
    assert exchange_slots("Spell out banana.", "b-a-n-a-n-a") == {"word": "banana"}
    assert exchange_slots("In sweet, how many e?", "2") == {"letter": "e", "word": "sweet"}
    assert (exchange_slots("march 3rd, 1999 to ISO", "1999-03-03")["date"].lower()
            == "march 3rd, 1999")
    assert exchange_slots("What is 3+4?", [{"type": "tool", "text": "3+4"}]) == {}


def test_version_1_splits_into_seen_and_new_templates():
    """Review R17-B1 counted 42 of version 1's 61 requests with a training template, 19 without."""
    assert sum(rb.template_seen(ITEMS, rb.training_forms(("train",)))) == 42


def test_best_constant_answer():
    assert rb.best_constant(ITEMS, "letters") == {"answer": "1", "score": 7 / 9,
                                                  "n": 9}  # review R17-M1
    assert rb.best_constant(V2, "letters")["score"] == 0.25  # three requests for each count 0 to 3
    with pytest.raises(ValueError, match="no speak-as request"):
        rb.best_constant(V2, "speak-as")


def test_rows_keep_numbers_in_words_apart():
    assert rb.row_keys({"task": "arithmetic", "request": "What is one plus two?"}) == [
        "arithmetic", "arithmetic, numbers in words"]
    assert rb.row_keys({"task": "arithmetic", "request": "what is 1 + 2"}) == [
        "arithmetic", "arithmetic, digits"]
    assert rb.row_keys({"task": "letters", "request": "how many e in one"}) == ["letters"]


def test_scoring_asks_each_request_in_a_new_conversation_and_summarises_per_task():
    torch.manual_seed(0)
    tokenizer = chat_tokenizer(CharTokenizer.from_text("abcdefghijklmnopqrstuvwxyz "
                                                       "ABCDEFGHIJKLMNOPQRSTUVWXYZ.,?'"),
                               EXTRA_CHARS)
    model = GPT(GPTConfig(vocab_size=tokenizer.vocab_size, block_size=64,
                          n_layer=1, n_head=2, n_embd=16)).eval()
    few = [V2[0]] + [i for i in V2 if i["task"] in ("identity", "letters")][:3]
    scores = rb.score_robustness(model, tokenizer, few)
    assert len(scores["rows"]) == 4 and scores["all"]["n"] == 4
    assert scores["arithmetic"]["n"] == 1
    assert ("arithmetic, digits" in scores) != ("arithmetic, numbers in words" in scores)
    assert all(set(row) >= {"request", "reply", "right"} for row in scores["rows"])
    assert scores["all"]["score"] == sum(r["right"] for r in scores["rows"]) / 4


def test_the_version_2_record_is_of_this_set_and_its_replies_are_scored_by_these_rules():
    records = Path(rb.__file__).parent.parent / "records"
    record = json.loads((records / "chat_robustness_v2.json").read_text())
    assert record["set"]["sha256"] == rb.ROBUSTNESS_V2_SHA256 and record["set"]["collisions"] == []
    assert record["v1"]["template_seen_in_training"] == 42 and record["v1"]["new_template"] == 19
    for model in record["models"]:
        assert [r["request"] for r in model["v2_replies"]] == [i["request"] for i in V2]
        assert [r["right"] for r in model["v2_replies"]] == [rb.is_right(i, r["reply"]) for i, r in
                                                             zip(V2, model["v2_replies"])]
        assert model["v2"]["all"]["n"] == 71
        assert model["v2"]["arithmetic, numbers in words"]["n"] == 8
