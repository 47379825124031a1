"""Chapter 15's task: supervised fine-tuning of a pretrained GPT on chapter 11's dates, recast
for a decoder-only model, with a prompt-masked loss and exact match. The run itself (full or
LoRA, new or resumed) is built in :mod:`course_lib.runs`; the ``gpt-lora`` model kind and the
grown vocabulary live in :mod:`course_lib.lora_gpt`.

A decoder-only model sees a task as one text to continue::

    prompt + SEP + answer + END        "3rd March 2021" "=" "2021-03-03" "\\n"

and generates the answer after the separator, stopping at the end token. The loss is computed
on the answer (and END) alone: the prompt's targets are set to ``IGNORE_INDEX``, so the model
is not trained to *write* dates in thirteen formats, only to answer.

**New characters.** The pretrained model knows the 65 characters of tiny Shakespeare, which
has no digits but 3 and no slash, and no "=". :func:`extend_tokenizer` appends them to the
tokenizer (old ids unchanged, so Shakespeare encodes as before), and
:func:`course_lib.lora_gpt.extend_vocabulary` adds rows for them to the model.

Shapes: B batch, T time, C channels, V vocabulary size (V0 before the new characters).
"""
from __future__ import annotations

import datetime

import torch

from .data import get_batch
from .dates import (DATE_ALPHABET, DATE_FORMATS, date_split_days, date_test_set, format_date,
                    sample_dates)
from .generate import generate_batch
from .tokenizers import CharTokenizer
from .train import TrainConfig
from .translate import share_answered_exactly
from .utils import IGNORE_INDEX

SEP, END = "=", "\n"  # the separator between prompt and answer, and the end of an answer
TASK_CHARS = DATE_ALPHABET + SEP + END  # every character a dates example can contain


# --- new characters for a pretrained model --------------------------------------------------------


def extend_tokenizer(tokenizer, chars: str) -> CharTokenizer:
    """``tokenizer`` plus the characters of ``chars`` it lacks, appended in sorted order (the old
    ids keep their meaning)."""
    if not isinstance(tokenizer, CharTokenizer):
        raise ValueError(f"the dates task needs a character-level model, and this one uses a "
                         f"{type(tokenizer).__name__}: fine-tune a checkpoint trained with the "
                         "char tokenizer")
    new = sorted(set(chars) - set(tokenizer.chars))
    return CharTokenizer(tokenizer.chars + new)


# --- the task as text: batches with a masked prompt, and exact match ------------------------------


def encode_examples(tokenizer, pairs: list[tuple[str, str]], mask_prompt: bool = True,
                    device="cpu"):
    """``(source, target)`` pairs -> inputs x (B, T) and targets y (B, T) for next-token training.

    Each row is ``source SEP target END`` shifted by one; rows are padded on the right (x with
    END, y with IGNORE_INDEX; a causal model never looks right, so the pads change nothing).
    With ``mask_prompt`` the targets inside the prompt (``source[1:] + SEP``) are IGNORE_INDEX
    too: the first target kept is the answer's first character, predicted at the SEP position.
    """
    rows = [(tokenizer.encode(s + SEP), tokenizer.encode(t + END)) for s, t in pairs]
    T = max(len(p) + len(a) for p, a in rows) - 1
    end = tokenizer.encode(END)[0]
    x = torch.full((len(rows), T), end, dtype=torch.long)
    y = torch.full((len(rows), T), IGNORE_INDEX, dtype=torch.long)
    for i, (prompt, answer) in enumerate(rows):
        ids = torch.tensor(prompt + answer)
        n = len(ids) - 1
        x[i, :n], y[i, :n] = ids[:-1], ids[1:]
        if mask_prompt:
            y[i, :len(prompt) - 1] = IGNORE_INDEX
    return x.to(device), y.to(device)


def answer_batch_fn(tokenizer, batch_size: int, mask_prompt: bool = True, seed: int = 0,
                    device="cpu"):
    """A ``Trainer`` batch_fn of prompts and answers (:func:`encode_examples`): fresh random dates
    each call, "train" from the training days and "val" from the held-out days of chapter 11's
    split (:func:`course_lib.dates.date_split_days`)."""
    days = date_split_days(seed)

    def batch_fn(split: str, generator: torch.Generator):
        return encode_examples(tokenizer, sample_dates(days[split], batch_size, generator),
                               mask_prompt, device)

    return batch_fn


