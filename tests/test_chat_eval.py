"""Per-task scores of a chat model: conversations played turn by turn with the model's own replies,
each task's rule (exact match; the calculator on and off; speak-as's known words in one finished
line, and the right speaker preferred), chapter 16's intervals,
the spread across seeds, and the shipped record replayed."""
import json
import math
from pathlib import Path

import pytest
import torch

from chat_helpers import TOK, Cycling, ids_of
from course_lib.chat import scores as chat_eval
from course_lib.chat.engine import ChatEngine
from course_lib.chat.template import CALC, CALC_END, END
from course_lib.evaluation import bootstrap_interval, mean_stderr

RECORD = Path(chat_eval.__file__).parent.parent / "records" / "chat_scores.json"


def conversation(task, *turns):
    """turns: user text, assistant content, user text, ..."""
    roles = ["user", "assistant"] * len(turns)
    return {"task": task, "messages": [{"role": r, "content": c} for r, c in zip(roles, turns)]}


def calc_answer(expression, value):
    return [{"type": "tool", "text": expression}, {"type": "result", "text": value},
            {"type": "text", "text": value}]


def test_play_answers_each_user_message_in_order_with_the_models_own_replies_kept():
    model = Cycling(ids_of("c-a-t", END))
    engine = ChatEngine(model, TOK)
    replies = chat_eval.play(engine,
                             conversation("follow-up", "Spell cat.", "c-a-t", "Its length?", "3"))
    assert [chat_eval.reply_text(r) for r in replies] == ["c-a-t", "c-a-t"]
    assert (engine.messages[1]["content"] == "c-a-t"
            and engine.messages[2]["content"] == "Its length?")
    # a fresh start
    replies = chat_eval.play(engine, conversation("spelling", "Spell dog.", "d-o-g"))
    assert len(engine.messages) == 2 and len(replies) == 1


def test_exact_match_tasks_score_the_final_reply_against_the_last_assistant_message():
    items = [conversation("letters", "How many t in cat?", "1"),
             conversation("letters", "How many a in cab?", "1"),
             conversation("letters", "How many z in cat?", "0")]
    row = chat_eval.score_task(Cycling(ids_of("1", END)), TOK, items, "letters")
    assert row["per_item"] == [1.0, 1.0, 0.0] and row["outputs"] == ["1", "1", "1"]
    assert row["score"] == pytest.approx(2 / 3) and row["n"] == 3 and row["metric"] == "last_number"
    assert (row["interval"] == list(bootstrap_interval([1.0, 1.0, 0.0]))
            and row["stderr"] == mean_stderr([1.0, 1.0, 0.0]))
    spelled = chat_eval.score_task(Cycling(ids_of("c-a-t", END)), TOK,
                                   [conversation("spelling", "Spell cat.", "c-a-t"),
                                    conversation("spelling", "Spell cab.", "c-a-b")], "spelling")
    assert spelled["per_item"] == [1.0, 0.0] and spelled["metric"] == "exact_match"


def test_a_count_is_judged_by_the_last_number_in_the_reply_so_a_worked_reply_counts():
    """Issue 54: letters in template are judged as the robustness sets judge a count, by the last
    integer in the reply: a worked reply ending on the right count is right, one ending on another
    count wrong (whatever numbers it holds before), an empty one or one with no number wrong; a
    bare count is judged as by exact match."""
    assert chat_eval.last_number("s-t-r1-a-w-b-e-r2-r3-y: 3") == "3"
    assert chat_eval.last_number("none here") is None
    judged = chat_eval.judge("letters", ["s-t-r1-a-w-b-e-r2-r3-y: 3", "s-t-r1-a-w: 1", "3 or 2",
                                         "", "three", " 2 "], ["3", "3", "3", "3", "3", "2"])
    assert judged == [1.0, 0.0, 0.0, 0.0, 0.0, 1.0]
    bare = ["0", "1", "12", "1 ", "x"]
    assert chat_eval.judge("letters", bare, ["0", "2", "12", "1", "1"]) == [1.0, 0.0, 1.0, 1.0, 0.0]
    items = [conversation("letters", "How many r in strawberry?", "3")]
    row = chat_eval.score_task(Cycling(ids_of("s-t-r1-a-w-b-e-r2-r3-y: 3", END)), TOK, items,
                               "letters")
    assert row["per_item"] == [1.0]
    # the old rule, exact match, marks the same worked reply wrong: the rule is what changed
    assert chat_eval.judge("dates", ["s-t-r1-a-w-b-e-r2-r3-y: 3"], ["3"]) == [0.0]


