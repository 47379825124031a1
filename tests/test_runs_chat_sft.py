"""The chat fine-tune as a kind of run (course_lib.runs.chat_sft): built from the shipped pretrained
model, resumed bit for bit, refused when resumed by another command, and the command line's
``chat-sft``."""

import re

import pytest
import torch

from course_lib import runs
from course_lib.runs import chat_sft
from course_lib.chat.template import ChatTokenizer
from course_lib.checkpoint import load_checkpoint
from course_lib.cli import main
from course_lib.pretrained import pretrained_checkpoint

SETTINGS = {"batch_size": "4", "eval_interval": "2", "eval_iters": "1"}
QUIET = dict(device="cpu", progress=False)


def test_a_chat_fine_tune_resumed_from_its_checkpoint_continues_bit_for_bit(tmp_path):
    base = pretrained_checkpoint()
    straight = runs.start_chat_sft_run(
        base, {**SETTINGS, "max_iters": "3"}, out_dir=tmp_path / "straight", **QUIET
    )
    straight.train()
    first = runs.start_chat_sft_run(
        base, {**SETTINGS, "max_iters": "2"}, out_dir=tmp_path / "split", **QUIET
    )
    first.train()
    resumed = runs.resume_chat_sft_run(tmp_path / "split" / "ckpt.pt", {"max_iters": "3"}, **QUIET)
    assert resumed.step == 2
    resumed.train()
    assert resumed.history["loss"] == straight.history["loss"]
    assert all(
        torch.equal(a, b)
        for a, b in zip(straight.model.state_dict().values(), resumed.model.state_dict().values())
    )
    ckpt = load_checkpoint(tmp_path / "split" / "ckpt.pt")
    assert (
        ckpt["trained_on"]["command"] == "chat-sft" and ckpt["trained_on"]["from_scratch"] is False
    )
    assert ckpt["tokenizer"]["type"] == "chat"
    with pytest.raises(ValueError, match="made by `chat-sft`, not `finetune`"):
        runs.resume_finetune_run(tmp_path / "split" / "ckpt.pt", **QUIET)
    with pytest.raises(ValueError, match="made by `train`, not `chat-sft`"):
        runs.resume_chat_sft_run(base, **QUIET)


def test_the_fine_tune_starts_from_the_pretrained_weights_and_the_control_from_scratch(tmp_path):
    base = pretrained_checkpoint()
    tuned = runs.start_chat_sft_run(base, {**SETTINGS, "max_iters": "1"}, **QUIET)
    control = runs.start_chat_sft_run(
        base, {**SETTINGS, "max_iters": "1"}, from_scratch=True, **QUIET
    )
    assert isinstance(tuned.tokenizer, ChatTokenizer) and tuned.model.config == control.model.config
    pretrained = load_checkpoint(base)["model"]["blocks.0.attn.c_attn.weight"].float()
    assert torch.equal(tuned.model.state_dict()["blocks.0.attn.c_attn.weight"], pretrained)
    assert not torch.equal(control.model.state_dict()["blocks.0.attn.c_attn.weight"], pretrained)
    assert control.trained_on["from_scratch"] is True
    with pytest.raises(ValueError, match="keeps its shape"):
        runs.start_chat_sft_run(base, {"n_layer": "2"}, **QUIET)


def chat_sft_args(out, *options) -> list[str]:
    """``chat-sft`` into ``out`` on the CPU with the tiny SETTINGS, and ``options`` before them."""
    return ["chat-sft", "--out", str(out), "--device", "cpu", *options,
            *sum((["--set", f"{k}={v}"] for k, v in SETTINGS.items()), [])]


def test_the_command_line_fine_tunes_and_resumes(tmp_path, capsys):
    out = tmp_path / "chat"
    args = chat_sft_args(out)
    assert main(args + ["--max-iters", "2"]) == 0
    assert "saved" in capsys.readouterr().out
    assert main(args + ["--max-iters", "3", "--resume"]) == 0
    assert "resuming" in capsys.readouterr().out and load_checkpoint(out / "ckpt.pt")["step"] == 3
    assert main(args + ["--max-iters", "3"]) == 2  # a folder with a run in it, without --resume


