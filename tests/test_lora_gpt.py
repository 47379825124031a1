"""course_lib.lora_gpt: a pretrained GPT grown for new tokens (the old logits unchanged), and the
gpt-lora model kind: adapters and new rows over a frozen base, checkpoints that hold only what
changed and name their base (checked by SHA-256, refused in one line when moved, changed, a
folder or a device), and what is missing from a damaged one."""
import shutil
from pathlib import Path

import pytest
import torch

from course_lib import GPT, Trainer, TrainConfig
from course_lib.checkpoint import CheckpointError, load_checkpoint, load_model, save_checkpoint
from course_lib.finetune import TASK_CHARS, answer_batch_fn, extend_tokenizer
from course_lib.lora import lora_layers
from course_lib.lora_gpt import LoRAGPT, extend_vocabulary
from course_lib.tokenizers import CharTokenizer
from model_helpers import pretrain_tiny_gpt


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory):
    return pretrain_tiny_gpt(tmp_path_factory.mktemp("pretrained"))


def test_new_rows_leave_the_old_logits_alone(pretrained):
    base, _ = load_model(pretrained)
    bigger = extend_vocabulary(base, 11).eval()
    assert bigger.config.vocab_size == base.config.vocab_size + 11
    x = torch.randint(0, base.config.vocab_size, (2, 48),
                      generator=torch.Generator().manual_seed(0))
    old, new = base(x)[0], bigger(x)[0]
    torch.testing.assert_close(new[..., :base.config.vocab_size], old, atol=1e-6, rtol=0)
    mean_row = base.lm_head.weight.mean(0)  # every new output row is the mean of the old ones
    torch.testing.assert_close(bigger.lm_head.weight[-1], mean_row)
    torch.testing.assert_close(bigger.wte.weight[-11], base.wte.weight.mean(0))


# --- LoRA checkpoints -----------------------------------------------------------------------------


def lora_from(pretrained, rank=4):
    _, ckpt = load_model(pretrained)
    tok = extend_tokenizer(CharTokenizer.from_dict(ckpt["tokenizer"]), TASK_CHARS)
    torch.manual_seed(0)
    return LoRAGPT.from_base(pretrained, tok, rank=rank, alpha=2 * rank), tok


def test_lora_gpt_starts_as_the_extended_base_and_trains_only_adapters_and_new_rows(pretrained):
    model, tok = lora_from(pretrained)
    base, _ = load_model(pretrained)
    full = extend_vocabulary(base, tok.vocab_size - base.config.vocab_size).eval()
    x = torch.randint(0, tok.vocab_size, (2, 40), generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(model.eval()(x)[0], full(x)[0], atol=1e-6, rtol=0)
    trained = {n for n, p in model.named_parameters() if p.requires_grad}
    n_new = tok.vocab_size - base.config.vocab_size
    assert trained == {"wte.new",
                       "lm_head.new"} | {f"{k}.lora_{m}" for k in lora_layers(model) for m in "AB"}
    numel = sum(p.numel() for p in model.parameters() if p.requires_grad)
    # the formula: 2 blocks x (c_attn 4 + c_proj 2) r C, plus the new rows of the embedding and the
    # head
    assert model.trainable_count() == numel == 2 * 6 * 4 * 32 + 2 * n_new * 32


def test_lora_checkpoint_round_trip_holds_only_what_changed(pretrained, tmp_path):
    model, tok = lora_from(pretrained)
    with torch.no_grad():
        for layer in lora_layers(model).values():
            layer.lora_B.normal_()
        model.wte.new.add_(1.0)
    path = save_checkpoint(tmp_path / "ft.pt", model, tokenizer=tok)
    ckpt = load_checkpoint(path)
    assert ckpt["model_kind"] == "gpt-lora"
    assert set(ckpt["model"]) == {n for n, p in model.named_parameters(remove_duplicate=False)
                                  if p.requires_grad}
    loaded, _ = load_model(path)
    x = torch.randint(0, tok.vocab_size, (2, 40), generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(loaded(x)[0], model.eval()(x)[0], atol=0, rtol=0)
    torch.testing.assert_close(loaded.merged()(x)[0], model(x)[0], atol=1e-5, rtol=0)  # a plain GPT
    assert type(loaded.merged()) is GPT


def test_lora_checkpoint_says_when_its_base_is_missing_or_different(pretrained, tmp_path):
    base_copy = tmp_path / "base.pt"
    shutil.copy(pretrained, base_copy)
    model, tok = lora_from(base_copy)
    path = save_checkpoint(tmp_path / "ft.pt", model, tokenizer=tok)
    other, ckpt = load_model(base_copy)
    with torch.no_grad():
        other.wte.weight.add_(0.01)
    save_checkpoint(base_copy, other, tokenizer=CharTokenizer.from_dict(ckpt["tokenizer"]))
    with pytest.raises(CheckpointError, match="not the one this LoRA checkpoint was trained on"):
        load_model(path)
    base_copy.unlink()
    with pytest.raises(CheckpointError, match="base.pt, is missing"):
        load_model(path)


def test_old_rows_and_base_weights_stay_frozen_under_weight_decay(pretrained):
    model, tok = lora_from(pretrained)
    frozen = {n: p.detach().clone() for n, p in model.named_parameters() if not p.requires_grad}
    config = TrainConfig(max_iters=3, batch_size=4, weight_decay=0.5, eval_interval=3, eval_iters=1)
    Trainer(model, config=config, batch_fn=answer_batch_fn(tok, 4), progress=False,
            verbose=False).train()
    for n, p in model.named_parameters():
        if n in frozen:
            assert torch.equal(p, frozen[n]), n


@pytest.mark.parametrize("where", ["folder", "device"])
def test_a_base_that_is_no_regular_file_is_refused_before_it_is_read(pretrained, tmp_path, where):
    """/dev/zero would be hashed forever; a folder gave a raw "[Errno 21] Is a directory"."""
    model, tok = lora_from(pretrained)
    path = save_checkpoint(tmp_path / "ft.pt", model, tokenizer=tok)
    ckpt = torch.load(path, weights_only=True)
    if where == "device" and not Path("/dev/zero").exists():
        pytest.skip("no /dev/zero here")
    ckpt["model_config"]["base_checkpoint"] = str(tmp_path) if where == "folder" else "/dev/zero"
    torch.save(ckpt, path)
    what = "is a folder" if where == "folder" else "is not a regular file"
    with pytest.raises(CheckpointError,
                       match=f"the base model of this LoRA checkpoint, .*, {what}"):
        load_model(path)


def test_a_lora_checkpoint_missing_tensors_says_which(pretrained, tmp_path):
    model, tok = lora_from(pretrained)
    path = save_checkpoint(tmp_path / "ft.pt", model, tokenizer=tok)
    ckpt = torch.load(path, weights_only=True)
    ckpt["model"] = {k: v for k, v in ckpt["model"].items() if not k.endswith("lora_A")}
    torch.save(ckpt, path)
    with pytest.raises(CheckpointError, match=r"4 tensor\(s\) missing \("
                                              r"blocks\.0\.attn\.c_attn\.lora_A"):
        load_model(path)
