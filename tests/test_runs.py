"""course_lib.runs: the one place that builds a run (preset or text + settings -> tokenizer ->
split -> model -> Trainer) and resumes one from its checkpoint, read once."""
from dataclasses import replace

import pytest
import torch

from course_lib import runs
from course_lib.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from course_lib.cli import main
from course_lib.data import load_text, train_val_split
from course_lib.model import GPT
from course_lib.presets import get_preset
from course_lib.tokenizers import CharTokenizer
from course_lib.train import Trainer

# A tiny model and run of the CPU preset: seconds on a CPU
SETTINGS = {"n_layer": "1", "n_head": "2", "n_embd": "16", "block_size": "16", "batch_size": "4",
            "eval_interval": "2", "eval_iters": "1", "max_iters": "4"}
QUIET = dict(device="cpu", progress=False, verbose=False)


def cli_args(settings: dict) -> list[str]:
    return ([arg for key, value in settings.items()
             for arg in ("--set", f"{key}={value}")] + ["--device", "cpu"])


@pytest.fixture(scope="module")
def text_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("text") / "sonnets.txt"
    path.write_text(load_text()[:20_000], encoding="utf-8")
    return path


def test_a_preset_run_is_what_the_command_line_trains_and_what_the_chapters_built_by_hand(tmp_path):
    run = runs.start_run("shakespeare-char-cpu", settings=SETTINGS, **QUIET)
    history = run.trainer.train()
    assert main(["train", "--preset", "shakespeare-char-cpu", *cli_args(SETTINGS), "--out",
                 str(tmp_path)]) == 0
    assert load_checkpoint(tmp_path / "ckpt.pt")["history"]["loss"] == history["loss"]
    # by hand, as chapters 7 and 12 did: the preset's corpus, a character tokenizer, 90/10, seed,
    # GPT
    preset = get_preset("shakespeare-char-cpu")
    text = load_text(preset.corpus)
    tokenizer = CharTokenizer.train(text)
    train_data, val_data = train_val_split(torch.tensor(tokenizer.encode(text)))
    torch.manual_seed(preset.train.seed)
    model = GPT(replace(preset.model, vocab_size=tokenizer.vocab_size, n_layer=1, n_head=2,
                        n_embd=16, block_size=16))
    config = replace(preset.train, batch_size=4, eval_interval=2, eval_iters=1, max_iters=4)
    by_hand = Trainer(model, train_data, val_data, config, progress=False, verbose=False).train()
    assert by_hand["loss"] == history["loss"] and by_hand["val_loss"] == history["val_loss"]
    assert torch.equal(run.train_data, train_data) and torch.equal(run.val_data, val_data)
    assert run.tokenizer.chars == tokenizer.chars and run.text == text
    assert run.trainer.trained_on == {
        "command": "train",
        "preset": "shakespeare-char-cpu",
        "text": None,
        "text_sha256": load_checkpoint(tmp_path / "ckpt.pt")["trained_on"]["text_sha256"],
    }


def test_make_trainer_builds_the_presets_model_on_your_tokens():
    preset = get_preset("shakespeare-bpe-cpu")
    tokenizer = CharTokenizer.train("abcdefgh ")
    data = torch.tensor(tokenizer.encode("abc defg hab " * 50))
    trainer = runs.make_trainer(preset, data[:500], data[500:], {"n_layer": 1, "max_iters": 3},
                                tokenizer=tokenizer, **QUIET)
    # the tokenizer's 9 characters
    assert trainer.model.config == replace(preset.model, vocab_size=9, n_layer=1)
    assert trainer.config == replace(preset.train, max_iters=3) and trainer.tokenizer is tokenizer
    torch.manual_seed(preset.train.seed)  # the run's seed, then the model: the same initial weights
    expected = GPT(replace(preset.model, vocab_size=9, n_layer=1))
    assert all(torch.equal(a, b) for a,
               b in zip(expected.state_dict().values(), trainer.model.state_dict().values()))
    with pytest.raises(ValueError,
                       match="vocab_size cannot be set: it is the tokenizer's vocabulary size"):
        runs.make_trainer(preset, data, data, {"vocab_size": 20}, tokenizer=tokenizer, **QUIET)
    # without a tokenizer the preset's vocabulary stands, and may be set
    assert runs.make_trainer("shakespeare-char-cpu", data, data, {"vocab_size": 9, "n_layer": 1},
                             **QUIET).model.config.vocab_size == 9


