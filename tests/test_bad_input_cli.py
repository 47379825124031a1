"""Every bad input of the command line, as a table: the arguments, the exit status, a phrase the
one line on stderr must contain, and nothing written or left behind (issue 21's cases, with the
earlier ones). Ctrl-C at each moment is in tests/test_cli.py (real signals to a real process)."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from course_lib.checkpoint import LOCK_NAME, write_atomic
from course_lib.cli import main
from course_lib.data import load_text

ROOT = Path(__file__).resolve().parent.parent
TINY = ["--set", "n_layer=1", "--set", "n_head=2", "--set", "n_embd=16", "--set", "block_size=16",
        "--set", "batch_size=4", "--set", "eval_interval=2", "--set", "eval_iters=1", "--device", "cpu"]


class Evil:  # a pickle that would run a shell command when loaded without weights_only
    def __reduce__(self):
        return (os.system, ("echo owned",))


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> Path:
    """The inputs of the table, made once: texts, runs, broken checkpoints."""
    tmp = tmp_path_factory.mktemp("bad")
    text = load_text()[:20_000]
    (tmp / "text.txt").write_text(text, encoding="utf-8")
    (tmp / "same-chars.txt").write_text(text[::-1], encoding="utf-8")  # the same characters, another text
    (tmp / "empty.txt").write_text("   \n", encoding="utf-8")
    (tmp / "short.txt").write_text("To be, or not to be" * 3, encoding="utf-8")
    (tmp / "latin1.txt").write_bytes("Line one\nCaf\u00e9 au lait\n".encode("latin-1") * 100)
    (tmp / "utf16.txt").write_bytes(text[:2000].encode("utf-16"))  # with its byte-order mark
    (tmp / "nul.txt").write_bytes(b"\0" * 5000)
    tar = subprocess.run(["tar", "cf", "-", "-C", str(tmp), "text.txt"], capture_output=True, check=True).stdout
    (tmp / "archive.tar").write_bytes(tar)
    (tmp / "controls.txt").write_bytes(b"abc\x01\x02\x03def\x1b" * 200)
    (tmp / "a-file").write_text("not a folder")
    (tmp / "corrupt.pt").write_bytes(b"PK\x03\x04 this is not a checkpoint")
    (tmp / "not-a-checkpoint.pt").write_text("hello")
    torch.save({"model": Evil()}, tmp / "evil.pt")
    run = ["--set", "max_iters=2", *TINY]
    assert main(["train", "--text", str(tmp / "text.txt"), "--out", str(tmp / "done"), *run]) == 0
    assert main(["train", "--out", str(tmp / "preset-run"), *run]) == 0
    assert main(["train-dates", "--out", str(tmp / "dates"), "--max-iters", "1", "--device", "cpu"]) == 0
    ckpt = torch.load(tmp / "done" / "ckpt.pt", weights_only=True)
    ckpt["model"]["wte.weight"][0, 0] = float("nan")
    write_atomic(tmp / "nan.pt", ckpt)
    return tmp


def cases(tmp: Path) -> list[tuple[str, list[str], int, str]]:
    text = ["--text", str(tmp / "text.txt")]
    done, ckpt = tmp / "done", str(tmp / "done" / "ckpt.pt")
    sample = ["sample", "--checkpoint", ckpt, "--device", "cpu"]
    return [
        # text input: one reader (course_lib.data.read_text_file)
        ("missing text file", ["train", "--text", str(tmp / "nope.txt")], 2, "no such text file"),
        ("a folder as --text", ["train", "--text", str(tmp)], 2, "it is a folder"),
        ("empty text file", ["train", "--text", str(tmp / "empty.txt")], 2, "is empty"),
        ("text shorter than a window", ["train", "--text", str(tmp / "short.txt")], 2, "too short"),
        ("text not UTF-8", ["train", "--text", str(tmp / "latin1.txt")], 2,
         r"not UTF-8 text: byte 0xe9 at offset 12 \(line 2"),
        ("UTF-16 text", ["train", "--text", str(tmp / "utf16.txt")], 2, "is UTF-16-LE text.*iconv -f UTF-16"),
        ("5,000 NUL bytes", ["train", "--text", str(tmp / "nul.txt")], 2, "not text: it holds 5,000 NUL bytes"),
        ("a tar archive", ["train", "--text", str(tmp / "archive.tar")], 2, "not text: .*NUL bytes.*binary file"),
        ("control characters", ["train", "--text", str(tmp / "controls.txt")], 2,
         r"not text: 800 of its .* control characters, the first '\\x01'"),
        # settings: checked by the config classes' rules
        ("unknown setting", ["train", *text, "--set", "n_layers=6"], 2, "unknown setting.*n_layer, n_head"),
        ("setting of the wrong type", ["train", *text, "--set", "n_layer=six"], 2, "n_layer='six': expected .*int"),
        ("setting the config refuses", ["train", *text, "--set", "n_head=5"], 2, "divisible by n_head"),
        ("setting without a value", ["train", *text, "--set", "n_layer"], 2, "KEY=VALUE"),
        ("vocab_size set by hand", ["train", *text, "--set", "vocab_size=10"], 2, "vocab_size cannot be set"),
        ("negative learning rate", ["train", *text, "--set", "learning_rate=-1"], 2,
         r"learning_rate must be a finite number in \(0, 1\], got -1"),
        ("learning rate inf", ["train", *text, "--set", "learning_rate=inf"], 2, "learning_rate .*got inf"),
        ("learning rate 1e9", ["train", *text, "--set", "learning_rate=1e9"], 2, "learning_rate .*got 1000000000"),
        ("negative min_lr", ["train", *text, "--set", "min_lr=-1"], 2, r"min_lr must be a finite number in \[0, 1\]"),
        ("negative weight decay", ["train", *text, "--set", "weight_decay=-1"], 2, "weight_decay must be"),
        ("grad_clip nan", ["train", *text, "--set", "grad_clip=nan"], 2, "grad_clip must be a finite number >= 0"),
        ("negative lr_decay_iters", ["train", *text, "--set", "lr_decay_iters=-1"], 2,
         "lr_decay_iters must be an integer >= 1"),
        ("beta1 of 1.5", ["train", *text, "--set", "beta1=1.5"], 2, r"beta1 must be a finite number in \[0, 1\)"),
        ("dropout nan", ["train", *text, "--set", "dropout=nan"], 2, "dropout must be a finite number"),
        ("bias not a boolean", ["train", *text, "--set", "bias=maybe"], 2, "bias='maybe': expected .*bool"),
        # presets, devices, output folders
        ("unwritable --out", ["train", *text, "--out", str(tmp / "a-file" / "run")], 2, "cannot write to"),
        ("unknown preset", ["train", "--preset", "gpt5"], 2, "unknown preset 'gpt5'.*shakespeare-char-cpu"),
        ("counting-only preset", ["train", "--preset", "gpt2-small"], 2, "counting parameters only"),
        ("GPU-only preset on a CPU", ["train", "--preset", "shakespeare-char-speedrun-gpu", "--device", "cpu"], 2,
         "made for a cuda device .* on a CPU train shakespeare-char-speedrun instead"),
        ("unknown optimizer", ["train", *text, "--set", "optimizer=sgd"], 2, "optimizer must be one of 'adamw', 'muon'"),
        ("existing run without --resume", ["train", *text, "--out", str(done)], 2, "already exists: pass --resume"),
        ("train-dates into an existing run", ["train-dates", "--out", str(tmp / "dates")], 2,
         "already exists: pass --resume"),
        # resuming: the same model, the same data, the same command
        ("resume with another model", ["train", *text, "--out", str(done), "--resume", "--set", "n_layer=3"], 2,
         "a resumed run keeps its model"),
        ("resume with another preset", ["train", "--preset", "shakespeare-bpe-cpu", "--out",
                                        str(tmp / "preset-run"), "--resume", *TINY], 2,
         "trained with --preset shakespeare-char-cpu, not shakespeare-bpe-cpu"),
        ("resume with another text of the same characters",
         ["train", "--text", str(tmp / "same-chars.txt"), "--out", str(done), "--resume", *TINY], 2,
         r"trained on the text text.txt \(SHA-256 .*\), not on the text same-chars.txt"),
        ("resume a --text run without --text", ["train", "--out", str(done), "--resume", *TINY], 2,
         "trained on the text text.txt .*not on preset shakespeare-char-cpu's corpus: pass --text text.txt"),
        ("resume a preset run with --text", ["train", *text, "--out", str(tmp / "preset-run"), "--resume", *TINY], 2,
         "trained on preset shakespeare-char-cpu's corpus, not on the text text.txt.*leave --text out"),
        ("resume a train-dates run with train", ["train", "--out", str(tmp / "dates"), "--resume"], 2,
         r"made by `train-dates`, not `train`: resume it with `python -m course_lib train-dates --out"),
        ("resume a train run with train-dates", ["train-dates", "--out", str(done), "--resume"], 2,
         r"made by `train`, not `train-dates`: resume it with `python -m course_lib train --text text.txt"),
        # checkpoints given to sample
        ("sample a missing checkpoint", ["sample", "--checkpoint", str(tmp / "nope.pt")], 2, "no checkpoint at"),
        ("sample a truncated checkpoint", ["sample", "--checkpoint", str(tmp / "corrupt.pt")], 2,
         "is truncated or corrupt: its zip archive cannot be read"),
        ("sample a file that is no checkpoint", ["sample", "--checkpoint", str(tmp / "not-a-checkpoint.pt")], 2,
         "is not a checkpoint: torch.save writes a zip archive"),
        ("sample a checkpoint that would run code", ["sample", "--checkpoint", str(tmp / "evil.pt")], 2,
         "was refused: it holds a reference to the Python function (posix|nt).system, which loading could run"),
        ("sample a folder", ["sample", "--checkpoint", str(done)], 2,
         f"is a folder, not a checkpoint file: give the checkpoint inside it, {re.escape(ckpt)}"),
        ("sample a checkpoint with NaN weights", ["sample", "--checkpoint", str(tmp / "nan.pt")], 2,
         r"weights that are not finite numbers \(NaN or inf, in wte.weight\)"),
        ("sample an encoder-decoder", ["sample", "--checkpoint", str(tmp / "dates" / "ckpt.pt")], 2,
         "use `python -m course_lib translate"),
        # sampling arguments: one check (course_lib.generate.check_sampling_args)
        ("sample --tokens below 1", [*sample, "--tokens", "-5"], 2, "--tokens must be at least 1"),
        ("sample with top-p 2", [*sample, "--top-p", "2"], 2, r"top_p must be in \(0, 1\]"),
        ("sample with top-p nan", [*sample, "--top-p", "nan"], 2, r"top_p must be in \(0, 1\]"),
        ("sample with temperature nan", [*sample, "--temperature", "nan"], 2, "temperature must be >= 0 .*finite"),
        ("sample with temperature inf", [*sample, "--temperature", "inf"], 2, "temperature must be >= 0 .*finite"),
        ("sample with top-k 0", [*sample, "--top-k", "0"], 2, "top_k must be an integer >= 1"),
        ("sample an unknown character", [*sample, "--prompt", "\u00e9"], 2, "unknown character"),
        # eval (chapter 16): every bad input fails before any model is scored
        ("eval a missing checkpoint", ["eval", "--checkpoint", str(tmp / "nope.pt")], 2, "no checkpoint at"),
        ("eval a truncated checkpoint", ["eval", "--checkpoint", str(tmp / "corrupt.pt")], 2, "truncated or corrupt"),
        ("eval a checkpoint with NaN weights", ["eval", "--checkpoint", str(tmp / "nan.pt")], 2, "not finite"),
        ("eval an encoder-decoder", ["eval", "--checkpoint", str(tmp / "dates" / "ckpt.pt")], 2,
         "encoder-decoder .*decoder-only"),
        ("eval an unknown task", ["eval", "--checkpoint", ckpt, "--tasks", "mmlu"], 2, "unknown task mmlu: choose"),
        ("eval a task the tokenizer cannot encode", ["eval", "--checkpoint", ckpt, "--tasks", "arithmetic"], 2,
         "cannot encode task arithmetic"),
        ("eval --limit 0", ["eval", "--checkpoint", ckpt, "--limit", "0"], 2, "--limit must be at least 1"),
        ("eval --shots -1", ["eval", "--checkpoint", ckpt, "--shots", "-1"], 2, "--shots must be 0 or more"),
        ("translate with beam 0", ["translate", "--checkpoint", str(tmp / "dates" / "ckpt.pt"), "3 May", "--beam", "0"],
         2, "beam_size must be an integer >= 1"),
    ] + ([] if torch.cuda.is_available() else
         [("--device cuda without a GPU", ["train", *text, "--device", "cuda"], 2, "'cuda' is not available")])


def _tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()} | {
        str(p.relative_to(folder)) + "/": b"" for p in folder.rglob("*") if p.is_dir()}


def _one_line_error(capsys, argv, status, phrase, name):
    assert main(argv) == status, name
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, f"{name}: not one line: {err!r}"
    assert re.search(phrase, err), f"{name}: {err!r} does not match {phrase!r}"


def test_every_bad_input_is_one_line_and_writes_nothing(files, capsys, monkeypatch):
    monkeypatch.chdir(files)  # default output folders (runs/...) would appear here
    table = cases(files)
    before = _tree(files)
    capsys.readouterr()
    for name, argv, status, phrase in table:
        _one_line_error(capsys, argv, status, phrase, name)
        assert _tree(files) == before, f"{name}: left files behind"


def test_a_second_run_into_a_folder_in_use_is_refused(files, tmp_path, capsys):
    """A run holds its --out with a lock file (created with O_EXCL, so two starts cannot both
    get it); another live process's lock refuses the run, a dead one's is taken over."""
    out = tmp_path / "busy"
    out.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (out / LOCK_NAME).write_text(str(holder.pid))
        before = _tree(tmp_path)
        argv = ["train", "--text", str(files / "text.txt"), "--out", str(out), "--set", "max_iters=1", *TINY]
        _one_line_error(capsys, argv, 2, f"is in use by another run \\(process {holder.pid}", "folder in use")
        assert _tree(tmp_path) == before
    finally:
        holder.kill()
        holder.wait()
    assert main(argv) == 0  # the holder is gone: its lock is stale and taken over
    assert sorted(p.name for p in out.iterdir()) == ["ckpt.pt"]


def test_a_run_that_diverges_stops_with_one_line_and_keeps_the_last_good_checkpoint(files, tmp_path, capsys,
                                                                                   monkeypatch):
    from course_lib.train import Trainer

    forward_backward = Trainer.forward_backward

    def nan_from_step_3(self, batches):  # as if the learning rate had blown the weights up
        loss = forward_backward(self, batches)
        return float("nan") if self.step >= 3 else loss

    monkeypatch.setattr(Trainer, "forward_backward", nan_from_step_3)
    out = tmp_path / "run"
    argv = ["train", "--text", str(files / "text.txt"), "--out", str(out), "--set", "max_iters=6", *TINY]
    _one_line_error(capsys, argv, 2, r"training diverged at step 4: the loss is nan .*the last good checkpoint, "
                    r".*ckpt.pt \(step 2\), is kept\. Try a smaller learning_rate", "diverged")
    ckpt = torch.load(out / "ckpt.pt", weights_only=True)
    assert ckpt["step"] == 2 and all(torch.isfinite(t).all() for t in ckpt["model"].values())
    assert sorted(p.name for p in out.iterdir()) == ["ckpt.pt"]  # and the lock is gone


def _cli(*args, **kw) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "course_lib", *args], capture_output=True, text=True, env=env,
                          timeout=300, **kw)


@pytest.mark.slow
def test_text_from_a_pipe(files, tmp_path):
    """``--text -`` reads standard input (a pipe); the checkpoint records it as "-" with its SHA-256."""
    text = (files / "text.txt").read_text(encoding="utf-8")
    done = _cli("train", "--text", "-", "--out", str(tmp_path / "piped"), "--set", "max_iters=1", *TINY, input=text)
    assert done.returncode == 0, done.stderr
    saved = torch.load(tmp_path / "piped" / "ckpt.pt", weights_only=True)["trained_on"]
    import hashlib
    assert saved == {"command": "train", "preset": "shakespeare-char-cpu", "text": "-",
                     "text_sha256": hashlib.sha256(text.encode()).hexdigest()}
    binary = _cli("train", "--text", "-", "--out", str(tmp_path / "nul"), input="\0" * 100)
    assert binary.returncode == 2 and binary.stderr.count("\n") == 1
    assert "standard input is not text: it holds 100 NUL bytes" in binary.stderr
    if Path("/dev/stdin").exists():  # a pipe given by its path is read like a file
        piped = _cli("train", "--text", "/dev/stdin", "--out", str(tmp_path / "nul"), input="\0" * 7)
        assert piped.returncode == 2 and "/dev/stdin is not text: it holds 7 NUL bytes" in piped.stderr
    assert not (tmp_path / "nul").exists()
