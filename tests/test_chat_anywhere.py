"""course_lib.chat.anywhere (issue 54, ``chat-sft --word-anywhere``): spelling and letters requests
with the word anywhere, frozen by SHA-256, every reply right, none a held-out request's form."""
import random
import re
from collections import Counter

import pytest

from course_lib.chat import anywhere
from course_lib.chat.counting import held_out_requests
from course_lib.chat.data import _pools, load_conversations
from course_lib.chat.phrasing import abstracted, normalized
from course_lib.chat.robustness import load_robustness_set_v4, request_form
from course_lib.chat.variety import more_sha256

CONVERSATIONS = anywhere.build_anywhere_conversations()


def last_reply_is_right(conversation: dict) -> bool:
    """The last reply spells (spelling) or counts aloud (letters, ``s-t-r1-...: N``) the word the
    last request asks about: the word (and letter) whose slots give the request's recorded form."""
    request, form = conversation["messages"][-2]["content"], conversation["forms"][-1]
    reply = conversation["messages"][-1]["content"]
    spelled, _, count = reply.partition(": ")
    letters = spelled.split("-")
    word = "".join(c[0] for c in letters)
    if conversation["task"] == "spelling":
        return abstracted(request, word=word) == form and all(len(c) == 1 for c in letters)
    marked = [c for c in letters if len(c) > 1]
    counted = {c[0] for c in marked}
    # the letters the request names ("e", "e's", "es"); the form abstracts the first two only
    named = [c for c in "abcdefghijklmnopqrstuvwxyz"
             if re.search(rf"(?<![a-z]){c}(?:'?s)?(?![a-z])", request.lower())]
    asked = [c for c in named if form in (abstracted(request, word=word, letter=c),
                                          abstracted(request, word=word))]
    return (count.isdigit() and int(count) == len(marked) and len(counted) <= 1
            and all(int(c[1:]) == i + 1 for i, c in enumerate(marked))
            and any(word.count(c) == len(marked) and counted <= {c} for c in asked))


def test_the_conversations_are_frozen_and_alternate_spelling_and_letters():
    assert len(CONVERSATIONS) == anywhere.ANYWHERE_SIZE
    assert more_sha256(CONVERSATIONS) == anywhere.ANYWHERE_SHA256
    assert Counter(c["task"] for c in CONVERSATIONS) == {"spelling": 2000, "letters": 2000}
    turns = Counter(len(c["messages"]) // 2 for c in CONVERSATIONS)
    assert turns[1] > 0.7 * len(CONVERSATIONS) and turns[2] + turns[3] > 0.2 * len(CONVERSATIONS)


def test_every_last_reply_spells_or_counts_the_word_asked_about():
    assert all(last_reply_is_right(c) for c in CONVERSATIONS)
    # the check catches the classic misses: another word of the request, a letter lost
    first = next(c for c in CONVERSATIONS if c["task"] == "spelling"
                 and len(c["messages"]) == 2 and " it" in c["messages"][0]["content"].lower())
    wrong = {**first, "messages": [first["messages"][0], {"role": "assistant", "content": "i-t"}]}
    assert not last_reply_is_right(wrong)
    counted = next(c for c in CONVERSATIONS if c["task"] == "letters"
                   and c["messages"][-1]["content"].count("2-") == 1)
    reply = counted["messages"][-1]["content"]
    lost = re.sub(r"-(\w)2-", r"-\1-", reply)  # the second hit not marked
    assert not last_reply_is_right({**counted, "messages": counted["messages"][:-1]
                                    + [{"role": "assistant", "content": lost}]})


def test_no_user_message_has_a_held_out_form_or_text():
    """Robustness versions 2, 3 and 4 (forms: version 4's requests are compared, never printed)
    and chat.json's validation and test messages (texts)."""
    forms, texts = held_out_requests()
    assert {request_form(item) for item in load_robustness_set_v4()} <= forms
    assert not {f for c in CONVERSATIONS for f in c["forms"]} & forms
    users = {normalized(m["content"]) for c in CONVERSATIONS for m in c["messages"]
             if m["role"] == "user"}
    assert not texts & users
    # the check is live: a validation message, as written or typed with other case and marks,
    # is caught (the review's injection of them all caught none before it compared normalized text)
    raw = [m["content"] for c in load_conversations("val") for m in c["messages"]
           if m["role"] == "user"]
    assert all(normalized(m) in texts and normalized(m.upper() + " ?") in texts for m in raw)


def test_a_third_of_the_words_repeat_their_letters_and_none_is_a_listed_word():
    pool = _pools(0)["train"]
    rng = random.Random(0)
    strings = [anywhere.patterned(rng, pool["pseudo"]) for _ in range(500)]
    assert all(5 <= len(s) <= 11 and len(set(s)) <= 4 for s in strings)
    assert not set(strings) & pool["pseudo"]
    assert sum(len(set(s)) < len(s) - 2 for s in strings) > 450  # repeats, as in "mississippi"
    replies = [c["messages"][-1]["content"].partition(": ")[0] for c in CONVERSATIONS]
    words = [re.sub(r"[\d-]", "", r) for r in replies]
    repeated = sum(len(set(w)) <= 4 and len(w) >= 5 and w not in pool["pseudo"] for w in words)
    assert 0.3 < repeated / len(words) < 0.5  # the patterned third, and a few of the others


@pytest.mark.parametrize("template", anywhere.SPELL_ANYWHERE + anywhere.COUNT_ANYWHERE)
def test_each_phrasing_has_its_slots_once(template):
    assert template.count("{w}") == 1
    assert template.count("{c}") == (template in anywhere.COUNT_ANYWHERE)
