"""Chapter 24 (Part IV): linear attention, the delta rule, Gated DeltaNet and hybrid decoders.

- ``rules``: the running state and the rules that write it (recurrent and chunked forms).
- ``layers``: a Gated DeltaNet layer and Qwen3.5's gated attention, norms and feed-forward.
- ``hybrid``: the ``hybrid`` model kind, DeltaNet and attention layers in a pattern such as "LLLA".
- ``flops``: its FLOP count, every operation of the forward pass by name (equal-compute budgets).
- ``hf_qwen35``: Hugging Face's Qwen3.5 weights in our model.
- ``probes``: the associative-recall task that shows where a fixed-size state forgets.
"""
from . import flops, hf_qwen35, hybrid, layers, rules  # noqa: F401  (importing hybrid registers the kind)
from .hybrid import HybridConfig, HybridGPT  # noqa: F401
