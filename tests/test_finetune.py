"""course_lib.finetune: the dates task for a decoder-only model (new characters, a prompt-masked
loss, exact match), and `python -m course_lib finetune` (built by course_lib.runs): full and LoRA
runs, resumed bit for bit, with their bad inputs. The gpt-lora model kind:
tests/test_lora_gpt.py."""
import shutil

import pytest
import torch
import torch.nn.functional as F

from course_lib.checkpoint import load_checkpoint, load_model
from course_lib.cli import main
from course_lib.data import load_text
from course_lib.finetune import (END, SEP, TASK_CHARS, answer_prompts, encode_examples,
                                 answers_exact_match, extend_tokenizer, longest_example, text_loss)
from course_lib.lora_gpt import extend_vocabulary
from course_lib.tokenizers import CharTokenizer
from course_lib.utils import IGNORE_INDEX
from model_helpers import pretrain_tiny_gpt

SHAKESPEARE = load_text("tinyshakespeare")[:20000]


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory):
    """A tiny GPT pretrained for a few steps on Shakespeare (seconds), saved as `train` saves it."""
    return pretrain_tiny_gpt(tmp_path_factory.mktemp("pretrained"))


def test_extended_tokenizer_keeps_old_ids_and_adds_what_the_task_needs(pretrained):
    _, ckpt = load_model(pretrained)
    old = CharTokenizer.from_dict(ckpt["tokenizer"])
    new = extend_tokenizer(old, TASK_CHARS)
    assert new.chars[:old.vocab_size] == old.chars
    added = "".join(new.chars[old.vocab_size:])
    assert added == "".join(sorted(set(TASK_CHARS) - set(old.chars)))
    # Shakespeare has a 3 (and no other digit)
    assert set("012456789/=") <= set(added) and "3" not in added
    text = "ROMEO: 3 March 2021=2021-03-03\n"
    assert new.decode(new.encode(text)) == text


def test_the_prompt_mask_keeps_only_the_answer():
    tok = CharTokenizer(sorted(set(TASK_CHARS + "ROMEO")))
    pairs = [("3 March 2021", "2021-03-03"), ("20210303", "2021-03-03"),
             ("the 1st of MAY, 1999", "1999-05-01")]
    x, y = encode_examples(tok, pairs, mask_prompt=True)
    x_all, y_all = encode_examples(tok, pairs, mask_prompt=False)
    assert torch.equal(x, x_all)
    for i, (source, target) in enumerate(pairs):
        full = source + SEP + target + END
        n = len(full) - 1
        assert tok.decode(x[i, :n]) == full[:-1]  # inputs: the whole text but its last character
        assert tok.decode(y_all[i, :n]) == full[1:]  # unmasked targets: the text shifted by one
        kept = y[i][y[i] != IGNORE_INDEX]
        assert tok.decode(kept) == target + END  # masked: the answer and the end token alone
        # the first kept target sits at the separator's position: it is predicted from SEP
        first = int((y[i] != IGNORE_INDEX).nonzero()[0])
        assert tok.decode([int(x[i, first])]) == SEP
        assert (y[i, n:] == IGNORE_INDEX).all() and (y_all[i, n:] == IGNORE_INDEX).all()  # pads


def test_the_model_loss_is_the_mean_over_answer_tokens(pretrained):
    base, ckpt = load_model(pretrained)
    tok = extend_tokenizer(CharTokenizer.from_dict(ckpt["tokenizer"]), TASK_CHARS)
    model = extend_vocabulary(base, tok.vocab_size - base.config.vocab_size).eval()
    x, y = encode_examples(tok, [("3 March 2021", "2021-03-03"), ("Mar 4 1999", "1999-03-04")])
    logits, loss = model(x, y)
    keep = y != IGNORE_INDEX
    manual = F.cross_entropy(logits[keep], y[keep])  # only the 2 x 11 answer targets
    assert int(keep.sum()) == 22
    torch.testing.assert_close(loss, manual)


def test_greedy_answers_equal_a_plain_argmax_loop(pretrained):
    base, ckpt = load_model(pretrained)
    tok = extend_tokenizer(CharTokenizer.from_dict(ckpt["tokenizer"]), TASK_CHARS)
    model = extend_vocabulary(base, tok.vocab_size - base.config.vocab_size).eval()
    sources = ["3 March 2021", "the 23rd of SEPTEMBER, 2027", "20210303"]
    got = answer_prompts(model, tok, sources, max_new_tokens=12)
    for source, answer in zip(sources, got):
        ids = tok.encode(source + SEP)
        for _ in range(12):  # one prompt at a time, the whole context every step
            nxt = int(model(torch.tensor([ids]))[0][0, -1].argmax())
            if nxt == tok.encode(END)[0]:
                break
            ids.append(nxt)
        assert answer == tok.decode(ids[len(source) + 1:])


