"""Chapter 12: gradient accumulation, mixed precision, torch.compile, and data-parallel training with
torchrun (2 CPU processes, gloo) equal to one process with accumulation over the same global batch."""
import os
import signal
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from course_lib import GPT, GPTConfig
from course_lib import distributed, train
from course_lib.checkpoint import load_checkpoint, load_model, save_checkpoint, unwrapped_state_dict
from course_lib.train import Trainer, TrainConfig
from model_helpers import assert_same_weights

ROOT = Path(__file__).resolve().parents[1]
TINY = GPTConfig(vocab_size=11, block_size=8, n_layer=1, n_head=2, n_embd=16)
DATA = torch.randint(0, 11, (400,), generator=torch.Generator().manual_seed(0))


def tiny_trainer(**train_options):
    torch.manual_seed(0)
    options = dict(max_iters=8, batch_size=4, eval_interval=100, eval_iters=1, learning_rate=3e-3, warmup_iters=0)
    options.update(train_options)
    return Trainer(GPT(TINY), DATA[:300], DATA[300:], TrainConfig(**options), progress=False)


def grads(model):
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


# --- gradient accumulation -----------------------------------------------------------------


@pytest.mark.parametrize("micro, B", [(2, 3), (4, 2), (3, 5)])
def test_accumulation_is_the_gradient_of_the_big_batch(micro, B):
    g = torch.Generator().manual_seed(micro)
    batches = [(torch.randint(0, 11, (B, 8), generator=g), torch.randint(0, 11, (B, 8), generator=g))
               for _ in range(micro)]
    accumulating = tiny_trainer(grad_accum_steps=micro, batch_size=B)
    big = tiny_trainer(batch_size=micro * B)
    big.model.load_state_dict(accumulating.model.state_dict())
    loss_small = accumulating.forward_backward(batches)
    x, y = torch.cat([b[0] for b in batches]), torch.cat([b[1] for b in batches])
    loss_big = big.forward_backward([(x, y)])
    assert loss_small == pytest.approx(loss_big, rel=1e-6)
    small_grads, big_grads = grads(accumulating.model), grads(big.model)
    assert small_grads.keys() == big_grads.keys()
    for name in big_grads:
        torch.testing.assert_close(small_grads[name], big_grads[name], rtol=1e-5, atol=1e-7)


def test_micro_batch_streams():
    one, two = tiny_trainer(), tiny_trainer(grad_accum_steps=2)
    assert len(one.generators) == 1 and len(two.generators) == 2
    # the first micro-batch stream is the stream of a run without accumulation
    assert torch.equal(one.generator.get_state(), two.generators[0].get_state())
    assert not torch.equal(two.generators[0].get_state(), two.generators[1].get_state())
    assert distributed.batch_stream_seed(1337, 0) == 1337


def test_accumulation_run_resumes_exactly(tmp_path):
    full = tiny_trainer(grad_accum_steps=2)
    full.train()
    half = Trainer(GPT(TINY), DATA[:300], DATA[300:], replace(full.config), out_dir=tmp_path, progress=False)
    torch.manual_seed(0)
    half.model.load_state_dict(GPT(TINY).state_dict())
    half.train(until=4)
    again = Trainer.resume(tmp_path / "ckpt.pt", train_data=DATA[:300], val_data=DATA[300:], progress=False)
    assert len(load_checkpoint(tmp_path / "ckpt.pt")["rng"]["streams"]) == 2
    again.train()
    assert_same_weights(full.model, again.model)


def test_more_processes_than_micro_batches_is_a_clear_error():
    assert distributed.local_micro_batches(4, 2) == 2
    with pytest.raises(ValueError, match=r"grad_accum_steps \(1\) must be a multiple of the number of processes "
                                         r"\(2\).*--set grad_accum_steps=2"):
        distributed.local_micro_batches(1, 2)
    with pytest.raises(ValueError, match="grad_accum_steps=6"):
        distributed.local_micro_batches(7, 3)
    with pytest.raises(ValueError, match="grad_accum_steps must be an integer >= 1, got 0"):
        TrainConfig(grad_accum_steps=0)


