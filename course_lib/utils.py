"""Small helpers every chapter's setup cell uses, and the conventions the config classes share."""
from __future__ import annotations

import contextlib
import dataclasses
import math
import numbers
import os
import random
import typing

import numpy as np
import torch

DEFAULT_SEED = 1337  # the seed of every chapter, preset and command-line run
IGNORE_INDEX = -100  # a target equal to this is left out of the loss (PyTorch's default)


def seed_everything(seed: int = DEFAULT_SEED) -> None:
    """Seed Python, NumPy and PyTorch (CPU and GPU) so that a chapter reproduces its outputs."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)  # also seeds CUDA


def device_available(device: str) -> bool:
    if device == "cpu":
        return True
    if device == "cuda":
        return torch.cuda.is_available()
    if device == "mps":
        return getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available()
    return False


def pick_device() -> str:
    """'cuda' when a GPU is available (e.g. on Colab), else 'mps' on Apple silicon, else 'cpu'."""
    return next(d for d in ("cuda", "mps", "cpu") if device_available(d))


def check_device(device: str | None) -> str:
    """``device`` if this machine has it, else a ValueError that says what it does have; with no
    ``device`` (None or ""), the best one this machine has (:func:`pick_device`)."""
    if not device:
        return pick_device()
    if device not in ("cpu", "cuda", "mps"):
        raise ValueError(f"unknown device {device!r}: choose cpu, cuda or mps")
    if not device_available(device):
        have = [d for d in ("cuda", "mps", "cpu") if device_available(d)]
        raise ValueError(f"device {device!r} is not available on this machine (available: {', '.join(have)}); "
                         f"leave --device out to use {pick_device()}")
    return device


MAX_SEED = 2**63 - 1  # torch.manual_seed takes a 64-bit integer


def check_seed(seed) -> int:
    """``seed`` if it is an integer torch can seed with, else a ValueError that gives the range."""
    if not isinstance(seed, numbers.Integral) or isinstance(seed, bool) or not 0 <= seed <= MAX_SEED:
        raise ValueError(f"seed must be an integer in [0, {MAX_SEED}] (2**63 - 1), got {seed!r}")
    return int(seed)


class TooLargeError(ValueError):
    """A model (or other tensor) larger than this machine's memory, refused before allocating."""


