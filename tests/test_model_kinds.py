"""The interface every registered model kind keeps, run over the registry itself: a new kind is
covered as soon as its module registers it, without editing this file.

What the Trainer, the checkpoints and the CLI rely on (CONTRIBUTING.md, "Add a model kind"): the
model is built as ``Model(config)`` from a config dataclass with ``to_dict``/``from_dict``, keeps it
in ``.config``, and ``forward(x, y)`` returns ``(logits, loss)`` with logits (B, T, V); a checkpoint
stores it and gives it back bitwise; the registry finds its class by name; a class that is not
registered is refused with one clear line.

Each kind is built small from its config class's defaults, with the sizes of ``SMALL`` put in for
the fields it has; a kind that cannot be built from its config alone has a factory in ``FACTORIES``.
"""
from __future__ import annotations

import dataclasses
import importlib
import json
import pkgutil
from types import SimpleNamespace

import pytest
import torch

import course_lib
from course_lib.checkpoint import CheckpointError, load_model, model_kind, save_checkpoint
from course_lib.model import GPT, GPTConfig
from model_helpers import assert_same_weights

try:  # the registry's own module (the checkpoint format no longer holds it)
    from course_lib.registry import MODELS
except ImportError:
    from course_lib.checkpoint import MODELS


def import_every_module() -> None:
    """A kind registers when its module is imported: import every module of course_lib (the
    tools, the exercises and ``python -m course_lib`` aside; none defines a model)."""
    for module in pkgutil.walk_packages(course_lib.__path__, "course_lib."):
        if module.name.split(".")[1] not in ("tools", "exercises", "__main__"):
            importlib.import_module(module.name)


import_every_module()
KINDS = sorted(MODELS)

# Small sizes for the fields a config class has; its other fields keep their defaults.
SMALL = {"vocab_size": 13, "block_size": 8, "n_layer": 1, "n_encoder_layers": 1,
         "n_decoder_layers": 1, "n_head": 2, "n_embd": 16, "dropout": 0.0}


def small_config(config_class):
    names = {f.name for f in dataclasses.fields(config_class)}
    return config_class(**{k: v for k, v in SMALL.items() if k in names})


def small_lora(tmp_path):
    """gpt-lora: rank-2 adapters on a small GPT checkpoint, its vocabulary grown by 2 tokens
    (``from_base`` reads only the new vocabulary size from the tokenizer)."""
    base = save_checkpoint(tmp_path / "base.pt", GPT(small_config(GPTConfig)))
    return MODELS["gpt-lora"].from_base(base, SimpleNamespace(vocab_size=SMALL["vocab_size"] + 2),
                                        rank=2)


def small_int4(tmp_path):
    """gpt-int4: PyTorch's 4-bit CPU kernel takes groups of 32 weights at least, more than SMALL's
    16 channels: the smallest model it multiplies has 32."""
    config = small_config(GPTConfig).to_dict() | {"n_embd": 32}
    return MODELS["gpt-int4"](MODELS["gpt-int4"].config_class(**config))


# kind -> (tmp_path -> a small model of that kind)
FACTORIES = {"gpt-lora": small_lora, "gpt-int4": small_int4}


def build(kind: str, tmp_path):
    """A small, freshly initialised model of ``kind``, in eval mode."""
    torch.manual_seed(0)
    cls = MODELS[kind]
    if kind in FACTORIES:
        model = FACTORIES[kind](tmp_path)
    else:
        try:
            config = small_config(cls.config_class)
        except (TypeError, ValueError) as e:
            pytest.fail(f"model kind {kind!r}: {cls.config_class.__name__}'s defaults with the "
                        f"sizes of SMALL do not make a config ({e}): add a factory for {kind!r} to "
                        "FACTORIES")
        model = cls(config)
    assert type(model) is cls, f"the factory of {kind!r} built a {type(model).__name__}"
    return model.eval()


