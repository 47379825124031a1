"""Every bad input of the command line, as a table: the arguments, the exit status, a phrase the
one line on stderr must contain, and nothing written or left behind (issue 21's cases, with the
earlier ones). Ctrl-C at each moment is in tests/test_cli.py (real signals to a real process)."""
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from course_lib.checkpoint import write_atomic
from course_lib.run_folder import LOCK_NAME
from course_lib.cli import main
from course_lib.data import load_text
from course_lib.pretrained import PRETRAINED_PATH

ROOT = Path(__file__).resolve().parent.parent
TINY = ["--set", "n_layer=1", "--set", "n_head=2", "--set", "n_embd=16",
        "--set", "block_size=16", "--set", "batch_size=4", "--set",
        "eval_interval=2", "--set", "eval_iters=1", "--device", "cpu"]


class Evil:  # a pickle that would run a shell command when loaded without weights_only
    def __reduce__(self):
        return (os.system, ("echo owned",))


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> Path:
    """The inputs of the table, made once: texts, runs, broken checkpoints."""
    tmp = tmp_path_factory.mktemp("bad")
    text = load_text()[:20_000]
    (tmp / "text.txt").write_text(text, encoding="utf-8")
    # the same characters, another text
    (tmp / "same-chars.txt").write_text(text[::-1], encoding="utf-8")
    (tmp / "empty.txt").write_text("   \n", encoding="utf-8")
    (tmp / "short.txt").write_text("To be, or not to be" * 3, encoding="utf-8")
    (tmp / "latin1.txt").write_bytes("Line one\nCaf\u00e9 au lait\n".encode("latin-1") * 100)
    (tmp / "utf16.txt").write_bytes(text[:2000].encode("utf-16"))  # with its byte-order mark
    (tmp / "nul.txt").write_bytes(b"\0" * 5000)
    tar = subprocess.run(["tar", "cf", "-", "-C", str(tmp), "text.txt"],
                         capture_output=True, check=True).stdout
    (tmp / "archive.tar").write_bytes(tar)
    (tmp / "controls.txt").write_bytes(b"abc\x01\x02\x03def\x1b" * 200)
    (tmp / "a-file").write_text("not a folder")
    (tmp / "corrupt.pt").write_bytes(b"PK\x03\x04 this is not a checkpoint")
    (tmp / "not-a-checkpoint.pt").write_text("hello")
    torch.save({"model": Evil()}, tmp / "evil.pt")
    run = ["--set", "max_iters=2", *TINY]
    assert main(["train", "--text", str(tmp / "text.txt"), "--out", str(tmp / "done"), *run]) == 0
    assert main(["train", "--out", str(tmp / "preset-run"), *run]) == 0
    assert main(["train-dates", "--out", str(tmp / "dates"), "--max-iters", "1",
                 "--device", "cpu"]) == 0
    ckpt = torch.load(tmp / "done" / "ckpt.pt", weights_only=True)
    ckpt["model"]["wte.weight"][0, 0] = float("nan")
    write_atomic(tmp / "nan.pt", ckpt)
    for name, field, value in [("badstep", "step", "abc"), ("norng", "rng", None)]:
        write_atomic(tmp / name / "ckpt.pt",
                     {**torch.load(tmp / "done" / "ckpt.pt", weights_only=True), field: value})
    damaged = torch.load(tmp / "done" / "ckpt.pt", weights_only=True)
    damaged["train_config"]["learning_rate"] = 50.0
    write_atomic(tmp / "badtc" / "ckpt.pt", damaged)
    _fine_tunes(tmp)
    # issue 31: damaged checkpoints as the reliability review made them
    (tmp / "random.pt").write_bytes(bytes(torch.randint(0, 256, (5000,),
                                                        generator=torch.Generator().manual_seed(0))
                                          .to(torch.uint8).tolist()))
    good = torch.load(tmp / "done" / "ckpt.pt", weights_only=True)
    write_atomic(tmp / "badtok.pt", {**good, "tokenizer": {**good["tokenizer"], "chars": 5}})
    write_atomic(tmp / "shape.pt",
                 {**good, "model": {**good["model"], "wte.weight": torch.zeros(3, 16)}})
    write_atomic(tmp / "huge_cfg.pt",
                 {**good, "model_config": {**good["model_config"], "n_embd": 1_000_000}})
    return tmp


def _fine_tunes(tmp: Path) -> None:
    """A base GPT, its LoRA and full fine-tunes, a bigram checkpoint, and LoRA checkpoints whose
    recorded base is a folder or a device, or whose adapters are missing."""
    from course_lib.bigram import BigramConfig, BigramLanguageModel
    from course_lib.checkpoint import save_checkpoint
    from course_lib.tokenizers import CharTokenizer
    from model_helpers import pretrain_tiny_gpt

    base = pretrain_tiny_gpt(tmp / "base", max_iters=2)
    ft = ["--checkpoint", str(base), "--max-iters", "1", "--set", "batch_size=2", "--set",
          "eval_iters=1", "--eval-examples", "1", "--device", "cpu"]
    assert main(["finetune", *ft, "--lora-rank", "2", "--out", str(tmp / "ftl")]) == 0
    assert main(["finetune", *ft, "--out", str(tmp / "ftf")]) == 0
    tok = CharTokenizer.from_text(load_text()[:2000])
    save_checkpoint(tmp / "bigram.pt",
                    BigramLanguageModel(BigramConfig(vocab_size=tok.vocab_size)), tokenizer=tok)
    lora = torch.load(tmp / "ftl" / "ckpt.pt", weights_only=True)
    for name, where in [("lora_base_dir", str(tmp)), ("lora_base_dev_zero", "/dev/zero")]:
        write_atomic(tmp / f"{name}.pt",
                     {**lora, "model_config": {**lora["model_config"], "base_checkpoint": where}})
    missing = {k: v for k, v in lora["model"].items() if not k.endswith("lora_A")}
    write_atomic(tmp / "lora_missing_A.pt", {**lora, "model": missing})
    lock_dir = tmp / "lock-is-a-folder"
    (lock_dir / LOCK_NAME).mkdir(parents=True)
    (tmp / "lock-being-written").mkdir()
    being_written = tmp / "lock-being-written" / LOCK_NAME
    # no process id yet: a claim being written (for a minute after its mtime)
    being_written.write_text("")
    os.utime(being_written, (time.time() + 3600, time.time()
                             + 3600))  # that minute lasts however slow the tests


