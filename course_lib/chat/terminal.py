"""The chat in a terminal: ``python -m course_lib chat`` (chapter 17).

The reply streams as the model writes it (calculator calls shown as ``[calc 12+7 = 19]``).
``/reset`` starts a new conversation, ``/quit`` (or end of input, Ctrl-D) ends the chat. Ctrl-C
while a reply is being written stops that reply (the conversation keeps what was written);
Ctrl-C at the prompt ends the chat, in one line. A message the model cannot take (a character
it cannot read, too long) is refused in one line, and the chat goes on.
"""
from __future__ import annotations

import sys

from .engine import NO_REPLY, ChatEngine, format_piece

COMMANDS = ("/reset", "/quit")
HELP = "/reset starts again, /quit ends; Ctrl-C stops a reply, or at the prompt ends the chat"


def run_terminal(engine: ChatEngine, name: str = "the model", read=None, out=None) -> int:
    """Chat with ``engine`` until /quit or the end of input; ``read`` asks for a line (``input``),
    ``out`` is where the chat is written (standard output)."""
    out, read = out or sys.stdout, read or input
    print(f"chatting with {name} ({engine.block_size}-token context). {HELP}\n{engine.about()}",
          file=out)
    while True:
        try:
            line = read("you> ")
        except EOFError:
            print(file=out)
            return 0
        command = line.strip()
        if not command:
            continue
        if command == "/quit":
            return 0
        if command == "/reset":
            engine.reset()
            print("(a new conversation)", file=out)
            continue
        if command.startswith("/"):
            word = command.split()[0]
            why = (f"{word} takes no argument: type {word} alone" if word in COMMANDS
                   else f"unknown command {word}")
            print(f"({why}: {HELP})", file=out)
            continue
        reply(engine, line, out)


def reply(engine: ChatEngine, line: str, out) -> None:
    """Stream the reply to ``line``; Ctrl-C stops it, a refused message is one line."""
    try:
        engine.check_message(line)
    except ValueError as e:
        print(f"(not sent: {e})", file=out)
        return
    print("assistant> ", end="", file=out, flush=True)
    stream = engine.stream(line)
    wrote = False
    try:
        for piece in stream:
            print(format_piece(piece), end="", file=out, flush=True)
            wrote = wrote or (piece.kind != "notice" and bool(piece.text.strip()))
        print("" if wrote else NO_REPLY, file=out)
    except KeyboardInterrupt:
        stream.close()
        print("\n(reply stopped: Ctrl-C)", file=out)
