"""Comparing a chapter's printed outputs within a tolerance, on a host that cannot reproduce the
reference bitwise (see :mod:`course_lib.tools.op_fingerprints`).

A printed output is split into its numbers and the text around them. Two outputs agree when the
text around the numbers is the same (runs of white space count as one space, so a column that
widens by a digit still agrees) and every number is within ``atol + rtol * |stored|`` of the stored
one. So a loss printed as 2.0679 on the reference and 2.0689 here agrees at the default ``rtol``,
while a chapter whose code is wrong (another loss curve, another shape, a missing line) still fails.

A chapter declares its tolerance in its notebook metadata, a cell in its cell metadata, under the
key ``numerics``:

- ``{"rtol": 0.02, "atol": 0.001}``: the tolerance of its numbers with a decimal point or an
exponent
  (the cell's overrides the chapter's, which overrides :data:`DEFAULT`). Whole numbers (steps,
  sizes, shapes, counts) must match exactly, unless ``"counts": true`` lets them move within the
  tolerance too (a count of right answers after training);
- ``{"host_dependent": "why"}``: the cell's output is not compared on another host, only run, for
  the reason given: text sampled from a trained model, a count of right answers after training, a
  hash of trained weights; anything a last-bit difference changes by more than a tolerance says.

On the reference host none of this applies: every output is compared bitwise.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

# A number as a cell prints it: a sign, digits with optional thousands separators, a fraction,
# an exponent ("-1.2e-05", "12,345", ".5", "3").
NUMBER = re.compile(r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)?(?:\.\d+)?(?:[eE][-+]?\d+)?")
_SPACES = re.compile(r"\s+")


@dataclass(frozen=True)
class Tolerance:
    """How far a printed number may move on another host: ``atol + rtol * |stored|``."""
    rtol: float = 0.0
    atol: float = 0.0
    counts: bool = False  # whole numbers move within the tolerance too (else they match exactly)
    host_dependent: str | None = None  # the reason the output is not compared at all

    def __post_init__(self):
        if self.rtol < 0 or self.atol < 0:
            raise ValueError(f"a tolerance is not negative: rtol={self.rtol}, atol={self.atol}")


# Last-bit differences after a few hundred training steps move printed losses in their 3rd or 4th
# decimal (2.0679 on the reference, 2.0689 on an Intel Xeon): 2% and 0.002 leave room for that and
# for a tail of outliers, and still fail a loss curve that is wrong.
DEFAULT = Tolerance(rtol=0.02, atol=0.002)


def declared(notebook_metadata: dict, cell_metadata: dict) -> Tolerance:
    """The tolerance that applies to a cell: its own ``numerics`` metadata over its chapter's over
    :data:`DEFAULT`."""
    fields = {"rtol": DEFAULT.rtol, "atol": DEFAULT.atol, "counts": False, "host_dependent": None}
    for source in (notebook_metadata.get("numerics", {}), cell_metadata.get("numerics", {})):
        unknown = set(source) - set(fields)
        if unknown:
            raise ValueError(f"unknown numerics metadata {sorted(unknown)}: use rtol, atol, counts "
                             "or host_dependent")
        fields.update(source)
    return Tolerance(**fields)


def _numbers(text: str) -> tuple[list[str], list[str]]:
    """(the text around the numbers, with white space folded; the numbers as printed)."""
    numbers, pieces, last = [], [], 0
    for match in NUMBER.finditer(text):
        if not any(ch.isdigit() for ch in match.group()):
            continue  # a lone sign, dot or "e"
        start, end = match.span()
        # a digit glued to letters is part of a word or a hash ("ch04", "b7bf3"), not a number
        if (start > 0 and text[start - 1].isalpha()) or (end < len(text) and text[end].isalpha()):
            continue
        pieces.append(text[last:start])
        numbers.append(match.group())
        last = end
    pieces.append(text[last:])
    return [_SPACES.sub(" ", piece) for piece in pieces], numbers


def _whole(number: str) -> bool:
    return not any(ch in number for ch in ".eE")


def _value(number: str) -> float:
    return float(number.replace(",", ""))


def disagreement(stored: str, computed: str, tolerance: Tolerance) -> str | None:
    """Why ``computed`` does not agree with ``stored`` within ``tolerance``, or None if it does."""
    if tolerance.host_dependent is not None or stored == computed:
        return None
    stored_text, stored_numbers = _numbers(stored)
    computed_text, computed_numbers = _numbers(computed)
    if stored_text != computed_text:
        return "the text differs beyond its numbers"
    for a, b in zip(stored_numbers, computed_numbers):
        if _whole(a) and _whole(b) and not tolerance.counts:
            if _value(a) != _value(b):
                return (f"the whole number {b} is not the stored {a} (a cell declares \"counts\" "
                        "to let counts move)")
        elif abs(_value(b) - _value(a)) > tolerance.atol + tolerance.rtol * abs(_value(a)):
            return (f"{b} is not within rtol={tolerance.rtol:g}, atol={tolerance.atol:g} "
                    f"of the stored {a}")
    return None


def _flatten(outputs, skip) -> dict[str, list]:
    """A cell's outputs as nbval compares them: every value of every output under its key (MIME
    types flattened out of "data"), in order, leaving out the keys in ``skip``."""
    values = {}
    for output in outputs:
        for key, value in output.items():
            if key in skip:
                continue
            for k, v in (value.items() if key == "data" else [(key, value)]):
                if k not in skip:
                    values.setdefault(k, []).append(v)
    return values


def cell_disagreement(stored, computed, tolerance: Tolerance, skip=(),
                      sanitize=lambda s: s) -> str | None:
    """Why a cell's ``computed`` outputs do not agree with its ``stored`` ones within ``tolerance``
    (each a list of outputs with their streams merged, as nbval compares them; ``skip`` and
    ``sanitize`` are nbval's), or None if they do."""
    if tolerance.host_dependent is not None:
        return None
    stored, computed = _flatten(stored, skip), _flatten(computed, skip)
    if stored.keys() != computed.keys() or any(len(stored[k]) != len(computed[k]) for k in stored):
        return (f"other kinds or numbers of outputs: {sorted(computed)} where {sorted(stored)} are "
                "stored")
    for key in stored:
        for a, b in zip(stored[key], computed[key]):
            a, b = sanitize(a), sanitize(b)
            why = disagreement(a, b, tolerance) if isinstance(a, str) and isinstance(b, str) else (
                None if a == b else "not text, and not equal")
            if why is not None:
                return f"{key}: {why}"
    return None
