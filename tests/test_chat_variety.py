"""course_lib.chat.variety (issue 54): the training conversations ``chat-sft --more-phrasings``
adds, in wider phrasings and noisier typing: frozen by their SHA-256, drawn from the training pools
only, and never in the form of a request of the held-out test set (robustness version 2)."""
import datetime
import random
import re

import pytest

from course_lib.chat import variety
from course_lib.chat.calculator import calculate
from course_lib.chat.data import _pair_split, _pools
from course_lib.chat.phrasing import IDENTITY_ASKS, abstracted, normalized
from course_lib.chat.robustness import load_robustness_set_v2, request_form
from course_lib.dates import FIRST_DAY

MORE = variety.build_more_conversations()
POOLS = _pools(0)


def users(c):
    return [m["content"] for m in c["messages"] if m["role"] == "user"]


def test_the_conversations_are_what_the_builder_makes_with_its_seed_and_sha256():
    assert len(MORE) == variety.MORE_SIZE
    assert variety.more_sha256(MORE) == variety.MORE_SHA256
    other = variety.build_more_conversations(50, seed=1)
    assert variety.more_sha256(other) != variety.more_sha256(MORE[:50])


def test_no_conversation_has_the_form_of_a_held_out_test_request():
    """Version 2 stays held out: no user message of the added conversations has the abstracted form
    of one of its 71 requests (each message abstracted with its own slots, known to the
    builder)."""
    v2 = {request_form(item) for item in load_robustness_set_v2()}
    assert len(v2) >= 60 and variety.held_out_v2_forms() == v2
    forms = {f for c in MORE for f in c["forms"]}
    assert len(forms) > 5000
    assert forms & v2 == set()
    for c in MORE[:500]:
        assert len(c["forms"]) == len(users(c))


def test_the_check_catches_a_test_request_put_in_training(monkeypatch):
    """The check can fail: a builder that writes a version 2 request (its form) draws again."""
    item = next(i for i in load_robustness_set_v2() if i["task"] == "identity")
    monkeypatch.setattr(variety, "IDENTITY_MORE", tuple((item["request"],)
                                                      for _ in variety.IDENTITY_MORE))
    variety.build_more_conversations.cache_clear()
    try:
        made = variety.build_more_conversations(60, seed=3)
    finally:
        variety.build_more_conversations.cache_clear()
    form = request_form(item)
    rng = random.Random(0)
    drawn = [variety._exchange("identity", POOLS["train"], rng, _pair_split)[1][0]
             for _ in range(100)]
    assert form in drawn  # unfiltered, the patched builder writes the test request's form
    assert len(made) == 60 and not any(form in c["forms"] for c in made)


def test_values_come_from_the_training_pools_only():
    """No validation or test word, day, number pair or identity question enters training."""
    held_words = set(POOLS["val"]["words"]) | set(POOLS["test"]["words"])
    train_days = {(FIRST_DAY + datetime.timedelta(days=d)).isoformat()
                  for d in POOLS["train"]["days"]}
    held_questions = {normalized(q) for _, qs in IDENTITY_ASKS for q in qs[-2:]}
    for c in MORE:
        exchanges = list(zip(c["messages"][0::2], c["messages"][1::2]))
        for i, (question, answer) in enumerate(exchanges):
            content = answer["content"]
            follows = c["task"] == "follow-up" and i == 1  # on the first one's result
            if isinstance(content, list):
                a, op, b = re.fullmatch(r"(-?[\d.]+)([-+*/])(\d+)", content[0]["text"]).groups()
                assert calculate(content[0]["text"]) == content[-1]["text"]
                if not follows and int(a) < 100 and int(b) < 100:
                    assert _pair_split(int(a), int(b)) == "train"
            elif re.fullmatch(r"\d{4}-\d\d-\d\d", content):
                assert content in train_days
            elif re.fullmatch(r"[a-z](-[a-z])+", content):
                assert content.replace("-", "") not in held_words
            assert normalized(question["content"]) not in held_questions


@pytest.mark.parametrize("n, text", [(7, "seven"), (42, "forty-two"), (300, "three hundred"),
                                     (214, "two hundred (and )?fourteen")])
def test_numbers_in_words_up_to_999(n, text):
    assert re.fullmatch(text, variety.words_big(n, random.Random(0)))


def test_a_typo_never_touches_a_slot():
    rng = random.Random(0)
    for _ in range(2000):
        template = rng.choice(variety.ASK_COUNT + variety.ASK_SPELL + variety.ASK_DATE)
        typed = variety.typo(template, rng)
        assert re.findall(r"\{[a-z]\}", typed) == re.findall(r"\{[a-z]\}", template)


def test_every_request_abstracts_to_its_stored_form():
    c = next(c for c in MORE if c["task"] == "spelling" and len(c["messages"]) == 2)
    word = c["messages"][1]["content"].replace("-", "")
    assert c["forms"] == [abstracted(c["messages"][0]["content"], word=word)]
