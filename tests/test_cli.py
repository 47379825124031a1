"""The command line: train / sample / params, bad input as one-line errors that write nothing,
and runs that survive SIGKILL and Ctrl-C (real signals
sent to a real `python -m course_lib train`)."""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from course_lib.cli import main
from course_lib.data import load_text
from model_helpers import assert_same_weights

ROOT = Path(__file__).resolve().parent.parent
# A small model and run, so that each subprocess trains in a few seconds.
TINY = ["--set", "n_layer=2", "--set", "n_head=2", "--set", "n_embd=48",
        "--set", "block_size=32", "--set", "batch_size=8",
        "--set", "eval_interval=10", "--set", "eval_iters=2", "--device", "cpu"]


@pytest.fixture(scope="module")
def text_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("text") / "shakespeare.txt"
    path.write_text(load_text()[:30_000], encoding="utf-8")
    return path


def test_params_prints_the_breakdown_and_total(capsys):
    assert main(["params", "--preset", "gpt2-small"]) == 0
    out = capsys.readouterr().out
    assert "124,439,808" in out and "attention" in out and "MLP" in out


@pytest.mark.slow  # ten seconds or more on 2 cores (make unit leaves it out)
def test_train_then_sample_then_resume(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["train", "--preset", "shakespeare-char-cpu", "--max-iters", "3", "--out", str(out),
                 "--device", "cpu"]) == 0
    assert (out / "ckpt.pt").exists()
    # Running again must not overwrite the run ...
    assert main(["train", "--preset", "shakespeare-char-cpu",
                 "--max-iters", "3", "--out", str(out)]) == 2
    assert "--resume" in capsys.readouterr().err
    # ... but can continue it.
    assert main(["train", "--preset", "shakespeare-char-cpu", "--max-iters", "5", "--out", str(out),
                 "--resume", "--device", "cpu"]) == 0
    assert "resuming" in capsys.readouterr().out
    assert torch.load(out / "ckpt.pt", weights_only=True)["step"] == 5
    assert main(["sample", "--checkpoint", str(out / "ckpt.pt"), "--prompt", "ROMEO:",
                 "--tokens", "20", "--top-k", "5", "--device", "cpu"]) == 0
    assert capsys.readouterr().out.startswith("ROMEO:")


def test_your_own_text_and_settings(tmp_path, capsys):
    text = tmp_path / "poem.txt"
    text.write_text("the owl and the pussy-cat went to sea\nin a beautiful pea-green boat\n" * 40,
                    encoding="utf-8")
    out = tmp_path / "poem"
    assert main(["train", "--text", str(text), "--out", str(out), "--set", "max_iters=20", *TINY,
                 "--set", "learning_rate=3e-3", "--set", "dropout=0.1"]) == 0
    ckpt = torch.load(out / "ckpt.pt", weights_only=True)
    assert ckpt["tokenizer"] == {"type": "char", "chars": "".join(sorted(set(text.read_text())))}
    assert ckpt["model_config"]["n_layer"] == 2 and ckpt["model_config"]["dropout"] == 0.1
    assert ckpt["model_config"]["vocab_size"] == len(set(text.read_text()))
    assert ckpt["train_config"]["learning_rate"] == 3e-3 and ckpt["step"] == 20
    capsys.readouterr()
    assert main(["sample", "--checkpoint", str(out / "ckpt.pt"),
                 "--prompt", "the owl", "--tokens", "10"]) == 0
    assert capsys.readouterr().out.startswith("the owl")


def test_resuming_a_finished_run_with_more_iterations_continues_it(tmp_path, text_file):
    out = tmp_path / "run"
    assert main(["train", "--text", str(text_file),
                 "--out", str(out), "--set", "max_iters=20", *TINY]) == 0
    assert main(["train", "--text", str(text_file), "--out", str(out),
                 "--set", "max_iters=30", *TINY, "--resume"]) == 0
    ckpt = torch.load(out / "ckpt.pt", weights_only=True)
    assert ckpt["step"] == 30 and ckpt["history"]["step"] == list(range(1, 31))
    assert ckpt["history"]["eval_step"] == [0, 10, 20, 30]


# Bad input (one line on stderr, exit status 2, nothing
# written) is tabled in tests/test_bad_input_cli.py.


# --- runs that survive a crash and an interrupt ---------------------------------------------------


def _train_command(text_file: Path, out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "course_lib", "train", "--text", str(text_file),
            "--out", str(out), "--set", "max_iters=60", "--set", "dropout=0.1", *TINY, *extra]


