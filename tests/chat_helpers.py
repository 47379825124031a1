"""Stand-in models for the chat's tests: they write a script, whatever they read; and the right
answer of a robustness-set item computed from its slots (:func:`right_answer`), checked against
the set's rules (:func:`check_right_by_its_rule`)."""
import datetime
import time

import torch
import torch.nn as nn

from course_lib.chat.robustness import is_right
from course_lib.chat.template import chat_tokenizer
from course_lib.data import load_text
from course_lib.model import GPTConfig
from course_lib.tokenizers import CharTokenizer

TOK = chat_tokenizer(CharTokenizer.from_text(load_text("tinyshakespeare")), "0123456789+-*/()=")


def ids_of(*items, tok=TOK):
    out = []
    for item in items:
        out += [tok.special_ids[item]] if item in tok.special_ids else tok.encode(item)
    return out


class Cycling(nn.Module):
    """Writes ``script`` over and over, one token per call (a reply that ends with <|end|> is one
    whole turn of it); ``delay`` seconds per token makes the streaming visible; ``interrupt_at``:
    the call that raises KeyboardInterrupt (Ctrl-C in the middle of a reply)."""

    def __init__(self, script, block_size=64, delay=0.0, interrupt_at=None):
        super().__init__()
        self.config = GPTConfig(vocab_size=TOK.vocab_size, block_size=block_size, n_layer=1,
                                n_head=1, n_embd=8)
        self.script, self.calls, self.delay, self.interrupt_at = (
            list(script),
            0,
            delay,
            interrupt_at,
        )
        self.weight = nn.Parameter(torch.zeros(1))

    def forward(self, idx, cache=None):
        self.calls += 1
        if self.calls == self.interrupt_at:
            raise KeyboardInterrupt
        time.sleep(self.delay)
        logits = torch.full((1, idx.shape[1], self.config.vocab_size), -1e9)
        logits[0, -1, self.script[(self.calls - 1) % len(self.script)]] = 0.0
        return logits, None


def right_answer(item: dict) -> str:
    """A robustness-set item's right answer, computed from its slots by its task (the word's letters
    joined by "-", the letter's count, the ISO date) where it has them; else its stored answer."""
    slots = item["slots"]
    if item["task"] == "spelling":
        return "-".join(slots["word"])
    if item["task"] == "letters":
        return str(slots["word"].count(slots["letter"]))
    if item["task"] == "dates":
        return datetime.date.fromisoformat(item["answer"]).isoformat()
    return item["answer"]


def check_right_by_its_rule(item: dict) -> str:
    """Assert that ``item``'s slots are in its request, that its right answer (:func:`right_answer`,
    bare for an exact rule, after other words otherwise) is judged right and an empty reply wrong;
    return that answer."""
    slots = item["slots"]
    assert all(v.lower() in item["request"].lower() for v in slots.values()), item
    right = right_answer(item)
    assert is_right(item, right if item["rule"] == "exact" else f"Here: {right}"), item
    assert not is_right(item, ""), item
    return right