def test_exact_match_counts_whole_answers(monkeypatch):
    import course_lib.finetune as ft
    pairs = [("a", "2021-03-03"), ("b", "1999-01-01"), ("c", "2000-12-31"), ("d", "1950-01-01")]
    answers = {"a": "2021-03-03", "b": "1999-01-0", "c": "2000-12-31", "d": "1950-01-011"}
    monkeypatch.setattr(ft, "answer_prompts", lambda model, tok,
                        sources: [answers[s] for s in sources])
    # a prefix or an extra character is wrong
    assert answers_exact_match(None, None, pairs, batch_size=3) == 2 / 4


def test_longest_example_fits_the_cpu_preset():
    tok = CharTokenizer(
        sorted(set(TASK_CHARS + "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"))
    )
    n = longest_example(tok)
    assert n == len("the 23rd of SEPTEMBER, 2027" + SEP + "2027-09-23" + END) <= 64


def test_text_loss_of_an_extended_model_is_close_to_the_base(pretrained):
    base, ckpt = load_model(pretrained)
    tok = CharTokenizer.from_dict(ckpt["tokenizer"])
    big_tok = extend_tokenizer(tok, TASK_CHARS)
    bigger = extend_vocabulary(base, big_tok.vocab_size - tok.vocab_size)
    before, after = text_loss(base, tok, SHAKESPEARE, 3,
                              8), text_loss(bigger, big_tok, SHAKESPEARE, 3, 8)
    assert before <= after < before + 0.3  # the new tokens only take a little probability mass


# --- the command line -----------------------------------------------------------------------------


def run(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_cli_finetunes_resumes_bit_for_bit_and_samples(pretrained, tmp_path, capsys):
    common = ["finetune", "--checkpoint", str(pretrained), "--task", "dates", "--eval-examples",
              "8", "--set", "batch_size=4", "--set", "eval_interval=2", "--set", "eval_iters=1"]
    code, out, _ = run(capsys, *common, "--max-iters", "4", "--out", str(tmp_path / "straight"))
    assert code == 0 and "exact match on 8 held-out dates" in out and "full fine-tuning" in out
    code, _, err = run(capsys, *common, "--max-iters", "2", "--out", str(tmp_path / "straight"))
    assert code == 2 and "already exists: pass --resume" in err
    # 2 steps, then resume to 4: the same weights as 4 straight steps
    assert run(capsys, *common, "--max-iters", "2", "--out", str(tmp_path / "split"))[0] == 0
    code, out, _ = run(capsys, *common, "--max-iters", "4", "--out", str(tmp_path / "split"),
                       "--resume")
    assert code == 0 and "resuming" in out and "at step 2 of 4" in out
    a, b = (
        load_checkpoint(tmp_path / "straight" / "ckpt.pt"),
        load_checkpoint(tmp_path / "split" / "ckpt.pt"),
    )
    assert all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])
    code, out, _ = run(capsys, "sample", "--checkpoint", str(tmp_path / "split" / "ckpt.pt"),
                       "--prompt", "3 March 2021=", "--tokens", "5", "--temperature", "0")
    assert code == 0 and out.startswith("3 March 2021=")


def test_cli_lora_run_resumes_and_checks_its_base(pretrained, tmp_path, capsys):
    base = tmp_path / "base.pt"
    shutil.copy(pretrained, base)
    common = ["finetune", "--checkpoint", str(base), "--lora-rank", "2", "--eval-examples", "4",
              "--set", "batch_size=4", "--set", "eval_interval=2", "--set", "eval_iters=1", "--out",
              str(tmp_path / "ft")]
    code, out, _ = run(capsys, *common, "--max-iters", "2")
    assert code == 0 and "LoRA rank 2" in out
    code, out, _ = run(capsys, *common, "--max-iters", "3", "--resume")
    assert code == 0 and "at step 2 of 3" in out
    assert run(capsys, "sample", "--checkpoint", str(tmp_path / "ft" / "ckpt.pt"), "--tokens",
               "3")[0] == 0
    code, _, err = run(capsys, *common[:-4], "--lora-rank", "4", "--out", str(tmp_path / "ft"),
                       "--resume")
    assert code == 2 and "LoRA rank 2" in err and err.count("\n") == 1
    base.unlink()
    code, _, err = run(capsys, *common, "--max-iters", "4", "--resume")
    assert code == 2 and "and that is missing" in err and err.count("\n") == 1
    assert "a resumed run keeps its base: give that base (or a copy of it)" in err
    code, _, err = run(capsys, "sample", "--checkpoint", str(tmp_path / "ft" / "ckpt.pt"))
    assert (code == 2 and err.startswith("error: the base model of this LoRA checkpoint")
            and err.count("\n") == 1)