def test_arithmetic_with_and_without_the_calculator():
    items = [conversation("arithmetic", "What is 2+3?", calc_answer("2+3", "5")),
             conversation("arithmetic", "What is 4+4?", calc_answer("4+4", "8"))]
    copies = Cycling(ids_of(CALC, "4+4", CALC_END, "8", END))  # calls the tool, then writes 8
    with_tool = chat_eval.score_task(copies, TOK, items, "arithmetic")
    assert with_tool["per_item"] == [0.0, 1.0] and with_tool["calculator"] is True
    # without the calculator the result comes back empty:
    # the number written after it is the model's own
    engine = ChatEngine(Cycling(ids_of(CALC, "4+4", CALC_END, "8", END)), TOK,
                        calculator=chat_eval.no_calculator)
    pieces = chat_eval.play(engine, items[1])[-1]
    assert [(p.kind, p.text) for p in pieces] == [("tool", "4+4"), ("result", ""), ("text", "8")]
    without = chat_eval.score_task(Cycling(ids_of(CALC, "4+4", CALC_END, "8", END)), TOK, items,
                                   "arithmetic", calculator=False)
    assert without["per_item"] == [0.0, 1.0] and without["calculator"] is False


def test_speak_as_scores_known_words_in_one_finished_line():
    items = [conversation("speak-as", "Speak as ROMEO.",
                          "O, she doth teach the torches to burn bright!")]
    words = chat_eval.shakespeare_words()
    known = chat_eval.score_task(Cycling(ids_of("And the king", END)),
                                 TOK, items, "speak-as", words=words)
    assert (known["per_item"] == [1.0] and known["metric"] == "known_words"
            and known["verbatim"] == 0)
    half = chat_eval.score_task(Cycling(ids_of("the qzxv", END)),
                                TOK, items, "speak-as", words=words)
    assert half["per_item"] == [0.5]
    rambling = chat_eval.score_task(Cycling(ids_of("the king ")), TOK, items, "speak-as",
                                    words=words,
                                    max_reply_tokens=20)  # never ends its turn: cut, so 0
    assert rambling["per_item"] == [0.0]
    two_lines = chat_eval.score_task(Cycling(ids_of("the king\nthe king", END)),
                                     TOK, items, "speak-as", words=words)
    assert two_lines["per_item"] == [0.0]


def test_a_real_line_of_the_speaker_counts_as_verbatim():
    lines = chat_eval.shakespeare_lines()
    line = sorted(lines["ROMEO"])[0]
    items = [conversation("speak-as", "Speak as ROMEO.", "Anything.")]
    row = chat_eval.score_task(Cycling(ids_of(line, END)), TOK, items, "speak-as", lines=lines)
    assert row["verbatim"] == 1
    assert "Is the day so young?" in lines["ROMEO"] and "ROMEO" not in lines["JULIET"]


def speak_as_items():
    return [conversation("speak-as", "Speak as ROMEO.", "a rose"),
            conversation("speak-as", "Be ANNE.", "no more"),
            conversation("speak-as", "Say a line as LADY CAPULET.", "the night")]


