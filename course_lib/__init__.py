"""course_lib: the shared package of the course "Build a GPT from scratch".

One small module per idea, most introduced by a chapter. Every module and folder, with what it
holds, is listed in CONTRIBUTING.md, "The modules of course_lib" (tests/test_architecture.py keeps
that list complete), and the book's introduction maps each module to its chapter.

Importing the package registers every model kind and tokenizer type the package ships, so a
checkpoint of any of them loads. The command line is ``python -m course_lib``; instructor and
maintainer tools live apart, in ``course_lib.tools``.
"""
from . import _signals as signals

if signals.started_as_cli():  # `python -m course_lib`: Ctrl-C during the imports below is one line
    signals.exit_quietly_on_ctrl_c()
signals.pause_point("import")

# after the Ctrl-C handler: these imports take seconds
from .model import GPT, GPTConfig  # noqa: E402
# register GPT.from_pretrained's loaders (none imports transformers here)
from . import gpt2, llama, hf_moe  # noqa: E402,F401
from .sizing import count_parameters, parameter_breakdown
from .tokenizers import CharTokenizer
from .bpe import BPETokenizer  # registers the "bpe" tokenizer type
from .chat.template import ChatTokenizer  # noqa: F401  registers the "chat" tokenizer type (ch. 17)
from .bpe_train import train_bpe
from .train import Trainer, TrainConfig
from .generate import generate, generate_text
from .seq2seq import Seq2Seq, Seq2SeqConfig
# every model kind registers on `import course_lib`
from . import bigram, lora_gpt, linear_attention  # noqa: E402,F401
# gpt-int4 and gpt-qat (chapter 23)
from .quantize import models as _quantized_models  # noqa: E402,F401
from .induction import model as _induction_model  # noqa: E402,F401  the attn-only kind (chapter 21)
from .utils import pick_device, seed_everything

__version__ = "0.1.0"

__all__ = [
    "GPT", "GPTConfig", "count_parameters", "parameter_breakdown", "CharTokenizer", "BPETokenizer",
    "train_bpe", "Trainer", "TrainConfig", "generate", "generate_text", "Seq2Seq", "Seq2SeqConfig",
    "pick_device", "seed_everything", "__version__",
]
