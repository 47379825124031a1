"""Version 4 of the chat robustness set (issue 54): written by hand, blind, after chat-char-cpu-5
shipped, frozen with its SHA-256 before any model was scored on it, held out from every user message
the chat models trained on (all four sets of conversations), and disjoint from versions 2 and 3 and
the blind identity set."""
from __future__ import annotations

import datetime
import functools
import json
import re

import pytest

from benchmark_loader import load_benchmark
from chat_helpers import check_right_by_its_rule
from course_lib.chat import robustness as rb
from course_lib.chat.anywhere import build_anywhere_conversations
from course_lib.chat.calculator import calculate
from course_lib.chat.counting import build_count_conversations
from course_lib.chat.data import char_chat_tokenizer
from course_lib.chat.identity import blind_identity_set, build_identity_conversations
from course_lib.chat.phrasing import normalized
from course_lib.chat.variety import build_more_conversations

V4 = rb.load_robustness_set_v4()
COUNTS = {"arithmetic": 24, "spelling": 15, "letters": 16, "dates": 15, "identity": 15}


def forms_of(conversations) -> set[str]:
    return {f for c in conversations for f in c["forms"]}


@functools.cache
def sources() -> dict[str, set[str]]:
    """The abstracted forms of every user message the chat models trained on, by source: chat.json
    and chat_v1.json (all splits), and the conversations --more-phrasings, --count-first
    (worked), --wide-identity and --word-anywhere add."""
    return {"chat.json and chat_v1.json": rb.training_forms(("train", "val", "test"), v1=True),
            "more-phrasings": forms_of(build_more_conversations()),
            "count-first, worked": forms_of(build_count_conversations(worked=True)),
            "wide-identity": forms_of(build_identity_conversations()),
            "word-anywhere": forms_of(build_anywhere_conversations())}


def test_the_file_matches_its_sha256_and_an_edit_is_refused(tmp_path):
    assert rb.hashlib.sha256(rb.ROBUSTNESS_V4_PATH.read_bytes()).hexdigest() == \
        rb.ROBUSTNESS_V4_SHA256
    edited = tmp_path / "edited.json"
    edited.write_bytes(rb.ROBUSTNESS_V4_PATH.read_bytes().replace(b"rhythm", b"rythm"))
    assert edited.read_bytes() != rb.ROBUSTNESS_V4_PATH.read_bytes()
    with pytest.raises(ValueError, match="damaged or was edited"):
        rb.load_robustness_set_v4(edited)


def test_no_request_has_the_form_of_a_user_message_of_any_training_conversations():
    by_source = sources()
    forms = set().union(*by_source.values())
    base = by_source["chat.json and chat_v1.json"]
    # the check is live: a training form is caught, and each added source brings forms of its own
    assert "spellW" in forms
    assert rb.template_seen([{"request": "Spell hello.", "slots": {"word": "hello"}}], forms)
    for name, own in by_source.items():
        others = set().union(*(f for n, f in by_source.items() if n != name))
        assert own - others, name
    # two requests of the first draft, rewritten: caught only through the added conversations
    for request, slots in (("spel beautiful", {"word": "beautiful"}),
                           ("introduce yourself please", {})):
        item = {"request": request, "slots": slots}
        assert rb.template_seen([item], forms) == [True]
        assert rb.template_seen([item], base) == [False]
    assert [i["request"] for i, seen in zip(V4, rb.template_seen(V4, forms)) if seen] == []


def test_no_request_is_one_of_version_2_or_3_or_of_the_blind_identity_set():
    mine = [normalized(i["request"]) for i in V4]
    assert len(set(mine)) == len(V4) == sum(COUNTS.values())
    for name, items in (("v2", rb.load_robustness_set_v2()), ("v3", rb.load_robustness_set_v3()),
                        ("blind identity", blind_identity_set())):
        other = {normalized(i["request"]) for i in items}
        assert sum(m in other for m in mine) == 0, name
    assert normalized("Spell  RHYTHM") == normalized("spell rhythm")  # normalizing is live


def test_the_counts_per_task_and_the_items_follow_version_3s_format():
    assert {t: sum(i["task"] == t for i in V4) for t in COUNTS} == COUNTS
    arithmetic = [i for i in V4 if i["task"] == "arithmetic"]
    assert sum(rb.numbers_in_words(i) for i in arithmetic) == 8
    v3_format = {(i["task"], i["rule"], tuple(sorted(i)), tuple(sorted(i["slots"])))
                 for i in rb.load_robustness_set_v3()}
    assert {(i["task"], i["rule"], tuple(sorted(i)), tuple(sorted(i["slots"])))
            for i in V4} == v3_format
    chars = set(char_chat_tokenizer().base.chars)
    assert [i["request"] for i in V4 if set(i["request"]) - chars] == []
    counts = [int(i["answer"]) for i in V4 if i["task"] == "letters"]
    assert set(counts) == {0, 1, 2, 3, 4} and sum(c >= 2 for c in counts) >= 8
    words = [i["slots"]["word"] for i in V4 if i["task"] == "spelling"]
    assert all(re.fullmatch(r"[a-z]{4,12}", w) for w in words), words
    years = [datetime.date.fromisoformat(i["answer"]).year for i in V4 if i["task"] == "dates"]
    assert all(1000 <= y <= 2099 for y in years)
    fixed = {i["answer"] for i in rb.load_robustness_set_v3() if i["task"] == "identity"}
    mine = [i["answer"] for i in V4 if i["task"] == "identity"]
    assert set(mine) == fixed and len(fixed) == 8