def cases(tmp: Path) -> list[tuple[str, list[str], int, str]]:
    text = ["--text", str(tmp / "text.txt")]
    hybrid = ["--preset", "shakespeare-char-hybrid"]
    done, ckpt = tmp / "done", str(tmp / "done" / "ckpt.pt")
    sample = ["sample", "--checkpoint", ckpt, "--device", "cpu"]
    pre = str(PRETRAINED_PATH)  # the shipped model: a base with room for the dates task
    return [
        # text input: one reader (course_lib.data.read_text_file)
        ("missing text file", ["train", "--text", str(tmp / "nope.txt")], 2, "no such text file"),
        # issue 46 R2: a short form and a --set of the same
        # setting that disagree (one was silently dropped)
        ("--max-iters against --set max_iters",
         ["train", *text, "--max-iters", "7", "--set", "max_iters=5"], 2,
         "--max-iters 7 and --set max_iters=5 disagree: give the setting once"),
        ("a folder as --text", ["train", "--text", str(tmp)], 2, "it is a folder"),
        ("empty text file", ["train", "--text", str(tmp / "empty.txt")], 2, "is empty"),
        ("text shorter than a window", ["train", "--text", str(tmp / "short.txt")], 2, "too short"),
        ("text not UTF-8", ["train", "--text", str(tmp / "latin1.txt")], 2,
         r"not UTF-8 text: byte 0xe9 at offset 12 \(line 2"),
        ("UTF-16 text", ["train", "--text", str(tmp / "utf16.txt")], 2,
         "is UTF-16-LE text.*iconv -f UTF-16"),
        ("5,000 NUL bytes", ["train", "--text", str(tmp / "nul.txt")], 2,
         "not text: it holds 5,000 NUL bytes"),
        ("a tar archive", ["train", "--text", str(tmp / "archive.tar")], 2,
         "not text: .*NUL bytes.*binary file"),
        ("control characters", ["train", "--text", str(tmp / "controls.txt")], 2,
         r"not text: 800 of its .* control characters, the first '\\x01'"),
        # settings: checked by the config classes' rules
        ("unknown setting", ["train", *text, "--set", "n_layers=6"], 2,
         "unknown setting.*n_layer, n_head"),
        ("setting of the wrong type", ["train", *text, "--set", "n_layer=six"], 2,
         "n_layer='six': expected .*int"),
        ("setting the config refuses",
         ["train", *text, "--set", "n_head=5"], 2, "divisible by n_head"),
        ("setting without a value", ["train", *text, "--set", "n_layer"], 2, "KEY=VALUE"),
        ("vocab_size set by hand", ["train", *text, "--set", "vocab_size=10"],
         2, "vocab_size cannot be set"),
        ("negative learning rate", ["train", *text, "--set", "learning_rate=-1"], 2,
         r"learning_rate must be a finite number in \(0, 1\], got -1"),
        ("learning rate inf", ["train", *text, "--set", "learning_rate=inf"],
         2, "learning_rate .*got inf"),
        ("learning rate 1e9", ["train", *text, "--set", "learning_rate=1e9"], 2,
         "learning_rate .*got 1000000000"),
        ("negative min_lr", ["train", *text, "--set", "min_lr=-1"], 2,
         r"min_lr must be a finite number in \[0, 1\]"),
        ("negative weight decay", ["train", *text, "--set", "weight_decay=-1"],
         2, "weight_decay must be"),
        ("grad_clip nan", ["train", *text, "--set", "grad_clip=nan"], 2,
         "grad_clip must be a finite number >= 0"),
        ("negative lr_decay_iters", ["train", *text, "--set", "lr_decay_iters=-1"], 2,
         "lr_decay_iters must be an integer >= 1"),
        ("beta1 of 1.5", ["train", *text, "--set", "beta1=1.5"], 2,
         r"beta1 must be a finite number in \[0, 1\)"),
        ("dropout nan", ["train", *text, "--set", "dropout=nan"], 2,
         "dropout must be a finite number"),
        ("bias not a boolean", ["train", *text, "--set", "bias=maybe"], 2,
         "bias='maybe': expected .*bool"),
        # chapter 24's hybrid through train's --set: its config's rules
        ("hybrid: a layer letter not L or A", ["train", *text, *hybrid, "--set", "layers=LXA"], 2,
         "layers must be letters L .* and A .*got 'LXA'"),
        ("hybrid: rotary_fraction 2", ["train", *text, *hybrid, "--set", "rotary_fraction=2"], 2,
         r"rotary_fraction must be a finite number in \(0, 1\], got 2"),
        ("hybrid: value heads the key heads do not divide",
         ["train", *text, *hybrid, "--set", "linear_v_heads=3"], 2, "must divide linear_v_heads"),
        ("hybrid: a GPT-only setting", ["train", *text, *hybrid, "--set", "dropout=0.1"], 2,
         "--set dropout: unknown setting. Model settings: .*layers"),
        # presets, devices, output folders
        ("unwritable --out", ["train", *text, "--out", str(tmp / "a-file" / "run")],
         2, "cannot write to"),
        ("unknown preset", ["train", "--preset", "gpt5"], 2,
         "unknown preset 'gpt5'.*shakespeare-char-cpu"),
        ("counting-only preset", ["train", "--preset", "gpt2-small"],
         2, "counting parameters only"),
        ("GPU-only preset on a CPU",
         ["train", "--preset", "shakespeare-char-speedrun-gpu", "--device", "cpu"], 2,
         "made for a cuda device .* on a CPU train shakespeare-char-speedrun instead"),
        ("unknown optimizer", ["train", *text, "--set", "optimizer=sgd"], 2,
         "optimizer must be one of 'adamw', 'muon'"),
        ("existing run without --resume", ["train", *text, "--out", str(done)], 2,
         "already exists: pass --resume"),
        ("train-dates into an existing run", ["train-dates", "--out", str(tmp / "dates")], 2,
         "already exists: pass --resume"),
        # resuming: the same model, the same data, the same command
        ("resume with another model",
         ["train", *text, "--out", str(done), "--resume", "--set", "n_layer=3"], 2,
         "a resumed run keeps its model"),
        ("resume with another preset", ["train", "--preset", "shakespeare-bpe-cpu", "--out",
                                        str(tmp / "preset-run"), "--resume", *TINY], 2,
         "trained with --preset shakespeare-char-cpu, not shakespeare-bpe-cpu"),
        ("resume with another text of the same characters",
         ["train", "--text", str(tmp / "same-chars.txt"), "--out", str(done), "--resume", *TINY], 2,
         r"trained on the text text.txt \(SHA-256 .*\), not on the text same-chars.txt"),
        ("resume a --text run without --text", ["train", "--out", str(done), "--resume", *TINY], 2,
         "trained on the text text.txt .*not on preset shakespeare-char-cpu's corpus: pass --text "
         "text.txt"),
        ("resume a preset run with --text", ["train", *text, "--out",
                                             str(tmp / "preset-run"), "--resume", *TINY], 2,
         "trained on preset shakespeare-char-cpu's corpus, not on the text text.txt.*leave --text "
         "out"),
        ("resume a train-dates run with train", ["train", "--out", str(tmp / "dates"), "--resume"],
         2,
         r"made by `train-dates`, not `train`: resume it with `python -m course_lib train-dates "
         r"--out"),
        ("resume a train run with train-dates", ["train-dates", "--out", str(done), "--resume"], 2,
         r"made by `train`, not `train-dates`: resume it with `python -m course_lib train --text "
         r"text.txt"),
        # checkpoints given to sample
        ("sample a missing checkpoint",
         ["sample", "--checkpoint", str(tmp / "nope.pt")], 2, "no checkpoint at"),
        ("sample a truncated checkpoint", ["sample", "--checkpoint", str(tmp / "corrupt.pt")], 2,
         "is truncated or corrupt: its zip archive cannot be read"),
        ("sample a file that is no checkpoint",
         ["sample", "--checkpoint", str(tmp / "not-a-checkpoint.pt")], 2,
         "is not a checkpoint: torch.save writes a zip archive"),
        ("sample a checkpoint that would run code", ["sample", "--checkpoint",
                                                     str(tmp / "evil.pt")], 2,
         "was refused: it holds a reference to the Python function (posix|nt).system, which "
         "loading could run"),
        ("sample a folder", ["sample", "--checkpoint", str(done)], 2,
         f"is a folder, not a checkpoint file: give the checkpoint inside it, {re.escape(ckpt)}"),
        ("sample a checkpoint with NaN weights", ["sample", "--checkpoint", str(tmp / "nan.pt")], 2,
         r"weights that are not finite numbers \(NaN or inf, in wte.weight\)"),
        ("sample an encoder-decoder", ["sample", "--checkpoint", str(tmp / "dates" / "ckpt.pt")], 2,
         "use `python -m course_lib translate"),
        # sampling arguments: one check (course_lib.generate.check_sampling_args)
        ("sample --tokens below 1", [*sample, "--tokens", "-5"], 2, "--tokens must be at least 1"),
        # chapter 22: a draft of another vocabulary or another kind
        ("sample --draft of another vocabulary",
         ["sample", "--checkpoint", pre, "--draft", ckpt, "--tokens", "5"], 2,
         "has another vocabulary than the target"),
        ("sample --draft of another kind", ["sample", "--checkpoint", pre, "--draft",
                                            str(tmp / "bigram.pt"), "--tokens",
                                            "5"], 2, "holds a BigramLanguageModel, not a GPT"),
        ("sample with top-p 2", [*sample, "--top-p", "2"], 2,
         r"error: --top-p must be in \(0, 1\]"),
        ("sample with top-p nan", [*sample, "--top-p", "nan"], 2,
         r"error: --top-p must be in \(0, 1\]"),
        ("sample with temperature nan", [*sample, "--temperature", "nan"], 2,
         "error: --temperature must be >= 0 .*finite"),
        ("sample with temperature inf", [*sample, "--temperature", "inf"], 2,
         "error: --temperature must be >= 0 .*finite"),
        ("sample with top-k 0", [*sample, "--top-k", "0"], 2,
         "error: --top-k must be an integer >= 1"),
        ("sample an unknown character", [*sample, "--prompt", "\u00e9"], 2, "unknown character"),
        # eval (chapter 16): every bad input fails before any model is scored
        ("eval a missing checkpoint",
         ["eval", "--checkpoint", str(tmp / "nope.pt")], 2, "no checkpoint at"),
        ("eval a truncated checkpoint",
         ["eval", "--checkpoint", str(tmp / "corrupt.pt")], 2, "truncated or corrupt"),
        ("eval a checkpoint with NaN weights",
         ["eval", "--checkpoint", str(tmp / "nan.pt")], 2, "not finite"),
        ("eval an encoder-decoder", ["eval", "--checkpoint", str(tmp / "dates" / "ckpt.pt")], 2,
         "encoder-decoder .*decoder-only"),
        ("eval an unknown task", ["eval", "--checkpoint", ckpt, "--tasks", "mmlu"],
         2, "unknown task mmlu: choose"),
        ("eval a task the tokenizer cannot encode",
         ["eval", "--checkpoint", ckpt, "--tasks", "arithmetic"], 2,
         "cannot encode task arithmetic"),
        ("eval --limit 0", ["eval", "--checkpoint", ckpt, "--limit", "0"], 2,
         "--limit must be at least 1"),
        ("eval --shots -1", ["eval", "--checkpoint", ckpt, "--shots", "-1"],
         2, "--shots must be 0 or more"),
        ("e30_tasks_dup: a task named twice",
         ["eval", "--checkpoint", ckpt, "--tasks", "next-word,next-word"], 2,
         "task next-word is named more than once"),
        ("e39_shotshuge: --shots 100000", ["eval", "--checkpoint", ckpt, "--shots", "100000"], 2,
         "task next-line has 20 training items for few-shot examples, not 100000: give --shots 20 "
         "or fewer"),
        ("translate with beam 0",
         ["translate", "--checkpoint", str(tmp / "dates" / "ckpt.pt"), "3 May", "--beam", "0"], 2,
         "beam_size must be an integer >= 1"),
        *fine_tune_cases(tmp),
        *quantize_cases(tmp),
        # issue 31 (../shared/reviews/2026-11-26-reliability.md):
        # bounds, and messages that name the problem
        ("tx_devzero: --text /dev/zero",
         ["train", "--text", "/dev/zero", "--out", str(tmp / "x1"), *TINY], 2,
         "/dev/zero is not text: it holds [0-9,]+ NUL bytes, the first at offset 0"),
        ("ok_minlr: min_lr above learning_rate",
         ["train", *text, "--set", "min_lr=0.01", "--set", "learning_rate=1e-3"], 2,
         r"min_lr \(0.01\) is above learning_rate \(0.001\): the cosine schedule decays"),
        ("ok_ropetiny: rope_theta 1e-300", ["train", *text, "--set", "rope_theta=1e-300"], 2,
         "rope_theta must be a finite number >= 1, got 1e-300"),
        ("s_random: random bytes", ["sample", "--checkpoint", str(tmp / "random.pt")], 2,
         "random.pt is not a checkpoint: torch.save writes a zip archive"),
        ("hx_zero: /dev/zero as a checkpoint", ["sample", "--checkpoint", "/dev/zero"], 2,
         "/dev/zero is not a regular file .*give the path of a ckpt.pt file"),
        ("s_badtok: a damaged tokenizer", ["sample", "--checkpoint", str(tmp / "badtok.pt")], 2,
         r"holds an unusable tokenizer \(type 'char'; TypeError: .*\): the checkpoint is damaged"),
        ("s_shape: a tensor of the wrong shape", ["sample", "--checkpoint", str(tmp / "shape.pt")],
         2, r"1 of another shape \(wte.weight is \(3, 16\), its config builds \(\d+, 16\)\)"),
        ("hx_hugecfg: a config larger than the machine",
         ["sample", "--checkpoint", str(tmp / "huge_cfg.pt")], 2,
         "holds a gpt model too large for this machine: a GPT of vocab_size .*n_embd 1,000,000"),
        ("sp_tokhuge: --tokens 10**11", [*sample, "--tokens", "100000000000"], 2,
         "error: --tokens must be at most 100,000 .*got 100,000,000,000"),
        ("sp_seedhuge: --seed 10**23",
         [*sample, "--tokens", "5", "--seed", "99999999999999999999999"], 2,
         r"seed must be an integer in \[0, 9223372036854775807\]"),
        ("tl_beamhuge: --beam 100000", ["translate", "--checkpoint", str(tmp / "dates" / "ckpt.pt"),
                                        "3 May",
                                        "--beam", "100000"], 2,
         "beam_size must be an integer >= 1 and <= 100"),
        ("tl_missing: a missing translate checkpoint",
         ["translate", "--checkpoint", str(tmp / "nope.pt"), "x"], 2,
         "no checkpoint at .*`train-dates` for an encoder-decoder"),
        ("tl_random: random bytes to translate",
         ["translate", "--checkpoint", str(tmp / "random.pt"), "x"], 2,
         "is not a checkpoint: torch.save writes a zip archive"),
        ("ft_random: random bytes to finetune", ["finetune", "--checkpoint", str(tmp / "random.pt"),
                                                 "--out", str(tmp / "ft_random")], 2,
         "is not a checkpoint"),
        ("fr_huge: --lora-rank 10**9", ["finetune", "--checkpoint", pre,
                                        "--lora-rank", "1000000000", "--max-iters",
                                        "1", "--out", str(tmp / "fr")], 2,
         r"LoRA rank 1,000,000,000 is larger than .* allows: at most min\(in 128, out \d+\) = 128"),
        *review_1128_cases(tmp),
    ] + ([] if torch.cuda.is_available() else
         [("--device cuda without a GPU", ["train", *text, "--device", "cuda"],
           2, "'cuda' is not available")])