@pytest.mark.parametrize("argv, message", [
    (["--task", "poems"], "unknown --task 'poems'"),
    (["--lora-rank", "0"], "rank must be a positive integer"),
    (["--set", "n_layer=2"], "keeps its shape"),
    (["--set", "colour=red"], "unknown setting"),
    (["--lora-rank", "2", "--lora-targets", "q_proj"], "match no layer"),
])
def test_cli_bad_input_is_one_line_and_writes_nothing(pretrained, tmp_path, capsys, argv, message):
    out = tmp_path / "ft"
    code, _, err = run(capsys, "finetune", "--checkpoint", str(pretrained), "--out", str(out),
                       *argv)
    assert code == 2 and message in err and err.count("\n") == 1
    assert not out.exists()


def test_cli_missing_checkpoint_is_one_line(tmp_path, capsys):
    code, _, err = run(capsys, "finetune", "--checkpoint", str(tmp_path / "nope.pt"), "--out",
                       str(tmp_path / "ft"))
    assert code == 2 and "no checkpoint at" in err and err.count("\n") == 1
    code, _, err = run(capsys, "finetune", "--out", str(tmp_path / "ft"))
    assert code == 2 and "--checkpoint is needed" in err


FAST = ["--max-iters", "1", "--set", "batch_size=2", "--set", "eval_iters=1", "--eval-examples",
        "1", "--device", "cpu"]


def test_a_finetune_checkpoint_records_what_made_it(pretrained, tmp_path, capsys):
    """The command, the task and the base (path and SHA-256): so that `train --resume` and
    `train-dates --resume` refuse it, naming `finetune` (tests/test_bad_input_cli.py)."""
    import hashlib

    assert run(capsys, "finetune", "--checkpoint", str(pretrained), *FAST, "--out",
               str(tmp_path / "ft"))[0] == 0
    saved = load_checkpoint(tmp_path / "ft" / "ckpt.pt")["trained_on"]
    assert saved == {"command": "finetune", "task": "dates",
                     "base_checkpoint": str(pretrained.resolve()),
                     "base_sha256": hashlib.sha256(pretrained.read_bytes()).hexdigest()}


def test_a_run_that_saves_while_another_waits_for_the_folder_is_not_overwritten(pretrained,
                                                                                tmp_path, capsys,
                                                                                  monkeypatch):
    """Row 14 of the reliability review: the checkpoint is looked for after the folder is claimed,
    so a run that gets the folder just after another finished in it is refused, not saved over
    it."""
    import contextlib

    import course_lib.run_folder as run_folder

    out = tmp_path / "race"
    claim = run_folder.claim_folder

    @contextlib.contextmanager
    def claimed_after_the_other_run_saved(folder):
        with claim(folder) as held:
            shutil.copy(pretrained, held / "ckpt.pt")  # the other run's finished checkpoint
            yield held

    monkeypatch.setattr(run_folder, "claim_folder", claimed_after_the_other_run_saved)
    code, _, err = run(capsys, "finetune", "--checkpoint", str(pretrained), *FAST, "--out",
                       str(out))
    assert code == 2 and "already exists: pass --resume" in err
    assert (out / "ckpt.pt").read_bytes() == pretrained.read_bytes()


def test_ctrl_c_during_the_final_evaluation_says_the_run_is_saved(pretrained, tmp_path, capsys,
                                                                  monkeypatch):
    import course_lib.runs.finetune as finetune_runs

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(finetune_runs, "answers_exact_match", interrupted)
    code, _, err = run(capsys, "finetune", "--checkpoint", str(pretrained), *FAST, "--out",
                       str(tmp_path / "ft"))
    assert code == 130 and err.count("\n") == 1
    assert f"the run is complete and saved in {tmp_path / 'ft' / 'ckpt.pt'} (step 1)" in err
    assert (tmp_path / "ft" / "ckpt.pt").exists()


def test_a_lora_run_whose_base_moved_resumes_from_the_same_bytes_elsewhere(pretrained, tmp_path,
                                                                           capsys):
    base, moved = tmp_path / "base.pt", tmp_path / "moved" / "base.pt"
    shutil.copy(pretrained, base)
    lora = ["finetune", "--lora-rank", "2", *FAST[2:], "--out", str(tmp_path / "ft")]
    assert run(capsys, *lora, "--checkpoint", str(base), "--max-iters", "1")[0] == 0
    moved.parent.mkdir()
    base.rename(moved)
    code, out, err = run(capsys, *lora, "--checkpoint", str(moved), "--max-iters", "2", "--resume")
    assert code == 0, err
    assert "at step 1 of 2" in out
    ckpt = load_checkpoint(tmp_path / "ft" / "ckpt.pt")
    assert (
        ckpt["model_config"]["base_checkpoint"]
        == str(moved.resolve())
        == ckpt["trained_on"]["base_checkpoint"]
    )
    assert run(capsys, "sample", "--checkpoint", str(tmp_path / "ft" / "ckpt.pt"), "--tokens",
               "3")[0] == 0
