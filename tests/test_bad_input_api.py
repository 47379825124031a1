"""Every bad input of the Python API, as a table: the call, the exception it must raise and a
phrase its message must contain (issue 21's cases). The rules live in one place each: the config
classes' rule tables (course_lib.config.Rule), course_lib.generate.check_sampling_args, and
course_lib.data.read_text_file; these rows check that each refuses what it should."""
import random
from pathlib import Path

import numpy as np
import pytest
import torch

from course_lib.bpe import BPETokenizer
from course_lib.bpe_train import train_bpe
from course_lib.checkpoint import load_checkpoint
from course_lib.data import read_text_file
from course_lib.generate import generate, generate_text
from course_lib.model import GPT, GPTConfig
from course_lib.runs import make_trainer
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
    ("GPTConfig n_layer=True", lambda ctx: GPTConfig(n_layer=True), TypeError,
     "n_layer must be an integer >= 1"),
    ("GPTConfig n_layer=2.5", lambda ctx: GPTConfig(n_layer=2.5), TypeError,
     "n_layer must be an integer"),
    ("GPTConfig dropout=nan", lambda ctx: GPTConfig(dropout=NAN), ValueError,
     r"dropout must be a finite number in \[0, 1\)"),
    ("GPTConfig vocab_size=0", lambda ctx: GPTConfig(vocab_size=0), ValueError,
     "vocab_size must be an integer >= 1"),
    ("TrainConfig learning_rate=nan", lambda ctx: TrainConfig(learning_rate=NAN), ValueError,
     r"learning_rate must be a finite number in \(0, 1\], got nan"),
    ("TrainConfig learning_rate=inf", lambda ctx: TrainConfig(learning_rate=INF), ValueError,
     "learning_rate"),
    ("TrainConfig beta1=1.5", lambda ctx: TrainConfig(beta1=1.5), ValueError,
     r"beta1 must be a finite number in \[0, 1\)"),
    ("TrainConfig max_iters=2.5", lambda ctx: TrainConfig(max_iters=2.5), TypeError,
     "max_iters must be an integer"),
    ("TrainConfig min_lr=-1", lambda ctx: TrainConfig(min_lr=-1), ValueError, "min_lr must be"),
    ("TrainConfig grad_clip=nan", lambda ctx: TrainConfig(grad_clip=NAN), ValueError,
     "grad_clip must be a finite"),
    ("TrainConfig weight_decay=-1", lambda ctx: TrainConfig(weight_decay=-1), ValueError,
     "weight_decay must be"),
    ("TrainConfig lr_decay_iters=-1", lambda ctx: TrainConfig(lr_decay_iters=-1), ValueError,
     "lr_decay_iters"),
    ("TrainConfig compile='yes'", lambda ctx: TrainConfig(compile="yes"), TypeError,
     "compile must be True or False"),
    ("TrainConfig schedule='linear'", lambda ctx: TrainConfig(schedule="linear"), ValueError,
     "schedule must be one of 'constant', 'cosine', 'transformer', 'wsd'"),
    ("TrainConfig optimizer='sgd'", lambda ctx: TrainConfig(optimizer="sgd"), ValueError,
     "optimizer must be one of 'adamw', 'muon'"),
    ("TrainConfig muon_lr=0", lambda ctx: TrainConfig(muon_lr=0.0), ValueError,
     r"muon_lr must be a finite number in \(0, 1\]"),
    ("TrainConfig muon_momentum=1", lambda ctx: TrainConfig(muon_momentum=1.0), ValueError,
     r"muon_momentum must be a finite number in \[0, 1\)"),
    ("TrainConfig cooldown_fraction=2", lambda ctx: TrainConfig(cooldown_fraction=2.0), ValueError,
     r"cooldown_fraction must be a finite number in \[0, 1\]"),
    ("Seq2SeqConfig label_smoothing=nan", lambda ctx: Seq2SeqConfig(label_smoothing=NAN),
     ValueError, "label_smoothing must be a finite number"),
    ("Seq2SeqConfig bias='true'", lambda ctx: Seq2SeqConfig(bias="true"), TypeError,
     "bias must be True or False"),
    # sampling: one check, for the API and the command line
    ("generate max_new_tokens=-5", lambda ctx: generate(ctx["model"],
                                                        torch.zeros(1, 1, dtype=torch.long), -5),
     ValueError, "max_new_tokens must be an integer >= 0"),
    ("generate temperature=nan", lambda ctx: generate(ctx["model"],
                                                      torch.zeros(1, 1, dtype=torch.long), 2,
                                                      temperature=NAN), ValueError,
     "temperature must be >= 0"),
    ("generate top_p=nan", lambda ctx: generate(ctx["model"], torch.zeros(1, 1, dtype=torch.long),
                                                2, top_p=NAN),
     ValueError, r"top_p must be in \(0, 1\]"),
    ("generate top_k=2.5", lambda ctx: generate(ctx["model"], torch.zeros(1, 1, dtype=torch.long),
                                                2, top_k=2.5),
     ValueError, "top_k must be an integer >= 1"),
    ("generate_text max_new_tokens=-1",
     lambda ctx: generate_text(ctx["model"], CharTokenizer("abcdefghijk"), "a", -1),
     ValueError, "max_new_tokens must be an integer >= 0"),
    ("generate from NaN weights", lambda ctx: generate(ctx["nan_model"],
                                                       torch.zeros(1, 1, dtype=torch.long), 2),
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
    ("CharTokenizer.decode([5])", lambda ctx: CharTokenizer("abc").decode([5]), ValueError,
     "unknown token id 5"),
    ("BPETokenizer.decode([1.5])", lambda ctx: ctx["bpe"].decode([1.5]), ValueError,
     "token ids must be integers, got 1.5"),
    ("BPETokenizer.train(special_tokens=[''])",
     lambda ctx: BPETokenizer.train("hello world", 260, special_tokens=[""]),
     ValueError, "special tokens must be non-empty strings, got ''"),
    ("train_bpe(vocab_size=300.0)", lambda ctx: train_bpe(text="hello world", vocab_size=300.0),
     ValueError, "vocab_size must be an integer, got 300.0 of type float"),
    # the text reader
    ("read a UTF-16 file",
     lambda ctx: read_text_file(ctx["file"]("u16.txt", "hi there\n".encode("utf-16"))),
     ValueError, "is UTF-16-LE text .*iconv -f UTF-16 -t UTF-8"),
    ("read a UTF-32 file",
     lambda ctx: read_text_file(ctx["file"]("u32.txt", "hi there\n".encode("utf-32"))),
     ValueError, "is UTF-32-LE text"),
    ("read NUL bytes", lambda ctx: read_text_file(ctx["file"]("nul.txt", b"\0" * 5000)), ValueError,
     r"not text: it holds 5,000 NUL bytes, the first at offset 0 \(line 1, column 1\)"),
    # training that stops being finite: one clear error, nothing saved over a good checkpoint
    ("Trainer on NaN weights", lambda ctx: Trainer(ctx["nan_model"],
                                                   config=TrainConfig(max_iters=2, eval_iters=1),
                                                   batch_fn=_batches, out_dir=ctx["tmp"] / "run",
                                                   progress=False, verbose=False).train(),
     TrainingDiverged, r"training diverged at step 1: the loss is nan .*nothing was saved. Try a "
                       r"smaller learning_rate"),
    # checkpoints
    ("load a folder", lambda ctx: load_checkpoint(ctx["tmp"]), ValueError,
     "is a folder, not a checkpoint file"),
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
    assert (type(config.vocab_size) is int and config.vocab_size == 65
            and type(config.n_layer) is int)
    assert (type(config.dropout) is float
            and config.to_dict() == GPTConfig(vocab_size=65, n_layer=2, dropout=0.25).to_dict())
    assert TrainConfig(max_iters=np.int64(5)).max_iters == 5
    assert len(train_bpe(text="hello", vocab_size=np.int64(257))[0]) == 257


def test_every_preset_and_default_config_passes_the_rules():
    from course_lib.presets import PRESETS
    from course_lib.dates import DATES_MODEL, dates_train_config

    for preset in PRESETS.values():
        assert type(preset.model).from_dict(preset.model.to_dict()) == preset.model
        if preset.train is not None:
            assert TrainConfig(**vars(preset.train)) == preset.train
    assert Seq2SeqConfig.from_dict(DATES_MODEL.to_dict()) == DATES_MODEL
    dates_train_config()


# --- issue 31: the reliability review's rows (../shared/reviews/2026-11-26-reliability.md) --------


def _saved(tmp_path, net, name="ckpt.pt", tok=None, **edits):
    """A checkpoint of ``net`` with ``edits`` applied to its dict (a damaged file, as found)."""
    from course_lib.checkpoint import save_checkpoint, write_atomic

    path = save_checkpoint(tmp_path / name, net, tokenizer=tok or CharTokenizer("abcdefghijk"))
    if edits:
        ckpt = torch.load(path, weights_only=True)
        for key, change in edits.items():
            ckpt[key] = change(ckpt[key])
        write_atomic(path, ckpt)
    return path


def test_api_bigram_a_counting_bigram_with_zero_probabilities_round_trips(tmp_path):
    """Row 3: from_probs(smoothing=0) keeps -inf for zero probabilities (as documented); it saves
    and loads bitwise, while NaN and +inf are still refused as divergence."""
    import course_lib.bigram as bigram
    from course_lib.checkpoint import CheckpointError, load_model

    data = torch.tensor([0, 1, 2, 0, 1, 2, 0, 2, 1, 0])
    model = bigram.BigramLanguageModel.from_probs(bigram.bigram_probs(data, 3, smoothing=0.0))
    table = model.token_embedding_table.weight
    assert torch.isneginf(table).any(), "the case under test: some zero probabilities"
    loaded, _ = load_model(_saved(tmp_path, model, tok=CharTokenizer("abc")))
    assert torch.equal(loaded.token_embedding_table.weight, table)
    for bad in (float("nan"), float("inf")):
        broken = bigram.BigramLanguageModel.from_probs(bigram.bigram_probs(data, 3, smoothing=0.0))
        with torch.no_grad():
            broken.token_embedding_table.weight[0, 0] = bad
        with pytest.raises(CheckpointError,
                           match=r"not finite numbers \(NaN or inf, in token_embedding_table"):
            load_model(_saved(tmp_path, broken, f"bad{bad}.pt", tok=CharTokenizer("abc")))
    gpt = GPT(GPTConfig(**TINY))  # a GPT's -inf is still divergence
    with torch.no_grad():
        gpt.wte.weight[0, 0] = float("-inf")
    with pytest.raises(CheckpointError, match="not finite numbers"):
        load_model(_saved(tmp_path, gpt, "gpt.pt"))


LORA_CASES = [
    ("fr_huge / lora_rankhuge: rank 10**9", dict(rank=10**9),
     r"LoRA rank 1,000,000,000 is larger than blocks.0.attn.\w+ allows: at most min\(in 8, out "
     r"\d+\) = 8"),
    ("rank 9 on an 8-wide model", dict(rank=9),
     r"at most min\(in 8, out \d+\) = 8, .*choose a rank <= 8"),
    ("alpha inf", dict(alpha=float("inf")),
     "LoRA alpha must be a positive finite number .*got inf"),
    ("alpha nan", dict(alpha=float("nan")),
     "LoRA alpha must be a positive finite number .*got nan"),
    ("lora_targets_empty: targets=[]", dict(targets=[]),
     "LoRA targets is empty: name at least one nn.Linear layer"),
    ("targets ['']", dict(targets=[""]), r"LoRA targets must be layer names, got '' among \[''\]"),
    ("targets [' ', 'attn.c_attn']", dict(targets=[" ", "attn.c_attn"]),
     "LoRA targets must be layer names, got ' '"),
]


@pytest.mark.parametrize("name, kwargs, phrase", LORA_CASES, ids=[c[0] for c in LORA_CASES])
def test_add_lora_refuses_before_allocating_and_changes_nothing(name, kwargs, phrase):
    """Rows 4 and 18, lora_rankhuge: one clear ValueError, and the model is left as it was
    (nothing frozen, nothing wrapped)."""
    from course_lib.lora import add_lora, trainable_parameters

    model = GPT(GPTConfig(**TINY))
    before = trainable_parameters(model)
    with pytest.raises(ValueError, match=phrase) as raised:
        add_lora(model, **{"rank": 2, **kwargs})
    assert "\n" not in str(raised.value)
    assert trainable_parameters(model) == before and all(p.requires_grad
                                                         for p in model.parameters())


def test_lora_twice_other_add_lora_again_keeps_the_first_adapters_trainable():
    """Row 17: a second add_lora on other targets adds its adapters and leaves the first ones
    trainable (it used to freeze them with requires_grad_(False))."""
    from course_lib.lora import add_lora, lora_parameter_count, trainable_parameters

    model = GPT(GPTConfig(**TINY))
    attn = lora_parameter_count(model, 2)
    mlp = lora_parameter_count(model, 2, targets=("mlp.c_fc",))
    add_lora(model, 2)
    add_lora(model, 2, targets=("mlp.c_fc",))
    assert trainable_parameters(model) == attn + mlp
    assert (model.blocks[0].attn.c_attn.lora_A.requires_grad
            and model.blocks[0].mlp.c_fc.lora_A.requires_grad)
    assert (not model.blocks[0].attn.c_attn.base.weight.requires_grad
            and not model.wte.weight.requires_grad)


def test_ok_minlr_min_lr_above_learning_rate_is_refused_where_a_schedule_decays():
    """Row 13: cosine and wsd decay from learning_rate to min_lr; the other way round they climb."""
    for schedule in ("cosine", "wsd"):
        with pytest.raises(ValueError,
                           match=r"TrainConfig.min_lr \(0.0001\) is above learning_rate \(5e-05\): "
                                             r"the \w+ schedule decays .* e.g. min_lr=5e-06"):
            TrainConfig(learning_rate=5e-5, schedule=schedule)
    TrainConfig(learning_rate=5e-5, min_lr=5e-6)  # lowered together: fine
    TrainConfig(learning_rate=1e-4, min_lr=1e-4)  # equal: a flat schedule
    TrainConfig(learning_rate=5e-5, schedule="constant")  # min_lr unused


def test_ok_ropetiny_a_rope_theta_below_1_is_refused():
    """ok_ropetiny: theta 1e-300 passed the (0, inf) rule, and the run ended "diverged ... smaller
    learning_rate" (its frequencies theta^(-2i/hs) overflow)."""
    with pytest.raises(ValueError, match=r"rope_theta must be a finite number >= 1, got 1e-300"):
        GPTConfig(rope_theta=1e-300)
    GPTConfig(rope_theta=10000.0)


@pytest.mark.parametrize("build, phrase", [
    (lambda: make_trainer("shakespeare-char-cpu", torch.zeros(64, dtype=torch.long),
                          torch.zeros(64, dtype=torch.long),
                          {"vocab_size": 10**12, "n_embd": 16, "n_head": 2, "n_layer": 1}),
     r"a GPT of vocab_size 1,000,000,000,000, n_embd 16 and n_layer 1 needs at least .* more than "
     r"the .* GiB of memory .*: choose smaller sizes"),
    (lambda: __import__("course_lib.bigram").bigram.BigramLanguageModel(10**7),
     r"a bigram model of vocab_size 10,000,000 \(a V x V table\) needs at least "
     r"100,000,000,000,000 numbers"),
], ids=["api_cfg_hugevocab", "bigram_hugevocab"])
def test_a_model_larger_than_the_machine_is_refused_before_allocating(build, phrase):
    """A GPT's sizes are checked where they come from outside (a run's settings here, a checkpoint's
    config in test_hx_hugecfg), not by GPT() itself (see test_model)."""
    from course_lib.utils import TooLargeError

    with pytest.raises(TooLargeError, match=phrase):
        build()


def test_the_memory_check_counts_what_is_left_under_a_limit_not_the_machine_s_total():
    """Issue 46: ``--set batch_size=1000000`` passed a check against the machine's total memory,
    then failed to allocate under ``ulimit -v``. The check takes the least of the memory available,
    a cgroup's limit and the address space left (here 6 GB, as the review's probe ran)."""
    import re
    import resource
    import subprocess
    import sys

    code = ("from course_lib.utils import available_memory; from course_lib.sizing import "
            "check_gpt_fits; from course_lib.model import GPTConfig; print(available_memory()[1]); "
            "check_gpt_fits(GPTConfig(vocab_size=55, block_size=16, n_layer=1, n_head=2, "
            "n_embd=16), 1_000_000)")
    limit = 6_000_000 * 1024
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (limit, limit)))
    assert done.stdout.splitlines()[0] == "left under its address-space limit (ulimit -v)", (
        done.stdout + done.stderr)
    assert done.returncode == 1 and done.stderr.splitlines()[-1].startswith(
        "course_lib.utils.TooLargeError: ")
    assert re.search(r"batch_size 1,000,000 x block_size 16\), needs at least [\d,]+ numbers "
                     r"\(21.8 GiB in float32\), more than the [\d.]+ GiB of memory left under its "
                     r"address-space limit \(ulimit -v\): choose a "
                     "smaller batch_size", done.stderr), done.stderr