def review_1128_cases(tmp: Path) -> list[tuple[str, list[str], int, str]]:
    """Review 2026-11-28 (../shared/reviews/2026-11-28-reliability.md): sizes that reached the
    allocator (R1, M3: rows 8-11, 24, 27-29) and settings accepted and ignored (M1: rows 21-23,
    25-26). The sizes over memory are far over any machine's (a petabyte, or 2 TB for chat-sft's
    small model), so that the check, not the allocator, refuses them everywhere."""
    train = ["train", "--text", str(tmp / "text.txt"), "--out", str(tmp / "m_tmp"), *TINY]
    align = ["--checkpoint", str(tmp / "done" / "ckpt.pt"),
             "--out", str(tmp / "a_tmp"), "--device", "cpu"]
    sft = ["chat-sft", "--out", str(tmp / "s_tmp"), "--device", "cpu", "--set", "eval_iters=1"]
    batch = r"batch_size must be an integer in \[1, 1e\+06\], got 1000000000"
    activations = (r"most of it in a training step's activations \(batch_size 1,000,000 x "
                   r"block_size [\d,]+\), needs at least .* more than the .* GiB of memory "
                   r"(available on this machine|left under).*: choose a smaller batch_size")
    return [
        ("s04b_bshuge: chat-sft batch_size 1e9",
         [*sft, "--set", "batch_size=1000000000"], 2, batch),
        ("s04c_bs1e6: chat-sft batch_size 1e6",
         [*sft, "--set", "batch_size=1000000"], 2, activations),
        ("d15_bshuge: dpo batch_size 1e9",
         ["dpo", *align, "--set", "batch_size=1000000000"], 2, batch),
        ("g23_bshuge: grpo batch_size 1e9",
         ["grpo", *align, "--set", "batch_size=1000000000"], 2, batch),
        ("d10_pg1000: dpo pair_group_size 1000", ["dpo", *align, "--set", "pair_group_size=1000"],
         2, r"pair_group_size must be an integer in \[2, 512\], got 1000"),
        ("g03_gs513: grpo group_size 513", ["grpo", *align, "--set", "group_size=513"], 2,
         r"group_size must be an integer in \[2, 512\], got 513"),
        ("m40_bs_huge: train batch_size 1e9", [*train, "--set", "batch_size=1000000000"], 2, batch),
        ("train batch_size 1e6", [*train, "--set", "batch_size=1000000", "--set", "n_embd=4096",
                                  "--set", "block_size=4096"], 2, activations),
        ("m15_moe_huge: moe_experts 1e6", [*train, "--set", "moe_experts=1000000"], 2,
         r"moe_experts must be an integer in \[1, 1024\], got 1000000"),
        ("m33_headdim_huge: head_dim 1e12", [*train, "--set", "head_dim=1000000000000"], 2,
         r"most of it in its attention \(n_head 2 of head size 1,000,000,000,000\).*choose a "
         r"smaller n_embd, n_head "
         "or head_dim"),
        ("m34_ffn_huge: ffn_hidden 1e12", [*train, "--set", "ffn_hidden=1000000000000"], 2,
         r"most of it in its MLPs \(hidden size 1,000,000,000,000\).*choose a smaller ffn_hidden"),
        ("block_size 1e13", [*train, "--set", "block_size=10000000000000"], 2,
         r"most of it in its positions \(block_size 10,000,000,000,000\).*choose a smaller "
         r"block_size"),
        ("moe_experts 1024 of huge experts",
         [*train, "--set", "moe_experts=1024", "--set", "ffn_hidden=1000000000"], 2,
         r"most of it in its MLPs \(hidden size 1,000,000,000, 1,024 experts\)"),
        ("m08_topk_noexp: moe_top_k without moe_experts", [*train, "--set", "moe_top_k=100"], 2,
         "moe_top_k=100 takes effect only with moe_experts: set it too .*or leave moe_top_k at its "
         "default 2"),
        ("m09_shared_noexp", [*train, "--set", "moe_shared_expert=true"], 2,
         "moe_shared_expert=True takes effect only with moe_experts"),
        ("m10_aux_noexp", [*train, "--set", "moe_aux_coef=0.5"], 2,
         "moe_aux_coef=0.5 takes effect only with moe_experts"),
        ("m25_rope_factor_noscaling", [*train, "--set", "rope_theta=10000",
                                       "--set", "rope_factor=8"], 2,
         "rope_factor=8.0 takes effect only with rope_scaling: set it too \\(e.g. "
         "rope_scaling='llama3'\\)"),
        ("m26_rope_orig_noscaling", [*train, "--set", "rope_original_context=4"], 2,
         "rope_original_context=4 takes effect only with rope_scaling"),
        # the unclear rows (issue 46): each names its problem and its fix
        ("d05_betahuge: dpo beta 1e300 (A1)", ["dpo", *align, "--set", "beta=1e300"], 2,
         r"beta must be a finite number in \(0, 100\], got 1e\+300"),
        ("grpo beta 1e300 (A1)", ["grpo", *align, "--set", "beta=1e300"], 2,
         r"beta must be a finite number in \[0, 100\], got 1e\+300"),
        ("m12_auxhuge: moe_aux_coef 1e300 (M2)",
         [*train, "--set", "moe_experts=4", "--set", "moe_aux_coef=1e300"], 2,
         r"moe_aux_coef must be a finite number in \[0, 10\], got 1e\+300"),
        ("e02_bigram: eval with nothing to score (E1)", ["eval", "--checkpoint",
                                                         str(tmp / "bigram.pt"), "--limit", "3"],
         2, r"nothing to score in .*bigram.pt: the tokenizer cannot write 'D', 'E', 'G', 'H', 'J', "
            r"'K', 'P', 'U', 'q' and "
            r"'x' of the held-out "
            r"Shakespeare, and every task needs characters it lacks too; evaluate a model whose "
            r"tokenizer"),
        ("s07i_g1_small_vocab: chat-sft from a GPT without 'K' (R3)",
         ["chat-sft", "--checkpoint", str(tmp / "done" / "ckpt.pt"), "--out", str(tmp / "s_tmp"),
          "--max-iters", "1", "--device", "cpu"], 2,
         "the model's tokenizer cannot write 'K', 'Q', 'X' and 'Z', which the conversations use: "
         "fine-tune a GPT whose tokenizer was built from tiny Shakespeare"),
        ("c29_lora: chat on a LoRA fine-tune (C3)", ["chat", "--checkpoint",
                                                     str(tmp / "ftl" / "ckpt.pt")], 2,
         r"holds a 'gpt-lora' model, not a chat model: `chat-sft` makes one from a GPT .*"
         r"`python -m course_lib chat-sft --out runs/chat`$"),
        ("c17_maxtokneg: chat --max-tokens -1 (C2)", ["chat", "--max-tokens", "-1"], 2,
         "error: --max-tokens must be at least 1, got -1"),
    ]


