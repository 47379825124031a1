"""The CUDA lane's own tests (``make gpu-test``; marked ``gpu``, skipped with one line without
CUDA): what a reader on a GPU runtime meets and a CPU never exercises. Every command here leaves
``--device`` out, so it runs on the CLI's default device, the GPU. bf16 and fp16 (with its loss
scaling), torch.compile, the GPU speedrun preset, sampling from every kind of checkpoint, the
KV cache of grouped-query attention on CUDA's kernels, TF32 scoped to the training run, and Part
III's runs (chat fine-tune, chat, DPO, GRPO) trained and resumed there."""
from __future__ import annotations

import pytest
import torch

from course_lib.checkpoint import load_checkpoint, save_checkpoint
from course_lib.cli import main
from course_lib.generate import generate
from course_lib.model import GPT, GPTConfig
from course_lib.train import TrainConfig, Trainer

pytestmark = pytest.mark.gpu

TINY = ["--set", "n_layer=1", "--set", "n_head=2", "--set", "n_embd=16", "--set", "block_size=16",
        "--set", "batch_size=4", "--set", "eval_iters=1", "--max-iters", "4"]


def _trainer(**options) -> Trainer:
    torch.manual_seed(0)
    data = torch.randint(0, 11, (400,), generator=torch.Generator().manual_seed(0))
    config = dict(max_iters=6, batch_size=4, eval_interval=100, eval_iters=1, learning_rate=3e-3,
                  warmup_iters=0)
    config.update(options)
    model = GPT(GPTConfig(vocab_size=11, block_size=8, n_layer=1, n_head=2, n_embd=16))
    return Trainer(model, data[:300], data[300:], TrainConfig(**config), device="cuda",
                   progress=False, verbose=False)


def test_the_default_device_is_the_gpu():
    from course_lib.utils import pick_device

    assert pick_device() == "cuda"


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_half_precision_training_runs_and_keeps_fp32_weights(dtype):
    trainer = _trainer(dtype=dtype)
    assert trainer.scaler.is_enabled() == (dtype == "fp16")  # fp16 alone needs loss scaling
    history = trainer.train()
    assert all(torch.isfinite(torch.tensor(history["loss"])))
    assert all(p.dtype == torch.float32 and p.is_cuda for p in trainer.model.parameters())
    if dtype == "fp16":
        assert trainer.scaler.get_scale() > 0


@pytest.mark.slow  # compiling takes tens of seconds
def test_torch_compile_trains_on_the_gpu(capsys):
    trainer = _trainer(compile=True)
    trainer.train()
    assert "could not compile" not in capsys.readouterr().out  # no fallback to eager mode
    assert trainer.train_model is not trainer.model


def test_tf32_holds_during_a_gpu_run_only():
    seen = []
    trainer = _trainer(max_iters=2)
    batch_fn = trainer.batch_fn
    trainer.batch_fn = lambda split, gen: (seen.append(torch.get_float32_matmul_precision()),
                                           batch_fn(split, gen))[1]
    before = torch.get_float32_matmul_precision()
    trainer.train()
    assert set(seen) == {"high"} and torch.get_float32_matmul_precision() == before


@pytest.mark.parametrize("n_kv_head", [1, 2], ids=["mqa", "gqa"])
def test_kv_cache_of_grouped_query_attention_on_cuda(n_kv_head):
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=13, block_size=16, n_layer=2, n_head=4, n_kv_head=n_kv_head,
                          n_embd=32, rope_theta=10000.0)).cuda().eval()
    idx = torch.randint(13, (2, 3), device="cuda")
    assert torch.equal(generate(model, idx, 20, temperature=0),
                       generate(model, idx, 20, temperature=0, use_cache=True))


@pytest.mark.slow  # bf16 + torch.compile of the speedrun model
def test_the_gpu_speedrun_preset_trains(tmp_path, capsys):
    out = tmp_path / "speedrun"
    assert main(["train", "--preset", "shakespeare-char-speedrun-gpu", "--max-iters", "5", "--set",
                 "eval_iters=1", "--out", str(out)]) == 0
    assert (out / "ckpt.pt").is_file()
    assert main(["sample", "--checkpoint", str(out / "ckpt.pt"), "--tokens", "20"]) == 0


def _gpt(tmp_path, capsys, *settings) -> str:
    out = tmp_path / "gpt"
    assert main(["train", "--out", str(out), *TINY, *settings]) == 0
    return str(out / "ckpt.pt")


@pytest.mark.parametrize("settings", [(), ("--set", "n_head=4", "--set", "n_kv_head=2", "--set",
                                           "rope_theta=10000", "--set", "norm=rmsnorm", "--set",
                                           "mlp=swiglu")],
                         ids=["gpt", "gqa-rope-rmsnorm-swiglu"])
