"""Every bad input of the Python API, as a table: the call, the exception it must raise and a
phrase its message must contain (issue 21's cases). The rules live in one place each: the config
classes' rule tables (course_lib.config.Rule), course_lib.generate.check_sampling_args, and
course_lib.data.read_text_file; these rows check that each refuses what it should."""
import numpy as np
import pytest
import torch

from course_lib.bpe import BPETokenizer
from course_lib.bpe_train import train_bpe
from course_lib.checkpoint import load_checkpoint
from course_lib.data import read_text_file
from course_lib.generate import generate, generate_text
from course_lib.model import GPT, GPTConfig
from course_lib.seq2seq import Seq2SeqConfig
from course_lib.tokenizers import CharTokenizer
from course_lib.train import TrainConfig, Trainer, TrainingDiverged

NAN, INF = float("nan"), float("inf")
TINY = dict(vocab_size=11, block_size=8, n_layer=1, n_head=2, n_embd=8)


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return GPT(GPTConfig(**TINY))


@pytest.fixture(scope="module")
def bpe():
    return BPETokenizer.train("hello world, hello there " * 20, vocab_size=262)


def _batches(split, generator):
    x = torch.randint(11, (2, 8), generator=generator)
    return x, x


def _file(tmp_path, name, data: bytes):
    path = tmp_path / name
    path.write_bytes(data)
    return path


CASES = [
    # the config classes: every field finite, in range, of its type (booleans real booleans)
    ("GPTConfig tie_weights='false'", lambda ctx: GPTConfig(tie_weights="false"), TypeError,
     "tie_weights must be True or False, got 'false' of type str"),
    ("GPTConfig n_layer=True", lambda ctx: GPTConfig(n_layer=True), TypeError, "n_layer must be an integer >= 1"),
    ("GPTConfig n_layer=2.5", lambda ctx: GPTConfig(n_layer=2.5), TypeError, "n_layer must be an integer"),
    ("GPTConfig dropout=nan", lambda ctx: GPTConfig(dropout=NAN), ValueError, r"dropout must be a finite number in \[0, 1\)"),
    ("GPTConfig vocab_size=0", lambda ctx: GPTConfig(vocab_size=0), ValueError, "vocab_size must be an integer >= 1"),
    ("TrainConfig learning_rate=nan", lambda ctx: TrainConfig(learning_rate=NAN), ValueError,
     r"learning_rate must be a finite number in \(0, 1\], got nan"),
    ("TrainConfig learning_rate=inf", lambda ctx: TrainConfig(learning_rate=INF), ValueError, "learning_rate"),
    ("TrainConfig beta1=1.5", lambda ctx: TrainConfig(beta1=1.5), ValueError, r"beta1 must be a finite number in \[0, 1\)"),
    ("TrainConfig max_iters=2.5", lambda ctx: TrainConfig(max_iters=2.5), TypeError, "max_iters must be an integer"),
    ("TrainConfig min_lr=-1", lambda ctx: TrainConfig(min_lr=-1), ValueError, "min_lr must be"),
    ("TrainConfig grad_clip=nan", lambda ctx: TrainConfig(grad_clip=NAN), ValueError, "grad_clip must be a finite"),
    ("TrainConfig weight_decay=-1", lambda ctx: TrainConfig(weight_decay=-1), ValueError, "weight_decay must be"),
    ("TrainConfig lr_decay_iters=-1", lambda ctx: TrainConfig(lr_decay_iters=-1), ValueError, "lr_decay_iters"),
    ("TrainConfig compile='yes'", lambda ctx: TrainConfig(compile="yes"), TypeError, "compile must be True or False"),
    ("TrainConfig schedule='linear'", lambda ctx: TrainConfig(schedule="linear"), ValueError,
     "schedule must be one of 'constant', 'cosine', 'transformer', 'wsd'"),
    ("TrainConfig optimizer='sgd'", lambda ctx: TrainConfig(optimizer="sgd"), ValueError,
     "optimizer must be one of 'adamw', 'muon'"),
    ("TrainConfig muon_lr=0", lambda ctx: TrainConfig(muon_lr=0.0), ValueError, r"muon_lr must be a finite number in \(0, 1\]"),
    ("TrainConfig muon_momentum=1", lambda ctx: TrainConfig(muon_momentum=1.0), ValueError,
     r"muon_momentum must be a finite number in \[0, 1\)"),
    ("TrainConfig cooldown_fraction=2", lambda ctx: TrainConfig(cooldown_fraction=2.0), ValueError,
     r"cooldown_fraction must be a finite number in \[0, 1\]"),
    ("Seq2SeqConfig label_smoothing=nan", lambda ctx: Seq2SeqConfig(label_smoothing=NAN), ValueError,
     "label_smoothing must be a finite number"),
    ("Seq2SeqConfig bias='true'", lambda ctx: Seq2SeqConfig(bias="true"), TypeError, "bias must be True or False"),
    # sampling: one check, for the API and the command line
    ("generate max_new_tokens=-5", lambda ctx: generate(ctx["model"], torch.zeros(1, 1, dtype=torch.long), -5),
     ValueError, "max_new_tokens must be an integer >= 0"),
    ("generate temperature=nan", lambda ctx: generate(ctx["model"], torch.zeros(1, 1, dtype=torch.long), 2,
                                                      temperature=NAN), ValueError, "temperature must be >= 0"),
    ("generate top_p=nan", lambda ctx: generate(ctx["model"], torch.zeros(1, 1, dtype=torch.long), 2, top_p=NAN),
     ValueError, r"top_p must be in \(0, 1\]"),
    ("generate top_k=2.5", lambda ctx: generate(ctx["model"], torch.zeros(1, 1, dtype=torch.long), 2, top_k=2.5),
     ValueError, "top_k must be an integer >= 1"),
    ("generate_text max_new_tokens=-1", lambda ctx: generate_text(ctx["model"], CharTokenizer("abcdefghijk"), "a", -1),
     ValueError, "max_new_tokens must be an integer >= 0"),
    ("generate from NaN weights", lambda ctx: generate(ctx["nan_model"], torch.zeros(1, 1, dtype=torch.long), 2),
     ValueError, "probabilities are not finite numbers"),
    # the model's inputs
    ("model(1-D tensor)", lambda ctx: ctx["model"](torch.tensor([1, 2, 3])), ValueError,
     r"idx must be a \(B, T\) tensor of token ids, got shape \(3,\): add the batch dimension"),
    ("targets of another shape", lambda ctx: ctx["model"](torch.zeros(2, 4, dtype=torch.long),
                                                          torch.zeros(2, 3, dtype=torch.long)),
     ValueError, r"targets must have the shape of idx \(2, 4\), got \(2, 3\)"),
    # tokenizers
    ("CharTokenizer.decode([1.7])", lambda ctx: CharTokenizer("abc").decode([1.7]), ValueError,
     "token ids must be integers, got 1.7"),
    ("CharTokenizer.decode([5])", lambda ctx: CharTokenizer("abc").decode([5]), ValueError, "unknown token id 5"),
    ("BPETokenizer.decode([1.5])", lambda ctx: ctx["bpe"].decode([1.5]), ValueError, "token ids must be integers, got 1.5"),
    ("BPETokenizer.train(special_tokens=[''])", lambda ctx: BPETokenizer.train("hello world", 260, special_tokens=[""]),
     ValueError, "special tokens must be non-empty strings, got ''"),
    ("train_bpe(vocab_size=300.0)", lambda ctx: train_bpe(text="hello world", vocab_size=300.0), ValueError,
     "vocab_size must be an integer, got 300.0 of type float"),
    # the text reader
    ("read a UTF-16 file", lambda ctx: read_text_file(ctx["file"]("u16.txt", "hi there\n".encode("utf-16"))),
     ValueError, "is UTF-16-LE text .*iconv -f UTF-16 -t UTF-8"),
    ("read a UTF-32 file", lambda ctx: read_text_file(ctx["file"]("u32.txt", "hi there\n".encode("utf-32"))),
     ValueError, "is UTF-32-LE text"),
    ("read NUL bytes", lambda ctx: read_text_file(ctx["file"]("nul.txt", b"\0" * 5000)), ValueError,
     r"not text: it holds 5,000 NUL bytes, the first at offset 0 \(line 1, column 1\)"),
    # training that stops being finite: one clear error, nothing saved over a good checkpoint
    ("Trainer on NaN weights", lambda ctx: Trainer(ctx["nan_model"], config=TrainConfig(max_iters=2, eval_iters=1),
                                                   batch_fn=_batches, out_dir=ctx["tmp"] / "run", progress=False,
                                                   verbose=False).train(),
     TrainingDiverged, r"training diverged at step 1: the loss is nan .*nothing was saved. Try a smaller learning_rate"),
    # checkpoints
    ("load a folder", lambda ctx: load_checkpoint(ctx["tmp"]), ValueError, "is a folder, not a checkpoint file"),
    ("load an empty file", lambda ctx: load_checkpoint(ctx["file"]("empty.pt", b"")), ValueError,
     r"is empty \(0 bytes\), not a checkpoint"),
]