def quantize_cases(tmp: Path) -> list[tuple[str, list[str], int, str]]:
    """Chapter 23's ``quantize`` and ``qat``: settings,
    inputs and outputs refused before any work."""
    base = str(tmp / "base" / "ckpt.pt")
    q = ["quantize", base, "--out", str(tmp / "q.pt")]
    qat = ["qat", "--checkpoint", base, "--max-iters", "1",
           "--device", "cpu", "--out", str(tmp / "qat")]
    return [
        ("quantize --bits 3", [*q, "--bits", "3"], 2,
         "--bits 3: quantize writes 4-bit checkpoints"),
        ("quantize --method awq", [*q, "--method", "awq"], 2,
         "unknown --method 'awq'; choose one of: rtn, gptq"),
        ("quantize --group-size 16", [*q, "--group-size", "16"], 2,
         "--group-size must be one of 32, 64, 128, 256"),
        ("quantize --group-size 64 of 32 channels", [*q, "--group-size", "64"], 2,
         "group_size 64 must divide every matrix's row"),
        ("quantize --calibration 0", [*q, "--method", "gptq", "--calibration", "0"], 2,
         "--calibration must be at least 1"),
        ("quantize over its input", ["quantize", base, "--out", base], 2, "--out .*ckpt.pt"),
        ("quantize over another checkpoint",
         ["quantize", base, "--out", str(tmp / "done" / "ckpt.pt")], 2,
         "--out .*ckpt.pt .*checkpoint"),
        ("quantize to a folder", ["quantize", base, "--out", str(tmp)], 2, "is a folder"),
        ("quantize a bigram", ["quantize", str(tmp / "bigram.pt"), "--out", str(tmp / "q.pt")], 2,
         "holds a 'bigram' model: quantize reads a GPT checkpoint"),
        ("quantize a missing file",
         ["quantize", str(tmp / "nope.pt"), "--out", str(tmp / "q.pt")], 2, "nope.pt"),
        ("gptq without a recorded text", [*q, "--method", "gptq"], 2,
         "does not record a text .*give --text FILE"),
        ("quantize --embeddings int4", [*q, "--embeddings", "int4"], 2,
         "--embeddings must be one of int8, fp16, same .*got 'int4'"),
        ("quantize given twice", [*q, "--checkpoint", base], 2,
         "give the checkpoint to quantize once"),
        ("qat --embeddings int4", [*qat, "--embeddings", "int4"], 2,
         "--embeddings must be one of int8, fp16, same"),
        ("qat --bits 1", [*qat, "--bits", "1"], 2, "bits must be an integer in \\[2, 8\\], got 1"),
        ("qat from a bigram",
         ["qat", "--checkpoint", str(tmp / "bigram.pt"), "--out", str(tmp / "qat")], 2,
         "holds a 'bigram' model: a quantization-aware training run starts from a GPT"),
        ("qat without a recorded text", qat, 2,
         "does not record a text .*give --text FILE, the text to train on"),
        ("resume a train run with qat", ["qat", "--out", str(tmp / "done"), "--resume"], 2,
         "made by `train`, not `qat`"),
    ]