def test_sampling_a_gpt_checkpoint_on_the_gpu(tmp_path, capsys, settings):
    ckpt = _gpt(tmp_path, capsys, *settings)
    capsys.readouterr()
    assert main(["sample", "--checkpoint", ckpt, "--tokens", "30", "--prompt", "ROMEO:"]) == 0
    assert capsys.readouterr().out.startswith("ROMEO:")


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_sampling_a_fine_tune_on_the_gpu(tmp_path, capsys, lora):
    # the task's longest example is 39 tokens
    base = _gpt(tmp_path, capsys, "--set", "block_size=48")
    out = tmp_path / "ft"
    extra = ["--lora-rank", "2"] if lora else []
    assert main(["finetune", "--checkpoint", base, "--max-iters", "2", "--set", "batch_size=2",
                 "--set", "eval_iters=1", "--eval-examples", "2", "--out", str(out), *extra]) == 0
    assert main(["sample", "--checkpoint", str(out / "ckpt.pt"), "--tokens", "10"]) == 0


def test_translating_with_a_seq2seq_checkpoint_on_the_gpu(tmp_path, capsys):
    out = tmp_path / "dates"
    assert main(["train-dates", "--out", str(out), "--max-iters", "2"]) == 0
    for beam in ("1", "3"):
        assert main(["translate", "--checkpoint", str(out / "ckpt.pt"), "3 March 2021", "--beam",
                     beam]) == 0


def test_sampling_a_bigram_checkpoint_on_the_gpu(tmp_path, capsys):
    from course_lib.bigram import BigramLanguageModel
    from course_lib.tokenizers import CharTokenizer

    tokenizer = CharTokenizer("abcdefgh \n")
    ckpt = save_checkpoint(tmp_path / "bigram.pt", BigramLanguageModel(tokenizer.vocab_size),
                           tokenizer=tokenizer)
    assert main(["sample", "--checkpoint", str(ckpt), "--tokens", "10"]) == 0


def test_a_checkpoint_trained_on_the_gpu_samples_on_the_cpu(tmp_path, capsys):
    ckpt = _gpt(tmp_path, capsys)
    assert main(["sample", "--checkpoint", ckpt, "--tokens", "10", "--device", "cpu"]) == 0


# --- Part III's kinds of run on the GPU (chapters 17 and 18) --------------------------------------


def test_a_chat_fine_tune_trains_resumes_and_chats_on_the_gpu(tmp_path, capsys):
    from course_lib.chat.engine import ChatEngine, load_chat_model

    out = tmp_path / "chat"
    args = ["chat-sft", "--out", str(out), "--set", "batch_size=4", "--set", "eval_interval=2",
            "--set", "eval_iters=1"]
    assert main(args + ["--max-iters", "2"]) == 0
    assert "on cuda" in capsys.readouterr().out
    assert main(args + ["--max-iters", "3", "--resume"]) == 0
    model, tokenizer = load_chat_model(out / "ckpt.pt", "cuda")
    engine = ChatEngine(model, tokenizer, max_reply_tokens=8)
    assert isinstance(engine.send("How much is 1+69?"), str) and len(engine.turn_ids) == 2


def test_the_shipped_chat_model_uses_its_calculator_on_the_gpu():
    from course_lib.chat.engine import ChatEngine, load_chat_model

    model, tokenizer = load_chat_model(device="cuda")
    assert next(model.parameters()).device.type == "cuda"
    pieces = list(ChatEngine(model, tokenizer, max_reply_tokens=20).stream("How much is 1+69?"))
    assert [p.text for p in pieces if p.kind == "result"] == ["70"]


@pytest.mark.parametrize("method", ["dpo", "grpo"])
def test_dpo_and_grpo_train_and_resume_on_the_gpu(tmp_path, capsys, method):
    from test_align import make_base  # the random base over the sums' characters

    base = make_base(tmp_path / "base.pt")
    out = tmp_path / method
    extra = ["--set", "pair_prompts=16"] if method == "dpo" else ["--set", "group_size=4"]
    args = [method, "--checkpoint", str(base), "--reward", "format", "--out", str(out), "--set",
            "batch_size=2", "--set", "eval_interval=2", *extra]
    assert main(args + ["--max-iters", "2"]) == 0
    assert main(args + ["--max-iters", "3", "--resume"]) == 0
    assert load_checkpoint(out / "ckpt.pt")["step"] == 3


def test_a_cpu_generator_samples_a_gpu_models_tokens_as_on_the_cpu():
    """A run's sampling stream is a CPU generator (stored in its checkpoint): on a GPU model it
    draws on the CPU, so the draws are the CPU's, token for token."""
    from course_lib.generate import sample_next

    logits = torch.randn(8, 50, generator=torch.Generator().manual_seed(0))
    on_cpu = sample_next(logits, 0.9, top_k=20, generator=torch.Generator().manual_seed(1))
    on_gpu = sample_next(logits.cuda(), 0.9, top_k=20, generator=torch.Generator().manual_seed(1))
    assert on_gpu.device.type == "cuda" and torch.equal(on_gpu.cpu(), on_cpu)
