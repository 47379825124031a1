"""course_lib.checkpoint: the one checkpoint format (atomic, versioned, safe to load) and the
registries that bring back any model kind and any tokenizer."""
import pytest
import torch
import torch.nn as nn

from course_lib.bigram import BigramConfig, BigramLanguageModel
from course_lib.checkpoint import (FORMAT, FORMAT_VERSION, CheckpointError, load_checkpoint,
                                   load_model, load_tokenizer, restore_rng, rng_state,
                                   save_checkpoint, unwrap, unwrapped_state_dict, write_atomic)
from course_lib.data import load_text, train_val_split
from course_lib.model import GPT, GPTConfig
from course_lib.registry import MODELS, register_model
from course_lib.tokenizers import CharTokenizer
from course_lib.train import TrainConfig, Trainer
from model_helpers import assert_same_weights

TEXT = load_text()[:20_000]
TOK = CharTokenizer.from_text(TEXT)
TRAIN, VAL = train_val_split(torch.tensor(TOK.encode(TEXT)))


@pytest.fixture
def model(tiny_model):
    return lambda seed=0, **changes: tiny_model(seed, **{"vocab_size": TOK.vocab_size, "n_embd": 32,
                                                         **changes})


def tiny_train_config(**kw):
    return TrainConfig(**{**dict(max_iters=30, batch_size=8, learning_rate=3e-3, warmup_iters=5,
                                 eval_interval=10, eval_iters=4), **kw})


