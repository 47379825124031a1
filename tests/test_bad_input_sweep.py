"""The promise, swept over every command: each command of ``python -m course_lib`` (train, sample,
train-dates, translate, finetune, params, eval, dpo, grpo) and of ``python -m course_lib.tools``
(book, assignments, train-dates, translate, finetune, eval, chat-sft, chat, params) and of ``python
-m course_lib.tools`` (book, assignments, pretrained, gpu-lane) is given bad inputs, the reliability
review's (issue 31) and more, and each must end with a non-zero exit status and one line on stderr,
no traceback, no file or folder left behind and no checkpoint changed (the whole sandbox, and the
shipped model, compared byte for byte).

The table runs in-process (fast); ``test_the_sweep_in_real_processes`` runs one case per command as
a real ``python -m`` process (slow). An argparse error keeps argparse's usage block above its one
error line."""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from course_lib.checkpoint import save_checkpoint
from course_lib.cli import main as cli_main
from course_lib.data import load_text
from course_lib.pretrained import PRETRAINED_PATH
from course_lib.tools.__main__ import main as tools_main

ROOT = Path(__file__).resolve().parent.parent
TINY = ["--set", "n_layer=1", "--set", "n_head=2", "--set", "n_embd=16", "--set", "block_size=16",
        "--set", "batch_size=4", "--set", "eval_iters=1", "--device", "cpu"]
CS = ["--max-iters", "1", "--set", "batch_size=2", "--set", "eval_iters=1", "--device", "cpu"]
FT = ["--max-iters", "1", "--set", "batch_size=2",
      "--set", "eval_iters=1", "--eval-examples", "2", "--device", "cpu"]


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory) -> Path:
    """Texts, a GPT run, a train-dates run, a bigram checkpoint and damaged files, made once."""
    from course_lib.bigram import BigramLanguageModel
    from course_lib.chat.template import ChatTokenizer
    from course_lib.model import GPT, GPTConfig
    from course_lib.dates import date_batch_fn, date_tokenizer
    from course_lib.seq2seq import Seq2Seq, Seq2SeqConfig
    from course_lib.tokenizers import CharTokenizer
    from course_lib.train import TrainConfig, Trainer

    box = tmp_path_factory.mktemp("sweep")
    (box / "text.txt").write_text(load_text()[:20_000], encoding="utf-8")
    (box / "a-file").write_text("not a folder")
    (box / "random.pt").write_bytes(bytes(range(256)) * 20)
    (box / "empty.pt").write_bytes(b"")
    (box / "folder").mkdir()
    assert cli_main(["train", "--text", str(box / "text.txt"),
                     "--out", str(box / "gpt"), "--set", "max_iters=1", *TINY]) == 0
    tokenizer = date_tokenizer()  # a small train-dates run, as the command records it
    dates = Trainer(Seq2Seq(Seq2SeqConfig(vocab_size=tokenizer.vocab_size, n_encoder_layers=1,
                                          n_decoder_layers=1, n_head=2, n_embd=16)),
                    config=TrainConfig(max_iters=1, batch_size=2, eval_iters=1, warmup_iters=0),
                    batch_fn=date_batch_fn(tokenizer, 2), out_dir=box / "dates",
                    tokenizer=tokenizer, progress=False, verbose=False)
    dates.trained_on = {"command": "train-dates", "preset": None, "text": None, "text_sha256": None}
    dates.train()
    save_checkpoint(box / "bigram.pt", BigramLanguageModel(5), tokenizer=CharTokenizer("abcde"))
    chat_tokenizer = ChatTokenizer(CharTokenizer("abcde"))  # a chat model, untrained
    save_checkpoint(box / "chat.pt", GPT(GPTConfig(vocab_size=chat_tokenizer.vocab_size,
                                                   block_size=16, n_layer=1, n_head=1,
                                                   n_embd=8)), tokenizer=chat_tokenizer)
    good = torch.load(box / "gpt" / "ckpt.pt", weights_only=True)
    torch.save({**good, "tokenizer": {**good["tokenizer"], "chars": 5}}, box / "badtok.pt")
    torch.save({**good, "model": {**good["model"], "wte.weight": torch.zeros(3, 16)}},
               box / "shape.pt")
    torch.save({**good, "model_config": {**good["model_config"], "n_embd": 1_000_000}},
               box / "huge_cfg.pt")
    return box