def fine_tune_cases(tmp: Path) -> list[tuple[str, list[str], int, str]]:
    """The reliability review's rows for fine-tuning, resuming, the lock and LoRA checkpoints."""
    ft = ["finetune", "--checkpoint", str(tmp / "base" / "ckpt.pt"),
          "--max-iters", "1", "--device", "cpu"]
    ftl, ftf, done = str(tmp / "ftl"), str(tmp / "ftf"), str(tmp / "done")
    text = ["--text", str(tmp / "text.txt")]
    return [
        ("--lora-targets without --lora-rank", [*ft, "--lora-targets", "foo"], 2,
         "--lora-targets without --lora-rank: .*add --lora-rank R"),
        ("--lora-alpha without --lora-rank", [*ft, "--lora-alpha", "64"], 2,
         "--lora-alpha without --lora-rank"),
        ("--lora-alpha inf", [*ft, "--lora-rank", "2", "--lora-alpha", "inf"], 2,
         "--lora-alpha must be a finite number > 0 .*got inf"),
        ("--lora-targets empty", [*ft, "--lora-rank", "2", "--lora-targets", ""], 2,
         "--lora-targets names no layer"),
        ("--lora-targets only commas", [*ft, "--lora-rank", "2", "--lora-targets", " , ,"], 2,
         "--lora-targets names no layer"),
        ("--eval-examples 0", [*ft, "--eval-examples", "0", "--out", str(tmp / "fe0")], 2,
         r"--eval-examples must be an integer in \[1, 100,000\].*got 0"),
        ("--eval-examples -5", [*ft, "--eval-examples", "-5", "--out", str(tmp / "fe0")], 2,
         "--eval-examples must be .*got -5"),
        ("a bigram as the base",
         ["finetune", "--checkpoint", str(tmp / "bigram.pt"), "--out", str(tmp / "fb")], 2,
         "holds a 'bigram' model: a fine-tuning run starts from a GPT checkpoint"),
        ("resume a LoRA run with other targets", [*ft, "--lora-targets", "mlp.c_fc",
                                                  "--out", ftl, "--resume"], 2,
         "--lora-targets mlp.c_fc: .* was fine-tuned with LoRA rank 2, alpha 2, targets "
         "attn.c_attn,attn.c_proj"),
        ("resume a LoRA run with another alpha",
         [*ft, "--lora-alpha", "64", "--out", ftl, "--resume"], 2,
         "--lora-alpha 64.0: .*a resumed run keeps its model"),
        ("resume a full fine-tune with LoRA", [*ft, "--lora-rank", "2", "--out", ftf, "--resume"],
         2, "--lora-rank 2: .* was fine-tuned with full fine-tuning"),
        ("resume a LoRA run on another base", [*ft[:2], str(tmp / "done" / "ckpt.pt"),
                                               "--out", ftl, "--resume"], 2,
         "--checkpoint .*: .* starts from .*base/ckpt.pt \\(SHA-256 .*\\), "
         "and that is another file"),
        ("resume a full fine-tune with train",
         ["train", "--out", ftf, "--resume", "--max-iters", "5"], 2,
         r"made by `finetune`, not `train`: resume it with `python -m course_lib finetune --out"),
        ("resume a LoRA fine-tune with train", ["train", "--out", ftl, "--resume"], 2,
         r"made by `finetune`, not `train`"),
        ("resume a LoRA fine-tune with train-dates", ["train-dates", "--out", ftl, "--resume"], 2,
         r"made by `finetune`, not `train-dates`: resume it with `python -m course_lib finetune "
         r"--out"),
        ("resume a train run with finetune", ["finetune", "--out", done,
                                              "--resume", "--max-iters", "6"], 2,
         r"made by `train`, not `finetune`: resume it with `python -m course_lib train --text "
         r"text.txt"),
        ("resume past max_iters",
         ["train", *text, "--out", done, "--resume", "--set", "max_iters=1", *TINY], 2,
         "is at step 2, past max_iters 1: .*give one of at least 2"),
        ("resume a checkpoint with a damaged step",
         ["train", *text, "--out", str(tmp / "badstep"), "--resume", *TINY], 2,
         "is damaged: its step is 'abc', not a count of steps"),
        ("resume a checkpoint without rng",
         ["train", *text, "--out", str(tmp / "norng"), "--resume", *TINY], 2,
         "holds no random-number state"),
        ("resume a checkpoint with a bad stored setting", ["train", *text, "--out",
                                                           str(tmp / "badtc"),
                                                           "--resume", *TINY], 2,
         r"stores training settings this course_lib refuses \(TrainConfig.learning_rate .*got "
         r"50.0\): the value "
         "comes from the checkpoint"),
        ("a lock that is a folder", ["train", *text, "--out", str(tmp / "lock-is-a-folder"), *TINY],
         2, r"\.run\.lock is a folder, not a run's lock file: remove it"),
        ("a lock being written", ["train", *text, "--out", str(tmp / "lock-being-written"), *TINY],
         2, "is being claimed by another run at this moment .*if no run is starting there, delete"),
        ("sample a LoRA run whose base is a folder",
         ["sample", "--checkpoint", str(tmp / "lora_base_dir.pt")], 2,
         "the base model of this LoRA checkpoint, .*, is a folder"),
        ("sample a LoRA run whose base is /dev/zero",
         ["sample", "--checkpoint", str(tmp / "lora_base_dev_zero.pt")], 2,
         "the base model of this LoRA checkpoint, /dev/zero, is not a regular file"),
        ("sample a LoRA run missing its A matrices",
         ["sample", "--checkpoint", str(tmp / "lora_missing_A.pt")], 2,
         r"4 tensor\(s\) missing \(blocks\.0\.attn\.c_attn\.lora_A"),
    ]


