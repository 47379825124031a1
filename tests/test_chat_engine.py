"""The chat engine: the KV cache kept across turns gives what re-reading the conversation gives,
each token read once; the end-of-turn token stops a reply; the tool loop with a scripted model;
the policy when the conversation outgrows the context; streaming of characters split over tokens."""
import pytest
import torch
import torch.nn as nn

from course_lib.chat.engine import (MAX_TOOL_CALLS, Chat, ChatEngine,
                                    Piece, format_piece, load_chat_model)
from course_lib.chat.template import (CALC, CALC_END, END, RESULT, RESULT_END, ChatTokenizer,
                                      ConversationTooLong, chat_tokenizer, render)
from course_lib.checkpoint import save_checkpoint
from course_lib.data import load_text
from course_lib.model import GPT, GPTConfig
from course_lib.tokenizers import CharTokenizer, train_tokenizer

TOK = chat_tokenizer(CharTokenizer.from_text(load_text("tinyshakespeare")), "0123456789+-*/()=")


def tiny_gpt(block_size=64, seed=0):
    torch.manual_seed(seed)
    return GPT(GPTConfig(vocab_size=TOK.vocab_size, block_size=block_size,
                         n_layer=2, n_head=2, n_embd=32)).eval()


class Scripted(nn.Module):
    """A stand-in model that writes a script, one token per call (whatever it reads), and
    records what it was given to read."""

    def __init__(self, script, vocab_size=TOK.vocab_size, block_size=64):
        super().__init__()
        self.config = GPTConfig(vocab_size=vocab_size, block_size=block_size,
                                n_layer=1, n_head=1, n_embd=8)
        self.script, self.reads, self.weight = list(script), [], nn.Parameter(torch.zeros(1))

    def forward(self, idx, cache=None):
        self.reads.append(idx[0].tolist())
        logits = torch.full((1, idx.shape[1], self.config.vocab_size), -1e9)
        logits[0, -1, self.script[min(len(self.reads) - 1, len(self.script) - 1)]] = 0.0
        return logits, None


def ids_of(*items, tok=TOK):
    out = []
    for item in items:
        out += [tok.special_ids[item]] if item in tok.special_ids else tok.encode(item)
    return out


# --- the KV cache across turns --------------------------------------------------------------------

@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_cached_turns_write_the_same_tokens_as_rereading_the_whole_conversation(temperature):
    engines = [ChatEngine(tiny_gpt(), TOK, temperature=temperature, seed=3, max_reply_tokens=6,
                          min_reply_room=6, use_cache=use) for use in (True, False)]
    for text in ("Good morrow.", "What is 2+3?", "Spell night.", "And again?"):
        pieces = [list(e.stream(text)) for e in engines]
        assert pieces[0] == pieces[1]
    assert engines[0].ids == engines[1].ids and engines[0].messages == engines[1].messages


def test_cached_logits_equal_the_logits_of_the_whole_conversation_read_again():
    model = tiny_gpt()
    engine = ChatEngine(model, TOK, temperature=1.0, seed=1, max_reply_tokens=5, min_reply_room=5)
    for text in ("Hail!", "Who are you?"):
        list(engine.stream(text))
    ids = engine.ids + ids_of("<|user|>", "Speak.", END, "<|assistant|>")
    cached = engine.next_logits(ids)  # reads only the new tokens
    with torch.no_grad():
        full = model(torch.tensor([ids]))[0][0, -1]
    assert torch.allclose(cached, full, atol=1e-5)


def test_each_token_is_read_once_only_the_new_message_after_the_first_turn():
    model = tiny_gpt()
    reads = []
    model.register_forward_hook(lambda m, args, out: reads.append(args[0].shape[1]))
    engine = ChatEngine(model, TOK, temperature=1.0, seed=0, max_reply_tokens=4, min_reply_room=4)
    list(engine.stream("Hail!"))
    first, ids1, fed1 = len(reads), engine.ids, len(engine.fed)
    list(engine.stream("Again."))
    # the second turn's first read: what the cache lacked of the first turn (the reply's last
    # token and its <|end|>), the new message and <|assistant|>; nothing read twice
    assert reads[first] == (len(ids1) - fed1) + len(ids_of("<|user|>", "Again.", END)) + 1
    assert sum(reads) == len(engine.fed) and engine.ids[:len(engine.fed)] == engine.fed


# --- stop, tool loop, streaming -------------------------------------------------------------------

def test_a_reply_stops_at_the_end_of_turn_token():
    model = Scripted(ids_of("Hi", "!", END, "zzz"))
    engine = ChatEngine(model, TOK)
    pieces = list(engine.stream("Hello"))
    assert pieces == [Piece("text", "H"), Piece("text", "i"), Piece("text", "!")]
    assert engine.messages[-1] == {"role": "assistant", "content": "Hi!"}
    assert engine.ids == render(TOK, engine.messages)[0] and engine.ids[-1] == TOK.special_ids[END]


