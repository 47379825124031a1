"""course_lib.speed (chapter 12): precisions a device can train in, autocast, torch.compile with
its fallback to eager mode, and the speed meter (tokens/s, MFU from the model's own FLOPs)."""

import pytest
import torch

from course_lib import speed
from course_lib.model import GPT
from course_lib.sizing import flops_per_token
from course_lib.train import TrainConfig
from model_helpers import TINY, tiny_trainer



# --- precision -----------------------------------------------------------------------------------


def test_fp16_on_cpu_is_a_clear_error():
    with pytest.raises(ValueError, match="'fp16' needs a CUDA GPU.*bf16"):
        tiny_trainer(dtype="fp16")
    with pytest.raises(ValueError,
                       match="dtype must be one of 'fp32', 'bf16', 'fp16', got 'float16'"):
        TrainConfig(dtype="float16")


def test_fp16_on_cpu_from_the_command_line(capsys, tmp_path):
    from course_lib.cli import main

    assert main(["train", "--dtype", "fp16", "--device", "cpu", "--out",
                 str(tmp_path / "run")]) == 2
    assert "'fp16' needs a CUDA GPU" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_the_loss_scaler_is_on_for_fp16_alone():
    cpu = torch.device("cpu")
    assert not speed.grad_scaler(cpu, "fp32").is_enabled()
    assert not speed.grad_scaler(cpu, "bf16").is_enabled()


def test_autocast_runs_matmuls_in_bf16_and_fp32_is_untouched():
    a = torch.randn(4, 4)
    with speed.autocast(torch.device("cpu"), "bf16"):
        assert (a @ a).dtype == torch.bfloat16
    with speed.autocast(torch.device("cpu"), "fp32"):
        assert (a @ a).dtype == torch.float32


def test_bf16_autocast_on_cpu_is_close_to_fp32():
    fp32, bf16 = tiny_trainer(max_iters=20), tiny_trainer(max_iters=20, dtype="bf16")
    h32, h16 = fp32.train(), bf16.train()
    assert next(bf16.model.parameters()).dtype == torch.float32  # autocast keeps fp32 weights
    assert h16["loss"] != h32["loss"]  # it really ran in bf16
    for a, b in zip(h32["loss"], h16["loss"]):
        assert abs(a - b) < 0.05
    assert abs(h32["val_loss"][-1] - h16["val_loss"][-1]) < 0.05


# --- torch.compile -------------------------------------------------------------------------------


@pytest.mark.slow  # ten seconds or more on 2 cores (make unit leaves it out)
def test_compile_on_cpu_gives_the_same_losses():
    eager, compiled = tiny_trainer(max_iters=2), tiny_trainer(max_iters=2, compile=True)
    # torch.compile's OptimizedModule wraps the model
    assert compiled.train_model._orig_mod is compiled.model
    h_eager, h_compiled = eager.train(), compiled.train()
    assert h_compiled["loss"] == pytest.approx(h_eager["loss"], rel=1e-4)
    # no fallback
    assert not compiled._compile_unproven and compiled.train_model._orig_mod is compiled.model


def test_compile_failure_falls_back_to_eager(monkeypatch, capsys):
    class Broken(torch.nn.Module):
        def forward(self, *args, **kwargs):
            raise RuntimeError("no C compiler found (simulated)")

    monkeypatch.setattr(speed.torch, "compile", lambda model: Broken())
    eager, fallback = tiny_trainer(max_iters=3), tiny_trainer(max_iters=3, compile=True)
    assert fallback.train()["loss"] == eager.train()["loss"]
    out = capsys.readouterr().out
    assert "torch.compile could not compile this model here (RuntimeError: no C compiler" in out
    assert "continues without it" in out and fallback.train_model is fallback.model

    def unavailable(model):
        raise RuntimeError("torch.compile is not supported on this Python")

    monkeypatch.setattr(speed.torch, "compile", unavailable)
    unavailable_here = tiny_trainer(compile=True)
    assert unavailable_here.train_model is unavailable_here.model  # trains the eager model
    assert "torch.compile is not available here" in capsys.readouterr().out


def test_a_real_error_is_not_hidden_by_the_compile_fallback():
    trainer = tiny_trainer(compile=True)
    trainer.train_model = trainer.model
    trainer.batch_fn = lambda split, g: (torch.zeros(2, 8, dtype=torch.long),
                                         torch.zeros(2, 9, dtype=torch.long))
    with pytest.raises(ValueError,
                       match=r"targets must have the shape of idx \(2, 8\), got \(2, 9\)"):
        trainer.train_step()


# --- speed and MFU -------------------------------------------------------------------------------


@pytest.mark.parametrize("changes", [{}, {"tie_weights": True}, {"bias": True},
                                     {"rope_theta": 10000.0, "n_kv_head": 1, "mlp": "swiglu",
                                      "norm": "rmsnorm"}])
def test_the_model_counts_its_flops_as_sizing_does_from_the_config(changes):
    from dataclasses import replace

    config = replace(TINY, **changes)
    model = GPT(config)
    assert model.flops_per_token() == flops_per_token(config)
    assert model.flops_per_token(training=False) == flops_per_token(config, training=False)