def batch(model, B: int = 3):
    """(x, y): B windows of block_size random token ids, inputs and targets."""
    g = torch.Generator().manual_seed(1)
    V, T = model.config.vocab_size, model.config.block_size
    return torch.randint(0, V, (B, T), generator=g), torch.randint(0, V, (B, T), generator=g)


def test_the_registry_holds_the_kinds_of_the_chapters_and_every_factory_is_a_kind():
    # bigram (chapter 2), gpt (6), seq2seq (11), gpt-lora (15): at least these, once every module is
    # imported
    assert {"bigram", "gpt", "seq2seq", "gpt-lora"} <= set(KINDS)
    assert set(FACTORIES) <= set(KINDS), ("factories of kinds nobody registers: "
                                          f"{set(FACTORIES) - set(KINDS)}")


@pytest.mark.parametrize("kind", KINDS)
def test_built_from_its_config_which_round_trips_through_a_dict(kind, tmp_path):
    model = build(kind, tmp_path)
    config = model.config
    assert type(config) is MODELS[kind].config_class
    stored = json.loads(json.dumps(config.to_dict()))  # what a checkpoint keeps: plain JSON values
    assert type(config).from_dict(stored) == config


@pytest.mark.parametrize("kind", KINDS)
def test_forward_gives_logits_for_every_position_and_a_loss_that_trains_it(kind, tmp_path):
    model = build(kind, tmp_path).train()
    x, y = batch(model)
    logits, loss = model(x, y)
    assert logits.shape == (*x.shape, model.config.vocab_size)  # (B, T, V)
    assert loss.shape == () and torch.isfinite(loss)
    loss.backward()
    trained = [name for name, p in model.named_parameters() if p.requires_grad]
    assert trained, f"{kind}: nothing to train"
    no_gradient = [name for name,
                   p in model.named_parameters() if p.requires_grad and p.grad is None]
    assert not no_gradient, f"{kind}: the loss does not reach {no_gradient}"


@pytest.mark.parametrize("kind", KINDS)
def test_a_checkpoint_gives_it_back_bitwise(kind, tmp_path):
    model = build(kind, tmp_path)
    x, y = batch(model)
    with torch.no_grad():
        logits = model(x, y)[0]
    loaded, ckpt = load_model(save_checkpoint(tmp_path / "ckpt.pt", model))
    assert (ckpt["model_kind"] == kind and type(loaded) is type(model)
            and loaded.config == model.config)
    assert_same_weights(model, loaded)
    with torch.no_grad():
        assert torch.equal(loaded(x, y)[0], logits)


@pytest.mark.parametrize("kind", KINDS)
def test_the_registry_finds_its_class_by_name(kind, tmp_path):
    model = build(kind, tmp_path)
    assert model_kind(model) == kind and MODELS[kind] is type(model)


@pytest.mark.parametrize("kind", KINDS)
def test_an_unregistered_subclass_is_refused_in_one_line_and_nothing_is_written(kind, tmp_path):
    model = build(kind, tmp_path)
    # same weights, no name
    model.__class__ = type(f"Unregistered{type(model).__name__}", (type(model),), {})
    before = set(tmp_path.iterdir())
    with pytest.raises(CheckpointError,
                       match=r"Unregistered\w+ is not a registered model kind") as refused:
        save_checkpoint(tmp_path / "ckpt.pt", model)
    assert "register_model" in str(refused.value) and "\n" not in str(refused.value)
    assert set(tmp_path.iterdir()) == before


def test_assert_same_weights_tells_a_changed_a_missing_and_a_retyped_tensor():
    """The helper the round trip above relies on can fail, for each way two models can differ."""
    a = {"w": torch.zeros(2), "b": torch.ones(1)}
    assert_same_weights(a, {k: v.clone() for k, v in a.items()})
    for other in ({"w": torch.tensor([0.0, 1e-30]), "b": torch.ones(1)}, {"w": torch.zeros(2)},
                  {"w": torch.zeros(2, dtype=torch.float64), "b": torch.ones(1)}):
        with pytest.raises(AssertionError):
            assert_same_weights(a, other)