def test_the_tool_loop_runs_the_calculator_and_feeds_its_result_back():
    script = ids_of(CALC, "12+7", CALC_END, "19", END)
    model = Scripted(script)
    engine = ChatEngine(model, TOK)
    pieces = list(engine.stream("What is 12+7?"))
    assert pieces == [Piece("tool", "12+7"), Piece("result", "19"),
                      Piece("text", "1"), Piece("text", "9")]
    # after <|/calc|> the model reads the result the engine wrote, then goes on
    assert model.reads[6] == ids_of(CALC_END, RESULT, "19", RESULT_END)
    assert engine.messages[-1]["content"] == [{"type": "tool", "text": "12+7"},
                                              {"type": "result", "text": "19"},
                                              {"type": "text", "text": "19"}]
    assert engine.ids == render(TOK, engine.messages)[0]
    assert "".join(format_piece(p) for p in pieces) == "[calc 12+7 = 19]19"


def test_a_bad_expression_gets_the_calculators_error_and_a_looping_model_is_stopped():
    engine = ChatEngine(Scripted(ids_of(CALC, "1/0", CALC_END, END)), TOK)
    assert Piece("result", "error: division by zero") in list(engine.stream("1/0?"))
    loop = Scripted(ids_of(CALC, "1", CALC_END) * 10)
    pieces = list(ChatEngine(loop, TOK).stream("Go"))
    assert sum(p.kind == "tool" for p in pieces) == MAX_TOOL_CALLS and pieces[-1].kind == "notice"


def test_the_calculator_is_the_engines_to_choose():
    engine = ChatEngine(Scripted(ids_of(CALC, "2+2", CALC_END, END)), TOK, calculator=lambda e: "5")
    assert Piece("result", "5") in list(engine.stream("2+2?"))


def test_a_token_out_of_format_ends_the_reply_and_an_open_call_is_closed():
    engine = ChatEngine(Scripted(ids_of("ok", "<|user|>")), TOK)
    assert engine.send("Hi") == "ok" and engine.ids[-1] == TOK.special_ids[END]
    engine = ChatEngine(Scripted(ids_of(CALC, "1+", END)), TOK)
    list(engine.stream("Hi"))
    assert engine.messages[-1]["content"] == [{"type": "tool", "text": "1+"}]
    assert engine.ids == render(TOK, engine.messages)[0]


def test_a_character_split_over_byte_tokens_streams_whole():
    bpe = ChatTokenizer(train_tokenizer({"type": "bpe", "vocab_size": 260}, "abc abc"))
    e_acute = list("\u00e9".encode("utf-8"))  # two byte tokens (ids 0-255 are the bytes)
    model = Scripted([*e_acute, ord("a"), bpe.special_ids[END]], vocab_size=bpe.vocab_size)
    pieces = list(ChatEngine(model, bpe).stream("hi"))
    assert pieces == [Piece("text", "\u00e9"), Piece("text", "a")]


def test_closing_the_stream_early_keeps_the_reply_so_far():
    engine = ChatEngine(Scripted(ids_of("abcdef", END)), TOK)
    stream = engine.stream("Hi")
    assert next(stream) == Piece("text", "a") and next(stream) == Piece("text", "b")
    stream.close()  # a client gone, Ctrl-C
    assert engine.messages[-1] == {"role": "assistant", "content": "ab"}
    assert engine.ids == render(TOK, engine.messages)[0]
    assert engine.send("More") == "cdef"  # the conversation goes on


# --- too long for the context ---------------------------------------------------------------------

def test_the_oldest_exchanges_are_dropped_with_a_notice_and_the_cache_refilled():
    model = tiny_gpt(block_size=40)
    engine = ChatEngine(model, TOK, system="Be kind.", temperature=1.0, seed=0, max_reply_tokens=6,
                        min_reply_room=6)
    notices = []
    for n in range(6):
        pieces = list(engine.stream(f"Line {n}."))
        notices += [p.text for p in pieces if p.kind == "notice" and "dropped" in p.text]
        assert len(engine.fed) <= 40
    assert notices and "40-token context" in notices[0] and "exchange" in notices[0]
    # the system message stays
    assert engine.messages[0] == {"role": "system", "content": "Be kind."}
    assert engine.messages[1]["content"] != "Line 0."
    ids = engine.ids + ids_of("<|user|>", "x", END, "<|assistant|>")
    with torch.no_grad():
        assert torch.allclose(engine.next_logits(ids),
                              model(torch.tensor([ids]))[0][0, -1], atol=1e-5)