@pytest.mark.parametrize("name, call, error, phrase", CASES, ids=[c[0] for c in CASES])
def test_bad_api_input_raises_a_clear_error(name, call, error, phrase, model, bpe, tmp_path):
    nan_model = GPT(GPTConfig(**TINY))
    with torch.no_grad():
        nan_model.wte.weight[0, 0] = NAN
    ctx = {"model": model, "nan_model": nan_model, "bpe": bpe, "tmp": tmp_path,
           "file": lambda n, data: _file(tmp_path, n, data)}
    with pytest.raises(error, match=phrase) as raised:
        call(ctx)
    message = str(raised.value)
    assert "\n" not in message and "weights_only=False" not in message


def test_integral_numpy_scalars_are_accepted_as_plain_ints():
    config = GPTConfig(vocab_size=np.int64(65), n_layer=np.int32(2), dropout=np.float32(0.25))
    assert type(config.vocab_size) is int and config.vocab_size == 65 and type(config.n_layer) is int
    assert type(config.dropout) is float and config.to_dict() == GPTConfig(vocab_size=65, n_layer=2, dropout=0.25).to_dict()
    assert TrainConfig(max_iters=np.int64(5)).max_iters == 5
    assert len(train_bpe(text="hello", vocab_size=np.int64(257))[0]) == 257


def test_every_preset_and_default_config_passes_the_rules():
    from course_lib.presets import PRESETS
    from course_lib.dates import DATES_MODEL, dates_train_config

    for preset in PRESETS.values():
        assert GPTConfig.from_dict(preset.model.to_dict()) == preset.model
        if preset.train is not None:
            assert TrainConfig(**vars(preset.train)) == preset.train
    assert Seq2SeqConfig.from_dict(DATES_MODEL.to_dict()) == DATES_MODEL
    dates_train_config()
