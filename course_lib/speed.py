"""Training faster, and measuring it (chapter 12): which precisions a device can train in, the
autocast context forward passes run in, ``torch.compile`` with a fallback to eager mode, and
:class:`SpeedMeter` (tokens per second, and MFU on a GPU of known peak)."""
from __future__ import annotations

import contextlib

import torch
import torch.nn as nn

from .sizing import model_flops_utilization

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def check_precision(device: torch.device, dtype: str) -> None:
    """A clear error for a precision this device cannot train in."""
    if dtype == "fp16" and device.type != "cuda":
        raise ValueError("dtype 'fp16' needs a CUDA GPU: float16 training needs loss scaling "
                         f"(GradScaler), which PyTorch does on GPUs. On {device.type} use 'bf16' "
                         "(float32's range, 8 bits of precision) or 'fp32'")
    if dtype == "bf16" and device.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise ValueError("this GPU has no bfloat16 support (it is older than NVIDIA's Ampere): use "
                         "dtype 'fp16' (with loss scaling) or 'fp32'")


def grad_scaler(device: torch.device, dtype: str) -> torch.amp.GradScaler:
    """The training step's gradient scaler: on for fp16 alone, whose small gradients underflow
    (it multiplies the loss before backward and divides the gradients before the step); off (a
    plain ``optimizer.step()``) for fp32 and bf16. TF32 is switched on by :func:`tf32_matmuls`,
    for the training run only. The device and precision are checked once, where the run is built
    (:func:`check_precision`, in :mod:`course_lib.runs`); this only refuses fp16 off a GPU, a
    cheap test (no GPU query) for a Trainer built by hand, whose scaler would otherwise switch
    itself off with a warning and leave float16 gradients unscaled."""
    if dtype == "fp16" and device.type != "cuda":
        check_precision(device, dtype)  # raises, naming what to use instead
    return torch.amp.GradScaler("cuda", enabled=dtype == "fp16")


@contextlib.contextmanager
def tf32_matmuls(device: torch.device):
    """While the block runs on a CUDA GPU, float32 matmuls use TF32 (tensor cores, a 10-bit
    mantissa): ``torch.set_float32_matmul_precision("high")``. The setting is global to the
    process, so the previous one is restored afterwards, even after an error or a Ctrl-C: the
    cells of a chapter that follow a GPU training run (and assert equalities) compute in full
    float32 again. On other devices nothing changes."""
    if device.type != "cuda":
        yield
        return
    previous = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high")
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(previous)


def autocast(device: torch.device, dtype: str):
    """The context forward passes run in: autocast to bf16 or fp16 (matmuls in half precision;
    softmax, LayerNorm and the loss kept in fp32; the weights themselves stay fp32), or nothing."""
    if dtype == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=DTYPES[dtype])


def compile_model(model: nn.Module) -> nn.Module:
    """``torch.compile(model)``, or ``model`` itself, with a message, where torch.compile is not
    available. (Compilation happens at the first call; the Trainer handles a failure there.)"""
    try:
        return torch.compile(model)
    except Exception as e:  # e.g. a Python version torch.compile does not support yet
        print(f"torch.compile is not available here ({type(e).__name__}: {str(e)[:200]}); "
              "training continues without it (eager mode)")
        return model


def compile_failed(error: Exception) -> str:
    """What to say when a compiled model fails at its first step (the Trainer then trains
    eagerly)."""
    first_line = str(error).strip().splitlines()[0][:200] if str(error).strip() else ""
    return (f"torch.compile could not compile this model here ({type(error).__name__}: "
            f"{first_line}); training continues without it (eager mode)")


class SpeedMeter:
    """Training speed, step by step: ``tokens_per_s`` over all processes (a running average,
    0.9 of the old value plus 0.1 of the new step's; the first step after :meth:`start`, which
    compiles and warms up, is left out) and ``mfu``, model FLOPs utilisation,
    where the model counts its FLOPs (a ``flops_per_token()`` method, as
    :class:`~course_lib.model.GPT` has) and ``device`` is a GPU of known peak
    (:func:`course_lib.sizing.gpu_peak_flops`); else None."""

    def __init__(self, model: nn.Module, device: torch.device):
        count_flops = getattr(model, "flops_per_token", None)
        self.flops_per_token = count_flops() if callable(count_flops) else None
        self.device = device
        self.tokens_per_s: float | None = None
        self.mfu: float | None = None
        self.warm = False  # False until the first step has run

    def start(self) -> None:
        """Training (re)starts: its first step is not timed."""
        self.warm = False

    def record(self, tokens: int, seconds: float, n_processes: int = 1) -> None:
        """One step of ``tokens`` per process that took ``seconds``."""
        if not self.warm:
            self.warm = True
            return
        rate = tokens * n_processes / max(seconds, 1e-9)
        self.tokens_per_s = (rate if self.tokens_per_s is None
                             else 0.9 * self.tokens_per_s + 0.1 * rate)
        self.mfu = model_flops_utilization(self.flops_per_token, self.tokens_per_s, self.device,
                                           n_processes)

    def postfix(self) -> dict[str, str]:
        """The progress bar's speed fields: tok/s, and mfu when known."""
        out = {}
        if self.tokens_per_s is not None:
            out["tok/s"] = f"{self.tokens_per_s:,.0f}"
        if self.mfu is not None:
            out["mfu"] = f"{100 * self.mfu:.1f}%"
        return out
