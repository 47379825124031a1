"""Fine-tuning the shipped pretrained model on the dates task: full fine-tuning against LoRA of
several ranks, the prompt-masked loss against the unmasked one. Prints, for each run, the exact
match on held-out dates, the Shakespeare validation loss (forgetting), trainable parameters and
the seconds it took. Usage:

    python benchmarks/finetune_dates.py [--steps 300] [--ranks 1 4 16] [--lrs 1e-3] [--eval 500]
"""
import argparse
import time

import torch

from course_lib.checkpoint import load_model, load_tokenizer
from course_lib.data import load_text, train_val_split
from course_lib.finetune import (TASK_CHARS, answer_batch_fn, dates_test_pairs, exact_match, extend_tokenizer,
                                 finetune_config, text_loss)
from course_lib.lora import add_lora
from course_lib.lora_gpt import GrownRows, extend_vocabulary
from course_lib.pretrained import load_pretrained
from course_lib.train import Trainer
from course_lib.utils import seed_everything


def lora_model(base, n_new, rank, targets):
    """What LoRAGPT builds, without a checkpoint file: adapters plus trainable new rows."""
    model = extend_vocabulary(base, n_new)
    model.wte = GrownRows(model.wte.weight, n_new)
    model.lm_head = GrownRows(model.lm_head.weight, n_new, head=True)
    add_lora(model, rank, float(rank), targets=targets)
    model.wte.new.requires_grad_(True)
    model.lm_head.new.requires_grad_(True)
    return model


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--ranks", type=int, nargs="*", default=[1, 4, 16])
    parser.add_argument("--lrs", type=float, nargs="*", default=[1e-3])
    parser.add_argument("--eval", type=int, default=500)
    parser.add_argument("--checkpoint", help="a GPT checkpoint (default: the shipped pretrained model)")
    parser.add_argument("--targets", default="attn.c_attn,attn.c_proj", help="LoRA targets, comma-separated")
    parser.add_argument("--lora-lr", type=float, help="LoRA's learning rate (default: each of --lrs)")
    parser.add_argument("--no-full", action="store_true", help="skip full fine-tuning")
    parser.add_argument("--unmasked-only", action="store_true", help="every run without the prompt mask only")
    parser.add_argument("--unmasked", action="store_true", help="also every run without the prompt mask")
    args = parser.parse_args()

    if args.checkpoint:
        base, ckpt = load_model(args.checkpoint)
        tok0 = load_tokenizer(ckpt, args.checkpoint)
    else:
        base, tok0 = load_pretrained()
    tok = extend_tokenizer(tok0, TASK_CHARS)
    n_new = tok.vocab_size - tok0.vocab_size
    _, val_text_ids = train_val_split(torch.arange(len(load_text("tinyshakespeare"))))
    val_text = load_text("tinyshakespeare")[int(val_text_ids[0]):]
    pairs = dates_test_pairs(args.eval)
    print(f"base: Shakespeare val loss {text_loss(base, tok0, val_text):.4f}")
    ext = extend_vocabulary(base, n_new)
    print(f"extended (+{n_new} tokens): val loss {text_loss(ext, tok, val_text):.4f}, exact match "
          f"{exact_match(ext, tok, pairs):.1%}")
    runs = ([] if args.no_full else [("full", None, True)]) + [(f"lora r={r}", r, True) for r in args.ranks]
    if args.unmasked:  # the same runs, the loss on every token (prompt included)
        runs += [(name + ", unmasked", rank, False) for name, rank, _ in runs]
    if args.unmasked_only:
        runs = [(name + ", unmasked", rank, False) for name, rank, _ in runs]
    for lr in args.lrs:
        for name, rank, masked in runs:
            seed_everything(1337)
            if rank is None:
                model = extend_vocabulary(base, n_new)
            else:
                model = lora_model(base, n_new, rank, tuple(args.targets.split(",")))
            run_lr = args.lora_lr if rank is not None and args.lora_lr else lr
            config = finetune_config(rank is not None, max_iters=args.steps, learning_rate=run_lr)
            trained = sum(p.numel() for p in model.parameters() if p.requires_grad)
            trainer = Trainer(model, config=config, batch_fn=answer_batch_fn(tok, config.batch_size, masked),
                              progress=False, verbose=False)
            start = time.perf_counter()
            trainer.train()
            seconds = time.perf_counter() - start
            print(f"{name:>15} lr {run_lr:g}: exact match {exact_match(model, tok, pairs):6.1%}, Shakespeare val loss "
                  f"{text_loss(model, tok, val_text):.4f}, task val loss {trainer.history['val_loss'][-1]:.4f}, "
                  f"{trained:,} trained, {seconds:.1f} s", flush=True)


if __name__ == "__main__":
    main()
