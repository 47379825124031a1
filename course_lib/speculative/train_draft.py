"""The small-model drafter: a 1-layer GPT trained on the same text and tokens as the target.

It is built as every training in the course is, a :class:`course_lib.train.Trainer` over random
windows of the training split; 1 layer of C=64 instead of the target's 4 of C=128, so one draft
token costs a fraction of a target forward (measured in the chapter, not assumed).
"""
from __future__ import annotations

import torch

from ..data import get_batch, load_text, train_val_split
from ..model import GPT, GPTConfig
from ..train import TrainConfig, Trainer

DRAFT_STEPS = 1500  # under a minute on one core; the chapter and the benchmark train the same


def draft_config(vocab_size: int = 65, block_size: int = 64) -> GPTConfig:
    """1 layer, 4 heads, C=64: the draft GPT's shape (the target's vocabulary and block size)."""
    return GPTConfig(vocab_size=vocab_size, block_size=block_size, n_layer=1, n_head=4, n_embd=64,
                     dropout=0.0, tie_weights=False)


def draft_trainer(train_data: torch.Tensor, val_data: torch.Tensor, steps: int = DRAFT_STEPS,
                  seed: int = 1337, vocab_size: int = 65, block_size: int = 64,
                  progress: bool = False) -> Trainer:
    """A Trainer for the draft GPT on windows of ``train_data`` (1-D token ids), seeded."""
    torch.manual_seed(seed)
    model = GPT(draft_config(vocab_size, block_size))
    config = TrainConfig(max_iters=steps, batch_size=16, learning_rate=3e-3, min_lr=3e-4,
                         warmup_iters=50, beta2=0.99, weight_decay=0.0, grad_clip=1.0,
                         eval_interval=steps, eval_iters=10, seed=seed)

    def batch_fn(split: str, generator: torch.Generator | None):
        return get_batch(train_data if split == "train" else val_data, block_size,
                         config.batch_size, generator)

    return Trainer(model, config=config, batch_fn=batch_fn, progress=progress, verbose=False)


def train_draft_gpt(tokenizer, steps: int = DRAFT_STEPS, seed: int = 1337,
                    progress: bool = False) -> tuple[GPT, dict]:
    """Train the draft GPT on tiny Shakespeare's training split, tokenized by ``tokenizer`` (the
    target's); returns (model in eval mode, the trainer's history)."""
    ids = torch.tensor(tokenizer.encode(load_text()), dtype=torch.long)
    train, val = train_val_split(ids)
    trainer = draft_trainer(train, val, steps, seed, tokenizer.vocab_size, progress=progress)
    history = trainer.train()
    return trainer.model.eval(), history