def table(box: Path) -> list:
    """(name, which main, argv, a phrase the error line must contain, marks)."""
    text, gpt, dates = (str(box / "text.txt"), str(box / "gpt" / "ckpt.pt"),
                        str(box / "dates" / "ckpt.pt"))
    pre = str(PRETRAINED_PATH)
    new = str(box / "new-run")  # never created: every case fails before writing
    rows = [
        # train
        ("train: missing --text", "cli",
         ["train", "--text", str(box / "nope.txt"), "--out", new], "no such text file"),
        ("train: --text /dev/zero", "cli",
         ["train", "--text", "/dev/zero", "--out", new, *TINY], "is not text"),
        ("train: --text a folder", "cli",
         ["train", "--text", str(box), "--out", new], "it is a folder"),
        ("train: unknown setting", "cli",
         ["train", "--text", text, "--set", "n_layers=6", "--out", new], "unknown setting"),
        ("train: learning_rate nan", "cli",
         ["train", "--text", text, "--set", "learning_rate=nan", "--out", new],
         "learning_rate must be"),
        ("train: min_lr above learning_rate", "cli",
         ["train", "--text", text, "--set", "min_lr=0.5", "--out", new], "is above learning_rate"),
        ("train: a model larger than the machine", "cli",
         ["train", "--text", text, "--set", "n_embd=1200000", "--out", new], "needs at least"),
        ("train: rope_theta 1e-300", "cli",
         ["train", "--text", text, "--set", "rope_theta=1e-300", "--out", new],
         "rope_theta must be"),
        ("train: --max-iters 0", "cli",
         ["train", "--text", text, "--max-iters", "0", "--out", new], "max_iters"),
        ("train: unknown preset", "cli",
         ["train", "--preset", "gpt5", "--out", new], "unknown preset"),
        ("train: --out a file", "cli",
         ["train", "--text", text, "--out", str(box / "a-file"), *TINY], "cannot write to"),
        ("train: existing run without --resume", "cli",
         ["train", "--text", text, "--out", str(box / "gpt"), *TINY], "pass --resume"),
        ("train: --resume a train-dates run", "cli",
         ["train", "--out", str(box / "dates"), "--resume"], "made by `train-dates`"),
        ("train: --max-iters abc", "cli", ["train", "--max-iters", "abc"], "invalid int value"),
        # sample
        ("eval: missing checkpoint", "cli",
         ["eval", "--checkpoint", str(box / "nope.pt")], "no checkpoint at"),
        ("eval: random bytes", "cli",
         ["eval", "--checkpoint", str(box / "random.pt")], "is not a checkpoint"),
        ("eval: an unknown task", "cli",
         ["eval", "--checkpoint", pre, "--tasks", "nope"], "unknown task nope"),
        ("eval: --limit 0", "cli", ["eval", "--checkpoint", pre, "--limit", "0"],
         "--limit must be at least 1"),
        ("sample: missing checkpoint", "cli",
         ["sample", "--checkpoint", str(box / "nope.pt")], "no checkpoint at"),
        ("sample: random bytes", "cli",
         ["sample", "--checkpoint", str(box / "random.pt")], "is not a checkpoint"),
        ("sample: empty file", "cli",
         ["sample", "--checkpoint", str(box / "empty.pt")], "is empty"),
        ("sample: /dev/zero", "cli", ["sample", "--checkpoint", "/dev/zero"], "not a regular file"),
        ("sample: a folder", "cli", ["sample", "--checkpoint", str(box / "folder")], "is a folder"),
        ("sample: damaged tokenizer", "cli",
         ["sample", "--checkpoint", str(box / "badtok.pt")], "unusable tokenizer"),
        ("sample: wrong shape", "cli",
         ["sample", "--checkpoint", str(box / "shape.pt")], "of another shape"),
        ("sample: config larger than the machine", "cli",
         ["sample", "--checkpoint", str(box / "huge_cfg.pt")], "too large for this machine"),
        ("sample: an encoder-decoder", "cli", ["sample", "--checkpoint", dates], "translate"),
        ("sample: --tokens 0", "cli", ["sample", "--checkpoint", gpt, "--tokens", "0"],
         "--tokens must be at least 1"),
        ("sample: --tokens 10**11", "cli",
         ["sample", "--checkpoint", gpt, "--tokens", "100000000000"], "at most"),
        ("sample: --seed 10**23", "cli",
         ["sample", "--checkpoint", gpt, "--seed", "99999999999999999999999"], "seed must be"),
        ("sample: --temperature nan", "cli",
         ["sample", "--checkpoint", gpt, "--temperature", "nan"], "temperature"),
        ("sample: --top-p 2", "cli",
         ["sample", "--checkpoint", gpt, "--top-p", "2"], "--top-p must be"),
        ("sample: a prompt outside the vocabulary", "cli",
         ["sample", "--checkpoint", gpt, "--prompt", "\u00e9"], "unknown character"),
        # train-dates
        ("train-dates: --max-iters 0", "cli",
         ["train-dates", "--max-iters", "0", "--out", new], "--max-iters must be"),
        ("train-dates: --out a file", "cli",
         ["train-dates", "--out", str(box / "a-file"), "--max-iters", "1"], "cannot write to"),
        ("train-dates: existing run without --resume", "cli",
         ["train-dates", "--out", str(box / "dates")], "pass --resume"),
        ("train-dates: --resume a train run", "cli",
         ["train-dates", "--out", str(box / "gpt"), "--resume"], "made by `train`"),
        # translate
        ("translate: missing checkpoint", "cli",
         ["translate", "--checkpoint", str(box / "nope.pt"), "x"], "train-dates"),
        ("translate: random bytes", "cli",
         ["translate", "--checkpoint", str(box / "random.pt"), "x"], "is not a checkpoint"),
        ("translate: a GPT checkpoint", "cli",
         ["translate", "--checkpoint", gpt, "x"], "not an encoder-decoder"),
        ("translate: --beam 0", "cli",
         ["translate", "--checkpoint", dates, "3 May", "--beam", "0"], "beam_size"),
        ("translate: --beam 100000", "cli",
         ["translate", "--checkpoint", dates, "3 May", "--beam", "100000"], "<= 100"),
        ("translate: an empty text", "cli", ["translate", "--checkpoint", dates, ""], "empty"),
        # finetune
        ("finetune: missing base", "cli",
         ["finetune", "--checkpoint", str(box / "nope.pt"), "--out", new, *FT], "no checkpoint at"),
        ("finetune: random bytes", "cli",
         ["finetune", "--checkpoint", str(box / "random.pt"), "--out", new, *FT],
         "is not a checkpoint"),
        ("finetune: an encoder-decoder base", "cli",
         ["finetune", "--checkpoint", dates, "--out", new, *FT],
         "holds a 'seq2seq' model: a fine-tuning run starts from a GPT"),
        ("finetune: --lora-rank 10**9", "cli", ["finetune", "--checkpoint", pre, "--lora-rank",
                                                "1000000000", "--out", new, *FT], "is larger than"),
        ("finetune: --lora-rank 0", "cli",
         ["finetune", "--checkpoint", pre, "--lora-rank", "0", "--out", new, *FT], "rank"),
        ("finetune: --lora-alpha inf", "cli", ["finetune", "--checkpoint", pre, "--lora-rank", "2",
                                               "--lora-alpha", "inf", "--out", new, *FT], "finite"),
        ("finetune: --lora-targets ''", "cli", ["finetune", "--checkpoint", pre, "--lora-rank", "2",
                                                "--lora-targets", "", "--out", new,
                                                *FT], "--lora-targets names no layer"),
        ("finetune: --out a file", "cli",
         ["finetune", "--checkpoint", pre, "--out", str(box / "a-file"), *FT], "cannot write to"),
        ("finetune: a bad --set", "cli", ["finetune", "--checkpoint", pre, "--set",
                                          "learning_rate=-1", "--out", new, *FT], "learning_rate"),
        pytest.param("finetune: --lora-targets without --lora-rank (ftg_noLoRA)", "cli",
                     ["finetune", "--checkpoint", pre,
                      "--lora-targets", "mlp.c_fc", "--out", new, *FT], "lora-rank",
                     ),
        pytest.param("finetune: --lora-alpha without --lora-rank (fa_noLoRA)", "cli",
                     ["finetune", "--checkpoint", pre, "--lora-alpha", "64", "--out", new, *FT],
                     "lora-rank", ),
        pytest.param("finetune: --eval-examples 0 (ft_eval0)", "cli",
                     ["finetune", "--checkpoint", pre, "--out", new,
                      *FT[:-3], "--eval-examples", "0", "--device", "cpu"],
                     "eval-examples"),
        # every model kind is registered by a bare `import
        # course_lib` (issue 30), in-process and in a fresh one
        pytest.param("finetune: a bigram base (ft_bigram)", "cli",
                     ["finetune", "--checkpoint", str(box / "bigram.pt"), "--out", new, *FT],
                     "holds a 'bigram' model"),
        # dpo and grpo (chapter 18)
        ("dpo: missing base", "cli",
         ["dpo", "--checkpoint", str(box / "nope.pt"), "--out", new, "--device", "cpu"],
         "no checkpoint at"),
        ("dpo: a base that cannot write digits", "cli",
         ["dpo", "--checkpoint", gpt, "--out", new, "--device", "cpu"],
         "cannot write the arithmetic task's characters"),
        ("dpo: a bigram base", "cli",
         ["dpo", "--checkpoint", str(box / "bigram.pt"), "--out", new, "--device", "cpu"],
         "holds a 'bigram' model"),
        ("dpo: no --checkpoint", "cli",
         ["dpo", "--out", new, "--device", "cpu"], "--checkpoint is needed"),
        ("dpo: beta 0", "cli",
         ["dpo", "--checkpoint", gpt, "--set", "beta=0", "--out", new], "beta must be"),
        ("dpo: --out a file", "cli",
         ["dpo", "--checkpoint", gpt, "--out", str(box / "a-file")], "cannot write to"),
        ("grpo: random bytes", "cli",
         ["grpo", "--checkpoint", str(box / "random.pt"), "--out", new, "--device", "cpu"],
         "is not a checkpoint"),
        ("grpo: unknown setting", "cli",
         ["grpo", "--checkpoint", gpt, "--set", "betta=1", "--out", new], "unknown setting"),
        ("grpo: group_size 1", "cli",
         ["grpo", "--checkpoint", gpt, "--set", "group_size=1", "--out", new],
         "group_size must be"),
        ("grpo: a model setting", "cli",
         ["grpo", "--checkpoint", gpt, "--set", "n_layer=2", "--out", new], "keeps its shape"),
        ("grpo: --reward length", "cli",
         ["grpo", "--checkpoint", gpt, "--reward", "length", "--out", new], "invalid choice"),
        ("grpo: --resume a train run", "cli",
         ["grpo", "--out", str(box / "gpt"), "--resume", "--device", "cpu"], "made by `train`"),
        # quantize and qat (chapter 23; their full rows are in test_bad_input_cli.quantize_cases)
        ("quantize: --bits 3", "cli",
         ["quantize", gpt, "--bits", "3", "--out", new], "quantize writes 4-bit"),
        ("qat: unknown setting", "cli",
         ["qat", "--checkpoint", gpt, "--set", "betta=1", "--out", new], "unknown setting"),
        # chat-sft
        ("chat-sft: missing base", "cli",
         ["chat-sft", "--checkpoint", str(box / "nope.pt"), "--out", new, *CS], "no checkpoint at"),
        ("chat-sft: random bytes", "cli",
         ["chat-sft", "--checkpoint", str(box / "random.pt"), "--out", new, *CS],
         "is not a checkpoint"),
        ("chat-sft: an encoder-decoder base", "cli",
         ["chat-sft", "--checkpoint", dates, "--out", new, *CS], "holds a 'seq2seq' model"),
        ("chat-sft: a bad --set", "cli",
         ["chat-sft", "--set", "learning_rate=-1", "--out", new, *CS], "learning_rate must be"),
        ("chat-sft: a model setting", "cli", ["chat-sft", "--set", "n_layer=2", "--out", new, *CS],
         "keeps its shape"),
        ("chat-sft: --out a file", "cli", ["chat-sft", "--out", str(box / "a-file"), *CS],
         "a-file"),
        ("chat-sft: --resume a finetune run", "cli", ["chat-sft", "--out", str(box / "gpt"),
                                                      "--resume",
                                                      "--device", "cpu"], "not `chat-sft`"),
        # induction (chapter 21)
        ("induction: a bad --set", "cli",
         ["induction", "--set", "learning_rate=-1", "--out", new, "--device", "cpu"],
         "learning_rate must be"),
        ("induction: --out a file", "cli",
         ["induction", "--out", str(box / "a-file"), "--device", "cpu"], "a-file"),
        ("induction: --resume a train run", "cli", ["induction", "--out", str(box / "gpt"),
                                                    "--resume",
                                                    "--device", "cpu"], "not `induction`"),
        # chat
        ("chat: missing checkpoint", "cli",
         ["chat", "--checkpoint", str(box / "nope.pt")], "no checkpoint at"),
        ("chat: random bytes", "cli",
         ["chat", "--checkpoint", str(box / "random.pt")], "is not a checkpoint"),
        ("chat: not a chat model", "cli", ["chat", "--checkpoint", pre], "not a chat model"),
        ("chat: --temperature -1", "cli",
         ["chat", "--checkpoint", str(box / "chat.pt"), "--temperature", "-1"],
         "temperature must be"),
        ("chat: --max-tokens 0", "cli",
         ["chat", "--checkpoint", str(box / "chat.pt"), "--max-tokens", "0"], "must be at least 1"),
        ("chat: --max-tokens -1 (review 2026-11-28 c17)", "cli",
         ["chat", "--checkpoint", str(box / "chat.pt"), "--max-tokens", "-1"],
         "error: --max-tokens must be at least 1, got -1"),
        ("chat: --top-k 0", "cli", ["chat", "--checkpoint", str(box / "chat.pt"), "--top-k", "0"],
         "error: --top-k must be an integer >= 1"),
        # review 2026-11-28 C3 (c27, c28): chat-sft is
        # advised only for what it can start from, a GPT
        ("chat: a bigram (c27)", "cli", ["chat", "--checkpoint", str(box / "bigram.pt")],
         "holds a 'bigram' model, not a chat model: `chat-sft` makes one from a GPT"),
        ("chat: an encoder-decoder (c28)", "cli", ["chat", "--checkpoint", dates],
         "holds a 'seq2seq' model, not a chat model: `chat-sft` makes one from a GPT"),
        ("chat: --web --port 0", "cli",
         ["chat", "--checkpoint", str(box / "chat.pt"), "--web", "--port", "0"],
         "--port must be in [1, 65535]"),
        # params
        ("params: unknown preset", "cli", ["params", "--preset", "gpt5"], "unknown preset"),
        ("params: no --preset", "cli", ["params"], "required: --preset"),
        # the tools
        ("tools book execute: not a notebook", "tools",
         ["book", "execute", str(box / "nope.ipynb")], "not a notebook file"),
        ("tools assignments: --out a file", "tools", ["assignments", "build", "--chapter", "3",
                                                      "--out",
                                                      str(box / "a-file")],
         "is a file, not a folder"),
        ("tools assignments: --out below a file", "tools", ["assignments", "build",
                                                            "--chapter", "3",
                                                            "--out", str(box / "a-file" / "sub")],
         "is a file, not a folder"),
        ("tools assignments: no such chapter", "tools",
         ["assignments", "build", "--chapter", "99", "--out", new], "no notebook for chapter 99"),
        ("tools assignments: no such book", "tools", ["assignments", "build",
                                                      "--book", str(box / "nope"),
                                                      "--out", new], "no book folder"),
        ("tools pretrained: --out a folder", "tools",
         ["pretrained", "--out", str(box / "folder")], "is a folder"),
        ("tools pretrained: --out below a file", "tools",
         ["pretrained", "--out", str(box / "a-file" / "x.pt")], "is a file, not a folder"),
        ("tools gpu-lane: --chapters x", "tools",
         ["gpu-lane", "--chapters", "x"], "--chapters must be"),
        ("tools: unknown command", "tools", ["nope"], "invalid choice"),
    ]
    return [row if hasattr(row, "values") else pytest.param(*row) for row in rows]