def test_hx_hugecfg_a_checkpoint_whose_config_needs_more_than_the_memory(tmp_path):
    """Row 20: a config saying n_embd=1,000,000 is refused in one line before any allocation."""
    from course_lib.checkpoint import CheckpointError, load_model

    path = _saved(tmp_path, GPT(GPTConfig(**TINY)),
                  model_config=lambda c: {**c, "n_embd": 1_000_000})
    with pytest.raises(CheckpointError, match=r"holds a gpt model too large for this machine: a "
                                              r"GPT of vocab_size 11, n_embd 1,000,000 .*use "
                                              r"another checkpoint") as raised:
        load_model(path)
    assert "\n" not in str(raised.value)


def test_unclear_checkpoint_rows_get_messages_that_name_the_problem(tmp_path):
    """s_random, hx_zero, s_badtok, s_shape, lb_missing_A (its generic part): random bytes are not
    called code, a device is not read, a bad tokenizer and a wrong shape are named in one line."""
    import os
    import pickle

    from course_lib.checkpoint import CheckpointError, load_checkpoint, load_model, load_tokenizer

    # seeded, and not starting with 0x80, a pickle's PROTO opcode: os.urandom's bytes did so once in
    # 256 runs, and a file that starts as a pickle is rightly called Python objects
    noise = random.Random(0).randbytes(5000)
    random_bytes = _file(tmp_path, "random.pt", b"\x13" + noise[1:])
    with pytest.raises(CheckpointError,
                       match="is not a checkpoint: torch.save writes a zip archive") as raised:
        load_checkpoint(random_bytes)
    assert "run as code" not in str(raised.value)
    if Path("/dev/zero").exists():
        (tmp_path / "zero_link.pt").symlink_to("/dev/zero")
        for path in ("/dev/zero", tmp_path / "zero_link.pt"):
            with pytest.raises(CheckpointError,
                               match="is not a regular file .*give the path of a ckpt.pt file"):
                load_checkpoint(path)

    class Evil:
        def __reduce__(self):
            return (os.system, ("echo owned",))

    raw = _file(tmp_path, "raw.pt", pickle.dumps(Evil()))
    with pytest.raises(CheckpointError,
                       match="was refused: it holds .*which loading could run as code"):
        load_checkpoint(raw)  # a real pickle with code is still named as such

    model = GPT(GPTConfig(**TINY))
    badtok = _saved(tmp_path, model, "badtok.pt", tokenizer=lambda t: {**t, "chars": 5})
    ckpt = load_checkpoint(badtok)
    with pytest.raises(CheckpointError,
                       match=r"holds an unusable tokenizer \(type 'char'; TypeError: .*\): the "
                                              r"checkpoint is damaged or was edited") as raised:
        load_tokenizer(ckpt, badtok)
    assert "\n" not in str(raised.value)

    shape = _saved(tmp_path, model, "shape.pt",
                   model=lambda m: {**m, "wte.weight": torch.zeros(12, 8)})
    with pytest.raises(CheckpointError,
                       match=r"does not hold usable weights: 1 of another shape \(wte.weight is "
                             r"\(12, 8\), its config builds \(11, 8\)\)") as raised:
        load_model(shape)
    assert "\n" not in str(raised.value)
    missing = _saved(tmp_path, model, "missing.pt",
                     model=lambda m: {k: v for k, v in m.items()
                                      if not k.endswith("attn.c_attn.weight")})
    with pytest.raises(CheckpointError,
                       match=r"1 tensor\(s\) missing \(blocks.0.attn.c_attn.weight\)"):
        load_model(missing)


