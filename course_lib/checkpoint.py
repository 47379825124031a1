"""The one checkpoint format: what a run stores, written atomically, loaded safely.

A checkpoint is a dict saved with ``torch.save`` and loaded with ``weights_only=True``
(tensors and plain data only, so loading one cannot run code)::

    format        "course_lib-checkpoint"
    version       FORMAT_VERSION (an int; another version is refused with a clear error)
    model_kind    "gpt", "seq2seq", ...: the registry name of the model's class
    model_config  the model config as a dict
    model         the model's state_dict
    tokenizer     the tokenizer's to_dict() (its "type" picks the class), or None
    train_config  the TrainConfig as a dict, or None
    optimizer     the optimizer's state_dict, or None
    step          optimizer steps taken
    history       the Trainer's loss history
    rng           the random-number-generator states needed to continue exactly
    trained_on    what made the run, or None: {"command": "train", "preset": ..., "text": file
                  name or None, "text_sha256": ...}; {"command": "train-dates", ...};
                  {"command": "finetune", "task": "dates", "base_checkpoint": path,
                  "base_sha256": ...} (version 3; version 2 files, which lack it, still load)

Model classes join the registry of :mod:`course_lib.registry` with
``@register_model("name", ConfigClass)``; tokenizers have their own registry in
:mod:`course_lib.tokenizers`. So a checkpoint of any registered model and tokenizer comes
back with :func:`load_model` and :func:`load_tokenizer`, and nothing else in course_lib needs
to know which classes exist. Every field above is built and read here, ``rng`` included
(:func:`rng_state`, :func:`restore_rng`). The folder a run writes into, and its lock, are
:mod:`course_lib.run_folder`'s.
"""
from __future__ import annotations

import os
import re
import tempfile
import warnings
from dataclasses import asdict, is_dataclass
from pathlib import Path

import torch
import torch.nn as nn

from .registry import MODELS, kind_of, lookup
from .tokenizers import tokenizer_from_dict
from .utils import TooLargeError

FORMAT = "course_lib-checkpoint"
FORMAT_VERSION = 3
READABLE_VERSIONS = (2, 3)  # version 3 added "trained_on"; a version 2 file loads with it None
CHECKPOINT_NAME = "ckpt.pt"  # the file a run writes in its output folder


class CheckpointError(ValueError):
    """A checkpoint exists but cannot be used: corrupt, truncated, of another version or config."""


def unwrap(model: nn.Module) -> nn.Module:
    """The model inside a DistributedDataParallel or torch.compile wrapper."""
    while True:
        inner = getattr(model, "module", None) or getattr(model, "_orig_mod", None)
        if not isinstance(inner, nn.Module):
            return model
        model = inner


def model_kind(model: nn.Module) -> str:
    """The registered kind a checkpoint stores ``model`` (or the model inside its wrapper) as."""
    try:
        return kind_of(unwrap(model))
    except ValueError as e:
        raise CheckpointError(f"{e} to store it in checkpoints") from None


# --- writing ---------------------------------------------------------------------------------