def snapshot(box: Path) -> dict[str, str]:
    """Every file (by SHA-256) and folder of the sandbox, and the shipped model."""
    found = {str(p.relative_to(box)) + ("/" if p.is_dir() else ""):
             hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else ""
             for p in sorted(box.rglob("*"))}
    found["<shipped model>"] = hashlib.sha256(PRETRAINED_PATH.read_bytes()).hexdigest()
    return found


def check_promise(name: str, status, err: str, out: str, phrase: str | None) -> None:
    assert status not in (0, None), f"{name}: exit status {status}"
    assert "Traceback" not in err + out, f"{name}: a traceback:\n{err[-2000:]}"
    lines = err.strip("\n").splitlines()
    # argparse: its usage block, then the one error line
    if lines and lines[0].startswith("usage:"):
        lines = lines[-1:]
    assert len(lines) == 1 and "error" in lines[0], (f"{name}: not one line on stderr: "
                                                     f"{err[-1000:]!r}")
    if phrase is not None:
        assert phrase in lines[0], f"{name}: {lines[0]!r} does not name {phrase!r}"


def _run_in_process(which: str, argv: list[str]) -> int:
    try:
        return (cli_main if which == "cli" else tools_main)(argv)
    except SystemExit as e:  # argparse
        return e.code