def test_the_speed_meter_leaves_out_the_first_step_and_averages_the_rest():
    meter = speed.SpeedMeter(GPT(TINY), torch.device("cpu"))
    meter.record(tokens=1000, seconds=10.0)  # the first step (compiling, warming up): not counted
    assert meter.tokens_per_s is None and meter.postfix() == {}
    meter.record(tokens=1000, seconds=1.0, n_processes=2)
    assert meter.tokens_per_s == 2000.0  # the first timed step: 1000 tokens x 2 processes in 1 s
    meter.record(tokens=1000, seconds=0.5, n_processes=2)
    assert meter.tokens_per_s == pytest.approx(0.9 * 2000 + 0.1 * 4000)
    assert meter.postfix() == {"tok/s": "2,200"} and meter.mfu is None  # a CPU has no known peak
    meter.start()  # training restarts: its first step is not timed again
    meter.record(tokens=1, seconds=1.0)
    assert meter.tokens_per_s == pytest.approx(2200.0)


def test_mfu_is_the_models_flops_over_the_gpus_peak(monkeypatch):
    from course_lib import sizing

    assert sizing.gpu_peak_flops("cpu") is None
    # no peak for a CPU
    assert sizing.model_flops_utilization(flops_per_token(TINY), 1e6, "cpu") is None
    # as if the device were a GPU of 1 TFLOP/s
    monkeypatch.setattr(sizing, "gpu_peak_flops", lambda device: 1e12)
    meter = speed.SpeedMeter(GPT(TINY), torch.device("cpu"))
    meter.record(1, 1.0)
    meter.record(tokens=500, seconds=0.5, n_processes=2)  # 2000 tokens/s over 2 devices
    assert meter.mfu == pytest.approx(flops_per_token(TINY) * 2000 / (2 * 1e12))
    assert meter.postfix()["mfu"] == f"{100 * meter.mfu:.1f}%"
    # a model that cannot count them
    no_flops = speed.SpeedMeter(torch.nn.Linear(2, 2), torch.device("cpu"))
    no_flops.record(1, 1.0)
    no_flops.record(10, 1.0)
    assert (no_flops.flops_per_token is None and no_flops.mfu is None
            and no_flops.tokens_per_s == 10.0)
    # 1,000,000 FLOPs per token at 1e6 tokens/s on 2 GPUs of 312 TFLOP/s (an A100's peak) each
    monkeypatch.setattr(sizing, "gpu_peak_flops", lambda device: 312e12)
    assert sizing.model_flops_utilization(1_000_000, 1e6, "cuda",
                                          n_devices=2) == pytest.approx(1e12 / 624e12)


def test_a_trainer_measures_tokens_per_second_but_no_mfu_on_a_cpu():
    trainer = tiny_trainer(max_iters=3)
    assert trainer.tokens_per_s is None
    trainer.train()
    # 2 timed steps of 4 x 8 tokens; no CPU peak
    assert trainer.tokens_per_s > 0 and trainer.mfu is None
    assert trainer.speed.flops_per_token == flops_per_token(TINY)


def test_tf32_is_on_inside_the_block_only_and_restored_after_an_error():
    """The TF32 switch is process-wide: it holds during a GPU training run and the previous
    setting comes back afterwards (issue 31), also when the run stops with an exception."""
    before = torch.get_float32_matmul_precision()
    cuda = torch.device("cuda")  # the flag is global: setting it needs no GPU
    try:
        torch.set_float32_matmul_precision("highest")
        with speed.tf32_matmuls(cuda):
            assert torch.get_float32_matmul_precision() == "high"
        assert torch.get_float32_matmul_precision() == "highest"
        torch.set_float32_matmul_precision("medium")  # a reader's own choice is kept too
        with pytest.raises(KeyboardInterrupt), speed.tf32_matmuls(cuda):
            raise KeyboardInterrupt
        assert torch.get_float32_matmul_precision() == "medium"
        with speed.tf32_matmuls(torch.device("cpu")):
            assert torch.get_float32_matmul_precision() == "medium"  # no TF32 off a GPU
    finally:
        torch.set_float32_matmul_precision(before)


def test_the_trainer_scopes_tf32_to_its_training_run(monkeypatch):
    """Trainer.train runs inside tf32_matmuls(its device): every step sees the switch, and
    the process has its own setting back once train() returns."""
    from course_lib import train as train_module
    from course_lib.model import GPT, GPTConfig
    from course_lib.train import TrainConfig, Trainer

    seen_devices, during = [], []

    real_tf32 = speed.tf32_matmuls

    def fake_tf32(device):  # the real switch, as it behaves on a GPU, here on the CPU
        seen_devices.append(device)
        return real_tf32(torch.device("cuda"))

    monkeypatch.setattr(train_module, "tf32_matmuls", fake_tf32)
    data = torch.randint(10, (200,))

    def batches(split, generator):
        during.append(torch.get_float32_matmul_precision())
        i = torch.randint(len(data) - 9, (2,), generator=generator)
        return torch.stack([data[j:j + 8] for j in i]), torch.stack([data[j + 1:j + 9] for j in i])

    model = GPT(GPTConfig(vocab_size=10, block_size=8, n_layer=1, n_head=2, n_embd=16))
    before = torch.get_float32_matmul_precision()
    assert before != "high"  # else "restored" below could not be told from "still switched on"
    trainer = Trainer(model,
                      config=TrainConfig(max_iters=2, eval_iters=1, eval_interval=2, batch_size=2),
                      batch_fn=batches, device="cpu", progress=False, verbose=False)
    assert torch.get_float32_matmul_precision() == before  # building the Trainer switches nothing
    trainer.train()
    assert seen_devices == [torch.device("cpu")] and set(during) == {"high"}  # on inside the run
    assert torch.get_float32_matmul_precision() == before  # and off after it