def test_speaker_preference_ranks_the_right_speaker_against_every_other(monkeypatch):
    items = speak_as_items()
    seen = []

    # prefers the line after its own speaker's request
    def knows_the_speaker(model, requests, **options):
        seen.extend(requests)
        owner = {TOK.encode("a rose")[0]: "ROMEO", TOK.encode("no more")[0]: "ANNE",
                 TOK.encode("the night")[0]: "LADY CAPULET"}
        return [(0.0 if TOK.decode(context, skip_special=True).endswith(owner[line[0]] + ".")
                 else -1.0, False)
                for context, line in requests]

    monkeypatch.setattr(chat_eval, "loglikelihood_tokens", knows_the_speaker)
    row = chat_eval.speaker_preference(None, TOK, items)
    assert (row["per_item"] == [1.0, 1.0, 1.0] and row["speakers"] == 3
            and row["key"] == "speak-as (right speaker)")
    assert len(seen) == 3 * 3  # each line after its own request and after the 2 others'
    first = [TOK.decode(context, skip_special=True) for context, _ in seen[:3]]
    assert first == ["Speak as ROMEO.", "Speak as ANNE.",
                     "Speak as LADY CAPULET."]  # the same phrasing, the name swapped
    assert all(line[-1] == TOK.special_ids[END]
               for _, line in seen)  # the line and its <|end|> are scored

    monkeypatch.setattr(chat_eval, "loglikelihood_tokens", lambda model, requests,
                        **o: [(-1.0, False)] * len(requests))
    # ignoring the name: chance
    assert chat_eval.speaker_preference(None, TOK, items)["score"] == 0.5
    with pytest.raises(ValueError, match="two speakers"):
        chat_eval.speaker_preference(None, TOK, items[:1])


def test_a_constant_real_line_maxes_out_known_words_but_not_speaker_preference():
    """Why the speaker row exists: "What then?" for every request scores 1.00 on known words."""
    row = chat_eval.score_task(Cycling(ids_of("What then?", END)), TOK, speak_as_items(),
                               "speak-as", words={"what", "then"}, lines={})
    assert row["score"] == 1.0


def test_speaker_preference_of_a_real_model_is_a_share():
    from course_lib.model import GPT, GPTConfig
    model = GPT(GPTConfig(vocab_size=TOK.vocab_size, block_size=64, n_layer=1, n_head=1,
                          n_embd=8)).eval()
    row = chat_eval.speaker_preference(model, TOK, speak_as_items())
    assert all(0.0 <= v <= 1.0 for v in row["per_item"]) and row["n"] == 3


@pytest.mark.parametrize("text, share",
                         [("the king", 1.0), ("", 0.0), ("zzqx the", 0.5), ("12 + 3", 0.0)])
def test_known_word_share(text, share):
    assert chat_eval.known_word_share(text, {"the", "king"}) == share


def test_reference_and_speaker():
    assert chat_eval.reference(conversation("arithmetic", "What is 2+3?",
                                            calc_answer("2+3", "5"))) == "5"
    assert chat_eval.reference(conversation("dates", "x?", "2001-02-03")) == "2001-02-03"
    assert chat_eval.speaker_of(conversation("speak-as", "Say a line as LADY CAPULET.",
                                             "x")) == "LADY CAPULET"


def test_across_seeds_and_bad_input():
    s = chat_eval.across_seeds([0.5, 0.7, 0.6])
    assert (s["mean"] == pytest.approx(0.6) and s["std"] == pytest.approx(0.1)
            and (s["min"], s["max"]) == (0.5, 0.7))
    assert math.isnan(chat_eval.across_seeds([0.5])["std"])
    with pytest.raises(ValueError, match="no scores"):
        chat_eval.across_seeds([])
    with pytest.raises(ValueError, match="unknown task"):
        chat_eval.score_task(Cycling(ids_of(END)), TOK, [], "poetry")
    with pytest.raises(ValueError, match="no dates conversation"):
        chat_eval.score_task(Cycling(ids_of(END)), TOK,
                             [conversation("letters", "a?", "1")], "dates")


