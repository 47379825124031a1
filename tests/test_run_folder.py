"""course_lib.run_folder: one run holds its --out (a lock file), and one function opens the folder
for a new run or for --resume: the checkpoint looked for inside the claim, read once, and made by
the same command. The command line's cases are rows of tests/test_bad_input_cli.py."""
import os

import pytest
import torch

from course_lib.checkpoint import save_checkpoint
from course_lib.model import GPT, GPTConfig
from course_lib.run_folder import (LOCK_NAME, FolderInUse, check_made_by, claim_folder, made_by,
                                   open_run)


def tiny_checkpoint(path, trained_on=None):
    model = GPT(GPTConfig(vocab_size=5, block_size=4, n_layer=1, n_head=1, n_embd=4))
    return save_checkpoint(path, model, trained_on=trained_on)


def test_a_new_run_gets_no_checkpoint_and_leaves_no_folder_when_it_saves_nothing(tmp_path):
    out = tmp_path / "a" / "b"
    with open_run(out, resume=False, command="train") as folder:
        assert folder.checkpoint is None and folder.checkpoint_path == out / "ckpt.pt"
        assert (out / LOCK_NAME).read_text() == str(os.getpid())
    assert not (tmp_path / "a").exists()  # it made both folders, saved nothing, and removed them


def test_an_existing_checkpoint_needs_resume_and_is_read_once(tmp_path, monkeypatch):
    tiny_checkpoint(tmp_path / "ckpt.pt",
                    {"command": "train", "preset": "p", "text": None, "text_sha256": "x"})
    with pytest.raises(FileExistsError, match="already exists: pass --resume to continue that run"):
        with open_run(tmp_path, resume=False, command="train"):
            pass
    import course_lib.run_folder as run_folder
    reads = []
    monkeypatch.setattr(run_folder, "load_checkpoint",
                        lambda p: reads.append(p) or torch.load(p, weights_only=True))
    with open_run(tmp_path, resume=True, command="train") as folder:
        assert folder.checkpoint["step"] == 0
    assert reads == [tmp_path / "ckpt.pt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt.pt"]  # the lock is gone


def test_the_command_that_made_a_checkpoint_is_recorded_or_told_by_its_kind(tmp_path):
    assert made_by({"trained_on": {"command": "finetune"}, "model_kind": "gpt"}) == "finetune"
    assert made_by({"trained_on": None, "model_kind": "gpt-lora"}) == "finetune"
    assert made_by({"trained_on": None, "model_kind": "seq2seq"}) == "train-dates"
    assert made_by({"trained_on": None, "model_kind": "gpt"}) == "train"  # format version 2
    with pytest.raises(ValueError, match=r"was made by `finetune`, not `train`: resume it with "
                                         r"`python -m course_lib finetune --out .* --resume`"):
        check_made_by({"trained_on": {"command": "finetune"}, "model_kind": "gpt"},
                      tmp_path / "ckpt.pt", "train")


def test_a_lock_folder_or_garbage_lock_is_one_clear_refusal(tmp_path):
    (tmp_path / "dir" / LOCK_NAME).mkdir(parents=True)
    with pytest.raises(FolderInUse,
                       match=r"\.run\.lock is a folder, not a run's lock file: remove it"):
        with claim_folder(tmp_path / "dir"):
            pass
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    (fresh / LOCK_NAME).write_text("garbage")
    with pytest.raises(FolderInUse, match="being claimed by another run at this moment"):
        with claim_folder(fresh):
            pass
    os.utime(fresh / LOCK_NAME, (0, 0))  # the same garbage, old: debris, taken over
    with claim_folder(fresh):
        assert (fresh / LOCK_NAME).read_text() == str(os.getpid())