# --- precision and compile -------------------------------------------------------------------


def test_fp16_on_cpu_is_a_clear_error():
    with pytest.raises(ValueError, match="'fp16' needs a CUDA GPU.*bf16"):
        tiny_trainer(dtype="fp16")
    with pytest.raises(ValueError, match="dtype must be one of 'fp32', 'bf16', 'fp16', got 'float16'"):
        TrainConfig(dtype="float16")


def test_fp16_on_cpu_from_the_command_line(capsys, tmp_path):
    from course_lib.cli import main

    assert main(["train", "--dtype", "fp16", "--device", "cpu", "--out", str(tmp_path / "run")]) == 2
    assert "'fp16' needs a CUDA GPU" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_bf16_autocast_on_cpu_is_close_to_fp32():
    fp32, bf16 = tiny_trainer(max_iters=20), tiny_trainer(max_iters=20, dtype="bf16")
    h32, h16 = fp32.train(), bf16.train()
    assert next(bf16.model.parameters()).dtype == torch.float32  # autocast keeps fp32 weights
    assert h16["loss"] != h32["loss"]  # it really ran in bf16
    for a, b in zip(h32["loss"], h16["loss"]):
        assert abs(a - b) < 0.05
    assert abs(h32["val_loss"][-1] - h16["val_loss"][-1]) < 0.05


def test_compile_on_cpu_gives_the_same_losses():
    eager, compiled = tiny_trainer(max_iters=2), tiny_trainer(max_iters=2, compile=True)
    assert compiled.train_model is not compiled.model  # the OptimizedModule wrapping it
    h_eager, h_compiled = eager.train(), compiled.train()
    assert h_compiled["loss"] == pytest.approx(h_eager["loss"], rel=1e-4)
    assert not compiled._compile_unproven and compiled.train_model is not compiled.model


def test_compile_failure_falls_back_to_eager(monkeypatch, capsys):
    class Broken(torch.nn.Module):
        def forward(self, *args, **kwargs):
            raise RuntimeError("no C compiler found (simulated)")

    monkeypatch.setattr(train.torch, "compile", lambda model: Broken())
    eager, fallback = tiny_trainer(max_iters=3), tiny_trainer(max_iters=3, compile=True)
    assert fallback.train()["loss"] == eager.train()["loss"]
    out = capsys.readouterr().out
    assert "torch.compile could not compile this model here (RuntimeError: no C compiler" in out
    assert "continues without it" in out and fallback.train_model is fallback.model

    def unavailable(model):
        raise RuntimeError("torch.compile is not supported on this Python")

    monkeypatch.setattr(train.torch, "compile", unavailable)
    unavailable_here = tiny_trainer(compile=True)
    assert unavailable_here.train_model is unavailable_here.model  # trains the eager model
    assert "torch.compile is not available here" in capsys.readouterr().out


def test_a_real_error_is_not_hidden_by_the_compile_fallback():
    trainer = tiny_trainer(compile=True)
    trainer.train_model = trainer.model
    trainer.batch_fn = lambda split, g: (torch.zeros(2, 8, dtype=torch.long), torch.zeros(2, 9, dtype=torch.long))
    with pytest.raises(ValueError, match=r"targets must have the shape of idx \(2, 8\), got \(2, 9\)"):
        trainer.train_step()


# --- checkpoints with and without DDP --------------------------------------------------------


