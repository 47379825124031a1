"""course_lib.chat.counting (issue 54): the letters conversations ``chat-sft --count-first`` adds,
drawn count first: frozen by their SHA-256, every answer 0 to 4 a fifth each and right, values from
the training pool only, and never a held-out request (robustness versions 2 and 3 by form, the
validation and test requests of chat.json)."""
import random
from collections import Counter

from course_lib.chat import counting
from course_lib.chat.data import _pools
from course_lib.chat.phrasing import abstracted
from course_lib.chat.robustness import load_robustness_set_v2, request_form

COUNT = counting.build_count_conversations()
POOLS = _pools(0)


def test_the_conversations_are_what_the_builder_makes_with_its_seed_and_sha256():
    assert len(COUNT) == counting.COUNT_SIZE
    assert counting.count_sha256(COUNT) == counting.COUNT_SHA256
    other = counting.build_count_conversations(50, seed=1)
    assert counting.count_sha256(other) != counting.count_sha256(COUNT[:50])


def test_the_worked_replies_spell_the_word_count_each_hit_and_end_with_the_count():
    assert counting.worked_reply("strawberry", "r") == "s-t-r1-a-w-b-e-r2-r3-y: 3"
    assert counting.worked_reply("sweet", "z") == "s-w-e-e-t: 0"
    worked = counting.build_count_conversations(worked=True)
    assert counting.count_sha256(worked) == counting.COUNT_WORKED_SHA256
    assert [c["messages"][0] for c in worked] == [c["messages"][0] for c in COUNT]
    assert all(w["messages"][1]["content"].endswith(": " + b["messages"][1]["content"])
               for w, b in zip(worked, COUNT))