def physical_memory() -> int | None:
    """This machine's memory in bytes (None where the OS does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return None


def check_fits_in_memory(n_numbers: int, what: str, fix: str, bytes_per_number: int = 4) -> None:
    """A :class:`TooLargeError` naming ``what`` and ``fix`` when ``n_numbers`` float32 numbers
    need more than this machine's memory: said before allocating, instead of the allocator's
    traceback or the out-of-memory killer."""
    memory = physical_memory()
    needed = n_numbers * bytes_per_number
    if memory is not None and needed > memory:
        raise TooLargeError(f"{what} needs at least {n_numbers:,} numbers ({needed / 2**30:,.1f} GiB in float32), more "
                            f"than this machine's memory ({memory / 2**30:,.1f} GiB): {fix}")


# --- config dataclasses ------------------------------------------------------------------------


class Rule(typing.NamedTuple):
    """What one config field may hold: one row of a config's ``RULES`` table.

    ``kind`` is int, float, bool or str; ``low``/``high`` bound a number (None: unbounded),
    ``bounds`` says which ends are included ("[]", "[)", "(]" or "()"), ``choices`` lists the
    values a str may take. A field annotated ``X | None`` may also be None.
    """
    kind: type
    low: float | None = None
    high: float | None = None
    bounds: str = "[]"
    choices: tuple = ()

    def describe(self) -> str:
        if self.choices:
            return "one of " + ", ".join(map(repr, self.choices))
        kind = {int: "an integer", float: "a finite number", bool: "True or False"}.get(self.kind, "a string")
        if self.low is not None and self.high is not None:
            return f"{kind} in {self.bounds[0]}{self.low:g}, {self.high:g}{self.bounds[1]}"
        if self.low is not None:
            return f"{kind} {'>' if self.bounds[0] == '(' else '>='} {self.low:g}"
        if self.high is not None:
            return f"{kind} {'<' if self.bounds[1] == ')' else '<='} {self.high:g}"
        return kind

    def holds(self, value) -> bool:
        if self.choices:
            return value in self.choices
        if self.kind is float and not math.isfinite(value):
            return False
        low_ok = self.low is None or (value > self.low if self.bounds[0] == "(" else value >= self.low)
        high_ok = self.high is None or (value < self.high if self.bounds[1] == ")" else value <= self.high)
        return low_ok and high_ok


def _as_kind(value, kind: type):
    """``value`` as a plain ``kind``, or None where it is not one. Integral NumPy and torch
    scalars count as int (they are converted); an int counts as a float; a bool is only a bool."""
    if kind is bool:
        return bool(value) if isinstance(value, (bool, np.bool_)) else None
    if isinstance(value, (bool, np.bool_)):
        return None  # True is an int to Python, never a layer count or a rate here
    if kind is int:
        return int(value) if isinstance(value, numbers.Integral) else None
    if kind is float:
        return float(value) if isinstance(value, numbers.Real) else None
    return value if isinstance(value, kind) else None


def check_fields(config, rules: dict[str, Rule]) -> None:
    """Validate a config dataclass against its ``rules`` table, in ``__post_init__``: every
    field of the table must have its rule's type (converted to the plain Python type, so a
    ``numpy.int64`` is stored as an ``int``) and lie in its range. A wrong type is a
    TypeError, a wrong value a ValueError; both name the field, the rule and the value."""
    cls = type(config).__name__
    hints = field_types(type(config))
    for name, rule in rules.items():
        value = getattr(config, name)
        if value is None and type(None) in typing.get_args(hints[name]):
            continue
        plain = _as_kind(value, rule.kind)
        if plain is None:
            raise TypeError(f"{cls}.{name} must be {rule.describe()}, got {value!r} of type {type(value).__name__}")
        if not rule.holds(plain):
            raise ValueError(f"{cls}.{name} must be {rule.describe()}, got {value!r}")
        object.__setattr__(config, name, plain)


def config_from_dict(cls, d: dict):
    """``cls(**d)`` for a config dataclass, refusing keys it does not have (a typo must not be
    silently dropped). The dataclass's own ``__post_init__`` validates the values."""
    known = [f.name for f in dataclasses.fields(cls)]
    unknown = sorted(set(d) - set(known))
    if unknown:
        raise ValueError(f"unknown {cls.__name__} field(s) {', '.join(map(repr, unknown))}; "
                         f"valid fields: {', '.join(known)}")
    return cls(**d)


def field_types(cls) -> dict[str, object]:
    return typing.get_type_hints(cls)


def parse_value(text: str, annotation, key: str):
    """Turn the text of ``key=text`` into the type ``annotation`` (int, float, bool, str, or one
    of them | None)."""
    args = typing.get_args(annotation)
    options = [a for a in args if a is not type(None)] if args else [annotation]
    if args and type(None) in args and text.lower() in ("none", "null"):
        return None
    kind = options[0]
    try:
        if kind is bool:
            if text.lower() in ("true", "1", "yes", "on"):
                return True
            if text.lower() in ("false", "0", "no", "off"):
                return False
            raise ValueError
        if kind is int:
            return int(text)
        if kind is float:
            return float(text)
        return str(text)
    except ValueError:
        raise ValueError(f"{key}={text!r}: expected a value of type {getattr(kind, '__name__', kind)}") from None


def apply_overrides(config, overrides: dict, forbidden: dict[str, str] | None = None):
    """A copy of ``config`` with ``{field: value}`` applied: a text (from ``--set KEY=VALUE``) is
    parsed to the field's type, any other value is taken as it is; the copy goes through the
    config's validation. ``forbidden`` maps fields that may not be set here to the reason why."""
    types = field_types(type(config))
    values = {}
    for key, value in overrides.items():
        if forbidden and key in forbidden:
            raise ValueError(f"{key} cannot be set: {forbidden[key]}")
        values[key] = parse_value(value, types[key], key) if isinstance(value, str) else value
    return dataclasses.replace(config, **values)


@contextlib.contextmanager
def stderr_silenced():
    """Send whatever is written to the process's standard error (file descriptor 2) to /dev/null
    while the block runs. PyTorch's profiler library writes "profiler_start" and "profiler_stop"
    lines there from C++, where Python's ``sys.stderr`` cannot catch them (chapter 12)."""
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
