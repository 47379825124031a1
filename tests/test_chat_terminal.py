"""The terminal chat: streams, /reset, /quit, a refused message in one line, Ctrl-C stops a reply;
and the command line's ``chat`` (a missing model named with its fix, Ctrl-C at the prompt)."""
import io

import pytest
import torch

from chat_helpers import TOK, Cycling, ids_of
from course_lib.chat.engine import ChatEngine
from course_lib.chat.template import CALC, CALC_END, END
from course_lib.chat.terminal import NO_REPLY, run_terminal
from course_lib.checkpoint import save_checkpoint
from course_lib.cli import main
from course_lib.model import GPT, GPTConfig

REPLY = ids_of(CALC, "2+3", CALC_END, "5", END)


def chat(lines, model=None):
    engine, out, lines = ChatEngine(model or Cycling(REPLY), TOK), io.StringIO(), iter(lines)

    def read(prompt):
        out.write(prompt)
        try:
            return next(lines)
        except StopIteration:
            raise EOFError from None
    return run_terminal(engine, "tiny", read, out), out.getvalue(), engine


def test_a_conversation_streams_resets_and_quits():
    status, text, engine = chat(["What is 2+3?", "", "/reset", "Again?", "/help", "/quit",
                                 "never read"])
    assert status == 0
    assert text.count("assistant> [calc 2+3 = 5]5\n") == 2 and "(a new conversation)" in text
    assert "(unknown command /help: /reset starts again" in text and "never read" not in text
    assert len(engine.messages) == 2  # the reset forgot the first exchange


def test_a_known_command_with_an_argument_is_not_called_unknown():
    """Review 2026-11-28 C1 (row 73): "/reset extra" answered "unknown command /reset"."""
    status, text, engine = chat(["What is 2+3?", "/reset extra", "/quit now", "/quit"])
    # neither ran: the conversation is kept, the chat went on
    assert status == 0 and len(engine.messages) == 2
    assert "(/reset takes no argument: type /reset alone: /reset starts again" in text
    assert "(/quit takes no argument: type /quit alone: " in text and "unknown command" not in text


def test_the_end_of_input_ends_the_chat():
    status, text, _ = chat(["Hi"])
    assert status == 0 and text.endswith("you> \n")


def test_a_message_the_model_cannot_read_is_refused_and_the_chat_goes_on():
    status, text, engine = chat(["caf\u00e9", "x" * 80, "2+3?"])
    assert ("(not sent: unknown character '\u00e9'" in text
            and "(not sent: its newest exchange alone" in text)
    assert text.count("[calc 2+3 = 5]5") == 1 and len(engine.messages) == 2


def test_ctrl_c_stops_the_reply_and_keeps_what_was_written():
    model = Cycling(ids_of("abcdef", END), interrupt_at=4)
    status, text, engine = chat(["Hi", "More"], model)
    assert "assistant> abc\n(reply stopped: Ctrl-C)" in text
    assert (engine.messages[1] == {"role": "assistant", "content": "abc"}
            and len(engine.messages) == 4)


def test_an_empty_reply_is_shown_as_such_not_as_nothing():
    """A model that ends its turn at once (or writes only spaces) is not a broken chat."""
    for reply in (ids_of(END), ids_of("  ", END)):
        status, text, _ = chat(["How much is 7+5?"], Cycling(reply))
        assert ("assistant> " + NO_REPLY + "\n" in text
                or "assistant>   " + NO_REPLY + "\n" in text), text
    assert NO_REPLY not in chat(["What is 2+3?"])[1]  # a real reply: no notice


@pytest.fixture
def chat_checkpoint(tmp_path):
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=TOK.vocab_size, block_size=64, n_layer=1, n_head=2, n_embd=16))
    return save_checkpoint(tmp_path / "chat.pt", model, tokenizer=TOK)


def test_the_command_line_chats_and_ctrl_c_at_the_prompt_is_one_line(chat_checkpoint, monkeypatch,
                                                                    capsys):
    answers = iter(["Hi", "/quit"])
    monkeypatch.setattr("builtins.input", lambda prompt: next(answers))
    assert main(["chat", "--checkpoint", str(chat_checkpoint), "--max-tokens", "5"]) == 0
    out = capsys.readouterr().out
    assert (out.startswith(f"chatting with {chat_checkpoint} (64-token context)")
            and "(reply cut after 5 tokens)" in out)
    # 17-M3
    assert ("a message of at most 53 characters" in out
            and "start each new topic with a reset" in out)

    def ctrl_c(prompt):
        raise KeyboardInterrupt
    monkeypatch.setattr("builtins.input", ctrl_c)
    assert main(["chat", "--checkpoint", str(chat_checkpoint)]) == 130
    assert capsys.readouterr().err == "interrupted (Ctrl-C): the chat ended\n"


def test_a_missing_or_changed_shipped_chat_model_is_one_line(capsys, monkeypatch, tmp_path):
    import course_lib.chat.engine as chat_engine

    monkeypatch.setattr(chat_engine, "CHAT_MODEL_PATH", tmp_path / "missing.pt")
    assert main(["chat"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "python -m course_lib chat-sft --out runs/chat" in err
    changed = tmp_path / "changed.pt"
    changed.write_bytes(b"not the shipped model")
    monkeypatch.setattr(chat_engine, "CHAT_MODEL_PATH", changed)
    assert main(["chat"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "reinstall course_lib" in err


def test_the_shipped_chat_model_answers_in_the_terminal(capsys, monkeypatch):
    lines = iter(["How much is 1+69?", "/quit"])
    monkeypatch.setattr("builtins.input", lambda prompt: next(lines))
    assert main(["chat"]) == 0
    assert "70" in capsys.readouterr().out