def test_tl_missing_a_missing_checkpoint_names_every_command_that_makes_one(tmp_path):
    with pytest.raises(FileNotFoundError,
                       match="`python -m course_lib train` for a GPT, `train-dates` for an "
                                                "encoder-decoder, `finetune` to fine-tune a GPT"):
        load_checkpoint(tmp_path / "nope.pt")


def test_sp_tokhuge_sp_seedhuge_gen_tok_none_generation_bounds(model):
    tok = CharTokenizer("abcdefghijk")
    with pytest.raises(ValueError,
                       match=r"max_new_tokens must be at most 100,000 .*got 100,000,000,000"):
        generate_text(model, tok, "ab", 10**11)
    with pytest.raises(ValueError, match=r"seed must be an integer in \[0, 9223372036854775807\] "
                                         r"\(2\*\*63 - 1\), "
                                         "got 99999999999999999999999"):
        generate_text(model, tok, "ab", 3, seed=99999999999999999999999)
    with pytest.raises(TypeError, match="tokenizer must be a tokenizer with encode and decode "
                                        "methods .*got NoneType"):
        generate_text(model, None, "ab", 3)
    with pytest.raises(TypeError, match="prompt must be a string .*got list"):
        generate_text(model, tok, ["a"], 3)


def test_tl_beamhuge_a_beam_past_the_bound_is_refused():
    from course_lib.seq2seq import Seq2Seq
    from course_lib.translate import translate

    seq2seq = Seq2Seq(Seq2SeqConfig(vocab_size=12, n_embd=8, n_head=2,
                                    n_encoder_layers=1, n_decoder_layers=1))
    with pytest.raises(ValueError,
                       match=r"beam_size must be an integer >= 1 and <= 100 .*got 100000"):
        translate(seq2seq, CharTokenizer("abcdefgh"), ["abc"], beam_size=100_000)