def _tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes()
            for p in sorted(folder.rglob("*")) if p.is_file()} | {
        str(p.relative_to(folder)) + "/": b"" for p in folder.rglob("*") if p.is_dir()}


def _one_line_error(capsys, argv, status, phrase, name):
    assert main(argv) == status, name
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, f"{name}: not one line: {err!r}"
    assert re.search(phrase, err), f"{name}: {err!r} does not match {phrase!r}"


@pytest.mark.slow  # ten seconds or more on 2 cores (make unit leaves it out)
def test_every_bad_input_is_one_line_and_writes_nothing(files, capsys, monkeypatch):
    monkeypatch.chdir(files)  # default output folders (runs/...) would appear here
    table = cases(files)
    before = _tree(files)
    capsys.readouterr()
    for name, argv, status, phrase in table:
        _one_line_error(capsys, argv, status, phrase, name)
        assert _tree(files) == before, f"{name}: left files behind"


@pytest.mark.slow  # ten seconds or more on 2 cores (make unit leaves it out)
def test_a_second_run_into_a_folder_in_use_is_refused(files, tmp_path, capsys):
    """A run holds its --out with a lock file (created with O_EXCL, so two starts cannot both
    get it); another live process's lock refuses the run, a dead one's is taken over."""
    out = tmp_path / "busy"
    out.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (out / LOCK_NAME).write_text(str(holder.pid))
        before = _tree(tmp_path)
        argv = ["train", "--text", str(files / "text.txt"),
                "--out", str(out), "--set", "max_iters=1", *TINY]
        _one_line_error(capsys, argv, 2, f"is in use by another run \\(process {holder.pid}, .*if "
                        "no run of course_lib is writing there \\(a process id reused after a "
                        "restart\\), delete", "folder in use")
        assert _tree(tmp_path) == before
    finally:
        holder.kill()
        holder.wait()
    assert main(argv) == 0  # the holder is gone: its lock is stale and taken over
    assert sorted(p.name for p in out.iterdir()) == ["ckpt.pt"]


