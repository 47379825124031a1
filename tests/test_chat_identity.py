"""course_lib.chat.identity (issue 54): the identity phrasing bank, its random split into the
training half (``chat-sft --wide-identity``) and the blind half, both frozen by SHA-256; the blind
half never trained on and never a held-out request of chat.json or the robustness sets."""
import difflib
from collections import Counter

from course_lib.chat import identity
from course_lib.chat.phrasing import IDENTITY_ASKS, normalized
from course_lib.chat.robustness import (is_right, load_robustness_set_v2, load_robustness_set_v3,
                                        request_form)
from course_lib.chat.variety import IDENTITY_MORE, more_sha256

WIDE = identity.build_identity_conversations()
TRAIN, BLIND = identity.bank_split()
HELD_OUT = ([q for _, questions in IDENTITY_ASKS for q in questions[-2:]]
            + [i["request"] for i in load_robustness_set_v2() + load_robustness_set_v3()
               if i["task"] == "identity"])


def test_the_bank_is_24_new_phrasings_for_each_answer_split_16_and_8():
    assert [len(group) for group in identity.IDENTITY_BANK] == [24] * len(IDENTITY_ASKS)
    texts = [normalized(q) for group in identity.IDENTITY_BANK for q in group]
    assert len(set(texts)) == len(texts)
    earlier = {normalized(q) for _, questions in IDENTITY_ASKS for q in questions}
    earlier |= {normalized(q) for group in IDENTITY_MORE for q in group}
    assert not earlier & set(texts)
    assert Counter(g for _, g in TRAIN) == {g: 16 for g in range(len(IDENTITY_ASKS))}
    assert Counter(g for _, g in BLIND) == {g: 8 for g in range(len(IDENTITY_ASKS))}
    assert not {normalized(q) for q, _ in TRAIN} & {normalized(q) for q, _ in BLIND}
    assert identity.bank_split() == (TRAIN, BLIND)  # the split is fixed by its seed


def test_no_phrasing_of_the_bank_is_a_held_out_request_or_its_near_neighbour():
    """The validation and test identity questions of chat.json and the identity requests of
    robustness versions 2 and 3: no bank phrasing equals one, contains one or is close to one
    (difflib ratio above 0.75 on the normalized text; containment for texts of more than six
    letters: "Name?" is in every name question). The one exception is a phrasing already in
    chat.variety's training questions ("what's your name" ~ "what's your name, assistant?")."""
    def near(q, r):
        q, r = normalized(q), normalized(r)
        return (difflib.SequenceMatcher(None, q, r).ratio() > 0.75
                or (len(q) > 6 and (q in r or r in q)))

    close = [(q, r) for group in identity.IDENTITY_BANK for q in group for r in HELD_OUT
             if near(q, r)]
    assert close == [("Whats your name again?", "what's your name, assistant?")]


def test_the_blind_set_is_frozen_and_judged_by_its_answer():
    items = identity.blind_identity_set()
    assert len(items) == 64 and identity.blind_sha256(items) == identity.BLIND_SHA256
    for item in items[:8]:
        assert is_right(item, item["answer"])
        assert is_right(item, "  " + item["answer"].lower())
        wrong = next(a for a, _ in IDENTITY_ASKS if a != item["answer"])
        assert not is_right(item, wrong)  # the classic mistake: another group's answer
        assert not is_right(item, "")


def test_the_conversations_are_frozen_and_ask_training_phrasings_only():
    assert len(WIDE) == identity.WIDE_SIZE
    assert more_sha256(WIDE) == identity.WIDE_SHA256
    train = {normalized(q): IDENTITY_ASKS[g][0] for q, g in TRAIN}
    blind = {normalized(q) for q, _ in BLIND}
    forms = {request_form(i) for i in load_robustness_set_v2() + load_robustness_set_v3()}
    held = {normalized(q) for q in HELD_OUT}
    for c in WIDE:
        assert c["task"] == "identity"
        last, answer = c["messages"][-2]["content"], c["messages"][-1]["content"]
        asked = max((t for t in train if t in normalized(last)), key=len)  # the longest in it
        assert answer == train[asked]
        users = [m["content"] for m in c["messages"] if m["role"] == "user"]
        assert not {normalized(u) for u in users} & (blind | held)
        assert not set(c["forms"]) & forms
    assert Counter(len(c["messages"]) // 2 for c in WIDE)[1] > identity.WIDE_SIZE // 2
    assert {c["messages"][-1]["content"] for c in WIDE} == {a for a, _ in IDENTITY_ASKS}


def test_the_blind_half_is_never_asked_in_training():
    """No training question, shipped, chat.variety's or the bank's training half, is a blind one;
    a classic leak (the whole bank trained on) would put all 64 there."""
    shipped = {q for _, questions in IDENTITY_ASKS for q in questions[:-2]}
    more = {q for group in IDENTITY_MORE for q in group}
    held_in = {normalized(q) for q in shipped | more | {q for q, _ in TRAIN}}
    assert not {normalized(q) for q, _ in BLIND} & held_in
    assert {normalized(q) for q, _ in TRAIN} <= held_in
