"""The interface test over every registered kind of run (course_lib.runs.KINDS): each kind's
smallest run (``RunKind.example``) trained straight through equals the same run stopped by a real
Ctrl-C between two steps and resumed from its checkpoint, bit for bit (weights and history); its
checkpoint is refused by another kind; a precision the device lacks is refused before any work; the
command line knows the kind. A new kind is covered by being registered."""
from __future__ import annotations

import signal
from dataclasses import replace

import pytest
import torch

from course_lib import align
from course_lib._signals import TrainingInterrupted
from course_lib.cli import build_parser
from course_lib.runs import KINDS, resume, start

STOP = 2  # the step during which Ctrl-C arrives: the run saves after it and stops


@pytest.fixture(autouse=True)
def few_eval_items(monkeypatch):
    """DPO and GRPO answer 8 prompts per split at each evaluation, not 100: fast tests."""
    monkeypatch.setattr(align, "EVAL_ITEMS", 8)


def ctrl_c_during_step(trainer, step: int) -> None:
    """A real SIGINT to this process while ``trainer`` draws the batch of step ``step`` (numbered
    from 1): its handler lets the step finish, saves, and stops the run."""
    draw = trainer.batch_fn

    def batch_fn(split, generator):
        if split == "train" and trainer.step == step - 1:
            signal.raise_signal(signal.SIGINT)
        return draw(split, generator)

    trainer.batch_fn = batch_fn


def same_weights(a, b) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a.model.state_dict().values(),
                                                 b.model.state_dict().values()))


def straight_equals_cut_and_resumed(name, settings, options, tmp_path):
    quiet = dict(device="cpu", progress=False, verbose=False)
    straight = start(name, settings, out_dir=tmp_path / "straight", **quiet, **options)
    straight.train()
    cut = start(name, settings, out_dir=tmp_path / "cut", **quiet, **options)
    ctrl_c_during_step(cut, STOP)
    with pytest.raises(TrainingInterrupted):
        cut.train()
    del cut
    torch.manual_seed(12345)  # a new process: torch's global generator is elsewhere
    # the same options, as --resume
    resumed = resume(name, tmp_path / "cut" / "ckpt.pt", **quiet, **options)
    assert resumed.step == STOP and resumed.trained_on["command"] == name
    resumed.train()
    assert resumed.step == straight.step == straight.config.max_iters > STOP
    assert same_weights(straight, resumed) and resumed.history == straight.history
    return resumed


@pytest.mark.parametrize("name", sorted(KINDS))
def test_every_kind_stopped_by_ctrl_c_resumes_bit_for_bit(name, tmp_path):
    settings, options = KINDS[name].example(tmp_path)
    straight_equals_cut_and_resumed(name, settings, options, tmp_path)


def test_train_reaches_the_hybrid_kind_and_resumes_bit_for_bit(tmp_path):
    """Chapter 24's model kind through `train`: its preset, its config's fields as --set
    settings."""
    settings, options = KINDS["train"].example(tmp_path)
    settings = ({k: v for k, v in settings.items() if k != "n_layer"}
                | {"n_layer": 2, "layers": "LA", "chunk_size": 8})
    resumed = straight_equals_cut_and_resumed("train", settings,
                                              options | {"preset": "shakespeare-char-hybrid"},
                                              tmp_path)
    assert type(resumed.model).__name__ == "HybridGPT" and resumed.model.config.layer_kinds == "LA"


@pytest.mark.parametrize("name", sorted(KINDS))
def test_a_checkpoint_of_one_kind_is_refused_by_every_other(name, tmp_path):
    settings, options = KINDS[name].example(tmp_path)
    run = start(name, {**settings, "max_iters": 1}, out_dir=tmp_path / "run", device="cpu",
                progress=False, verbose=False, **options)
    run.train()
    for other in sorted(set(KINDS) - {name}):
        with pytest.raises(ValueError, match=f"made by `{name}`, not `{other}`: resume it with "
                                             f"`python -m course_lib {name}"):
            resume(other, tmp_path / "run" / "ckpt.pt", device="cpu", progress=False)


@pytest.mark.parametrize("name", sorted(KINDS))
def test_a_precision_the_device_lacks_is_refused_before_any_work(name, tmp_path, monkeypatch):
    settings, options = KINDS[name].example(tmp_path)

    def build(*args, **kwargs):
        raise AssertionError("the run was built before its precision was checked")

    monkeypatch.setitem(KINDS, name, replace(KINDS[name], build=build))
    with pytest.raises(ValueError, match="fp16"):
        start(name, {**settings, "dtype": "fp16"}, device="cpu", progress=False, **options)


@pytest.mark.parametrize("name", sorted(KINDS))
def test_the_command_line_takes_every_kind_with_its_options(name):
    """Each kind's options are its command's arguments (their ``dest``), and its command runs
    through the one body of every training command."""
    parser = build_parser()
    args = parser.parse_args([name])
    assert args.func.__name__ == "cmd_run"
    assert all(hasattr(args, option) for option in KINDS[name].options + KINDS[name].report_options)


def test_a_misspelt_option_is_refused_naming_the_kinds_options(tmp_path):
    with pytest.raises(TypeError, match="finetune runs take no option lora_rnak .*lora_rank"):
        start("finetune", lora_rnak=4)
