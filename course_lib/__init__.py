"""course_lib: the shared package of the course "Build a GPT from scratch".

One small module per idea, each introduced by a chapter:

- ``data``: bundled corpora, splits, batches (ch. 1); padding, packing, the names dataset (ch. 10)
- ``bigram``: counting and learned bigram models, unigram entropy (ch. 1-2)
- ``tokenizers``: the tokenizer interface and its registry, ``CharTokenizer`` (ch. 1; special tokens ch. 10)
- ``attention``: averaging the past, ``Head``, ``MultiHeadAttention``, ``CausalSelfAttention`` (ch. 3-4)
- ``model``: ``GPTConfig``, ``Block``, ``GPT`` (ch. 5-6); ``GPT.from_pretrained`` via ``gpt2`` (ch. 13)
  and ``llama`` (ch. 14); RMSNorm, SwiGLU and, in ``rope`` and ``attention``, RoPE and grouped-query
  attention (ch. 14)
- ``sizing``: parameter counts, FLOPs, memory (ch. 6)
- ``train``: ``TrainConfig``, ``Trainer``, schedules (ch. 2, 7); gradient accumulation (ch. 12)
- ``losses``: loss estimates (ch. 7), masked loss and accuracy (ch. 10); ``diagnostics``: gradient norms (ch. 5)
- ``speed``: mixed precision, ``torch.compile``, tokens/s and MFU (ch. 12)
- ``runs``: every kind of run, built new or resumed from its checkpoint: GPT pretraining (ch. 7),
  the encoder-decoder on dates (ch. 11), fine-tuning in full or with LoRA (ch. 15); the CLI uses it
- ``run_folder``: a run's output folder: its lock, and ``open_run`` for a new run or ``--resume``
- ``checkpoint``: the one checkpoint format (ch. 7); ``registry``: the model kinds it can hold
- ``generate``: sampling and the KV cache (ch. 8); batches of prompts of different lengths (ch. 10)
- ``pretokenize``, ``bpe_train``, ``bpe``, ``bpe_files``: byte-level BPE: pre-tokens, ``train_bpe``,
  ``BPETokenizer``, GPT-2 and tiktoken files (ch. 9)
- ``seq2seq``, ``translate``, ``dates``: the encoder-decoder Transformer of 2017 and label smoothing;
  greedy and beam search; the date-normalising task (ch. 11)
- ``distributed``: data-parallel training under torchrun (ch. 12)
- ``lora``: LoRA adapters from scratch: add, count, merge (ch. 15); ``lora_gpt``: a GPT grown for new
  tokens and the ``gpt-lora`` model kind; ``finetune``: the fine-tuning task on dates (ch. 15)
- ``moe``: a mixture-of-experts feed-forward, its router and balancing loss; ``hf_moe``: Mixtral and
  Qwen3-MoE in our GPT (ch. 20)
- ``chat_template``, ``calculator``, ``chat_data``, ``chat_engine``: the chat template, its loss mask and
  ``ChatTokenizer``; a safe calculator; the conversations; the chat engine with its KV cache across
  turns and tool loop (ch. 17)
- ``classify``: a classification head on a GPT (ch. 15); ``pretrained``: the model the package ships
- ``config``: what every config class shares (``Rule`` tables, ``to_dict``/``from_dict``, ``--set``)
- ``plots``, ``exercises``, ``presets``, ``utils``; the CLI is ``python -m course_lib`` (``cli``).

Every model kind (``gpt``, ``bigram``, ``seq2seq``, ``gpt-lora``) is registered once this package is
imported, so a checkpoint of any of them loads.

Instructor and maintainer tools live apart, in ``course_lib.tools``.
"""
from . import _signals as signals

if signals.started_as_cli():  # `python -m course_lib`: Ctrl-C during the imports below is one line
    signals.exit_quietly_on_ctrl_c()
signals.pause_point("import")

from .model import GPT, GPTConfig  # noqa: E402  (after the Ctrl-C handler: these imports take seconds)
from . import gpt2, llama, hf_moe  # noqa: E402,F401  register GPT.from_pretrained's loaders (none imports transformers here)
from .sizing import count_parameters, parameter_breakdown
from .tokenizers import CharTokenizer
from .bpe import BPETokenizer  # registers the "bpe" tokenizer type
from .chat_template import ChatTokenizer  # registers the "chat" tokenizer type (ch. 17)
from .bpe_train import train_bpe
from .train import Trainer, TrainConfig
from .generate import generate, generate_text
from .seq2seq import Seq2Seq, Seq2SeqConfig
from . import bigram, lora_gpt  # noqa: E402,F401  every model kind registers on `import course_lib`
from .utils import pick_device, seed_everything

__version__ = "0.1.0"

__all__ = [
    "GPT", "GPTConfig", "count_parameters", "parameter_breakdown", "CharTokenizer", "BPETokenizer", "train_bpe",
    "Trainer", "TrainConfig", "generate", "generate_text", "Seq2Seq", "Seq2SeqConfig", "pick_device", "seed_everything",
    "__version__",
]
