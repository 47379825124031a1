"""course_lib.chat.robustness (issue 54): the frozen set of requests in forms the conversations
never use, held out from every split, its rules (an empty reply is wrong), and its scoring."""
import re

import pytest
import torch

from course_lib.chat import robustness as rb
from course_lib.chat.data import load_conversations
from course_lib.chat.engine import load_chat_model
from course_lib.chat.template import chat_tokenizer
from course_lib.chat.data import EXTRA_CHARS
from course_lib.model import GPT, GPTConfig
from course_lib.tokenizers import CharTokenizer

ITEMS = rb.load_robustness_set()


def test_the_frozen_file_is_what_the_builder_makes_and_its_sha256_is_checked(tmp_path):
    assert ITEMS == rb.build_robustness_set()
    assert {i["task"] for i in ITEMS} == {"arithmetic", "spelling", "letters", "dates", "identity"}
    edited = tmp_path / "edited.json"
    edited.write_bytes(rb.ROBUSTNESS_PATH.read_bytes().replace(b"upon", b"upom"))
    with pytest.raises(ValueError, match="damaged or was edited"):
        rb.load_robustness_set(edited)


def test_every_request_is_held_out_from_the_conversations_and_in_another_form():
    """No request is a user message of any split, and none has the form (digits aside) of one."""
    asked = [m["content"] for split in load_conversations().values() for c in split for m in c["messages"]
             if m["role"] == "user"]
    form = lambda text: re.sub(r"\d+", "N", text)
    forms = {form(a) for a in asked}
    assert not {i["request"] for i in ITEMS} & set(asked)
    assert not {form(i["request"]) for i in ITEMS} & forms


def test_every_request_is_written_in_characters_the_chat_tokenizer_knows():
    _, tokenizer = load_chat_model()
    for item in ITEMS:
        assert tokenizer.decode(tokenizer.encode(item["request"])) == item["request"]


@pytest.mark.parametrize("item, reply, right", [
    ({"rule": "last-number", "answer": "16"}, "16", True),
    ({"rule": "last-number", "answer": "16"}, "8+8 is 16", True),
    ({"rule": "last-number", "answer": "16"}, "116", False),  # a number that contains the answer
    ({"rule": "last-number", "answer": "16"}, "16 or 17", False),  # the last number answers
    ({"rule": "last-number", "answer": "-10"}, "-10", True),
    ({"rule": "last-number", "answer": "-10"}, "10", False),
    ({"rule": "contains", "answer": "u-p-o-n"}, "U-p-o-n", True),
    ({"rule": "contains", "answer": "u-p-o-n"}, "u-n-d-p-o-n", False),
    ({"rule": "contains", "answer": "gpt|language model"}, "A small language model.", True),
    ({"rule": "contains", "answer": "gpt|language model"}, "I read Shakespeare.", False),
    ({"rule": "contains", "answer": "no name"}, "   ", False),  # an empty reply is wrong
])
def test_the_rules(item, reply, right):
    assert rb.is_right(item, reply) is right


def test_scoring_asks_each_request_in_a_new_conversation_and_summarises_per_task():
    torch.manual_seed(0)
    tokenizer = chat_tokenizer(CharTokenizer.from_text("abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ.,?'"),
                               EXTRA_CHARS)
    model = GPT(GPTConfig(vocab_size=tokenizer.vocab_size, block_size=64, n_layer=1, n_head=2, n_embd=16)).eval()
    few = [i for i in ITEMS if i["task"] in ("identity", "letters")][:4]
    scores = rb.score_robustness(model, tokenizer, few)
    assert len(scores["rows"]) == 4 and scores["all"]["n"] == 4
    assert all(set(row) >= {"request", "reply", "right"} for row in scores["rows"])
    assert scores["all"]["score"] == sum(r["right"] for r in scores["rows"]) / 4