def test_before_fine_tuning_keeps_the_pretrained_logits_over_the_old_tokens():
    from course_lib.pretrained import load_pretrained
    base, base_tok = load_pretrained()
    model, tok = chat_eval.before_fine_tuning(base, base_tok)
    assert model.config.vocab_size == tok.vocab_size > base.config.vocab_size
    x = torch.tensor([base_tok.encode("ROMEO:\nO")])
    with torch.no_grad():
        assert torch.allclose(model(x)[0][..., :base.config.vocab_size], base(x)[0], atol=1e-5)


@pytest.mark.slow  # ten seconds or more on 2 cores (make unit leaves it out)
def test_the_record_replays():
    """The shipped model's first replies in the record are what it answers today, greedy."""
    from course_lib.chat.data import CHAT_V1_PATH, CHAT_V1_SHA256, load_conversations
    from course_lib.chat.engine import CHAT_V1_MODEL_PATH, load_chat_model
    record = json.loads(RECORD.read_text())  # the first chat model, on the first conversations
    shipped = record["models"]["pretrained-it1000-lr0.001-s0"]["rows"]
    model, tok = load_chat_model(CHAT_V1_MODEL_PATH)
    test = load_conversations("test", path=CHAT_V1_PATH, sha256=CHAT_V1_SHA256)
    for task in ("dates", "arithmetic"):
        items = [c for c in test if c["task"] == task][:3]
        row = chat_eval.score_task(model.float(), tok, items, task)
        assert row["outputs"] == shipped[task]["outputs"][:3]
        assert row["per_item"] == shipped[task]["per_item"][:3]
    for start in ("pretrained", "scratch"):
        spread = record["across_seeds"][start]["identity"]
        assert spread["runs"] == 3 and spread["min"] <= spread["mean"] <= spread["max"]
        assert record["across_seeds"][start]["speak-as (right speaker)"]["runs"] == 3
    speak = [c for c in test if c["task"] == "speak-as"]
    # the shipped model's right-speaker score
    row = chat_eval.speaker_preference(model.float(), tok, speak)
    assert row["per_item"] == pytest.approx(shipped["speak-as (right speaker)"]["per_item"])


@pytest.mark.parametrize("task, turns", [
    ("identity", ("Who are you?", "I am a small GPT that read Shakespeare.")),
    ("dates", ("4 March 1987 in ISO form?", "1987-03-04")),
    ("arithmetic", ("What is 2+3?", calc_answer("2+3", "5"))),
    ("speak-as", ("Speak as ROMEO.", "What then?")),
])
def test_an_empty_reply_is_wrong_on_every_task(task, turns):
    """Issue 54: a model that ends its turn at once scores 0, not a free pass (the robustness set's
    rule is tested in tests/test_chat_robustness.py)."""
    model = Cycling(ids_of(END))  # <|end|> at once: an empty reply
    row = chat_eval.score_task(model, TOK, [conversation(task, *turns)], task)
    assert row["outputs"] == [""] and row["per_item"] == [0.0]


def test_best_constant_is_the_most_common_answer_of_the_choosing_set_scored_by_exact_match():
    """Review R17-M1: the letters task's constant baseline
    (always "1"), chosen on one set, scored on another."""
    conv = lambda task, answer: {"task": task, "messages": [{"role": "user", "content": "q"},
                                                             {"role": "assistant",
                                                              "content": answer}]}
    train = [conv("letters", "1")] * 3 + [conv("letters", "2"), conv("dates", "2000-01-01")]
    test = [conv("letters", "2"), conv("letters", "1"), conv("letters", "0"), conv("letters", "1")]
    chosen_on_train = chat_eval.best_constant(test, "letters", choose_on=train)
    assert (chosen_on_train["answer"] == "1" and chosen_on_train["score"] == 0.5
            and chosen_on_train["n"] == 4)
    assert chat_eval.best_constant(test, "letters")["answer"] == "1"
    with pytest.raises(ValueError, match="no identity conversation"):
        chat_eval.best_constant(test, "identity")