def test_a_run_that_diverges_stops_with_one_line_and_keeps_the_last_good_checkpoint(
        files, tmp_path, capsys, monkeypatch):
    from course_lib.train import Trainer

    forward_backward = Trainer.forward_backward

    def nan_from_step_3(self, batches):  # as if the learning rate had blown the weights up
        loss = forward_backward(self, batches)
        return float("nan") if self.step >= 3 else loss

    monkeypatch.setattr(Trainer, "forward_backward", nan_from_step_3)
    out = tmp_path / "run"
    argv = ["train", "--text", str(files / "text.txt"),
            "--out", str(out), "--set", "max_iters=6", *TINY]
    _one_line_error(capsys, argv, 2,
                    r"training diverged at step 4: the loss is nan .*the last good checkpoint, "
                    r".*ckpt.pt \(step 2\), is kept\. Try a smaller learning_rate", "diverged")
    ckpt = torch.load(out / "ckpt.pt", weights_only=True)
    assert ckpt["step"] == 2 and all(torch.isfinite(t).all() for t in ckpt["model"].values())
    assert sorted(p.name for p in out.iterdir()) == ["ckpt.pt"]  # and the lock is gone


def _cli(*args, **kw) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "course_lib", *args], capture_output=True,
                          text=True, env=env, timeout=300, **kw)


