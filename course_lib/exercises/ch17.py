"""Checks for chapter 17, A chat model: ``from course_lib.exercises import ch17``."""
from __future__ import annotations

import ast
import inspect
import math
import textwrap

from ..chat.calculator import calculate
from ..chat.template import END, chat_tokenizer, render
from ..tokenizers import CharTokenizer
from . import call, describe, fail, passed

CONVERSATIONS = [
    [{"role": "user", "content": "Spell cat."}, {"role": "assistant", "content": "c-a-t"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 12+7?"},
     {"role": "assistant",
      "content": [{"type": "tool", "text": "12+7"}, {"type": "result", "text": "19"},
                                       {"type": "text", "text": "19"}]},
     {"role": "user", "content": "Times 3?"},
     {"role": "assistant",
      "content": [{"type": "tool", "text": "19*3"}, {"type": "result", "text": "57"},
                                       {"type": "text", "text": "57"}]}],
    [{"role": "user", "content": "Who are you?"}, {"role": "assistant", "content": "A small GPT."},
     {"role": "user", "content": "Sure?"}, {"role": "assistant", "content": "Yes."}],
]


def _tokenizer():
    text = "".join(m["content"] if isinstance(m["content"], str)
                   else "".join(p["text"] for p in m["content"])
                   for c in CONVERSATIONS for m in c)
    return chat_tokenizer(CharTokenizer.from_text(text))


def _as_text(value, what: str) -> str:
    if not isinstance(value, str):
        fail(f"{what} returned {describe(value)}, not a string.",
             "return the rendered conversation as one str")
    return value


def _as_value(value, what: str) -> str:
    if not isinstance(value, str):
        fail(f"{what} returned {describe(value)}, not a string.",
             "the model reads the calculator's answer as text: return e.g. str(19), '3.5' or "
             "'error: ...'")
    return value


def check_render(fn) -> None:
    """``fn(messages) -> str``: the conversation as the chat template writes it, special tokens by
    name: ``<|user|>Hi<|end|><|assistant|>Hello<|end|>``; an assistant's calculator call as
    ``<|calc|>12+7<|/calc|>`` and its result as ``<|result|>19<|/result|>``."""
    tok = _tokenizer()
    for messages in CONVERSATIONS:
        got = _as_text(call(fn, [dict(m) for m in messages]), "render(messages)")
        right = tok.decode(render(tok, messages)[0])
        if got == right:
            continue
        if got == right.replace(END, ""):
            fail("no message is closed: every message ends with <|end|>.",
                 "without it the model cannot learn where a turn stops, nor the engine when to "
                 "hand back")
        if got.replace(END, "") == right.replace(END, "") and got.count(END) < right.count(END):
            fail("some messages are not closed by <|end|>: the assistant's turns need it most.",
                 "write <|end|> after every message, whoever wrote it")
        if "<|calc|>" not in got and "<|calc|>" in right:
            fail(f"the calculator call is missing: expected {right!r}, got {got!r}.",
                 "a part {'type': 'tool'} is written <|calc|>text<|/calc|>, a 'result' "
                 "<|result|>text<|/result|>")
        if "user:" in got.lower() or "assistant:" in got.lower():
            fail("roles are marked with their special tokens (<|user|>), not with words such as "
                 "'user:'.",
                 "a word is something a user could type; a special token is not")
        fail(f"expected {right!r}, got {got!r}.",
             "role token, content, <|end|>, for every message in order")
    passed("a conversation is one sequence of tokens, the roles marked by special tokens.")


def _names(tok, ids) -> list[str]:
    return [tok.decode([i]) for i in ids]


def check_assistant_mask(fn) -> None:
    """``fn(tokens) -> list[bool]``: for each token of a rendered conversation (a list of strings,
    one per token: a character, or a special token by name), whether fine-tuning trains the model
    to write it (the assistant's text and calculator calls, and the ``<|end|>`` that closes the
    assistant's turn; not the role tokens, nor the user's or system's words, nor the
    calculator's results)."""
    tok = _tokenizer()
    for messages in CONVERSATIONS:
        ids, right = render(tok, messages)
        tokens = _names(tok, ids)
        got = call(fn, list(tokens))
        if (not isinstance(got, (list, tuple))
            or not all(isinstance(v, bool) or v in (0, 1) for v in got)):
            fail(f"mask(tokens) returned {describe(got)}.",
                 "return a list of True/False, one per token")
        got = [bool(v) for v in got]
        if len(got) != len(tokens):
            fail(f"{len(got)} values for {len(tokens)} tokens.", "one True or False per token")
        if got == right:
            continue
        wrong = [i for i, (g, r) in enumerate(zip(got, right)) if g != r]
        if all(got):
            fail("you train on every token: the model would learn to write the user's messages "
                 "too.",
                 "only what the assistant writes is trained")
        if any(got[i] for i, t in enumerate(tokens) if t == "<|assistant|>"):
            fail("you train on <|assistant|>: the engine writes the role token itself, the model "
                 "never has to.",
                 "the role tokens are not trained")
        if any(not got[i] and right[i] for i, t in enumerate(tokens) if t == END):
            fail("the <|end|> closing the assistant's turn is not trained: the model would never "
                 "learn to stop.",
                 "train the <|end|> after an assistant message (not after a user's)")
        inside_result, results = False, []
        for i, t in enumerate(tokens):
            inside_result = (inside_result or t == "<|result|>") and t != "<|/result|>"
            if inside_result or t == "<|/result|>":
                results.append(i)
        if any(got[i] for i in results):
            fail("you train on the calculator's result: the tool writes it, the model only reads "
                 "it.",
                 "<|result|> ... <|/result|> are not trained; the number the assistant writes "
                 "after them is")
        i = wrong[0]
        fail(f"token {i} ({tokens[i]!r}) should be {right[i]}, you have {got[i]}.",
             "the assistant's text, its <|calc|> ... <|/calc|> calls and its closing <|end|> are "
             "trained")
    passed("fine-tuning trains what the assistant writes, in every turn, and nothing else.")


RUNS_CODE = ("eval", "exec", "compile")


def _calls_to_eval(fn) -> str | None:
    """How ``fn``'s source reaches ``eval``, ``exec`` or ``compile`` ("calls eval()", None when it
    does not, or when the source cannot be read, e.g. a built-in): a filter in front of ``eval``
    hides it from the answers, not from the source. Spelt ``eval(...)``, ``builtins.eval(...)``,
    ``getattr(builtins, "eval")``, ``f = eval`` or through ``__builtins__``, it is the same
    function."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError, SyntaxError):
        return None
    through = ("builtins", "__builtins__")
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in RUNS_CODE:
            return f"calls {node.id}()"
        # x.eval(...), getattr(x, "eval"); not .compile, which re.compile also is
        if isinstance(node, ast.Attribute) and node.attr in ("eval", "exec"):
            return f"calls {node.attr}()"
        if isinstance(node, ast.Constant) and node.value in ("eval", "exec"):
            return f"calls {node.value}()"
    for node in ast.walk(tree):  # then any way to it through the builtins module
        if ((isinstance(node, ast.Name) and node.id in through)
                or (isinstance(node, ast.Attribute) and node.attr in through)
                # __import__("builtins")
                or (isinstance(node, ast.Constant) and node.value in through)
                or (isinstance(node, ast.Import) and any(a.name == "builtins" for a in node.names))
                or (isinstance(node, ast.ImportFrom) and node.module == "builtins")):
            return "reaches eval through builtins"
    return None


def check_calculator(fn) -> None:
    """``fn(text) -> str``: the value of an arithmetic expression (numbers, + - * /, parentheses,
    the usual precedence, left to right) as text, or a text starting with ``"error"`` for
    anything else: no ``eval``."""
    called = _calls_to_eval(fn)
    if called:
        fail(f"your calculate {called}: that is Python's eval, exec or compile, which runs any "
             "code a model writes, filtered or not.",
             "read the text character by character: only digits, + - * / ( ) and spaces are "
             "allowed")
    cases = ["2+3*4", "(2+3)*4", "10-4-3", "7/2", "8/2", "2*(3+4)-5", "100/8/5", " 12 + 7 ", "-3+5"]
    bad = ["2**3", "1/0", "2*(3", "abs(-2)", "3+", "", "1 2", "x+1"]
    for text in cases:
        got = call(fn, text)
        right = calculate(text)
        try:
            value = float(_as_value(got, f"calculate({text!r})"))
        except ValueError:
            fail(f"calculate({text!r}) returned {got!r}, expected {right!r}.",
                 "return the value as a string, e.g. str(19) or '3.5'")
        if math.isclose(value, float(right), rel_tol=1e-9):
            continue
        if text == "2+3*4" and value == 20:
            fail("calculate('2+3*4') gave 20: * and / bind tighter than + and -.",
                 "parse a sum of terms, each term a product of factors")
        if text in ("10-4-3", "100/8/5"):
            fail(f"calculate({text!r}) gave {got}: operators of one level go left to right.",
                 "a loop over the operators, not a recursion on the right-hand side")
        fail(f"calculate({text!r}) returned {got!r}, expected {right!r}.",
             "a sum of terms, each term a product of factors, each factor a number, a signed "
             "factor or (a sum)")
    for text in bad:
        got = _as_value(call(fn, text), f"calculate({text!r})")
        if isinstance(got, str) and got.startswith("error"):
            continue
        if text == "2**3" and str(got).strip() in ("8", "8.0"):
            fail("calculate('2**3') gave 8: that is Python's eval, which runs any code a model "
                 "writes.",
                 "read the text character by character: only digits, + - * / ( ) and spaces are "
                 "allowed")
        fail(f"calculate({text!r}) returned {got!r}: expected an answer starting with 'error'.",
             "anything but numbers, + - * / and balanced parentheses is an error, and so is a "
             "division by zero")
    passed("a calculator that runs nothing but arithmetic: the model can call it safely.")