def _env():
    env = dict(os.environ, PYTHONUNBUFFERED="1", PYTHONPATH=str(ROOT))
    return env


def _run(cmd, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, env=_env(), timeout=300, **kw)


def _start_and_wait_for_checkpoint(cmd, ckpt: Path, extra_wait: float = 0.0) -> subprocess.Popen:
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=_env(), preexec_fn=_restore_ctrl_c)
    deadline = time.monotonic() + 240
    # the first periodic checkpoint (step 10); the file appears whole (atomic rename)
    while not ckpt.exists():
        assert proc.poll() is None, f"the run ended early: {proc.communicate()}"
        assert time.monotonic() < deadline, "no checkpoint appeared"
        time.sleep(0.02)
    time.sleep(extra_wait)
    return proc


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory, text_file) -> dict:
    out = tmp_path_factory.mktemp("straight")
    done = _run(_train_command(text_file, out))
    assert done.returncode == 0, done.stderr
    return torch.load(out / "ckpt.pt", weights_only=True)


def _assert_same_run(ckpt: dict, reference: dict) -> None:
    assert ckpt["step"] == reference["step"] == 60
    assert_same_weights(reference["model"], ckpt["model"])
    assert ckpt["history"] == reference["history"]


@pytest.mark.slow
def test_sigkill_after_a_periodic_checkpoint_then_resume_is_bitwise_the_same(tmp_path, text_file,
                                                                            uninterrupted):
    ckpt = tmp_path / "ckpt.pt"
    proc = _start_and_wait_for_checkpoint(_train_command(text_file, tmp_path), ckpt)
    proc.send_signal(signal.SIGKILL)  # no handler can run: only the periodic checkpoint is left
    proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    assert torch.load(ckpt, weights_only=True)["step"] >= 10
    resumed = _run(_train_command(text_file, tmp_path, "--resume"))
    assert resumed.returncode == 0, resumed.stderr
    assert "resuming" in resumed.stdout
    _assert_same_run(torch.load(ckpt, weights_only=True), uninterrupted)


def _restore_ctrl_c():
    # A child of a non-interactive shell inherits "ignore SIGINT" (CONTRIBUTING.md, "Testing
    # Ctrl-C"): undo it, as a terminal would.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _interrupt_at(cmd, phase: str) -> subprocess.CompletedProcess:
    """Run ``cmd`` with the test hook that pauses it at ``phase`` (course_lib._signals.pause_point,
    see CONTRIBUTING.md), send Ctrl-C once it says it is there, and return how it ended. So the
    signal lands in that phase on a fast machine and a slow one alike."""
    env = dict(_env(), COURSE_LIB_TEST_PAUSE_AT=phase)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            preexec_fn=_restore_ctrl_c)
    seen = []
    for line in proc.stdout:  # tqdm's \r updates end up in the same line as the marker
        seen.append(line)
        if f"paused at {phase}" in line:
            proc.send_signal(signal.SIGINT)
            break
    else:
        pytest.fail(f"the run never reached {phase}: {''.join(seen)[-2000:]} {proc.stderr.read()}")
    stdout, stderr = proc.communicate(timeout=240)
    return subprocess.CompletedProcess(cmd, proc.returncode, "".join(seen) + stdout, stderr)


def _assert_quiet_130(done: subprocess.CompletedProcess) -> None:
    assert done.returncode == 130, done.stderr
    assert "Traceback" not in done.stderr and "KeyboardInterrupt" not in done.stderr, done.stderr


# (phase, the step the saved run stops at). Ctrl-C in training stops at a step boundary and saves:
# "step:25" lands before step 25 (which completes), "evaluate:3" in the evaluation at step 20,
# "save:2" in the checkpoint of step 20, "save:6" in the final one (step 60).
@pytest.mark.slow
@pytest.mark.parametrize("phase, step",
                         [("step:25", 25), ("evaluate:3", 20), ("save:2", 20), ("save:6", 60)])
def test_ctrl_c_in_training_saves_a_consistent_state_and_resumes_bitwise(tmp_path, text_file,
                                                                        uninterrupted, phase, step):
    ckpt = tmp_path / "ckpt.pt"
    done = _interrupt_at(_train_command(text_file, tmp_path), phase)
    _assert_quiet_130(done)
    [line] = [l for l in done.stdout.splitlines() if l.startswith("SIGINT: stopped at step")]
    assert "continue with python -m course_lib train" in line and line.endswith("--resume")
    assert (f"stopped at step {step} " in line
            and torch.load(ckpt, weights_only=True)["step"] == step)
    resumed = _run(_train_command(text_file, tmp_path, "--resume"))
    assert resumed.returncode == 0, resumed.stderr
    assert f"resuming {ckpt} at step {step}" in resumed.stdout
    _assert_same_run(torch.load(ckpt, weights_only=True), uninterrupted)