def test_a_follow_up_is_dropped_with_the_question_it_follows_and_the_notice_names_them():
    """Review 17-M3: the drop rule kept "How many letters?" and dropped "Spell honour.", and the
    model then read a follow-up with nothing before it (no training conversation starts so)."""
    lengths = {}
    for follow_up in (None, "default"):  # None: the old rule, by age only
        options = {} if follow_up else {"follow_up": None}
        engine = ChatEngine(Scripted(ids_of("ok", END), block_size=60), TOK, **options)
        # 19 tokens with the reply; the follow-up 21 (its reply is empty)
        engine.send("Spell honour.")
        engine.send("How many letters?")
        pieces = list(engine.stream("Who are you?"))  # 14, and 8 kept free: 62 > 60
        notices = [p.text for p in pieces if p.kind == "notice"]
        lengths[follow_up] = [m["content"] for m in engine.messages if m["role"] == "user"]
    assert lengths[None] == ["How many letters?", "Who are you?"]  # an orphaned follow-up first
    assert lengths["default"] == ["Who are you?"]
    assert notices == ["(the conversation outgrew the model's 60-token context: dropped the oldest "
                       "2 exchanges, "
                       '"Spell honour." and "How many letters?")']


def test_a_follow_up_keeps_its_question_when_it_fits_and_says_when_it_cannot():
    engine = ChatEngine(Scripted(ids_of("ok", END), block_size=50), TOK)
    engine.send("Who are you?")
    engine.send("What is 12*34?")
    # 18 + 18 + 9 + 7 > 50: the oldest goes, not the question
    pieces = list(engine.stream("Plus 5?"))
    assert [p.text for p in pieces if p.kind == "notice"] == [
        "(the conversation outgrew the model's 50-token context: dropped the oldest exchange, "
        "\"Who are you?\")"]
    assert ([m["content"] for m in engine.messages if m["role"] == "user"]
            == ["What is 12*34?", "Plus 5?"])
    engine = ChatEngine(Scripted(ids_of("ok", END), block_size=36), TOK)
    engine.send("What is 1234+5678?")  # 24 tokens; "Plus 5?" 9 and 5 kept free: 38 > 36
    notices = [p.text for p in engine.stream("Plus 5?") if p.kind == "notice"]
    assert notices == ["(the conversation outgrew the model's 36-token context: dropped the oldest "
                       "exchange, "
                       '"What is 1234+5678?"; it was the question this follow-up needs: ask it '
                       'again first)']


def test_a_reply_to_a_follow_up_is_cut_rather_than_drop_its_question():
    script = ids_of("ok", END, "a")  # then "a" for ever: the second reply needs room
    for follow_up, kept in ((None, ["Plus 5?"]), ("default", ["What is 2+3?", "Plus 5?"])):
        options = {} if follow_up else {"follow_up": None}
        engine = ChatEngine(Scripted(script, block_size=40), TOK, max_reply_tokens=100, **options)
        engine.send("What is 2+3?")
        notices = [p.text for p in engine.stream("Plus 5?") if p.kind == "notice"]
        assert [m["content"] for m in engine.messages if m["role"] == "user"] == kept
        if follow_up:
            assert notices == ["(reply cut: the 40-token context is full)"]
        else:
            assert notices[0] == ("(the reply outgrew the model's 40-token context: dropped the "
                                  "oldest exchange, "
                                  '"What is 2+3?")')


def test_about_says_the_longest_message_and_the_drop_rule():
    # 64 tokens, 9 kept free, 2 for <|user|> and <|end|>
    engine = ChatEngine(Scripted(ids_of("ok", END)), TOK)
    about = engine.about()
    assert (engine.longest_message == 53 and "at most 53 characters" in about
            and "follow-up with its question" in about)
    assert "start each new topic with a reset" in about
    assert "Quotation marks are outside its vocabulary" in about  # a reader types them
    with pytest.raises(ValueError):
        engine.check_message('Spell "rhythm".')
    engine.check_message("x" * 53)
    with pytest.raises(ConversationTooLong):
        engine.check_message("x" * 54)


def test_a_message_too_long_alone_is_refused_and_the_conversation_kept():
    engine = ChatEngine(Scripted(ids_of("ok", END), block_size=32), TOK, min_reply_room=8)
    engine.send("Hi")
    before = (list(engine.messages), engine.ids)
    with pytest.raises(ConversationTooLong, match="newest exchange alone"):
        engine.send("x" * 30)
    assert (engine.messages, engine.ids) == before


def test_a_reply_that_fills_the_context_is_cut_with_a_notice():
    engine = ChatEngine(Scripted(ids_of("a"), block_size=24), TOK,
                        min_reply_room=4, max_reply_tokens=100)
    pieces = list(engine.stream("Hi"))
    assert pieces[-1] == Piece("notice", "(reply cut: the 24-token context is full)")
    engine = ChatEngine(Scripted(ids_of("a")), TOK, max_reply_tokens=3)
    assert list(engine.stream("Hi"))[-1] == Piece("notice", "(reply cut after 3 tokens)")