# Collected with a placeholder for the sandbox, which each test puts in.
@pytest.mark.parametrize("name, which, argv, phrase", table(Path("/sandbox")),
                         ids=[p.values[0] for p in table(Path("/sandbox"))])
def test_every_command_refuses_bad_input_with_one_line(sandbox, capfd, monkeypatch,
                                                       name, which, argv, phrase):
    argv = [a.replace("/sandbox", str(sandbox)) for a in argv]
    monkeypatch.chdir(sandbox)  # default output folders (runs/...) would appear here
    before = snapshot(sandbox)
    capfd.readouterr()
    status = _run_in_process(which, argv)
    out, err = capfd.readouterr()
    check_promise(name, status, err, out, phrase)
    assert snapshot(sandbox) == before, f"{name}: left something behind or changed a file"


def test_the_table_covers_every_command():
    """A command added to the CLI or the tools must get rows here."""
    from course_lib.cli import build_parser

    commands = set(build_parser()._subparsers._group_actions[0].choices)
    covered = {p.values[0].split(":")[0] for p in table(Path("/sandbox"))}
    assert commands <= covered, f"commands without a bad input: {commands - covered}"
    assert {"tools book execute", "tools assignments", "tools pretrained",
            "tools gpu-lane"} <= covered


# One case per command, as real processes: the exit status and stderr the shell sees.
REAL = ["train: --text /dev/zero", "sample: random bytes", "sample: --seed 10**23",
        "train-dates: --max-iters 0", "translate: --beam 100000", "finetune: --lora-rank 10**9",
        "params: unknown preset", "dpo: beta 0", "grpo: random bytes", "translate: --beam 100000",
        "finetune: --lora-rank 10**9", "params: unknown preset", "chat-sft: a model setting",
        "chat: not a chat model", "tools assignments: --out a file",
        "tools pretrained: --out a folder", "tools gpu-lane: --chapters x"]


@pytest.mark.slow  # ten processes that import torch
def test_the_sweep_in_real_processes(sandbox):
    rows = {p.values[0]: p.values for p in table(sandbox)}
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p))
    before = snapshot(sandbox)
    for start in range(0, len(REAL), 2):  # two processes at a time (a shared machine)
        running = []
        for name in REAL[start:start + 2]:
            _, which, argv, phrase = rows[name]
            module = "course_lib" if which == "cli" else "course_lib.tools"
            running.append((name, phrase, subprocess.Popen([sys.executable, "-m", module, *argv],
                                                           cwd=sandbox, env=env,
                                                           stdout=subprocess.PIPE,
                                                           stderr=subprocess.PIPE, text=True)))
        for name, phrase, process in running:
            out, err = process.communicate(timeout=300)
            check_promise(name, process.returncode, err, out, phrase)
    assert snapshot(sandbox) == before
