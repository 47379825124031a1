"""course_lib.align and the dpo/grpo runs of course_lib.runs.align: a run resumes bit for bit (DPO's
pairs and GRPO's sampling generator are in the checkpoint), keeps its reward and KL in ``history``
and on the progress bar, refuses bad bases and settings by name, and stops on Ctrl-C between two
steps."""
from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from course_lib import align
from course_lib.align import task_splits
from course_lib.runs.align import align_configs, arithmetic_base
from course_lib.checkpoint import save_checkpoint
from course_lib.model import GPT, GPTConfig
from course_lib.align.rewards import arithmetic_items
from course_lib.runs import resume_dpo_run, resume_grpo_run, start_dpo_run, start_grpo_run
from course_lib.tokenizers import CharTokenizer

ROOT = Path(__file__).resolve().parent.parent
TOKENIZER = CharTokenizer("0123456789+=\n ")
DPO_SET = {"max_iters": 4, "eval_interval": 2, "batch_size": 4, "pair_prompts": 16}
GRPO_SET = {"max_iters": 4, "eval_interval": 2, "batch_size": 2, "group_size": 4}


make_base = arithmetic_base  # the smallest runs' base: a random GPT over the task's characters


@pytest.fixture(autouse=True)
def few_eval_items(monkeypatch):
    """Evaluate on 8 prompts per split, not 100 (and DPO's validation pairs from 8): fast tests."""
    monkeypatch.setattr(align, "EVAL_ITEMS", 8)


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    return make_base(tmp_path_factory.mktemp("align") / "base.pt")


@pytest.fixture(scope="module")
def dropout_base(tmp_path_factory) -> Path:
    """A base with dropout: its training steps draw masks from torch's global generator."""
    return make_base(tmp_path_factory.mktemp("align") / "dropout.pt", dropout=0.2)


def _same(a, b) -> bool:
    return all(torch.equal(x, y) for x,
               y in zip(a.model.state_dict().values(), b.model.state_dict().values()))


RUNS = {"dpo": (start_dpo_run, resume_dpo_run, DPO_SET),
        "grpo": (start_grpo_run, resume_grpo_run, GRPO_SET)}


def interrupted_and_uninterrupted(base, tmp_path, method, stop):
    """(the run trained straight through, the same run stopped after ``stop`` steps, saved and
    resumed from its checkpoint as a new process would: its global generator elsewhere)."""
    start, resume, settings = RUNS[method]
    full = start(base, settings, reward="format", device="cpu", out_dir=tmp_path / "full",
                 progress=False)
    full.verbose = False
    full.train()
    half = start(base, settings, reward="format", device="cpu", out_dir=tmp_path / "half",
                 progress=False)
    half.verbose = False
    half.train(until=stop)
    half.save()
    del half
    torch.manual_seed(12345)  # a new process: its global generator is elsewhere
    resumed = resume(tmp_path / "half" / "ckpt.pt", device="cpu", progress=False)
    resumed.verbose = False
    assert resumed.step == stop
    resumed.train()
    return full, resumed


@pytest.mark.slow  # ten seconds or more on 2 cores (make unit leaves it out)
@pytest.mark.parametrize("method", ["dpo", "grpo"])
def test_a_run_resumes_bit_for_bit(base, tmp_path, method):
    full, resumed = interrupted_and_uninterrupted(base, tmp_path, method, stop=2)
    assert _same(full, resumed) and resumed.history == full.history
    assert resumed.trained_on["command"] == method and resumed.trained_on["reward"] == "format"


@pytest.mark.parametrize("method", ["dpo", "grpo"])
def test_with_dropout_the_same_command_gives_the_same_weights(dropout_base, method):
    """Review 2026-11-28 rows 19-20: the run seeds torch's global generator (dropout's masks), so
    what ran before it in the process (here: another seed) changes nothing."""
    start, _, settings = RUNS[method]
    trained = []
    for before in (1, 2):
        torch.manual_seed(before)  # another process starts its global generator elsewhere
        run = start(dropout_base, settings, reward="format", device="cpu", progress=False)
        run.verbose = False
        run.train()
        trained.append(run)
    assert _same(*trained) and trained[0].history == trained[1].history
    undropped = start(dropout_base, {**settings, "seed": 1}, reward="format", device="cpu",
                      progress=False)
    undropped.verbose = False
    undropped.train()
    assert not _same(trained[0], undropped)  # the seed does reach the run