# --- bad input, loading, the notebook's Chat ------------------------------------------------------

def test_bad_input_is_refused_clearly_and_changes_nothing():
    engine = ChatEngine(Scripted(ids_of("ok", END)), TOK)
    for bad, message in (("caf\u00e9", "unknown character"),
                         ("  ", "non-empty text"), (None, "non-empty text")):
        with pytest.raises(ValueError, match=message):
            engine.send(bad)
    assert engine.messages == [] and engine.ids == []
    with pytest.raises(ValueError, match="ChatTokenizer"):
        ChatEngine(Scripted([0]), TOK.base)
    with pytest.raises(ValueError, match="do not belong together"):
        ChatEngine(Scripted([0], vocab_size=10), TOK)
    with pytest.raises(ValueError, match="min_reply_room"):
        ChatEngine(Scripted([0]), TOK, min_reply_room=64)
    with pytest.raises(ValueError, match="top_p"):
        ChatEngine(Scripted([0]), TOK, top_p=2.0)


def test_reset_forgets_all_but_the_system_message():
    engine = ChatEngine(Scripted(ids_of("ok", END)), TOK, system="Be brief.")
    engine.send("Hi")
    engine.reset()
    assert engine.messages == [{"role": "system", "content": "Be brief."}] and engine.fed == []


def test_the_shipped_chat_model_loads_and_is_checked(tmp_path, monkeypatch):
    import course_lib.chat.engine as chat_engine

    model, tokenizer = load_chat_model()  # the shipped one, its SHA-256 checked
    assert tokenizer.vocab_size == model.config.vocab_size and END in tokenizer.special_ids
    changed = tmp_path / "chat-char-cpu.pt"
    changed.write_bytes(chat_engine.CHAT_MODEL_PATH.read_bytes() + b"\0")
    monkeypatch.setattr(chat_engine, "CHAT_MODEL_PATH", changed)
    with pytest.raises(ValueError, match="reinstall course_lib"):
        load_chat_model()
    monkeypatch.setattr(chat_engine, "CHAT_MODEL_PATH", tmp_path / "missing.pt")
    with pytest.raises(FileNotFoundError, match="chat-sft --out runs/chat"):
        load_chat_model()
    first, _ = load_chat_model(chat_engine.CHAT_V1_MODEL_PATH)  # the first chat model, checked too
    assert first.config.block_size == 64
    monkeypatch.setattr(chat_engine, "CHAT_V1_MODEL_PATH", changed)
    with pytest.raises(ValueError, match="first chat model"):
        load_chat_model(changed)


def test_load_chat_model_refuses_a_plain_gpt(tmp_path):
    path = save_checkpoint(tmp_path / "plain.pt",
                           GPT(GPTConfig(vocab_size=65, block_size=8, n_layer=1, n_head=1,
                                         n_embd=8)), tokenizer=TOK.base)
    with pytest.raises(ValueError, match="not a chat model"):
        load_chat_model(path)
    path = save_checkpoint(tmp_path / "chat.pt", tiny_gpt(), tokenizer=TOK)
    model, tokenizer = load_chat_model(path)
    assert tokenizer.to_dict() == TOK.to_dict() and model.config.vocab_size == TOK.vocab_size


def test_the_notebook_chat_prints_as_it_streams():
    printed = []
    chat = Chat(Scripted(ids_of(CALC, "2*3", CALC_END, "6", END)), TOK,
                printer=lambda *a, **k: printed.append(a[0] if a else "\n"))
    assert chat.send("2*3?") == "6"
    assert printed == ["[calc 2*3", " = 6]", "6", "\n"]
    chat.reset()
    assert chat.messages == []


def test_a_long_reply_drops_the_oldest_exchanges_as_it_goes_never_the_message_it_answers():
    model = tiny_gpt(block_size=48)
    engine = ChatEngine(model, TOK, temperature=1.0, seed=0, max_reply_tokens=12, min_reply_room=4)
    list(engine.stream("Hail."))
    list(engine.stream("And?"))
    engine.max_reply_tokens = 40  # a long reply now: it must make room
    pieces = list(engine.stream("Go on."))
    notices = [p.text for p in pieces if p.kind == "notice"]
    assert any("the reply outgrew" in n for n in notices)
    assert engine.messages[0] == {"role": "user",
                                  "content": "Go on."}  # both earlier exchanges went
    assert len(engine.ids) <= 48 + 1  # the context, and the <|end|> closing the reply
    ids = engine.ids[:-1]
    with torch.no_grad():  # the cache refilled after the drops still equals reading the rest again
        assert torch.allclose(engine.next_logits(ids[:-1]),
                              model(torch.tensor([ids[:-1]]))[0][0, -1], atol=1e-5)
