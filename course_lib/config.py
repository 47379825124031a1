"""The conventions every config class shares, in one place: a ``Rule`` table per class checked in
``__post_init__`` (:func:`check_fields`), ``to_dict``/``from_dict`` (:func:`config_to_dict`,
:func:`config_from_dict`, which refuses unknown keys), values parsed from text
(:func:`parse_value`), overrides (:func:`apply_overrides`; on a resumed run
:func:`apply_resume_overrides`, which keeps what the checkpoint holds) and the command line's
``--set KEY=VALUE`` grammar (:func:`settings_from_pairs`, :func:`split_settings`)::

    @dataclass
    class MyConfig:
        n_layer: int = 4
        def __post_init__(self):
            check_fields(self, {"n_layer": Rule(int, 1)})

    apply_overrides(MyConfig(), settings_from_pairs(["n_layer=6"]))  # MyConfig(n_layer=6)
"""
from __future__ import annotations

import dataclasses
import math
import numbers
import typing

import numpy as np

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
        kind = {int: "an integer", float: "a finite number",
                bool: "True or False"}.get(self.kind, "a string")
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
        low_ok = self.low is None or (value > self.low if self.bounds[0] == "("
                                      else value >= self.low)
        high_ok = self.high is None or (value < self.high if self.bounds[1] == ")"
                                        else value <= self.high)
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
            raise TypeError(f"{cls}.{name} must be {rule.describe()}, got {value!r} of type "
                            f"{type(value).__name__}")
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
        raise ValueError(f"{key}={text!r}: expected a value of type "
                         f"{getattr(kind, '__name__', kind)}") from None


def apply_overrides(config, overrides: dict, forbidden: dict[str, str] | None = None):
    """A copy of ``config`` with ``{field: value}`` applied: a text (from ``--set KEY=VALUE``) is
    parsed to the field's type, any other value is taken as it is; the copy goes through the
    config's validation. ``forbidden`` maps fields that may not be set here to the reason why."""
    types = field_types(type(config))
    values = {}
    for key, value in overrides.items():
        if forbidden and key in forbidden:
            raise ValueError(f"{key} cannot be set: {forbidden[key]}")
        if key not in types:
            raise ValueError(f"--set {key}: unknown setting; the settings here: {', '.join(types)}")
        values[key] = parse_value(value, types[key], key) if isinstance(value, str) else value
    return dataclasses.replace(config, **values)


def apply_resume_overrides(stored, overrides: dict, may_change, source,
                           kept: str = "every other setting",
                           forbidden: dict[str, str] | None = None):
    """:func:`apply_overrides` for a resumed run: ``stored`` is the checkpoint's config (``source``
    names the checkpoint), and a key outside ``may_change`` may be given only with the stored
    value (a resume command repeats the command that started the run). Any other value would
    silently rewrite what the checkpoint holds or records (its data split, its pairs, its model),
    so it is refused in one line naming the key, the stored value and the fix; ``kept`` says what
    the resumed run keeps (e.g. "its model")."""
    # parsed and checked as a new value would be
    updated = apply_overrides(stored, overrides, forbidden)
    for key, value in overrides.items():
        if key not in may_change and getattr(updated, key) != getattr(stored, key):
            raise ValueError(f"--set {key}={value}: {source} was trained with "
                             f"{key}={getattr(stored, key)!r}, and a resumed run keeps {kept}; "
                             f"leave --set {key} out to continue it, or start a new run with it in "
                             "another --out")
    return updated


def config_to_dict(config) -> dict:
    """A config dataclass as a plain dict (what checkpoints store)."""
    return dataclasses.asdict(config)


# --- the command line's --set KEY=VALUE -----------------------------------------------------------


def settings_from_pairs(pairs: list[str]) -> dict[str, str]:
    """``["n_layer=6", "learning_rate=3e-4"]`` (the command line's ``--set``) -> ``{"n_layer": "6",
    "learning_rate": "3e-4"}``; a pair without ``=`` or without a key is an error."""
    settings = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--set {pair!r}: write KEY=VALUE, e.g. --set n_layer=6")
        settings[key.strip()] = value.strip()
    return settings


def split_settings(settings: dict, model_config, train_config) -> tuple[dict, dict]:
    """``{"n_layer": 6, "learning_rate": "3e-4"}`` -> (model fields, training fields). An unknown
    key is an error that lists every valid one."""
    model_keys = [f.name for f in dataclasses.fields(model_config)]
    train_keys = [f.name for f in dataclasses.fields(train_config)]
    model, train = {}, {}
    for key, value in settings.items():
        if key in model_keys:
            model[key] = value
        elif key in train_keys:
            train[key] = value
        else:
            raise ValueError(f"--set {key}: unknown setting. Model settings: "
                             f"{', '.join(model_keys)}. "
                             f"Training settings: {', '.join(train_keys)}")
    return model, train