@pytest.mark.slow
def test_text_from_a_pipe(files, tmp_path):
    """``--text -`` reads standard input (a pipe); the
    checkpoint records it as "-" with its SHA-256."""
    text = (files / "text.txt").read_text(encoding="utf-8")
    done = _cli("train", "--text", "-", "--out", str(tmp_path / "piped"),
                "--set", "max_iters=1", *TINY, input=text)
    assert done.returncode == 0, done.stderr
    saved = torch.load(tmp_path / "piped" / "ckpt.pt", weights_only=True)["trained_on"]
    import hashlib
    assert saved == {"command": "train", "preset": "shakespeare-char-cpu", "text": "-",
                     "text_sha256": hashlib.sha256(text.encode()).hexdigest()}
    binary = _cli("train", "--text", "-", "--out", str(tmp_path / "nul"), input="\0" * 100)
    assert binary.returncode == 2 and binary.stderr.count("\n") == 1
    assert "standard input is not text: it holds 100 NUL bytes" in binary.stderr
    if Path("/dev/stdin").exists():  # a pipe given by its path is read like a file
        piped = _cli("train", "--text", "/dev/stdin", "--out",
                     str(tmp_path / "nul"), input="\0" * 7)
        assert (piped.returncode == 2
                and "/dev/stdin is not text: it holds 7 NUL bytes" in piped.stderr)
    assert not (tmp_path / "nul").exists()


# --- issue 31: the tools (python -m course_lib.tools) ---------------------------------------------


def _tools(capsys, *argv) -> tuple[int, str]:
    from course_lib.tools.__main__ import main as tools_main

    capsys.readouterr()
    status = tools_main(list(argv))
    return status, capsys.readouterr().err


def test_as_nonempty_assignments_build_never_replaces_a_notebook_without_force(tmp_path, capsys):
    """Row 12: an instructor's edited notebook in --out is kept; --force replaces it."""
    out = tmp_path / "asg"
    out.mkdir()
    edited = out / "ch03_self_attention_trick.ipynb"
    edited.write_text('{"edited": "by the instructor"}')
    (out / "notes.txt").write_text("mine")
    status, err = _tools(capsys, "assignments", "build", "--chapter", "3", "--out", str(out))
    assert status == 2 and err.count("\n") == 1
    assert ("already holds ch03_self_attention_trick.ipynb, which this build would replace" in err
            and "--force" in err)
    assert (edited.read_text() == '{"edited": "by the instructor"}'
            and sorted(p.name for p in tmp_path.rglob("*")) == [
                "asg", "ch03_self_attention_trick.ipynb", "notes.txt"])
    status, _ = _tools(capsys, "assignments", "build", "--chapter", "4", "--out", str(out))
    # another chapter: nothing replaced
    assert status == 0 and (out / "ch04_attention_heads.ipynb").exists()
    status, _ = _tools(capsys, "assignments", "build", "--chapter",
                       "3", "--out", str(out), "--force")
    assert (status == 0 and "edited" not in edited.read_text()
            and (out / "notes.txt").read_text() == "mine")


def test_as_outfile_as_ro_assignments_out_is_checked_before_building(tmp_path, capsys, monkeypatch):
    """as_outfile, as_ro, as_ro_sub: one line that names --out (never the staging folder)."""
    import tempfile

    a_file = tmp_path / "small.txt"
    a_file.write_text("x")
    status, err = _tools(capsys, "assignments", "build", "--chapter", "3", "--out", str(a_file))
    assert status == 2 and err.count("\n") == 1 and "is a file, not a folder" in err
    status, err = _tools(capsys, "assignments", "build", "--chapter",
                         "3", "--out", str(a_file / "sub"))
    assert status == 2 and "which is a file, not a folder" in err

    # an unwritable folder (root ignores permissions, so it is simulated)
    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(tempfile, "mkstemp", refuse)
    for out in (tmp_path / "ro", tmp_path / "ro" / "sub" / "deeper"):
        (tmp_path / "ro").mkdir(exist_ok=True)
        status, err = _tools(capsys, "assignments", "build", "--chapter", "3", "--out", str(out))
        assert status == 2 and err.count("\n") == 1, err
        assert (f"cannot write to {out} (Permission denied in " in err
                and ".ro-" not in err and ".deeper-" not in err)
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["ro", "small.txt"]


def test_tp_ro_tools_pretrained_checks_out_before_training(tmp_path, capsys, monkeypatch):
    """tp_ro: a bad --out is refused at once, not after the 3-minute run."""
    import subprocess as sp
    import tempfile

    # it asks a subprocess
    monkeypatch.setattr("course_lib.tools.numerics.unsupported_host", lambda: None)
    monkeypatch.setattr(sp, "Popen", lambda *a, **k: pytest.fail("trained before checking --out"))
    a_file = tmp_path / "small.txt"
    a_file.write_text("x")
    for out, phrase in ((tmp_path, "is a folder: give the file to write"),
                        (a_file / "x.pt", "small.txt is a file, not a folder")):
        status, err = _tools(capsys, "pretrained", "--out", str(out))
        assert status == 2 and err.count("\n") == 1 and phrase in err, err
    monkeypatch.setattr(tempfile, "mkstemp", lambda *a,
                        **k: (_ for _ in ()).throw(PermissionError(1, "Operation not permitted")))
    status, err = _tools(capsys, "pretrained", "--out", str(tmp_path / "ro" / "x.pt"))
    assert status == 2 and "cannot write " in err and "(Operation not permitted in " in err


def test_tp_ctrlc_tools_pretrained_ctrl_c_is_one_line(tmp_path, capsys, monkeypatch):
    """tp_ctrlc: Ctrl-C while the child trains: one line, status 130, nothing written, and the
    process's own Ctrl-C handler back in place."""
    import signal
    import subprocess as sp

    class Child:  # the training child: the first wait is interrupted by Ctrl-C, then it stops
        waits = []

        def __init__(self, *args, **kwargs):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def wait(self, timeout=None):
            Child.waits.append(signal.getsignal(signal.SIGINT))
            if len(Child.waits) == 1:
                raise KeyboardInterrupt
            return 130

    # it asks a subprocess
    monkeypatch.setattr("course_lib.tools.numerics.unsupported_host", lambda: None)
    monkeypatch.setattr(sp, "Popen", Child)
    handler = signal.getsignal(signal.SIGINT)
    out = tmp_path / "pt.pt"
    status, err = _tools(capsys, "pretrained", "--out", str(out))
    assert status == 130 and err == f"interrupted (Ctrl-C): {out} was not written\n"
    assert (Child.waits[1] == signal.SIG_IGN and signal.getsignal(signal.SIGINT) == handler
            and not out.exists())