def wrong_reply(item: dict) -> str:
    """A classic wrong answer: off by one, a doubled last letter, day and month swapped (unpadded
    when they are equal), another group's fixed answer."""
    answer = item["answer"]
    if item["task"] in ("arithmetic", "letters"):
        return f"Here: {int(answer) + 1}"
    if item["task"] == "spelling":
        return f"Here: {answer}-{answer[-1]}"
    if item["task"] == "dates":
        year, month, day = answer.split("-")
        if day == month:  # unpadded, as 1999-3-3, or the next year where that changes nothing
            return f"Here: {year}-{int(month)}-{int(day)}" if int(day) < 10 else \
                f"Here: {int(year) + 1}-{month}-{day}"
        return f"Here: {year}-{day}-{month}"
    others = sorted({i["answer"] for i in V4 if i["task"] == "identity"} - {answer})
    return others[0]


def test_every_answer_is_right_by_its_own_rule_and_a_classic_wrong_answer_is_refused():
    for item in V4:
        assert check_right_by_its_rule(item) == item["answer"], item
        assert not rb.is_right(item, wrong_reply(item)), item


def test_arithmetic_answers_written_with_an_operator_are_what_the_calculator_gives():
    checked = 0
    for item in V4:
        if item["task"] == "arithmetic" and not rb.numbers_in_words(item):
            expr = re.search(r"\d+\s*[-+*/]\s*\d+", item["request"])
            if expr:
                assert calculate(expr.group()) == item["answer"], item
                checked += 1
    assert checked >= 5
    assert calculate("96+157") != "252"  # the check can fail


def test_the_version_4_record_is_of_this_set_scored_once_and_quoted_as_recorded():
    """records/chat_robustness_v4.json: this set (SHA-256, no collision), each model's replies
    judged by today's rules, the shipped model last, and book/measured.md quoting its score."""
    record = json.loads((rb.ROBUSTNESS_V4_PATH.parents[1] / "records" /
                         "chat_robustness_v4.json").read_text())
    assert record["set"]["sha256"] == rb.ROBUSTNESS_V4_SHA256 and record["set"]["collisions"] == []
    for model in record["models"]:
        replies = model["v4_replies"]
        assert [r["request"] for r in replies] == [i["request"] for i in V4]
        assert [r["right"] for r in replies] == [rb.is_right(i, r["reply"])
                                                 for i, r in zip(V4, replies)]
    from course_lib.chat.engine import CHAT_MODEL_PATH
    shipped = record["models"][-1]
    assert shipped["checkpoint"].endswith(CHAT_MODEL_PATH.name)
    right = sum(r["right"] for r in shipped["v4_replies"])
    row = next(line for line in (rb.ROBUSTNESS_V4_PATH.parents[2] / "book" / "measured.md")
               .read_text().splitlines() if line.startswith("| `chat_robustness.py`"))
    assert f"`chat-char-cpu-5` {right} of {len(V4)}, {100 * right / len(V4):.1f}%" in row
    from course_lib.evaluation import paired_comparison
    for model in record["models"]:  # each table is its replies' share right
        rights = [float(r["right"]) for r in model["v4_replies"]]
        assert model["v4"]["all"]["score"] == pytest.approx(sum(rights) / len(rights))
        for task in record["set"]["per_task"]:
            mine = [x for x, i in zip(rights, V4) if i["task"] == task]
            assert model["v4"][task]["score"] == pytest.approx(sum(mine) / len(mine)), task
    before = record["models"][-2]
    c = paired_comparison(*([float(r["right"]) for r in m["v4_replies"]]
                            for m in (shipped, before)))
    stored = shipped["v4_minus_previous"]
    assert stored["diff"] == pytest.approx(c["diff"]) and stored["interval"] == list(
        pytest.approx(x) for x in c["interval"])
    assert (stored["a_wins"], stored["b_wins"]) == (c["a_wins"], c["b_wins"])
    assert stored["mcnemar_p"] == pytest.approx(c["mcnemar_p"])
    assert (f"{c['diff']:+.3f} [{c['interval'][0]:+.3f}, {c['interval'][1]:+.3f}] "
            f"({c['a_wins']} against {c['b_wins']}, McNemar p {c['mcnemar_p']:.3f}" in row)


def test_the_blind_sets_are_held_out_from_every_training_source_of_their_time():
    """chat_robustness.py's held-out check for version 4 adds the --count-first, --wide-identity and
    --word-anywhere conversations' forms to version 3's: a check that ignored them would pass none
    of this."""
    bench = load_benchmark("chat_robustness", "bench_chat_robustness")
    v3, v4 = bench.held_out_forms("v3"), bench.held_out_forms("v4")
    assert v3 < v4
    assert build_count_conversations(worked=True)[0]["forms"][0] in v4
    identity = {f for c in build_identity_conversations() for f in c["forms"]}
    assert identity <= v4 and not identity <= v3
    anywhere = forms_of(build_anywhere_conversations())
    assert anywhere <= v4 and not anywhere <= v3
