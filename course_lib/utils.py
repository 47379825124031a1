"""Small helpers every chapter's setup cell uses, and the conventions the config classes share."""
from __future__ import annotations

import contextlib
import dataclasses
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


def check_device(device: str) -> str:
    """``device`` if this machine has it, else a ValueError that says what it does have."""
    if device not in ("cpu", "cuda", "mps"):
        raise ValueError(f"unknown device {device!r}: choose cpu, cuda or mps")
    if not device_available(device):
        have = [d for d in ("cuda", "mps", "cpu") if device_available(d)]
        raise ValueError(f"device {device!r} is not available on this machine (available: {', '.join(have)}); "
                         f"leave --device out to use {pick_device()}")
    return device


# --- config dataclasses ------------------------------------------------------------------------


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


def apply_overrides(config, overrides: dict[str, str], forbidden: dict[str, str] | None = None):
    """A copy of ``config`` with ``{field: text}`` applied, each text parsed to the field's type;
    the copy goes through the config's validation. ``forbidden`` maps fields that may not be
    set here to the reason why."""
    types = field_types(type(config))
    values = {}
    for key, text in overrides.items():
        if forbidden and key in forbidden:
            raise ValueError(f"{key} cannot be set: {forbidden[key]}")
        values[key] = parse_value(text, types[key], key)
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
