"""Checkpoints: written atomically, loaded safely (``weights_only=True``), checked against
the config they are loaded into."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

import torch

FORMAT = "course_lib-checkpoint-v1"


class CheckpointError(ValueError):
    """A checkpoint exists but cannot be used: corrupt, truncated, or from another config."""


def save_checkpoint(path: str | Path, payload: dict) -> Path:
    """Write ``payload`` to ``path`` atomically: a crash mid-write leaves the old file intact.

    The bytes go to a temporary file in the same folder, are flushed to disk, and
    the file is then renamed over ``path`` (a rename within a folder is atomic).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save({"format": FORMAT, **payload}, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict:
    """Load a checkpoint written by :func:`save_checkpoint` (tensors and plain data only)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(
            f"no checkpoint at {path}: check the path, or train one first with "
            "`python -m course_lib train --preset shakespeare-char-cpu --out runs/cpu`"
        )
    try:
        ckpt = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as e:  # truncated zip, random bytes, pickled objects ...
        raise CheckpointError(
            f"{path} is not a readable course_lib checkpoint ({type(e).__name__}: {str(e)[:200]}). "
            "It is probably truncated or corrupt; delete it and train again, or load an earlier checkpoint."
        ) from e
    if not isinstance(ckpt, dict) or ckpt.get("format") != FORMAT:
        found = ckpt.get("format") if isinstance(ckpt, dict) else type(ckpt).__name__
        raise CheckpointError(
            f"{path} is not a course_lib checkpoint (format {found!r}, expected {FORMAT!r}); "
            "save checkpoints with course_lib.Trainer or course_lib.checkpoint.save_checkpoint"
        )
    return ckpt


def check_model_config(ckpt: dict, config, path: str | Path = "checkpoint") -> None:
    """Raise :class:`CheckpointError` naming every field where the checkpoint's model config
    differs from ``config``."""
    saved = ckpt.get("model_config", {})
    wanted = config.to_dict()
    diffs = [f"{k}: checkpoint {saved.get(k)!r}, model {wanted[k]!r}" for k in wanted if saved.get(k) != wanted[k]]
    if diffs:
        raise CheckpointError(
            f"{path} was trained with a different model config ({'; '.join(diffs)}). Build the model "
            "from the checkpoint's own config (course_lib.checkpoint.load_model) or load a matching checkpoint."
        )


def load_model(path: str | Path, device: str | torch.device = "cpu"):
    """Rebuild the GPT stored in a checkpoint. Returns ``(model, checkpoint)``; the model is in eval mode."""
    from .model import GPT, GPTConfig

    ckpt = load_checkpoint(path, map_location=device)
    try:
        config = GPTConfig.from_dict(ckpt["model_config"])
        model = GPT(config)
        model.load_state_dict(ckpt["model"])
    except (KeyError, RuntimeError, TypeError) as e:
        raise CheckpointError(f"{path} does not hold a usable model ({type(e).__name__}: {str(e)[:200]})") from e
    return model.to(device).eval(), ckpt
