"""course_lib.train: the training engine (chapters 2, 7): losses go down, runs resume bit for bit
after a save or a Ctrl-C, checkpoints are written when they should be."""
import math
import os
import signal

import pytest
import torch

from course_lib._signals import TrainingInterrupted
from course_lib.checkpoint import load_checkpoint
from course_lib.data import load_text, train_val_split
from course_lib.tokenizers import CharTokenizer
from course_lib.optim import configure_optimizer, cosine_lr, lr_at, transformer_lr
from course_lib.train import TrainConfig, Trainer
from model_helpers import assert_same_weights

TEXT = load_text()[:20_000]
TOK = CharTokenizer.from_text(TEXT)
TRAIN, VAL = train_val_split(torch.tensor(TOK.encode(TEXT)))


@pytest.fixture
def model(tiny_model):
    """A tiny GPT for the training text: ``model(seed=0, **changes)``."""
    return lambda seed=0, **changes: tiny_model(seed, **{"vocab_size": TOK.vocab_size, "n_embd": 32,
                                                         "dropout": 0.1, **changes})


def tiny_train_config(**kw):
    defaults = dict(max_iters=30, batch_size=8, learning_rate=3e-3, warmup_iters=5,
                    eval_interval=10, eval_iters=4)
    return TrainConfig(**{**defaults, **kw})


def test_training_a_tiny_model_lowers_the_loss(model):
    trainer = Trainer(model(), TRAIN, VAL, tiny_train_config(max_iters=60), progress=False)
    history = trainer.train()
    assert history["eval_step"] == [0, 10, 20, 30, 40, 50, 60]
    assert history["val_loss"][0] > math.log(TOK.vocab_size) - 0.3
    assert history["train_loss"][-1] < history["train_loss"][0] - 0.5
    assert len(history["loss"]) == len(history["lr"]) == 60


def test_verbose_false_trains_silently_and_keeps_the_history(model, capsys):
    config = tiny_train_config(max_iters=20)
    loud = Trainer(model(), TRAIN, VAL, config, progress=False).train()
    assert capsys.readouterr().out.count("val loss") == 3  # steps 0, 10, 20
    quiet = Trainer(model(), TRAIN, VAL, config, progress=False, verbose=False).train()
    assert capsys.readouterr().out == ""
    assert quiet == loud


def test_resume_gives_exactly_the_weights_of_an_uninterrupted_run(model, tmp_path):
    config = tiny_train_config()
    straight = Trainer(model(), TRAIN, VAL, config, progress=False)
    straight.train()

    interrupted = Trainer(model(), TRAIN, VAL, config, out_dir=tmp_path, progress=False)
    interrupted.train(until=13)  # stop mid-way, between evaluations
    interrupted.save()
    torch.manual_seed(999)  # the world moves on: the global RNG is disturbed before resuming
    torch.randn(100)
    resumed = Trainer.resume(tmp_path / "ckpt.pt", train_data=TRAIN, val_data=VAL, progress=False)
    assert resumed.step == 13
    resumed.train()

    assert_same_weights(straight.model, resumed.model)
    assert straight.history == resumed.history


def test_ctrl_c_mid_step_finishes_the_step_saves_and_resumes_exactly(model, tmp_path, monkeypatch):
    """A real SIGINT delivered in the middle of a step (between backward and the optimizer
    step): the step completes, the state of step 17 is saved, and resuming it gives exactly
    the uninterrupted run."""
    config = tiny_train_config(checkpoint_interval=10)
    straight = Trainer(model(), TRAIN, VAL, config, progress=False)
    straight.train()

    trainer = Trainer(model(), TRAIN, VAL, config, out_dir=tmp_path, progress=False)
    real_clip = torch.nn.utils.clip_grad_norm_

    def clip_then_interrupt(*args, **kwargs):
        if trainer.step == 16:  # inside the 17th step
            os.kill(os.getpid(), signal.SIGINT)
        return real_clip(*args, **kwargs)

    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", clip_then_interrupt)
    # the handler this process had: Python's own, or SIG_IGN where the test run was started as a
    # background job of a non-interactive shell (found by a clean-clone CI run started so)
    before = signal.getsignal(signal.SIGINT)
    with pytest.raises(TrainingInterrupted) as stopped:
        trainer.train()
    monkeypatch.undo()
    assert stopped.value.signum == signal.SIGINT and isinstance(stopped.value, KeyboardInterrupt)
    assert load_checkpoint(tmp_path / "ckpt.pt")["step"] == 17  # nothing lost
    assert signal.getsignal(signal.SIGINT) is before  # handler restored

    resumed = Trainer.resume(tmp_path / "ckpt.pt", train_data=TRAIN, val_data=VAL, progress=False)
    resumed.train()
    assert_same_weights(straight.model, resumed.model)
    assert straight.history == resumed.history