@pytest.mark.parametrize("method", ["dpo", "grpo"])
def test_with_dropout_an_interrupted_run_resumes_bit_for_bit(dropout_base, tmp_path, method):
    """Review rows 17-18: the checkpoint holds torch's global random state, and a resume restores
    it."""
    full, resumed = interrupted_and_uninterrupted(dropout_base, tmp_path, method, stop=3)
    assert _same(full, resumed) and resumed.history == full.history
    a, b = (torch.load(p / "ckpt.pt", weights_only=True)
            for p in (tmp_path / "full", tmp_path / "half"))
    assert torch.equal(a["rng"]["torch"], b["rng"]["torch"])


def test_grpo_keeps_reward_and_kl_per_step_and_shows_them(base, tmp_path):
    run = start_grpo_run(base, {**GRPO_SET, "learning_rate": 1e-2}, reward="format", device="cpu",
                         out_dir=tmp_path, progress=False)
    run.verbose = False
    run.train()
    assert len(run.history["reward"]) == len(run.history["kl"]) == len(run.history["entropy"]) == 4
    # it moved off the base
    assert all(0 <= r <= 1 for r in run.history["reward"]) and run.history["kl"][-1] > 0
    # a random GPT over 14 characters: each next-token distribution is near uniform, entropy near
    # log 14
    assert all(0 < e <= math.log(14) + 1e-6 for e in run.history["entropy"])
    assert run.history["entropy"][0] > 0.8 * math.log(14)
    assert {"reward", "kl", "entropy"} <= set(run.postfix())
    assert run.history["eval_step"] == [0, 2, 4] and len(run.history["val_accuracy"]) == 3
    assert all(p.grad is None for p in run.reference.parameters())


def test_dpo_stores_its_pairs_and_logs_reward_accuracy(base, tmp_path):
    run = start_dpo_run(base, DPO_SET, reward="format", device="cpu", out_dir=tmp_path,
                        progress=False)
    pairs = run.trained_on["pairs"]
    assert pairs["train"] and pairs["val"]
    prompts = {tuple(TOKENIZER.encode(i["prompt"]))
               for i in task_splits(run.config.seed)["train"][:16]}
    assert all(tuple(p) in prompts for p, _, _ in pairs["train"])
    run.verbose = False
    run.train()
    saved = torch.load(tmp_path / "ckpt.pt", weights_only=True)
    assert saved["trained_on"]["pairs"] == pairs and len(run.history["rewards/accuracies"]) == 4
    assert {"accuracies", "margins"} <= set(run.postfix())


def test_task_splits_never_hold_test_items():
    splits = task_splits(0)
    test = {i["prompt"] for i in arithmetic_items("test")}
    assert not test & {i["prompt"] for s in splits.values() for i in s}
    assert (len(splits["val"]) == 200
            and not {i["prompt"] for i in splits["val"]} & {i["prompt"] for i in splits["train"]})


def test_settings_go_to_the_method_or_the_training():
    train, grpo = align_configs("grpo",
                                {"beta": "0.04", "learning_rate": "1e-4", "group_size": "4"})
    assert grpo.beta == 0.04 and grpo.group_size == 4 and train.learning_rate == 1e-4
    assert grpo.max_completion_length == 6  # the task's default: three digits and END
    with pytest.raises(ValueError, match="keeps its shape"):
        align_configs("dpo", {"n_layer": "2"})
    with pytest.raises(ValueError, match="unknown setting"):
        align_configs("dpo", {"betta": "0.1"})
    with pytest.raises(ValueError, match="unknown method"):
        align_configs("ppo", {})


def test_bad_bases_are_refused_by_name(tmp_path):
    shakespeare = tmp_path / "chars.pt"
    save_checkpoint(shakespeare,
                    GPT(GPTConfig(vocab_size=3, block_size=16, n_layer=1, n_head=2, n_embd=16)),
                    tokenizer=CharTokenizer("abc"))
    with pytest.raises(ValueError, match="cannot write the arithmetic task's characters"):
        start_grpo_run(shakespeare, GRPO_SET, device="cpu", out_dir=tmp_path / "a", progress=False)
    short = make_base(tmp_path / "short.pt", block_size=8)
    with pytest.raises(ValueError, match="block_size 8"):
        start_grpo_run(short, GRPO_SET, device="cpu", out_dir=tmp_path / "b", progress=False)
    with pytest.raises(ValueError, match="unknown reward"):
        start_grpo_run(short, GRPO_SET, reward="length", device="cpu", out_dir=tmp_path / "c",
                       progress=False)