@pytest.mark.parametrize("model_type", ["qwen2", "qwen3", "mistral"])
def test_hf_qwen_mistral_from_pretrained_names_the_architectures_that_map(model_type):
    from types import SimpleNamespace

    from course_lib.gpt2 import config_from_hf

    with pytest.raises(ValueError, match=f"got model_type '{model_type}': GPT.from_pretrained maps "
                                         "GPT-2 \\('gpt2', "
                                         r"chapter 13\) and Llama \('llama', chapter 14\) models"):
        config_from_hf(SimpleNamespace(model_type=model_type))


def _kv_model(**changes):
    torch.manual_seed(0)
    return GPT(GPTConfig(**{**TINY, "n_layer": 2, "n_embd": 16, **changes})).eval()


KV_CASES = [
    ("kv_batch", lambda m, c: (m(torch.zeros(1, 3, dtype=torch.long), cache=c),
                               m(torch.zeros(2, 1, dtype=torch.long), cache=c)),
     r"this KV cache holds batch 1, 2 key/value heads of size 8, and was given batch 2, 2 heads of "
     r"size 8: a cache "
     "serves one model and one batch; make a new KVCache"),
    ("kv_layers", lambda m, c: m(torch.zeros(1, 3, dtype=torch.long),
                                 cache=__import__("course_lib.attention").attention
                                 .KVCache(1, 8)),
     r"this KV cache has 1 layer\(s\) and the model 2: make it with KVCache\(model.config.n_layer"),
    ("kv_other_model", lambda m, c: (m(torch.zeros(1, 3, dtype=torch.long), cache=c),
                                     _kv_model(n_head=2, n_kv_head=1)(
                                         torch.zeros(1, 1, dtype=torch.long), cache=c)),
     r"holds batch 1, 2 key/value heads of size 8, and was given batch 1, 1 heads of size 8"),
    ("kv_capneg", lambda m, c: __import__("course_lib.attention").attention.KVCache(2, -5),
     r"KV cache capacity must be an integer >= 0 .*got -5"),
    ("kv_layers0", lambda m, c: __import__("course_lib.attention").attention.KVCache(0, 8),
     r"KVCache n_layer must be an integer >= 1 .*got 0"),
]