def test_periodic_checkpoints_are_on_by_default(model, tmp_path, monkeypatch):
    saved_at = []
    trainer = Trainer(model(), TRAIN, VAL, tiny_train_config(), out_dir=tmp_path, progress=False)
    real_save = trainer.save
    monkeypatch.setattr(trainer, "save", lambda *a: saved_at.append(trainer.step) or real_save(*a))
    trainer.train()
    assert saved_at == [10, 20, 30]  # at every evaluation (eval_interval 10), the end included once
    assert TrainConfig(checkpoint_interval=0).save_every == 0


def test_weight_decay_applies_to_matrices_only(model):
    model = model()
    opt = configure_optimizer(model, TrainConfig(weight_decay=0.1))
    decay, no_decay = opt.param_groups
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    assert (all(p.dim() == 2 for p in decay["params"])
            and all(p.dim() == 1 for p in no_decay["params"]))
    assert sum(p.numel() for g in opt.param_groups for p in g["params"]) == model.num_parameters()


def test_schedules():
    assert cosine_lr(0, 1e-3, 1e-4, 100, 2000) == pytest.approx(1e-3 / 101)
    assert cosine_lr(100, 1e-3, 1e-4, 100, 2000) == pytest.approx(1e-3)
    assert cosine_lr(1050, 1e-3, 1e-4, 100, 2000) == pytest.approx(5.5e-4)
    assert cosine_lr(2000, 1e-3, 1e-4, 100, 2000) == pytest.approx(1e-4)
    # The 2017 schedule peaks at step = warmup with lr = C^-0.5 * warmup^-0.5.
    peak = max(range(1, 10_000), key=lambda s: transformer_lr(s - 1, 512, 4000))
    assert peak == 4000
    assert transformer_lr(3999, 512, 4000) == pytest.approx(512**-0.5 * 4000**-0.5)
    assert lr_at(5, TrainConfig(schedule="constant", learning_rate=0.5)) == 0.5
    with pytest.raises(ValueError, match="schedule"):
        TrainConfig(schedule="linear")


def test_a_resume_from_a_checkpoint_already_read_does_not_read_it_again(model, tmp_path,
                                                                        monkeypatch):
    config = tiny_train_config(max_iters=6)
    straight = Trainer(model(), TRAIN, VAL, config, progress=False, verbose=False)
    straight.train()
    first = Trainer(model(), TRAIN, VAL, config, out_dir=tmp_path, progress=False, verbose=False)
    first.train(until=3)
    ckpt = load_checkpoint(tmp_path / "ckpt.pt")
    reads = []
    real_load = torch.load
    monkeypatch.setattr(torch, "load", lambda *a, **k: reads.append(a) or real_load(*a, **k))
    resumed = Trainer.resume(tmp_path / "ckpt.pt", train_data=TRAIN, val_data=VAL, progress=False,
                             verbose=False, checkpoint=ckpt)
    assert reads == [] and resumed.step == 3
    resumed.train()
    assert resumed.history == straight.history


def test_a_batch_too_large_is_refused_before_the_first_step(monkeypatch):
    """Review 2026-11-28 R1 (rows 8-11, 29): batch_size has a bound, and a Trainer of a GPT checks
    its step's activations against the memory (here 4 GiB) before anything is drawn."""
    from course_lib import utils
    from course_lib.model import GPT, GPTConfig
    from course_lib.utils import TooLargeError

    with pytest.raises(ValueError,
                       match=r"batch_size must be an integer in \[1, 1e\+06\], got 1000000000"):
        TrainConfig(batch_size=10**9)
    monkeypatch.setattr(utils, "available_memory", lambda: (4 * 2**30, "available on this machine"))
    model = GPT(GPTConfig(vocab_size=10, block_size=64, n_layer=1, n_head=2, n_embd=16))
    data = torch.randint(0, 10, (500,))
    with pytest.raises(TooLargeError, match=r"a training step's activations \(batch_size 100,000 x "
                                            r"block_size 64\)"):
        Trainer(model, data, data, TrainConfig(batch_size=100_000))
    Trainer(model, data, data, TrainConfig(batch_size=64), progress=False)  # a usual batch fits