def test_a_resume_refuses_options_that_would_be_ignored_or_rewrite_the_run(tmp_path, capsys):
    """Review 2026-11-28 R4 (rows 12-13) and R5 (row 95): --from-scratch, another --checkpoint and a
    training setting outside train.RESUMABLE_SETTINGS are refused on --resume in one line (exit 2,
    the checkpoint untouched); the run's own base, given again, is accepted."""
    from course_lib.checkpoint import save_checkpoint
    from course_lib.model import GPT, GPTConfig

    out = tmp_path / "chat"
    args = chat_sft_args(out)
    assert main(args + ["--max-iters", "1"]) == 0
    before = (out / "ckpt.pt").read_bytes()
    other = save_checkpoint(tmp_path / "other.pt", GPT(GPTConfig(n_layer=1, n_head=2, n_embd=16)))
    refused = [
        (
            ["--from-scratch"],
            "--from-scratch: .*ckpt.pt is a chat fine-tune from the pretrained model, and a "
            "resumed run keeps how it started; leave --from-scratch out",
        ),
        (
            ["--checkpoint", str(other)],
            f"--checkpoint {other}: .*ckpt.pt starts from .*, and that is another "
            "file; a resumed run keeps its base: .*leave "
            "--checkpoint out",
        ),
        (
            ["--set", "seed=7"],
            "--set seed=7: .*ckpt.pt was trained with seed=1337, and a resumed run keeps",
        ),
        (
            ["--pack"],
            "--pack: .*ckpt.pt was not trained on packed rows, and a resumed run "
            "keeps how it started",
        ),
    ]
    for extra, phrase in refused:
        capsys.readouterr()
        assert main(args + ["--max-iters", "2", "--resume", *extra]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and re.search(phrase, err), err
    assert (out / "ckpt.pt").read_bytes() == before
    assert (
        main(args + ["--max-iters", "2", "--resume", "--checkpoint", str(pretrained_checkpoint())])
        == 0
    )


def test_the_start_check_of_a_resume_reads_what_the_checkpoint_records(tmp_path):
    base = tmp_path / "base.pt"
    base.write_bytes(b"the base")
    moved = tmp_path / "moved.pt"
    moved.write_bytes(b"the base")
    from course_lib.lora_gpt import file_sha256

    scratch = {"from_scratch": True, "base_checkpoint": str(base), "base_sha256": file_sha256(base)}
    check = chat_sft._check_same_start
    check(tmp_path / "ckpt.pt", scratch, moved, True)  # a moved copy of the base is the base
    with pytest.raises(ValueError, match="from_scratch=False: .* is a chat fine-tune from scratch"):
        check(tmp_path / "ckpt.pt", scratch, None, False)
    with pytest.raises(ValueError, match="and that is missing"):
        check(tmp_path / "ckpt.pt", scratch, tmp_path / "gone.pt", None)


def test_a_packed_run_records_it_and_resumes_packed(tmp_path, capsys):
    """``chat-sft --pack`` (issue 54): rows of block_size tokens; the checkpoint says so, a resume
    without --pack continues packed."""
    out = tmp_path / "chat"
    args = chat_sft_args(out, "--pack")
    assert main(args + ["--max-iters", "2"]) == 0
    assert load_checkpoint(out / "ckpt.pt")["trained_on"]["pack"] is True
    args.remove("--pack")
    assert main(args + ["--max-iters", "3", "--resume"]) == 0
    assert load_checkpoint(out / "ckpt.pt")["trained_on"]["pack"] is True


@pytest.mark.parametrize("option, module, prefix, needs", [
    ("--more-phrasings", "variety", "MORE", ()), ("--wide-identity", "identity", "WIDE", ()),
    ("--word-anywhere", "anywhere", "ANYWHERE", ("--count-first", "worked-all"))])
def test_added_conversations_are_recorded_and_a_resume_keeps_them(tmp_path, capsys, option,
                                                                  module, prefix, needs):
    """``chat-sft --more-phrasings`` (chat.variety), ``--wide-identity`` (chat.identity) and
    ``--word-anywhere`` (chat.anywhere, with the ``needs`` options), issue 54: their conversations
    join the training split only, the checkpoint records their number, seed and SHA-256, a resume
    without the option continues with them, the option given to a run started without it is
    refused, and other conversations than the recorded ones are refused."""
    import importlib

    from course_lib.chat.data import load_conversations

    added = importlib.import_module(f"course_lib.chat.{module}")
    key = option[2:].replace("-", "_")
    arg = {"variety": "more", "identity": "wide", "anywhere": "anywhere"}[module]
    out = tmp_path / "chat"
    args = chat_sft_args(out, option, *needs)
    assert main(args + ["--max-iters", "1"]) == 0
    record = load_checkpoint(out / "ckpt.pt")["trained_on"][key]
    n, seed, sha256 = (getattr(added, f"{prefix}_{k}") for k in ("SIZE", "SEED", "SHA256"))
    assert record == {"n": n, "seed": seed, "sha256": sha256}
    data, shipped = chat_sft._data(**{arg: record}), load_conversations()
    assert data["val"] == shipped["val"] and data["test"] == shipped["test"]
    assert len(data["train"]) == len(shipped["train"]) + n
    args.remove(option)
    assert main(args + ["--max-iters", "2", "--resume"]) == 0
    assert load_checkpoint(out / "ckpt.pt")["trained_on"][key] == record
    plain = tmp_path / "plain"
    assert main(chat_sft_args(plain) + ["--max-iters", "1"]) == 0
    capsys.readouterr()
    assert main(chat_sft_args(plain, option) + ["--max-iters", "2", "--resume"]) == 2
    assert f"{option}:" in capsys.readouterr().err
    with pytest.raises(ValueError, match=f"{option}: .*not the ones the run started on"):
        chat_sft._data(**{arg: {**record, "sha256": "0" * 64}})


def test_word_anywhere_needs_worked_letters_replies(tmp_path, capsys):
    """``chat-sft --word-anywhere`` writes its letters replies worked: without ``--count-first
    worked-all`` (bare or worked counts elsewhere: two kinds of reply) it is refused in one line."""
    for count in ((), ("--count-first",), ("--count-first", "worked")):
        out = tmp_path / f"chat{len(count)}"
        assert main(chat_sft_args(out, "--word-anywhere", *count) + ["--max-iters", "1"]) == 2
        err = capsys.readouterr().err
        assert "--word-anywhere:" in err and "--count-first worked-all" in err
        assert not (out / "ckpt.pt").exists()


@pytest.mark.slow  # about 30 s on 2 loaded cores: three short runs and 6,000 conversations
def test_count_first_adds_letters_conversations_records_them_and_resumes_with_them(tmp_path,
                                                                                   capsys):
    """``chat-sft --count-first`` (issue 54): chat.counting's conversations join the training split
    only, the checkpoint records their number, seed
    and SHA-256, a resume keeps them, and the option given to a run started without it is
    refused."""
    from course_lib.chat import counting
    from course_lib.chat.data import load_conversations

    out = tmp_path / "chat"
    args = chat_sft_args(out, "--count-first")
    assert main(args + ["--max-iters", "1"]) == 0
    count = load_checkpoint(out / "ckpt.pt")["trained_on"]["count_first"]
    assert count == {"n": counting.COUNT_SIZE, "seed": counting.COUNT_SEED,
                     "sha256": counting.COUNT_SHA256, "reply": "bare"}
    shipped = load_conversations()
    data = chat_sft._data(None, count)
    assert data["val"] == shipped["val"] and data["test"] == shipped["test"]
    assert len(data["train"]) == len(shipped["train"]) + counting.COUNT_SIZE
    args.remove("--count-first")
    assert main(args + ["--max-iters", "2", "--resume"]) == 0
    assert load_checkpoint(out / "ckpt.pt")["trained_on"]["count_first"] == count
    capsys.readouterr()
    plain = tmp_path / "plain"
    assert main(chat_sft_args(plain) + ["--max-iters", "1"]) == 0
    capsys.readouterr()
    assert main(chat_sft_args(plain, "--count-first") + ["--max-iters", "2", "--resume"]) == 2
    assert "--count-first:" in capsys.readouterr().err
    assert main(args + ["--count-first", "worked", "--max-iters", "3", "--resume"]) == 2
    assert "--count-first worked: " in capsys.readouterr().err
    worked = chat_sft._data(None, {**count, "reply": "worked",
                                   "sha256": counting.COUNT_WORKED_SHA256})
    assert worked["train"][-1]["messages"][1]["content"].endswith(
        ": " + data["train"][-1]["messages"][1]["content"])
    with pytest.raises(ValueError, match="--count-first: .*not the ones the run started on"):
        chat_sft._data(None, {**count, "sha256": "0" * 64})


def test_count_first_worked_all_rewrites_the_training_split_and_pins_it():
    """``--count-first worked-all`` (issue 54): each letters conversation's last reply worked
    (chat.counting.worked_everywhere), validation and test untouched; the split's SHA-256 and the
    requests left out are recorded at the start, and a rewrite that differs on resuming is
    refused."""
    from course_lib.chat import counting
    from course_lib.chat.data import load_conversations

    count = {"n": counting.COUNT_SIZE, "seed": counting.COUNT_SEED,
             "sha256": counting.COUNT_WORKED_SHA256, "reply": "worked-all"}
    data = chat_sft._data(None, count)
    shipped = load_conversations()
    assert data["val"] == shipped["val"] and data["test"] == shipped["test"]
    assert count["train_sha256"] == counting.count_sha256(data["train"]) and count["left_out"] > 0
    assert not any(c["messages"][-1]["content"].isdigit() for c in data["train"]
                   if c["task"] == "letters")
    assert chat_sft._data(None, dict(count))["train"] == data["train"]
    with pytest.raises(ValueError, match="worked-all: .*otherwise than when the run started"):
        chat_sft._data(None, {**count, "train_sha256": "0" * 64})


def test_extend_positions_copies_the_learned_rows_or_stretches_them():
    """``extend_positions`` (issue 54): "copy" repeats the T0 rows, so the outputs over the first
    T0 positions are the model's own; "interpolate" keeps the first and last rows at both ends;
    a shorter context, or another fill, is refused in one line; a RoPE model only gets the
    length."""
    from course_lib.lora_gpt import extend_positions
    from course_lib.model import GPT, GPTConfig

    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=20, block_size=8, n_layer=1, n_head=2, n_embd=16)).eval()
    longer = extend_positions(model, 20, "copy").eval()
    rows = model.wpe.weight
    assert longer.config.block_size == 20 and torch.equal(longer.wpe.weight[8:16], rows)
    assert torch.equal(longer.wpe.weight[16:], rows[:4])
    x = torch.randint(0, 20, (2, 8), generator=torch.Generator().manual_seed(1))
    assert torch.equal(longer(x)[0], model(x)[0])
    assert longer(torch.randint(0, 20, (1, 20)))[0].shape == (1, 20, 20)
    stretched = extend_positions(model, 15, "interpolate")
    assert torch.allclose(stretched.wpe.weight[0], rows[0]) and torch.allclose(
        stretched.wpe.weight[-1], rows[-1]
    )
    assert torch.allclose(stretched.wpe.weight[1], rows[0] * 0.5 + rows[1] * 0.5)
    with pytest.raises(
        ValueError,
        match="block_size 4 is shorter than the model's 8: .*set block_size to 8 or more",
    ):
        extend_positions(model, 4)
    with pytest.raises(ValueError, match="how='tile': choose one of copy, interpolate"):
        extend_positions(model, 16, "tile")
    rope = GPT(
        GPTConfig(vocab_size=20, block_size=8, n_layer=1, n_head=2, n_embd=16, rope_theta=10000.0)
    )
    assert extend_positions(rope, 32).config.block_size == 32