def test_a_resume_needs_its_own_base(base, tmp_path):
    run = start_grpo_run(base, GRPO_SET, reward="format", device="cpu", out_dir=tmp_path / "run",
                         progress=False)
    run.verbose = False
    run.train(until=1)
    run.save()
    other = make_base(tmp_path / "other.pt", seed=1)
    with pytest.raises(ValueError, match="give that base"):
        resume_grpo_run(tmp_path / "run" / "ckpt.pt", base_checkpoint=other, device="cpu",
                        progress=False)
    moved = tmp_path / "moved.pt"
    moved.write_bytes(Path(base).read_bytes())
    again = resume_grpo_run(tmp_path / "run" / "ckpt.pt", base_checkpoint=moved, device="cpu",
                            progress=False)
    assert again.trained_on["base_checkpoint"] == str(moved.resolve())
    with pytest.raises(ValueError, match="made by `grpo`"):
        resume_dpo_run(tmp_path / "run" / "ckpt.pt", device="cpu", progress=False)


@pytest.mark.parametrize("method, key, value", [
    # row 14: the pairs were sampled from the stored number of prompts
    ("dpo", "pair_prompts", "64"),
    ("dpo", "seed", "7"),  # row 15: task_splits(seed) would move validation prompts into training
    ("grpo", "seed", "7"),  # row 16: GRPO would sample its training prompts from the other split
    ("grpo", "group_size", "8"),
    ("dpo", "batch_size", "8"),
])
def test_a_resume_refuses_settings_that_rewrite_the_run(base, tmp_path, capsys, method, key, value):
    """Review 2026-11-28 A3: a resume keeps the method settings and all training settings but
    train.RESUMABLE_SETTINGS; the command line says so in one line, exit status 2, the checkpoint
    untouched."""
    from course_lib.cli import main

    start, resume, settings = RUNS[method]
    run = start(base, settings, reward="format", device="cpu", out_dir=tmp_path, progress=False)
    run.verbose = False
    run.train(until=2)
    run.save()
    ckpt, before = tmp_path / "ckpt.pt", (tmp_path / "ckpt.pt").read_bytes()
    stored = run.trained_on["method"].get(key, getattr(run.config, key, None))
    with pytest.raises(ValueError, match=rf"^--set {key}={value}: .*ckpt.pt was trained with "
                                         rf"{key}={stored!r}, and "
                                         f"a resumed run keeps .*; leave --set {key} out to "
                                         "continue it"):
        resume(ckpt, {key: value}, device="cpu", progress=False)
    capsys.readouterr()
    assert main([method, "--out", str(tmp_path), "--resume", "--set", f"{key}={value}", "--device",
                 "cpu"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"--set {key}={value}: " in err and "Traceback" not in err
    assert ckpt.read_bytes() == before
    # given as stored (a resume command repeats its --set), or a setting a resume may change:
    # accepted
    again = resume(ckpt, {key: str(stored), "max_iters": "5", "eval_interval": "5"}, device="cpu",
                   progress=False)
    assert again.config.max_iters == 5 and again.step == 2


def test_dpo_and_grpo_refuse_torchrun(base, tmp_path, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    with pytest.raises(ValueError, match="runs in one process"):
        start_grpo_run(base, GRPO_SET, device="cpu", out_dir=tmp_path, progress=False)


def _cli(method: str, out: Path, base: Path, *extra: str) -> list[str]:
    own = ["--set", "group_size=4", "--set", "batch_size=2"] if method == "grpo" else \
        ["--set", "pair_prompts=16", "--set", "batch_size=4"]
    return [sys.executable, "-m", "course_lib", method, "--checkpoint", str(base), "--reward",
            "format", *own, "--set", "eval_interval=3", "--max-iters", "6", "--out", str(out),
            "--device", "cpu", *extra]


def _env() -> dict:
    return dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p),
    )


@pytest.mark.slow  # three processes that import torch
@pytest.mark.parametrize("method", ["dpo", "grpo"])
def test_ctrl_c_stops_a_run_between_steps_and_it_resumes_bitwise_from_the_cli(dropout_base,
                                                                              tmp_path, method):
    base = dropout_base  # dropout's masks: the global generator, seeded and stored, is checked too
    whole = subprocess.run(_cli(method, tmp_path / "whole", base), capture_output=True, text=True,
                           env=_env(), timeout=600)
    assert whole.returncode == 0, whole.stderr
    assert "held-out sums" in whole.stdout
    proc = subprocess.Popen(_cli(method, tmp_path / "cut", base), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            env=dict(_env(), COURSE_LIB_TEST_PAUSE_AT="step:4"),
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if "paused at step:4" in line:
            proc.send_signal(signal.SIGINT)
            break
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 130 and "Traceback" not in stderr, stderr
    # "step:4" lands before step 4, which completes
    assert "SIGINT: stopped at step 4 " in "".join(seen) + stdout
    resumed = subprocess.run(_cli(method, tmp_path / "cut", base, "--resume"), capture_output=True,
                             text=True, env=_env(), timeout=600)
    assert resumed.returncode == 0, resumed.stderr
    assert "resuming" in resumed.stdout
    a = torch.load(tmp_path / "whole" / "ckpt.pt", weights_only=True)
    b = torch.load(tmp_path / "cut" / "ckpt.pt", weights_only=True)
    assert a["step"] == b["step"] == 6 and a["history"] == b["history"]
    assert all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])