def test_the_precision_is_checked_once_where_the_run_is_built(monkeypatch):
    """The run builder resolves the device and checks the precision once, before any work; the
    Trainer it builds trusts it (it tests only fp16 off a GPU, without calling the full check)."""
    from course_lib import speed

    calls = []
    real = speed.check_precision
    for module in (runs.kind, speed):
        monkeypatch.setattr(module, "check_precision", lambda device,
                            dtype: calls.append((device, dtype)) or
                            real(device, dtype))
    data = torch.randint(65, (400,))
    runs.make_trainer("shakespeare-char-cpu", data, data, {"n_layer": 1, "max_iters": 2}, **QUIET)
    assert calls == [(torch.device("cpu"), "fp32")]


def test_a_preset_for_counting_only_is_refused():
    with pytest.raises(ValueError, match="counting parameters only"):
        runs.start_run("gpt2-small")


def test_a_run_built_here_resumes_bit_for_bit_reading_its_checkpoint_once(tmp_path, monkeypatch,
                                                                          text_file):
    settings = {**SETTINGS, "max_iters": "6"}
    straight = runs.start_run(text_file=str(text_file), settings=settings, **QUIET).trainer
    straight.train()
    first = runs.start_run(text_file=str(text_file), settings=settings, out_dir=tmp_path,
                           **QUIET).trainer
    first.train(until=3)
    torch.manual_seed(999)  # the world moves on before the resume
    reads = []
    real_load = torch.load
    monkeypatch.setattr(torch, "load", lambda *a, **k: reads.append(a[0]) or real_load(*a, **k))
    resumed = runs.resume_run(tmp_path / "ckpt.pt", text_file=str(text_file), **QUIET).trainer
    assert len(reads) == 1 and resumed.step == 3  # the checkpoint is read once
    resumed.train()
    assert resumed.history == straight.history
    assert all(torch.equal(a, b) for a, b in zip(straight.model.state_dict().values(),
                                                 resumed.model.state_dict().values()))


@pytest.mark.slow  # ten seconds or more on 2 cores (make unit leaves it out)
def test_the_command_lines_resume_reads_the_checkpoint_once(tmp_path, monkeypatch, capsys):
    out = str(tmp_path / "run")
    # --max-iters says it once
    settings = cli_args({k: v for k, v in SETTINGS.items() if k != "max_iters"})
    assert main(["train", *settings, "--max-iters", "2", "--out", out]) == 0
    reads = []
    real_load = torch.load
    monkeypatch.setattr(torch, "load", lambda *a,
                        **k: reads.append(str(a[0])) or real_load(*a, **k))
    assert main(["train", *settings, "--max-iters", "3", "--out", out, "--resume"]) == 0
    # once: before, the CLI and Trainer.resume each read it
    assert reads == [str(tmp_path / "run" / "ckpt.pt")]
    assert ("resuming" in capsys.readouterr().out
            and real_load(tmp_path / "run" / "ckpt.pt")["step"] == 3)


