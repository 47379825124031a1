"""A safe calculator for the chat model's tool calls (chapter 17).

The assistant writes an expression between ``<|calc|>`` and ``<|/calc|>``; the chat engine
answers with what :func:`calculate` returns. The text comes from a model (and, through it,
from whoever chats with it), so it is never given to Python's ``eval``: a recursive-descent
parser accepts numbers, ``+ - * /`` and parentheses and nothing else::

    expression := term (("+" | "-") term)*
    term       := factor (("*" | "/") factor)*
    factor     := ("+" | "-") factor | number | "(" expression ")"
    number     := digits ["." digits]

Everything is bounded, so no input can make it slow or big: at most ``MAX_LENGTH`` characters,
``MAX_DEPTH`` nested parentheses or signs, numbers and every intermediate result at most
``MAX_MAGNITUDE`` in size. The arithmetic is Python's, in the same order (left to right, ``*``
and ``/`` before ``+`` and ``-``): whole numbers stay exact, ``/`` is true division.

:func:`calculate` never raises: a result is a number as text (``"19"``, ``"3.5"``), anything
wrong an ``"error: ..."`` text that the model reads as the tool's answer (division by zero,
too long, a character that is not arithmetic, an incomplete expression...).
"""
from __future__ import annotations

import math
import operator

MAX_LENGTH = 64  # characters of one expression
MAX_DEPTH = 16  # nested parentheses and signs
MAX_MAGNITUDE = 1e12  # the largest number, given or computed
ARITHMETIC = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv}
SIGNIFICANT_DIGITS = 10  # of a result that is not a whole number
ALLOWED = set("0123456789.+-*/() ")


class CalculatorError(ValueError):
    """What is wrong with an expression, as the calculator's answer says it."""


def calculate(text) -> str:
    """The value of the arithmetic expression ``text`` as text, or ``"error: <why>"``.
    Never raises."""
    try:
        return format_number(evaluate(text))
    except CalculatorError as e:
        return f"error: {e}"


def evaluate(text) -> int | float:
    """The value of ``text`` (an int when every step is whole, else a float), or a
    :class:`CalculatorError` that says what is wrong."""
    if not isinstance(text, str):
        raise CalculatorError("not a text")
    if len(text) > MAX_LENGTH:
        raise CalculatorError(f"too long (more than {MAX_LENGTH} characters)")
    bad = next((c for c in text if c not in ALLOWED), None)
    if bad is not None:
        raise CalculatorError(f"bad character {bad!r}: only numbers, + - * / and parentheses")
    parser = _Parser(text)
    value = parser.expression(0)
    if parser.peek():
        raise CalculatorError(f"unexpected {parser.text[parser.pos]!r} at {parser.pos + 1}")
    return value


def format_number(value: int | float) -> str:
    """A result as the model reads it: a whole number without a decimal point, any other with
    at most ``SIGNIFICANT_DIGITS`` significant digits and no exponent (``0.3333333333``)."""
    if isinstance(value, int) or value.is_integer():
        return str(int(value))
    decimals = max(0, SIGNIFICANT_DIGITS - 1 - math.floor(math.log10(abs(value))))
    return f"{value:.{decimals}f}".rstrip("0").rstrip(".")


def _checked(value: int | float) -> int | float:
    if abs(value) > MAX_MAGNITUDE:
        raise CalculatorError(f"too large (more than {MAX_MAGNITUDE:.0e})")
    return value


class _Parser:
    """Reads ``text`` from ``pos``; each method parses one rule of the grammar. Spaces may stand
    between numbers and operators, not inside a number."""

    def __init__(self, text: str):
        self.text, self.pos = text, 0

    def peek(self) -> str:
        """The next character that is not a space ("" at the end), skipping the spaces before it."""
        while self.char() == " ":
            self.pos += 1
        return self.char()

    def char(self) -> str:
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def expression(self, depth: int) -> int | float:
        return self.operations(depth, ("+", "-"), self.term)

    def term(self, depth: int) -> int | float:
        return self.operations(depth, ("*", "/"), self.factor)

    def operations(self, depth: int, ops: tuple[str, str], operand) -> int | float:
        """``operand (op operand)*``, left to right: one loop for both precedence levels."""
        value = operand(depth)
        while self.peek() in ops:
            op = self.text[self.pos]
            self.pos += 1
            right = operand(depth)
            if op == "/" and right == 0:
                raise CalculatorError("division by zero")
            value = _checked(ARITHMETIC[op](value, right))
        return value

    def factor(self, depth: int) -> int | float:
        if depth > MAX_DEPTH:
            raise CalculatorError(f"too deep (more than {MAX_DEPTH} nested parentheses or signs)")
        c = self.peek()
        if c in ("+", "-") and c:
            self.pos += 1
            value = self.factor(depth + 1)
            return -value if c == "-" else value
        if c == "(":
            self.pos += 1
            value = self.expression(depth + 1)
            if self.peek() != ")":
                raise CalculatorError("a parenthesis is not closed")
            self.pos += 1
            return value
        return self.number()

    def number(self) -> int | float:
        self.peek()  # the spaces before it
        start = self.pos
        while self.char().isdigit():
            self.pos += 1
        if self.char() == "." and start < self.pos:
            self.pos += 1
            if not self.char().isdigit():
                raise CalculatorError(f"a number ends in '.' at {self.pos}")
            while self.char().isdigit():
                self.pos += 1
        if start == self.pos:
            what = (f"unexpected {self.char()!r} at {self.pos + 1}" if self.char()
                    else "incomplete expression")
            raise CalculatorError(f"{what}: a number or '(' is due")
        literal = self.text[start:self.pos]
        return _checked(float(literal) if "." in literal else int(literal))