def test_wrapped_state_dicts_load_unwrapped(tmp_path):
    model = GPT(TINY)
    state = {f"module._orig_mod.{k}": v for k, v in model.state_dict().items()}
    assert unwrapped_state_dict(state).keys() == model.state_dict().keys()
    save_checkpoint(tmp_path / "ckpt.pt", model)
    ckpt = torch.load(tmp_path / "ckpt.pt", weights_only=False)
    ckpt["model"] = state
    torch.save(ckpt, tmp_path / "foreign.pt")
    loaded, _ = load_model(tmp_path / "foreign.pt")
    assert_same_weights(model, loaded)


def test_mfu_only_on_a_known_gpu():
    from course_lib.sizing import flops_per_token, gpu_peak_flops, model_flops_utilization

    assert gpu_peak_flops("cpu") is None
    assert model_flops_utilization(TINY, 1e6, "cpu") is None
    trainer = tiny_trainer(max_iters=3)
    trainer.train()
    assert trainer.tokens_per_s > 0 and trainer.mfu is None
    assert flops_per_token(TINY) > 0


# --- torchrun: 2 processes on CPU (gloo) --------------------------------------------------------

TINY_RUN = ["--preset", "shakespeare-char-cpu", "--device", "cpu", "--set", "n_layer=1", "--set", "n_embd=32",
            "--set", "n_head=2", "--set", "block_size=16", "--set", "batch_size=4", "--set", "grad_accum_steps=2",
            "--set", "eval_interval=3", "--set", "eval_iters=2", "--set", "warmup_iters=2"]


def run(args, torchrun=False):
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")  # torchrun gives each worker 1 thread
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"] if torchrun \
        else [sys.executable]
    # a session of its own, so that a hang kills torchrun's workers too
    process = subprocess.Popen(launcher + ["-m", "course_lib", "train", *TINY_RUN, *args], env=env, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        stdout, stderr = process.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        stdout, stderr = process.communicate()
        pytest.fail("the run did not finish in 300 s:\n" + stdout[-2000:] + stderr[-3000:])
    assert process.returncode == 0, stdout[-2000:] + stderr[-3000:]
    return stdout


def assert_close_checkpoints(a, b):
    """Two runs' weights, equal up to the order in which their gradients were summed."""
    assert_same_weights(load_checkpoint(a)["model"], load_checkpoint(b)["model"], rtol=1e-5, atol=1e-7)


@pytest.mark.slow  # starts torchrun three times
@pytest.mark.skipif(not torch.distributed.is_available() or not torch.distributed.is_gloo_available(),
                    reason="torch.distributed with gloo is not available in this build of PyTorch")
def test_torchrun_two_processes_equal_one_process_with_accumulation(tmp_path):
    # one process, accumulating 2 micro-batches per step: the reference
    run(["--max-iters", "6", "--out", str(tmp_path / "single")])
    # 2 processes, one micro-batch each, from scratch
    out = run(["--max-iters", "6", "--out", str(tmp_path / "ddp")], torchrun=True)
    assert out.count("done in") == 1 and "x 2 processes" in out  # rank 0 alone prints
    assert_close_checkpoints(tmp_path / "single" / "ckpt.pt", tmp_path / "ddp" / "ckpt.pt")
    # a single-process checkpoint continued under torchrun (--resume), then loaded without DDP
    run(["--max-iters", "3", "--out", str(tmp_path / "half")])
    out = run(["--max-iters", "6", "--out", str(tmp_path / "half"), "--resume"], torchrun=True)
    assert "resuming" in out and "at step 3 of 6" in out
    assert_close_checkpoints(tmp_path / "single" / "ckpt.pt", tmp_path / "half" / "ckpt.pt")
    model, ckpt = load_model(tmp_path / "ddp" / "ckpt.pt")  # written under DDP, loaded without it
    assert ckpt["step"] == 6 and not any(k.startswith("module.") for k in ckpt["model"])
    assert load_checkpoint(tmp_path / "ddp" / "ckpt.pt")["history"]["loss"] == \
        pytest.approx(load_checkpoint(tmp_path / "single" / "ckpt.pt")["history"]["loss"], rel=1e-5)