def test_the_answers_are_drawn_first_each_count_a_fifth():
    """The label distribution: 0..MAX_COUNT, each exactly a fifth (the shipped data's letters
    answers are nearly all 0 to 2), and the reply is the bare number."""
    answers = Counter(c["messages"][1]["content"] for c in COUNT)
    assert answers == {str(k): counting.COUNT_SIZE // 5 for k in range(counting.MAX_COUNT + 1)}
    assert {c["task"] for c in COUNT} == {"letters"}
    assert all(len(c["messages"]) == 2 == 2 * len(c["forms"]) for c in COUNT)


def test_each_drawn_word_holds_the_letter_exactly_k_times_and_comes_from_training():
    pool, rng = POOLS["train"], random.Random(0)
    pairs = counting.pairs_by_count(pool["words"])
    held = set(POOLS["val"]["words"]) | set(POOLS["test"]["words"])
    kinds = Counter()
    for i in range(3000):
        k = i % (counting.MAX_COUNT + 1)
        word, letter = counting.draw_item(k, pool, pairs, rng)
        assert word.count(letter) == k and 3 <= len(word) <= counting.LONGEST
        assert word not in held
        kinds[word in pool["words"]] += 1
    assert 0.4 < kinds[True] / 3000 < 0.6  # WORD_SHARE real words, the rest strings


def test_no_request_is_held_out():
    """No request has the abstracted form of a version 2, 3 or 4 request (compared as sets;
    nothing of version 3 is printed) or is a validation or test request of chat.json."""
    forms, texts = counting.held_out_requests()
    v2 = {request_form(item) for item in load_robustness_set_v2()}
    assert v2 < forms and len(texts) > 500
    made = {f for c in COUNT for f in c["forms"]}
    assert len(made) > 300
    assert len(made & forms) == 0
    assert not {counting.normalized(c["messages"][0]["content"]) for c in COUNT} & texts


def test_the_check_catches_a_held_out_request_put_in_training(monkeypatch):
    """The check can fail: a builder that writes a version 2 letters request's form draws again."""
    item = next(i for i in load_robustness_set_v2() if i["task"] == "letters")
    template = (item["request"].replace(item["slots"]["word"], "{w}")
                .replace(f" {item['slots']['letter']}", " {c}"))
    monkeypatch.setattr(counting, "ASK_LETTERS", (template,))
    monkeypatch.setattr(counting, "ASK_COUNT", (template,))
    form = request_form(item)
    rng = random.Random(0)
    drawn = [abstracted(counting.request("sweet", "e", rng), word="sweet", letter="e")
             for _ in range(50)]
    assert form in drawn  # unfiltered, the patched phrasing is the held-out form
    counting.build_count_conversations.cache_clear()
    try:
        made = counting.build_count_conversations(40, seed=3)
    finally:
        counting.build_count_conversations.cache_clear()
    assert len(made) == 40 and not any(form in c["forms"] for c in made)


def test_a_letters_request_is_read_back_to_its_letter_and_word_or_left_unread():
    """``letters_slots``: the letter and word of a stored request, given its count; the phrasings'
    own words (even with a typo) are not the word; a request that reads two ways is not read."""
    assert counting.letters_slots("How many times is z in tafford?", 0) == {("z", "tafford")}
    assert counting.letters_slots("coutn e's in ghdzcssofh", 0) == {("e", "ghdzcssofh")}
    assert counting.letters_slots("Count the E in ONDON.", 0) == {("e", "ondon")}
    assert counting.letters_slots("how many es are in gave", 1) == {("e", "gave")}
    assert len(counting.letters_slots("how many e can u find in virtues.", 1)) == 2
    assert counting.letters_slots("Count the q in cat.", 1) == set()
    assert counting.one_typo_apart("teh", "the") and counting.one_typo_apart("nuumber", "number")
    assert counting.one_typo_apart("hw", "how") and counting.one_typo_apart("tel", "tell")
    assert not counting.one_typo_apart("morn", "many") and not counting.one_typo_apart("ab", "ba c")


def test_worked_everywhere_rewrites_every_training_count_and_keeps_its_answer():
    """``--count-first worked-all``'s training split: each letters conversation's last reply a
    worked reply whose last number is the stored count and whose letters spell a word of the
    request; every other message and conversation as it was; fewer than 1% of the letters
    conversations left out; a count asked in an earlier turn keeps its bare answer
    (``letters_answers`` counts them)."""
    from course_lib.chat.data import load_conversations
    from course_lib.chat.scores import last_number

    train = load_conversations("train")
    out, left_out = counting.worked_everywhere(train)
    letters = [c for c in train if c["task"] == "letters"]
    assert len(out) == len(train) - left_out and left_out < 0.01 * len(letters)
    assert [c for c in out if c["task"] != "letters"] == [c for c in train
                                                          if c["task"] != "letters"]
    read = [c for c in letters if len(counting.letters_slots(
        c["messages"][-2]["content"], int(c["messages"][-1]["content"]))) == 1]
    assert len(read) == len(letters) - left_out
    for before, after in zip(read, [c for c in out if c["task"] == "letters"], strict=True):
        assert after["messages"][:-1] == before["messages"][:-1]
        reply, count = after["messages"][-1]["content"], before["messages"][-1]["content"]
        spelled, _, end = reply.partition(": ")
        word = "".join(ch for ch in spelled if ch.isalpha())
        letter = next(ch for ch in word if ch + "1" in spelled) if count != "0" else None
        assert last_number(reply) == count == end
        assert word in before["messages"][-2]["content"].lower()
        assert letter is None or word.count(letter) == int(count)
    kinds = counting.letters_answers(out)
    assert kinds["worked"] == len(read) and 0 < kinds["bare"] < kinds["worked"]
    assert counting.letters_answers([{"messages": [
        {"role": "user", "content": "Count the e in tree."}, {"role": "assistant", "content": "2"},
        {"role": "user", "content": "How many letters?"}, {"role": "assistant", "content": "4"},
        {"role": "user", "content": "Number of r in tree?"},
        {"role": "assistant", "content": "t-r1-e-e: 1"}]}]) == {"bare": 1, "worked": 1}