def test_checkpoint_is_written_atomically(tmp_path, monkeypatch, tiny_model):
    path = tmp_path / "ckpt.pt"
    model = tiny_model()
    save_checkpoint(path, model, step=1)

    def crash(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(torch, "save", crash)
    with pytest.raises(RuntimeError, match="disk full"):
        save_checkpoint(path, model, step=2)
    assert load_checkpoint(path)["step"] == 1  # the old checkpoint survives
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt.pt"]  # no temporary file left behind


def test_missing_truncated_and_foreign_checkpoints_are_clear_errors(tmp_path, model):
    with pytest.raises(FileNotFoundError, match="no checkpoint at .*train one first"):
        load_checkpoint(tmp_path / "nope.pt")
    trainer = Trainer(model(), TRAIN, VAL, tiny_train_config(max_iters=2), out_dir=tmp_path,
                      progress=False)
    trainer.train()
    good = (tmp_path / "ckpt.pt").read_bytes()
    truncated = tmp_path / "truncated.pt"
    truncated.write_bytes(good[: len(good) // 2])
    with pytest.raises(CheckpointError, match="truncated or corrupt"):
        load_checkpoint(truncated)
    foreign = tmp_path / "foreign.pt"
    torch.save({"weights": torch.zeros(2)}, foreign)
    with pytest.raises(CheckpointError, match="not a course_lib checkpoint"):
        load_checkpoint(foreign)


def test_checkpoint_from_a_different_config_names_the_difference(tmp_path, model):
    trainer = Trainer(model(), TRAIN, VAL, tiny_train_config(max_iters=2), out_dir=tmp_path,
                      progress=False)
    trainer.train()
    three_layers = GPT(GPTConfig(vocab_size=TOK.vocab_size, block_size=16, n_layer=3, n_head=2,
                                 n_embd=32))
    other = Trainer(three_layers, TRAIN, VAL, tiny_train_config(), progress=False)
    with pytest.raises(CheckpointError, match="n_layer: checkpoint 2, model 3"):
        other.load_state(load_checkpoint(tmp_path / "ckpt.pt"), tmp_path / "ckpt.pt")
    loaded, ckpt = load_model(tmp_path / "ckpt.pt")  # the checkpoint's own config always works
    assert loaded.config.n_layer == 2 and not loaded.training


def test_a_checkpoint_holds_everything_a_run_needs(tmp_path, model):
    trainer = Trainer(model(), TRAIN, VAL, tiny_train_config(max_iters=3), out_dir=tmp_path,
                      tokenizer=TOK, progress=False)
    trainer.train()
    ckpt = load_checkpoint(tmp_path / "ckpt.pt")
    assert ckpt["format"] == FORMAT and ckpt["version"] == FORMAT_VERSION
    assert ckpt["model_kind"] == "gpt" and ckpt["model_config"] == trainer.model.config.to_dict()
    assert ckpt["tokenizer"] == TOK.to_dict() and ckpt["train_config"]["max_iters"] == 3
    assert ckpt["step"] == 3 and len(ckpt["history"]["loss"]) == 3
    assert set(ckpt["rng"]) == {"torch", "generator", "cuda"} and ckpt["optimizer"]["state"]
    # the batch stream, as it is now
    assert torch.equal(ckpt["rng"]["generator"], trainer.generator.get_state())


def test_the_rng_part_round_trips(tmp_path, tiny_model):
    """checkpoint.py builds and reads the whole "rng" field: torch's global state and one batch
    stream per micro-batch (several under gradient accumulation)."""
    streams = [torch.Generator().manual_seed(s) for s in (1, 2, 3)]
    for g in streams:
        torch.rand(5, generator=g)
    torch.manual_seed(42)
    path = save_checkpoint(tmp_path / "r.pt", tiny_model(),
                           batch_streams=[g.get_state() for g in streams])
    expected_next = torch.rand(3)  # what the global generator draws after the save
    torch.manual_seed(7)  # the world moves on
    saved = restore_rng(load_checkpoint(path)["rng"])
    assert torch.equal(torch.rand(3), expected_next)
    assert len(saved) == 3 and all(torch.equal(a, b.get_state()) for a, b in zip(saved, streams))
    one = rng_state([streams[0].get_state()])
    assert "streams" not in one and restore_rng(one)[0] is one["generator"]
    # a model alone
    assert load_checkpoint(save_checkpoint(tmp_path / "m.pt", tiny_model()))["rng"] is None


def test_another_version_is_refused_with_what_to_do(tmp_path, tiny_model):
    path = save_checkpoint(tmp_path / "new.pt", tiny_model())
    ckpt = torch.load(path, weights_only=True)
    write_atomic(tmp_path / "future.pt", {**ckpt, "version": FORMAT_VERSION + 1})
    with pytest.raises(CheckpointError, match=f"format version {FORMAT_VERSION + 1}.*reads version "
                                              f"{FORMAT_VERSION}"):
        load_checkpoint(tmp_path / "future.pt")
    old = {k: v for k, v in ckpt.items() if k not in ("version", "model_kind")}
    write_atomic(tmp_path / "old.pt", {**old, "format": "course_lib-checkpoint-v1"})
    with pytest.raises(CheckpointError, match=r"format version 1.*Train the run again.*0\.1\.x"):
        load_checkpoint(tmp_path / "old.pt")


def test_any_registered_model_kind_comes_back(tmp_path, tiny_model):
    for original in (tiny_model(), BigramLanguageModel(BigramConfig(vocab_size=7, block_size=4))):
        path = save_checkpoint(tmp_path / f"{type(original).__name__}.pt", original)
        loaded, ckpt = load_model(path)
        assert type(loaded) is type(original) and loaded.config == original.config
        assert_same_weights(original, loaded)
    assert {"gpt", "bigram"} <= set(MODELS)


def test_unknown_and_unregistered_model_kinds_are_clear_errors(tmp_path, tiny_model):
    class Mystery(nn.Module):
        config = GPTConfig()

    with pytest.raises(CheckpointError,
                       match="Mystery is not a registered model kind.*registry.register_model"):
        save_checkpoint(tmp_path / "x.pt", Mystery())
    ckpt = torch.load(save_checkpoint(tmp_path / "gpt.pt", tiny_model()), weights_only=True)
    write_atomic(tmp_path / "alien.pt", {**ckpt, "model_kind": "alien"})
    with pytest.raises(CheckpointError, match="kind 'alien', which this course_lib does not know"):
        load_model(tmp_path / "alien.pt")
    with pytest.raises(ValueError, match="already registered"):
        register_model("gpt", GPTConfig)(Mystery)


def test_the_tokenizer_comes_back_through_its_registry(tmp_path, tiny_model):
    path = save_checkpoint(tmp_path / "with.pt", tiny_model(), tokenizer=TOK)
    tok = load_tokenizer(load_checkpoint(path), path)
    assert type(tok) is CharTokenizer and tok.encode("To be") == TOK.encode("To be")
    bare = save_checkpoint(tmp_path / "without.pt", tiny_model())
    with pytest.raises(CheckpointError, match="stores no tokenizer"):
        load_tokenizer(load_checkpoint(bare), bare)


def test_wrappers_are_saved_as_the_model_inside(tmp_path, tiny_model):
    inner = tiny_model()

    class Wrapper(nn.Module):  # what DistributedDataParallel looks like from outside
        def __init__(self, module):
            super().__init__()
            self.module = module

    assert unwrap(Wrapper(inner)) is inner
    path = save_checkpoint(tmp_path / "wrapped.pt", Wrapper(inner))
    assert not any(k.startswith("module.") for k in load_checkpoint(path)["model"])


def test_wrapped_state_dicts_load_unwrapped(tmp_path, tiny_model):
    """A state dict saved by other code from a DDP- and compile-wrapped model ("module._orig_mod."
    prefixes) loads into the plain model."""
    model = tiny_model()
    state = {f"module._orig_mod.{k}": v for k, v in model.state_dict().items()}
    assert unwrapped_state_dict(state).keys() == model.state_dict().keys()
    save_checkpoint(tmp_path / "ckpt.pt", model)
    ckpt = torch.load(tmp_path / "ckpt.pt", weights_only=False)
    ckpt["model"] = state
    torch.save(ckpt, tmp_path / "foreign.pt")
    loaded, _ = load_model(tmp_path / "foreign.pt")
    assert_same_weights(model, loaded)
