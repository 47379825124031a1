"""course_lib: the shared package of the course "Build a GPT from scratch".

One small module per idea, each introduced by a chapter:

- ``data``: bundled corpora, splits, batches (ch. 1); padding, packing, the names dataset (ch. 10)
- ``bigram``: counting and learned bigram models, unigram entropy (ch. 1-2)
- ``tokenizers``: ``CharTokenizer`` (ch. 1)
- ``attention``: averaging the past, ``Head``, ``MultiHeadAttention``, ``CausalSelfAttention`` (ch. 3-4)
- ``model``: ``GPTConfig``, ``Block``, ``GPT``, parameter counting (ch. 5-6)
- ``train``: ``Trainer``, schedules, losses (ch. 2, 7)
- ``generate``: sampling and the KV cache (ch. 8); batches of prompts of different lengths (ch. 10)
- ``plots``, ``exercises``, ``presets``; the CLI is ``python -m course_lib``.
"""
from .model import GPT, GPTConfig
from .sizing import count_parameters, parameter_breakdown
from .tokenizers import CharTokenizer
from .train import Trainer, TrainConfig
from .generate import generate, generate_text
from .utils import pick_device, seed_everything

__version__ = "0.1.0"

__all__ = [
    "GPT", "GPTConfig", "count_parameters", "parameter_breakdown", "CharTokenizer", "Trainer", "TrainConfig",
    "generate", "generate_text", "pick_device", "seed_everything", "__version__",
]