def test_a_resume_on_other_data_or_with_another_model_is_refused_naming_both(tmp_path, text_file):
    run = runs.start_run(text_file=str(text_file), settings=SETTINGS, out_dir=tmp_path, **QUIET)
    run.trainer.train()
    ckpt = tmp_path / "ckpt.pt"
    other = tmp_path / "other.txt"
    # the same characters
    other.write_text(text_file.read_text(encoding="utf-8")[::-1], encoding="utf-8")
    with pytest.raises(ValueError,
                       match=r"trained on the text sonnets.txt \(SHA-256 .*\), not on the text "
                                         r"other.txt .*pass --text sonnets.txt to resume it"):
        runs.resume_run(ckpt, text_file=str(other), **QUIET)
    with pytest.raises(ValueError, match="trained on the text sonnets.txt .*not on preset "
                                         "shakespeare-char-cpu's corpus: pass --text sonnets.txt"):
        runs.resume_run(ckpt, **QUIET)
    with pytest.raises(ValueError,
                       match="trained with --preset shakespeare-char-cpu, not shakespeare-bpe-cpu"):
        runs.resume_run(ckpt, preset="shakespeare-bpe-cpu", text_file=str(text_file), **QUIET)
    with pytest.raises(ValueError, match=r"--set n_layer=2: .*ckpt.pt was trained with n_layer=1, "
                                         r"and a resumed run "
                                         "keeps its model; leave --set n_layer out"):
        runs.resume_run(ckpt, {"n_layer": 2}, text_file=str(text_file), **QUIET)
    assert runs.resume_run(ckpt, {"n_layer": "1", "max_iters": 9}, text_file=str(text_file),
                           **QUIET).trainer.config.max_iters == 9  # the same model, a longer run


def test_a_resume_keeps_the_training_settings_that_make_the_run(tmp_path, text_file):
    """Review 2026-11-28 R5 (row 97): on --resume only train.RESUMABLE_SETTINGS may change; the seed
    (the evaluation batches, the recorded seed) and every other setting only as stored."""
    run = runs.start_run(text_file=str(text_file), settings=SETTINGS, out_dir=tmp_path, **QUIET)
    run.trainer.train()
    ckpt, text = tmp_path / "ckpt.pt", str(text_file)
    seed = run.trainer.config.seed
    with pytest.raises(ValueError, match=rf"--set seed=7: .*ckpt.pt was trained with seed={seed}, "
                                         r"and a resumed "
                                         "run keeps every training setting but .*max_iters.*; "
                                         "leave --set seed out"):
        runs.resume_run(ckpt, {"seed": "7"}, text_file=text, **QUIET)
    for key, value in (("batch_size", "3"), ("learning_rate", "0.5"), ("optimizer", "muon")):
        with pytest.raises(ValueError, match=f"--set {key}={value}: "):
            runs.resume_run(ckpt, {key: value}, text_file=text, **QUIET)
    # given again as stored (a resume command repeats its --set): accepted
    config = run.trainer.config
    same = {"seed": str(seed), "batch_size": str(config.batch_size),
            "learning_rate": repr(config.learning_rate)}
    changed = {"max_iters": 9, "eval_interval": "3", "lr_decay_iters": "9", "compile": "false"}
    resumed = runs.resume_run(ckpt, same | changed, text_file=text, **QUIET).trainer.config
    assert (resumed.max_iters, resumed.eval_interval, resumed.lr_decay_iters,
            resumed.seed) == (9, 3, 9, seed)


def test_a_checkpoint_without_a_training_run_cannot_be_resumed(tmp_path, tiny_model):
    path = save_checkpoint(tmp_path / "model.pt", tiny_model())
    with pytest.raises(CheckpointError, match="stores a model but no training run to resume"):
        runs.resume_run(path, **QUIET)



@pytest.mark.slow  # ten seconds or more on 2 cores (make unit leaves it out)
def test_a_dates_run_resumed_from_its_checkpoint_continues_bit_for_bit(tmp_path):
    """Chapter 11's encoder-decoder, built here like GPT pretraining: 2 steps then 1 more equal 3
    straight."""
    straight = runs.start_dates_run(tmp_path / "straight", 3, device="cpu", progress=False)
    straight.train()
    first = runs.start_dates_run(tmp_path / "split", 2, device="cpu", progress=False)
    first.train()
    assert first.trained_on["command"] == "train-dates"
    resumed = runs.resume_dates_run(tmp_path / "split" / "ckpt.pt", 3, device="cpu", progress=False)
    assert resumed.step == 2
    resumed.train()
    assert resumed.history["loss"] == straight.history["loss"]
    assert all(torch.equal(a, b) for a, b in zip(straight.model.state_dict().values(),
                                                 resumed.model.state_dict().values()))
    with pytest.raises(ValueError, match="made by `train-dates`, not `train`"):
        runs.resume_run(tmp_path / "split" / "ckpt.pt", **QUIET)
