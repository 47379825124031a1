"""Version 3 of the chat robustness set (issue 54): written by hand, blind, frozen with its SHA-256,
held out from every user message the shipped model trained on, and disjoint from version 2."""
from __future__ import annotations

import functools
import json
import re

import pytest

from chat_helpers import check_right_by_its_rule
from course_lib.chat import robustness as rb
from course_lib.chat.variety import build_more_conversations

V3 = rb.load_robustness_set_v3()
TASKS = {"arithmetic", "spelling", "letters", "dates", "identity"}


@functools.cache
def every_form() -> set[str]:
    """The abstracted forms of every user message of chat.json and chat_v1.json (all splits) and of
    the 24,000 conversations chat-sft --more-phrasings adds, as benchmarks/chat_robustness.py
    computes them."""
    forms = rb.training_forms(("train", "val", "test"), v1=True)
    return forms | {f for c in build_more_conversations() for f in c["forms"]}


def test_the_file_matches_its_sha256(tmp_path):
    assert rb.hashlib.sha256(rb.ROBUSTNESS_V3_PATH.read_bytes()).hexdigest() == \
        rb.ROBUSTNESS_V3_SHA256
    edited = tmp_path / "edited.json"
    edited.write_bytes(rb.ROBUSTNESS_V3_PATH.read_bytes().replace(b"castle", b"castel"))
    with pytest.raises(ValueError, match="damaged or was edited"):
        rb.load_robustness_set_v3(edited)


def test_no_request_has_the_form_of_a_user_message_of_the_training_conversations():
    forms = every_form()
    assert "spellW" in forms  # the check is live: a training form is caught
    assert rb.template_seen([{"request": "Spell hello.", "slots": {"word": "hello"}}], forms)
    assert [i["request"] for i, seen in zip(V3, rb.template_seen(V3, forms)) if seen] == []


def test_no_request_is_a_version_2_request():
    v2 = {i["request"] for i in rb.load_robustness_set_v2()}
    assert [i["request"] for i in V3 if i["request"] in v2] == []
    assert len({i["request"] for i in V3}) == len(V3) >= 80


def test_every_task_has_a_dozen_requests_and_each_answer_is_right_by_its_own_rule():
    for task in TASKS:
        assert sum(i["task"] == task for i in V3) >= 12, task
    assert sum(rb.numbers_in_words(i) for i in V3 if i["task"] == "arithmetic") >= 6
    # a number word that is not an operand does not make a request "in words"
    assert not rb.numbers_in_words({"request": "quick one: 15-7", "numbers": "digits"})
    for item in V3:
        check_right_by_its_rule(item)


def test_arithmetic_answers_written_with_an_operator_are_what_the_calculator_gives():
    from course_lib.chat.calculator import calculate
    checked = 0
    for item in V3:
        if item["task"] == "arithmetic" and not rb.numbers_in_words(item):
            expr = re.search(r"\d+\s*[-+*/x]\s*\d+", item["request"])
            if expr and "x" not in expr.group():
                assert calculate(expr.group()) == item["answer"], item
                checked += 1
    assert checked >= 8


def test_the_version_3_record_is_of_this_set_and_its_replies_are_scored_by_these_rules():
    record = json.loads((rb.ROBUSTNESS_V3_PATH.parents[1] / "records" /
                         "chat_robustness_v3.json").read_text())
    assert record["set"]["sha256"] == rb.ROBUSTNESS_V3_SHA256 and record["set"]["collisions"] == []
    assert record["set"]["requests"] == len(V3)
    for model in record["models"]:
        replies = model["v3_replies"]
        assert [r["request"] for r in replies] == [i["request"] for i in V3]
        assert [r["right"] for r in replies] == [rb.is_right(i, r["reply"])
                                                 for i, r in zip(V3, replies)]
        assert model["v3"]["all"]["score"] == pytest.approx(
            sum(r["right"] for r in replies) / len(V3))
