"""A GPT checkpoint quantized into a ``gpt-int4`` checkpoint (``python -m course_lib quantize``),
and the text a checkpoint was trained on (what GPTQ calibrates on and quantization-aware training
reads).

    quantize_checkpoint("runs/cpu/ckpt.pt", "runs/cpu/int4.pt", method="gptq", group_size=32)

The input is a GPT (``train``, a full ``finetune``, the shipped model) or a ``gpt-qat`` run
(``python -m course_lib qat``: its trained float weights, rounded with the settings it was trained
for). Every linear layer is quantized to 4 bits per group by round-to-nearest or by GPTQ
(calibrated on random windows of the training split of the checkpoint's text), the embedding
tables as ``embeddings`` says (int8 per row by default, fp16, or "same": 4 bits like the rest),
and the result is written atomically to a new file, never over the input.
"""
from __future__ import annotations

import hashlib
from pathlib import Path

import torch

from ..checkpoint import load_model, load_tokenizer, save_checkpoint
from ..data import load_text, read_text_file
from ..lora_gpt import file_sha256
from ..model import GPT
from ..presets import get_preset
from ..pretrained import PRETRAINED_SHA256
from ..runs.kind import base_record
from ..runs.pretrain import read_run_text, split_tokens
from ..utils import check_output_file
from .apply import quantize_gptq, quantize_rtn
from .embeddings import check_embeddings
from .int4 import KERNEL_GROUP_SIZES
from .models import QATGPT, QuantizedGPT, QuantizedGPTConfig

METHODS = ("rtn", "gptq")
# the benchmark's GPTQ calibration set: random windows of the training split
CALIBRATION_WINDOWS = 128


def run_text(path: Path, trained_on: dict | None, text_file=None,
             what: str = "calibrate on") -> tuple[str, dict]:
    """The text of the checkpoint ``path`` (``trained_on``: what it records), and what a new file
    records of it: ``text_file`` when given; else the preset's corpus a ``train`` run records, or
    the shipped model's (tiny Shakespeare); anything else is refused, asking for ``--text``."""
    if text_file is not None:
        text = read_text_file(text_file)
        return text, {"text": Path(str(text_file)).name,
                      "text_sha256": hashlib.sha256(text.encode()).hexdigest()}
    recorded = trained_on or {}  # a train run's, or a qat run's (the text it read)
    if recorded.get("preset") and recorded.get("text") is None:
        text, record = read_run_text(recorded["preset"], get_preset(recorded["preset"]))
        return text, {"text": None, "preset": recorded["preset"],
                      "text_sha256": record["text_sha256"]}
    shipped = load_text()  # the shipped model's text, tiny Shakespeare
    digest = hashlib.sha256(shipped.encode()).hexdigest()
    if ((recorded.get("text") is None and recorded.get("text_sha256") == digest)
            or file_sha256(path) == PRETRAINED_SHA256):
        return shipped, {"text": None, "preset": None, "text_sha256": digest}
    raise ValueError(f"{path} does not record a text this course_lib can read again: give --text "
                     f"FILE, the text to {what} (the one it was trained on)")


def calibration_windows(tokenizer, text: str, block_size: int, n: int = CALIBRATION_WINDOWS,
                        seed: int = 0) -> torch.Tensor:
    """``n`` random windows (n, block_size) of the training split (90%) of ``text``."""
    train, _ = split_tokens(tokenizer, text, block_size)
    starts = torch.randint(0, len(train) - block_size, (n,),
                           generator=torch.Generator().manual_seed(seed))
    return torch.stack([train[s:s + block_size] for s in starts])


def check_quantize_args(bits: int, method: str, group_size: int, calibration: int,
                        embeddings: str = "int8") -> None:
    if bits != 4:
        raise ValueError(f"--bits {bits}: quantize writes 4-bit checkpoints (PyTorch's packed CPU "
                         "kernel is 4-bit); other widths are measured in chapter 23, not written")
    if method not in METHODS:
        raise ValueError(f"unknown --method {method!r}; choose one of: {', '.join(METHODS)}")
    if group_size not in KERNEL_GROUP_SIZES:
        raise ValueError(f"--group-size must be one of {', '.join(map(str, KERNEL_GROUP_SIZES))} "
                         "(the kernel's), "
                         f"got {group_size}")
    if calibration < 1:
        raise ValueError("--calibration must be at least 1 (GPTQ's calibration windows), got "
                         f"{calibration}")
    check_embeddings(embeddings, "--embeddings")


def quantize_checkpoint(checkpoint, out, *, bits: int = 4, method: str = "rtn",
                        group_size: int = 32, symmetric: bool = True, text_file=None,
                        calibration: int = CALIBRATION_WINDOWS, embeddings: str = "int8") -> dict:
    """Write the ``gpt-int4`` checkpoint of the GPT in ``checkpoint`` to ``out`` (atomically; never
    over the input or another checkpoint). Returns what was written: the path, the bytes of the
    quantized tensors and of the file, the method and settings."""
    check_quantize_args(bits, method, group_size, calibration, embeddings)
    if str(out) in ("", "-"):
        raise ValueError("--out needs a file name for the quantized checkpoint, e.g. --out "
                         "runs/cpu/int4.pt")
    checkpoint = Path(checkpoint)
    target = check_output_file(out, inputs=(checkpoint,), option="--out")
    model, ckpt = load_model(checkpoint)
    if isinstance(model, QATGPT):
        trained = (model.config.bits, model.config.group_size,
                   model.config.symmetric, model.config.embeddings)
        if trained != (bits, group_size, symmetric, embeddings):
            raise ValueError(f"{checkpoint} was trained for int{trained[0]} per group of "
                             f"{trained[1]} "
                             f"({'symmetric' if trained[2] else 'with zero points'}), embeddings "
                             f"{trained[3]}: quantize it with those settings")
        model = model.float_gpt()
    elif type(model) is not GPT:
        raise ValueError(f"{checkpoint} holds a {ckpt['model_kind']!r} model: quantize reads a GPT "
                         "checkpoint (`train`, a full `finetune`, the shipped model) or a `qat` "
                         "run")
    config = QuantizedGPTConfig(**model.config.to_dict(), group_size=group_size,
                                symmetric=symmetric, embeddings=embeddings).quant_config()
    tokenizer = load_tokenizer(ckpt, checkpoint) if ckpt.get("tokenizer") else None
    model.eval()
    trained_on = {"command": "quantize", "method": method,
                  **base_record(checkpoint.resolve(), file_sha256(checkpoint))}
    if method == "gptq":
        if tokenizer is None:
            raise ValueError(f"{checkpoint} has no tokenizer to read the calibration text with: "
                             "use --method rtn")
        text, record = run_text(checkpoint, ckpt.get("trained_on"), text_file)
        windows = calibration_windows(tokenizer, text, model.config.block_size, calibration)
        _, stored = quantize_gptq(model, config, windows, embeddings=embeddings)
        trained_on |= {"calibration_windows": calibration, **record}
    else:
        _, stored = quantize_rtn(model, config, embeddings)
    qmodel = QuantizedGPT.from_quantized(model, stored, group_size, symmetric, embeddings)
    save_checkpoint(target, qmodel, tokenizer=tokenizer, trained_on=trained_on)
    return {"path": target, "method": method, "group_size": group_size, "symmetric": symmetric,
            "embeddings": embeddings, "tensor_bytes": qmodel.stored_bytes(),
            "file_bytes": Path(target).stat().st_size, "input_bytes": checkpoint.stat().st_size}