def test_sft_trains_on_the_answer_only_and_sft_start_leaves_its_model_alone(base):
    from course_lib.align import SFTTrainer, sft_start
    from course_lib.checkpoint import load_model
    from course_lib.train import TrainConfig
    from course_lib.utils import IGNORE_INDEX

    model, _ = load_model(base)
    items = task_splits(0)
    run = SFTTrainer(model, items,
                     TrainConfig(max_iters=3, batch_size=4, eval_interval=3, eval_iters=1),
                     tokenizer=TOKENIZER, progress=False, verbose=False)
    x, y = run.draw("train", torch.Generator().manual_seed(0))
    for row_x, row_y in zip(x.tolist(), y.tolist()):
        prompt = TOKENIZER.decode(row_x).split("=")[0] + "="
        kept = [t for t in row_y if t != IGNORE_INDEX]
        answer = TOKENIZER.decode(kept)
        # the sum and END, nothing else
        assert answer.endswith("\n") and answer[:-1] == str(eval(prompt[:-1]))
    run.train()
    assert run.history["eval_step"] == [0, 3] and len(run.history["val_accuracy"]) == 2
    before = {k: v.clone() for k, v in model.state_dict().items()}
    settings = {"max_iters": 2, "batch_size": 4, "eval_interval": 2, "warmup_iters": 1}
    one, two = (sft_start(model, TOKENIZER, settings) for _ in range(2))
    # a copy was trained
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert all(torch.equal(a, b) for a,
               b in zip(one.state_dict().values(), two.state_dict().values()))
    assert not all(torch.equal(a, b) for a,
                   b in zip(one.state_dict().values(), model.state_dict().values()))


def test_sft_start_is_reproducible_with_dropout_and_leaves_the_callers_generator_alone(
    dropout_base,
):
    """It drew dropout's masks from whatever state torch's global generator was in: two calls gave
    two models (issue 46). Now seeded by its config's seed, inside a fork of the generator."""
    from course_lib.align import sft_start
    from course_lib.checkpoint import load_model

    model, _ = load_model(dropout_base)
    settings = {"max_iters": 2, "batch_size": 4, "eval_interval": 2, "warmup_iters": 1}
    torch.manual_seed(1)
    one = sft_start(model, TOKENIZER, settings)
    after = torch.rand(3)
    torch.manual_seed(1)
    torch.rand(5)  # another state before the call: the same model
    two = sft_start(model, TOKENIZER, settings)
    assert all(torch.equal(a, b) for a,
               b in zip(one.state_dict().values(), two.state_dict().values()))
    torch.manual_seed(1)
    assert torch.equal(torch.rand(3), after)  # the call drew nothing from the caller's generator