@pytest.mark.slow
@pytest.mark.parametrize("phase", ["import", "start"])
def test_ctrl_c_while_starting_is_one_line_and_writes_nothing(tmp_path, text_file, phase):
    out = tmp_path / "run"
    done = _interrupt_at(_train_command(text_file, out), phase)
    _assert_quiet_130(done)
    assert (done.stderr.startswith("interrupted (Ctrl-C)")
            and done.stderr.count("\n") == 1), done.stderr
    assert "nothing was written" in done.stderr
    assert not out.exists()  # the folder the run claimed is gone with its lock


@pytest.mark.slow
def test_ctrl_c_in_the_final_sample_and_in_sample_is_one_line(tmp_path, text_file, uninterrupted):
    done = _interrupt_at(_train_command(text_file, tmp_path), "final-sample")
    _assert_quiet_130(done)
    assert done.stderr == ("interrupted (Ctrl-C): the run is complete and saved in "
                           f"{tmp_path / 'ckpt.pt'} (step 60)\n")
    _assert_same_run(torch.load(tmp_path / "ckpt.pt", weights_only=True), uninterrupted)
    before = (tmp_path / "ckpt.pt").read_bytes()
    sample = [sys.executable, "-m", "course_lib", "sample",
              "--checkpoint", str(tmp_path / "ckpt.pt"), "--device", "cpu"]
    done = _interrupt_at(sample, "sample")
    _assert_quiet_130(done)
    assert done.stderr == "interrupted (Ctrl-C): nothing was written\n"
    assert (tmp_path / "ckpt.pt").read_bytes() == before


@pytest.mark.slow
def test_ctrl_c_while_python_exits_after_the_command_is_one_line(tmp_path):
    """Review 2026-11-28 A5 (row 94): a Ctrl-C after "done: ... saved", in torch's exit hooks, gave
    a 21-line traceback and status 0; now one line, and 130, as at any other moment."""
    out = tmp_path / "dates"
    done = _interrupt_at([sys.executable, "-m", "course_lib", "train-dates", "--out", str(out),
                          "--max-iters", "1", "--device", "cpu"], "exit")
    _assert_quiet_130(done)
    assert "done in" in done.stdout
    assert done.stderr == ("interrupted (Ctrl-C) while exiting: the run is complete and saved in "
                           f"{out / 'ckpt.pt'} (step 1)\n")


@pytest.mark.slow
def test_train_dates_resumes_from_the_command_line_after_ctrl_c(tmp_path):
    straight, stopped = tmp_path / "straight", tmp_path / "stopped"
    cmd = lambda out, *extra: [sys.executable, "-m", "course_lib", "train-dates", "--out", str(out),
                               "--max-iters", "4", "--device", "cpu", *extra]
    assert _run(cmd(straight)).returncode == 0
    done = _interrupt_at(cmd(stopped), "step:3")
    _assert_quiet_130(done)
    [line] = [l for l in done.stdout.splitlines() if l.startswith("SIGINT: stopped at step 3")]
    assert line.endswith(f"continue with python -m course_lib train-dates --out {stopped} "
                         "--max-iters 4 --device cpu --resume")
    resumed = _run(cmd(stopped, "--resume"))
    assert resumed.returncode == 0, resumed.stderr
    a, b = (torch.load(out / "ckpt.pt", weights_only=True) for out in (straight, stopped))
    assert a["step"] == b["step"] == 4 and a["history"] == b["history"]
    assert all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])