@pytest.mark.parametrize("name, call, phrase", KV_CASES, ids=[c[0] for c in KV_CASES])
def test_kv_cache_misuse_is_one_clear_error(name, call, phrase):
    from course_lib.attention import KVCache

    model = _kv_model()
    with torch.no_grad(), pytest.raises(ValueError, match=phrase) as raised:
        call(model, KVCache(2, 8))
    assert "\n" not in str(raised.value)


def test_tx_devzero_a_text_past_the_limit_or_an_endless_device_is_refused(tmp_path, monkeypatch):
    """Row 19: the text reader is bounded: a file over MAX_TEXT_BYTES is refused from its size, a
    stream while it is read, and /dev/zero at its first chunk (NUL bytes), not by the OOM killer."""
    import io
    import sys

    import course_lib.data as data

    monkeypatch.setattr(data, "MAX_TEXT_BYTES", 1000)
    monkeypatch.setattr(data, "READ_CHUNK", 64)
    big = _file(tmp_path, "big.txt", b"To be, or not to be\n" * 100)
    with pytest.raises(ValueError,
                       match=r"big.txt is larger than 9.3\d*e-07 GiB, the limit of a training text "
                                         r".*head -c 500M big.txt > part.txt"):
        read_text_file(big)
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"To be, or not to be\n" * 100)))
    with pytest.raises(ValueError, match="standard input is larger than"):
        read_text_file("-")
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"short and fine\n")))
    assert read_text_file("-") == "short and fine\n"
    if Path("/dev/zero").exists():
        with pytest.raises(ValueError, match=r"/dev/zero is not text: it holds 64 NUL bytes, the "
                                             r"first at offset 0"):
            read_text_file("/dev/zero")