def write_atomic(path: str | Path, obj) -> Path:
    """``torch.save(obj)`` to ``path`` atomically: a crash mid-write leaves the old file intact.

    The bytes go to a temporary file in the same folder, are flushed to disk, and the file
    is then renamed over ``path`` (a rename within one folder is atomic).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def save_checkpoint(path: str | Path, model: nn.Module, *, tokenizer=None, train_config=None,
                    optimizer=None, step: int = 0, history: dict | None = None,
                    batch_streams: list | None = None, trained_on: dict | None = None) -> Path:
    """Write a checkpoint of ``model`` (and, for a training run, everything needed to resume it:
    ``batch_streams`` are the states of the run's batch generators, one per micro-batch)."""
    model = unwrap(model)
    payload = {
        "format": FORMAT,
        "version": FORMAT_VERSION,
        "model_kind": model_kind(model),
        "model_config": model.config.to_dict(),
        "model": model.state_dict(),
        "tokenizer": tokenizer.to_dict() if tokenizer is not None else None,
        "train_config": asdict(train_config) if is_dataclass(train_config) else train_config,
        "optimizer": optimizer.state_dict() if optimizer is not None else None,
        "step": int(step),
        "history": history or {},
        "rng": rng_state(batch_streams) if batch_streams is not None else None,
        "trained_on": trained_on,
    }
    return write_atomic(path, payload)


def rng_state(batch_streams: list[torch.Tensor]) -> dict:
    """The random states a run needs to continue exactly: torch's global CPU (and CUDA) state,
    and the state of each micro-batch's batch generator (``torch.Generator.get_state()``, in
    micro-batch order). The first is stored as ``generator``; with more than one (gradient
    accumulation), all of them as ``streams`` too."""
    state = {"torch": torch.get_rng_state(),
             "generator": batch_streams[0] if batch_streams else None,
             "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else []}
    if len(batch_streams) > 1:
        state["streams"] = list(batch_streams)
    return state


def restore_rng(rng: dict) -> list:
    """Set torch's global random state (CPU, and CUDA where there is one) as :func:`rng_state`
    saved it, and return the saved batch-generator states, one per micro-batch (``[None]``
    when the checkpoint has none)."""
    torch.set_rng_state(rng["torch"])
    if rng.get("cuda") and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(rng["cuda"])
    return list(rng.get("streams") or [rng.get("generator")])


# --- reading ---------------------------------------------------------------------------------


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict:
    """Load and check a checkpoint written by :func:`save_checkpoint` (tensors and plain data
    only)."""
    path = Path(path)
    if path.is_dir():
        inside = path / CHECKPOINT_NAME
        raise CheckpointError(f"{path} is a folder, not a checkpoint file: "
                              + (f"give the checkpoint inside it, {inside}" if inside.exists() else
                                 f"it holds no {CHECKPOINT_NAME}; give the path of a checkpoint "
                                 "file"))
    if not path.exists():
        raise FileNotFoundError(
            f"no checkpoint at {path}: check the path, or train one first (`python -m course_lib "
            "train` for a GPT, `train-dates` for an encoder-decoder, `finetune` to fine-tune a GPT)"
        )
    if not path.is_file():  # a device such as /dev/zero, a pipe, a socket: never a checkpoint
        raise CheckpointError(f"{path} is not a regular file (a device, pipe or socket), so it is "
                              "not a checkpoint: give the path of a ckpt.pt file")
    try:
        # e.g. torch's note on a pickle protocol: the error below says it all
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ckpt = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as e:  # truncated zip, random bytes, pickled objects ...
        raise CheckpointError(unreadable(path, e)) from None
    fmt = ckpt.get("format") if isinstance(ckpt, dict) else type(ckpt).__name__
    if fmt == "course_lib-checkpoint-v1":  # the first format named its version in the string
        fmt, version = FORMAT, 1
    else:
        version = ckpt.get("version") if isinstance(ckpt, dict) else None
    if fmt != FORMAT:
        raise CheckpointError(
            f"{path} is not a course_lib checkpoint (format {fmt!r}, expected {FORMAT!r}); "
            "save checkpoints with course_lib.Trainer or course_lib.checkpoint.save_checkpoint"
        )
    if version not in READABLE_VERSIONS:
        raise CheckpointError(
            f"{path} is a course_lib checkpoint of format version {version}, and this course_lib "
            f"reads version {FORMAT_VERSION}. Train the run again with this version, or load the "
            f"file with the course_lib release that wrote it{' (0.1.x)' if version == 1 else ''}."
        )
    ckpt.setdefault("trained_on", None)
    return ckpt


def unreadable(path: Path, error: Exception) -> str:
    """Why ``torch.load(path, weights_only=True)`` failed, in one sentence for a person: the file
    is not a checkpoint, or holds code and was refused, or is truncated."""
    with open(path, "rb") as f:
        head = f.read(4)
    size = path.stat().st_size
    found = re.search(r"GLOBAL ([\w.]+)", str(error))
    # Code is named only where there is some: a reference to a Python function, or a pickle (which
    # starts with its PROTO opcode, 0x80) that torch's safe loader refused. Random bytes are not
    # code.
    if found or ("Weights only load failed" in str(error) and head[:1] == b"\x80"):
        what = f"a reference to the Python function {found.group(1)}" if found else "Python objects"
        return (f"{path} was refused: it holds {what}, which loading could run as code, and "
                "course_lib loads only tensors and plain data. Load only checkpoints written by "
                "course_lib (Trainer or save_checkpoint)")
    if size == 0:
        return (f"{path} is empty (0 bytes), not a checkpoint: a save that never finished? Train "
                "again or use another one")
    if head != b"PK\x03\x04":  # torch.save writes a zip archive
        return (f"{path} is not a checkpoint: torch.save writes a zip archive, and this file "
                f"starts with {head!r}. Give the ckpt.pt that `train` wrote")
    return (f"{path} is truncated or corrupt: its zip archive cannot be read ({size:,} bytes). "
            "Train again, or use an earlier checkpoint")


def build_model(ckpt: dict, path: str | Path = "checkpoint") -> nn.Module:
    """A freshly initialised model of the checkpoint's kind and config (weights not loaded). The
    sizes come from a file: a kind whose class has ``check_fits(config)`` (a GPT) is first checked
    against this machine's memory, so a config too large is refused in one line before
    allocating."""
    kind = ckpt.get("model_kind")
    try:
        cls = lookup(kind)
    except ValueError:
        raise CheckpointError(f"{path} holds a model of kind {kind!r}, which this course_lib does "
                              f"not know (known: {', '.join(sorted(MODELS))})") from None
    try:
        config = cls.config_class.from_dict(ckpt["model_config"])
        if hasattr(cls, "check_fits"):
            cls.check_fits(config)
        return cls(config)
    except CheckpointError:
        # a model that loads more files (a LoRA model's base) says what is wrong itself
        raise
    except TooLargeError as e:  # checked before allocating (see utils.check_fits_in_memory)
        raise CheckpointError(f"{path} holds a {kind} model too large for this machine: {e}, or a "
                              "damaged config; load it on a larger machine, or use another "
                              "checkpoint") from None
    except (MemoryError, RuntimeError) as e:
        # the allocator's own refusal, when the machine has less free
        if not isinstance(e, MemoryError) and "allocate" not in str(e):
            raise
        raise CheckpointError(f"{path} holds a {kind} model too large for the free memory of this "
                              f"machine ({one_line(e)}): close other programs, or load it on a "
                              "larger machine") from None
    except (KeyError, TypeError, ValueError) as e:
        raise CheckpointError(f"{path} holds an unusable {kind} config ({type(e).__name__}: "
                              f"{str(e)[:200]})") from e


def check_model_config(ckpt: dict, model: nn.Module, path: str | Path = "checkpoint") -> None:
    """Raise :class:`CheckpointError` naming every field where the checkpoint's model differs
    from ``model`` (kind or config)."""
    model = unwrap(model)
    if ckpt.get("model_kind") != model_kind(model):
        raise CheckpointError(f"{path} holds a {ckpt.get('model_kind')!r} model, not a "
                              f"{model_kind(model)!r} one")
    saved, wanted = ckpt.get("model_config") or {}, model.config.to_dict()
    try:  # fields a newer course_lib added take their defaults, as when the checkpoint is built
        saved = type(model.config).from_dict(saved).to_dict()
    except (KeyError, TypeError, ValueError):
        pass  # compared as stored: the differences are named below
    diffs = [f"{k}: checkpoint {saved.get(k)!r}, model {wanted[k]!r}" for k in wanted
             if saved.get(k) != wanted[k]]
    if diffs:
        raise CheckpointError(
            f"{path} was trained with a different model config ({'; '.join(diffs)}). Build the "
            "model from the checkpoint's own config (course_lib.checkpoint.load_model) or load a "
            "matching checkpoint."
        )


def unwrapped_state_dict(state: dict) -> dict:
    """A state dict without the ``module.`` (DistributedDataParallel) and ``_orig_mod.``
    (torch.compile) prefixes that a wrapped model's ``state_dict()`` carries. Our checkpoints
    are always saved unwrapped; this lets one saved by other code from a wrapped model load too."""
    prefix = next((p for p in ("module.", "_orig_mod.") if state
                   and all(k.startswith(p) for k in state)), None)
    if prefix is None:
        return state
    return unwrapped_state_dict({k[len(prefix):]: v for k, v in state.items()})


def load_weights(model: nn.Module, ckpt: dict, path: str | Path = "checkpoint") -> nn.Module:
    """Load a checkpoint's weights into ``model``, wrapped (DDP, torch.compile) or not."""
    check_model_config(ckpt, model, path)
    state = ckpt.get("model")
    if not isinstance(state, dict) or not all(isinstance(t, torch.Tensor) for t in state.values()):
        raise CheckpointError(f"{path} holds no weights (its 'model' entry is not a state dict of "
                              "tensors): the checkpoint is damaged; train again or use another "
                              "checkpoint")
    state = unwrapped_state_dict(state)
    check_state_matches(unwrap(model), state, path)
    try:
        unwrap(model).load_state_dict(state)
    except (KeyError, RuntimeError) as e:
        raise CheckpointError(f"{path} does not hold usable weights ({type(e).__name__}: "
                              f"{one_line(e)})") from e
    # e.g. log-probabilities of 0
    minus_inf_allowed = getattr(unwrap(model), "minus_inf_allowed", ())
    broken = [name for name, t in state.items() if t.is_floating_point() and not
              (torch.isfinite(t) | ((t == float("-inf")) & (name in minus_inf_allowed))).all()]
    if broken:
        raise CheckpointError(f"{path} holds weights that are not finite numbers (NaN or inf, in "
                              f"{broken[0]}): the run had diverged when it was saved; use an "
                              "earlier checkpoint, or train again with a smaller learning_rate")
    return model


def one_line(error: Exception, limit: int = 200) -> str:
    """An exception's text on one line (torch's often span several), cut at ``limit`` characters."""
    text = " ".join(str(error).split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def check_state_matches(model: nn.Module, state: dict, path: str | Path = "checkpoint") -> None:
    """A :class:`CheckpointError` in one line naming the tensors a checkpoint's weights lack, has
    too many of, or holds in another shape than its own config builds."""
    expected = {name: tuple(t.shape) for name, t in model.state_dict().items()}
    missing = [name for name in expected if name not in state]
    extra = [name for name in state if name not in expected]
    shapes = [f"{name} is {tuple(state[name].shape)}, its config builds {expected[name]}"
              for name in expected if name in state and tuple(state[name].shape) != expected[name]]
    problems = []
    if missing:
        problems.append(f"{len(missing)} tensor(s) missing "
                        f"({', '.join(missing[:3])}{', ...' if len(missing) > 3 else ''})")
    if extra:
        problems.append(f"{len(extra)} unexpected tensor(s) "
                        f"({', '.join(extra[:3])}{', ...' if len(extra) > 3 else ''})")
    if shapes:
        problems.append(f"{len(shapes)} of another shape "
                        f"({'; '.join(shapes[:2])}{'; ...' if len(shapes) > 2 else ''})")
    if problems:
        raise CheckpointError(f"{path} does not hold usable weights: {'; '.join(problems)}. Its "
                              "weights and its model_config disagree, so the file is damaged or "
                              "was edited; train again or use another checkpoint")


def load_model(path: str | Path, device: str | torch.device = "cpu"):
    """Rebuild the model stored in a checkpoint, whatever its kind. Returns ``(model, checkpoint)``;
    the model is in eval mode on ``device``."""
    ckpt = load_checkpoint(path, map_location=device)
    model = load_weights(build_model(ckpt, path), ckpt, path)
    return model.to(device).eval(), ckpt


def load_tokenizer(ckpt: dict, path: str | Path = "checkpoint"):
    """The tokenizer stored in a checkpoint, whatever its type."""
    if not ckpt.get("tokenizer"):
        raise CheckpointError(f"{path} stores no tokenizer, so its tokens cannot be turned into "
                              "text; pass tokenizer=... to the Trainer that writes it")
    try:
        return tokenizer_from_dict(ckpt["tokenizer"])
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        kind = (ckpt["tokenizer"].get("type") if isinstance(ckpt["tokenizer"], dict)
                else type(ckpt["tokenizer"]).__name__)
        raise CheckpointError(f"{path} holds an unusable tokenizer (type {kind!r}; "
                              f"{type(e).__name__}: {one_line(e, 120)}): the checkpoint is damaged "
                              "or was edited, so its tokens cannot be turned into text; train "
                              "again or use another checkpoint") from e