def test_the_encoder_decoder_trains_and_translates_from_the_command_line(tmp_path, capsys):
    out = tmp_path / "dates"
    assert main(["train-dates", "--out", str(out), "--max-iters", "3", "--device", "cpu"]) == 0
    assert torch.load(out / "ckpt.pt", weights_only=True)["model_kind"] == "seq2seq"
    capsys.readouterr()
    assert main(["translate", "--checkpoint", str(out / "ckpt.pt"),
                 "3 March 2021", "03/04/21", "--beam", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split("  ->  ")[0] for line in lines] == ["3 March 2021", "03/04/21"]
    assert main(["sample", "--checkpoint", str(out / "ckpt.pt")]) == 2
    assert "use `python -m course_lib translate" in capsys.readouterr().err
    # never overwrites a run
    assert main(["train-dates", "--out", str(out), "--max-iters", "3"]) == 2
    assert main(["translate", "--checkpoint", str(out / "ckpt.pt"), "3 March 2021",
                 "--beam", "0"]) == 2
    assert "beam_size must be an integer >= 1" in capsys.readouterr().err


def test_the_bpe_preset_trains_its_tokenizer_on_your_text_and_samples(tmp_path, text_file, capsys):
    out = tmp_path / "bpe"
    assert main(["train", "--preset", "shakespeare-bpe-cpu", "--text", str(text_file),
                 "--out", str(out), "--set", "max_iters=2", *TINY]) == 0
    ckpt = torch.load(out / "ckpt.pt", weights_only=True)
    assert ckpt["tokenizer"]["type"] == "bpe" and ckpt["model_config"]["vocab_size"] == 512
    capsys.readouterr()
    assert main(["sample", "--checkpoint", str(out / "ckpt.pt"),
                 "--prompt", "ROMEO:", "--tokens", "5"]) == 0
    assert capsys.readouterr().out.startswith("ROMEO:")


def test_sample_works_on_a_checkpoint_of_every_decoder_kind(tmp_path, capsys):
    """bigram (chapter 2's Trainer), gpt (`train`), gpt-lora (`finetune --lora-rank`) and hybrid
    (chapter 24); an encoder-decoder is sent to `translate` (tests/test_bad_input_cli.py)."""
    from course_lib.bigram import BigramConfig, BigramLanguageModel
    from course_lib.checkpoint import load_checkpoint, load_model, load_tokenizer, save_checkpoint
    from course_lib.tokenizers import CharTokenizer
    from course_lib.finetune import TASK_CHARS, extend_tokenizer
    from course_lib.lora_gpt import LoRAGPT
    from course_lib.registry import MODELS
    from model_helpers import pretrain_tiny_gpt

    text = load_text()[:5000]
    tok = CharTokenizer.from_text(text)
    bigram = BigramLanguageModel(BigramConfig(vocab_size=tok.vocab_size, block_size=8))
    gpt_path = pretrain_tiny_gpt(tmp_path / "gpt", max_iters=2)
    gpt_tok = load_tokenizer(load_checkpoint(gpt_path))
    lora = LoRAGPT.from_base(gpt_path, extend_tokenizer(gpt_tok, TASK_CHARS), rank=2)
    from course_lib.linear_attention import HybridConfig, HybridGPT
    hybrid = HybridGPT(HybridConfig(vocab_size=tok.vocab_size, block_size=8,
                                    n_layer=2, n_embd=16, n_head=2))
    paths = {"bigram": save_checkpoint(tmp_path / "bigram.pt", bigram, tokenizer=tok),
             "gpt": gpt_path,
             "hybrid": save_checkpoint(tmp_path / "hybrid.pt", hybrid, tokenizer=tok),
             "gpt-lora": save_checkpoint(tmp_path / "lora.pt", lora,
                                         tokenizer=extend_tokenizer(gpt_tok, TASK_CHARS))}
    # chapter 23: the 4-bit model (quantize) and a QAT run's
    from course_lib.quantize.models import QATGPT
    gpt = load_model(gpt_path)[0]
    assert main(["quantize", str(gpt_path), "--out", str(tmp_path / "int4.pt")]) == 0
    paths |= {"gpt-int4": tmp_path / "int4.pt",
              "gpt-qat": save_checkpoint(tmp_path / "qat.pt",
                                         QATGPT.from_gpt(gpt, 4, 32), tokenizer=gpt_tok)}
    # attn-only (chapter 21) reads ids of a synthetic task
    # and stores no tokenizer: there is no text to sample
    assert set(paths) == set(MODELS) - {"seq2seq", "attn-only"}, (
        "a new decoder kind: add a checkpoint of it here")
    for kind, path in paths.items():
        capsys.readouterr()
        assert main(["sample", "--checkpoint", str(path),
                     "--prompt", "RO", "--tokens", "7", "--device", "cpu"]) == 0, \
            capsys.readouterr().err
        out = capsys.readouterr().out
        # 7 characters, then print's newline
        assert out.startswith("RO") and len(out) == len("RO") + 7 + 1, (kind, out)


def test_resume_command_repeats_the_arguments_with_resume_once():
    from course_lib.cli.common import resume_command

    assert resume_command(["train", "--text", "my poems.txt", "--resume", "--out", "x"]) == \
        "python -m course_lib train --text 'my poems.txt' --out x --resume"
