"""The CPU speedrun (issue 24): its presets, the GPU one refused on a CPU, the benchmark's fixed
whole-split estimate, and a speedrun run stopped by Ctrl-C resuming bit for bit (Muon's state is in
the checkpoint). The benchmark's own run on 3 steps is checked with every benchmark script's, in
tests/test_benchmarks.py (speedrun_record)."""
import importlib.util
import json
import math
import os
import signal
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from course_lib.cli import main
from course_lib.data import load_text
from course_lib.model import GPT, GPTConfig
from course_lib.optim import lr_at
from course_lib.presets import get_preset
from course_lib.train import TrainConfig, Trainer

ROOT = Path(__file__).resolve().parent.parent
SPEEDRUN, GPU = "shakespeare-char-speedrun", "shakespeare-char-speedrun-gpu"
# The preset's optimizer and schedule on a model and run small enough for seconds.
SMALL_MODEL = ["--set", "n_layer=1", "--set", "n_embd=32", "--set", "n_head=2", "--set",
               "n_kv_head=1", "--set", "block_size=32", "--set", "batch_size=8", "--device", "cpu"]
SMALL = [*SMALL_MODEL, "--set", "max_iters=40", "--set", "eval_interval=10", "--set",
         "eval_iters=2"]


def load_benchmark():
    spec = importlib.util.spec_from_file_location("speedrun_benchmark",
                                                  ROOT / "benchmarks" / "speedrun.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def text_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("text") / "shakespeare.txt"
    path.write_text(load_text()[:30_000], encoding="utf-8")
    return path


@pytest.mark.parametrize("name", [SPEEDRUN, GPU])
def test_the_speedrun_presets_validate(name):
    preset = get_preset(name)
    # Rebuilding the configs from their dicts runs every rule of GPT_CONFIG_RULES /
    # TRAIN_CONFIG_RULES.
    assert GPTConfig.from_dict(preset.model.to_dict()) == preset.model
    assert TrainConfig.from_dict(vars(preset.train)) == preset.train
    assert preset.model.vocab_size == get_preset("shakespeare-char-cpu").model.vocab_size
    assert preset.train.schedule == "wsd"  # held at the peak, then a linear decay ending at min_lr
    last = preset.train.max_iters
    assert lr_at(last - 1, preset.train) > lr_at(last, preset.train) == preset.train.min_lr
    assert (preset.device == "cuda") == name.endswith("-gpu")
    GPT(preset.model)


def test_the_speedrun_preset_evaluates_only_at_its_start_and_end(tiny_model):
    """Evaluation time counts against the speedrun: the Trainer evaluates it at step 0 and at the
    end only, each estimate on at least as many windows as the CPU preset's (so no noisier)."""
    train, cpu = get_preset(SPEEDRUN).train, get_preset("shakespeare-char-cpu").train
    data = torch.zeros(100, dtype=torch.long)
    trainer = Trainer(tiny_model(), data, data, train, progress=False)
    due = []
    for step in range(train.max_iters + 1):
        trainer.step = step
        if trainer._eval_due():
            due.append(step)
    assert due == [0, train.max_iters]
    assert train.eval_iters * train.batch_size >= cpu.eval_iters * cpu.batch_size


def test_the_gpu_speedrun_is_refused_on_a_cpu_in_one_line(tmp_path, capsys):
    out = tmp_path / "gpu"
    assert main(["train", "--preset", GPU, "--device", "cpu", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert (err.count("\n") == 1 and "made for a cuda device" in err
            and "shakespeare-char-speedrun instead" in err)
    assert not out.exists()  # nothing written


@pytest.mark.slow  # ten seconds or more on 2 cores (make unit leaves it out)
def test_the_whole_split_estimate_counts_every_token_once(tmp_path, text_file):
    """The benchmark's fixed estimate equals the mean of the per-token losses of the whole split,
    computed here in one go from the model's logits for consecutive windows (the definition)."""
    out = tmp_path / "run"
    assert main(["train", "--text", str(text_file), "--out", str(out), "--set", "max_iters=2",
                 "--set", "eval_iters=1", *SMALL_MODEL]) == 0
    ckpt = torch.load(out / "ckpt.pt", weights_only=True)
    benchmark = load_benchmark()
    from course_lib.checkpoint import load_model, load_tokenizer
    from course_lib.data import train_val_split
    model, _ = load_model(out / "ckpt.pt", "cpu")
    tokenizer = load_tokenizer(ckpt, out / "ckpt.pt")
    _, val = train_val_split(torch.tensor(tokenizer.encode(text_file.read_text())))
    T = model.config.block_size
    losses = []
    with torch.no_grad():
        for start in range(0, len(val) - 1, T):
            x, y = val[start:start + T], val[start + 1:start + T + 1]
            x = x[:len(y)]
            logits, _ = model(x[None])
            losses.append(torch.nn.functional.cross_entropy(logits[0], y, reduction="none"))
    per_token = torch.cat(losses)
    assert len(per_token) == len(val) - 1
    # (the benchmark reads the preset's corpus by default; here, the text this run trained on)
    got = benchmark.whole_split_loss(out / "ckpt.pt", text=text_file.read_text(), batch_size=5)
    assert math.isclose(got, per_token.mean().item(), rel_tol=1e-5)


def _restore_ctrl_c():
    # a child of a non-interactive shell ignores SIGINT
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.slow  # three training processes
@pytest.mark.parametrize("optimizer", ["adamw", "muon"])
def test_a_speedrun_stopped_by_ctrl_c_resumes_bitwise(tmp_path, text_file, optimizer):
    """The preset's wsd schedule on a small model, with its AdamW and with Muon + AdamW (whose
    momentum buffers must travel in the checkpoint): Ctrl-C at step 25, then --resume, gives exactly
    the weights and history of the run that was never stopped."""
    env = dict(os.environ, PYTHONUNBUFFERED="1", PYTHONPATH=str(ROOT))
    command = lambda out, *extra: [sys.executable, "-m", "course_lib", "train", "--preset",
                                   SPEEDRUN, "--text", str(text_file), "--out", str(out), *SMALL,
                                   "--set", f"optimizer={optimizer}", *extra]
    straight = subprocess.run(command(tmp_path / "straight"), capture_output=True, text=True,
                              env=env, timeout=300)
    assert straight.returncode == 0, straight.stderr

    out = tmp_path / "stopped"
    proc = subprocess.Popen(command(out), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(env, COURSE_LIB_TEST_PAUSE_AT="step:25"),
                            preexec_fn=_restore_ctrl_c)
    for line in proc.stdout:
        if "paused at step:25" in line:
            proc.send_signal(signal.SIGINT)
            break
    stdout, stderr = proc.communicate(timeout=240)
    assert proc.returncode == 130, stderr
    assert "stopped at step 25" in stdout
    stopped = torch.load(out / "ckpt.pt", weights_only=True)
    assert stopped["step"] == 25
    if optimizer == "muon":
        assert set(stopped["optimizer"]) == {"muon", "adamw"}
        assert all("momentum_buffer" in s for s in stopped["optimizer"]["muon"]["state"].values())

    resumed = subprocess.run(command(out, "--resume"), capture_output=True, text=True, env=env,
                             timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    a, b = (torch.load(p / "ckpt.pt", weights_only=True) for p in (tmp_path / "straight", out))
    assert a["step"] == b["step"] == 40
    for name, tensor in a["model"].items():
        assert torch.equal(b["model"][name], tensor), name
    assert a["history"] == b["history"]


def test_the_measured_page_quotes_the_measured_benchmark():
    """One source for the figures: book/measured.md's row is what
    course_lib/records/speedrun_results.json holds."""
    result = json.loads((ROOT / "course_lib" / "records" / "speedrun_results.json").read_text())
    row = next(line for line in (ROOT / "book" / "measured.md").read_text().splitlines()
               if line.startswith("| `speedrun.py`"))
    assert result["holds"] and f"ratio {result['ratio_median']:.3f}" in row, row
    assert f"{min(result['ratios']):.3f}-{max(result['ratios']):.3f}" in row
    for preset in ("shakespeare-char-cpu", SPEEDRUN):
        runs = result["runs"][preset]
        walls, losses = [r["wall_s"] for r in runs], [r["val_loss"] for r in runs]
        assert (f"{min(walls):.1f}-{max(walls):.1f} s" in row
                and f"{min(losses):.3f}-{max(losses):.3f}" in row)


def test_the_record_log_ends_with_the_preset():
    """The last recipe of course_lib/records/speedrun_records.json, applied to shakespeare-char-cpu
    as --set settings, is the speedrun preset (its evaluation settings aside, which change no
    weight)."""
    records = json.loads((ROOT / "course_lib" / "records" / "speedrun_records.json").read_text())[
        "records"
    ]
    last = [r for r in records if r["kept"] and "recipe" in r][-1]
    cpu, speedrun = get_preset("shakespeare-char-cpu"), get_preset(SPEEDRUN)
    assert replace(cpu.model, **last["recipe"]["model"]) == speedrun.model
    evaluation = dict(eval_interval=speedrun.train.eval_interval,
                      eval_iters=speedrun.train.eval_iters)
    assert replace(cpu.train, **last["recipe"]["train"], **evaluation) == speedrun.train
    assert all(r["val_loss"] <= 1.88 for r in last["runs"]
               if r["max_iters"] == speedrun.train.max_iters)