def test_a_chat_fine_tune_can_lengthen_its_base_context(tmp_path, capsys):
    """``chat-sft --set block_size=N`` (issue 54): the base's 64 positions grow to N (copies), the
    checkpoint records where the context came from; a resume may repeat block_size=N but not change
    it; a shorter context than the base's, or a value that is not a count, is refused (exit 2)."""
    out = tmp_path / "chat"
    args = chat_sft_args(out, "--pack")
    assert main(args + ["--set", "block_size=96", "--max-iters", "1"]) == 0
    ckpt = load_checkpoint(out / "ckpt.pt")
    assert ckpt["model_config"]["block_size"] == 96 and ckpt["model"]["wpe.weight"].shape[0] == 96
    assert ckpt["trained_on"]["context_from"] == 64 and ckpt["trained_on"]["positions"] == "copy"
    assert main(args + ["--set", "block_size=96", "--max-iters", "2", "--resume"]) == 0
    assert load_checkpoint(out / "ckpt.pt")["step"] == 2
    capsys.readouterr()
    before = (out / "ckpt.pt").read_bytes()
    assert main(args + ["--set", "block_size=128", "--max-iters", "3", "--resume"]) == 2
    assert re.search(
        r"--set block_size=128: .*ckpt.pt has a context of 96 tokens, and a resumed run keeps its "
        r"model; give block_size=96 or leave it out",
        capsys.readouterr().err,
    )
    assert (out / "ckpt.pt").read_bytes() == before
    other = ["chat-sft", "--device", "cpu", "--max-iters", "1"]
    assert main(other + ["--out", str(tmp_path / "short"), "--set", "block_size=32"]) == 2
    assert re.search(
        r"--set block_size=32: the base .* has a context of 64 tokens, and a chat fine-tune can "
        r"only lengthen it; set block_size to 64 or more",
        capsys.readouterr().err,
    )
    for bad in ("0", "many"):
        assert main(other + ["--out", str(tmp_path / "bad"), "--set", f"block_size={bad}"]) == 2
        assert "block_size" in capsys.readouterr().err
    assert not (tmp_path / "short").exists() and not (tmp_path / "bad").exists()