def answer_prompts(model, tokenizer, sources: list[str], max_new_tokens: int = 12) -> list[str]:
    """Greedy answers of ``model`` to ``sources`` (the text it writes after SEP, up to END)."""
    end = tokenizer.encode(END)[0]
    prompts = [tokenizer.encode(s + SEP) for s in sources]
    out = generate_batch(model, prompts, max_new_tokens, temperature=0.0, end_id=end,
                         use_cache=True)
    return [tokenizer.decode(row[len(p):]).split(END)[0] for row, p in zip(out, prompts)]


def answers_exact_match(model, tokenizer, pairs: list[tuple[str, str]],
                        batch_size: int = 250) -> float:
    """Share of held-out ``(source, target)`` pairs answered exactly right with greedy decoding
    (chapter 11's metric, :func:`course_lib.translate.share_answered_exactly`, so the two models
    compare on the same pairs: ``date_test_set``)."""
    return share_answered_exactly(lambda sources: answer_prompts(model, tokenizer, sources), pairs,
                                  batch_size)


@torch.no_grad()
def text_loss(model, tokenizer, text: str, batches: int = 20, batch_size: int = 32,
              seed: int = 0) -> float:
    """Mean next-token loss of ``model`` on random windows of ``text`` (e.g. Shakespeare's
    validation split: how much a fine-tune forgot). The same windows for every model."""
    data = torch.tensor(tokenizer.encode(text), dtype=torch.long)
    device = next(model.parameters()).device
    generator = torch.Generator().manual_seed(seed)
    was_training = model.training
    model.eval()
    losses = [model(*get_batch(data, model.config.block_size, batch_size, generator,
                               device))[1].item()
              for _ in range(batches)]
    model.train(was_training)
    return sum(losses) / len(losses)


def dates_test_pairs(n: int = 500) -> list[tuple[str, str]]:
    """Held-out pairs shared with chapter 11 (:func:`course_lib.dates.date_test_set`)."""
    return date_test_set(n)


# --- the run's settings: course_lib.runs builds fine-tuning runs with them ------------------------

FINETUNE_TASKS = ("dates",)
# Chapter 15's recipe; benchmarks/finetune_dates.py runs it with seeds and stores what it measures
# in course_lib/records/finetune_runs.json. LoRA takes a larger learning rate because an Adam step
# on B moves the weight only by about lr * (alpha / r) * |A|, with A small (Kaiming-uniform) at the
# start.
FINETUNE_TRAIN = dict(max_iters=600, batch_size=32, learning_rate=1e-3, min_lr=1e-4,
                      warmup_iters=20, weight_decay=0.0, grad_clip=1.0, eval_interval=100,
                      eval_iters=4)
LORA_LEARNING_RATE = 1e-2


def finetune_config(lora: bool = False, **overrides):
    """The training settings of a fine-tuning run (LoRA: a larger learning rate), with
    ``overrides``."""
    defaults = {**FINETUNE_TRAIN, **({"learning_rate": LORA_LEARNING_RATE} if lora else {})}
    return TrainConfig(**{**defaults, **overrides})


def task_tokenizer(tokenizer, block_size: int, base: str = "the base checkpoint") -> CharTokenizer:
    """The base model's ``tokenizer`` with the task's characters (:func:`extend_tokenizer`), once it
    is known that the task's longest example fits the base model's ``block_size``."""
    tokenizer = extend_tokenizer(tokenizer, TASK_CHARS)
    need = longest_example(tokenizer)
    if block_size < need:
        raise ValueError(f"{base} has block_size {block_size}, shorter than the task's longest "
                         f"example ({need} tokens): pretrain with --set block_size={need} or more")
    return tokenizer


def longest_example(tokenizer) -> int:
    """Tokens in the longest dates example (the 13 formats' longest sources, SEP, answer, END)."""
    day = datetime.date(2027, 9, 23)  # the longest month name and a two-digit ordinal
    return max(len(tokenizer.encode(format_date(day, s, c) + SEP + day.isoformat() + END))
               for s in range(len(DATE_FORMATS)) for c in range(3))
