"""Chapter 23: smaller models by quantization (Part IV keeps one folder per chapter).

- :mod:`.rtn`: round-to-nearest, symmetric or with a zero point, per tensor, row or group, and the
  bytes actually written (codes packed, float16 scales, packed zero points);
- :mod:`.gptq`: GPTQ from the calibration Hessian, and the exact optimal-brain-quantization
  reference it is tested against;
- :mod:`.apply`: every 2-D weight of a GPT quantized, its stored bytes, bits per character on
  fixed validation windows with bootstrap intervals;
- :mod:`.qat`: quantization-aware training, fake quantization with the straight-through estimator.

Chapter 15's NF4 (:mod:`course_lib.nf4`) is the other 4-bit format of the book (a code book at
normal quantiles, for QLoRA's frozen base), not repeated here.
"""
from .rtn import QuantConfig, QuantizedTensor, fake_quantize, quantize

__all__ = ["QuantConfig", "QuantizedTensor", "fake_quantize", "quantize"]
