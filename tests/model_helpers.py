"""Helpers shared by the model tests (here, not in conftest.py: when pytest collects tests/ and
book/ together, ``from conftest import`` finds book/conftest.py)."""
import torch

from course_lib.model import GPT, GPTConfig
from course_lib.train import Trainer, TrainConfig


def assert_same_weights(a, b, rtol: float = 0.0, atol: float = 0.0) -> None:
    """``a`` and ``b`` (models, or state dicts such as a checkpoint's ``"model"``) hold the same
    tensors under the same names: bitwise equal by default (same dtype and shape too); ``rtol`` and
    ``atol`` for runs that add the same numbers in another order (data parallel vs accumulation)."""
    sa = a.state_dict() if isinstance(a, torch.nn.Module) else a
    sb = b.state_dict() if isinstance(b, torch.nn.Module) else b
    assert sa.keys() == sb.keys(), f"different tensors: {sorted(set(sa) ^ set(sb))[:5]}"
    for name in sa:
        torch.testing.assert_close(sb[name], sa[name], rtol=rtol, atol=atol,
                                   msg=lambda message, name=name: f"{name}: {message}")


# --- shared by the tests that prove a model equal to a reference or causal ---------------------


def logits_of(hf_model, ours, x):
    """(Hugging Face's logits, ours) for the token ids ``x`` (B, T): both (B, T, V)."""
    with torch.no_grad():
        return hf_model(x).logits, ours(x)[0]


def logits_through_kv_cache(model, x, prompt: int = 10):
    """``model``'s logits for ``x`` (B, T) computed as generation does: the first ``prompt`` tokens
    at once, then one token at a time through the KV cache: ((B, T, V) logits, the filled cache)."""
    from course_lib.attention import KVCache

    with torch.no_grad():
        cache = KVCache(model.config.n_layer, model.config.block_size)
        first, _ = model(x[:, :prompt], cache=cache)
        steps = [model(x[:, t:t + 1], cache=cache)[0] for t in range(prompt, x.shape[1])]
    return torch.cat([first] + steps, dim=1), cache


def change_one_token(model, tokens: list[int], data, vocab: int = 11):
    """Hypothesis draws a position t >= 1 and a new token there; returns (t, logits before,
    logits after), each (1, T, V), for a causality test to compare."""
    from hypothesis import strategies as st

    t = data.draw(st.integers(1, len(tokens) - 1), label="changed position")
    new = data.draw(st.integers(0, vocab - 1).filter(lambda v: v != tokens[t]), label="new token")
    changed = tokens.copy()
    changed[t] = new
    with torch.no_grad():
        return t, model(torch.tensor([tokens]))[0], model(torch.tensor([changed]))[0]


# --- a tiny GPT and its trainer, shared by the training-engine tests (test_speed, test_distributed)
# --


TINY = GPTConfig(vocab_size=11, block_size=8, n_layer=1, n_head=2, n_embd=16)
DATA = torch.randint(0, 11, (400,), generator=torch.Generator().manual_seed(0))  # (400,) token ids


def tiny_trainer(**train_options):
    """A Trainer of a 1-layer GPT on random tokens, its weights drawn after seeding 0;
    ``train_options`` override the short run's TrainConfig."""
    torch.manual_seed(0)
    options = dict(max_iters=8, batch_size=4, eval_interval=100, eval_iters=1, learning_rate=3e-3,
                   warmup_iters=0)
    options.update(train_options)
    return Trainer(GPT(TINY), DATA[:300], DATA[300:], TrainConfig(**options), progress=False)


def pretrain_tiny_gpt(folder, max_iters: int = 20):
    """A tiny character GPT pretrained for a few steps on Shakespeare (seconds), saved in
    ``folder/ckpt.pt`` as `train` saves it (fine-tuning's base in the tests)."""
    from course_lib.data import load_text, train_val_split
    from course_lib.tokenizers import CharTokenizer

    tok = CharTokenizer.from_text(load_text("tinyshakespeare"))
    train, val = train_val_split(torch.tensor(tok.encode(load_text("tinyshakespeare")[:20000])))
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=tok.vocab_size, block_size=48, n_layer=2, n_head=2, n_embd=32,
                          tie_weights=False))
    config = TrainConfig(max_iters=max_iters, batch_size=8, eval_interval=max_iters, eval_iters=2)
    Trainer(model, train, val, config, out_dir=folder, tokenizer=tok, progress=False,
            verbose=False).train()
    return folder / "ckpt.pt"


def cli_train_resume_and_sample(tmp_path, capsys, settings: list[str], tokens: int = 20) -> dict:
    """Through ``python -m course_lib``: train 6 steps with ``settings``; train 3, then resume to 6;
    assert the two checkpoints equal bitwise (3 + 3 resumed steps are the 6 steps of one run) and
    that ``sample`` continues a prompt from the first. Returns the first checkpoint, to be
    inspected by the caller."""
    from course_lib.checkpoint import load_checkpoint
    from course_lib.cli import main

    whole, split = tmp_path / "whole", tmp_path / "split"
    assert main(["train", "--out", str(whole), "--set", "max_iters=6", *settings]) == 0
    assert main(["train", "--out", str(split), "--set", "max_iters=3", *settings]) == 0
    assert main(["train", "--out", str(split), "--resume", "--set", "max_iters=6", *settings]) == 0
    a, b = load_checkpoint(whole / "ckpt.pt"), load_checkpoint(split / "ckpt.pt")
    assert_same_weights(a["model"], b["model"])
    capsys.readouterr()
    assert main(["sample", "--checkpoint", str(whole / "ckpt.pt"), "--prompt", "ROMEO:", "--tokens",
                 str(tokens)]) == 0
    text = capsys.readouterr().out
    assert text.startswith("ROMEO:") and len(text) > len("ROMEO:") + tokens // 2
    return a
